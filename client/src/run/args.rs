//! The options every write workload with writer threads of its own takes
//! (`write file`, `write files`), flattened into each one's arguments.

use crate::reporter::ReporterOptions;
use plugpull::units::parse_duration;
use std::time::Duration;

/// How long a run lasts when neither `-T` nor a count (`--writes`, `--steps`,
/// `--transactions`) is given: the same for every workload.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(30);

/// Options shared by `plugpull write file` and `plugpull write files`. The count
/// that ends a run instead of `-T` (`--writes`, `--steps`) is the workload's own and
/// conflicts with `-T`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// How long to run, e.g. 30s or 5m (default 30s).
    #[arg(long, short = 'T', value_parser = parse_duration, allow_hyphen_values = true)]
    pub duration: Option<Duration>,
    /// Print a progress line every SECONDS.
    #[arg(short = 'P', long = "progress", value_parser = parse_duration)]
    pub progress: Option<Duration>,
    /// Seed of the run's random choices (`write file`: the block order; `write
    /// files`: the step schedule). Default: random.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print the summary as one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Use a target that holds data that is not a plugpull run's (`write file`: it is
    /// overwritten; `write files`: a non-empty directory, whose other entries are left
    /// alone).
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub reporter: ReporterOptions,
}
