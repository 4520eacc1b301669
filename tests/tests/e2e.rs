//! The end-to-end tests, linked into one binary: real listener, agent, verifier,
//! simfs and PostgreSQL processes on real files, devices and sockets. Each module is
//! one area; the shared process helpers are the `plugpull_tests` library
//! (`tests/src/`). Run one area with `cargo test --release -p plugpull-tests -- AREA::`
//! (e.g. `power::`).

mod atomic;
mod campaign;
mod cut_evidence;
mod docgen;
mod examples;
mod file;
mod files;
mod pgbench;
mod pgbench_truth;
mod pgconn;
mod power;
mod probe;
mod probe_evidence;
mod probe_flush;
mod report;
mod shape;
mod simfs;
mod simfs_pg;
mod target_guard;
mod verify_common;
mod verify_evidence;
mod verify_history;
mod verify_live;
mod verify_truth;
mod vm;
mod witness;
mod witness_limits;
mod witness_truth;
mod write_truth;
