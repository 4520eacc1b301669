//! What the calls `--unsafe-steps` skips excuse, and what a later returned call
//! promises again.

use super::*;

const DIRSYNC: Unsafe = Unsafe {
    dirsync: true,
    presync: false,
};
const PRESYNC: Unsafe = Unsafe {
    dirsync: false,
    presync: true,
};

/// `c`'s directory with the last acknowledged step's name holding `blocks` (`None`:
/// removed).
fn with(c: &Cut, blocks: Option<&[u64]>) -> Walk {
    let mut w = c.walk.clone();
    match blocks {
        Some(b) => w.names.insert(c.next.file, content(c.next.file, b)),
        None => w.names.remove(&c.next.file),
    };
    w
}

fn replaced(h: &Hist) -> bool {
    h.iter().any(|(s, _)| s.op == Op::Replace)
}

#[test]
fn an_fsynced_append_after_a_replace_that_skipped_the_tmp_fsync_is_promised() {
    let c = search(2, PRESYNC, true, |h, nx| nx.op == Op::Append && replaced(h));
    let prev = c.prev.clone().unwrap();
    let o = c.judge(&with(&c, Some(&prev)));
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::WrongSize)], 1, 0, 0)
    );
    assert!(o.findings[0].promised);
}

#[test]
fn a_replace_that_skipped_the_tmp_fsync_excuses_its_own_content_but_not_its_rename() {
    let c = search(2, PRESYNC, true, |h, nx| {
        nx.op == Op::Replace && !h.is_empty()
    });
    let o = c.judge(&with(&c, Some(&[])));
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::ZeroLength)], 0, 1, 0)
    );
    assert!(!o.findings[0].promised);
    let old = c.prev.clone().unwrap();
    let o = c.judge(&with(&c, Some(&old)));
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::StaleRename)], 1, 0, 0)
    );
    let o = c.judge(&with(&c, None));
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::LostFile)], 1, 0, 0)
    );
}

#[test]
fn an_undone_unlink_whose_directory_fsync_returned_fails_after_a_replace_that_skipped_one() {
    let c = search(2, PRESYNC, true, |h, nx| nx.op == Op::Unlink && replaced(h));
    let old = c.prev.clone().unwrap();
    let o = c.judge(&with(&c, Some(&old)));
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::Resurrected)], 1, 0, 0)
    );
}

#[test]
fn a_lost_truncate_two_hundred_steps_after_the_last_replace_fails() {
    let c = search(64, PRESYNC, true, |h, nx| {
        let last = h.iter().rev().find(|(s, _)| s.op == Op::Replace);
        nx.op == Op::Truncate && last.is_some_and(|(s, _)| nx.seq >= s.seq + 200)
    });
    let old = c.prev.clone().unwrap();
    let o = c.judge(&with(&c, Some(&old)));
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::WrongSize)], 1, 0, 0)
    );
}

#[test]
fn without_directory_fsyncs_a_name_may_be_gone_but_its_fsynced_data_may_not_be_lost() {
    let c = search(2, DIRSYNC, true, |_, nx| nx.op == Op::Append);
    let o = c.judge(&with(&c, None));
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::LostFile)], 0, 1, 0)
    );
    let prev = c.prev.clone().unwrap();
    let o = c.judge(&with(&c, Some(&prev)));
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::WrongSize)], 1, 0, 0)
    );
}

#[test]
fn an_unlink_without_directory_fsync_may_be_undone_with_the_data_as_last_fsynced() {
    let c = search(2, DIRSYNC, true, |_, nx| {
        nx.op == Op::Unlink && nx.from >= 2
    });
    let old = c.prev.clone().unwrap();
    let o = c.judge(&with(&c, Some(&old)));
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::Resurrected)], 0, 1, 0)
    );
    let o = c.judge(&with(&c, Some(&old[..old.len() - 1])));
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::Resurrected)], 1, 0, 0)
    );
}

#[test]
fn a_replace_without_directory_fsync_may_leave_the_old_file_or_its_tmp() {
    let c = search(2, DIRSYNC, true, |h, nx| {
        nx.op == Op::Replace && !h.is_empty()
    });
    let old = c.prev.clone().unwrap();
    let o = c.judge(&with(&c, Some(&old)));
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::StaleRename)], 0, 1, 0)
    );
    let mut w = c.walk.clone();
    w.tmps
        .insert(c.next.file, content(c.next.file, &[c.next.seq]));
    let o = c.judge(&w);
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::StaleRename)], 0, 1, 0)
    );
}

#[test]
fn a_tmp_left_by_a_replace_whose_directory_fsync_returned_fails() {
    let c = search(2, PRESYNC, true, |h, nx| {
        nx.op == Op::Replace && !h.is_empty()
    });
    let mut w = c.walk.clone();
    w.tmps
        .insert(c.next.file, content(c.next.file, &[c.next.seq]));
    let o = c.judge(&w);
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::StaleRename)], 1, 0, 0)
    );
}

#[test]
fn a_partly_written_replace_is_unpromised_only_when_it_skipped_the_tmp_fsync() {
    let want = |u: Unsafe| u64::from(!u.presync);
    for u in [Unsafe::default(), DIRSYNC, PRESYNC] {
        let c = search(2, u, true, |h, nx| {
            nx.op == Op::Replace && nx.to >= 3 && !h.is_empty()
        });
        let mut partly = vec![c.next.seq; 2];
        partly.push(0);
        let o = c.judge(&with(&c, Some(&partly)));
        let v = if c.next.to == 3 {
            FilesVerdict::Torn
        } else {
            FilesVerdict::WrongSize
        };
        let (failures, unpromised) = (want(u), 1 - want(u));
        assert_eq!(
            summary(&o),
            (vec![(c.name(), v)], failures, unpromised, 0),
            "{u:?}"
        );
    }
}

#[test]
fn without_directory_fsyncs_a_tmp_file_is_unpromised_only_after_a_replace() {
    let c = search(2, DIRSYNC, true, |h, nx| {
        nx.op == Op::Append && !replaced(h)
    });
    let mut w = c.walk.clone();
    w.tmps
        .insert(c.next.file, content(c.next.file, &[c.next.seq]));
    let o = c.judge(&w);
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::StaleRename)], 1, 0, 0)
    );
}
