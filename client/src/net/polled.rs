//! A listener connection that the async runtime's reactor does not watch unless
//! asked to: the reporter's, once its run is started or resumed.
//!
//! A socket registered with the reactor wakes a runtime thread whenever bytes
//! arrive, whether a task waits for them or not: one wake-up per confirmation, on
//! top of the linger timer's one per batch. Here the reporter, while acks flow,
//! reads what arrived when it looks anyway (each linger tick, [`Polled::answer`]),
//! and has the socket watched ([`Polled::watch`]) otherwise: when no linger runs,
//! when writers are near `--max-unconfirmed`, and at the end of the run. Frames queued with
//! [`Polled::queue`] go out as far as the socket takes them without blocking
//! ([`Polled::push`]); what it did not take waits for the next push.
//!
//! Frames and their seals are those of [`super::Reader`] and [`super::Writer`]
//! (`plugpull::wire::frame`, `plugpull::auth`), continued on the same session.

use super::{checked, closed, NetError};
use crate::Error;
use plugpull::auth::Direction;
use plugpull::wire::{self, frame, FrameError, Request, Response, PREFIX_LEN};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Bytes asked of the socket per read: a confirmation is a few dozen.
const READ_CHUNK: usize = 4096;

/// The socket, watched by the reactor or not.
enum Sock {
    Quiet(TcpStream),
    Watched(AsyncFd<TcpStream>),
    /// Only while switching between the two, or after a failed switch.
    Gone,
}

/// An authenticated listener connection, read and written without blocking.
pub struct Polled {
    sock: Sock,
    addr: String,
    /// Bytes received and not yet taken as frames.
    rbuf: Vec<u8>,
    /// Sealed frames queued; the socket has taken the first `wpos` bytes.
    wbuf: Vec<u8>,
    wpos: usize,
    open: Direction,
    seal: Direction,
}

impl Polled {
    /// From a non-blocking socket (the reactor no longer watching it), the bytes
    /// already read from it, and the session's two directions.
    pub(super) fn new(
        sock: TcpStream,
        addr: String,
        rbuf: Vec<u8>,
        open: Direction,
        seal: Direction,
    ) -> Polled {
        Polled {
            sock: Sock::Quiet(sock),
            addr,
            rbuf,
            wbuf: Vec::new(),
            wpos: 0,
            open,
            seal,
        }
    }

    fn stream(&self) -> Result<&TcpStream, Error> {
        match &self.sock {
            Sock::Quiet(s) => Ok(s),
            Sock::Watched(fd) => Ok(fd.get_ref()),
            Sock::Gone => Err(Error::Msg(format!(
                "listener {}: the connection was dropped",
                self.addr
            ))),
        }
    }

    /// Queues `req` as a sealed frame (sent by the next [`Polled::push`]).
    pub fn queue(&mut self, req: &Request) {
        self.wbuf
            .extend_from_slice(&wire::encode_sealed(req, &mut self.seal));
    }

    /// Whether queued bytes wait for the socket to take them.
    pub fn unsent(&self) -> bool {
        self.wpos < self.wbuf.len()
    }

    /// Bytes queued that the socket has not taken yet.
    pub fn queued(&self) -> usize {
        self.wbuf.len() - self.wpos
    }

