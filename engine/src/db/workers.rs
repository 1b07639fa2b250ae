//! Background work and shutdown: the vector indexer, the checkpointer,
//! `checkpoint` itself and `close`. Their failures are kept and surfaced
//! by `stats` and the calls that need them, never swallowed.

use super::*;

impl Engram {
    /// Blocks until every vector that can be is in its graph: all but, in
    /// a space past 1,024 vectors, the last batch's while it holds fewer
    /// than 64 (they wait for the batch to fill, and are searched exactly
    /// meanwhile; see `vector::hnsw::BATCH`).
    pub fn wait_indexed(&self) -> Result<()> {
        self.index_until(None).map(|_| ())
    }

    /// Indexes waiting vectors on every core until none is left that can
    /// be (true) or `deadline` passes (false; the rest stay waiting,
    /// searched exactly, for the indexer or a later call).
    fn index_until(&self, deadline: Option<Instant>) -> Result<bool> {
        if let Some(e) = self.inner.indexer_error.lock().clone() {
            return Err(EngineError::Background {
                worker: "indexer".into(),
                detail: format!(
                    "{e}; vectors not in the graph are still searched exactly; reopen the store to index them"
                ),
            });
        }
        // Batches are planned on every core (the graph is the same on any
        // number; see `vector::hnsw::BATCH`).
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
        /// Counts this caller in `bulk_indexing` until it returns.
        struct Bulk<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Bulk<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
            }
        }
        self.inner
            .bulk_indexing
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let _bulk = Bulk(&self.inner.bulk_indexing);
        loop {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
            // (a step is at most 256 insertions: a deadline is overrun by
            // about 256 x 0.5 ms / cores at most)
            let st = self.inner.state.read();
            let done = st.vectors.index_pending(256, threads)?;
            if done == 0 && st.vectors.indexable() == 0 {
                st.vectors.trim_batch_scratch();
                drop(st);
                self.inner.state.write().vectors.remap_all()?;
                return Ok(true);
            }
        }
    }

    /// Makes derived state durable: vector files and graphs, the lexical
    /// snapshot, and the state checkpoint, all at the LSN applied now, so
    /// the next open replays only the log after it. (The log is always
    /// durable; this only shortens the next open.)
    pub fn checkpoint(&self) -> Result<()> {
        self.check_open()?;
        if self.inner.opts.read_only {
            return Ok(());
        }
        let _one = self.inner.checkpointing.lock();
        let mut st = self.inner.state.write();
        let ids: Vec<RecordId> = st.metas.iter().map(|m| m.id).collect();
        st.vectors.checkpoint(&|i| ids[i as usize])?;
        drop(ids);
        // Encoded under a read lock (readers go on; the commit hook waits),
        // written without one. The vector files were persisted at this
        // same point under the write lock just released by the downgrade.
        let st = parking_lot::RwLockWriteGuard::downgrade(st);
        let lsn = st.applied_lsn;
        let mut lexical = Vec::new();
        st.lexical.write_to(&mut lexical);
        let anchor = crate::checkpoint::anchor_crc(&self.inner.log, &st)?;
        let lexical_anchor =
            st.applied_loc
                .filter(|l| l.lsn != 0)
                .map_or_else(Default::default, |l| crate::lexical::snapshot::Anchor {
                    segment: l.segment,
                    offset: l.offset,
                    payload_crc: anchor,
                });
        let body = crate::checkpoint::encode(&st, &st.vectors.slots(), anchor);
        drop(st);
        // The lexical snapshot first: a checkpoint is used only when the
        // lexical snapshot sits at its LSN, so a crash between the two
        // writes costs a full replay, never a mismatched state.
        crate::lexical::snapshot::write(
            self.inner.backend.as_ref(),
            &layout::lexical(&self.inner.dir),
            lsn,
            lexical_anchor,
            &lexical,
        )?;
        crate::checkpoint::write(self.inner.backend.as_ref(), &self.inner.dir, lsn, &body)?;
        self.inner.checkpoint_lsn.store(lsn, Ordering::Release);
        Ok(())
    }

    /// Finishes queued work, writes a checkpoint and closes the store.
    /// Every vector is in its graph first (see [`Engram::wait_indexed`]),
    /// which after a large ingest can take minutes; [`Engram::close_within`]
    /// bounds that.
    pub fn close(&self) -> Result<()> {
        self.close_within(Duration::MAX).map(|_| ())
    }

    /// Closes the store as [`Engram::close`] does, but indexes waiting
    /// vectors for at most about `indexing`: the checkpoint then holds the
    /// graphs as far as they got, and the next open indexes the rest in
    /// the background (searched exactly meanwhile). The graphs end up the
    /// same either way (they are a function of the vectors). Returns how
    /// many vectors the cut left waiting for the next open (0 when every
    /// vector that can be is in its graph). For a server's shutdown, which
    /// an operator (or a service manager's stop timeout) waits for.
    pub fn close_within(&self, indexing: Duration) -> Result<u64> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(0);
        }
        let deadline = Instant::now().checked_add(indexing);
        self.stop_writer_and_workers();
        self.inner.closed.store(false, Ordering::Release);
        let r = self.index_until(deadline).and_then(|_| {
            self.checkpoint()?;
            Ok(self.inner.state.read().vectors.indexable() as u64)
        });
        self.inner.closed.store(true, Ordering::Release);
        // Release the directory: sessions that outlive the store now fail
        // with `Closed`, and another handle may open it.
        drop(self.inner.lock.lock().take());
        r
    }
}

