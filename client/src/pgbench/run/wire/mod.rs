//! One client's PostgreSQL connection, driven the way pgbench drives libpq: a plain
//! socket, one `send` per statement, `poll` for the answer, one `recv`. No runtime
//! and no task in between, so a statement costs the three system calls it costs
//! pgbench, and the clients' CPU per transaction compares with pgbench's (see
//! `docs/pgbench.md` → Performance).
//!
//! Messages are framed and parsed by `postgres-protocol` (the crate tokio-postgres
//! is built on), after PostgreSQL's "Frontend/Backend Protocol" chapter (docs,
//! chapter 55 in 15): StartupMessage, then the authentication exchange (trust,
//! cleartext, MD5 and SCRAM-SHA-256 without channel binding, RFC 5802/7677), then
//! ReadyForQuery. TLS as the connection settings' sslmode says ([`crate::pg::tls`];
//! the session in `tls.rs`).
//!
//! Setup (connect, authenticate, prepare) blocks; during the run the socket is
//! non-blocking and the caller polls [`Conn::fd`].

mod error;
mod setup;
mod tls;

pub(crate) use error::{server_error, PgError};

use bytes::BytesMut;
use postgres_protocol::message::{backend::Message, frontend};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;

/// Bytes asked of the socket per read: a transaction's answers are a few hundred.
const READ_CHUNK: usize = 8192;

/// The socket under a connection.
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<tls::TlsStream>),
}

impl Stream {
    fn inner(&mut self) -> &mut dyn ReadWrite {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
            Stream::Tls(s) => s.as_mut(),
        }
    }

    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(on),
            Stream::Unix(s) => s.set_nonblocking(on),
            Stream::Tls(s) => s.sock().set_nonblocking(on),
        }
    }

    fn fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tls(s) => s.sock().as_raw_fd(),
        }
    }

    /// Plaintext TLS decrypted and not read yet (never for a plain socket).
    fn buffered(&mut self) -> usize {
        match self {
            Stream::Tls(s) => s.buffered(),
            _ => 0,
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// One client connection.
pub(crate) struct Conn {
    stream: Stream,
    /// Bytes received and not yet parsed.
    rbuf: BytesMut,
    /// What one read takes ([`READ_CHUNK`] bytes), before it is copied to `rbuf`.
    chunk: Box<[u8]>,
    /// Bytes queued and not yet sent.
    wbuf: BytesMut,
}

impl Conn {
    /// From now on reads and writes do not block: the caller polls [`Conn::fd`].
    pub(crate) fn set_nonblocking(&mut self) -> Result<(), PgError> {
        Ok(self.stream.set_nonblocking(true)?)
    }

    /// The socket, for `poll`.
    pub(crate) fn fd(&self) -> RawFd {
        self.stream.fd()
    }

    /// Ends the session: sends Terminate (as far as the socket takes it) and shuts
    /// the socket down, so the server ends the backend and releases what an open
    /// transaction holds (row locks other clients wait for). Later reads see EOF.
    pub(crate) fn close(&mut self) {
        self.wbuf.clear();
        frontend::terminate(&mut self.wbuf);
        if let Stream::Tls(s) = &mut self.stream {
            s.close_notify();
        }
        let _ = self.flush();
        // SAFETY: shutdown on our own descriptor; it stays open until drop.
        unsafe { libc::shutdown(self.stream.fd(), libc::SHUT_RDWR) };
    }

    /// Queues a simple-protocol Query.
    pub(crate) fn queue_query(&mut self, sql: &str) {
        // Fails only for a NUL byte in `sql`, which the callers never put there.
        frontend::query(sql, &mut self.wbuf).expect("a query without NUL bytes");
    }

    /// Queues Bind (text parameters, text results) and Execute of the prepared
    /// statement `name`, and a Sync after them when `sync` (the server answers each
    /// Sync with one ReadyForQuery; a statement that fails makes it skip the rest up
    /// to the next Sync).
    pub(crate) fn queue_execute(&mut self, name: &str, params: &[&[u8]], sync: bool) {
        let r = frontend::bind(
            "",
            name,
            std::iter::empty(),
            params.iter(),
            |v, buf| {
                buf.extend_from_slice(v);
                Ok(postgres_protocol::IsNull::No)
            },
            std::iter::empty(),
            &mut self.wbuf,
        );
        // Our serializer never fails, and Bind fails otherwise only past 2^15 values.
        assert!(r.is_ok(), "Bind of {} parameters", params.len());
        frontend::execute("", 0, &mut self.wbuf).expect("an unnamed portal");
        if sync {
            frontend::sync(&mut self.wbuf);
        }
    }

    /// Whether queued bytes wait for the socket to take them.
    pub(crate) fn wants_write(&self) -> bool {
        !self.wbuf.is_empty() || matches!(&self.stream, Stream::Tls(s) if s.wants_write())
    }

    /// Sends what is queued, as far as the socket takes it without blocking.
    ///
    /// Errors: the socket failed.
    pub(crate) fn flush(&mut self) -> Result<(), PgError> {
        while !self.wbuf.is_empty() {
            match self.stream.inner().write(&self.wbuf) {
                Ok(0) => return Err(PgError::Closed),
                Ok(n) => {
                    let _ = self.wbuf.split_to(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(PgError::Io(e)),
            }
        }
        if let Stream::Tls(s) = &mut self.stream {
            match s.send_pending() {
                Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(PgError::Io(e)),
                _ => {}
            }
        }
        Ok(())
    }

    /// Reads once what the socket holds (after `poll` said it is readable); the
    /// number of bytes read, 0 when the socket had none after all.
    ///
    /// Errors: the server closed the connection, or the socket failed.
    pub(crate) fn fill(&mut self) -> Result<usize, PgError> {
        // Read into the connection's own buffer and copy what came: zeroing the
        // spare capacity of `rbuf` (or a fresh buffer) for every read costs more.
        let r = loop {
            match self.stream.inner().read(&mut self.chunk[..]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r,
            }
        };
        match r {
            Ok(0) => Err(PgError::Closed),
            Ok(n) => {
                self.rbuf.extend_from_slice(&self.chunk[..n]);
                // What TLS decrypted beyond one chunk: `poll` cannot see it.
                let mut total = n;
                while self.stream.buffered() > 0 {
                    let k = self.stream.inner().read(&mut self.chunk[..])?;
                    self.rbuf.extend_from_slice(&self.chunk[..k]);
                    total += k;
                }
                Ok(total)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(PgError::Io(e)),
        }
    }

    /// The next whole message received, if one is.
    ///
    /// Errors: bytes that do not parse as a backend message.
    pub(crate) fn next_message(&mut self) -> Result<Option<Message>, PgError> {
        Message::parse(&mut self.rbuf)
            .map_err(|e| PgError::Protocol(format!("cannot parse the server's message: {e}")))
    }

    /// Sends everything queued, blocking (setup only).
    fn flush_blocking(&mut self) -> Result<(), PgError> {
        let buf = self.wbuf.split();
        self.stream.inner().write_all(&buf)?;
        Ok(())
    }

    /// The next message, blocking (setup only).
    fn recv_blocking(&mut self) -> Result<Message, PgError> {
        loop {
            if let Some(m) = self.next_message()? {
                return Ok(m);
            }
            if self.fill()? == 0 {
                return Err(PgError::Io(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "timeout waiting for the server during the session's setup",
                )));
            }
        }
    }
}
