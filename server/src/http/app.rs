//! The state every handler shares: the open store, the keys, the limits,
//! the metrics, and the bounded queues through which handlers reach the
//! engine.
//!
//! Engine calls block (an append waits for its group commit's fsync), so
//! they run on tokio's blocking pool, and only after taking a slot of a
//! queue: writes ([`App::write`]: appends, lifecycle operations, bulk
//! batches) into the single group-commit writer, reads ([`App::read`]),
//! and backups. A full queue answers 429 with `Retry-After` instead of
//! buffering requests; the slot is held until the engine call returns,
//! even when the client has gone (a request past its deadline), so the
//! work in the blocking pool stays bounded by the queue sizes.
//!
//! This module must never decide what a caller may do (that is
//! `engram_engine::authz`) nor touch a file of the store.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use engram_engine::{EngineError, Engram};
use tokio::sync::{OwnedRwLockReadGuard, OwnedSemaphorePermit, RwLock, Semaphore};

use crate::http::config::Config;
use crate::http::error::{ServerError, ServerResult};
use crate::http::keys::KeyStore;
use crate::http::logging;
use crate::http::metrics::{Metrics, Snapshot};

/// Everything the handlers share.
#[derive(Debug)]
pub struct App {
    /// The open store (replaced by online compaction's swap).
    db: parking_lot::RwLock<Engram>,
    /// Held shared by every engine call, exclusively by online
    /// compaction's swap of the store's files ([`App::bind`]).
    swap_gate: Arc<RwLock<()>>,
    /// Set while online compaction waits for the swap gate: a request
    /// waiting for a write slot holds the gate (its session is bound) and
    /// can get no slot before the swap (compaction holds them all), so it
    /// gives up at once (429) rather than hold the swap, and the whole
    /// compaction, until its wait runs out.
    swap_wanted: AtomicBool,
    /// Wakes the requests waiting for a write slot when `swap_wanted` is set.
    swap_notify: tokio::sync::Notify,
    /// Set from when an online compaction starts taking the write slots
    /// until it ends: a bulk batch, which otherwise waits for a slot
    /// (the stream's backpressure), is refused then (429 `busy`), as an
    /// append is, rather than wait out the whole compaction unanswered.
    compacting: Arc<AtomicBool>,
    /// Wakes the bulk batches waiting for a write slot when `compacting`
    /// is set.
    compact_notify: tokio::sync::Notify,
    /// The API keys.
    pub keys: KeyStore,
    /// Configuration and limits.
    pub cfg: Config,
    /// Counters.
    pub metrics: Metrics,
    writes: Arc<Semaphore>,
    reads: Arc<Semaphore>,
    backups: Arc<Semaphore>,
    /// Request bodies held while they are parsed and served, in KiB (see
    /// [`App::hold_body`]).
    bodies: Arc<Semaphore>,
    /// Answers built and not yet read by their clients (`http::answer`).
    pub answers: Arc<crate::http::answer::AnswerRoom>,
    ready: AtomicBool,
    request_seq: AtomicU64,
    request_prefix: String,
    /// Keys [`App::next_request_id`]'s scrambling of the sequence.
    request_key: u64,
    last_key_problem: Mutex<Option<String>>,
    /// The log counters of store handles replaced by online compaction:
    /// added to the current handle's, so `/metrics` counters only go down
    /// when the process restarts.
    log_carried: parking_lot::Mutex<engram_storage::LogStats>,
}

/// What handlers hold.
pub type Shared = Arc<App>;

/// Clears a flag when dropped (a reference to it, or an `Arc` that can
/// move into a blocking task).
struct ClearOnDrop<F: std::ops::Deref<Target = AtomicBool>>(F);

