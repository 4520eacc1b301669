//! `plugpull-listener`: the witness. It receives acknowledgements from agents, makes
//! them durable in per-run ledgers (group commit + `fdatasync`) *before* confirming
//! them, and serves ledgers to `plugpull verify`.
//!
//! Each connection is one task: a handshake under a timeout (version check, mutual
//! HMAC proof), then requests. Acks are pipelined: the reading half hands each batch
//! to the run's writer and queues the answer; the writing half sends answers in
//! order as the writer confirms them.

mod store;

use clap::Parser;
use plugpull::auth::Secret;
use plugpull::wire::{self, ErrorKind, FrameError, Request, Response, PROTOCOL_VERSION};
use plugpull::RunId;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use store::{Append, AppendResult, RunHandle, Store};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, Semaphore};

/// The plugpull witness: keeps a durable ledger of every acknowledged write.
///
/// Run it on a host that does not lose power with the machine under test. The first
/// line on stdout is `listening on IP:PORT`; logs go to stderr.
///
/// Examples:
///   plugpull-listener --listen 0.0.0.0:7458 --data-dir /var/lib/plugpull --secret-file /etc/plugpull.secret
///   plugpull-listener --listen 127.0.0.1:0 --data-dir /tmp/pp
#[derive(Parser, Debug)]
#[command(version, verbatim_doc_comment)]
struct Args {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:7458")]
    listen: SocketAddr,
    /// Directory for ledgers (created if missing).
    #[arg(long)]
    data_dir: PathBuf,
    /// File holding the shared secret (else the PLUGPULL_SECRET variable).
    #[arg(long)]
    secret_file: Option<PathBuf>,
    /// Allow listening on a non-loopback address without a secret.
    #[arg(long)]
    insecure: bool,
    /// Most connections served at once; more are refused with a message.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Seconds a new connection has to complete its handshake.
    #[arg(long, default_value_t = 10.0)]
    handshake_timeout: f64,
    /// Seconds an authenticated connection may stay silent before it is dropped.
    #[arg(long, default_value_t = 600.0)]
    idle_timeout: f64,
}

struct Shared {
    store: Arc<Store>,
    secret: Secret,
    handshake_timeout: Duration,
    idle_timeout: Duration,
}

fn main() {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = rt.block_on(serve(args)) {
        eprintln!("plugpull-listener: {e}");
        std::process::exit(2);
    }
}

async fn serve(args: Args) -> Result<(), String> {
    let secret = Secret::load(args.secret_file.as_deref())?;
    if secret.is_none() {
        if !args.listen.ip().is_loopback() && !args.insecure {
            return Err(format!(
                "refusing to listen on {} without a secret: give --secret-file or PLUGPULL_SECRET, or --insecure",
                args.listen
            ));
        }
        tracing::warn!("no secret: any peer that can connect can add acks and read ledgers");
    }
    let store = Arc::new(Store::open(&args.data_dir)?);
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on {local}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let shared = Arc::new(Shared {
        store,
        secret,
        handshake_timeout: Duration::from_secs_f64(args.handshake_timeout),
        idle_timeout: Duration::from_secs_f64(args.idle_timeout),
    });
    let slots = Arc::new(Semaphore::new(args.max_connections));
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = sock.set_nodelay(true);
        let shared = shared.clone();
        match slots.clone().try_acquire_owned() {
            Ok(permit) => {
                tokio::spawn(async move {
                    if let Err(why) = connection(sock, &shared).await {
                        tracing::warn!(%peer, "dropped connection: {why}");
                    }
                    drop(permit);
                });
            }
            Err(_) => {
                tracing::warn!(%peer, max = args.max_connections, "refused connection: too many connections");
                tokio::spawn(async move {
                    let mut sock = sock;
                    let msg = format!(
                        "listener busy: {} connections already",
                        args.max_connections
                    );
                    let _ = wire::write_frame(
                        &mut sock,
                        &Response::Error {
                            kind: ErrorKind::Busy,
                            message: msg,
                        },
                    )
                    .await;
                    let _ = sock.shutdown().await;
                });
            }
        }
    }
}

/// Reads one request, bounded by `limit`. `Ok(None)` = the peer closed.
async fn next_request<R: tokio::io::AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    limit: Duration,
) -> Result<Option<Request>, String> {
    match tokio::time::timeout(limit, wire::read_frame::<Request, _>(r, buf)).await {
        Err(_) => Err(format!("silent for {} s", limit.as_secs_f64())),
        Ok(Err(FrameError::Io(e))) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Err("closed inside a frame".into())
        }
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(r)) => Ok(r),
    }
}

async fn refuse<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut W,
    kind: ErrorKind,
    message: String,
) -> String {
    let _ = wire::write_frame(
        w,
        &Response::Error {
            kind,
            message: message.clone(),
        },
    )
    .await;
    let _ = w.flush().await;
    message
}

