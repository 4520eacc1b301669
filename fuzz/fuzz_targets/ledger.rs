//! Ledger replay on arbitrary bytes: never a panic, a torn tail is always reported
//! inside the file, and verify's whole-ledger check (`RunLedger::from_bytes`) accepts
//! only what the scan accepts, ending clean.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plugpull::ledger::{scan, RunLedger, Tail};

fuzz_target!(|data: &[u8]| {
    let scanned = scan(data, |_, _| {});
    if let Ok((
        _,
        Tail::Torn {
            valid_len,
            torn_bytes,
        },
    )) = scanned
    {
        assert_eq!(valid_len + torn_bytes, data.len() as u64);
    }
    if let Ok((run, tail)) = scanned {
        if RunLedger::from_bytes(run, data, &[]).is_ok() {
            assert_eq!(tail, Tail::Clean);
        }
    }
});
