//! `plugpull-listener`: the witness. It receives acknowledgements from agents, makes
//! them durable in per-run ledgers (group commit + `fdatasync`) *before* confirming
//! them, and serves ledgers to `plugpull verify`.
//!
//! Each connection is one task: a handshake under a short timeout (version check,
//! mutual HMAC proof), then requests, every one sealed with the session's MAC (see
//! `plugpull::auth`). Acks are pipelined: the reading half hands each batch to the
//! run's writer and queues the answer; the writing half sends answers in order as the
//! writer confirms them.
//!
//! Unauthenticated connections cost little and cannot lock agents out: frames before
//! the handshake is done are capped at [`wire::HANDSHAKE_MAX_FRAME`] bytes and read
//! without a read buffer; they have their own budget (`--max-handshakes`), and when
//! it is full the oldest one is dropped for the newcomer. Only an authenticated
//! connection takes one of the `--max-connections` slots.

mod store;

use clap::Parser;
use plugpull::auth::{Direction, Secret};
use plugpull::wire::{
    self, ErrorKind, FrameError, Request, Response, HANDSHAKE_MAX_FRAME, MAX_FRAME,
    PROTOCOL_VERSION,
};
use plugpull::RunId;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use store::{Append, AppendResult, RunHandle, Store};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

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
    /// Most authenticated connections served at once; more are refused with a message.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Most connections in their handshake at once; when full, the oldest is dropped
    /// for a new one (so idle unauthenticated connections never lock agents out).
    #[arg(long, default_value_t = 512)]
    max_handshakes: usize,
    /// Seconds a new connection has to complete its handshake.
    #[arg(long, default_value_t = 3.0)]
    handshake_timeout: f64,
    /// Seconds an authenticated connection may stay silent before it is dropped.
    #[arg(long, default_value_t = 600.0)]
    idle_timeout: f64,
    /// FOR TESTS ONLY: sleep this many milliseconds before every ledger fdatasync,
    /// to stand in for a slow witness disk. Never use it for a real run.
    #[arg(long, default_value_t = 0, hide = true)]
    test_sync_delay_ms: u64,
}

struct Shared {
    store: Arc<Store>,
    secret: Secret,
    handshake_timeout: Duration,
    idle_timeout: Duration,
    max_connections: usize,
    slots: Arc<Semaphore>,
    max_handshakes: usize,
    /// Connections in their handshake, oldest first; dropping the sender evicts one.
    handshakes: Mutex<(u64, BTreeMap<u64, oneshot::Sender<()>>)>,
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
    if args.test_sync_delay_ms > 0 {
        tracing::warn!(
            ms = args.test_sync_delay_ms,
            "--test-sync-delay-ms is for tests only: every ledger sync is slowed down"
        );
    }
    let store = Arc::new(Store::open(
        &args.data_dir,
        Duration::from_millis(args.test_sync_delay_ms),
    )?);
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
        max_connections: args.max_connections,
        slots: Arc::new(Semaphore::new(args.max_connections)),
        max_handshakes: args.max_handshakes.max(1),
        handshakes: Mutex::new((0, BTreeMap::new())),
    });
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
        let (kill_tx, kill_rx) = oneshot::channel();
        let id = {
            let mut hs = shared.handshakes.lock().unwrap();
            if hs.1.len() >= shared.max_handshakes {
                // Dropping its sender ends the oldest handshake.
                hs.1.pop_first();
            }
            hs.0 += 1;
            let id = hs.0;
            hs.1.insert(id, kill_tx);
            id
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            match connection(sock, &shared, id, kill_rx).await {
                Err(why) if why == EVICTED => tracing::debug!(%peer, "dropped connection: {why}"),
                Err(why) => tracing::warn!(%peer, "dropped connection: {why}"),
                Ok(()) => {}
            }
            shared.handshakes.lock().unwrap().1.remove(&id);
        });
    }
}

const EVICTED: &str = "evicted: the handshake budget is full and this was its oldest handshake";

