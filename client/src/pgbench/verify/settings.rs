//! The server's durability settings read again at verify time.
//!
//! `write` checks them only at the run's start (see `crate::pg`), so a
//! change made during the run (`ALTER SYSTEM SET fsync = off` and a reload) leaves
//! the commits after it recorded as promised. verify cannot tell when a change came;
//! it says what the server promises now, and leaves the verdict to the counts.

use crate::pg::{self, describe};
use plugpull::report::PgReport;
use tokio_postgres::Client;

/// What the summary line of a run that started promised ends with when the server
/// promises no durability now.
pub const WARNING: &str = "; warning: the server no longer promises durability (see the \
                           note): losses after a change during the run are the \
                           configuration's";

/// For a run that started with durability promised (`rep.promised`): adds a note to
/// `rep.notes` when the server's settings now promise none (`fsync=off`,
/// `synchronous_commit=off`, as [`pg::unsafe_settings`] reads them), or when they
/// cannot be read. True when they were read and promise none: the summary then ends
/// with [`WARNING`].
pub async fn check(client: &Client, rep: &mut PgReport) -> bool {
    if !rep.promised {
        return false;
    }
    match pg::read_settings(client).await {
        Ok(now) => {
            let list = pg::unsafe_settings(&now);
            if list.is_empty() {
                return false;
            }
            rep.notes.push(format!(
                "the server now has {}, though the run started with a configuration that \
                 promised durability: if it changed during the run, the commits acknowledged \
                 after the change were recorded as promised but were not, and a loss among \
                 them is the configuration's, not the storage's",
                list.join(", ")
            ));
            true
        }
        Err(e) => {
            rep.notes.push(format!(
                "the server's settings could not be read now ({}): whether they still promise \
                 durability is not known",
                describe(&e)
            ));
            false
        }
    }
}