impl<F: std::ops::Deref<Target = AtomicBool>> Drop for ClearOnDrop<F> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// How many KiB of request bodies are held at once, from when a body is
/// read until its handler returns (24 MiB). Parsed, a JSON body takes up
/// to about 75 times its size in memory (a tree of values: a 16 MiB body
/// of small numbers peaked at 1.3 GB), so without a bound a few clients
/// sending bodies near `body_bytes_max` at once could exhaust the
/// machine's memory; past it a request waits (up to its deadline). One
/// body of the default maximum (16 MiB) fits beside smaller ones, two do
/// not. A body larger than the whole room takes all of it.
pub const BODIES_HELD_KIB: usize = 24 * 1024;

/// Waits for `bytes`' share of `room` (KiB of [`BODIES_HELD_KIB`]).
async fn hold(room: &Arc<Semaphore>, bytes: usize) -> BodyHold {
    let kib = bytes.div_ceil(1024).min(BODIES_HELD_KIB);
    if kib == 0 {
        return BodyHold(None);
    }
    let n = u32::try_from(kib).unwrap_or(u32::MAX);
    BodyHold(room.clone().acquire_many_owned(n).await.ok())
}

/// A request body's share of [`BODIES_HELD_KIB`], given back when dropped.
#[derive(Debug)]
pub struct BodyHold(#[allow(dead_code)] Option<tokio::sync::OwnedSemaphorePermit>);

/// Which bounded queue a call goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Queue {
    /// Into the group-commit writer.
    Write,
    /// Reads.
    Read,
    /// Online backups and compactions (one at a time).
    Backup,
}

impl App {
    /// The state of a server over `db`.
    pub fn new(db: Engram, keys: KeyStore, cfg: Config) -> App {
        let l = &cfg.limits;
        let mut prefix = [0u8; 4];
        let _ = getrandom::fill(&mut prefix);
        let mut key = [0u8; 8];
        let _ = getrandom::fill(&mut key);
        App {
            db: parking_lot::RwLock::new(db),
            swap_gate: Arc::new(RwLock::new(())),
            swap_wanted: AtomicBool::new(false),
            swap_notify: tokio::sync::Notify::new(),
            compacting: Arc::new(AtomicBool::new(false)),
            compact_notify: tokio::sync::Notify::new(),
            keys,
            writes: Arc::new(Semaphore::new(l.appends_in_flight_max)),
            reads: Arc::new(Semaphore::new(l.queries_in_flight_max)),
            backups: Arc::new(Semaphore::new(1)),
            bodies: Arc::new(Semaphore::new(BODIES_HELD_KIB)),
            answers: Arc::new(crate::http::answer::AnswerRoom::new(
                l.answer_bytes_in_flight_max,
            )),
            cfg,
            metrics: Metrics::default(),
            ready: AtomicBool::new(true),
            request_seq: AtomicU64::new(0),
            request_prefix: engram_engine::db::hex(&prefix),
            request_key: u64::from_le_bytes(key),
            last_key_problem: Mutex::new(None),
            log_carried: parking_lot::Mutex::new(engram_storage::LogStats::default()),
        }
    }

    /// Waits for room to hold a body of `bytes` (see [`BODIES_HELD_KIB`]).
    pub async fn hold_body(&self, bytes: usize) -> BodyHold {
        hold(&self.bodies, bytes).await
    }

    /// The store's handle now, for what needs no gate (its directory,
    /// gauges, closing it at shutdown). Engine calls go through
    /// [`App::bind`].
    pub fn db(&self) -> Engram {
        self.db.read().clone()
    }

    /// The store's handle, bound to the swap gate: online compaction's
    /// swap waits until every bound handle (and session made from one) is
    /// dropped, and new ones wait for the swap.
    pub async fn bind(&self) -> Bound<Engram> {
        let gate = Arc::new(self.swap_gate.clone().read_owned().await);
        Bound {
            inner: self.db(),
            _gate: gate,
        }
    }

