//! A client connection to the listener: connect, handshake (version check and mutual
//! HMAC proof, see `plugpull::auth`), then framed requests and responses, every one
//! sealed with the session's MAC in both directions.

mod polled;

pub use polled::Polled;

use crate::Error;
use plugpull::auth::{Direction, Secret};
use plugpull::wire::{self, ErrorKind, FrameError, Request, Response, MAX_FRAME, PROTOCOL_VERSION};
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
    /// Checks the seal of every frame once the handshake is done.
    open: Option<Direction>,
}

/// The writing half of an authenticated connection.
pub struct Writer {
    wr: BufWriter<OwnedWriteHalf>,
    /// Seals every frame once the handshake is done.
    seal: Option<Direction>,
}

/// Why [`Reader::recv_checked`] got no response.
#[derive(Debug)]
pub enum NetError {
    /// The connection broke or closed: a new one may work.
    Lost(Error),
    /// The listener answered with an `Error` of this kind.
    Refused(ErrorKind, Error),
    /// A frame failed authentication: something between us and the listener forged
    /// or altered it (a witness fault; reconnecting proves nothing).
    Forged(Error),
}

impl NetError {
    /// The message, whatever the kind.
    pub fn failure(self) -> Error {
        match self {
            NetError::Lost(f) | NetError::Refused(_, f) | NetError::Forged(f) => f,
        }
    }
}

impl Reader {
    /// The next response. A listener `Error`, a forged frame and a closed connection
    /// are failures.
    pub async fn recv(&mut self) -> Result<Response, Error> {
        self.recv_checked().await.map_err(NetError::failure)
    }

    /// The next response, with failures told apart (see [`NetError`]).
    pub async fn recv_checked(&mut self) -> Result<Response, NetError> {
        // Before the listener answered once (its challenge, or its refusal of our
        // Hello) it has proved nothing: the listener's own limit for that stage.
        let max = if self.first {
            wire::HANDSHAKE_MAX_FRAME
        } else {
            MAX_FRAME
        };
        let r = wire::read_frame_with::<Response, _>(
            &mut self.rd,
            &mut self.buf,
            max,
            self.open.as_mut(),
        )
        .await;
        if let Err(
            e @ (FrameError::TooLarge(_) | FrameError::OverLimit { .. } | FrameError::Malformed(_)),
        ) = &r
        {
            if self.first {
                return Err(NetError::Lost(Error::Msg(format!(
                    "{} does not speak plugpull's protocol (is it a plugpull-listener?): {e}",
                    self.addr
                ))));
            }
        }
        let r = checked(&self.addr, r);
        if r.is_ok() {
            self.first = false;
        }
        r
    }
}

/// What reading a frame from listener `addr` came to (`Ok(None)`: the connection
/// ended), as a response or the failure named for people: the one place both
/// readers, [`Reader`] and [`Polled`], sort failures into [`NetError`]s.
fn checked(addr: &str, r: Result<Option<Response>, FrameError>) -> Result<Response, NetError> {
    match r {
        Err(FrameError::Mac(e)) => Err(NetError::Forged(Error::WitnessFault(format!(
            "witness fault: {e}; something between this agent and listener {addr} forged or altered it, so nothing it said can be trusted"
        )))),
        Ok(Some(Response::Error { kind, message })) => Err(NetError::Refused(
            kind,
            Error::Msg(format!("listener {addr} refused: {message}")),
        )),
        Ok(Some(r)) => Ok(r),
        Ok(None) => Err(NetError::Lost(closed(addr))),
        Err(e) => Err(NetError::Lost(Error::Msg(format!("listener {addr}: {e}")))),
    }
}

/// The failure of a connection listener `addr` closed.
fn closed(addr: &str) -> Error {
    Error::Msg(format!("listener {addr} closed the connection"))
}

impl Writer {
    /// Queues a request (call [`Writer::flush`] to send).
    pub async fn send(&mut self, req: &Request) -> Result<(), Error> {
        let frame = match &mut self.seal {
            Some(s) => wire::encode_sealed(req, s),
            None => wire::encode(req),
        };
        self.wr
            .write_all(&frame)
            .await
            .map_err(|e| Error::Msg(format!("sending to listener: {e}")))
    }

    /// Sends everything queued.
    pub async fn flush(&mut self) -> Result<(), Error> {
        self.wr
            .flush()
            .await
            .map_err(|e| Error::Msg(format!("sending to listener: {e}")))
    }
}

/// The connection `r` and `w` are the two halves of, handed from the runtime's
/// reactor to a [`Polled`] (see there why), with every byte `r` had already read.
/// Must be called within the runtime, with nothing queued on `w` (after its flush).
///
/// Errors: the halves are not of one connection, or it was not authenticated.
pub fn into_polled(r: Reader, w: Writer) -> Result<Polled, Error> {
    let (Some(open), Some(seal)) = (r.open, w.seal) else {
        return Err(Error::Msg(format!(
            "listener {}: not authenticated",
            r.addr
        )));
    };
    debug_assert!(
        w.wr.buffer().is_empty(),
        "a frame was queued and not flushed"
    );
    let rbuf = r.rd.buffer().to_vec();
    let sock =
        r.rd.into_inner()
            .reunite(w.wr.into_inner())
            .map_err(|e| Error::Msg(format!("listener {}: {e}", r.addr)))?
            .into_std()
            .map_err(|e| Error::Msg(format!("listener {}: {e}", r.addr)))?;
    Ok(Polled::new(sock, r.addr, rbuf, open, seal))
}

