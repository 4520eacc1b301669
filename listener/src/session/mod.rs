//! One connection, from handshake to close.
//!
//! * Handshake, under [`Context::handshake_timeout`], with no read buffer and frames
//!   of at most [`HANDSHAKE_MAX_FRAME`] bytes: `Hello` (version check) → `Challenge`
//!   (the listener's nonce and proof) → `Auth` (the agent's proof) → `Welcome`, once
//!   the connection has one of the [`ConnectionCap`]'s slots.
//! * Requests, every one sealed with the session's MAC (see `plugpull::auth`), each
//!   within [`Context::idle_timeout`]. A connection binds to one run (`StartRun` or
//!   `ResumeRun`); appends must name that run.
//! * Answers, in request order, from a task of their own ([`answer`]): acks are
//!   pipelined, so the reading half hands each batch to the run's writer and queues a
//!   [`Pending`] answer; the writing half sends answers in order as the writer
//!   confirms them.
//!
//! A request that breaks a rule is answered with an `Error` and the connection is
//! closed; the reason is returned for the log.

mod answer;

use crate::limits::{ConnectionCap, Handshake};
use crate::store::{Append, RunHandle, Store, StoreError, LIVE_APPEND};
use answer::{answer_in_order, Pending};
use plugpull::auth::{Direction, Secret, Session};
use plugpull::campaign::history::HandRun;
use plugpull::wire::{
    self, CampaignRequest, CampaignResponse, ErrorKind, FrameError, Request, Response,
    HANDSHAKE_MAX_FRAME, MAX_FRAME, PROTOCOL_VERSION,
};
use plugpull::RunId;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, OwnedSemaphorePermit};

/// What every connection shares.
pub struct Context {
    /// The ledgers.
    pub store: Arc<Store>,
    /// The campaigns.
    pub campaigns: Arc<crate::campaigns::Campaigns>,
    /// The kept verifies (`verify --history`).
    pub verified: Arc<crate::verified::Verified>,
    /// The shared secret (when none, proofs use the empty key: agents without one pass).
    pub secret: Secret,
    /// Time a new connection has to complete its handshake.
    pub handshake_timeout: Duration,
    /// Time an authenticated connection may stay silent.
    pub idle_timeout: Duration,
    /// The cap on authenticated connections.
    pub cap: ConnectionCap,
}

/// Why a connection was dropped (logged by the accept loop).
#[derive(Debug)]
pub enum Dropped {
    /// The handshake budget was full and this was its oldest handshake.
    Evicted,
    /// The peer broke a rule, the stream failed, or the run's writer failed.
    Broke(String),
}

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dropped::Evicted => f.write_str(
                "evicted: the handshake budget is full and this was its oldest handshake",
            ),
            Dropped::Broke(why) => f.write_str(why),
        }
    }
}

/// An error to answer with before closing the connection.
struct Refusal {
    kind: ErrorKind,
    message: String,
}

impl Refusal {
    fn new(kind: ErrorKind, message: impl Into<String>) -> Refusal {
        Refusal {
            kind,
            message: message.into(),
        }
    }
}

impl From<StoreError> for Refusal {
    fn from(e: StoreError) -> Refusal {
        Refusal::new(e.kind(), e.to_string())
    }
}

/// Serves one connection until it closes or breaks a rule. `ticket` is its place in
/// the handshake budget, given up once the handshake is over.
pub async fn connection(
    sock: TcpStream,
    ctx: &Context,
    mut ticket: Handshake,
) -> Result<(), Dropped> {
    let (mut rd, mut wr) = sock.into_split();
    let mut buf = Vec::new();
    let hs = tokio::select! {
        r = handshake(&mut rd, &mut wr, &mut buf, ctx) => r.map_err(Dropped::Broke)?,
        _ = ticket.evicted() => return Err(Dropped::Evicted),
    };
    ticket.leave();
    let Some((session, _permit)) = hs else {
        return Ok(());
    };
    let mut rd = BufReader::with_capacity(64 << 10, rd);
    let wr = BufWriter::new(wr);

    // Requests. Answers to appends are sent, in order, by a separate task.
    let (out_tx, out_rx) = mpsc::unbounded_channel::<Pending>();
    let sender = tokio::spawn(answer_in_order(wr, session.send, out_rx));
    let mut requests = Requests {
        ctx,
        out: &out_tx,
        bound: None,
    };
    let result = requests.serve(&mut rd, &mut buf, session.recv).await;
    drop(out_tx);
    let sent = sender.await.unwrap_or_else(|e| Err(e.to_string()));
    result.and(sent).map_err(Dropped::Broke)
}