/// Reads one request of at most `max` bytes, checking its seal when `open` is given,
/// bounded by `limit`. `Ok(None)` = the peer closed.
async fn next_request<R: tokio::io::AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    limit: Duration,
    max: u32,
    open: Option<&mut Direction>,
) -> Result<Option<Request>, (ErrorKind, String)> {
    let p = ErrorKind::Protocol;
    match tokio::time::timeout(
        limit,
        wire::read_frame_with::<Request, _>(r, buf, max, open),
    )
    .await
    {
        Err(_) => Err((p, format!("silent for {} s", limit.as_secs_f64()))),
        Ok(Err(FrameError::Io(e))) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Err((p, "closed inside a frame".into()))
        }
        Ok(Err(e @ FrameError::Mac(_))) => Err((ErrorKind::Mac, e.to_string())),
        Ok(Err(e)) => Err((p, e.to_string())),
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

/// Serves one connection until it closes or breaks a rule (the returned reason is
/// logged). `kill` fires when the handshake budget evicts it.
async fn connection(
    sock: TcpStream,
    shared: &Shared,
    id: u64,
    kill: oneshot::Receiver<()>,
) -> Result<(), String> {
    let (mut rd, mut wr) = sock.into_split();
    let mut buf = Vec::new();
    // Handshake: Hello, Challenge, Auth, Welcome — within the handshake timeout, with
    // no read buffer and small frames only.
    let hs = tokio::select! {
        r = handshake(&mut rd, &mut wr, &mut buf, shared) => r?,
        _ = kill => return Err(EVICTED.into()),
    };
    shared.handshakes.lock().unwrap().1.remove(&id);
    let Some((session, _permit)) = hs else {
        return Ok(());
    };
    let mut rd = BufReader::with_capacity(64 << 10, rd);
    let wr = BufWriter::new(wr);

    // Requests. Answers to appends are sent, in order, by a separate task.
    let (out_tx, out_rx) = mpsc::unbounded_channel::<Pending>();
    let sender = tokio::spawn(answer_in_order(wr, session.send, out_rx));
    let mut open = session.recv;
    let result = requests(&mut rd, &mut buf, &mut open, shared, &out_tx).await;
    drop(out_tx);
    let sent = sender.await.unwrap_or_else(|e| Err(e.to_string()));
    result.and(sent)
}

/// The handshake; `Ok(None)` = the peer closed before saying anything. On success, the
/// session and the connection's slot.
async fn handshake<R, W>(
    rd: &mut R,
    wr: &mut W,
    buf: &mut Vec<u8>,
    shared: &Shared,
) -> Result<Option<(plugpull::auth::Session, OwnedSemaphorePermit)>, String>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let hs = shared.handshake_timeout;
    let hello = match next_request(rd, buf, hs, HANDSHAKE_MAX_FRAME, None).await {
        Ok(Some(h)) => h,
        Ok(None) => return Ok(None),
        Err((kind, e)) => return Err(refuse(wr, kind, e).await),
    };
    let Request::Hello {
        version,
        nonce: client_nonce,
    } = hello
    else {
        return Err(refuse(
            wr,
            ErrorKind::Protocol,
            "expected Hello as the first message".into(),
        )
        .await);
    };
    if version != PROTOCOL_VERSION {
        let msg = format!("protocol version mismatch: client speaks {version}, listener speaks {PROTOCOL_VERSION}");
        return Err(refuse(wr, ErrorKind::Version, msg).await);
    }
    let nonce: [u8; 32] = rand::random();
    let proof = shared.secret.listener_proof(&client_nonce, &nonce);
    send(
        wr,
        &Response::Challenge {
            version: PROTOCOL_VERSION,
            nonce,
            proof,
        },
    )
    .await?;
    let auth = match next_request(rd, buf, hs, HANDSHAKE_MAX_FRAME, None).await {
        Ok(a) => a,
        Err((kind, e)) => return Err(refuse(wr, kind, e).await),
    };
    let Some(Request::Auth { proof }) = auth else {
        return Err(refuse(
            wr,
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
            wr,
            ErrorKind::Auth,
            "authentication failed: wrong or missing secret".into(),
        )
        .await);
    }
    let Ok(permit) = shared.slots.clone().try_acquire_owned() else {
        let msg = format!(
            "listener busy: {} connections already",
            shared.max_connections
        );
        return Err(refuse(wr, ErrorKind::Busy, msg).await);
    };
    send(wr, &Response::Welcome).await?;
    Ok(Some((
        shared.secret.listener_session(&client_nonce, &nonce),
        permit,
    )))
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
    Ledger(RunId, Vec<u8>, Vec<plugpull::ledger::TornTail>),
}