    /// Compacts the store while it serves: takes every write slot (appends
    /// wait, then answer 429 with `Retry-After`), runs the engine's online
    /// compaction, and installs the new handle under the swap gate (reads
    /// pause only for the swap).
    pub async fn compact(
        self: &Arc<Self>,
    ) -> ServerResult<engram_engine::maintenance::CompactReport> {
        let n = u32::try_from(self.cfg.limits.appends_in_flight_max).unwrap_or(u32::MAX);
        let one = self.slot(Queue::Backup).await?;
        // (cleared when the compaction ends, or when this handler is
        // dropped before it starts)
        self.compacting.store(true, Ordering::SeqCst);
        let compacting = ClearOnDrop(self.compacting.clone());
        self.compact_notify.notify_waiters();
        let writes = self
            .writes
            .clone()
            .acquire_many_owned(n)
            .await
            .map_err(|e| ServerError::Internal {
                detail: format!("write queue closed: {e}"),
            })?;
        let app = self.clone();
        run_blocking(move || {
            // The one slot of backups and compactions is held until the
            // compaction ends, not until its handler does: a client that
            // goes away drops the handler while the compaction runs on, and
            // a backup taking the slot then held the swap gate the
            // compaction waited for (every request hung), or a second
            // compaction waited for every write slot behind it.
            let _one = one;
            let _compacting = compacting;
            // (cleared however the compaction ends, a panic included: set,
            // every append that must wait for a slot is refused at once)
            let _clear = ClearOnDrop(&app.swap_wanted);
            let db = app.db();
            let gate = app.swap_gate.clone();
            let out = db.compact_online(|| {
                app.swap_wanted.store(true, Ordering::SeqCst);
                app.swap_notify.notify_waiters();
                gate.blocking_write()
            });
            let r = match out {
                Ok(out) => {
                    if let Some(paused) = out.reads_paused {
                        app.carry_log_counters(&db);
                        *app.db.write() = out.db;
                        // (every waiter was refused: requests that bind
                        // after the swap wait for a slot as usual)
                        app.swap_wanted.store(false, Ordering::SeqCst);
                        drop(paused);
                    }
                    // (counted here: a client gone before the answer does
                    // not undo it)
                    app.metrics.lifecycle("compact");
                    Ok(out.report)
                }
                Err(e) => {
                    // A failure after the old handle closed: open the store
                    // again (its files are consistent at every step).
                    if db.is_closed() {
                        let _g = gate.blocking_write();
                        match Engram::open(db.dir(), db.options().clone()) {
                            Ok(new) => {
                                app.carry_log_counters(&db);
                                *app.db.write() = new;
                            }
                            Err(reopen) => {
                                app.stop_accepting();
                                logging::log(
                                    "error",
                                    "store could not be reopened after a failed compaction",
                                    &[("error", reopen.to_string().into())],
                                );
                            }
                        }
                    }
                    Err(ServerError::from(e))
                }
            };
            drop(writes);
            r
        })
        .await
    }

    /// A fresh request id (`<process prefix>-<16 hex digits>`): the
    /// process's request sequence under a keyed bijection, so an id never
    /// repeats within a process, yet tells a client nothing of how many
    /// requests every tenant made before its own.
    pub fn next_request_id(&self) -> String {
        let n = self.request_seq.fetch_add(1, Ordering::Relaxed) + 1;
        format!(
            "{}-{:016x}",
            self.request_prefix,
            scramble(n ^ self.request_key)
        )
    }

    /// Whether the server still accepts requests.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Marks the server as shutting down (`/readyz` answers 503).
    pub fn stop_accepting(&self) {
        self.ready.store(false, Ordering::Release);
    }

    /// Logs a key-file problem once (until it changes).
    pub fn key_problem(&self, problem: String) {
        if let Ok(mut last) = self.last_key_problem.lock() {
            if last.as_deref() != Some(problem.as_str()) {
                logging::log(
                    "error",
                    "key file unusable: every key is refused until it is fixed",
                    &[("error", problem.clone().into())],
                );
                *last = Some(problem);
            }
        }
    }

    /// Keeps the log counters of `old`, a handle about to be replaced.
    fn carry_log_counters(&self, old: &Engram) {
        self.log_carried.lock().add_counters(&old.log_stats());
    }

