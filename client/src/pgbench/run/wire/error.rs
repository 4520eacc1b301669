//! The errors of a client connection: the socket's, the server's ErrorResponse
//! (protocol docs, "ErrorResponse" and "Error and Notice Message Fields"), and
//! protocol violations.

use fallible_iterator::FallibleIterator;
use std::io;

/// An error of a client connection.
#[derive(Debug)]
pub(crate) enum PgError {
    /// The socket failed (reset, refused, timed out).
    Io(io::Error),
    /// The server closed the connection.
    Closed,
    /// The server answered with an ErrorResponse.
    Server(ServerError),
    /// The server sent something the protocol does not allow here.
    Protocol(String),
    /// TLS failed: the server refused it, or the handshake failed (a certificate
    /// not trusted, a name mismatch).
    Tls(String),
}

/// The fields of a server's ErrorResponse that plugpull uses (protocol docs,
/// "Error and Notice Message Fields").
#[derive(Debug, Default)]
pub(crate) struct ServerError {
    /// `S`/`V`: ERROR, FATAL or PANIC.
    pub(crate) severity: String,
    /// `C`: the SQLSTATE, e.g. `40001`.
    pub(crate) code: String,
    /// `M`: the primary message.
    pub(crate) message: String,
    /// `D`: the detail, if any.
    pub(crate) detail: Option<String>,
}

impl PgError {
    /// The SQLSTATE of a server error.
    pub(crate) fn code(&self) -> Option<&str> {
        match self {
            PgError::Server(e) => Some(&e.code),
            _ => None,
        }
    }

    /// Whether the connection is gone: a socket error, the server closed it, a
    /// server error that ends the session ([`crate::pg::ends_session`],
    /// on the unlocalized severity, field `V`), or a protocol violation (no later
    /// answer can be trusted).
    pub(crate) fn is_connection_error(&self) -> bool {
        match self {
            PgError::Server(e) => crate::pg::ends_session(&e.severity, &e.code),
            _ => true,
        }
    }
}

impl std::fmt::Display for PgError {
    /// One line; a server error as [`crate::pg::server_message`].
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PgError::Io(e) => write!(f, "connection error: {e}"),
            PgError::Closed => write!(f, "the server closed the connection unexpectedly"),
            PgError::Protocol(s) => write!(f, "protocol error: {s}"),
            PgError::Tls(s) => write!(f, "error performing TLS handshake: {s}"),
            PgError::Server(e) => f.write_str(&crate::pg::server_message(
                &e.severity,
                &e.message,
                &e.code,
                e.detail.as_deref(),
            )),
        }
    }
}

impl From<io::Error> for PgError {
    fn from(e: io::Error) -> PgError {
        PgError::Io(e)
    }
}

/// Parses an ErrorResponse's fields.
pub(crate) fn server_error(
    body: &postgres_protocol::message::backend::ErrorResponseBody,
) -> PgError {
    let mut e = ServerError::default();
    let mut fields = body.fields();
    loop {
        match fields.next() {
            Ok(Some(f)) => {
                let v = String::from_utf8_lossy(f.value_bytes()).into_owned();
                match f.type_() {
                    b'V' => e.severity = v,
                    b'S' if e.severity.is_empty() => e.severity = v,
                    b'C' => e.code = v,
                    b'M' => e.message = v,
                    b'D' => e.detail = Some(v),
                    _ => {}
                }
            }
            Ok(None) => break,
            Err(err) => return PgError::Protocol(format!("malformed ErrorResponse: {err}")),
        }
    }
    PgError::Server(e)
}