async fn send<W: tokio::io::AsyncWrite + Unpin>(w: &mut W, msg: &Response) -> Result<(), String> {
    wire::write_frame(w, msg).await.map_err(|e| e.to_string())?;
    w.flush().await.map_err(|e| e.to_string())
}

async fn answer_in_order<W: tokio::io::AsyncWrite + Unpin>(
    mut wr: W,
    mut seal: Direction,
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
            Pending::Ledger(run, bytes, mut torn) => {
                const CHUNK: usize = 1 << 20;
                let n = bytes.len().div_ceil(CHUNK).max(1);
                for (i, c) in bytes
                    .chunks(CHUNK)
                    .chain((bytes.is_empty()).then_some(&[][..]))
                    .enumerate()
                {
                    let last = i + 1 == n;
                    let frame = wire::encode_sealed(
                        &Response::LedgerChunk {
                            run,
                            bytes: c.to_vec(),
                            last,
                            torn: if last {
                                std::mem::take(&mut torn)
                            } else {
                                Vec::new()
                            },
                        },
                        &mut seal,
                    );
                    wr.write_all(&frame).await.map_err(|e| e.to_string())?;
                }
                wr.flush().await.map_err(|e| e.to_string())?;
                continue;
            }
        };
        wr.write_all(&wire::encode_sealed(&msg, &mut seal))
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
    open: &mut Direction,
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
        let req =
            match next_request(rd, buf, shared.idle_timeout, MAX_FRAME, Some(&mut *open)).await {
                Ok(Some(r)) => r,
                Ok(None) => return Ok(()),
                Err((kind, e)) => return refuse(kind, e),
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
                        let token = shared.store.token(h.run);
                        let _ = out.send(Pending::Now(
                            Response::RunStarted { run: h.run, token },
                            false,
                        ));
                        bound = Some(h);
                    }
                    Err(e) => return refuse(ErrorKind::Io, e),
                }
            }
            Request::ResumeRun { run, token } => {
                if bound.is_some() {
                    return refuse(
                        ErrorKind::Protocol,
                        "ResumeRun on a connection that already has a run".into(),
                    );
                }
                if !shared.store.check_token(run, &token) {
                    return refuse(
                        ErrorKind::Auth,
                        format!("ResumeRun for run {run} without its token: only the agent that started a run may resume it"),
                    );
                }
                let h = match shared.store.handle(run) {
                    Ok(h) => h,
                    Err((kind, e)) => return refuse(kind, e),
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
            Request::Invalidate { run, error } => {
                if let Err(e) = append(&bound, out, run, Append::Invalid(error.clone()), 0) {
                    return refuse(ErrorKind::Protocol, e);
                }
                tracing::warn!(%run, %error, "run cannot be judged: witness fault");
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
                // A run still being written is not judged (whatever path the verifier
                // reads its target by); a writer that just died is waited out.
                let since = std::time::Instant::now();
                while let Some(ago) = shared.store.still_written(run) {
                    if since.elapsed() > store::LIVE_APPEND {
                        return refuse(
                            ErrorKind::Live,
                            format!("run {run} is still being written: its agent is connected and its last acknowledgement arrived {ago} ms ago; verify after the writer has ended (or the machine was cut)"),
                        );
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                match shared.store.read(run) {
                    Ok((bytes, torn)) => {
                        let _ = out.send(Pending::Ledger(run, bytes, torn));
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