/// Reads one request of at most `max` bytes, checking its seal when `open` is given,
/// bounded by `limit`. `Ok(None)` = the peer closed.
async fn next_request<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    limit: Duration,
    max: u32,
    open: Option<&mut Direction>,
) -> Result<Option<Request>, Refusal> {
    let p = ErrorKind::Protocol;
    match tokio::time::timeout(
        limit,
        wire::read_frame_with::<Request, _>(r, buf, max, open),
    )
    .await
    {
        Err(_) => Err(Refusal::new(
            p,
            format!("silent for {} s", limit.as_secs_f64()),
        )),
        Ok(Err(FrameError::Io(e))) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Err(Refusal::new(p, "closed inside a frame"))
        }
        Ok(Err(e @ FrameError::Mac(_))) => Err(Refusal::new(ErrorKind::Mac, e.to_string())),
        Ok(Err(e)) => Err(Refusal::new(p, e.to_string())),
        Ok(Ok(r)) => Ok(r),
    }
}

/// Sends `msg` and flushes.
async fn send<W: AsyncWrite + Unpin>(w: &mut W, msg: &Response) -> Result<(), String> {
    wire::write_frame(w, msg).await.map_err(|e| e.to_string())?;
    w.flush().await.map_err(|e| e.to_string())
}

/// Answers (unsealed, during the handshake) with `r`'s error; gives its message back.
async fn refuse<W: AsyncWrite + Unpin>(w: &mut W, r: Refusal) -> String {
    let _ = wire::write_frame(
        w,
        &Response::Error {
            kind: r.kind,
            message: r.message.clone(),
        },
    )
    .await;
    let _ = w.flush().await;
    r.message
}

/// The handshake; `Ok(None)` = the peer closed before saying anything. On success, the
/// session and the connection's slot.
async fn handshake<R, W>(
    rd: &mut R,
    wr: &mut W,
    buf: &mut Vec<u8>,
    ctx: &Context,
) -> Result<Option<(Session, OwnedSemaphorePermit)>, String>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let hs = ctx.handshake_timeout;
    let hello = match next_request(rd, buf, hs, HANDSHAKE_MAX_FRAME, None).await {
        Ok(Some(h)) => h,
        Ok(None) => return Ok(None),
        Err(r) => return Err(refuse(wr, r).await),
    };
    let Request::Hello {
        version,
        nonce: client_nonce,
    } = hello
    else {
        let r = Refusal::new(ErrorKind::Protocol, "expected Hello as the first message");
        return Err(refuse(wr, r).await);
    };
    if version != PROTOCOL_VERSION {
        let msg = format!("protocol version mismatch: client speaks {version}, listener speaks {PROTOCOL_VERSION}");
        return Err(refuse(wr, Refusal::new(ErrorKind::Version, msg)).await);
    }
    let nonce: [u8; 32] = rand::random();
    let proof = ctx.secret.listener_proof(&client_nonce, &nonce);
    let challenge = Response::Challenge {
        version: PROTOCOL_VERSION,
        nonce,
        proof,
    };
    send(wr, &challenge).await?;
    let auth = match next_request(rd, buf, hs, HANDSHAKE_MAX_FRAME, None).await {
        Ok(a) => a,
        Err(r) => return Err(refuse(wr, r).await),
    };
    let Some(Request::Auth { proof }) = auth else {
        let r = Refusal::new(ErrorKind::Protocol, "expected Auth after Challenge");
        return Err(refuse(wr, r).await);
    };
    if !ctx.secret.check_agent_proof(&nonce, &client_nonce, &proof) {
        let msg = "authentication failed: wrong or missing secret";
        return Err(refuse(wr, Refusal::new(ErrorKind::Auth, msg)).await);
    }
    let permit = match ctx.cap.try_admit() {
        Ok(p) => p,
        Err(msg) => return Err(refuse(wr, Refusal::new(ErrorKind::Busy, msg)).await),
    };
    send(wr, &Response::Welcome).await?;
    Ok(Some((
        ctx.secret.listener_session(&client_nonce, &nonce),
        permit,
    )))
}

