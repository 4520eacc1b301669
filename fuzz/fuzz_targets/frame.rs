//! Frame scanning and message decoding on arbitrary bytes: never a panic, and a
//! decoded request re-encodes to a frame that decodes to the same request. Sealed
//! bodies (after the handshake) are checked too: arbitrary bytes never panic the tag
//! check and never pass it, and a sealed frame opens to what was sealed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plugpull::auth::Secret;
use plugpull::wire::{check, decode, encode, encode_sealed, Request, Response, PREFIX_LEN};

fuzz_target!(|data: &[u8]| {
    let secret = Secret::new(b"fuzz");
    if let Ok(Some(n)) = check(data) {
        let body = &data[PREFIX_LEN..n];
        if let Ok(req) = decode::<Request>(body) {
            let again = encode(&req);
            assert_eq!(decode::<Request>(&again[PREFIX_LEN..]).unwrap(), req);
            let mut agent = secret.agent_session(&[1; 32], &[2; 32]);
            let mut listener = secret.listener_session(&[1; 32], &[2; 32]);
            let sealed = encode_sealed(&req, &mut agent.send);
            let opened = listener.recv.open(&sealed[PREFIX_LEN..]).unwrap();
            assert_eq!(decode::<Request>(opened).unwrap(), req);
        }
        let _ = decode::<Response>(body);
        let mut listener = secret.listener_session(&[1; 32], &[2; 32]);
        assert!(listener.recv.open(body).is_err());
    }
});