impl Engram {
    /// Closes the log (appends fail from here) and stops the indexer and
    /// the checkpointer, waiting for their current step.
    fn stop_writer_and_workers(&self) {
        self.inner.log.close();
        drop(self.inner.indexer_tx.lock().take());
        if let Some(h) = self.inner.indexer.lock().take() {
            let _ = h.join();
        }
        drop(self.inner.checkpointer_tx.lock().take());
        if let Some(h) = self.inner.checkpointer.lock().take() {
            let _ = h.join();
        }
    }

    /// Closes the store for a swap of its files (online compaction):
    /// stops the writer and the workers without writing derived state (it
    /// is about to be replaced) and hands over the directory lock instead
    /// of releasing it. `None` when the store was already closed.
    pub(crate) fn close_for_swap(&self) -> Option<LockGuard> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return None;
        }
        self.stop_writer_and_workers();
        self.inner.lock.lock().take()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Best effort: stop threads. `Engram::close` writes the checkpoint.
        self.log.close();
        drop(self.indexer_tx.lock().take());
        if let Some(h) = self.indexer.lock().take() {
            let _ = h.join();
        }
        drop(self.checkpointer_tx.lock().take());
        if let Some(h) = self.checkpointer.lock().take() {
            // The checkpointer holds only a weak handle; it may be the one
            // dropping the last strong one, and must not join itself.
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

/// Writes a state checkpoint in the background once enough frames were
/// applied since the last one. Holds only a weak handle, so a store dropped
/// without `close` still goes away; stops when the channel closes.
pub(super) fn checkpoint_loop(inner: std::sync::Weak<Inner>, rx: crossbeam_channel::Receiver<()>) {
    let mut last_attempt = Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_millis(500)) {
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let due = {
            let applied = inner.state.read().applied_lsn;
            let done = inner.checkpoint_lsn.load(Ordering::Acquire);
            applied.saturating_sub(done) >= inner.opts.checkpoint_after_frames
                && last_attempt.elapsed() >= inner.opts.checkpoint_min_interval
        };
        if due {
            last_attempt = Instant::now();
            let db = Engram {
                inner: inner.clone(),
            };
            match db.checkpoint() {
                Ok(()) => *inner.checkpoint_error.lock() = None,
                Err(EngineError::Closed) => return,
                Err(e) => *inner.checkpoint_error.lock() = Some(e.to_string()),
            }
        }
    }
}

