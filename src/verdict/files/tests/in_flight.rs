//! What a step in flight at the cut may leave, and the near misses it may not.

use super::*;

/// `blocks` with block `i` zeroed.
fn zeroed(blocks: &[u64], i: usize) -> Vec<u64> {
    let mut b = blocks.to_vec();
    b[i] = 0;
    b
}

/// `c`'s directory with `next`'s name holding `blocks` (`None`: removed).
fn with(c: &Cut, blocks: Option<&[u64]>) -> Walk {
    let mut w = c.walk.clone();
    match blocks {
        Some(b) => w.names.insert(c.next.file, content(c.next.file, b)),
        None => w.names.remove(&c.next.file),
    };
    w
}

#[test]
fn a_pending_truncate_does_not_excuse_a_lost_acknowledged_append() {
    let c = search(2, Unsafe::default(), false, |h, nx| {
        nx.op == Op::Truncate
            && h.last()
                .is_some_and(|(s, _)| s.op == Op::Append && nx.to < s.from)
    });
    let appended = c.hist.last().unwrap().0;
    let before = &c.prev.as_deref().unwrap()[..appended.from as usize];
    let o = c.judge(&with(&c, Some(before)));
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::WrongSize)], 1, 0, 0)
    );
    assert_eq!(o.findings[0].found_size, appended.from * BLOCK);
}

#[test]
fn a_pending_truncate_does_not_excuse_a_created_file_cut_short() {
    let c = search(2, Unsafe::default(), false, |h, nx| {
        nx.op == Op::Truncate
            && nx.from >= nx.to + 2
            && h.last().is_some_and(|(s, _)| s.op == Op::Create)
    });
    let prev = c.prev.clone().unwrap();
    let o = c.judge(&with(&c, Some(&prev[..nx_between(&c)])));
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::WrongSize)], 1, 0, 0)
    );
}

/// A block count strictly between `c.next`'s truncate's target and its old size.
fn nx_between(c: &Cut) -> usize {
    (c.next.to + 1) as usize
}

#[test]
fn a_pending_truncate_leaves_the_old_state_or_the_target_size_over_the_old_blocks() {
    let c = search(2, Unsafe::default(), false, |_, nx| {
        nx.op == Op::Truncate && nx.to >= 1 && nx.from >= nx.to + 2
    });
    let prev = c.prev.clone().unwrap();
    let target = &prev[..c.next.to as usize];
    assert_eq!(summary(&c.judge(&with(&c, Some(&prev)))), (vec![], 0, 0, 0));
    assert_eq!(
        summary(&c.judge(&with(&c, Some(target)))),
        (vec![], 0, 0, 1)
    );
    let near = [
        (zeroed(target, 0), FilesVerdict::WrongSize),
        (prev[..nx_between(&c)].to_vec(), FilesVerdict::WrongSize),
        (zeroed(&prev, 0), FilesVerdict::Torn),
    ];
    for (blocks, v) in near {
        let o = c.judge(&with(&c, Some(&blocks)));
        assert_eq!(summary(&o), (vec![(c.name(), v)], 1, 0, 0), "{blocks:?}");
    }
}

#[test]
fn a_pending_create_excuses_neither_extra_blocks_nor_older_records() {
    let c = search(2, Unsafe::default(), false, |_, nx| {
        nx.op == Op::Create && nx.to >= 2 && nx.seq >= 2
    });
    let (seq, to) = (c.next.seq, c.next.to as usize);
    let mut partly = vec![seq; to - 1];
    partly.push(0);
    assert_eq!(
        summary(&c.judge(&with(&c, Some(&partly)))),
        (vec![], 0, 0, 1)
    );
    let mut older = vec![seq; to];
    older[1] = seq - 1;
    for blocks in [vec![seq; to + 1], older] {
        let o = c.judge(&with(&c, Some(&blocks)));
        let want = (vec![(c.name(), FilesVerdict::Resurrected)], 1, 0, 0);
        assert_eq!(summary(&o), want, "{blocks:?}");
    }
}

