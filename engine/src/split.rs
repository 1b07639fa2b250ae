//! Work on a large batch split over the machine's cores: the write path's
//! per-record stages (canonical form and content hash before the writer
//! lock; token lookups while a group is synced) are independent per item,
//! and with one writer the other core would otherwise wait.
//!
//! Results come back in item order, so a caller that stops at the first
//! error reports the same item as a loop would.

use std::sync::OnceLock;

/// Items below which splitting is not worth a hand-off (waking a helper
/// costs tens of microseconds; an item of the write path a few).
pub const SPLIT_MIN: usize = 256;

/// Threads to split over: the cores, at most 4.
fn threads() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(4)))
}

/// The helpers: one thread fewer than [`threads`] (the caller takes the
/// first chunk), started on first use and parked between batches. None on
/// one core, or when the threads could not be started (the work then runs
/// on the caller's thread).
///
/// Why threads kept, not spawned per batch: a thread spawned on a virtual
/// machine is queued on its parent's busy core and starts when the parent
/// blocks, about 1.7 ms later (measured in docs/benchmarks.md, "Helpers
/// that are woken, not spawned"), which is the whole of a batch's stage; a
/// parked thread woken by the kernel starts on the idle core.
fn helpers() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let n = threads();
        (n > 1)
            .then(|| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n - 1)
                    .thread_name(|i| format!("engram-split-{i}"))
                    .build()
                    .ok()
            })
            .flatten()
    })
    .as_ref()
}

/// `f` of every item, in order: on one thread below `min` items (or on one
/// core), else over contiguous chunks that the calling thread and the
/// helpers claim one at a time.
pub fn map<T: Sync, R: Send>(items: &[T], min: usize, f: impl Fn(usize, &T) -> R + Sync) -> Vec<R> {
    map_with(items, min, threads(), helpers(), f)
}

/// Chunks per thread: a caller whose helper is busy with another batch
/// takes the chunks the helper has not claimed.
const CHUNKS_PER_THREAD: usize = 4;

/// [`map`] over `threads` threads on `pool` (None: as if no helper could
/// be started, the fallback, for tests). The items are cut into chunks
/// that the caller and the helpers claim one at a time, so a busy helper
/// delays nothing but the chunk it holds.
fn map_with<T: Sync, R: Send>(
    items: &[T],
    min: usize,
    threads: usize,
    pool: Option<&rayon::ThreadPool>,
    f: impl Fn(usize, &T) -> R + Sync,
) -> Vec<R> {
    let parts = if items.len() < min.max(2) {
        1
    } else {
        threads.clamp(1, items.len())
    };
    let Some(pool) = pool.filter(|_| parts > 1) else {
        return items.iter().enumerate().map(|(i, t)| f(i, t)).collect();
    };
    let chunk = items.len().div_ceil(parts * CHUNKS_PER_THREAD);
    let n_chunks = items.len().div_ceil(chunk);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (f, next) = (&f, &next);
    // the chunks one thread claimed, each with its number
    let claim = move || -> Vec<(usize, Vec<R>)> {
        let mut done = Vec::new();
        loop {
            let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if k >= n_chunks {
                return done;
            }
            let at = k * chunk;
            let end = (at + chunk).min(items.len());
            let part = items[at..end]
                .iter()
                .enumerate()
                .map(|(i, t)| f(at + i, t))
                .collect();
            done.push((k, part));
        }
    };
    // A panic in any chunk reaches the caller once the others are done
    // (rayon's scope).
    let mut helped: Vec<Vec<(usize, Vec<R>)>> = (1..parts).map(|_| Vec::new()).collect();
    let mine = pool.in_place_scope(|sc| {
        for slot in helped.iter_mut() {
            sc.spawn(move |_| *slot = claim());
        }
        claim()
    });
    let mut parts: Vec<(usize, Vec<R>)> = mine
        .into_iter()
        .chain(helped.into_iter().flatten())
        .collect();
    parts.sort_unstable_by_key(|(k, _)| *k);
    let mut out = Vec::with_capacity(items.len());
    for (_, part) in parts {
        out.extend(part);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A pool of one helper, as on two cores.
    fn pool() -> &'static rayon::ThreadPool {
        static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
        POOL.get_or_init(|| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .expect("a test pool")
        })
    }

    proptest! {
        /// Split or not, the results are the loop's, in item order.
        #[test]
        fn the_same_as_a_loop(n in 0usize..700, min in 0usize..300, threads in 1usize..6) {
            let items: Vec<u64> = (0..n as u64).map(|i| i.wrapping_mul(0x9E37_79B9)).collect();
            let f = |i: usize, x: &u64| (i, x ^ 5);
            let want: Vec<(usize, u64)> = items.iter().enumerate().map(|(i, x)| f(i, x)).collect();
            prop_assert_eq!(&map_with(&items, min, threads, Some(pool()), f), &want);
            // no helper could be started: the same, on the caller's thread
            prop_assert_eq!(&map_with(&items, min, threads, None, f), &want);
        }
    }

    #[test]
    fn large_inputs_do_use_other_threads() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let items = vec![0u8; 1000];
        let me = std::thread::current().id();
        // The caller's first item waits until a helper has run one: the
        // test does not depend on how fast the helper wakes.
        let helped = AtomicBool::new(false);
        let ids = map_with(&items, 10, 2, Some(pool()), |i, _| {
            let id = std::thread::current().id();
            if id != me {
                helped.store(true, Ordering::Release);
            } else if i == 0 {
                let start = std::time::Instant::now();
                while !helped.load(Ordering::Acquire) {
                    assert!(
                        start.elapsed() < std::time::Duration::from_secs(60),
                        "no helper ran"
                    );
                    std::thread::yield_now();
                }
            }
            id
        });
        assert_eq!(ids[0], me);
        assert!(ids.iter().any(|&t| t != me));
        let small = map_with(&items[..5], 10, 2, Some(pool()), |_, _| {
            std::thread::current().id()
        });
        assert!(small.iter().all(|&t| t == me));
        let unspawned = map_with(&items, 10, 2, None, |_, _| std::thread::current().id());
        assert!(unspawned.iter().all(|&t| t == me));
    }

    #[test]
    fn a_caller_takes_the_chunks_of_a_busy_helper() {
        use std::sync::mpsc;
        // the helper is held by another job until this map is done
        let (release, held) = mpsc::channel::<()>();
        let (started, running) = mpsc::channel::<()>();
        pool().spawn(move || {
            started.send(()).unwrap();
            let _ = held.recv_timeout(std::time::Duration::from_secs(60));
        });
        running.recv().unwrap();
        let me = std::thread::current().id();
        let items = vec![0u8; 1000];
        // (the helper is let go at the last item: the map then waits only
        // for its job, which finds nothing left to claim)
        let release = std::sync::Mutex::new(release);
        let ids = map_with(&items, 10, 2, Some(pool()), |i, _| {
            if i == 999 {
                release.lock().unwrap().send(()).unwrap();
            }
            std::thread::current().id()
        });
        assert!(ids.iter().all(|&t| t == me), "every chunk on the caller");
    }

    #[test]
    #[should_panic(expected = "item 600")]
    fn a_panic_on_another_thread_reaches_the_caller() {
        let items = vec![0u8; 1000];
        map_with(&items, 10, 2, Some(pool()), |i, _| {
            if i == 600 {
                panic!("item 600");
            }
        });
    }
}
