//! End-to-end tests of the files (namespace) workload: a real listener, a real writer
//! on a real directory, a real verifier; one doctored copy of the directory per verdict,
//! each with exact counts; `--unsafe-steps`; bad input; runs on simfs (`simfs.rs`).

use plugpull::verdict::files::schedule::split_name;
use plugpull_tests::ledger_file::*;
use plugpull_tests::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Output;

mod simfs;

/// Runs `plugpull write files` against `l` on `dir` with `extra` arguments to the end.
fn write_files(l: &Listener, dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "write",
        "files",
        "--listener",
        l.addr(),
        "--target",
        dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    plugpull(&args)
}

/// A finished run of 2 workers, 16 names, 400 steps with seed 7, verified intact.
struct Finished {
    tmp: tempfile::TempDir,
    l: Listener,
    run: String,
    dir: PathBuf,
    /// Names present at the end, with their sizes.
    present: Vec<(String, u64)>,
}

fn finished(extra: &[&str]) -> Finished {
    let tmp = tempfile::tempdir().unwrap();
    let l = Listener::start(tmp.path());
    let dir = tmp.path().join("d");
    let mut args = vec!["-j", "2", "--files", "16", "--steps", "400", "--seed", "7"];
    args.extend_from_slice(extra);
    let o = write_files(&l, &dir, &args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Its bound of 16 unconfirmed steps holds the workers for milliseconds: no news.
    let err = stderr(&o);
    let paused: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("paused:") || l.starts_with("resumed:"))
        .collect();
    assert_eq!(paused, Vec::<&str>::new(), "{err}");
    let run = run_id(&o);
    let mut present: Vec<(String, u64)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .filter(|(n, _)| n.starts_with('w'))
        .collect();
    present.sort();
    Finished {
        tmp,
        l,
        run,
        dir,
        present,
    }
}

impl Finished {
    /// A copy of the directory changed by `f`, verified: (exit code, report).
    fn check(&self, name: &str, f: impl FnOnce(&Path)) -> (i32, Value) {
        let copy = self.tmp.path().join(name);
        std::fs::create_dir(&copy).unwrap();
        for e in std::fs::read_dir(&self.dir).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), copy.join(e.file_name())).unwrap();
        }
        f(&copy);
        let (code, v, err) = verify_json(
            &self.l,
            &["--run", &self.run, "--target", copy.to_str().unwrap()],
        );
        assert!(code == 0 || code == 1, "{err}");
        (code, v)
    }

    /// A present name of at least `blocks` blocks.
    fn with_blocks(&self, blocks: u64) -> &str {
        &self
            .present
            .iter()
            .find(|(_, s)| *s >= blocks * 512)
            .expect("a file that large")
            .0
    }
}

/// The report's verdict counts with `intact` and one other verdict set.
fn counts(intact: u64, other: &[(&str, u64)]) -> Value {
    let mut v = json!({"intact": intact, "lost_file": 0, "resurrected": 0, "wrong_size": 0,
        "zero_length": 0, "stale_rename": 0, "torn": 0, "corrupt": 0, "stale": 0, "unpromised": 0});
    for (k, n) in other {
        v[*k] = json!(n);
    }
    v
}

#[test]
fn a_clean_run_on_a_real_directory_verifies_every_name_intact() {
    let f = finished(&[]);
    let (code, v, err) = verify_json(&f.l, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["workload"], json!("files"));
    assert_eq!(v["run_id"], json!(f.run));
    assert_eq!(v["acknowledged"], json!(400));
    assert_eq!(v["unpromised_acks"], json!(0));
    assert_eq!(v["names_checked"], json!(16));
    assert_eq!(v["verdicts"], counts(16, &[]));
    assert_eq!(v["in_flight_survived"], json!(0));
    assert_eq!(v["findings"], json!([]));
    assert!(v["summary"].as_str().unwrap().starts_with(
        "PASS (read-back only, no power cut): 400 acknowledged steps, 16 names checked"
    ));
    // Every ack in the ledger is promised and states its name's state.
    let acks = files_acks(&f.l.ledger_path(&f.run));
    assert_eq!(acks.len(), 400);
    assert!(acks.iter().all(|a| a.promised && a.size % 512 == 0));
    // The text report has the table and the summary.
    let o = plugpull(&[
        "verify",
        "--read-back",
        "--listener",
        f.l.addr(),
        "--run",
        &f.run,
    ]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0));
    assert!(out.contains("number of steps acknowledged: 400"), "{out}");
    assert!(out.contains("intact                         16"), "{out}");
}