/// The log counts as busy for this long after it moved.
/// Long enough to span the gap between one writer's batches of 1000 (each
/// takes some 10-25 ms to append), so a batch load counts as appends
/// arriving, not as a quiet log between its batches.
const INGEST_QUIET: Duration = Duration::from_millis(50);

/// How often the indexer looks again while it waits for appends below the
/// lag.
const WAIT_POLL: Duration = Duration::from_millis(5);

/// Vectors the graphs may fall behind while appends arrive before the
/// indexer works anyway. A turn holds no state lock while it plans (see
/// `indexer_loop`), but it takes CPU and cache that appends would use,
/// and a burst below this lag is then not slowed by indexing at all.
/// Waiting vectors are searched exactly, so the lag costs a query at most
/// an exact scan of this many.
const INGEST_FIRST_LAG: usize = 8192;

/// Whether the indexer waits: the log moved `since_moved` ago, and the
/// graphs can take `indexable` vectors now.
fn appends_first(since_moved: Duration, indexable: usize) -> bool {
    since_moved < INGEST_QUIET && indexable < INGEST_FIRST_LAG
}

/// The indexer's share of its own time while appends arrive faster than
/// it could index them flat out, the graphs lagging past
/// [`INGEST_FIRST_LAG`], in percent: after each turn it pauses for the
/// rest. Then the graphs fall behind whatever the indexer does (an
/// insertion costs about ten times the CPU of the rest of an event's
/// ingest), and running flat out took 29-50% of 16 single-event writers'
/// acknowledged rate, paced 0-7% (docs/benchmarks.md, "A paced indexer").
/// Appends it can keep up with, and a quiet log, get it flat out: the lag,
/// and the exact scans of the vectors waiting, stay short.
const INGEST_INDEX_SHARE: u32 = 10;

/// How often the indexer compares the rate vectors arrive at with the
/// rate it indexes them at ([`Pace`]).
const PACE_WINDOW: Duration = Duration::from_millis(50);

/// Time in turns below which a window says nothing of the indexer's rate.
const PACE_BUSY_MIN: Duration = Duration::from_millis(10);

/// Whether appends outrun the indexer: vectors arrive (`arrived` over
/// `window`) faster than it indexes them per second of its own work
/// (`capacity`, vectors per second in turns; unknown until measured).
fn outrun(arrived: usize, window: Duration, capacity: Option<f64>) -> bool {
    match capacity {
        Some(c) if !window.is_zero() => arrived as f64 / window.as_secs_f64() > c,
        _ => false,
    }
}

/// Vectors the graphs must have taken before a measure of the indexer's
/// rate counts: past the first 1,024 slots a graph takes whole batches, so
/// a shorter span would see none or one of them.
const PACE_INDEXED_MIN: usize = crate::vector::hnsw::BATCH as usize;

/// The indexer's measure of the recent past: the vectors that arrived in
/// the last window, and its own rate (vectors put in the graphs per second
/// of its turns), measured over as many windows as it takes to see
/// [`PACE_BUSY_MIN`] of work and [`PACE_INDEXED_MIN`] vectors indexed.
struct Pace {
    /// When the current window started, and the vectors then.
    started: Instant,
    total: usize,
    /// The vectors in the graphs when the current measure of the rate
    /// started, and the time in turns since.
    in_graphs: usize,
    busy: Duration,
    /// Vectors per second of turns, from the last measure.
    capacity: Option<f64>,
    /// Whether the last window's appends outran the indexer.
    outrun: bool,
}

impl Pace {
    fn new(total: usize, in_graphs: usize) -> Self {
        Pace {
            started: Instant::now(),
            total,
            in_graphs,
            busy: Duration::ZERO,
            capacity: None,
            outrun: false,
        }
    }