/// Serves one connection until it closes or breaks a rule (the returned reason is logged).
async fn connection(sock: TcpStream, shared: &Shared) -> Result<(), String> {
    let (rd, wr) = sock.into_split();
    let mut rd = BufReader::with_capacity(64 << 10, rd);
    let mut wr = BufWriter::new(wr);
    let mut buf = Vec::new();

    // Handshake: Hello, Challenge, Auth, Welcome — all within the handshake timeout.
    let hs = shared.handshake_timeout;
    let hello = match next_request(&mut rd, &mut buf, hs).await {
        Ok(Some(h)) => h,
        Ok(None) => return Ok(()),
        Err(e) => return Err(refuse(&mut wr, ErrorKind::Protocol, e).await),
    };
    let Request::Hello {
        version,
        nonce: client_nonce,
    } = hello
    else {
        return Err(refuse(
            &mut wr,
            ErrorKind::Protocol,
            "expected Hello as the first message".into(),
        )
        .await);
    };
    if version != PROTOCOL_VERSION {
        let msg = format!("protocol version mismatch: client speaks {version}, listener speaks {PROTOCOL_VERSION}");
        return Err(refuse(&mut wr, ErrorKind::Version, msg).await);
    }
    let nonce: [u8; 32] = rand::random();
    let proof = shared.secret.listener_proof(&client_nonce, &nonce);
    send(
        &mut wr,
        &Response::Challenge {
            version: PROTOCOL_VERSION,
            nonce,
            proof,
        },
    )
    .await?;
    let auth = match next_request(&mut rd, &mut buf, hs).await {
        Ok(a) => a,
        Err(e) => return Err(refuse(&mut wr, ErrorKind::Protocol, e).await),
    };
    let Some(Request::Auth { proof }) = auth else {
        return Err(refuse(
            &mut wr,
            ErrorKind::Protocol,
            "expected Auth after Challenge".into(),
        )
        .await);
    };
    if !shared
        .secret
        .check_agent_proof(&nonce, &client_nonce, &proof)
    {
        return Err(refuse(
            &mut wr,
            ErrorKind::Auth,
            "authentication failed: wrong or missing secret".into(),
        )
        .await);
    }
    send(&mut wr, &Response::Welcome).await?;

    // Requests. Answers to appends are sent, in order, by a separate task.
    let (out_tx, out_rx) = mpsc::unbounded_channel::<Pending>();
    let sender = tokio::spawn(answer_in_order(wr, out_rx));
    let result = requests(&mut rd, &mut buf, shared, &out_tx).await;
    drop(out_tx);
    let sent = sender.await.unwrap_or_else(|e| Err(e.to_string()));
    result.and(sent)
}

/// An answer to send: ready now, or when a run's writer confirms.
enum Pending {
    Now(Response, bool),
    Confirm {
        run: RunId,
        rx: oneshot::Receiver<AppendResult>,
        resume: bool,
        batch: u64,
    },
    Ledger(RunId, Vec<u8>),
}

async fn send<W: tokio::io::AsyncWrite + Unpin>(w: &mut W, msg: &Response) -> Result<(), String> {
    wire::write_frame(w, msg).await.map_err(|e| e.to_string())?;
    w.flush().await.map_err(|e| e.to_string())
}