#[test]
fn each_doctored_directory_gets_its_verdict_with_exact_counts_and_evidence() {
    let f = finished(&[]);
    let first = f.present[0].0.clone();
    let one = |v: &Value| -> (String, String) {
        let x = &v["findings"][0];
        (
            x["name"].as_str().unwrap().into(),
            x["verdict"].as_str().unwrap().into(),
        )
    };

    let (code, v) = f.check("lost", |d| std::fs::remove_file(d.join(&first)).unwrap());
    assert_eq!(
        (code, &v["verdicts"]),
        (1, &counts(15, &[("lost_file", 1)]))
    );
    assert_eq!(one(&v), (first.clone(), "lost_file".into()));
    assert_eq!(v["findings"][0]["found_exists"], json!(false));
    assert_eq!(v["findings"][0]["expected_exists"], json!(true));

    // A name the ledger has absent (unlinked, or never created): resurrected.
    let absent = (0..8)
        .flat_map(|n| [format!("w0-{n}"), format!("w1-{n}")])
        .find(|n| !f.present.iter().any(|(p, _)| p == n));
    if let Some(a) = absent.clone() {
        let (code, v) = f.check("resurrected", |d| {
            std::fs::copy(d.join(&first), d.join(&a)).unwrap();
        });
        assert_eq!(
            (code, &v["verdicts"]),
            (1, &counts(15, &[("resurrected", 1)]))
        );
        assert_eq!(one(&v), (a, "resurrected".into()));
    }

    let big = f.with_blocks(2).to_string();
    let (code, v) = f.check("zero", |d| truncate(&d.join(&big), 0));
    assert_eq!(
        (code, &v["verdicts"]),
        (1, &counts(15, &[("zero_length", 1)]))
    );
    assert_eq!(one(&v), (big.clone(), "zero_length".into()));
    assert_eq!(v["findings"][0]["found_size"], json!(0));

    let (code, v) = f.check("longer", |d| {
        let len = std::fs::metadata(d.join(&big)).unwrap().len();
        truncate(&d.join(&big), len + 512);
    });
    assert_eq!((code, one(&v)), (1, (big.clone(), "wrong_size".into())));

    let (code, v) = f.check("torn", |d| zero(&d.join(&big), 512, 512));
    assert_eq!((code, one(&v)), (1, (big.clone(), "torn".into())));
    assert!(
        v["findings"][0]["evidence"]
            .as_str()
            .unwrap()
            .contains("zeros"),
        "{v}"
    );

    let (code, v) = f.check("stale", |d| {
        let len = std::fs::metadata(d.join(&big)).unwrap().len();
        zero(&d.join(&big), 0, len);
    });
    assert_eq!((code, one(&v)), (1, (big.clone(), "stale".into())));

    let (code, v) = f.check("corrupt", |d| {
        let mut b = std::fs::read(d.join(&big)).unwrap();
        b[100] ^= 0x10;
        std::fs::write(d.join(&big), b).unwrap();
    });
    assert_eq!((code, one(&v)), (1, (big.clone(), "corrupt".into())));

    let (code, v) = f.check("tmp", |d| {
        std::fs::copy(d.join(&big), d.join(format!("{big}.tmp"))).unwrap();
    });
    assert_eq!((code, one(&v)), (1, (big.clone(), "stale_rename".into())));
    assert!(
        v["findings"][0]["evidence"]
            .as_str()
            .unwrap()
            .contains(".tmp exists"),
        "{v}"
    );

    // Another entry is named, not judged.
    let (code, v) = f.check("foreign", |d| {
        std::fs::write(d.join("notes.txt"), b"x").unwrap()
    });
    assert_eq!(code, 0);
    assert_eq!(v["foreign_entries"], json!(["notes.txt"]));
}

/// Every files ack in the ledger at `path`, in ledger order.
pub fn files_acks(path: &Path) -> Vec<plugpull::ledger::FilesAck> {
    entries(path)
        .into_iter()
        .flat_map(|(_, _, e)| match e {
            plugpull::ledger::Entry::Acks(b) => match b.acks {
                plugpull::ledger::Acks::Files(v) => v,
                _ => Vec::new(),
            },
            _ => Vec::new(),
        })
        .collect()
}

fn truncate(p: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(p)
        .unwrap()
        .set_len(len)
        .unwrap();
}

fn zero(p: &Path, at: u64, len: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
    f.write_all_at(&vec![0u8; len as usize], at).unwrap();
}

#[test]
fn unsafe_steps_are_acknowledged_unpromised_and_their_losses_do_not_fail() {
    let f = finished(&["--unsafe-steps", "dirsync"]);
    let acks = files_acks(&f.l.ledger_path(&f.run));
    let unpromised = acks.iter().filter(|a| !a.promised).count() as u64;
    assert!(unpromised > 0 && unpromised < 400);
    let (code, v, err) = verify_json(&f.l, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["unpromised_acks"], json!(unpromised));
    // Every present name was created or replaced without a directory fsync: losing
    // one is expected, reported and not a failure.
    let first = f.present[0].0.clone();
    let (code, v) = f.check("lost", |d| std::fs::remove_file(d.join(&first)).unwrap());
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["verdicts"]["lost_file"], json!(1));
    assert_eq!(v["verdicts"]["unpromised"], json!(1));
    assert_eq!(v["findings"][0]["promised"], json!(false));
    assert!(
        v["summary"]
            .as_str()
            .unwrap()
            .contains("; 1 name lost unpromised steps (--unsafe-steps), as expected"),
        "{v}"
    );
}

