//! Work on a large batch split over the machine's cores: the write path's
//! per-record stages (canonical form and content hash before the writer
//! lock; token lookups while a group is synced) are independent per item,
//! and with one writer the other core would otherwise wait.
//!
//! Results come back in item order, so a caller that stops at the first
//! error reports the same item as a loop would.

use std::sync::OnceLock;

/// Items below which splitting is not worth a thread (spawning and joining
/// one costs tens of microseconds; an item of the write path a few).
pub const SPLIT_MIN: usize = 256;

/// Threads to split over: the cores, at most 4.
fn threads() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(4)))
}

/// `f` of every item, in order: on one thread below `min` items (or on one
/// core), else over contiguous chunks on scoped threads, the calling thread
/// taking the first.
pub fn map<T: Sync, R: Send>(items: &[T], min: usize, f: impl Fn(usize, &T) -> R + Sync) -> Vec<R> {
    map_with(items, min, threads(), true, f)
}

/// [`map`] on `threads`; `spawn: false` acts as if no thread could be
/// started (the fallback, for tests).
fn map_with<T: Sync, R: Send>(
    items: &[T],
    min: usize,
    threads: usize,
    spawn: bool,
    f: impl Fn(usize, &T) -> R + Sync,
) -> Vec<R> {
    let parts = if items.len() < min.max(2) {
        1
    } else {
        threads.clamp(1, items.len())
    };
    if parts == 1 {
        return items.iter().enumerate().map(|(i, t)| f(i, t)).collect();
    }
    let chunk = items.len().div_ceil(parts);
    let f = &f;
    let run = move |k: usize| -> Vec<R> {
        let at = k * chunk;
        let end = (at + chunk).min(items.len());
        items[at..end]
            .iter()
            .enumerate()
            .map(|(i, t)| f(at + i, t))
            .collect()
    };
    std::thread::scope(|sc| {
        // A chunk whose thread cannot be started (the process is at its
        // thread limit) runs on the calling thread instead.
        let others: Vec<Result<_, usize>> = (1..parts)
            .filter(|&k| k * chunk < items.len())
            .map(|k| {
                if !spawn {
                    return Err(k);
                }
                std::thread::Builder::new()
                    .spawn_scoped(sc, move || run(k))
                    .map_err(|_| k)
            })
            .collect();
        let mut out = run(0);
        out.reserve(items.len() - out.len());
        for h in others {
            match h {
                Ok(h) => match h.join() {
                    Ok(part) => out.extend(part),
                    // The item's panic, on the caller's thread.
                    Err(p) => std::panic::resume_unwind(p),
                },
                Err(k) => out.extend(run(k)),
            }
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Split or not, the results are the loop's, in item order.
        #[test]
        fn the_same_as_a_loop(n in 0usize..700, min in 0usize..300, threads in 1usize..6) {
            let items: Vec<u64> = (0..n as u64).map(|i| i.wrapping_mul(0x9E37_79B9)).collect();
            let f = |i: usize, x: &u64| (i, x ^ 5);
            let want: Vec<(usize, u64)> = items.iter().enumerate().map(|(i, x)| f(i, x)).collect();
            prop_assert_eq!(&map_with(&items, min, threads, true, f), &want);
            // no thread could be started: the same, on the caller's thread
            prop_assert_eq!(&map_with(&items, min, threads, false, f), &want);
        }
    }

    #[test]
    fn large_inputs_do_use_other_threads() {
        let items = vec![0u8; 1000];
        let me = std::thread::current().id();
        let ids = map_with(&items, 10, 2, true, |_, _| std::thread::current().id());
        assert_eq!(ids[0], me);
        assert_ne!(ids[999], me);
        let small = map_with(&items[..5], 10, 2, true, |_, _| std::thread::current().id());
        assert!(small.iter().all(|&t| t == me));
        let unspawned = map_with(&items, 10, 2, false, |_, _| std::thread::current().id());
        assert!(unspawned.iter().all(|&t| t == me));
    }

    #[test]
    #[should_panic(expected = "item 600")]
    fn a_panic_on_another_thread_reaches_the_caller() {
        let items = vec![0u8; 1000];
        map_with(&items, 10, 2, true, |i, _| {
            if i == 600 {
                panic!("item 600");
            }
        });
    }
}
