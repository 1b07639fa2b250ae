//! Short polling waits before a thread blocks, on an append's path.
//!
//! An append crosses three threads: the appender queues its batch for the
//! writer, the writer hands the durable group to the applier, and the
//! applier answers the appender. Each crossing used to park the receiving
//! thread, and waking a parked thread is slow where it matters most: on a
//! virtual machine an idle vCPU halts, and waking it goes through the
//! hypervisor (tens of microseconds each, measured in docs/benchmarks.md,
//! "Polling before parking"). So each receiver first polls for a short,
//! bounded while, yielding the CPU between polls (a thread with work to do
//! runs instead), and parks only if nothing arrived.
//!
//! The bounds keep an idle store idle and a busy one fair: a thread polls
//! only right after it was given work, for at most [`HANDOFF_POLL`] or
//! [`REPLY_POLL`]; no more threads poll one [`Site`] at once than there
//! are cores (a log has three sites: its writer's queue, its applier's
//! queue, and its appenders' replies); and a site whose last measured wait
//! outlasted its bound parks at once the next time, until a wait is short
//! again (one writer appending batches of 1000 waits milliseconds at every
//! hand-off, and polling there only took the CPU from the work it waited
//! for).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long the writer and applier threads poll their queues before they
/// park (one and a half to two `fdatasync`s on this machine's disk: the
/// next group is usually queued by then).
pub const HANDOFF_POLL: Duration = Duration::from_micros(300);

/// How long an appender polls for its acknowledgement before it parks (a
/// little longer than the median acknowledgement under 16 concurrent
/// writers on this machine's disk: two fsyncs and an apply).
pub const REPLY_POLL: Duration = Duration::from_micros(500);

/// The CPUs this process may run on (1 if unknown), read once.
pub fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Calls `poll` until it returns `Some` or `limit` has passed, yielding
/// the CPU between calls. `None`: nothing arrived in time (the caller
/// blocks then).
pub fn poll_for<T>(limit: Duration, mut poll: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = poll() {
            return Some(v);
        }
        if start.elapsed() >= limit {
            return None;
        }
        std::thread::yield_now();
    }
}

/// One place threads wait at, and whether polling pays off there.
pub struct Site {
    /// The last measured wait here outlasted the bound: park at once.
    park_at_once: AtomicBool,
    /// Threads polling here now (at most [`cores`]).
    polling: AtomicUsize,
}

/// A thread's turn to poll at a site; gives it back when dropped (also
/// when a poll panics).
struct Turn<'a>(&'a AtomicUsize);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Site {
    /// A site that polls until a wait proves long.
    pub const fn new() -> Self {
        Site {
            park_at_once: AtomicBool::new(false),
            polling: AtomicUsize::new(0),
        }
    }

    /// A turn to poll, if fewer than [`cores`] threads poll here now.
    fn turn(&self) -> Option<Turn<'_>> {
        self.polling
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < cores()).then_some(n + 1)
            })
            .ok()
            .map(|_| Turn(&self.polling))
    }

    /// Waits for a value: polls with `poll` for up to `limit`, then blocks
    /// with `block`. It does not poll when the site's last measured wait
    /// outlasted `limit`, nor when [`cores`] threads poll here already.
    /// A wait that polled, or that parked at once by the site's choice, is
    /// measured: whether it was short enough for polling to catch it
    /// decides the next wait. (A thread turned away by the cap is not
    /// measured: its long wait says nothing about polling.)
    pub fn wait<T>(
        &self,
        limit: Duration,
        poll: impl FnMut() -> Option<T>,
        block: impl FnOnce() -> T,
    ) -> T {
        let start = Instant::now();
        let measured = if self.park_at_once.load(Ordering::Relaxed) {
            true
        } else if let Some(turn) = self.turn() {
            let polled = poll_for(limit, poll);
            drop(turn);
            if let Some(v) = polled {
                return v;
            }
            true
        } else {
            false
        };
        let v = block();
        if measured {
            self.park_at_once
                .store(start.elapsed() > limit, Ordering::Relaxed);
        }
        v
    }
}

impl Default for Site {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn returns_what_arrives_within_the_limit() {
        let flag = Arc::new(AtomicBool::new(false));
        let f = flag.clone();
        let h = std::thread::spawn(move || f.store(true, Ordering::Release));
        let got = poll_for(Duration::from_secs(10), || {
            flag.load(Ordering::Acquire).then_some(7)
        });
        h.join().unwrap();
        assert_eq!(got, Some(7));
    }

    #[test]
    fn gives_up_after_the_limit() {
        let start = Instant::now();
        let mut calls = 0;
        let got: Option<()> = poll_for(Duration::from_millis(2), || {
            calls += 1;
            None
        });
        assert_eq!(got, None);
        assert!(start.elapsed() >= Duration::from_millis(2));
        assert!(calls >= 1);
    }

    #[test]
    fn a_site_parks_at_once_after_a_long_wait_and_polls_again_after_a_short_one() {
        let site = Site::new();
        let limit = Duration::from_millis(1);
        let polls = std::cell::Cell::new(0);
        let poll = || {
            polls.set(polls.get() + 1);
            None::<u8>
        };
        // nothing arrives while polling: the wait blocks, and takes long
        let got = site.wait(limit, poll, || {
            std::thread::sleep(Duration::from_millis(5));
            1
        });
        assert_eq!(got, 1);
        assert!(polls.get() >= 1);
        // so the next wait does not poll at all; it is short (measured
        // against a bound no pause of a loaded machine reaches)
        polls.set(0);
        assert_eq!(site.wait(Duration::from_secs(60), poll, || 2), 2);
        assert_eq!(polls.get(), 0);
        // and after a short wait the site polls again
        assert_eq!(site.wait(limit, || Some(3), || 4), 3);
    }

    #[test]
    fn a_poll_that_panics_gives_its_turn_back() {
        let site = Site::new();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            site.wait(
                Duration::from_secs(1),
                || -> Option<u8> { panic!("poll failed") },
                || 0,
            )
        }));
        assert!(r.is_err());
        assert_eq!(site.polling.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn no_more_turns_than_cores() {
        let site = Site::new();
        let turns: Vec<_> = (0..cores()).map(|_| site.turn().expect("a turn")).collect();
        assert!(site.turn().is_none());
        drop(turns);
        assert!(site.turn().is_some());
    }

    #[test]
    fn a_zero_limit_polls_once() {
        let mut calls = 0;
        let got: Option<()> = poll_for(Duration::ZERO, || {
            calls += 1;
            None
        });
        assert_eq!((got, calls), (None, 1));
    }
}
