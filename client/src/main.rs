//! `plugpull`: the agent (`write`) and the verifier (`verify`) that run on the
//! machine under test. Exit codes everywhere: 0 = nothing acknowledged was lost or
//! damaged (or the job succeeded), 1 = findings, 2 = could not do the job (the cause
//! is printed on stderr).

use clap::{Parser, Subcommand};
use plugpull::auth::Secret;
use plugpull_client::net::ListenerArgs;
use plugpull_client::{
    agent, campaign, demo, file, files, pgbench, power, probe, report, verify, Error,
};
use std::process::ExitCode;

/// The static musl builds of `scripts/release` allocate with mimalloc: musl's own
/// allocator takes one lock for every allocation, which threads contend on
/// (docs/performance.md, "Release binaries"). Other builds keep the C library's.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Proves or disproves that a storage stack keeps every write it acknowledged
/// across a power cut.
///
/// Start `plugpull-listener` on a witness host that keeps power; run `plugpull write`
/// on the machine under test; pull the plug; reboot; run `plugpull verify`.
///
/// Examples:
///   plugpull write file --listener witness:7458 --secret-file /etc/plugpull.secret --target /mnt/test/pp.dat --size 1GiB --jobs 4 --duration 5m -P 5
///   plugpull write files --listener witness:7458 --secret-file /etc/plugpull.secret --target /mnt/test/ppdir --jobs 4 --duration 5m
///   plugpull write pgbench --listener witness:7458 --secret-file /etc/plugpull.secret --dsn 'host=/tmp dbname=bench' --canary-dir /var/tmp --init --scale 10 --clients 8 -T 10m
///   plugpull verify --listener witness:7458 --secret-file /etc/plugpull.secret
///   plugpull verify --listener witness:7458 --secret-file /etc/plugpull.secret --history   # every run of this host judged as a cut, rolled up
///   plugpull verify --listener witness:7458 --secret-file /etc/plugpull.secret --run 3f9c0e12a4b5d678 --target /dev/sdb --json
///   plugpull report --listener witness:7458 --secret-file /etc/plugpull.secret --run 3f9c0e12a4b5d678 --html run.html
///   plugpull probe --target /mnt/test/pp.dat --seconds 5
///   plugpull power --power 'ipmi://admin@bmc1?password-file=/etc/plugpull/bmc.pw' status
///   plugpull demo            # the whole procedure on this machine, no hardware needed
///
/// Exit codes: 0 nothing acknowledged lost or damaged, 1 findings, 2 could not do the job.
#[derive(Parser, Debug)]
#[command(name = "plugpull", version, verbatim_doc_comment)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// With this environment variable set to `1`, `plugpull` only parses its command line:
/// it prints `arguments OK` and exits 0 without doing anything. The test that runs
/// every documented example sets it. It is no flag on purpose: a flag could be typed
/// into a real `plugpull verify` line and make it exit 0 without verifying anything.
const CHECK_ARGS_ENV: &str = "PLUGPULL_CHECK_ARGS";

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Drive a workload and report every acknowledgement to the listener.
    Write {
        #[command(subcommand)]
        workload: WriteCmd,
    },
    /// Rehearse the whole procedure on this machine: listener, writer, a cut, verify.
    ///
    /// Two simulated disks (plugpull-simfs: an honest one and one that lies about
    /// fsync), each written, cut and verified; with PostgreSQL installed, pgbench too.
    /// Needs root (FUSE). Exit 0: the honest disk passed and the lying one was
    /// caught; 1: not so; 2: it could not run.
    ///
    /// Examples:
    ///   plugpull demo
    ///   plugpull demo --cuts 5 --report /tmp/demo.html
    ///   plugpull demo --vm       # three QEMU machines: honest PASS, lying FAIL, clean shutdown NOT MEASURED
    #[command(verbatim_doc_comment)]
    Demo {
        #[command(flatten)]
        args: demo::DemoArgs,
    },
    /// After the cut and reboot: check what survived against the listener's ledger.
    ///
    /// Reads the target from the medium (or asks the database) and compares it with
    /// every acknowledgement the listener recorded. Exit 0: PASS, nothing
    /// acknowledged was lost or damaged, and the cut could have shown a loss; 1: FAIL,
    /// findings (each names its evidence); 2: NOT MEASURED or could not verify (the
    /// reason is printed: no cut while the run wrote, an idle run, a canary that
    /// survived, PostgreSQL not up).
    ///
    /// Examples:
    ///   plugpull verify --listener witness:7458 --secret-file /etc/plugpull.secret --run 3f9c0e12a4b5d678
    ///   plugpull verify --listener witness:7458 --secret-file /etc/plugpull.secret --run 3f9c0e12a4b5d678 --target /dev/sdb --json
    ///   plugpull verify --listener witness:7458 --secret-file /etc/plugpull.secret --run 3f9c0e12a4b5d678 --dsn 'host=/tmp dbname=bench' --pgdata /srv/pg
    ///   plugpull verify --listener witness:7458 --secret-file /etc/plugpull.secret --history
    #[command(verbatim_doc_comment)]
    Verify {
        #[command(flatten)]
        listener: ListenerArgs,
        #[command(flatten)]
        args: verify::VerifyArgs,
        #[command(flatten)]
        pg: pgbench::PgVerifyArgs,
    },
    /// Write a run's verdict, or a campaign's cuts and statistics, as a self-contained HTML page with charts (docs/report.md).
    ///
    /// Judges the run exactly as `verify` does (same arguments) and writes the verdict
    /// table, the acknowledgement rate, the lost-write lag histogram, a map of the
    /// target (file runs), tps and lost commits per client (pgbench runs) and the stack
    /// under test into --html; --markdown adds a short summary for a ticket. Exit codes
    /// as verify's: 0 nothing lost, 1 findings, 2 could not do the job.
    ///
    /// With --campaign NAME: the campaign's plan, a strip of every cut coloured by
    /// outcome, the roll-up with its confidence bound, the lag of each failed cut's
    /// oldest lost write, the per-cut table and the configurations, from the campaign's
    /// record (exit 0 every valid cut passed, 1 one failed, 2 no valid cut).
    /// --junit FILE writes one test case per run or cut.
    ///
    /// Examples:
    ///   plugpull report --listener witness:7458 --secret-file /etc/plugpull.secret --run 3f9c0e12a4b5d678 --html run.html
    ///   plugpull report --listener witness:7458 --secret-file /etc/plugpull.secret --run 3f9c0e12a4b5d678 --target /dev/sdb --html run.html --markdown run.md
    ///   plugpull report --listener witness:7458 --secret-file /etc/plugpull.secret --run 3f9c0e12a4b5d678 --dsn 'host=/tmp dbname=bench' --html pg.html
    ///   plugpull report --listener witness:7458 --secret-file /etc/plugpull.secret --campaign nvme-plp --html nvme-plp.html --junit nvme-plp.xml --markdown nvme-plp.md
    #[command(verbatim_doc_comment)]
    // verify's --json, --show and --history mean nothing here (--json and --history
    // are refused): not in --help.
    #[command(
        mut_arg("json", |a| a.hide(true)),
        mut_arg("show", |a| a.hide(true)),
        mut_arg("history", |a| a.hide(true))
    )]
    Report {
        #[command(flatten)]
        listener: ListenerArgs,
        #[command(flatten)]
        args: verify::VerifyArgs,
        #[command(flatten)]
        pg: pgbench::PgVerifyArgs,
        #[command(flatten)]
        out: report::ReportArgs,
    },
    /// Show the storage stack under a target and what in it can make fsync a lie.
    ///
    /// Layer by layer from the mount down to each disk; with --dsn, a PostgreSQL
    /// server's settings and its data directory (the target when --target is not
    /// given). Warnings never fail (exit 0; 2 when it could not probe, or --seconds
    /// could not run).
    ///
    /// Examples:
    ///   plugpull probe --target /mnt/test/pp.dat
    ///   plugpull probe --target /mnt/test/pp.dat --seconds 5 --json
    ///   plugpull probe --dsn 'host=/tmp dbname=bench' --seconds 5
    ///   plugpull probe --target /dev/sdX --seconds 5 --force   # writes its first 4 KiB, then restores them
    #[command(verbatim_doc_comment)]
    Probe {
        #[command(flatten)]
        args: probe::ProbeArgs,
    },
    /// Turn a machine, PDU outlet or smart plug off or on, or read its power state.
    ///
    /// Through the cut driver a campaign will use (docs/power.md). Exit 0 done, 2 not.
    ///
    /// Examples:
    ///   plugpull power --power 'ipmi://admin@bmc1?password-file=/etc/plugpull/bmc.pw' status
    ///   plugpull power --power 'redfish://root@bmc1/redfish/v1/Systems/1?password-file=/etc/plugpull/bmc.pw&insecure' off
    ///   plugpull power --power 'apc-snmp://pdu1/4?community-file=/etc/plugpull/pdu.community' on
    ///   plugpull power --power tasmota://plug1 status --json
    ///   plugpull power --power shelly://plug2/0 off
    ///   plugpull power --power 'exec:/usr/local/bin/relay {action}' status
    #[command(verbatim_doc_comment)]
    Power {
        #[command(flatten)]
        args: power::PowerArgs,
    },
    /// Many power cuts, unattended: create a campaign, run it, show its cuts.
    Campaign {
        #[command(subcommand)]
        cmd: campaign::CampaignCmd,
    },
    /// The service on a machine under test: runs and verifies what a campaign says.
    ///
    /// Writes only the targets and databases its --config lists (docs/campaign.md);
    /// runs until stopped. Started at boot by plugpull-agent.service (installed by the package).
    /// Exit 0 when stopped (SIGTERM, Ctrl-C); 2 when it cannot start (its
    /// configuration, the listener, the secret).
    ///
    /// Example: plugpull agent --listener witness:7458 --secret-file /etc/plugpull.secret --config /etc/plugpull/agent.toml
    #[command(verbatim_doc_comment)]
    Agent {
        #[command(flatten)]
        args: agent::AgentArgs,
    },
}

