//! Frames: how one message travels. A frame is a 4-byte little-endian body length,
//! then the body (a postcard-encoded message, and after the handshake its HMAC tag and
//! counter, see [`crate::auth`]).
//!
//! One rule reads a length prefix, [`body_len`]: a body above [`MAX_FRAME`] (or a
//! lower limit in force, [`HANDSHAKE_MAX_FRAME`] before the handshake) is refused as
//! soon as the prefix is seen, before any allocation. Both readers use it:
//!
//! * [`check`] scans a buffer already in memory and answers *incomplete*
//!   (`Ok(None)`: more bytes are needed) or the frame's total length;
//! * [`read_frame`] / [`read_frame_with`] read one frame from any tokio stream, the
//!   path the listener and the clients run (and the fuzz target `frame` drives).
//!
//! Nothing here knows about sockets: the caller owns the stream, its buffering and its
//! timeouts.

use crate::auth::{Direction, MacError};
use serde::{de::DeserializeOwned, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest frame body, in bytes (4 MiB).
pub const MAX_FRAME: u32 = 4 << 20;
/// Largest frame body before the handshake is done, in bytes: the biggest handshake
/// message (`Challenge`, 70 bytes) with room to spare. Larger prefixes from an
/// unauthenticated peer are refused before any allocation.
pub const HANDSHAKE_MAX_FRAME: u32 = 128;
/// Bytes of the length prefix.
pub const PREFIX_LEN: usize = 4;

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
    let Some(prefix) = buf.first_chunk::<PREFIX_LEN>() else {
        return Ok(None);
    };
    let total = PREFIX_LEN + body_len(*prefix, MAX_FRAME)?;
    Ok((buf.len() >= total).then_some(total))
}

/// The body length, in bytes, that a frame's length `prefix` announces, checked
/// against `max` (capped at [`MAX_FRAME`]). The one place a prefix is read.
///
/// Errors: [`FrameError::TooLarge`] above [`MAX_FRAME`] when `max` is [`MAX_FRAME`]
/// or more; [`FrameError::OverLimit`] above a lower `max`.
pub fn body_len(prefix: [u8; PREFIX_LEN], max: u32) -> Result<usize, FrameError> {
    let len = u32::from_le_bytes(prefix);
    if len > max.min(MAX_FRAME) {
        return Err(if max < MAX_FRAME {
            FrameError::OverLimit { len, max }
        } else {
            FrameError::TooLarge(len)
        });
    }
    Ok(len as usize)
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

/// Checks and strips the tag of a sealed frame body (without its prefix) under
/// `open` (which counts the frame), and decodes the message: the reverse of
/// [`encode_sealed`].
///
/// Errors: [`FrameError::Mac`] for a body that fails its tag, [`FrameError::Malformed`].
pub fn decode_sealed<T: DeserializeOwned>(
    body: &[u8],
    open: &mut Direction,
) -> Result<T, FrameError> {
    decode(open.open(body).map_err(FrameError::Mac)?)
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
/// Errors: [`FrameError::TooLarge`] or [`FrameError::OverLimit`] (see [`body_len`])
/// before reading the body, [`FrameError::Mac`], [`FrameError::Malformed`], [`FrameError::Io`] (including an end of stream inside a
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
    let len = body_len(prefix, max)?;
    buf.clear();
    let got = (&mut *r)
        .take(len as u64)
        .read_to_end(buf)
        .await
        .map_err(FrameError::Io)?;
    if got < len {
        return Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()));
    }
    match open {
        Some(d) => decode_sealed(buf, d).map(Some),
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
    use crate::auth::MacError;
    use crate::ledger::{AckBatch, Acks, FileAck};
    use crate::wire::{Request, Response};
    use crate::RunId;

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
                flushes: None,
                canary: Default::default(),
                sealed_ms: 0,
                oldest_in_flight_ms: None,
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

    fn acks_request() -> Request {
        Request::Acks {
            run: RunId(0x0123_4567_89ab_cdef),
            batch: AckBatch {
                batch: 300,
                promised: true,
                acks: Acks::File(vec![
                    FileAck {
                        seq: 70_000,
                        block: 4095,
                        ms: 1234,
                    },
                    FileAck {
                        seq: 70_001,
                        block: 17,
                        ms: 1235,
                    },
                ]),
                flushes: None,
                canary: Default::default(),
                sealed_ms: 0,
                oldest_in_flight_ms: None,
            },
        }
    }

    #[tokio::test]
    async fn a_frame_split_at_every_byte_is_incomplete_until_whole_then_decodes() {
        let msg = acks_request();
        let f = encode(&msg);
        assert_eq!(f.len(), 36);
        let mut buf = Vec::new();
        for k in 0..=f.len() {
            // The scanner: incomplete until the last byte is there.
            let want = (k == f.len()).then_some(f.len());
            assert_eq!(check(&f[..k]).unwrap(), want, "check after {k} bytes");
            // The stream reader, the bytes arriving in two reads split at byte k.
            let mut r = (&f[..k]).chain(&f[k..]);
            assert_eq!(
                read_frame::<Request, _>(&mut r, &mut buf).await.unwrap(),
                Some(msg.clone()),
                "split at byte {k}"
            );
            // The stream ending at byte k: nothing yet, an end inside the frame, or the frame.
            let mut cut = &f[..k];
            match read_frame::<Request, _>(&mut cut, &mut buf).await {
                Ok(None) => assert_eq!(k, 0),
                Err(FrameError::Io(e)) => {
                    assert!(0 < k && k < f.len(), "end inside the frame at {k}");
                    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
                }
                Ok(Some(got)) => assert_eq!((k, got), (f.len(), msg.clone())),
                Err(e) => panic!("cut at byte {k}: {e}"),
            }
        }
    }

    #[tokio::test]
    async fn an_oversize_length_is_refused_alike_by_check_and_read_frame() {
        let mut buf = Vec::new();
        for len in [MAX_FRAME + 1, u32::MAX] {
            let mut f = len.to_le_bytes().to_vec();
            f.extend_from_slice(&[0xAA; 16]);
            let scanned = check(&f).unwrap_err();
            let mut r = &f[..];
            let read = read_frame::<Request, _>(&mut r, &mut buf)
                .await
                .unwrap_err();
            assert!(matches!(scanned, FrameError::TooLarge(n) if n == len));
            assert!(matches!(read, FrameError::TooLarge(n) if n == len));
            assert_eq!(
                scanned.to_string(),
                format!("frame of {len} bytes exceeds the 4194304-byte limit")
            );
            assert_eq!(read.to_string(), scanned.to_string());
            // The reader stopped at the prefix: not one body byte was read.
            assert_eq!(r.len(), 16);
            assert!(
                matches!(body_len(len.to_le_bytes(), MAX_FRAME), Err(FrameError::TooLarge(n)) if n == len)
            );
        }
        // Exactly MAX_FRAME is allowed by both: incomplete, not refused.
        assert_eq!(check(&MAX_FRAME.to_le_bytes()).unwrap(), None);
        assert_eq!(
            body_len(MAX_FRAME.to_le_bytes(), MAX_FRAME).unwrap(),
            4 << 20
        );
        assert!(matches!(
            body_len(129u32.to_le_bytes(), HANDSHAKE_MAX_FRAME),
            Err(FrameError::OverLimit { len: 129, max: 128 })
        ));
        assert_eq!(
            body_len(128u32.to_le_bytes(), HANDSHAKE_MAX_FRAME).unwrap(),
            128
        );
    }
}