/// Why a connection to a listener failed, in words: a refused one asks whether the
/// listener runs there (nothing listens on that port of a host that is up).
fn unreachable_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => {
            format!("{e}: is plugpull-listener running there, on that port?")
        }
        _ => e.to_string(),
    }
}

/// Connects to `addr` (`HOST:PORT`) and authenticates with `secret`.
///
/// Errors: unreachable listener, protocol version mismatch (both versions named),
/// failed proof on either side, timeouts.
pub async fn connect(addr: &str, secret: &Secret) -> Result<(Reader, Writer), Error> {
    let sock = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| Error::Unreachable {
            addr: addr.to_string(),
            reason: format!("timed out after {} s", CONNECT_TIMEOUT.as_secs()),
        })?
        .map_err(|e| Error::Unreachable {
            addr: addr.to_string(),
            reason: unreachable_reason(&e),
        })?;
    let _ = sock.set_nodelay(true);
    let (rd, wr) = sock.into_split();
    let mut r = Reader {
        rd: BufReader::with_capacity(1 << 16, rd),
        buf: Vec::new(),
        addr: addr.to_string(),
        first: true,
        open: None,
    };
    let mut w = Writer {
        wr: BufWriter::with_capacity(1 << 16, wr),
        seal: None,
    };
    let nonce: [u8; 32] = rand::random();
    w.send(&Request::Hello {
        version: PROTOCOL_VERSION,
        nonce,
    })
    .await?;
    w.flush().await?;
    let step = |what: &'static str| {
        Error::Msg(format!(
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
        return Err(Error::Msg(format!(
            "listener at {addr} answered Hello with {challenge:?}"
        )));
    };
    if version != PROTOCOL_VERSION {
        return Err(Error::Msg(format!("protocol version mismatch: listener speaks {version}, this plugpull speaks {PROTOCOL_VERSION}")));
    }
    if !secret.check_listener_proof(&nonce, &theirs, &proof) {
        return Err(Error::Msg(format!(
            "listener at {addr} could not prove it holds our secret (the secrets differ, or only one side has one: give both the same --secret-file or PLUGPULL_SECRET)"
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
        Response::Welcome => {
            let session = secret.agent_session(&nonce, &theirs);
            r.open = Some(session.recv);
            w.seal = Some(session.send);
            Ok((r, w))
        }
        other => Err(Error::Msg(format!(
            "listener at {addr} answered Auth with {other:?}"
        ))),
    }
}

/// Where the listener is and how to prove ourselves to it (`--listener`,
/// `--secret-file`), for every command that talks to it.
#[derive(clap::Args, Debug, Clone)]
pub struct ListenerArgs {
    /// Listener address, HOST:PORT.
    #[arg(long, env = "PLUGPULL_LISTENER", value_parser = plugpull::units::parse_host_port)]
    pub listener: String,
    /// File holding the shared secret (else the PLUGPULL_SECRET variable).
    #[arg(long)]
    pub secret_file: Option<std::path::PathBuf>,
}

impl ListenerArgs {
    /// The shared secret. Errors: the file cannot be read.
    pub fn secret(&self) -> Result<Secret, Error> {
        Secret::load(self.secret_file.as_deref()).map_err(Error::Msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn a_refused_connection_asks_whether_the_listener_runs_there() {
        let refused = std::io::Error::from_raw_os_error(111);
        assert_eq!(
            unreachable_reason(&refused),
            "Connection refused (os error 111): is plugpull-listener running there, on that port?"
        );
        let unreachable = std::io::Error::from_raw_os_error(113);
        assert_eq!(
            unreachable_reason(&unreachable),
            "No route to host (os error 113)"
        );
    }

    /// A peer that answers our Hello with a frame of `len` body bytes.
    async fn peer_answering(len: u32) -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut hello = [0u8; 64];
            let _ = s.read(&mut hello).await;
            let mut frame = len.to_le_bytes().to_vec();
            frame.resize(4 + len as usize, 0xAB);
            let _ = s.write_all(&frame).await;
            let _ = s.flush().await;
            tokio::time::sleep(Duration::from_secs(2)).await;
        });
        addr
    }

    #[tokio::test]
    async fn a_first_answer_above_the_handshake_limit_is_not_plugpulls_protocol() {
        let addr = peer_answering(wire::HANDSHAKE_MAX_FRAME + 1).await;
        let e = match connect(&addr, &Secret::default()).await {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a 129-byte first frame was read"),
        };
        assert_eq!(
            e,
            format!(
                "{addr} does not speak plugpull's protocol (is it a plugpull-listener?): frame of \
                 129 bytes exceeds the 128-byte limit before the handshake is done"
            )
        );
    }
}
