//! Man pages and shell completions for the plugpull binaries, generated from the
//! same clap definitions that parse their command lines, so they cannot drift.
//!
//! Each binary calls [`from_env`] first thing in `main`: with the environment
//! variable [`ENV`] set to a directory, it writes its pages and completions there
//! and exits instead of running. `scripts/release` uses this to fill the packages.
//! It is no flag on purpose: a flag would show in `--help` and could be typed into a
//! real command line.
//!
//! What one call writes into the directory, for a binary `NAME`:
//! * `man1/NAME.1`, and `man1/NAME-SUB[-SUB…].1` for every visible subcommand;
//! * `completions/NAME.bash`, `completions/_NAME` (zsh), `completions/NAME.fish`.

use clap::Command;
use clap_complete::Shell;
use std::io;
use std::path::Path;

/// The environment variable naming the output directory.
pub const ENV: &str = "PLUGPULL_GENERATE_DOCS";

/// If [`ENV`] is set, writes `cmd`'s man pages and completions into the directory it
/// names and exits the process (0 on success, 2 with the error on stderr); else
/// returns and the binary runs as usual.
pub fn from_env(cmd: impl FnOnce() -> Command) {
    let Some(dir) = std::env::var_os(ENV) else {
        return;
    };
    let cmd = cmd();
    let name = cmd.get_name().to_string();
    match write(cmd, Path::new(&dir)) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("{name}: writing man pages and completions to {dir:?}: {e}");
            std::process::exit(2);
        }
    }
}

/// Writes the man pages of `cmd` and its visible subcommands into `dir/man1` and its
/// bash, zsh and fish completions into `dir/completions`.
pub fn write(cmd: Command, dir: &Path) -> io::Result<()> {
    let man = dir.join("man1");
    let completions = dir.join("completions");
    std::fs::create_dir_all(&man)?;
    std::fs::create_dir_all(&completions)?;
    let mut cmd = cmd;
    cmd.build();
    let name = cmd.get_name().to_string();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd, &name, &completions)?;
    }
    write_pages(&cmd, &name, &man)
}

/// One page for `cmd`, named `page` (`plugpull-write-file`), then one per visible
/// subcommand, depth first.
fn write_pages(cmd: &Command, page: &str, dir: &Path) -> io::Result<()> {
    let mut named = cmd.clone().name(page.to_string());
    // clap's own `help` subcommand gets no page: its SUBCOMMANDS entry would name one.
    if named.find_subcommand("help").is_some() {
        named = named.mut_subcommand("help", |h| h.hide(true));
    }
    let mut out = Vec::new();
    clap_mangen::Man::new(named).render(&mut out)?;
    std::fs::write(dir.join(format!("{page}.1")), out)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        write_pages(sub, &format!("{page}-{}", sub.get_name()), dir)?;
    }
    Ok(())
}
