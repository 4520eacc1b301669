//! Frame scanning and message decoding on arbitrary bytes: never a panic, and a
//! decoded request re-encodes to a frame that decodes to the same request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plugpull::wire::{check, decode, encode, Request, Response, PREFIX_LEN};

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(n)) = check(data) {
        let body = &data[PREFIX_LEN..n];
        if let Ok(req) = decode::<Request>(body) {
            let again = encode(&req);
            assert_eq!(decode::<Request>(&again[PREFIX_LEN..]).unwrap(), req);
        }
        let _ = decode::<Response>(body);
    }
});
