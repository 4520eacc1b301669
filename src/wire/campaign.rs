//! The campaign messages (`docs/campaign.md`): the controller creates, reads and
//! appends to a campaign the listener keeps; the agent asks what to do next.

use crate::campaign::history::{HandRun, VerifyRecord};
use crate::campaign::{Definition, Event, Instruction, RunState};
use crate::RunId;
use serde::{Deserialize, Serialize};

/// A campaign request, inside [`super::Request::Campaign`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CampaignRequest {
    /// Create a campaign; answered by `Created`. Refused when the name is taken.
    Create(Definition),
    /// Read a campaign; answered by `State`.
    Load {
        /// Its name.
        name: String,
    },
    /// Append an event (durable before the answer, `Appended`).
    Append {
        /// The campaign.
        name: String,
        /// The event.
        event: Event,
    },
    /// An agent asks what to do; answered by `Next`. The listener picks the newest
    /// campaign naming `host` that still wants cuts of it, and records a
    /// [`Event::Booted`] when `boot_id` is new for the host.
    Next {
        /// The agent's host name.
        host: String,
        /// Its boot id.
        boot_id: String,
    },
    /// What the listener knows of these runs; answered by `Runs`.
    Runs {
        /// The runs.
        runs: Vec<RunId>,
    },
    /// Keep one verify's outcome of a run (durable before the answer, `Appended` with
    /// the run's count of kept verifies). Refused for a run the listener does not know.
    RecordVerify(Box<VerifyRecord>),
    /// Every run of `host` with its kept verifies, oldest run first; answered by
    /// `History` (`plugpull verify --history`).
    History {
        /// The host name the runs' manifests give.
        host: String,
    },
}

/// A campaign answer, inside [`super::Response::Campaign`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CampaignResponse {
    /// The campaign was created (durably).
    Created,
    /// A campaign's definition and every event, oldest first.
    State {
        /// The plan.
        definition: Definition,
        /// The events.
        events: Vec<Event>,
    },
    /// The event is durable; its position (0-based) in the campaign.
    Appended {
        /// Position.
        index: u64,
    },
    /// What the agent does next, or `None` when no campaign names its host.
    Next(Option<Instruction>),
    /// One state per asked run, in order.
    Runs(Vec<RunState>),
    /// The runs of a host with their verifies, oldest run first.
    History(Vec<HandRun>),
}
