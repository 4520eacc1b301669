//! One client's PostgreSQL connection, driven the way pgbench drives libpq: a plain
//! socket, one `send` per statement, `poll` for the answer, one `recv`. No runtime
//! and no task in between, so a statement costs the three system calls it costs
//! pgbench (the tokio-postgres connection task cost 1.4–1.7× pgbench's client CPU
//! per transaction; see `docs/pgbench.md` → Performance).
//!
//! Messages are framed and parsed by `postgres-protocol` (the crate tokio-postgres
//! is built on), after PostgreSQL's "Frontend/Backend Protocol" chapter (docs,
//! chapter 55 in 15): StartupMessage, then the authentication exchange (trust,
//! cleartext, MD5 and SCRAM-SHA-256 without channel binding, RFC 5802/7677), then
//! ReadyForQuery. No TLS, as the rest of plugpull's connections.
//!
//! Setup (connect, authenticate, prepare) blocks; during the run the socket is
//! non-blocking and the caller polls [`Conn::fd`].

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256, SCRAM_SHA_256};
use postgres_protocol::message::{backend::Message, frontend};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;
use tokio_postgres::config::{Host, LoadBalanceHosts, TargetSessionAttrs};
use tokio_postgres::Config;

/// Bytes asked of the socket per read: a transaction's answers are a few hundred.
const READ_CHUNK: usize = 8192;

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
    /// FATAL or PANIC (the unlocalized severity, field `V`), a connection-class
    /// SQLSTATE (`08…`, `57P…`), or a protocol violation (no later answer can be
    /// trusted). The rule of [`crate::pgbench::conn::is_connection_error`].
    pub(crate) fn is_connection_error(&self) -> bool {
        match self {
            PgError::Server(e) => {
                matches!(e.severity.as_str(), "FATAL" | "PANIC")
                    || e.code.starts_with("08")
                    || e.code.starts_with("57P")
            }
            _ => true,
        }
    }
}

impl std::fmt::Display for PgError {
    /// One line: `SEVERITY: message (SQLSTATE code); detail` for a server error, as
    /// [`crate::pgbench::conn::describe`] prints it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PgError::Io(e) => write!(f, "connection error: {e}"),
            PgError::Closed => write!(f, "the server closed the connection unexpectedly"),
            PgError::Protocol(s) => write!(f, "protocol error: {s}"),
            PgError::Server(e) => {
                write!(f, "{}: {} (SQLSTATE {})", e.severity, e.message, e.code)?;
                if let Some(d) = &e.detail {
                    write!(f, "; {d}")?;
                }
                Ok(())
            }
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

/// The socket under a connection.
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn inner(&mut self) -> &mut dyn ReadWrite {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
        }
    }

    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(on),
            Stream::Unix(s) => s.set_nonblocking(on),
        }
    }

    fn fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// The socket paths and addresses `cfg` names, in the order to try them: per host,
/// its port (or the only port, or 5432); a hostaddr replaces the host's lookup.
fn candidates(cfg: &Config) -> Vec<(Host, Option<IpAddr>, u16)> {
    let ports = cfg.get_ports();
    let port = |i: usize| ports.get(i).or(ports.first()).copied().unwrap_or(5432);
    let hosts = cfg.get_hosts();
    let addrs = cfg.get_hostaddrs();
    if hosts.is_empty() {
        return addrs
            .iter()
            .enumerate()
            .map(|(i, a)| (Host::Tcp(a.to_string()), Some(*a), port(i)))
            .collect();
    }
    hosts
        .iter()
        .enumerate()
        .map(|(i, h)| (h.clone(), addrs.get(i).copied(), port(i)))
        .collect()
}

