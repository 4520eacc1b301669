//! A client connection's TLS: PostgreSQL's SSLRequest, the rustls handshake
//! (blocking, during the setup), and reads and writes through rustls that keep the
//! `poll` loop honest. A read takes every byte of plaintext rustls holds (the caller
//! reads again while [`TlsStream::buffered`] says some is left, so none waits unseen
//! by `poll`), and what rustls could not send yet counts as waiting to be written
//! ([`TlsStream::wants_write`]).

use super::PgError;
use bytes::BytesMut;
use postgres_protocol::message::frontend;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

/// A TLS session over a TCP socket.
pub(super) struct TlsStream {
    conn: ClientConnection,
    sock: TcpStream,
}

/// Asks the server for TLS on `sock` (SSLRequest) and, when it agrees, makes the
/// handshake for `host` (its name, or its address as text), blocking.
///
/// Errors: the server refused TLS, the handshake failed (the certificate's problem
/// named), or the socket failed.
pub(super) fn start(
    mut sock: TcpStream,
    config: &Arc<ClientConfig>,
    host: &str,
) -> Result<TlsStream, PgError> {
    let mut buf = BytesMut::new();
    frontend::ssl_request(&mut buf);
    sock.write_all(&buf)?;
    let mut answer = [0u8];
    sock.read_exact(&mut answer)?;
    if answer[0] != b'S' {
        return Err(PgError::Tls("the server does not support TLS".into()));
    }
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| PgError::Tls(format!("host {host:?}: {e}")))?;
    let conn =
        ClientConnection::new(config.clone(), name).map_err(|e| PgError::Tls(e.to_string()))?;
    let mut s = TlsStream { conn, sock };
    while s.conn.is_handshaking() {
        if let Err(e) = s.conn.complete_io(&mut s.sock) {
            // rustls's own error (a certificate refused) comes inside an io::Error.
            return Err(
                match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                    Some(tls) => PgError::Tls(tls.to_string()),
                    None => PgError::Io(e),
                },
            );
        }
    }
    Ok(s)
}

impl TlsStream {
    /// The TCP socket.
    pub(super) fn sock(&self) -> &TcpStream {
        &self.sock
    }

    /// Whether rustls holds encrypted bytes it could not send yet.
    pub(super) fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Plaintext bytes rustls has decrypted and not handed out yet.
    pub(super) fn buffered(&mut self) -> usize {
        self.conn
            .process_new_packets()
            .map(|s| s.plaintext_bytes_to_read())
            .unwrap_or(0)
    }

    /// Sends what rustls holds, as far as the socket takes it.
    pub(super) fn send_pending(&mut self) -> io::Result<()> {
        while self.conn.wants_write() {
            self.conn.write_tls(&mut self.sock)?;
        }
        Ok(())
    }

    /// Queues TLS's close_notify (sent by the next write or flush).
    pub(super) fn close_notify(&mut self) {
        self.conn.send_close_notify();
    }
}

impl Read for TlsStream {
    /// Plaintext rustls holds, else one read from the socket decrypted. `Ok(0)` at
    /// the end of the stream.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return r,
            }
            if self.conn.read_tls(&mut self.sock)? == 0 {
                return Ok(0);
            }
            self.conn
                .process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            // An answer rustls owes the server (an alert, a key update).
            match self.send_pending() {
                Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
                _ => {}
            }
        }
    }
}

impl Write for TlsStream {
    /// Takes plaintext into rustls and sends as much as the socket takes; blocks
    /// (`WouldBlock` on a non-blocking socket) only when rustls's buffer is full.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut n = self.conn.writer().write(buf)?;
        if n == 0 && !buf.is_empty() {
            self.send_pending()?;
            n = self.conn.writer().write(buf)?;
        }
        match self.send_pending() {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
            _ => {}
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_pending()
    }
}
