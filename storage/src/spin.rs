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
//! The bounds keep an idle store idle: a thread polls only right after it
//! was given work, and for at most [`HANDOFF_POLL`] or [`REPLY_POLL`]
//! before it parks as before.

use std::time::{Duration, Instant};

/// How long the writer and applier threads poll their queues before they
/// park (about one `fdatasync` on a fast disk: the next group is usually
/// queued by then).
pub const HANDOFF_POLL: Duration = Duration::from_micros(300);

/// How long an appender polls for its acknowledgement before it parks.
pub const REPLY_POLL: Duration = Duration::from_micros(200);

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
        assert!(calls >= 2, "polled {calls} times");
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
