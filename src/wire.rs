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
//! above the `confirmed_batch` it is told. Proofs and seals are defined in
//! [`crate::auth`].

use crate::auth::{Direction, MacError};
use crate::ledger::{AckBatch, DeviceError, Manifest, RunSummary, TornTail};
use crate::RunId;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Version of this protocol, carried in `Hello` and `Challenge`.
pub const PROTOCOL_VERSION: u32 = 2;
/// Largest frame body, in bytes (4 MiB).
pub const MAX_FRAME: u32 = 4 << 20;
/// Largest frame body before the handshake is done, in bytes: the biggest handshake
/// message (`Challenge`, 70 bytes) with room to spare. Larger prefixes from an
/// unauthenticated peer are refused before any allocation.
pub const HANDSHAKE_MAX_FRAME: u32 = 128;
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
        /// Bytes of the ledger file, in order.
        bytes: Vec<u8>,
        /// True on the last chunk.
        last: bool,
        /// Torn tails the listener cut off this run's ledger when it restarted
        /// (complete on the last chunk; empty on the others).
        torn: Vec<TornTail>,
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
    /// A frame after the handshake failed its authentication tag.
    Mac,
    /// A verifier asked for the ledger of a run still being written (its agent is
    /// connected and appending).
    Live,
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
    /// A sealed frame failed authentication.
    Mac(MacError),
    /// The length prefix exceeds a limit below [`MAX_FRAME`] (before the handshake,
    /// [`HANDSHAKE_MAX_FRAME`]).
    OverLimit {
        /// The length the prefix claims.
        len: u32,
        /// The limit in force.
        max: u32,
    },
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLarge(n) => {
                write!(f, "frame of {n} bytes exceeds the {MAX_FRAME}-byte limit")
            }
            FrameError::Malformed(e) => write!(f, "malformed frame: {e}"),
            FrameError::Io(e) => write!(f, "connection error: {e}"),
            FrameError::Mac(e) => e.fmt(f),
            FrameError::OverLimit { len, max } => write!(
                f,
                "frame of {len} bytes exceeds the {max}-byte limit before the handshake is done"
            ),
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

/// Encodes `msg` as a complete sealed frame: the body is the message and its tag
/// under `seal` (which counts the frame).
pub fn encode_sealed<T: Serialize>(msg: &T, seal: &mut Direction) -> Vec<u8> {
    let mut out = encode(msg);
    seal.seal(&mut out, PREFIX_LEN);
    let len = (out.len() - PREFIX_LEN) as u32;
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
    read_frame_with(r, buf, MAX_FRAME, None).await
}

/// Reads one frame of at most `max` body bytes from `r` into `buf` (which grows as
/// bytes arrive), checks and strips its tag when `open` is given, and decodes it.
/// `Ok(None)` on a clean end of stream before a frame starts.
///
/// Errors: [`FrameError::TooLarge`] before reading the body, [`FrameError::Mac`],
/// [`FrameError::Malformed`], [`FrameError::Io`] (including an end of stream inside a
/// frame).
pub async fn read_frame_with<T: DeserializeOwned, R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: u32,
    open: Option<&mut Direction>,
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
    if len > max.min(MAX_FRAME) {
        return Err(if max < MAX_FRAME {
            FrameError::OverLimit { len, max }
        } else {
            FrameError::TooLarge(len)
        });
    }
    buf.clear();
    let got = (&mut *r)
        .take(len as u64)
        .read_to_end(buf)
        .await
        .map_err(FrameError::Io)?;
    if got < len as usize {
        return Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()));
    }
    match open {
        Some(d) => decode(d.open(buf).map_err(FrameError::Mac)?).map(Some),
        None => decode(buf).map(Some),
    }
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

    #[tokio::test]
    async fn sealed_frames_open_only_in_order_and_small_limits_hold() {
        let s = crate::auth::Secret::new(b"k");
        let mut agent = s.agent_session(&[1; 32], &[2; 32]);
        let mut listener = s.listener_session(&[1; 32], &[2; 32]);
        let a = Request::Auth { proof: [3; 32] };
        let f1 = encode_sealed(&a, &mut agent.send);
        let f2 = encode_sealed(&a, &mut agent.send);
        let mut buf = Vec::new();
        let mut r = &f2[..];
        assert!(matches!(
            read_frame_with::<Request, _>(
                &mut r,
                &mut buf,
                MAX_FRAME,
                Some(&mut listener.recv.clone())
            )
            .await,
            Err(FrameError::Mac(MacError { frame: 0 }))
        ));
        let both = [f1.clone(), f2].concat();
        let mut r = &both[..];
        for _ in 0..2 {
            assert_eq!(
                read_frame_with::<Request, _>(
                    &mut r,
                    &mut buf,
                    MAX_FRAME,
                    Some(&mut listener.recv)
                )
                .await
                .unwrap(),
                Some(a.clone())
            );
        }
        // A bare 4 MiB prefix before the handshake is refused without reading on.
        let big = (MAX_FRAME).to_le_bytes();
        let mut r = &big[..];
        assert!(matches!(
            read_frame_with::<Request, _>(&mut r, &mut buf, HANDSHAKE_MAX_FRAME, None).await,
            Err(FrameError::OverLimit { len, max: HANDSHAKE_MAX_FRAME }) if len == MAX_FRAME
        ));
        // The largest handshake message fits the handshake limit.
        let c = encode(&Response::Challenge {
            version: u32::MAX,
            nonce: [255; 32],
            proof: [255; 32],
        });
        assert!(
            c.len() - PREFIX_LEN <= HANDSHAKE_MAX_FRAME as usize,
            "{}",
            c.len()
        );
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