#[derive(Subcommand, Debug)]
enum WriteCmd {
    /// Write checksummed blocks to a file or block device.
    ///
    /// Exit 0: the run ended as planned (-T, --writes) or was cut; 1: it ended by a
    /// device error (a write or durability call failed: the drive lost power, went
    /// away or filled up), which is the cut: verify the run; 2: it could not run.
    ///
    /// Example: plugpull write file --listener witness:7458 --secret-file /etc/plugpull.secret --target /mnt/test/pp.dat --size 1GiB -j 4 -T 5m -P 5
    File {
        #[command(flatten)]
        listener: ListenerArgs,
        #[command(flatten)]
        args: file::WriteArgs,
    },
    /// Create, append, replace, truncate and unlink small files; each step is acknowledged once its last fsync returned.
    ///
    /// Which names, sizes and contents survive a cut: docs/files.md.
    /// Exit 0: the run ended as planned or was cut; 1: it ended by a device error,
    /// which is the cut: verify the run; 2: it could not run.
    ///
    /// Example: plugpull write files --listener witness:7458 --secret-file /etc/plugpull.secret --target /mnt/test/ppdir -j 4 --files 256 -T 5m -P 5
    Files {
        #[command(flatten)]
        listener: ListenerArgs,
        #[command(flatten)]
        args: files::WriteArgs,
    },
    /// Run pgbench's TPC-B transactions; each successful COMMIT is an acknowledgement.
    ///
    /// Exit 0: the run ended (-T, -t, or the server went away: the cut; verify the
    /// run); 2: it could not run (no server, unsafe settings without
    /// --allow-unsafe-config, the listener unreachable).
    ///
    /// Example: plugpull write pgbench --listener witness:7458 --secret-file /etc/plugpull.secret --dsn 'host=/tmp dbname=bench' --canary-dir /var/tmp --init -s 10 -c 8 -T 10m -P 5
    Pgbench {
        #[command(flatten)]
        listener: ListenerArgs,
        #[command(flatten)]
        args: pgbench::WriteArgs,
    },
}

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`plugpull verify | head`), as Unix tools do.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    plugpull_docgen::from_env(<Cli as clap::CommandFactory>::command);
    let cli = Cli::parse();
    if std::env::var_os(CHECK_ARGS_ENV).is_some_and(|v| v == "1") {
        println!("arguments OK");
        return ExitCode::SUCCESS;
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PLUGPULL_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = rt.block_on(run(cli));
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("plugpull: {e}");
            ExitCode::from(2)
        }
    }
}

fn secret(l: &ListenerArgs) -> Result<Secret, Error> {
    l.secret()
}

async fn run(cli: Cli) -> Result<bool, Error> {
    match cli.cmd {
        Cmd::Write {
            workload: WriteCmd::File { listener, args },
        } => file::write(&args, &listener.listener, &secret(&listener)?).await,
        Cmd::Write {
            workload: WriteCmd::Files { listener, args },
        } => files::write(&args, &listener.listener, &secret(&listener)?).await,
        Cmd::Write {
            workload: WriteCmd::Pgbench { listener, args },
        } => pgbench::write(&args, &listener.listener, &secret(&listener)?)
            .await
            .map(|_| true),
        Cmd::Demo { args } => demo::demo(&args).await,
        Cmd::Probe { args } => probe::command(&args).await,
        Cmd::Power { args } => power::command(&args),
        Cmd::Campaign { cmd } => campaign::command(&cmd).await,
        Cmd::Agent { args } => agent::agent(&args).await,
        Cmd::Report {
            listener,
            args,
            pg,
            out,
        } => report::command(&listener, &args, &pg, &out).await,
        Cmd::Verify { listener, args, pg } => {
            verify::command(&args, &listener.listener, secret(&listener), &pg).await
        }
    }
}