    /// The log's statistics, its counters summed over every handle this
    /// process has had (see `log_carried`).
    fn log_stats(&self) -> engram_storage::LogStats {
        let mut s = self.db().log_stats();
        s.add_counters(&self.log_carried.lock());
        s
    }

    /// What `/metrics` shows of the engine and the queues now.
    pub fn snapshot(&self) -> Snapshot {
        let l = &self.cfg.limits;
        Snapshot {
            log: self.log_stats(),
            store: self.db().gauges(),
            appends_in_flight: (
                l.appends_in_flight_max - self.writes.available_permits(),
                l.appends_in_flight_max,
            ),
            queries_in_flight: (
                l.queries_in_flight_max - self.reads.available_permits(),
                l.queries_in_flight_max,
            ),
            // (the key file as it stands now: a scrape sees a revocation
            // without waiting for a request to read the file again)
            keys_active: {
                if let Some(problem) = self.keys.file_problem() {
                    self.key_problem(problem);
                }
                self.keys.n_active()
            },
            ready: self.is_ready(),
        }
    }

    /// Takes a slot of `queue`, waiting at most its configured time.
    pub async fn slot(&self, queue: Queue) -> ServerResult<OwnedSemaphorePermit> {
        let l = &self.cfg.limits;
        let (sem, wait_ms, what) = match queue {
            Queue::Write => (&self.writes, l.append_queue_wait_ms, "appends"),
            Queue::Read => (&self.reads, l.query_queue_wait_ms, "queries"),
            // backups and compactions share this one slot
            Queue::Backup => (&self.backups, 0, "backups"),
        };
        let got = match sem.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) if wait_ms == 0 => None,
            Err(_) => {
                let wait = tokio::time::timeout(
                    Duration::from_millis(wait_ms),
                    sem.clone().acquire_owned(),
                );
                if matches!(queue, Queue::Write) {
                    // (registered before the flag is read: a swap wanted
                    // in between still wakes it)
                    let swap = self.swap_notify.notified();
                    tokio::pin!(swap);
                    swap.as_mut().enable();
                    if self.swap_wanted.load(Ordering::SeqCst) {
                        None
                    } else {
                        tokio::select! {
                            got = wait => got.ok().and_then(Result::ok),
                            () = swap => None,
                        }
                    }
                } else {
                    wait.await.ok().and_then(Result::ok)
                }
            }
        };
        got.ok_or_else(|| {
            self.metrics.throttled(what);
            ServerError::Busy {
                what,
                retry_after_s: 1,
            }
        })
    }

    /// A write slot for a bulk batch: waiting as long as the queue is full
    /// (the stream's backpressure), but refused (429 `busy`) while an
    /// online compaction holds the slots, which may take minutes, as an
    /// append is.
    pub async fn bulk_write_slot(&self) -> ServerResult<OwnedSemaphorePermit> {
        loop {
            // (registered before the flag is read: a compaction starting
            // in between still wakes it)
            let started = self.compact_notify.notified();
            tokio::pin!(started);
            started.as_mut().enable();
            if self.compacting.load(Ordering::SeqCst) {
                self.metrics.throttled("appends");
                return Err(ServerError::Busy {
                    what: "appends",
                    retry_after_s: 1,
                });
            }
            tokio::select! {
                got = self.writes.clone().acquire_owned() => {
                    // (the semaphores are never closed)
                    if let Ok(p) = got {
                        return Ok(p);
                    }
                }
                () = started => {}
            }
        }
    }

    /// Runs the blocking engine call `f` through `queue`.
    pub async fn run<T, F>(&self, queue: Queue, f: F) -> ServerResult<T>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, EngineError> + Send + 'static,
    {
        let permit = self.slot(queue).await?;
        run_blocking(move || {
            let r = f();
            drop(permit);
            r.map_err(ServerError::from)
        })
        .await
    }

    /// [`App::run`], counting the lifecycle operation `op` once `f` did it:
    /// inside the blocking call, so a client gone before the answer (the
    /// handler dropped, the call running to its end) does not undo it.
    pub async fn run_counted<T, F>(
        self: &Arc<Self>,
        queue: Queue,
        op: &'static str,
        f: F,
    ) -> ServerResult<T>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, EngineError> + Send + 'static,
    {
        let app = self.clone();
        self.run(queue, move || {
            let r = f()?;
            app.metrics.lifecycle(op);
            Ok(r)
        })
        .await
    }

    /// [`App::run`] through the write queue.
    pub async fn write<T, F>(&self, f: F) -> ServerResult<T>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, EngineError> + Send + 'static,
    {
        self.run(Queue::Write, f).await
    }

    /// [`App::run`] through the read queue.
    pub async fn read<T, F>(&self, f: F) -> ServerResult<T>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, EngineError> + Send + 'static,
    {
        self.run(Queue::Read, f).await
    }

    /// Runs an append batch of `n_records` through the write queue and
    /// records its size and engine time.
    pub async fn append<T, F>(&self, n_records: usize, f: F) -> ServerResult<T>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, EngineError> + Send + 'static,
    {
        let started = Instant::now();
        let r = self.write(f).await?;
        self.metrics
            .append(n_records, started.elapsed().as_secs_f64());
        Ok(r)
    }
}

