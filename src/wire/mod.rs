//! Wire protocol between the agent/verifier (`plugpull`) and the listener.
//!
//! ## Framing
//!
//! Every message is one frame: a 4-byte little-endian body length, then the body,
//! a postcard-encoded [`Request`] (client → listener) or [`Response`] (listener →
//! client). A length above [`MAX_FRAME`] is refused before any allocation.
//! The framing lives in [`frame`] (re-exported here): [`check`] scans a buffer and
//! answers "incomplete" or the frame's length; [`read_frame`] and [`write_frame`] do
//! the same over any tokio stream, with the same length-prefix rule. This file holds
//! the messages.
//!
//! ## Conversation
//!
//! ```text
//! client                                   listener
//! Hello{version, nonce_c}           ──▶
//!                                   ◀──    Challenge{version, nonce_l, listener_proof}
//! Auth{agent_proof}                 ──▶
//!                                   ◀──    Welcome          (or Error, then close)
//!            ── every frame from here on is sealed (HMAC tag, counter) ──
//! StartRun{manifest}                ──▶
//!                                   ◀──    RunStarted{run, token}
//! Acks{run, batch n, …}  (pipelined) ─▶
//!                                   ◀──    Confirmed{run, batch n}  after the ledger's fdatasync
//! Finish{run, summary}              ──▶
//!                                   ◀──    Confirmed{run, batch 0}
//! ```
//!
//! A verifier sends `FetchLedger` instead and receives `LedgerChunk`s whose bytes,
//! concatenated, are the run's ledger file (see [`crate::ledger`]). An agent that
//! lost its connection sends `ResumeRun` with the run's token and resends every batch
//! above the `confirmed_batch` it is told. The campaign controller and the agent
//! service send `Campaign` requests ([`campaign`]), each answered by one `Campaign`
//! response. Proofs and seals are defined in [`crate::auth`].

pub mod campaign;
pub mod frame;

pub use campaign::{CampaignRequest, CampaignResponse};

pub use frame::{
    check, decode, decode_sealed, encode, encode_sealed, read_frame, read_frame_with, write_frame,
    FrameError, HANDSHAKE_MAX_FRAME, MAX_FRAME, PREFIX_LEN,
};

use crate::ledger::{AckBatch, DeviceError, Manifest, RunSummary, TornTail};
use crate::RunId;
use serde::{Deserialize, Serialize};

/// Version of this protocol, carried in `Hello` and `Challenge`.
pub const PROTOCOL_VERSION: u32 = 10;

/// A message from the agent or verifier to the listener.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// First message: protocol version and the client's 32-byte nonce.
    Hello {
        /// [`PROTOCOL_VERSION`] of the client.
        version: u32,
        /// Fresh random nonce.
        nonce: [u8; 32],
    },
    /// Second message: the client's proof of the secret.
    Auth {
        /// `agent_proof(listener_nonce, client_nonce)`.
        proof: [u8; 32],
    },
    /// Begin a new run; answered by `RunStarted`.
    StartRun {
        /// What the run is.
        manifest: Box<Manifest>,
    },
    /// Continue a run after a reconnect; answered by `Resumed`.
    ResumeRun {
        /// The run.
        run: RunId,
        /// The token `RunStarted` gave: proves this agent started the run.
        token: [u8; 32],
    },
    /// A batch of acknowledgements; answered by `Confirmed` once durable.
    Acks {
        /// The run the batch belongs to (must be the connection's run).
        run: RunId,
        /// The batch.
        batch: AckBatch,
    },
    /// The run ended normally; answered by `Confirmed{batch: 0}`.
    Finish {
        /// The run.
        run: RunId,
        /// The agent's counts.
        summary: RunSummary,
    },
    /// A write or durability call failed: the run ended by a device error (every ack
    /// sent before this one stands, none follows); answered by `Confirmed{batch: 0}`.
    DeviceError {
        /// The run.
        run: RunId,
        /// The error, when, and what was acknowledged before it.
        end: DeviceError,
    },
    /// Send a run's ledger: the run given, or else the latest run of `host`.
    FetchLedger {
        /// The run, if known.
        run: Option<RunId>,
        /// Host name to pick the latest run of when `run` is `None`.
        host: String,
    },
    /// A campaign request (`plugpull campaign`, `plugpull agent`); answered by
    /// `Campaign`.
    Campaign(Box<CampaignRequest>),
    /// The agent saw a witness fault: the run cannot be judged; answered by
    /// `Confirmed{batch: 0}` and recorded as [`crate::ledger::Entry::Invalid`].
    Invalidate {
        /// The run.
        run: RunId,
        /// The fault, starting with `witness fault`.
        error: String,
    },
}

