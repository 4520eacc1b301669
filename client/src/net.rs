//! A client connection to the listener: connect, handshake (version check and mutual
//! HMAC proof, see `plugpull::auth`), then framed requests and responses.

use crate::Failure;
use plugpull::auth::Secret;
use plugpull::wire::{self, FrameError, Request, Response, PROTOCOL_VERSION};
use std::time::Duration;
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// Seconds to wait for the TCP connection and each handshake step.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The reading half of an authenticated connection.
pub struct Reader {
    rd: BufReader<OwnedReadHalf>,
    buf: Vec<u8>,
    addr: String,
    /// No frame received yet: garbage now means the peer is not a listener at all.
    first: bool,
}

/// The writing half of an authenticated connection.
pub struct Writer {
    wr: BufWriter<OwnedWriteHalf>,
}

impl Reader {
    /// The next response. A listener `Error` and a closed connection are failures.
    pub async fn recv(&mut self) -> Result<Response, Failure> {
        match wire::read_frame::<Response, _>(&mut self.rd, &mut self.buf).await {
            Err(e @ (FrameError::TooLarge(_) | FrameError::Malformed(_))) if self.first => {
                Err(Failure(format!(
                    "{} does not speak plugpull's protocol (is it a plugpull-listener?): {e}",
                    self.addr
                )))
            }
            Ok(Some(Response::Error { message, .. })) => Err(Failure(format!(
                "listener {} refused: {message}",
                self.addr
            ))),
            Ok(Some(r)) => {
                self.first = false;
                Ok(r)
            }
            Ok(None) => Err(Failure(format!(
                "listener {} closed the connection",
                self.addr
            ))),
            Err(e) => Err(Failure(format!("listener {}: {e}", self.addr))),
        }
    }
}

impl Writer {
    /// Queues a request (call [`Writer::flush`] to send).
    pub async fn send(&mut self, req: &Request) -> Result<(), Failure> {
        wire::write_frame(&mut self.wr, req)
            .await
            .map_err(|e| Failure(format!("sending to listener: {e}")))
    }

    /// Sends everything queued.
    pub async fn flush(&mut self) -> Result<(), Failure> {
        self.wr
            .flush()
            .await
            .map_err(|e| Failure(format!("sending to listener: {e}")))
    }
}

/// Connects to `addr` (`HOST:PORT`) and authenticates with `secret`.
///
/// Errors: unreachable listener, protocol version mismatch (both versions named),
/// failed proof on either side, timeouts.
pub async fn connect(addr: &str, secret: &Secret) -> Result<(Reader, Writer), Failure> {
    let sock = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| {
            Failure(format!(
                "cannot reach listener at {addr}: timed out after {} s",
                CONNECT_TIMEOUT.as_secs()
            ))
        })?
        .map_err(|e| Failure(format!("cannot reach listener at {addr}: {e}")))?;
    let _ = sock.set_nodelay(true);
    let (rd, wr) = sock.into_split();
    let mut r = Reader {
        rd: BufReader::with_capacity(1 << 16, rd),
        buf: Vec::new(),
        addr: addr.to_string(),
        first: true,
    };
    let mut w = Writer {
        wr: BufWriter::with_capacity(1 << 16, wr),
    };
    let nonce: [u8; 32] = rand::random();
    w.send(&Request::Hello {
        version: PROTOCOL_VERSION,
        nonce,
    })
    .await?;
    w.flush().await?;
    let step = |what: &'static str| {
        Failure(format!(
            "listener at {addr} did not answer the handshake ({what}) within {} s",
            CONNECT_TIMEOUT.as_secs()
        ))
    };
    let challenge = tokio::time::timeout(CONNECT_TIMEOUT, r.recv())
        .await
        .map_err(|_| step("challenge"))??;
    let Response::Challenge {
        version,
        nonce: theirs,
        proof,
    } = challenge
    else {
        return Err(Failure(format!(
            "listener at {addr} answered Hello with {challenge:?}"
        )));
    };
    if version != PROTOCOL_VERSION {
        return Err(Failure(format!("protocol version mismatch: listener speaks {version}, this plugpull speaks {PROTOCOL_VERSION}")));
    }
    if !secret.check_listener_proof(&nonce, &theirs, &proof) {
        return Err(Failure(format!(
            "listener at {addr} could not prove it holds our secret (the secrets differ, or only one side has one)"
        )));
    }
    w.send(&Request::Auth {
        proof: secret.agent_proof(&theirs, &nonce),
    })
    .await?;
    w.flush().await?;
    match tokio::time::timeout(CONNECT_TIMEOUT, r.recv())
        .await
        .map_err(|_| step("welcome"))??
    {
        Response::Welcome => Ok((r, w)),
        other => Err(Failure(format!(
            "listener at {addr} answered Auth with {other:?}"
        ))),
    }
}