    /// Counts taken at the top of a turn: closes the window once it is
    /// [`PACE_WINDOW`] old, and the measure of the rate once it has seen
    /// enough.
    fn observe(&mut self, total: usize, in_graphs: usize) {
        if in_graphs < self.in_graphs {
            // graphs rebuilt under it: measure anew
            self.in_graphs = in_graphs;
            self.busy = Duration::ZERO;
        }
        let window = self.started.elapsed();
        if window < PACE_WINDOW {
            return;
        }
        let indexed = in_graphs - self.in_graphs;
        if self.busy >= PACE_BUSY_MIN && indexed >= PACE_INDEXED_MIN {
            self.capacity = Some(indexed as f64 / self.busy.as_secs_f64());
            self.in_graphs = in_graphs;
            self.busy = Duration::ZERO;
        }
        self.outrun = outrun(total.saturating_sub(self.total), window, self.capacity);
        self.started = Instant::now();
        self.total = total;
    }
}

/// Sleeps for `d` unless the store closes meanwhile (wake-ups for new
/// vectors do not cut it short). Returns whether the store is closing.
fn pause(rx: &crossbeam_channel::Receiver<()>, d: Duration) -> bool {
    let until = Instant::now() + d;
    loop {
        match rx.recv_deadline(until) {
            Ok(()) => continue,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => return false,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return true,
        }
    }
}

/// The longest pause after one turn: a turn held up (preempted, or waiting
/// for a lock) does not stop the indexer for long.
const PAUSE_MAX: Duration = Duration::from_millis(50);

/// How long the indexer pauses after a turn that took `turn`, the log
/// having moved `since_moved` ago: its share of the time while appends
/// arrive, no pause once they stopped.
fn pause_after_turn(since_moved: Duration, turn: Duration) -> Duration {
    if since_moved >= INGEST_QUIET {
        return Duration::ZERO;
    }
    (turn * (100 - INGEST_INDEX_SHARE) / INGEST_INDEX_SHARE).min(PAUSE_MAX)
}

/// The indexer thread's nice value: CPU goes to appends and queries first.
/// HNSW insertion costs about ten times the CPU of the rest of ingest, so
/// on a machine whose cores ingest keeps busy an indexer at the same
/// priority takes a core from it (docs/benchmarks.md); a lower one uses
/// what appends and queries leave. Under sustained load the graph then
/// lags, and the vectors not in it are searched exactly.
const INDEXER_NICE: i32 = 19;

/// Lowers the calling thread's CPU priority to `nice` (Linux: the nice
/// value is per thread). Best effort: returns whether it took.
#[allow(unsafe_code)]
fn lower_thread_priority(nice: i32) -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: setpriority takes plain integers and touches no memory
        // of ours; `who` 0 with PRIO_PROCESS names the calling thread.
        // Raising a nice value needs no privilege.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = nice;
        false
    }
}

