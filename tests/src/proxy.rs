//! A TCP proxy between an agent and a listener, for the witness tests: it passes
//! bytes through, drops connections at random moments, or plays an on-path attacker
//! *without the secret* that swallows `Acks` and forges `Confirmed`.
//!
//! One thread accepts; each connection gets two relay threads (and, when dropping,
//! a timer thread). Frames are relayed whole (the attacker needs to see them), so an
//! injected frame never lands inside another. Everything stops when the [`Proxy`] is
//! dropped.

use plugpull::wire::{self, Request, Response, PREFIX_LEN};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the proxy does to the connections through it.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// Relay everything.
    Pass,
    /// Close each connection (both sides) after a random time between `min_ms` and
    /// `max_ms` milliseconds.
    Drop {
        /// Shortest life of a connection, ms.
        min_ms: u64,
        /// Longest life of a connection, ms.
        max_ms: u64,
    },
    /// After the handshake (the agent's first two frames), swallow every `Acks` frame
    /// and answer it with a forged `Confirmed` for its batch, tagged with zeros (the
    /// proxy has no secret).
    ForgeConfirmed,
}

/// A running proxy on 127.0.0.1; stops on drop.
pub struct Proxy {
    addr: String,
    stop: Arc<AtomicBool>,
    /// Connections the proxy closed on purpose ([`Mode::Drop`]).
    pub drops: Arc<AtomicU64>,
    /// `Acks` frames swallowed and answered with a forged `Confirmed`.
    pub forged: Arc<AtomicU64>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// Starts a proxy to `upstream` (`IP:PORT`); `seed` drives the drop times.
    pub fn start(upstream: &str, mode: Mode, seed: u64) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").expect("proxy bind");
        let addr = l.local_addr().unwrap().to_string();
        l.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let drops = Arc::new(AtomicU64::new(0));
        let forged = Arc::new(AtomicU64::new(0));
        let (st, dr, fo) = (stop.clone(), drops.clone(), forged.clone());
        let upstream = upstream.to_string();
        let accept = std::thread::spawn(move || {
            let mut rng = seed | 1;
            while !st.load(Ordering::Relaxed) {
                let (client, _) = match l.accept() {
                    Ok(c) => c,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(2));
                        continue;
                    }
                };
                client.set_nonblocking(false).unwrap();
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                // xorshift: one seed, every drop time reproducible.
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                serve(client, server, mode, rng, &st, &dr, &fo);
            }
        });
        Proxy {
            addr,
            stop,
            drops,
            forged,
            accept: Some(accept),
        }
    }

    /// `IP:PORT` agents should dial.
    pub fn addr(&self) -> &str {
        &self.addr
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn serve(
    client: TcpStream,
    server: TcpStream,
    mode: Mode,
    rng: u64,
    stop: &Arc<AtomicBool>,
    drops: &Arc<AtomicU64>,
    forged: &Arc<AtomicU64>,
) {
    let to_client = Arc::new(Mutex::new(client.try_clone().unwrap()));
    // Agent → listener.
    {
        let (mut from, mut to) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        let (to_client, forged) = (to_client.clone(), forged.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            relay_frames(&mut from, |frame| {
                n += 1;
                if matches!(mode, Mode::ForgeConfirmed) && n > 2 {
                    if let Ok(Request::Acks { run, batch }) =
                        wire::decode::<Request>(&frame[PREFIX_LEN..])
                    {
                        let mut f = wire::encode(&Response::Confirmed {
                            run,
                            batch: batch.batch,
                        });
                        f.extend_from_slice(&[0u8; plugpull::auth::TAG_LEN]);
                        let len = (f.len() - PREFIX_LEN) as u32;
                        f[..4].copy_from_slice(&len.to_le_bytes());
                        forged.fetch_add(1, Ordering::Relaxed);
                        return to_client.lock().unwrap().write_all(&f).is_ok();
                    }
                }
                to.write_all(frame).is_ok()
            });
            let _ = to.shutdown(Shutdown::Both);
            let _ = from.shutdown(Shutdown::Both);
        });
    }
    // Listener → agent.
    {
        let (mut from, to_client) = (server.try_clone().unwrap(), to_client.clone());
        let client = client.try_clone().unwrap();
        std::thread::spawn(move || {
            relay_frames(&mut from, |frame| {
                to_client.lock().unwrap().write_all(frame).is_ok()
            });
            let _ = client.shutdown(Shutdown::Both);
            let _ = from.shutdown(Shutdown::Both);
        });
    }
    if let Mode::Drop { min_ms, max_ms } = mode {
        let life = min_ms + rng % (max_ms - min_ms + 1);
        let (stop, drops) = (stop.clone(), drops.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(life));
            if !stop.load(Ordering::Relaxed) {
                drops.fetch_add(1, Ordering::Relaxed);
            }
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
        });
    }
}

/// Reads whole frames from `from` and hands each (prefix included) to `f` until the
/// stream ends or `f` returns false.
fn relay_frames(from: &mut TcpStream, mut f: impl FnMut(&[u8]) -> bool) {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        while let Ok(Some(n)) = wire::check(&buf) {
            if !f(&buf[..n]) {
                return;
            }
            buf.drain(..n);
        }
        match from.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}