#[test]
fn damage_no_step_made_fails_a_run_whose_every_step_was_unpromised() {
    // Seed 1, one worker, 3 steps on 4 names, both durability calls skipped: every
    // acknowledged step is unpromised, and no step touches name 1 (w0-1).
    let tmp = tempfile::tempdir().unwrap();
    let l = Listener::start(tmp.path());
    let o = write_files(
        &l,
        &tmp.path().join("e"),
        &[
            "-j",
            "1",
            "--files",
            "4",
            "--steps",
            "3",
            "--seed",
            "1",
            "--unsafe-steps",
            "dirsync,presync",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let run = run_id(&o);
    let acks = files_acks(&l.ledger_path(&run));
    let files: Vec<u32> = acks.iter().map(|a| a.file).collect();
    assert_eq!((files.len(), acks.iter().any(|a| a.promised)), (3, false));
    assert!(!files.contains(&1), "{files:?}");
    let e = tmp.path().join("e");
    let target = ["--run", run.as_str(), "--target", e.to_str().unwrap()];
    let (code, v, err) = verify_json(&l, &target);
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        v["summary"],
        json!(
            "NOT MEASURED: none of the 3 acknowledged steps promised durability (--unsafe-steps)"
        )
    );
    // What no step made, under a name no step touched, is damage the run's own data
    // shows: a FAIL, not "not measured".
    std::fs::copy(e.join("w0-0"), e.join("w0-1")).unwrap();
    let (code, v, err) = verify_json(&l, &target);
    assert_eq!(code, 1, "{err}");
    assert_eq!(v["verdicts"], counts(2, &[("resurrected", 1)]));
    assert_eq!(
        v["summary"],
        json!(
            "FAIL: 1 of 3 checked names lost or damaged acknowledged steps (1 resurrected) \
             out of 3 acknowledged steps"
        )
    );
    assert_eq!(v["findings"][0]["name"], json!("w0-1"));
}

#[test]
fn bad_input_is_refused_with_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let l = Listener::start(tmp.path());
    let o = write_files(&l, &tmp.path().join("d"), &["--unsafe-steps", "fsync"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--unsafe-steps \"fsync\" is not one of dirsync, presync"));
    let file = tmp.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    let o = write_files(&l, &file, &["--steps", "5"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("is not a directory"), "{}", stderr(&o));
    let busy = tmp.path().join("p").join("busy");
    std::fs::create_dir_all(&busy).unwrap();
    std::fs::write(busy.join("keep.txt"), b"x").unwrap();
    let o = write_files(&l, &busy, &["--steps", "5"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("is not empty and not a files run's"),
        "{}",
        stderr(&o)
    );
    // A fixed seed: 5 steps that leave every name they touch present, so removing the
    // directory loses each of them (a random schedule may unlink one: absent, intact).
    let o = write_files(&l, &busy, &["--steps", "5", "--force", "--seed", "7"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(busy.join("keep.txt").exists());
    let (code, v, _) = verify_json(&l, &[]);
    assert_eq!((code, &v["foreign_entries"]), (0, &json!(["keep.txt"])));
    // A directory gone from its filesystem (its parent is there, on the run's
    // filesystem) is the run's loss: every name it held is a lost file.
    let names = std::fs::read_dir(&busy)
        .unwrap()
        .filter(|e| split_name(&e.as_ref().unwrap().file_name().to_string_lossy()).is_some())
        .count();
    assert!(names > 0);
    std::fs::remove_dir_all(&busy).unwrap();
    let (code, v, err) = verify_json(&l, &[]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(v["verdicts"]["lost_file"], json!(names));
    assert_eq!(v["verdicts"]["intact"], json!(0));
    let gone = v["directory_gone"].as_str().unwrap();
    assert!(
        gone.starts_with(&format!(
            "the run's directory is gone: {} does not exist on its filesystem, ",
            busy.display()
        )),
        "{gone}"
    );
    assert!(
        v["summary"]
            .as_str()
            .unwrap()
            .ends_with("; the directory itself is gone"),
        "{v}"
    );
    // Another path given with --target that is not there says nothing of the run.
    let elsewhere = tmp.path().join("p").join("elsewhere");
    let (code, v, err) = verify_json(&l, &["--target", elsewhere.to_str().unwrap()]);
    assert_eq!((code, &v["ok"]), (2, &json!(false)), "{err}");
    assert!(
        err.contains(&format!(
            "directory {} (given with --target) does not exist; the run wrote {}",
            elsewhere.display(),
            busy.display()
        )),
        "{err}"
    );
    // Without its parent either, the filesystem may not be mounted: not verified.
    std::fs::remove_dir_all(tmp.path().join("p")).unwrap();
    let (code, v, err) = verify_json(&l, &[]);
    assert_eq!((code, &v["ok"]), (2, &json!(false)), "{err}");
    assert!(
        err.contains(&format!(
            "directory {} of directory {} does not exist; the run's filesystem was ",
            tmp.path().join("p").display(),
            busy.display()
        )),
        "{err}"
    );
}