/// Sets an integer socket option.
fn setsockopt(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: `v` lives across the call and its size is passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// TCP keepalive and `TCP_USER_TIMEOUT` as `cfg` says, with tokio-postgres's
/// defaults (keepalives on, idle 2 h, the kernel's interval and count), so a client
/// whose server host lost power mid-COMMIT ends as lost (in flight) rather than
/// waiting forever.
fn keepalive(s: &TcpStream, cfg: &Config) -> io::Result<()> {
    let fd = s.as_raw_fd();
    let secs = |d: Duration| d.as_secs().clamp(1, i32::MAX as u64) as libc::c_int;
    if cfg.get_keepalives() {
        setsockopt(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
        setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_KEEPIDLE,
            secs(cfg.get_keepalives_idle()),
        )?;
        if let Some(i) = cfg.get_keepalives_interval() {
            setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, secs(i))?;
        }
        if let Some(n) = cfg.get_keepalives_retries() {
            setsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_KEEPCNT,
                n.min(i32::MAX as u32) as libc::c_int,
            )?;
        }
    }
    if let Some(t) = cfg.get_tcp_user_timeout() {
        let ms = t.as_millis().min(i32::MAX as u128) as libc::c_int;
        setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, ms)?;
    }
    Ok(())
}

/// Opens the socket to one candidate; TCP gets `TCP_NODELAY`, as libpq sets it.
fn open(host: &Host, addr: Option<IpAddr>, port: u16, cfg: &Config) -> io::Result<Stream> {
    let timeout = connect_timeout(cfg);
    match host {
        Host::Unix(dir) => Ok(Stream::Unix(UnixStream::connect(
            dir.join(format!(".s.PGSQL.{port}")),
        )?)),
        Host::Tcp(name) => {
            let addrs: Vec<SocketAddr> = match addr {
                Some(a) => vec![SocketAddr::new(a, port)],
                None => (name.as_str(), port).to_socket_addrs()?.collect(),
            };
            let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{name}: no address"));
            for a in addrs {
                match TcpStream::connect_timeout(&a, timeout) {
                    Ok(s) => {
                        s.set_nodelay(true)?;
                        keepalive(&s, cfg)?;
                        return Ok(Stream::Tcp(s));
                    }
                    Err(e) => last = e,
                }
            }
            Err(last)
        }
    }
}

/// One client connection.
pub(crate) struct Conn {
    stream: Stream,
    /// Bytes received and not yet parsed.
    rbuf: BytesMut,
    /// Bytes queued and not yet sent.
    wbuf: BytesMut,
}