    /// Sends what is queued, as far as the socket takes it without blocking.
    ///
    /// Errors: the connection broke.
    pub fn push(&mut self) -> Result<(), Error> {
        while self.unsent() {
            let r = self.stream()?.write(&self.wbuf[self.wpos..]);
            match r {
                Ok(0) => return Err(closed(&self.addr)),
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(Error::Msg(format!(
                        "sending to listener {}: {e}",
                        self.addr
                    )))
                }
            }
        }
        if !self.unsent() {
            self.wbuf.clear();
            self.wpos = 0;
        } else if self.wpos >= 1 << 16 {
            // What was sent goes, so the buffer holds only what waits.
            self.wbuf.drain(..self.wpos);
            self.wpos = 0;
        }
        Ok(())
    }

    /// The next response received, reading what the socket holds when no whole
    /// frame is buffered; `Ok(None)` when none has (wholly) arrived yet.
    ///
    /// Errors: as [`super::Reader::recv_checked`]: [`NetError::Lost`] for a closed
    /// or broken connection or a malformed frame, [`NetError::Forged`] for a frame
    /// that fails its seal, [`NetError::Refused`] for the listener's `Error`.
    pub fn answer(&mut self) -> Result<Option<Response>, NetError> {
        loop {
            let whole = frame::check(&self.rbuf);
            if let Ok(Some(n)) = whole {
                let r = wire::decode_sealed::<Response>(&self.rbuf[PREFIX_LEN..n], &mut self.open);
                self.rbuf.drain(..n);
                return checked(&self.addr, r.map(Some)).map(Some);
            }
            if let Err(e) = whole {
                return checked(&self.addr, Err(e)).map(Some);
            }
            let mut chunk = [0u8; READ_CHUNK];
            let r = self.stream().map_err(NetError::Lost)?.read(&mut chunk);
            match r {
                Ok(0) => return checked(&self.addr, Ok(None)).map(Some),
                Ok(n) => self.rbuf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return checked(&self.addr, Err(FrameError::Io(e))).map(Some),
            }
        }
    }

    /// Whether the reactor watches the socket.
    pub fn watched(&self) -> bool {
        matches!(self.sock, Sock::Watched(_))
    }

    /// Has the reactor watch the socket for bytes to read, or stop watching it.
    /// Must be called within the runtime.
    ///
    /// Errors: the reactor refused the socket (it stays as it was).
    pub fn watch(&mut self, on: bool) -> Result<(), Error> {
        if on == self.watched() {
            return Ok(());
        }
        self.sock = match std::mem::replace(&mut self.sock, Sock::Gone) {
            // SAFETY: the `TcpStream` owns its descriptor, which stays open and the
            // same until `into_inner` hands the stream back.
            Sock::Quiet(s) => {
                match unsafe { AsyncFd::register_with_interest(s, Interest::READABLE) } {
                    Ok(fd) => Sock::Watched(fd),
                    Err(e) => {
                        let (s, e) = e.into_parts();
                        self.sock = Sock::Quiet(s);
                        return Err(Error::Msg(format!("listener {}: {e}", self.addr)));
                    }
                }
            }
            Sock::Watched(fd) => Sock::Quiet(fd.into_inner()),
            Sock::Gone => Sock::Gone,
        };
        Ok(())
    }

    /// Waits until bytes may have arrived (then call [`Polled::answer`] until it
    /// answers `None`); never returns while the socket is not watched.
    pub async fn readable(&self) {
        match &self.sock {
            Sock::Watched(fd) => {
                // Readiness is cleared before the reads that follow, so bytes that
                // arrive after them set it again: none is missed.
                match fd.readable().await {
                    Ok(mut guard) => guard.clear_ready(),
                    // The runtime is shutting down: nothing will come.
                    Err(_) => std::future::pending().await,
                }
            }
            _ => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plugpull::auth::{Secret, Session};
    use plugpull::ledger::{AckBatch, Acks, FileAck};
    use plugpull::RunId;
    use std::net::TcpListener;
    use std::time::Duration;

    /// A `Polled` connected over loopback to a plain blocking socket, the
    /// listener's end, with the listener's session keys.
    fn pair() -> (Polled, TcpStream, Session) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let ours = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (theirs, _) = l.accept().unwrap();
        ours.set_nonblocking(true).unwrap();
        let secret = Secret::new(b"polled test secret");
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let agent = secret.agent_session(&a, &b);
        let c = Polled::new(ours, "test".into(), Vec::new(), agent.recv, agent.send);
        (c, theirs, secret.listener_session(&a, &b))
    }

    fn acks(batch: u64, n: u64) -> Request {
        Request::Acks {
            run: RunId(9),
            batch: AckBatch {
                batch,
                promised: true,
                acks: Acks::File(
                    (0..n)
                        .map(|seq| FileAck {
                            seq,
                            block: seq,
                            ms: 0,
                        })
                        .collect(),
                ),
                flushes: None,
                canary: Default::default(),
                sealed_ms: 0,
                oldest_in_flight_ms: None,
            },
        }
    }

    /// Reads one sealed request, blocking, as the listener would.
    fn read_request(s: &mut TcpStream, open: &mut Direction) -> Request {
        let mut prefix = [0u8; PREFIX_LEN];
        s.read_exact(&mut prefix).unwrap();
        let mut body = vec![0u8; frame::body_len(prefix, wire::MAX_FRAME).unwrap()];
        s.read_exact(&mut body).unwrap();
        wire::decode_sealed(&body, open).unwrap()
    }

    #[test]
    fn what_the_socket_did_not_take_goes_out_whole_on_later_pushes() {
        let (mut c, mut theirs, mut l) = pair();
        // 20 frames of about 1 MiB each: more than loopback's socket buffers hold.
        for b in 1..=20 {
            c.queue(&acks(b, 80_000));
        }
        c.push().unwrap();
        assert!(c.unsent(), "the socket took 20 MiB at once");
        let reader = std::thread::spawn(move || {
            (1..=20)
                .map(|_| match read_request(&mut theirs, &mut l.recv) {
                    Request::Acks { batch, .. } => (batch.batch, batch.acks.count()),
                    other => panic!("{other:?}"),
                })
                .collect::<Vec<_>>()
        });
        let t0 = std::time::Instant::now();
        while c.unsent() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the rest never went out"
            );
            std::thread::sleep(Duration::from_millis(1));
            c.push().unwrap();
        }
        let got = reader.join().unwrap();
        assert_eq!(got, (1..=20).map(|b| (b, 80_000)).collect::<Vec<_>>());
    }

    #[test]
    fn an_answer_split_across_reads_is_taken_whole_and_a_forged_one_is_a_fault() {
        let (mut c, mut theirs, mut l) = pair();
        assert!(c.answer().unwrap().is_none());
        let f = wire::encode_sealed(
            &Response::Confirmed {
                run: RunId(9),
                batch: 7,
            },
            &mut l.send,
        );
        theirs.write_all(&f[..5]).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            c.answer().unwrap().is_none(),
            "half a frame was taken whole"
        );
        theirs.write_all(&f[5..]).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        match c.answer().unwrap() {
            Some(Response::Confirmed { run, batch }) => assert_eq!((run, batch), (RunId(9), 7)),
            other => panic!("{other:?}"),
        }
        assert!(c.answer().unwrap().is_none());
        // Sealed with another secret: a witness fault, not a lost connection.
        let mut other = Secret::new(b"another secret").listener_session(&[1; 32], &[2; 32]);
        let forged = wire::encode_sealed(
            &Response::Confirmed {
                run: RunId(9),
                batch: 8,
            },
            &mut other.send,
        );
        theirs.write_all(&forged).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        match c.answer() {
            Err(NetError::Forged(Error::WitnessFault(m))) => {
                assert!(m.starts_with("witness fault: "), "{m}")
            }
            other => panic!("{:?}", other.map_err(NetError::failure)),
        }
    }

    #[test]
    fn a_watched_socket_wakes_the_task_when_an_answer_arrives_and_eof_is_lost() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (mut c, mut theirs, mut l) = pair();
        rt.block_on(async {
            // Not watched: `readable` never returns.
            assert!(
                tokio::time::timeout(Duration::from_millis(50), c.readable())
                    .await
                    .is_err()
            );
            c.watch(true).unwrap();
            assert!(c.watched());
            let f = wire::encode_sealed(
                &Response::Confirmed {
                    run: RunId(9),
                    batch: 1,
                },
                &mut l.send,
            );
            let writer = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                theirs.write_all(&f).unwrap();
                theirs
            });
            tokio::time::timeout(Duration::from_secs(10), c.readable())
                .await
                .expect("an answer arrived and the watched socket did not say so");
            let mut got = None;
            // Readiness may come before the whole frame: look until it is there.
            for _ in 0..1000 {
                got = c.answer().unwrap();
                if got.is_some() {
                    break;
                }
                c.readable().await;
            }
            assert!(matches!(got, Some(Response::Confirmed { batch: 1, .. })));
            c.watch(false).unwrap();
            assert!(!c.watched());
            drop(writer.join().unwrap());
        });
        std::thread::sleep(Duration::from_millis(50));
        match c.answer() {
            Err(NetError::Lost(Error::Msg(m))) => {
                assert_eq!(m, "listener test closed the connection")
            }
            other => panic!("{:?}", other.map_err(NetError::failure)),
        }
    }
}
