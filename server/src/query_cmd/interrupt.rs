//! Ctrl-C in `engram shell` at a terminal. While a statement runs, SIGINT
//! interrupts it: the prompt comes back and its answer is dropped (the
//! engine has no cancellation point inside a query, and statements only
//! read, so the abandoned one finishes in the background and changes
//! nothing). At most one abandoned statement runs: the next statement
//! waits for it, saying so. A SIGINT while no statement runs (that wait,
//! closing the store after `\q`) ends the process, exit status 130, as it
//! would without the shell's watch; at the prompt the line editor reads
//! Ctrl-C as a key (it clears the line), not as a signal.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::signal::unix::SignalKind;

/// What running a statement gave.
#[derive(Debug, PartialEq)]
pub(super) enum Outcome<T> {
    /// Its answer.
    Answer(T),
    /// Ctrl-C came first.
    Interrupted,
    /// Its thread could not start or ended without an answer (a panic).
    Failed(String),
}

/// The watch of one signal and the statement it may interrupt.
#[derive(Default)]
pub(super) struct Interrupts {
    /// A statement is running: the signal interrupts it.
    running: AtomicBool,
    /// The signal came while one ran.
    interrupted: AtomicBool,
    /// The thread of the last statement interrupted.
    abandoned: Mutex<Option<JoinHandle<()>>>,
}

impl Interrupts {
    /// Watches SIGINT from now on. `None` when the watch cannot be set up
    /// (the shell then runs statements in place: Ctrl-C ends it).
    pub(super) fn watch() -> Option<Arc<Interrupts>> {
        Self::watch_signal(SignalKind::interrupt())
    }

    fn watch_signal(kind: SignalKind) -> Option<Arc<Interrupts>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .ok()?;
        // registered before this returns: no window in which the signal
        // still has its default action
        let mut signals = rt
            .block_on(async { tokio::signal::unix::signal(kind) })
            .ok()?;
        let me = Arc::new(Interrupts::default());
        let seen = me.clone();
        std::thread::Builder::new()
            .name("shell-signal".into())
            .spawn(move || {
                rt.block_on(async move {
                    while signals.recv().await.is_some() {
                        if seen.on_signal() {
                            std::process::exit(130);
                        }
                    }
                })
            })
            .ok()?;
        Some(me)
    }

    /// Takes a signal: interrupts the statement running, if one is; true
    /// when none is (the process should end).
    fn on_signal(&self) -> bool {
        if self.running.load(Ordering::SeqCst) {
            self.interrupted.store(true, Ordering::SeqCst);
            false
        } else {
            true
        }
    }

    /// Runs `work` on its own thread, unless the signal comes first. A
    /// statement interrupted before and still running is waited for
    /// first (`waiting` is called once, to say so).
    pub(super) fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
        waiting: impl FnOnce(),
    ) -> Outcome<T> {
        if let Some(h) = self.abandoned.lock().take() {
            if !h.is_finished() {
                waiting();
            }
            let _ = h.join();
        }
        self.interrupted.store(false, Ordering::SeqCst);
        self.running.store(true, Ordering::SeqCst);
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("shell-statement".into())
            .spawn(move || {
                let _ = tx.send(work());
            });
        let handle = match spawned {
            Ok(h) => h,
            Err(e) => {
                self.running.store(false, Ordering::SeqCst);
                return Outcome::Failed(format!("its thread could not start: {e}"));
            }
        };
        let outcome = loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(answer) => break Outcome::Answer(answer),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if self.interrupted.load(Ordering::SeqCst) {
                        break Outcome::Interrupted;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    break Outcome::Failed("it stopped without an answer".into());
                }
            }
        };
        self.running.store(false, Ordering::SeqCst);
        match outcome {
            Outcome::Interrupted => *self.abandoned.lock() = Some(handle),
            _ => {
                let _ = handle.join();
            }
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// The signal reaches the watch, and interrupts a statement running
    /// (it ended the process, and the session with it); the next statement
    /// waits for the one interrupted, and a signal with none running says
    /// to end the process. SIGUSR2 stands in for SIGINT: the test binary's
    /// own SIGINT stays as it was.
    #[test]
    fn a_signal_interrupts_the_statement_running_and_the_next_waits() {
        let i = Interrupts::watch_signal(SignalKind::user_defined2()).expect("watched");
        assert_eq!(
            i.run(|| 7, || panic!("nothing to wait for")),
            Outcome::Answer(7)
        );
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let done = Arc::new(AtomicBool::new(false));
        let finished = done.clone();
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(100));
            let sent = std::process::Command::new("kill")
                .args(["-USR2", &std::process::id().to_string()])
                .status()
                .unwrap();
            assert!(sent.success());
        });
        let started = Instant::now();
        let out = i.run(
            move || {
                let _ = wait.recv();
                finished.store(true, Ordering::SeqCst);
            },
            || {},
        );
        assert_eq!(out, Outcome::Interrupted);
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(!done.load(Ordering::SeqCst), "answered before it finished");
        // the next statement waits for the abandoned one, saying so
        release.send(()).unwrap();
        let out = i.run(|| 8, || {});
        assert_eq!(out, Outcome::Answer(8));
        assert!(
            done.load(Ordering::SeqCst),
            "the abandoned one was not waited for"
        );
        // with nothing running, the signal ends the process
        assert!(i.on_signal());
    }

    #[test]
    fn a_statement_that_panics_fails_without_ending_the_shell() {
        let i = Interrupts::default();
        let out = i.run(|| -> u8 { panic!("a statement's panic") }, || {});
        assert!(matches!(out, Outcome::Failed(_)), "{out:?}");
        assert_eq!(i.run(|| 9, || {}), Outcome::Answer(9));
    }
}
