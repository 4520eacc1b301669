//! plugpull-simfs: a FUSE passthrough filesystem with a volatile write cache that
//! can lose power on command — a storage device that lies, rehearsed in software.
//!
//! Mount it over a backing directory, run a workload (PostgreSQL, the plugpull
//! client) on the mountpoint, pull the plug with `plugpull-simfs cut`, unmount and
//! mount again: what survived is exactly what the backing directory holds, and the
//! ground-truth log says which writes were lost, and whether their fsync had
//! returned.
//!
//! # Fault model
//!
//! File *data* (`write` requests) goes through the cache. Names and sizes (create,
//! mkdir, unlink, rename, link, symlink, truncate, fallocate, writes past the end) go
//! through the metadata [`journal`], which at the cut puts each back to the value the
//! `--metadata` rules (`posix` by default) had made durable. Every write
//! gets a `write_id` (1, 2, … in order of arrival). The cache is bounded by
//! `--cache-bytes`: past it, writes are destaged at once (oldest first, random in
//! `reorder`). Overlapping writes to one file always reach the backing file in
//! arrival order, in every mode, so an old write never overwrites a newer one.
//!
//! * **honest** — fsync and fdatasync (and writes on `O_SYNC`/`O_DSYNC` handles)
//!   destage the file's cached writes in arrival order and fsync the backing file
//!   before returning. Other writes destage FIFO in the background
//!   `--destage-delay-ms` after they arrived. At the cut, cached writes are dropped;
//!   none of them had been fsynced (an fsync in flight at the cut fails with EIO).
//!   Guaranteed: every fsynced write survives.
//! * **lying** — fsync returns success at once and destages nothing. Writes destage
//!   FIFO only `--destage-delay-ms` after arrival or under cache pressure. At the cut
//!   everything cached is dropped, *including writes whose fsync returned*
//!   (`fsynced: true` in the ground truth). Guaranteed: nothing beyond what reached
//!   the backing file; writes older than the delay have.
//! * **reorder** — like lying, but each write's delay is drawn uniformly from
//!   `0..=2 × --destage-delay-ms` and cache-pressure victims are random, so at the
//!   cut a later write may have survived while an earlier (fsynced) one was dropped.
//!   Overlapping writes still destage in order.
//! * **torn** — honest fsync. At the cut, each cached write (in arrival order) is
//!   split at absolute multiples of `--sector` bytes into `n` pieces, `k` is drawn
//!   uniformly from `0..=n`, and the first `k` pieces reach the backing file, the
//!   rest is dropped. With `--atomic-unit BYTES`, a write of at most BYTES is kept
//!   or dropped whole (`k` is `0` or `n`, even chances). Guaranteed: every fsynced
//!   write survives whole.
//! * **misdirect** — honest fsync. A destaged write whose offset and length are
//!   multiples of `--misdirect-block` is, with chance 1 in `--misdirect-every`,
//!   written at a different block-aligned offset of the same file (drawn uniformly
//!   among blocks `j` with `j × block + len ≤` the file's length), while its own
//!   location keeps its old contents. The fsync that destaged it still succeeds.
//!
//! One RNG seeded with `--seed` makes every random choice: a reorder delay per write,
//! a reorder victim per cache-pressure eviction, a misdirect roll (and, on a hit, a
//! target block) per eligible destage, a torn `k` per cached write at the cut. Given
//! the same sequence of operations, a seed replays the same faults.
//!
//! # The cut
//!
//! [`fs::Shared::cut`]: applies the mode's rule to the cache, makes every further
//! operation on the mount fail with EIO until unmount, then writes and fsyncs the
//! ground-truth log (to a temporary file renamed into place) before the `cut`
//! command returns. Pages the kernel already holds in its page cache may still be
//! read from handles opened before the cut; nothing more reaches the backing files.
//! Unmounting without a cut is a clean shutdown: the cache is flushed first.
//!
//! # Ground truth
//!
//! JSON lines at `--ground-truth` (default `<MNT's parent>/<MNT's name>.simfs-truth.jsonl`),
//! written at the cut (and at a clean unmount if any write was misdirected). One
//! line per write cached at the cut or misdirected at any time, by `write_id`:
//!
//! ```json
//! {"write_id":17,"file":"pg/data/pg_wal/000000010000000000000001","offset":81920,"len":8192,"fsynced":true,"fate":"dropped","kept_sectors":null,"landed_at":null}
//! ```
//!
//! * `file`: path relative to the mount root at the cut (` (deleted)` appended if the
//!   file had been unlinked); `offset`, `len`: bytes (a truncate may have shortened
//!   the cached write);
//! * `fsynced`: an fsync/fdatasync of that file which started after this write had
//!   returned success;
//! * `fate`: `dropped` (no byte reached the backing file), `destaged` (a torn cut
//!   kept every sector), `torn` (only the first `kept_sectors` pieces reached it), or
//!   `misdirected` (written at `landed_at` instead, before the cut);
//! * `kept_sectors`: torn mode only, else null; `landed_at`: misdirected only, else null.
//!
//! The last line is the summary:
//! `{"cut":true,"mode":"lying","seed":42,"writes_total":N,"cached_at_cut":C,"fsynced_at_cut":F,"misdirected":M,"truth":"…"}`
//! (`"cut":false` for the clean-unmount case).
//!
//! [`truth`] holds the types of both lines, which the cut writes and the tests read.
//!
//! # Control
//!
//! See [`control`]: a unix socket next to the mountpoint.

#![deny(missing_docs)]

pub mod cmd;
pub mod control;
pub mod fs;
pub mod journal;
pub mod sim;
pub mod truth;