async fn answer_in_order<W: tokio::io::AsyncWrite + Unpin>(
    mut wr: W,
    mut rx: mpsc::UnboundedReceiver<Pending>,
) -> Result<(), String> {
    while let Some(p) = rx.recv().await {
        let (msg, close) = match p {
            Pending::Now(msg, close) => (msg, close),
            Pending::Confirm {
                run,
                rx,
                resume,
                batch,
            } => match rx.await {
                Ok(Ok(highest)) if resume => (
                    Response::Resumed {
                        run,
                        confirmed_batch: highest,
                    },
                    false,
                ),
                Ok(Ok(_)) => (Response::Confirmed { run, batch }, false),
                Ok(Err(e)) => (
                    Response::Error {
                        kind: ErrorKind::Io,
                        message: e,
                    },
                    true,
                ),
                Err(_) => (
                    Response::Error {
                        kind: ErrorKind::Io,
                        message: format!("ledger writer of run {run} stopped after an I/O error"),
                    },
                    true,
                ),
            },
            Pending::Ledger(run, bytes) => {
                const CHUNK: usize = 1 << 20;
                let n = bytes.len().div_ceil(CHUNK).max(1);
                for (i, c) in bytes
                    .chunks(CHUNK)
                    .chain((bytes.is_empty()).then_some(&[][..]))
                    .enumerate()
                {
                    wire::write_frame(
                        &mut wr,
                        &Response::LedgerChunk {
                            run,
                            bytes: c.to_vec(),
                            last: i + 1 == n,
                        },
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                }
                wr.flush().await.map_err(|e| e.to_string())?;
                continue;
            }
        };
        wire::write_frame(&mut wr, &msg)
            .await
            .map_err(|e| e.to_string())?;
        // Flush only when nothing else is ready, so answers batch up under load.
        if rx.is_empty() || close {
            wr.flush().await.map_err(|e| e.to_string())?;
        }
        if close {
            return Err(match msg {
                Response::Error { message, .. } => message,
                _ => "closed".into(),
            });
        }
    }
    wr.flush().await.map_err(|e| e.to_string())
}

async fn requests<R: tokio::io::AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut Vec<u8>,
    shared: &Shared,
    out: &mpsc::UnboundedSender<Pending>,
) -> Result<(), String> {
    let mut bound: Option<Arc<RunHandle>> = None;
    let refuse = |kind, message: String| {
        let _ = out.send(Pending::Now(
            Response::Error {
                kind,
                message: message.clone(),
            },
            true,
        ));
        Err(message)
    };
    loop {
        let req = match next_request(rd, buf, shared.idle_timeout).await {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(()),
            Err(e) => return refuse(ErrorKind::Protocol, e),
        };
        match req {
            Request::StartRun { manifest } => {
                if bound.is_some() {
                    return refuse(
                        ErrorKind::Protocol,
                        "StartRun on a connection that already has a run".into(),
                    );
                }
                match shared.store.create(*manifest) {
                    Ok(h) => {
                        let _ = out.send(Pending::Now(Response::RunStarted { run: h.run }, false));
                        bound = Some(h);
                    }
                    Err(e) => return refuse(ErrorKind::Io, e),
                }
            }
            Request::ResumeRun { run } => {
                if bound.is_some() {
                    return refuse(
                        ErrorKind::Protocol,
                        "ResumeRun on a connection that already has a run".into(),
                    );
                }
                let h = match shared.store.handle(run) {
                    Ok(h) => h,
                    Err(e) => return refuse(ErrorKind::UnknownRun, e),
                };
                let rx = h.append(Append::Barrier);
                let _ = out.send(Pending::Confirm {
                    run,
                    rx,
                    resume: true,
                    batch: 0,
                });
                bound = Some(h);
            }
            Request::Acks { run, batch } => {
                let n = batch.batch;
                if let Err(e) = append(&bound, out, run, Append::Batch(batch), n) {
                    return refuse(ErrorKind::Protocol, e);
                }
            }
            Request::Finish { run, summary } => {
                let (issued, acknowledged) = (summary.issued, summary.acknowledged);
                if let Err(e) = append(&bound, out, run, Append::Finished(summary), 0) {
                    return refuse(ErrorKind::Protocol, e);
                }
                tracing::info!(%run, issued, acknowledged, "run finished");
            }
            Request::DeviceError { run, end } => {
                let error = end.error.clone();
                if let Err(e) = append(&bound, out, run, Append::DeviceError(end), 0) {
                    return refuse(ErrorKind::Protocol, e);
                }
                tracing::warn!(%run, %error, "run ended by a device error");
            }
            Request::FetchLedger { run, host } => {
                let latest = match run {
                    Some(r) => Ok(Some(r)),
                    None => shared.store.latest_of(&host),
                };
                let latest = match latest {
                    Ok(l) => l,
                    Err(e) => return refuse(ErrorKind::UnknownRun, e),
                };
                let Some(run) = latest else {
                    return refuse(
                        ErrorKind::UnknownRun,
                        format!("no run of host {host:?} in this listener's ledger"),
                    );
                };
                match shared.store.read(run) {
                    Ok(bytes) => {
                        let _ = out.send(Pending::Ledger(run, bytes));
                    }
                    Err(e) if e.starts_with("unknown run") => {
                        return refuse(ErrorKind::UnknownRun, e)
                    }
                    Err(e) => return refuse(ErrorKind::LedgerDamaged, e),
                }
            }
            Request::Hello { .. } | Request::Auth { .. } => {
                return refuse(
                    ErrorKind::Protocol,
                    "handshake message after the handshake".into(),
                );
            }
        }
    }
}

/// Queues `what` on the connection's run (which must be `run`); the answer,
/// `Confirmed{batch}`, goes out once the ledger holds it durably.
fn append(
    bound: &Option<Arc<RunHandle>>,
    out: &mpsc::UnboundedSender<Pending>,
    run: RunId,
    what: Append,
    batch: u64,
) -> Result<(), String> {
    let rx = bound_to(bound, run)?.append(what);
    let _ = out.send(Pending::Confirm {
        run,
        rx,
        resume: false,
        batch,
    });
    Ok(())
}

fn bound_to(bound: &Option<Arc<RunHandle>>, run: RunId) -> Result<Arc<RunHandle>, String> {
    match bound {
        Some(h) if h.run == run => Ok(h.clone()),
        Some(h) => Err(format!(
            "message for run {run} on a connection bound to run {}",
            h.run
        )),
        None => Err(format!(
            "message for run {run} before StartRun or ResumeRun"
        )),
    }
}