#[test]
fn a_pending_append_excuses_neither_extra_blocks_nor_a_changed_old_block() {
    let c = search(2, Unsafe::default(), false, |_, nx| nx.op == Op::Append);
    let prev = c.prev.clone().unwrap();
    let done: Vec<u64> = (0..c.next.to)
        .map(|i| prev.get(i as usize).copied().unwrap_or(c.next.seq))
        .collect();
    assert_eq!(summary(&c.judge(&with(&c, Some(&done)))), (vec![], 0, 0, 1));
    let mut longer = done.clone();
    longer.push(c.next.seq);
    for blocks in [longer, zeroed(&done, 0)] {
        let o = c.judge(&with(&c, Some(&blocks)));
        let want = (vec![(c.name(), FilesVerdict::WrongSize)], 1, 0, 0);
        assert_eq!(summary(&o), want, "{blocks:?}");
    }
}

#[test]
fn a_pending_replace_leaves_the_old_or_the_whole_new_content() {
    let c = search(2, Unsafe::default(), false, |_, nx| {
        nx.op == Op::Replace && nx.to >= 2 && nx.to != nx.from
    });
    let new = vec![c.next.seq; c.next.to as usize];
    assert_eq!(summary(&c.judge(&with(&c, Some(&new)))), (vec![], 0, 0, 1));
    let o = c.judge(&with(&c, Some(&zeroed(&new, 1))));
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::WrongSize)], 1, 0, 0)
    );
}

#[test]
fn a_pending_replace_that_skips_the_tmp_fsync_may_leave_its_new_content_partly_written() {
    let presync = Unsafe {
        dirsync: false,
        presync: true,
    };
    let c = search(2, presync, false, |h, nx| {
        nx.op == Op::Replace
            && nx.to >= 2
            && nx.to + 1 != nx.from
            && h.last().is_some_and(|(s, _)| s.op != Op::Replace)
    });
    let mut partly = vec![c.next.seq; c.next.to as usize - 1];
    partly.push(0);
    assert_eq!(
        summary(&c.judge(&with(&c, Some(&partly)))),
        (vec![], 0, 0, 1)
    );
    assert_eq!(summary(&c.judge(&with(&c, Some(&[])))), (vec![], 0, 0, 1));
    let longer = vec![c.next.seq; c.next.to as usize + 1];
    let o = c.judge(&with(&c, Some(&longer)));
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::WrongSize)], 1, 0, 0)
    );
}

#[test]
fn a_pending_unlink_leaves_the_name_as_it_was_or_gone() {
    let c = search(2, Unsafe::default(), false, |_, nx| {
        nx.op == Op::Unlink && nx.from >= 2
    });
    let prev = c.prev.clone().unwrap();
    assert_eq!(summary(&c.judge(&with(&c, None))), (vec![], 0, 0, 1));
    let o = c.judge(&with(&c, Some(&zeroed(&prev, prev.len() - 1))));
    assert_eq!(summary(&o), (vec![(c.name(), FilesVerdict::Torn)], 1, 0, 0));
}

#[test]
fn a_tmp_file_is_intact_only_beside_its_own_pending_replace() {
    let c = search(2, Unsafe::default(), false, |h, nx| {
        nx.op == Op::Replace && !h.is_empty()
    });
    let mut w = c.walk.clone();
    w.tmps
        .insert(c.next.file, content(c.next.file, &[c.next.seq]));
    let o = c.judge(&w);
    assert_eq!(summary(&o), (vec![], 0, 0, 0));
    assert_eq!(o.counts.get(FilesVerdict::Intact), o.checked);

    let c = search(2, Unsafe::default(), false, |_, nx| nx.op == Op::Append);
    for f in [c.next.file, c.next.file ^ 1] {
        let mut w = c.walk.clone();
        w.tmps.insert(f, content(f, &[c.next.seq]));
        let o = c.judge(&w);
        let name = file_name(f, 1);
        assert_eq!(
            summary(&o),
            (vec![(name.clone(), FilesVerdict::StaleRename)], 1, 0, 0)
        );
        let suffix = format!("; {name}.tmp exists, and no replace of it was in flight");
        assert!(
            o.findings[0].evidence.ends_with(&suffix),
            "{}",
            o.findings[0].evidence
        );
    }
}
