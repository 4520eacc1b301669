//! Ledger replay on arbitrary bytes: never a panic, and a torn tail is always
//! reported inside the file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plugpull::ledger::{scan, Tail};

fuzz_target!(|data: &[u8]| {
    if let Ok((
        _,
        Tail::Torn {
            valid_len,
            torn_bytes,
        },
    )) = scan(data, |_, _| {})
    {
        assert_eq!(valid_len + torn_bytes, data.len() as u64);
    }
});
