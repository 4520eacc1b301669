//! The verifies this listener keeps (`plugpull verify --history`): one file per
//! verify, `<data-dir>/verified/<run>-<n>.json` (`n` from 1 per run), the
//! [`VerifyRecord`] as JSON. Each is written to a temporary file, `fsync`ed, renamed
//! into place and the directory `fsync`ed before it is answered, so a crash leaves a
//! whole record or none (a leftover `.tmp` is ignored and removed at start).

use plugpull::campaign::history::VerifyRecord;
use plugpull::RunId;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The verified-records directory of one data directory.
pub struct Verified {
    dir: PathBuf,
    /// Held while a record is numbered and written.
    lock: Mutex<()>,
}

fn io(what: &str, path: &Path, e: std::io::Error) -> String {
    format!("{what} {}: {e}", path.display())
}

impl Verified {
    /// Opens `<data_dir>/verified` (created if missing), removing leftover temporary
    /// files.
    ///
    /// Errors: the directory cannot be created or read.
    pub fn open(data_dir: &Path) -> Result<Verified, String> {
        let dir = data_dir.join("verified");
        std::fs::create_dir_all(&dir).map_err(|e| io("cannot create", &dir, e))?;
        for ent in std::fs::read_dir(&dir).map_err(|e| io("cannot read", &dir, e))? {
            let path = ent.map_err(|e| io("cannot read", &dir, e))?.path();
            if path.extension().is_some_and(|x| x == "tmp") {
                let _ = std::fs::remove_file(&path);
            }
        }
        Ok(Verified {
            dir,
            lock: Mutex::new(()),
        })
    }

    /// The kept verifies of `run`, oldest first. A record that does not decode is
    /// skipped with a warning in the log (it cannot be half-written).
    pub fn of(&self, run: RunId) -> Vec<VerifyRecord> {
        let mut out = Vec::new();
        for n in 1.. {
            let path = self.path(run, n);
            let Ok(text) = std::fs::read_to_string(&path) else {
                break;
            };
            match serde_json::from_str(&text) {
                Ok(r) => out.push(r),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "verify record does not decode")
                }
            }
        }
        out
    }

    /// Keeps `r` durably; returns how many verifies of its run are kept now.
    ///
    /// Errors: the file cannot be written, synced or renamed.
    pub fn record(&self, r: &VerifyRecord) -> Result<u64, String> {
        let _held = self.lock.lock().unwrap();
        let n = (1..).find(|&n| !self.path(r.run, n).exists()).unwrap();
        let path = self.path(r.run, n);
        let tmp = path.with_extension("tmp");
        let json = serde_json::to_string(r).expect("records serialize");
        File::create(&tmp)
            .and_then(|mut f| f.write_all(json.as_bytes()).and_then(|_| f.sync_all()))
            .map_err(|e| io("cannot write", &tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io("cannot rename into", &path, e))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io("cannot sync", &self.dir, e))?;
        Ok(n)
    }

    fn path(&self, run: RunId, n: u64) -> PathBuf {
        self.dir.join(format!("{run}-{n}.json"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_numbered_per_run_and_read_back_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let v = Verified::open(tmp.path()).unwrap();
        let rec = |run: u64, exit: u8| VerifyRecord {
            run: RunId(run),
            exit,
            run_boot_id: "a".into(),
            verify_boot_id: "b".into(),
            at_unix_ms: 7,
            report_json: "{}".into(),
        };
        assert_eq!(v.record(&rec(1, 0)), Ok(1));
        assert_eq!(v.record(&rec(2, 1)), Ok(1));
        assert_eq!(v.record(&rec(1, 1)), Ok(2));
        std::fs::write(tmp.path().join("verified/x.tmp"), "half").unwrap();
        let again = Verified::open(tmp.path()).unwrap();
        assert!(!tmp.path().join("verified/x.tmp").exists());
        assert_eq!(again.of(RunId(1)), vec![rec(1, 0), rec(1, 1)]);
        assert_eq!(again.of(RunId(2)), vec![rec(2, 1)]);
        assert_eq!(again.of(RunId(3)), vec![]);
    }
}