pub(super) fn indexer_loop(
    state: Arc<RwLock<State>>,
    rx: crossbeam_channel::Receiver<()>,
    err: Arc<Mutex<Option<String>>>,
    bulk: Arc<std::sync::atomic::AtomicUsize>,
) {
    lower_thread_priority(INDEXER_NICE);
    let mut remapped = true;
    // The rows of the space being indexed, kept between turns.
    let mut rows = crate::vector::space::SpaceRows::default();
    // When the log last moved (see `INGEST_FIRST_LAG`).
    let mut applied = 0;
    let mut moved = Instant::now();
    let mut pace: Option<Pace> = None;
    loop {
        // A closed channel means the store is closing: the backlog is left
        // to `close`'s `wait_indexed` (every core) or to the next open.
        // (A wake-up taken here is one the turn below answers.)
        if let Err(crossbeam_channel::TryRecvError::Disconnected) = rx.try_recv() {
            return;
        }
        // `wait_indexed` is at work on every core: step aside.
        if bulk.load(std::sync::atomic::Ordering::Acquire) > 0 {
            // the graphs grow without this thread's turns: measure anew
            pace = None;
            match rx.recv_timeout(Duration::from_millis(20)) {
                Ok(()) | Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
            }
        }
        let st = state.read();
        let (pending, indexable) = st.vectors.pending_and_indexable();
        let total = st.vectors.total();
        let pace = pace.get_or_insert_with(|| Pace::new(total, total - pending));
        pace.observe(total, total - pending);
        if indexable == 0 {
            drop(st);
            if !remapped {
                // Caught up: fold appended rows into the memory map.
                let _ = state.write().vectors.remap_all();
                remapped = true;
                // and let go of the rows' view (a mapping and a copy).
                rows = crate::vector::space::SpaceRows::default();
            }
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(()) => continue,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
            }
        }
        remapped = false;
        if st.applied_lsn != applied {
            applied = st.applied_lsn;
            moved = Instant::now();
        }
        // Appends first: while they arrive, the graph waits, up to a lag.
        if appends_first(moved.elapsed(), indexable) {
            drop(st);
            std::thread::sleep(WAIT_POLL);
            continue;
        }
        // A node per turn, planned without the state's lock: the commit
        // hook needs it to apply (and so acknowledge) the next group, and
        // holding it for one insertion (0.3-0.5 ms) cut appends carrying
        // vectors 3x (docs/benchmarks.md). The turn reads the space's rows
        // through a shared view and works on the graph under its own lock.
        let Some(turn) = st.vectors.live_turn(&mut rows) else {
            continue;
        };
        drop(st);
        let started = Instant::now();
        if let Err(e) = turn.run(&rows, 1) {
            err.lock().get_or_insert(e.to_string());
            return;
        }
        let turn = started.elapsed();
        pace.busy += turn;
        // Past the lag, while appends arrive faster than it could index
        // them: a share of the time only.
        if pace.outrun && pause(&rx, pause_after_turn(moved.elapsed(), turn)) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The priority is the calling thread's only, never the process's.
    #[cfg(target_os = "linux")]
    #[test]
    #[allow(unsafe_code)]
    fn a_lowered_priority_is_the_threads_own() {
        // SAFETY: getpriority takes plain integers and touches no memory.
        let own = || unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        let before = own();
        let lowered = std::thread::spawn(move || {
            assert!(lower_thread_priority(INDEXER_NICE));
            own()
        })
        .join()
        .unwrap();
        assert_eq!(lowered, INDEXER_NICE);
        assert_eq!(own(), before, "the calling thread's priority moved");
    }

    #[test]
    fn the_indexer_waits_for_appends_only_up_to_the_lag() {
        let busy = INGEST_QUIET / 2;
        assert!(appends_first(busy, 0));
        assert!(appends_first(busy, INGEST_FIRST_LAG - 1));
        // past the lag, or once the log is quiet, it indexes
        assert!(!appends_first(busy, INGEST_FIRST_LAG));
        assert!(!appends_first(INGEST_QUIET, 1));
        assert!(!appends_first(Duration::from_secs(1), 0));
    }

    #[test]
    fn past_the_lag_the_indexer_takes_its_share_while_appends_arrive() {
        let busy = INGEST_QUIET / 2;
        let turn = Duration::from_micros(500);
        let pause = pause_after_turn(busy, turn);
        // the turn is INGEST_INDEX_SHARE percent of turn + pause
        assert_eq!(
            (turn * 100).as_micros(),
            ((turn + pause) * INGEST_INDEX_SHARE).as_micros()
        );
        // a turn held up long pauses at most PAUSE_MAX
        assert_eq!(pause_after_turn(busy, Duration::from_secs(1)), PAUSE_MAX);
        // once the log is quiet, no pause
        assert_eq!(pause_after_turn(INGEST_QUIET, turn), Duration::ZERO);
        assert_eq!(
            pause_after_turn(Duration::from_secs(1), turn),
            Duration::ZERO
        );
    }

    #[test]
    fn the_indexer_paces_itself_only_when_appends_outrun_it() {
        let second = Duration::from_secs(1);
        // 2,000 vectors per second of turns: 25,000 arriving a second
        // outrun it, 1,000 do not
        assert!(outrun(25_000, second, Some(2_000.0)));
        assert!(!outrun(1_000, second, Some(2_000.0)));
        assert!(outrun(600, Duration::from_millis(250), Some(2_000.0)));
        // unmeasured: flat out
        assert!(!outrun(25_000, second, None));
        assert!(!outrun(25_000, Duration::ZERO, Some(1.0)));
    }

    #[test]
    fn a_window_measures_the_indexers_rate_and_the_arrivals() {
        let mut p = Pace::new(10_000, 0);
        // within the window (started later than now, whatever the
        // scheduler does): nothing decided
        p.started = Instant::now() + Duration::from_secs(3600);
        p.busy = Duration::from_millis(100);
        p.observe(20_000, 200);
        assert_eq!((p.capacity, p.outrun), (None, false));
        p.started = Instant::now() - PACE_WINDOW;
        // a window closed: 200 vectors in 0.1 s of turns (2,000/s) while
        // 10,000 arrived in one window (some 50 ms)
        p.observe(20_000, 200);
        assert_eq!(p.capacity, Some(2_000.0));
        assert!(p.outrun);
        assert_eq!(
            (p.total, p.in_graphs, p.busy),
            (20_000, 200, Duration::ZERO)
        );
    }

    #[test]
    fn paced_windows_add_up_to_a_new_measure() {
        let mut p = Pace::new(10_000, 0);
        p.busy = Duration::from_millis(100);
        p.started -= PACE_WINDOW;
        p.observe(20_000, 200);
        assert_eq!(p.capacity, Some(2_000.0));
        // paced: 4 ms of turns a window, a batch committed in the second;
        // neither window alone measures, and the decision goes on
        let window = |p: &mut Pace, total, in_graphs| {
            p.busy += Duration::from_millis(4);
            p.started -= PACE_WINDOW;
            p.observe(total, in_graphs);
        };
        window(&mut p, 21_000, 200);
        assert_eq!(p.capacity, Some(2_000.0));
        assert!(p.outrun);
        window(&mut p, 22_000, 264);
        assert_eq!(p.capacity, Some(2_000.0));
        assert_eq!(
            p.busy,
            Duration::from_millis(8),
            "the time in turns adds up"
        );
        // the third window has seen 12 ms of turns and a batch: 64 / 12 ms
        window(&mut p, 23_000, 264);
        let c = p.capacity.unwrap();
        assert!((c - 64.0 / 0.012).abs() < 1e-6, "{c}");
        assert_eq!((p.in_graphs, p.busy), (264, Duration::ZERO));
        // appends slow to a trickle: flat out again
        window(&mut p, 23_010, 264);
        assert!(!p.outrun);
        // enough time in turns but less than a batch indexed: no measure
        // (the graphs grow a batch at a time)
        p.busy = Duration::from_millis(30);
        p.started -= PACE_WINDOW;
        p.observe(23_020, 300);
        assert_eq!(p.capacity, Some(c));
        assert_eq!((p.in_graphs, p.busy), (264, Duration::from_millis(30)));
        // graphs rebuilt under it (fewer vectors in them): measured anew
        p.busy = Duration::from_millis(30);
        p.observe(23_010, 10);
        assert_eq!((p.in_graphs, p.busy), (10, Duration::ZERO));
    }

    #[test]
    fn a_pause_ends_early_only_when_the_store_closes() {
        let (tx, rx) = crossbeam_channel::bounded::<()>(1);
        tx.send(()).unwrap();
        let t = Instant::now();
        assert!(!pause(&rx, Duration::from_millis(30)));
        assert!(
            t.elapsed() >= Duration::from_millis(30),
            "a wake-up cut it short"
        );
        drop(tx);
        let t = Instant::now();
        assert!(pause(&rx, Duration::from_secs(10)));
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