impl Conn {
    /// Connects as `cfg` says: the hosts in order (shuffled with
    /// `load_balance_hosts=random`), the first where the socket connects, the server
    /// accepts the session and, with `target_session_attrs=read-write` or
    /// `read-only`, `transaction_read_only` is `off` or `on` (as libpq and
    /// tokio-postgres choose). TCP sockets have a read and write timeout of `cfg`'s
    /// connect timeout (10 s when unset) during the setup; a Unix socket has none
    /// (the server is local).
    ///
    /// Errors: no host did (the last host's error): the socket failed, the server
    /// refused the session (an ErrorResponse, e.g. a wrong password or a missing
    /// database), a password is needed but none was given, an authentication method
    /// this client does not speak (GSSAPI, SSPI, Kerberos), or no host had the
    /// session attributes asked for.
    pub(crate) fn connect(cfg: &Config) -> Result<Conn, PgError> {
        let mut last = PgError::Protocol("no host to connect to".into());
        let mut hosts = candidates(cfg);
        if cfg.get_load_balance_hosts() == LoadBalanceHosts::Random {
            use rand::seq::SliceRandom;
            hosts.shuffle(&mut rand::rng());
        }
        for (host, addr, port) in hosts {
            match Conn::connect_to(&host, addr, port, cfg) {
                Ok(conn) => return Ok(conn),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// One candidate of [`Conn::connect`].
    fn connect_to(
        host: &Host,
        addr: Option<IpAddr>,
        port: u16,
        cfg: &Config,
    ) -> Result<Conn, PgError> {
        let stream = open(host, addr, port, cfg)?;
        let mut conn = Conn {
            stream,
            rbuf: BytesMut::with_capacity(READ_CHUNK),
            wbuf: BytesMut::with_capacity(1024),
        };
        let timeout = connect_timeout(cfg);
        if let Stream::Tcp(s) = &conn.stream {
            s.set_read_timeout(Some(timeout))?;
            s.set_write_timeout(Some(timeout))?;
        }
        conn.startup(cfg)?;
        let want_read_only = match cfg.get_target_session_attrs() {
            TargetSessionAttrs::ReadWrite => Some(false),
            TargetSessionAttrs::ReadOnly => Some(true),
            _ => None,
        };
        if let Some(want) = want_read_only {
            let read_only = conn.show("transaction_read_only")? == "on";
            if read_only != want {
                return Err(PgError::Protocol(format!(
                    "the server at {} is {}, and target_session_attrs asks for a {} session",
                    match host {
                        Host::Tcp(h) => format!("{h}:{port}"),
                        Host::Unix(d) => d.display().to_string(),
                    },
                    if read_only { "read-only" } else { "read-write" },
                    if want { "read-only" } else { "read-write" },
                )));
            }
        }
        // The timeouts stay for the statements' preparation; the run's
        // non-blocking socket has no use for them.
        Ok(conn)
    }

    /// The value of `SHOW name` (setup only).
    fn show(&mut self, name: &str) -> Result<String, PgError> {
        frontend::query(&format!("SHOW {name}"), &mut self.wbuf)?;
        self.flush_blocking()?;
        let mut value = None;
        let mut err = None;
        loop {
            match self.recv_blocking()? {
                Message::DataRow(row) => {
                    let mut r = row.ranges();
                    if let Some(Some(range)) = r.next()? {
                        value = Some(String::from_utf8_lossy(&row.buffer()[range]).into_owned());
                    }
                }
                Message::ErrorResponse(b) => err = Some(server_error(&b)),
                Message::ReadyForQuery(_) => break,
                _ => {}
            }
        }
        if let Some(e) = err {
            return Err(e);
        }
        value.ok_or_else(|| PgError::Protocol(format!("SHOW {name} answered no row")))
    }

    /// The startup message and the authentication exchange, until ReadyForQuery.
    fn startup(&mut self, cfg: &Config) -> Result<(), PgError> {
        let user = cfg.get_user().unwrap_or("");
        let mut params = vec![("user", user), ("client_encoding", "UTF8")];
        if let Some(db) = cfg.get_dbname() {
            params.push(("database", db));
        }
        if let Some(o) = cfg.get_options() {
            params.push(("options", o));
        }
        if let Some(a) = cfg.get_application_name() {
            params.push(("application_name", a));
        }
        frontend::startup_message(params, &mut self.wbuf)?;
        self.flush_blocking()?;
        let password = || {
            cfg.get_password().ok_or_else(|| {
                PgError::Protocol(
                    "the server asks for a password and none was given \
                     (password= in --dsn or PGPASSWORD)"
                        .into(),
                )
            })
        };
        // The SCRAM exchange, and whether its final message was checked.
        let mut scram: Option<(ScramSha256, bool)> = None;
        loop {
            match self.recv_blocking()? {
                // With SCRAM, the server must have proved it knows the password
                // (SASLFinal) before it says Ok.
                Message::AuthenticationOk if scram.as_ref().is_some_and(|s| !s.1) => {
                    return Err(out_of_place("AuthenticationOk before SASLFinal"))
                }
                Message::AuthenticationOk => {}
                Message::AuthenticationCleartextPassword => {
                    frontend::password_message(password()?, &mut self.wbuf)?;
                    self.flush_blocking()?;
                }
                Message::AuthenticationMd5Password(b) => {
                    let hash = postgres_protocol::authentication::md5_hash(
                        user.as_bytes(),
                        password()?,
                        b.salt(),
                    );
                    frontend::password_message(hash.as_bytes(), &mut self.wbuf)?;
                    self.flush_blocking()?;
                }
                Message::AuthenticationSasl(b) => {
                    let mut offered = Vec::new();
                    let mut mechs = b.mechanisms();
                    while let Some(m) = mechs.next()? {
                        offered.push(m.to_string());
                    }
                    if !offered.iter().any(|m| m == SCRAM_SHA_256) {
                        return Err(PgError::Protocol(format!(
                            "the server offers SASL mechanisms {offered:?}, none of which \
                             this client speaks ({SCRAM_SHA_256})"
                        )));
                    }
                    let s = ScramSha256::new(password()?, ChannelBinding::unsupported());
                    frontend::sasl_initial_response(SCRAM_SHA_256, s.message(), &mut self.wbuf)?;
                    self.flush_blocking()?;
                    scram = Some((s, false));
                }
                Message::AuthenticationSaslContinue(b) => {
                    let (s, _) = scram.as_mut().ok_or_else(|| out_of_place("SASLContinue"))?;
                    s.update(b.data())?;
                    frontend::sasl_response(s.message(), &mut self.wbuf)?;
                    self.flush_blocking()?;
                }
                Message::AuthenticationSaslFinal(b) => {
                    let (s, done) = scram.as_mut().ok_or_else(|| out_of_place("SASLFinal"))?;
                    s.finish(b.data())?;
                    *done = true;
                }
                Message::AuthenticationGss
                | Message::AuthenticationKerberosV5
                | Message::AuthenticationScmCredential
                | Message::AuthenticationSspi
                | Message::AuthenticationGssContinue(_) => {
                    return Err(PgError::Protocol(
                        "the server asks for an authentication method this client does not \
                         speak (GSSAPI, SSPI, Kerberos or SCM credentials)"
                            .into(),
                    ))
                }
                Message::ErrorResponse(b) => return Err(server_error(&b)),
                Message::ReadyForQuery(_) => return Ok(()),
                Message::ParameterStatus(_)
                | Message::BackendKeyData(_)
                | Message::NoticeResponse(_) => {}
                _ => return Err(out_of_place("a message")),
            }
        }
    }

    /// Prepares `sql` as the statement named `name`, parameter types left to the
    /// server (pgbench's `-M prepared` does the same), and waits for the answer.
    ///
    /// Errors: the server refused the statement, or the connection failed.
    pub(crate) fn prepare(&mut self, name: &str, sql: &str) -> Result<(), PgError> {
        frontend::parse(name, sql, std::iter::empty(), &mut self.wbuf)?;
        frontend::sync(&mut self.wbuf);
        self.flush_blocking()?;
        let mut err = None;
        loop {
            match self.recv_blocking()? {
                Message::ParseComplete | Message::NoticeResponse(_) => {}
                Message::ParameterStatus(_) => {}
                Message::ErrorResponse(b) => err = Some(server_error(&b)),
                Message::ReadyForQuery(_) => return err.map_or(Ok(()), Err),
                _ => return Err(out_of_place("an answer to Parse")),
            }
        }
    }

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
        let _ = self.flush();
        // SAFETY: shutdown on our own descriptor; it stays open until drop.
        unsafe { libc::shutdown(self.stream.fd(), libc::SHUT_RDWR) };
    }

    /// Queues a simple-protocol Query.
    pub(crate) fn queue_query(&mut self, sql: &str) {
        // Fails only for a NUL byte in `sql`, which the callers never put there.
        frontend::query(sql, &mut self.wbuf).expect("a query without NUL bytes");
    }

    /// Queues Bind (text parameters, text results), Execute and Sync of the
    /// prepared statement `name`.
    pub(crate) fn queue_execute(&mut self, name: &str, params: &[&[u8]]) {
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
        frontend::sync(&mut self.wbuf);
    }

    /// Whether queued bytes wait for the socket to take them.
    pub(crate) fn wants_write(&self) -> bool {
        !self.wbuf.is_empty()
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
        Ok(())
    }

    /// Reads once what the socket holds (after `poll` said it is readable); the
    /// number of bytes read, 0 when the socket had none after all.
    ///
    /// Errors: the server closed the connection, or the socket failed.
    pub(crate) fn fill(&mut self) -> Result<usize, PgError> {
        self.rbuf.reserve(READ_CHUNK);
        let len = self.rbuf.len();
        let cap = self.rbuf.capacity();
        self.rbuf.resize(cap, 0);
        let r = loop {
            match self.stream.inner().read(&mut self.rbuf[len..]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r,
            }
        };
        let n = match r {
            Ok(0) => {
                self.rbuf.truncate(len);
                return Err(PgError::Closed);
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            Err(e) => {
                self.rbuf.truncate(len);
                return Err(PgError::Io(e));
            }
        };
        self.rbuf.truncate(len + n);
        Ok(n)
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

/// `cfg`'s connect timeout, 10 s when unset.
fn connect_timeout(cfg: &Config) -> Duration {
    cfg.get_connect_timeout()
        .copied()
        .unwrap_or(Duration::from_secs(10))
}

fn out_of_place(what: &str) -> PgError {
    PgError::Protocol(format!("{what} out of place during the session's setup"))
}
