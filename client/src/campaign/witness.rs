//! The controller's side of the listener: one campaign, this controller's id, and
//! requests retried while the listener cannot be reached.

use super::call;
use crate::Error;
use plugpull::auth::Secret;
use plugpull::campaign::{Campaign, Event};
use plugpull::wire::{CampaignRequest, CampaignResponse};
use std::time::{Duration, Instant};

/// How long the controller keeps trying a listener it cannot reach before it stops.
pub const UNREACHABLE_LIMIT: Duration = Duration::from_secs(600);

/// Where the listener is, and who this controller is.
#[derive(Clone)]
pub struct Witness {
    /// Listener address.
    pub addr: String,
    /// The shared secret.
    pub secret: Secret,
    /// The campaign.
    pub name: String,
    /// This controller's id ([`Event::Controller`]).
    pub id: u64,
    /// `--json`: the cut lines go to stderr, stdout holds only the JSON object.
    pub json: bool,
}

impl Witness {
    /// Prints a progress line: on stdout, or on stderr under `--json`.
    pub fn say(&self, line: &str) {
        if self.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }

    /// One request, retried while the listener cannot be reached (a connection that
    /// was never made sent nothing, so a retry never appends twice), for up to
    /// [`UNREACHABLE_LIMIT`], saying so every 30 s.
    pub async fn call(&self, req: CampaignRequest) -> Result<CampaignResponse, Error> {
        let since = Instant::now();
        let mut said: Option<Instant> = None;
        loop {
            match call(&self.addr, &self.secret, req.clone()).await {
                Err(e @ Error::Unreachable { .. }) => {
                    if since.elapsed() > UNREACHABLE_LIMIT {
                        return Err(e);
                    }
                    if said.is_none_or(|t| t.elapsed() > Duration::from_secs(30)) {
                        eprintln!("plugpull: {e}; retrying for up to {} min (the machines stay as they are)", UNREACHABLE_LIMIT.as_secs() / 60);
                        said = Some(Instant::now());
                    }
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
                r => return r,
            }
        }
    }

    /// Appends `event` (durable when this returns).
    pub async fn append(&self, event: Event) -> Result<(), Error> {
        let req = CampaignRequest::Append {
            name: self.name.clone(),
            event,
        };
        match self.call(req).await? {
            CampaignResponse::Appended { .. } => Ok(()),
            other => Err(Error::Msg(format!(
                "listener answered Append with {other:?}"
            ))),
        }
    }

    /// The campaign, whoever controls it.
    pub async fn load_any(&self) -> Result<Campaign, Error> {
        let req = CampaignRequest::Load {
            name: self.name.clone(),
        };
        match self.call(req).await? {
            CampaignResponse::State { definition, events } => Ok(Campaign { definition, events }),
            other => Err(Error::Msg(format!("listener answered Load with {other:?}"))),
        }
    }

    /// The campaign, after checking that no newer controller took over.
    ///
    /// Errors: the campaign cannot be read, or another `campaign run` started since.
    pub async fn load(&self) -> Result<Campaign, Error> {
        let c = self.load_any().await?;
        if c.controller() != Some(self.id) {
            return Err(Error::Msg(format!(
                "another `plugpull campaign run --name {}` started: this one stops so that only one controller cuts",
                self.name
            )));
        }
        Ok(c)
    }
}
