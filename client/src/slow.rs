//! A step that says what it is doing when it takes over a second: the tool never
//! sits silent while it preallocates a target or probes the stack under test.
//!
//! `let _step = Slow::start("preallocating 512 MiB for target /srv/t.dat");` prints
//! `preallocating 512 MiB for target /srv/t.dat…` on stderr once a second has passed
//! without the step ending, and `preallocating … done (5.3 s)` when it ends; a step
//! that ends within the second prints nothing.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a step runs before it says so.
pub const AFTER: Duration = Duration::from_secs(1);

/// A running step (see the module doc); it ends when dropped.
pub struct Slow {
    what: String,
    since: Instant,
    /// (ended, said): set by the drop and by the timer thread, under one lock.
    state: Arc<(Mutex<(bool, bool)>, Condvar)>,
    timer: Option<std::thread::JoinHandle<()>>,
}

impl Slow {
    /// Starts the step `what` (a phrase: `probing the stack under test`).
    pub fn start(what: impl Into<String>) -> Slow {
        let what = what.into();
        let state = Arc::new((Mutex::new((false, false)), Condvar::new()));
        let timer = {
            let (state, what) = (state.clone(), what.clone());
            std::thread::Builder::new()
                .name("slow-step".into())
                .spawn(move || {
                    let (lock, cv) = &*state;
                    let g = lock.lock().unwrap_or_else(|e| e.into_inner());
                    let (mut g, _) = cv
                        .wait_timeout_while(g, AFTER, |s| !s.0)
                        .unwrap_or_else(|e| e.into_inner());
                    if !g.0 {
                        eprintln!("{what}…");
                        g.1 = true;
                    }
                })
                .ok()
        };
        Slow {
            what,
            since: Instant::now(),
            state,
            timer,
        }
    }
}

impl Drop for Slow {
    fn drop(&mut self) {
        let (lock, cv) = &*self.state;
        let said = {
            let mut g = lock.lock().unwrap_or_else(|e| e.into_inner());
            g.0 = true;
            cv.notify_all();
            g.1
        };
        // The timer speaks under the lock, so `said` is exact.
        if let Some(t) = self.timer.take() {
            let _ = t.join();
        }
        if said {
            eprintln!(
                "{} done ({:.1} s)",
                self.what,
                self.since.elapsed().as_secs_f64()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state a step leaves: said only when it outlived [`AFTER`].
    fn said(run: Duration) -> bool {
        let s = Slow::start("a step");
        std::thread::sleep(run);
        let state = s.state.clone();
        drop(s);
        let g = state.0.lock().unwrap();
        assert!(g.0);
        g.1
    }

    #[test]
    fn a_step_says_what_it_does_only_after_a_second() {
        assert!(!said(Duration::ZERO));
        assert!(said(AFTER + Duration::from_millis(300)));
    }
}
