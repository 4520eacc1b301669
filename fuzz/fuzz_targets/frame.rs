//! The listener's frame reader on arbitrary bytes. The bytes are one incoming
//! stream, read frame after frame with `wire::read_frame` (the path the listener and
//! the clients run, over tokio's `AsyncRead` for `&[u8]` on a current-thread runtime):
//!
//! * never a panic, for requests and for responses;
//! * the buffer scanner `wire::check` agrees with the reader on the first frame:
//!   where it answers a length, the reader consumes exactly that many bytes; where it
//!   answers incomplete, the reader finds a clean end or an end inside the frame;
//!   where it refuses the length, the reader refuses it with the same error;
//! * a decoded request re-encodes to a frame that reads back as the same request, and
//!   sealed (as after the handshake) it opens to what was sealed;
//! * arbitrary bytes read as a sealed frame never pass the tag check.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plugpull::auth::Secret;
use plugpull::wire::{
    check, encode, encode_sealed, read_frame, read_frame_with, FrameError, Request, Response,
    MAX_FRAME,
};
use std::future::Future;

thread_local! {
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
}

fn block_on<F: Future>(f: F) -> F::Output {
    RUNTIME.with(|rt| rt.block_on(f))
}

/// Reads `bytes` as a stream of `T` frames until the end or the first error, as the
/// listener does; returns the messages, the bytes each frame consumed and the error.
fn read_all<T: serde::de::DeserializeOwned>(
    mut bytes: &[u8],
) -> (Vec<(T, usize)>, Option<FrameError>) {
    let mut buf = Vec::new();
    let mut got = Vec::new();
    loop {
        let before = bytes.len();
        match block_on(read_frame::<T, _>(&mut bytes, &mut buf)) {
            Ok(Some(msg)) => got.push((msg, before - bytes.len())),
            Ok(None) => return (got, None),
            Err(e) => return (got, Some(e)),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let secret = Secret::new(b"fuzz");
    let (requests, error) = read_all::<Request>(data);
    let _ = read_all::<Response>(data);

    // The scanner and the reader share one length-prefix rule.
    match check(data) {
        Ok(Some(n)) => match requests.first() {
            Some(&(_, used)) => assert_eq!(used, n),
            None => assert!(matches!(error, Some(FrameError::Malformed(_)))),
        },
        Ok(None) => {
            assert!(requests.is_empty());
            match error {
                None => assert!(data.is_empty()),
                Some(FrameError::Io(e)) => {
                    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof)
                }
                Some(e) => panic!("check says incomplete, read_frame says {e}"),
            }
        }
        Err(scanned) => {
            assert!(matches!(scanned, FrameError::TooLarge(n) if n > MAX_FRAME));
            assert!(requests.is_empty());
            let read = error.expect("read_frame refuses what check refuses");
            assert_eq!(read.to_string(), scanned.to_string());
        }
    }

    for (req, _) in &requests {
        let again = encode(req);
        let (back, err) = read_all::<Request>(&again);
        assert!(err.is_none());
        assert_eq!(back.len(), 1);
        assert_eq!(&back[0].0, req);
        assert_eq!(back[0].1, again.len());
        let mut agent = secret.agent_session(&[1; 32], &[2; 32]);
        let mut listener = secret.listener_session(&[1; 32], &[2; 32]);
        let sealed = encode_sealed(req, &mut agent.send);
        let mut r = &sealed[..];
        let opened = block_on(read_frame_with::<Request, _>(
            &mut r,
            &mut Vec::new(),
            MAX_FRAME,
            Some(&mut listener.recv),
        ));
        assert_eq!(opened.unwrap().as_ref(), Some(req));
    }

    // Unsealed bytes never pass the tag check.
    let mut listener = secret.listener_session(&[1; 32], &[2; 32]);
    let mut r = data;
    let forged = block_on(read_frame_with::<Request, _>(
        &mut r,
        &mut Vec::new(),
        MAX_FRAME,
        Some(&mut listener.recv),
    ));
    assert!(!matches!(forged, Ok(Some(_))));
});
