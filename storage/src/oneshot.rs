//! A one-value reply slot between two threads.
//!
//! Appending threads wait here for their batch to become durable. A
//! receiver made by [`channel_polling`] (the log's appends) first waits at
//! its log's reply [`Site`]: it polls the slot for up to
//! [`REPLY_POLL`](crate::spin::REPLY_POLL), yielding the CPU between polls
//! so that the writer and applier threads that will answer it run, unless
//! the site's recent waits were longer than that; then it parks on a
//! condition variable. Waking a parked thread costs more than most of a
//! short wait on a virtual machine (docs/benchmarks.md, "Polling before
//! parking"). A receiver made by [`channel`] parks at once.

use std::sync::Arc;

use crate::spin::Site;

use parking_lot::{Condvar, Mutex};

enum State<T> {
    Empty,
    Full(T),
    /// The sender was dropped without sending, or the value was taken.
    Closed,
}

struct Slot<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
}

/// The sending half: sends one value, or closes the slot when dropped.
pub struct Sender<T> {
    slot: Option<Arc<Slot<T>>>,
}

/// The receiving half.
pub struct Receiver<T> {
    slot: Arc<Slot<T>>,
    /// Where to poll before parking (none: park at once).
    site: Option<Arc<Site>>,
}

/// The sender went away without sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Disconnected;

/// A connected pair.
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let slot = Arc::new(Slot {
        state: Mutex::new(State::Empty),
        ready: Condvar::new(),
    });
    (
        Sender {
            slot: Some(slot.clone()),
        },
        Receiver { slot, site: None },
    )
}

/// A slot whose receiver polls at `site` before it parks (see the module
/// documentation).
pub fn channel_polling<T>(site: Arc<Site>) -> (Sender<T>, Receiver<T>) {
    let (tx, mut rx) = channel();
    rx.site = Some(site);
    (tx, rx)
}

impl<T> Sender<T> {
    /// Delivers the value and wakes the receiver.
    pub fn send(mut self, value: T) {
        if let Some(slot) = self.slot.take() {
            *slot.state.lock() = State::Full(value);
            slot.ready.notify_one();
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            let mut state = slot.state.lock();
            if matches!(*state, State::Empty) {
                *state = State::Closed;
            }
            drop(state);
            slot.ready.notify_one();
        }
    }
}

impl<T> Receiver<T> {
    /// Waits for the value.
    pub fn recv(self) -> Result<T, Disconnected> {
        let take = |state: &mut State<T>| match std::mem::replace(state, State::Closed) {
            State::Full(v) => Some(Ok(v)),
            State::Closed => Some(Err(Disconnected)),
            State::Empty => {
                *state = State::Empty;
                None
            }
        };
        let block = || {
            let mut state = self.slot.state.lock();
            loop {
                if let Some(r) = take(&mut state) {
                    return r;
                }
                self.slot.ready.wait(&mut state);
            }
        };
        match &self.site {
            Some(site) => site.wait(
                crate::spin::REPLY_POLL,
                || take(&mut self.slot.state.lock()),
                block,
            ),
            None => block(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_crosses_threads() {
        let (tx, rx) = channel();
        let h = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(5));
            tx.send(42u32);
        });
        assert_eq!(rx.recv(), Ok(42));
        h.join().unwrap();
    }

    #[test]
    fn a_polling_receiver_gets_the_value_or_the_disconnection() {
        let site = Arc::new(Site::new());
        for delay_ms in [0, 5] {
            let (tx, rx) = channel_polling(site.clone());
            let h = std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(delay_ms));
                tx.send(delay_ms);
            });
            assert_eq!(rx.recv(), Ok(delay_ms));
            h.join().unwrap();
            let (tx, rx) = channel_polling::<u8>(site.clone());
            let h = std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(delay_ms));
                drop(tx);
            });
            assert_eq!(rx.recv(), Err(Disconnected));
            h.join().unwrap();
        }
    }

    #[test]
    fn value_sent_before_waiting_is_kept() {
        let (tx, rx) = channel();
        tx.send("x");
        assert_eq!(rx.recv(), Ok("x"));
    }

    #[test]
    fn dropped_sender_disconnects_a_waiting_receiver() {
        let (tx, rx) = channel::<u8>();
        let h = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(5));
            drop(tx);
        });
        assert_eq!(rx.recv(), Err(Disconnected));
        h.join().unwrap();
    }
}
