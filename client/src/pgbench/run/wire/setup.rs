//! Opening a client connection: the hosts and ports `cfg` names, the socket options,
//! TLS as its sslmode says, the startup message and authentication, the session
//! attributes asked for, and the statements' preparation. All of it blocks (with
//! timeouts on TCP).

use super::error::server_error;
use super::{tls, Conn, PgError, Stream, READ_CHUNK};
use crate::pg::tls::Attempt;
use crate::pg::ConnConfig;
use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256, SCRAM_SHA_256};
use postgres_protocol::message::{backend::Message, frontend};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};

use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::config::{Host, LoadBalanceHosts, TargetSessionAttrs};
use tokio_postgres::Config;

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

/// TCP keepalive and `TCP_USER_TIMEOUT` as `cfg` says, with tokio-postgres's
/// defaults (keepalives on, idle 2 h, the kernel's interval and count), so a client
/// whose server host lost power mid-COMMIT ends as lost (in flight) rather than
/// waiting forever.
fn keepalive(s: &TcpStream, cfg: &Config) -> io::Result<()> {
    use rustix::net::sockopt;
    let secs = |d: Duration| Duration::from_secs(d.as_secs().clamp(1, i32::MAX as u64));
    if cfg.get_keepalives() {
        sockopt::set_socket_keepalive(s, true)?;
        sockopt::set_tcp_keepidle(s, secs(cfg.get_keepalives_idle()))?;
        if let Some(i) = cfg.get_keepalives_interval() {
            sockopt::set_tcp_keepintvl(s, secs(i))?;
        }
        if let Some(n) = cfg.get_keepalives_retries() {
            sockopt::set_tcp_keepcnt(s, n.min(i32::MAX as u32))?;
        }
    }
    if let Some(t) = cfg.get_tcp_user_timeout() {
        sockopt::set_tcp_user_timeout(s, t.as_millis().min(i32::MAX as u128) as u32)?;
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

impl Conn {
    /// Connects as `cfg` says: the hosts in order (shuffled with
    /// `load_balance_hosts=random`), on each the attempts its sslmode makes (plain
    /// or TLS, the next only when the one before was refused: a server error or a
    /// TLS failure), the first where the socket connects, the server
    /// accepts the session, is `server` (its `SERVER_IDENTITY_SQL`: the one the
    /// run's setup checked) and, with `target_session_attrs=read-write` or
    /// `read-only`, has `transaction_read_only` `off` or `on` (as libpq and
    /// tokio-postgres choose). TCP sockets have a read and write timeout of `cfg`'s
    /// connect timeout (10 s when unset) during the setup; a Unix socket has none
    /// (the server is local).
    ///
    /// Errors: no host did (each host's error, when there were several): the socket
    /// failed, TLS failed or was refused, the server refused the session (an
    /// ErrorResponse, e.g. a wrong password or a missing database), a password is
    /// needed but none was given, an authentication method this client does not
    /// speak (GSSAPI, SSPI, Kerberos), or no host had the session attributes asked
    /// for, or none was the run's server.
    pub(crate) fn connect(cfg: &ConnConfig, server: &str) -> Result<Conn, PgError> {
        let mut last = PgError::Protocol("no host to connect to".into());
        let mut targets: Vec<_> = cfg.targets().iter().collect();
        if cfg.pg().get_load_balance_hosts() == LoadBalanceHosts::Random {
            use rand::seq::SliceRandom;
            targets.shuffle(&mut rand::rng());
        }
        let several = targets.len() > 1;
        let mut earlier = Vec::new();
        for t in targets {
            let one = t.config(Attempt::Plain);
            for (host, addr, port) in candidates(&one) {
                for &attempt in t.attempts() {
                    let tls = t.tls().filter(|_| attempt == Attempt::Tls);
                    match Conn::connect_to(&host, addr, port, &one, tls, server) {
                        Ok(conn) => return Ok(conn),
                        Err(e) => {
                            let refused = matches!(e, PgError::Server(_) | PgError::Tls(_));
                            last = e;
                            if !refused {
                                break;
                            }
                        }
                    }
                }
                if several {
                    earlier.push(format!("{}: {last}", where_(&host, port)));
                }
            }
        }
        if earlier.len() > 1 {
            // Every host's reason, not only the last one's.
            return Err(PgError::Protocol(format!(
                "no host would do: {}",
                earlier.join("; ")
            )));
        }
        Err(last)
    }

    /// One candidate of [`Conn::connect`], over TLS when `tls` is given and the
    /// host is not a Unix socket.
    fn connect_to(
        host: &Host,
        addr: Option<IpAddr>,
        port: u16,
        cfg: &Config,
        tls: Option<&Arc<rustls::ClientConfig>>,
        server: &str,
    ) -> Result<Conn, PgError> {
        let timeout = connect_timeout(cfg);
        let stream = match (open(host, addr, port, cfg)?, tls, host) {
            (Stream::Tcp(s), tls, host) => {
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))?;
                match (tls, host) {
                    (Some(tls), Host::Tcp(name)) => {
                        Stream::Tls(Box::new(tls::start(s, tls, name)?))
                    }
                    _ => Stream::Tcp(s),
                }
            }
            (other, _, _) => other,
        };
        let mut conn = Conn {
            stream,
            rbuf: BytesMut::with_capacity(READ_CHUNK),
            chunk: vec![0; READ_CHUNK].into_boxed_slice(),
            wbuf: BytesMut::with_capacity(1024),
        };
        conn.startup(cfg)?;
        let want_read_only = match cfg.get_target_session_attrs() {
            TargetSessionAttrs::ReadWrite => Some(false),
            TargetSessionAttrs::ReadOnly => Some(true),
            _ => None,
        };
        let here = conn.query_value(crate::pg::SERVER_IDENTITY_SQL)?;
        if here != server {
            return Err(PgError::Protocol(format!(
                "the server at {} ({here}) is not the one the run's setup checked ({server})",
                where_(host, port)
            )));
        }
        if let Some(want) = want_read_only {
            let read_only = conn.query_value("SHOW transaction_read_only")? == "on";
            if read_only != want {
                return Err(PgError::Protocol(format!(
                    "the server at {} is {}, and target_session_attrs asks for a {} session",
                    where_(host, port),
                    if read_only { "read-only" } else { "read-write" },
                    if want { "read-only" } else { "read-write" },
                )));
            }
        }
        // The timeouts stay for the statements' preparation; the run's
        // non-blocking socket has no use for them.
        Ok(conn)
    }

    /// The first column of the first row `sql` returns, as text (setup only).
    fn query_value(&mut self, sql: &str) -> Result<String, PgError> {
        frontend::query(sql, &mut self.wbuf)?;
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
        value.ok_or_else(|| PgError::Protocol(format!("{sql:?} answered no row")))
    }

    /// The startup message and the authentication exchange, until ReadyForQuery.
    fn startup(&mut self, cfg: &Config) -> Result<(), PgError> {
        if cfg.get_channel_binding() == tokio_postgres::config::ChannelBinding::Require {
            return Err(PgError::Protocol(
                "channel_binding=require: the pgbench clients do not bind SCRAM to the TLS \
                 channel (use channel_binding=prefer or disable)"
                    .into(),
            ));
        }
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
                     (password= in --dsn, PGPASSWORD, or a line in ~/.pgpass or PGPASSFILE)"
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
}

/// A candidate as text: `host:port`, or the socket directory.
fn where_(host: &Host, port: u16) -> String {
    match host {
        Host::Tcp(h) => format!("{h}:{port}"),
        Host::Unix(d) => format!("{}/.s.PGSQL.{port}", d.display()),
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
