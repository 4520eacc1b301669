//! Wire protocol between the agent/verifier (`plugpull`) and the listener.
//!
//! ## Framing
//!
//! Every message is one frame: a 4-byte little-endian body length, then the body,
//! a postcard-encoded [`Request`] (client → listener) or [`Response`] (listener →
//! client). A length above [`MAX_FRAME`] is refused before any allocation.
//! [`check`] scans a buffer and answers "incomplete" or the frame's length;
//! [`read_frame`] and [`write_frame`] do the same over any tokio stream.
//!
//! ## Conversation
//!
//! ```text
//! client                                   listener
//! Hello{version, nonce_c}           ──▶
//!                                   ◀──    Challenge{version, nonce_l, listener_proof}
//! Auth{agent_proof}                 ──▶
//!                                   ◀──    Welcome          (or Error, then close)
//! StartRun{manifest}                ──▶
//!                                   ◀──    RunStarted{run}
//! Acks{run, batch n, …}  (pipelined) ─▶
//!                                   ◀──    Confirmed{run, batch n}  after the ledger's fdatasync
//! Finish{run, summary}              ──▶
//!                                   ◀──    Confirmed{run, batch 0}
//! ```
//!
//! A verifier sends `FetchLedger` instead and receives `LedgerChunk`s whose bytes,
//! concatenated, are the run's ledger file (see [`crate::ledger`]). An agent that
//! lost its connection sends `ResumeRun` and resends every batch above the
//! `confirmed_batch` it is told. Proofs are defined in [`crate::auth`].

use crate::ledger::{AckBatch, DeviceError, Manifest, RunSummary};
use crate::RunId;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Version of this protocol, carried in `Hello` and `Challenge`.
pub const PROTOCOL_VERSION: u32 = 1;
/// Largest frame body, in bytes (4 MiB).
pub const MAX_FRAME: u32 = 4 << 20;
/// Bytes of the length prefix.
pub const PREFIX_LEN: usize = 4;

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
        /// Bytes of the ledger file, in order.
        bytes: Vec<u8>,
        /// True on the last chunk.
        last: bool,
    },
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
}

/// What went wrong reading or decoding a frame.
#[derive(Debug)]
pub enum FrameError {
    /// The length prefix exceeds [`MAX_FRAME`].
    TooLarge(u32),
    /// The body is not a valid message.
    Malformed(String),
    /// The stream failed or ended inside a frame.
    Io(std::io::Error),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLarge(n) => {
                write!(f, "frame of {n} bytes exceeds the {MAX_FRAME}-byte limit")
            }
            FrameError::Malformed(e) => write!(f, "malformed frame: {e}"),
            FrameError::Io(e) => write!(f, "connection error: {e}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// Scans `buf` for one frame: `Ok(None)` if more bytes are needed, `Ok(Some(n))` if the
/// first `n` bytes are a complete frame (prefix included).
///
/// Errors: [`FrameError::TooLarge`] as soon as the prefix is seen.
pub fn check(buf: &[u8]) -> Result<Option<usize>, FrameError> {
    if buf.len() < PREFIX_LEN {
        return Ok(None);
    }
    let len = u32::from_le_bytes(buf[..4].try_into().unwrap());
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    let total = PREFIX_LEN + len as usize;
    Ok((buf.len() >= total).then_some(total))
}

/// Encodes `msg` as a complete frame (prefix and body).
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    let mut out =
        postcard::to_extend(msg, vec![0u8; PREFIX_LEN]).expect("messages always serialize");
    let len = (out.len() - PREFIX_LEN) as u32;
    debug_assert!(len <= MAX_FRAME, "frame of {len} bytes is over the limit");
    out[..4].copy_from_slice(&len.to_le_bytes());
    out
}

/// Decodes a frame body (without its prefix).
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, FrameError> {
    postcard::from_bytes(body).map_err(|e| FrameError::Malformed(e.to_string()))
}

/// Reads one frame from `r` into `buf` and decodes it. `Ok(None)` on a clean end of
/// stream before a frame starts.
///
/// Errors: [`FrameError::TooLarge`] before reading the body, [`FrameError::Malformed`],
/// [`FrameError::Io`] (including an end of stream inside a frame).
pub async fn read_frame<T: DeserializeOwned, R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> Result<Option<T>, FrameError> {
    let mut prefix = [0u8; PREFIX_LEN];
    let mut got = 0;
    while got < PREFIX_LEN {
        let n = r.read(&mut prefix[got..]).await.map_err(FrameError::Io)?;
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()))
            };
        }
        got += n;
    }
    let len = u32::from_le_bytes(prefix);
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    buf.clear();
    buf.resize(len as usize, 0);
    r.read_exact(buf).await.map_err(FrameError::Io)?;
    decode(buf).map(Some)
}

/// Writes `msg` as one frame to `w` (not flushed).
pub async fn write_frame<T: Serialize, W: AsyncWrite + Unpin>(
    w: &mut W,
    msg: &T,
) -> std::io::Result<()> {
    w.write_all(&encode(msg)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{Acks, FileAck};

    #[test]
    fn check_answers_incomplete_then_complete() {
        let f = encode(&Request::Auth { proof: [7; 32] });
        for n in 0..f.len() {
            assert!(check(&f[..n]).unwrap().is_none());
        }
        assert_eq!(check(&f).unwrap(), Some(f.len()));
        let body: Request = decode(&f[PREFIX_LEN..]).unwrap();
        assert_eq!(body, Request::Auth { proof: [7; 32] });
    }

    #[test]
    fn oversized_prefix_is_refused_before_the_body() {
        let mut f = (MAX_FRAME + 1).to_le_bytes().to_vec();
        f.push(0);
        assert!(matches!(check(&f), Err(FrameError::TooLarge(n)) if n == MAX_FRAME + 1));
    }

    #[test]
    fn garbage_body_is_malformed() {
        assert!(matches!(
            decode::<Request>(&[0xff, 0xff, 0xff]),
            Err(FrameError::Malformed(_))
        ));
    }

    #[tokio::test]
    async fn frames_round_trip_over_a_stream() {
        let msg = Request::Acks {
            run: RunId(5),
            batch: AckBatch {
                batch: 3,
                promised: true,
                acks: Acks::File(vec![FileAck {
                    seq: 1,
                    block: 2,
                    ms: 3,
                }]),
            },
        };
        let mut bytes = encode(&msg);
        bytes.extend(encode(&Request::Auth { proof: [1; 32] }));
        let mut r = &bytes[..];
        let mut buf = Vec::new();
        assert_eq!(
            read_frame::<Request, _>(&mut r, &mut buf).await.unwrap(),
            Some(msg)
        );
        assert!(read_frame::<Request, _>(&mut r, &mut buf)
            .await
            .unwrap()
            .is_some());
        assert!(read_frame::<Request, _>(&mut r, &mut buf)
            .await
            .unwrap()
            .is_none());
    }
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
                        acks
                    }
                }
            ),
            (any::<u64>(), ".{0,40}", any::<[u64; 4]>()).prop_map(|(run, error, n)| {
                Request::DeviceError {
                    run: RunId(run),
                    end: DeviceError {
                        error,
                        ms: n[0],
                        issued: n[1],
                        acknowledged: n[2],
                        last_seq: n[3],
                    },
                }
            }),
            (any::<Option<u64>>(), ".{0,20}").prop_map(|(run, host)| Request::FetchLedger {
                run: run.map(RunId),
                host
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