/// A message from the listener.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// Answer to `Hello`.
    Challenge {
        /// The listener's [`PROTOCOL_VERSION`].
        version: u32,
        /// Fresh random nonce.
        nonce: [u8; 32],
        /// `listener_proof(client_nonce, listener_nonce)`.
        proof: [u8; 32],
    },
    /// Authentication succeeded.
    Welcome,
    /// A new run was created with this id.
    RunStarted {
        /// The new run.
        run: RunId,
        /// Proof of ownership the agent must show in `ResumeRun`.
        token: [u8; 32],
    },
    /// A run was resumed; batches up to `confirmed_batch` are already durable.
    Resumed {
        /// The run.
        run: RunId,
        /// Highest batch number in the ledger.
        confirmed_batch: u64,
    },
    /// Every batch up to and including `batch` is durable in the ledger.
    Confirmed {
        /// The run.
        run: RunId,
        /// The batch (0 for `Finish`/`DeviceError`).
        batch: u64,
    },
    /// Part of a run's ledger file; `last` marks the final chunk.
    LedgerChunk {
        /// The run.
        run: RunId,
        /// Bytes of the ledger file, in order. Encoded as one byte string
        /// (`serde_bytes`): the same bytes on the wire as a sequence of `u8`
        /// (postcard writes both as a varint length and the bytes), coded in one copy
        /// rather than one serde call per byte on each side.
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
        /// True on the last chunk.
        last: bool,
        /// Torn tails the listener cut off this run's ledger when it restarted
        /// (complete on the last chunk; empty on the others).
        torn: Vec<TornTail>,
        /// Why the listener stopped recording this run (an append failed: its disk
        /// is full), while it still knows (until it restarts); on the last chunk.
        witness_stopped: Option<String>,
    },
    /// Answer to a campaign request.
    Campaign(Box<CampaignResponse>),
    /// The request was refused; the listener closes the connection after this.
    Error {
        /// What kind of refusal.
        kind: ErrorKind,
        /// A message for a human, naming the cause.
        message: String,
    },
}

