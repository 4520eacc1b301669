//! Acknowledgements on their way into a batch: one [`Ack`] as a workload hands it
//! over, and [`Gather`], the acks of the next batch. Here is everything that depends
//! on the workload between a writer's acknowledged call and the [`Acks`] the
//! listener stores: the client's reporter only moves [`Ack`]s and [`Acks`].

use super::{Acks, FileAck, FilesAck, PgAckRange, Workload};
use std::collections::HashMap;

/// One acknowledgement as a workload hands it over to the reporter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ack {
    /// A durable write of the file workload.
    File(FileAck),
    /// A step of the files workload whose last durability call returned.
    Files(FilesAck),
    /// Client `client`'s transaction `seq` committed, `ms` after the run's start.
    Pg {
        /// The pgbench client, from 0.
        client: u32,
        /// Its transaction, from 1, in order.
        seq: u64,
        /// Milliseconds from the run's start.
        ms: u32,
    },
}

/// Acks being gathered into the next batch: in arrival order per workload, with the
/// consecutive commits of one pgbench client merged into one [`PgAckRange`].
#[derive(Default)]
pub struct Gather {
    file: Vec<FileAck>,
    files: Vec<FilesAck>,
    pg: Vec<PgAckRange>,
    /// Index in `pg` of each client's last range.
    pg_at: HashMap<u32, usize>,
    /// Acks added since the last [`Gather::take`].
    n: usize,
}

impl Gather {
    /// Adds one ack.
    pub fn add(&mut self, a: Ack) {
        self.n += 1;
        match a {
            Ack::File(a) => self.file.push(a),
            Ack::Files(a) => self.files.push(a),
            Ack::Pg { client, seq, ms } => {
                if let Some(&i) = self.pg_at.get(&client) {
                    let r = &mut self.pg[i];
                    if r.last + 1 == seq {
                        r.last = seq;
                        r.ms = ms;
                        return;
                    }
                }
                self.pg_at.insert(client, self.pg.len());
                self.pg.push(PgAckRange {
                    client,
                    first: seq,
                    last: seq,
                    ms,
                });
            }
        }
    }

    /// Acks added since the last [`Gather::take`].
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether nothing was added since the last [`Gather::take`].
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The gathered acks, one [`Acks`] per workload that handed any over (none when
    /// nothing was), and an empty gather.
    pub fn take(&mut self) -> Vec<Acks> {
        let mut out = Vec::new();
        if !self.file.is_empty() {
            out.push(Acks::File(std::mem::take(&mut self.file)));
        }
        if !self.files.is_empty() {
            out.push(Acks::Files(std::mem::take(&mut self.files)));
        }
        if !self.pg.is_empty() {
            out.push(Acks::Pg(std::mem::take(&mut self.pg)));
        }
        self.pg_at.clear();
        self.n = 0;
        out
    }
}

impl Acks {
    /// No acks of `w`'s kind.
    pub fn empty_for(w: &Workload) -> Acks {
        match w {
            Workload::File(_) => Acks::File(Vec::new()),
            Workload::Files(_) => Acks::Files(Vec::new()),
            Workload::Pgbench(_) => Acks::Pg(Vec::new()),
        }
    }

    /// Writes the acks to `w` as the ack log's lines (`--ack-log`, `docs/formats.md`),
    /// one per ack: `SEQ BLOCK` (file), `CLIENT FIRST LAST` (pgbench),
    /// `SEQ FILE SIZE CONTENT_SEQ` (files).
    ///
    /// Errors: what writing to `w` returned.
    pub fn write_log(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        match self {
            Acks::File(v) => v
                .iter()
                .try_for_each(|a| writeln!(w, "{} {}", a.seq, a.block)),
            Acks::Pg(v) => v
                .iter()
                .try_for_each(|a| writeln!(w, "{} {} {}", a.client, a.first, a.last)),
            Acks::Files(v) => v
                .iter()
                .try_for_each(|a| writeln!(w, "{} {} {} {}", a.seq, a.file, a.size, a.content_seq)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_commits_of_a_client_gather_into_one_range() {
        let mut g = Gather::default();
        for (client, seq, ms) in [(0, 1, 5), (1, 1, 6), (0, 2, 7), (0, 3, 8), (1, 3, 9)] {
            g.add(Ack::Pg { client, seq, ms });
        }
        assert_eq!((g.len(), g.is_empty()), (5, false));
        let range = |client, first, last, ms| PgAckRange {
            client,
            first,
            last,
            ms,
        };
        assert_eq!(
            g.take(),
            vec![Acks::Pg(vec![
                range(0, 1, 3, 8),
                range(1, 1, 1, 6),
                range(1, 3, 3, 9)
            ])]
        );
        assert_eq!((g.len(), g.is_empty()), (0, true));
        assert!(g.take().is_empty());
    }

    #[test]
    fn each_kind_gathers_apart_and_logs_its_lines() {
        let mut g = Gather::default();
        let file = FileAck {
            seq: 7,
            block: 3,
            ms: 1,
        };
        g.add(Ack::File(file));
        g.add(Ack::Pg {
            client: 2,
            seq: 4,
            ms: 9,
        });
        let got = g.take();
        assert_eq!(got.len(), 2);
        let mut log = Vec::new();
        for a in &got {
            a.write_log(&mut log).unwrap();
        }
        assert_eq!(String::from_utf8(log).unwrap(), "7 3\n2 4 4\n");
        assert_eq!(got[0], Acks::File(vec![file]));
    }
}
