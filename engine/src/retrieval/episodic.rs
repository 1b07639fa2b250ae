//! The episodic-neighbourhood retriever: the records around the best hits
//! so far in their conversation.
//!
//! Evidence in a long conversation is often spread over adjacent turns (a
//! question in one, the answer in the next). For each seed (the best
//! `seeds` records of the fusion of the earlier retrievers), the eligible
//! records of the seed's conversation are put in `occurred_at` order (ties
//! by position in the store), and up to `window` on each side, no further
//! than `max_gap_ms` from the seed in time (so a session days later is not
//! a neighbour), become candidates scored `s * decay^d`: `s` the seed's
//! fused score relative to the best seed's, `d` the distance in turns. A
//! record reached from several seeds keeps its best score. Seeds
//! themselves are not candidates (they are already ranked). In a
//! conversation of more than [`WHOLE_CONVERSATION_MAX`] eligible records,
//! only the [`SCAN_AROUND`] stored just before and after the seed are
//! considered: turns arrive roughly in time order, and the cost of a recall
//! must not grow with the length of a conversation (a turn backfilled far
//! out of order can then be missed as a neighbour).
//!
//! This module must never return a record outside `eligible`: neighbours
//! come from the eligible members of a conversation only.

use std::collections::HashMap;

use roaring::RoaringBitmap;

use super::{Candidate, Cost, FusionInput, RetrieverOutput};
use crate::state::{Idx, State, Sym};

/// Conversations with more eligible members than this are searched only
/// around the hit (see [`SCAN_AROUND`]), so a recall's cost does not grow
/// with a conversation's length.
pub const WHOLE_CONVERSATION_MAX: u64 = 4096;
/// Members of a large conversation looked at on each side of the hit, in
/// the order they were stored.
pub const SCAN_AROUND: u64 = 256;

/// The retriever's parameters (see [`super::RetrieverParams::Episodic`]).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Window {
    /// Best fused records it starts from.
    pub seeds: usize,
    /// Neighbours on each side.
    pub window: usize,
    /// Largest time distance from the seed (ms).
    pub max_gap_ms: i64,
    /// Score factor per step.
    pub decay: f64,
}

/// Default parameters of the recall's episodic retriever (chosen on the
/// locomo-dev set; docs/retrieval.md says why).
pub const DEFAULT: Window = Window {
    seeds: 5,
    window: 2,
    max_gap_ms: 3_600_000,
    decay: 0.7,
};

/// The neighbours of the best `so_far` records, best first, at most `top`.
pub fn neighbours(
    st: &State,
    so_far: &[FusionInput],
    eligible: &RoaringBitmap,
    w: &Window,
    top: usize,
    cost: &mut Cost,
) -> RetrieverOutput {
    let seeds: Vec<(Idx, f64)> = so_far
        .iter()
        .take(w.seeds)
        .filter_map(|f| st.idx(f.id).map(|i| (i, f.score)))
        .collect();
    let Some(best) = seeds.iter().map(|s| s.1).reduce(f64::max) else {
        return RetrieverOutput::skipped("no earlier hit to start from");
    };
    let is_seed: std::collections::HashSet<Idx> = seeds.iter().map(|s| s.0).collect();
    // eligible members of each conversation
    let mut members_of: HashMap<Sym, RoaringBitmap> = HashMap::new();
    let mut found: HashMap<Idx, f64> = HashMap::new();
    for &(seed, score) in &seeds {
        let m = st.meta(seed);
        let Some(conv) = m.conversation else { continue };
        let set = members_of.entry(conv).or_insert_with(|| {
            st.bm_conversation
                .get(&conv)
                .map_or_else(RoaringBitmap::new, |bm| bm & eligible)
        });
        // Only the members within the time gap can be neighbours: they are
        // few, so only they are put in time order (no sort of a whole
        // conversation). A large conversation is not scanned whole: its
        // members stored just before and after the hit are (the order
        // turns arrive in).
        let near = |i: Idx| {
            let t = st.meta(i).occurred_at;
            ((t - m.occurred_at).abs() <= w.max_gap_ms).then_some((t, i))
        };
        let mut members: Vec<(i64, Idx)> = if set.len() <= WHOLE_CONVERSATION_MAX {
            cost.records_scanned += set.len();
            set.iter().filter_map(near).collect()
        } else {
            let r = set.rank(seed);
            let (lo, hi) = (
                r.saturating_sub(SCAN_AROUND + 1),
                (r + SCAN_AROUND).min(set.len()),
            );
            cost.records_scanned += hi - lo;
            (lo..hi)
                .filter_map(|k| u32::try_from(k).ok().and_then(|k| set.select(k)))
                .filter_map(near)
                .collect()
        };
        members.sort_unstable();
        let key = (m.occurred_at, seed);
        let Ok(pos) = members.binary_search(&key) else {
            continue;
        };
        let rel = if best > 0.0 { score / best } else { 1.0 };
        // walk out on each side (every member is within the gap)
        for side in [-1i64, 1] {
            for d in 1..=w.window {
                let j = if side < 0 {
                    pos.checked_sub(d)
                } else {
                    Some(pos + d).filter(|&j| j < members.len())
                };
                let Some((_, i)) = j.map(|j| members[j]) else {
                    break;
                };
                if is_seed.contains(&i) {
                    continue;
                }
                let s = rel * w.decay.powi(i32::try_from(d).unwrap_or(i32::MAX));
                let e = found.entry(i).or_insert(0.0);
                if s > *e {
                    *e = s;
                }
            }
        }
    }
    let mut v: Vec<(Idx, f64)> = found.into_iter().collect();
    v.sort_by(|a, b| {
        b.1.total_cmp(&a.1)
            .then_with(|| st.meta(a.0).id.cmp(&st.meta(b.0).id))
    });
    v.truncate(top);
    RetrieverOutput::ran(
        v.into_iter()
            .enumerate()
            .map(|(r, (i, score))| Candidate::of(st, i, r + 1, score))
            .collect(),
    )
}