/// Why the listener refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorKind {
    /// Protocol versions differ.
    Version,
    /// Wrong or missing secret.
    Auth,
    /// A message that does not fit the conversation (e.g. for another run).
    Protocol,
    /// No such run.
    UnknownRun,
    /// The run's ledger is damaged.
    LedgerDamaged,
    /// The listener could not write its ledger.
    Io,
    /// Too many connections.
    Busy,
    /// A frame after the handshake failed its authentication tag.
    Mac,
    /// A verifier asked for the ledger of a run still being written (its agent is
    /// connected and appending).
    Live,
    /// No such campaign, or one of that name exists already.
    Campaign,
}

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::ledger::{Acks, FileAck, PgAckRange};
    use proptest::prelude::*;

    fn acks() -> impl Strategy<Value = Acks> {
        prop_oneof![
            prop::collection::vec((any::<u64>(), any::<u64>(), any::<u32>()), 0..50).prop_map(
                |v| Acks::File(
                    v.into_iter()
                        .map(|(seq, block, ms)| FileAck { seq, block, ms })
                        .collect()
                )
            ),
            prop::collection::vec(
                (any::<u32>(), any::<u64>(), any::<u64>(), any::<u32>()),
                0..50
            )
            .prop_map(|v| Acks::Pg(
                v.into_iter()
                    .map(|(client, first, last, ms)| PgAckRange {
                        client,
                        first,
                        last,
                        ms
                    })
                    .collect()
            )),
        ]
    }

    fn request() -> impl Strategy<Value = Request> {
        prop_oneof![
            (any::<u32>(), any::<[u8; 32]>())
                .prop_map(|(version, nonce)| Request::Hello { version, nonce }),
            any::<[u8; 32]>().prop_map(|proof| Request::Auth { proof }),
            (any::<u64>(), any::<u64>(), any::<bool>(), acks()).prop_map(
                |(run, batch, promised, acks)| Request::Acks {
                    run: RunId(run),
                    batch: AckBatch {
                        batch,
                        promised,
                        acks,
                        flushes: None,
                        canary: Default::default(),
                        sealed_ms: 0,
                        oldest_in_flight_ms: None,
                    }
                }
            ),
            (any::<u64>(), ".{0,40}", any::<[u64; 4]>(), any::<bool>()).prop_map(
                |(run, error, n, device)| Request::DeviceError {
                    run: RunId(run),
                    end: DeviceError {
                        error,
                        ms: n[0],
                        issued: n[1],
                        acknowledged: n[2],
                        last_seq: n[3],
                        device,
                        flushes: None,
                    },
                }
            ),
            (any::<Option<u64>>(), ".{0,20}").prop_map(|(run, host)| Request::FetchLedger {
                run: run.map(RunId),
                host
            }),
            (any::<u64>(), ".{0,40}").prop_map(|(run, error)| Request::Invalidate {
                run: RunId(run),
                error
            }),
        ]
    }

    proptest! {
        /// Arbitrary bytes never panic the frame scanner or the decoders.
        #[test]
        fn arbitrary_bytes_are_refused_or_decoded_never_a_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
            if let Ok(Some(n)) = check(&bytes) {
                let _ = decode::<Request>(&bytes[PREFIX_LEN..n]);
                let _ = decode::<Response>(&bytes[PREFIX_LEN..n]);
            }
            let _ = decode::<Request>(&bytes);
        }

        /// Every request survives encoding, scanning and decoding unchanged.
        #[test]
        fn requests_round_trip(req in request()) {
            let f = encode(&req);
            prop_assert_eq!(check(&f).unwrap(), Some(f.len()));
            prop_assert_eq!(decode::<Request>(&f[PREFIX_LEN..]).unwrap(), req);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields of `Response::LedgerChunk` as they were before `serde_bytes`: the
    /// bytes a plain sequence of `u8`. A struct, so its encoding is the variant's
    /// without the variant index.
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Before {
        run: RunId,
        bytes: Vec<u8>,
        last: bool,
        torn: Vec<TornTail>,
        witness_stopped: Option<String>,
    }

    fn chunk(bytes: &[u8]) -> Response {
        Response::LedgerChunk {
            run: RunId(0xfeed),
            bytes: bytes.to_vec(),
            last: true,
            torn: Vec::new(),
            witness_stopped: None,
        }
    }

    fn before(bytes: &[u8]) -> Before {
        Before {
            run: RunId(0xfeed),
            bytes: bytes.to_vec(),
            last: true,
            torn: Vec::new(),
            witness_stopped: None,
        }
    }

    #[test]
    fn a_ledger_chunk_is_the_same_bytes_on_the_wire_as_before_serde_bytes() {
        let bytes: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
        let now = postcard::to_allocvec(&chunk(&bytes)).unwrap();
        // `LedgerChunk` is `Response`'s sixth variant; then run (3 varint bytes), the
        // length 300 (0xAC 0x02), the 300 bytes, last, the empty torn list, no
        // witness stop.
        assert_eq!(now[0], 5);
        assert_eq!(
            now[1..],
            postcard::to_allocvec(&before(&bytes)).unwrap()[..]
        );
        assert_eq!(&now[4..6], &[0xAC, 0x02]);
        assert_eq!(&now[6..306], &bytes[..]);
        assert_eq!(&now[306..], &[1, 0, 0]);
        // An empty chunk (an empty ledger's) and a full 1 MiB one (a 3-byte length):
        // the same bytes both ways, and each side decodes the other's.
        for len in [0usize, 300, 1 << 20] {
            let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let now = postcard::to_allocvec(&chunk(&bytes)).unwrap();
            let old = postcard::to_allocvec(&before(&bytes)).unwrap();
            assert_eq!(now[1..], old[..], "chunk of {len} bytes");
            assert_eq!(
                postcard::from_bytes::<Before>(&now[1..]).unwrap(),
                before(&bytes)
            );
            let mut framed = vec![5u8];
            framed.extend_from_slice(&old);
            assert_eq!(
                postcard::from_bytes::<Response>(&framed).unwrap(),
                chunk(&bytes)
            );
        }
    }
}