/// The reading half after the handshake: the connection's requests, in order.
struct Requests<'a> {
    ctx: &'a Context,
    /// Answers, to the writing half.
    out: &'a mpsc::UnboundedSender<Pending>,
    /// The run this connection is bound to, once `StartRun` or `ResumeRun` bound it.
    bound: Option<Arc<RunHandle>>,
}

impl Requests<'_> {
    /// Serves requests until the peer closes (`Ok`) or one is refused (the refusal is
    /// queued as the last answer and its message returned).
    async fn serve<R: AsyncRead + Unpin>(
        &mut self,
        rd: &mut R,
        buf: &mut Vec<u8>,
        mut open: Direction,
    ) -> Result<(), String> {
        let idle = self.ctx.idle_timeout;
        loop {
            let served = match next_request(rd, buf, idle, MAX_FRAME, Some(&mut open)).await {
                Ok(Some(req)) => self.one(req).await,
                Ok(None) => return Ok(()),
                Err(r) => Err(r),
            };
            if let Err(r) = served {
                let _ = self.out.send(Pending::Now(
                    Response::Error {
                        kind: r.kind,
                        message: r.message.clone(),
                    },
                    true,
                ));
                return Err(r.message);
            }
        }
    }

    /// Serves one request.
    async fn one(&mut self, req: Request) -> Result<(), Refusal> {
        match req {
            Request::StartRun { manifest } => {
                self.unbound("StartRun")?;
                let h = self.ctx.store.create(*manifest)?;
                let token = self.ctx.store.token(h.run);
                self.now(Response::RunStarted { run: h.run, token });
                self.bound = Some(h);
            }
            Request::ResumeRun { run, token } => self.resume(run, &token)?,
            Request::Acks { run, batch } => {
                let n = batch.batch;
                self.append(run, Append::Batch(batch), n)?;
            }
            Request::Finish { run, summary } => {
                let (issued, acknowledged) = (summary.issued, summary.acknowledged);
                self.append(run, Append::Finished(summary), 0)?;
                tracing::info!(%run, issued, acknowledged, "run finished");
            }
            Request::DeviceError { run, end } => {
                let error = end.error.clone();
                self.append(run, Append::DeviceError(end), 0)?;
                tracing::warn!(%run, %error, "run ended by a device error");
            }
            Request::Invalidate { run, error } => {
                self.append(run, Append::Invalid(error.clone()), 0)?;
                tracing::warn!(%run, %error, "run cannot be judged: witness fault");
            }
            Request::FetchLedger { run, host } => self.fetch_ledger(run, &host).await?,
            Request::Campaign(req) => {
                let answer = self.campaign(*req)?;
                self.now(Response::Campaign(Box::new(answer)));
            }
            Request::Hello { .. } | Request::Auth { .. } => {
                let msg = "handshake message after the handshake";
                return Err(Refusal::new(ErrorKind::Protocol, msg));
            }
        }
        Ok(())
    }

    /// A campaign request. Appends `fdatasync` under the campaigns' lock; they are
    /// rare (a few per cut), so the worker thread blocks for them.
    fn campaign(&self, req: CampaignRequest) -> Result<CampaignResponse, Refusal> {
        let c = &self.ctx.campaigns;
        let refuse = |m: String| Refusal::new(ErrorKind::Campaign, m);
        Ok(match req {
            CampaignRequest::Create(d) => {
                tokio::task::block_in_place(|| c.create(d)).map_err(refuse)?;
                CampaignResponse::Created
            }
            CampaignRequest::Load { name } => {
                let camp = c.load(&name).map_err(refuse)?;
                CampaignResponse::State {
                    definition: camp.definition,
                    events: camp.events,
                }
            }
            CampaignRequest::Append { name, event } => {
                let index =
                    tokio::task::block_in_place(|| c.append(&name, event)).map_err(refuse)?;
                CampaignResponse::Appended { index }
            }
            CampaignRequest::Next { host, boot_id } => {
                let now = crate::store::now_ms();
                let next =
                    tokio::task::block_in_place(|| c.next(&host, &boot_id, now)).map_err(refuse)?;
                CampaignResponse::Next(next)
            }
            CampaignRequest::Runs { runs } => CampaignResponse::Runs(
                runs.into_iter()
                    .map(|r| self.ctx.store.run_state(r))
                    .collect(),
            ),
            CampaignRequest::RecordVerify(r) => {
                if !self.ctx.store.run_state(r.run).known {
                    return Err(Refusal::new(
                        ErrorKind::UnknownRun,
                        format!("no run {} in this listener's ledger", r.run),
                    ));
                }
                let n = tokio::task::block_in_place(|| self.ctx.verified.record(&r))
                    .map_err(|e| Refusal::new(ErrorKind::Io, e))?;
                CampaignResponse::Appended { index: n }
            }
            CampaignRequest::History { host } => {
                CampaignResponse::History(tokio::task::block_in_place(|| {
                    self.ctx
                        .store
                        .runs_of(&host)
                        .into_iter()
                        .map(|(run, created_unix_ms, ended)| HandRun {
                            run,
                            created_unix_ms,
                            ended,
                            campaign: c.campaign_of(run),
                            verifies: self.ctx.verified.of(run),
                        })
                        .collect()
                }))
            }
        })
    }

    /// Queues an answer that is ready now.
    fn now(&self, msg: Response) {
        let _ = self.out.send(Pending::Now(msg, false));
    }

    /// Refuses `what` on a connection that already has a run.
    fn unbound(&self, what: &str) -> Result<(), Refusal> {
        match self.bound {
            Some(_) => Err(Refusal::new(
                ErrorKind::Protocol,
                format!("{what} on a connection that already has a run"),
            )),
            None => Ok(()),
        }
    }

    /// `ResumeRun`: checks the run's token, binds to its writer, and answers `Resumed`
    /// with its highest durable batch once everything queued before is durable.
    fn resume(&mut self, run: RunId, token: &[u8; 32]) -> Result<(), Refusal> {
        self.unbound("ResumeRun")?;
        if !self.ctx.store.check_token(run, token) {
            return Err(Refusal::new(
                ErrorKind::Auth,
                format!("ResumeRun for run {run} without its token: only the agent that started a run may resume it"),
            ));
        }
        let h = self.ctx.store.handle(run)?;
        let rx = h.append(Append::Barrier);
        let _ = self.out.send(Pending::Confirm {
            run,
            rx,
            resume: true,
            batch: 0,
        });
        self.bound = Some(h);
        Ok(())
    }

    /// Queues `what` on the connection's run (which must be `run`); the answer,
    /// `Confirmed{batch}`, goes out once the ledger holds it durably.
    fn append(&self, run: RunId, what: Append, batch: u64) -> Result<(), Refusal> {
        let h = match &self.bound {
            Some(h) if h.run == run => h,
            Some(h) => {
                let msg = format!(
                    "message for run {run} on a connection bound to run {}",
                    h.run
                );
                return Err(Refusal::new(ErrorKind::Protocol, msg));
            }
            None => {
                let msg = format!("message for run {run} before StartRun or ResumeRun");
                return Err(Refusal::new(ErrorKind::Protocol, msg));
            }
        };
        let rx = h.append(what);
        let _ = self.out.send(Pending::Confirm {
            run,
            rx,
            resume: false,
            batch,
        });
        Ok(())
    }

    /// `FetchLedger`: `run`, or the latest run of `host`, once it is no longer being
    /// written (a writer that just died is waited out, up to [`LIVE_APPEND`]).
    async fn fetch_ledger(&self, run: Option<RunId>, host: &str) -> Result<(), Refusal> {
        let store = &self.ctx.store;
        let run = match run {
            Some(r) => r,
            None => store.latest_of(host)?.ok_or_else(|| {
                Refusal::new(
                    ErrorKind::UnknownRun,
                    format!("no run of host {host:?} in this listener's ledger"),
                )
            })?,
        };
        // A run still being written is not judged (whatever path the verifier reads
        // its target by); a writer that just died is waited out.
        let since = Instant::now();
        while let Some(ago) = store.still_written(run) {
            if since.elapsed() > LIVE_APPEND {
                return Err(Refusal::new(
                    ErrorKind::Live,
                    format!("run {run} is still being written: its agent is connected and was last heard from {ago} ms ago (its acknowledgements, or its heartbeat every 100 ms); verify after the writer has ended (or the machine was cut)"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (ledger, torn) = store.open_ledger(run)?;
        let stopped = store.failure(run);
        let _ = self.out.send(Pending::Ledger(run, ledger, torn, stopped));
        Ok(())
    }
}