/// A store handle (or a session of one) with a hold on the swap gate
/// ([`App::bind`]): dereferences to the handle.
#[derive(Debug, Clone)]
pub struct Bound<T> {
    inner: T,
    _gate: Arc<OwnedRwLockReadGuard<()>>,
}

impl<T> Bound<T> {
    /// The same hold on the gate, over `inner` made from the bound handle.
    pub fn map<U>(&self, f: impl FnOnce(&T) -> U) -> Bound<U> {
        Bound {
            inner: f(&self.inner),
            _gate: self._gate.clone(),
        }
    }
}

impl<T> std::ops::Deref for Bound<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

/// Runs `f` on the blocking pool; a panic in it is an internal error.
pub async fn run_blocking<T, F>(f: F) -> ServerResult<T>
where
    T: Send + 'static,
    F: FnOnce() -> ServerResult<T> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ServerError::Internal {
            detail: format!("engine call failed: {e}"),
        })?
}

/// SplitMix64's finalizer: a bijection on `u64` whose output looks random
/// (distinct inputs, distinct outputs; neighbours far apart).
fn scramble(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::{BODIES_HELD_KIB, Semaphore, hold, scramble};
    use std::sync::Arc;
    use std::time::Duration;

    /// Bodies past the room for them wait until one is done with; a body
    /// larger than all of it takes all of it (and is not refused).
    #[test]
    fn bodies_past_the_room_for_them_wait() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let room = Arc::new(Semaphore::new(BODIES_HELD_KIB));
            let huge = hold(&room, usize::MAX).await;
            assert_eq!(room.available_permits(), 0);
            let waiting = tokio::time::timeout(Duration::from_millis(50), hold(&room, 10)).await;
            assert!(waiting.is_err(), "a body was held past the room");
            drop(huge);
            let small = hold(&room, 10 * 1024).await;
            assert_eq!(room.available_permits(), BODIES_HELD_KIB - 10);
            let empty = hold(&room, 0).await;
            assert_eq!(room.available_permits(), BODIES_HELD_KIB - 10);
            drop((small, empty));
            assert_eq!(room.available_permits(), BODIES_HELD_KIB);
        });
    }

    #[test]
    fn request_ids_never_repeat_and_do_not_count() {
        let key = 0x1234_5678_9abc_def0;
        let ids: Vec<u64> = (1..=10_000u64).map(|n| scramble(n ^ key)).collect();
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len(), "a bijection repeats nothing");
        // neighbours in the sequence are far apart: no id tells the next
        assert!(ids.windows(2).all(|w| w[0].abs_diff(w[1]) > 1 << 20));
    }
}
