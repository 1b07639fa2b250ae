//! The vector planner: exact scan of the eligible vectors or a filtered
//! graph walk, whichever the cost model says is cheaper.
//!
//! A pure function of counts ([`plan_vector`]); the constants in
//! [`COSTS`] were measured with `engram bench ann` on 200,000 and 20,000
//! real-embedding vectors (docs/benchmarks.md, "Filtered search at 200k",
//! gives the runs and the fit). Both plans return the `n` best eligible
//! vectors; the exact scan is exact, the walk approximate, so near a tie
//! the scan wins.
//!
//! Must never: look at records or vectors (it sees counts only).

/// Measured per-unit costs, in nanoseconds: each is `fixed + per_dim *
/// dimensions` (bytes read grow with the dimension; the fixed part is the
/// bookkeeping around each vector).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Costs {
    /// One eligible vector of a full-precision exact scan (small sets).
    pub scan_f32: (f64, f64),
    /// One eligible vector of an int8 exact scan (sets of at least
    /// [`crate::vector::space::QUANTIZED_SCAN_MIN`]).
    pub scan_i8: (f64, f64),
    /// One eligible vector of the binary prefilter (its sign bits and the
    /// cut-off histogram).
    pub prefilter_bit: (f64, f64),
    /// One distance computation of a graph walk (including the
    /// neighbour-list reads and the eligibility test around it).
    pub walk_distance: (f64, f64),
    /// The same, for a walk over int8 codes (re-ranking included).
    pub walk_distance_i8: (f64, f64),
    /// Distances of an unfiltered walk: `walk_per_ef * ef + walk_base`.
    pub walk_per_ef: f64,
    /// See `walk_per_ef`.
    pub walk_base: f64,
    /// A walk restricted to a share `s` of the graph computes about
    /// `s ^ -walk_selectivity_exponent` times more distances.
    pub walk_selectivity_exponent: f64,
}

/// The costs measured on this project's reference machine at 384
/// dimensions (see the module documentation); the split between the fixed
/// and the per-dimension part is an assumption (bytes read), not measured
/// at other dimensions.
pub const COSTS: Costs = Costs {
    scan_f32: (10.0, 0.36),
    scan_i8: (4.0, 0.06),
    prefilter_bit: (6.0, 0.01),
    walk_distance: (150.0, 0.31),
    // Half the f32 walk's: the vector stage's time per distance over
    // int8 codes / over f32 rows was 0.37-0.71 (mean ~0.5) in unfiltered
    // walks at 20k and 200k (docs/benchmarks.md, "Int8 graph walks").
    // Measured at 384 dimensions only, like the others: halving both
    // parts is a fit there, not a model of fewer dimensions.
    walk_distance_i8: (75.0, 0.155),
    walk_per_ef: 10.3,
    walk_base: 210.0,
    walk_selectivity_exponent: 0.72,
};

/// Vectors the binary prefilter keeps per unit of `max(ef, n)`: 32 keeps
/// recall@10 at 0.99 on the 200k benchmark's 10% filter at ef 16.
pub const PREFILTER_KEEP_PER_EF: usize = 32;
/// The prefilter is considered only when it keeps at most this share of
/// the eligible vectors (1/8): below that an exact scan costs little more.
pub const PREFILTER_MAX_SHARE: f64 = 0.125;

/// Fewest dimensions for the prefilter: sign bits of few dimensions say
/// too little about similarity (its recall was measured at 384).
pub const PREFILTER_MIN_DIM: usize = 128;

/// Largest raise of `ef` for a filtered walk.
pub const EF_BOOST_MAX: f64 = 8.0;

/// What the planner sees.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlanInput {
    /// Eligible vectors in the space.
    pub eligible: u64,
    /// Vectors in the space.
    pub space_size: u64,
    /// The request's `ef`.
    pub ef: usize,
    /// Candidates wanted.
    pub n: usize,
    /// Largest `ef` allowed.
    pub ef_max: usize,
    /// Smallest set that is scanned through int8 codes.
    pub quantized_min: u64,
    /// Dimensions of the space.
    pub dim: usize,
    /// Whether the space's graph walk reads int8 codes.
    pub walk_codes: bool,
}

/// The planner's choice.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// Scan every eligible vector.
    Exact {
        /// Estimated cost, ns.
        cost_ns: f64,
        /// Estimated cost of the walk it beat, ns.
        walk_ns: f64,
    },
    /// Compare every eligible vector's sign bits with the query's, then
    /// scan the `keep` nearest by Hamming distance as [`Plan::Exact`] does
    /// (approximate: a true neighbour whose bits differ more is missed).
    Prefiltered {
        /// Vectors kept after the bit comparison.
        keep: usize,
        /// Estimated cost, ns.
        cost_ns: f64,
        /// Estimated cost of the exact scan it beat, ns.
        scan_ns: f64,
        /// Estimated cost of the walk it beat, ns.
        walk_ns: f64,
    },
    /// Walk the graph with this `ef`, testing eligibility inside.
    Walk {
        /// The `ef` used (raised for selective filters).
        ef: usize,
        /// Estimated cost, ns.
        cost_ns: f64,
        /// Estimated cost of the scan it beat, ns.
        scan_ns: f64,
    },
}

/// `ef` of a walk over a share `s` of the graph: raised by `1 / sqrt(s)`
/// (at most [`EF_BOOST_MAX`] times), since fewer visited nodes qualify.
// ef is at most ef_max: the saturating cast is exact enough
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn walk_ef(ef: usize, n: usize, selectivity: f64, ef_max: usize) -> usize {
    let boost = if selectivity >= 1.0 {
        1.0
    } else {
        (1.0 / selectivity.max(f64::MIN_POSITIVE).sqrt()).min(EF_BOOST_MAX)
    };
    let ef = ((ef.max(n) as f64) * boost).ceil() as usize;
    ef.clamp(1, ef_max.max(1))
}

/// Chooses between an exact scan and a filtered walk by estimated cost.
#[allow(clippy::cast_precision_loss)] // counts far below 2^52
pub fn plan_vector(i: &PlanInput, c: &Costs) -> Plan {
    let e = i.eligible as f64;
    let d = i.dim as f64;
    let at = |(fixed, per_dim): (f64, f64)| fixed + per_dim * d;
    let per = if i.eligible >= i.quantized_min {
        at(c.scan_i8)
    } else {
        at(c.scan_f32)
    };
    let scan_ns = e * per;
    if i.space_size == 0 || i.eligible == 0 {
        return Plan::Exact {
            cost_ns: scan_ns,
            walk_ns: 0.0,
        };
    }
    let s = (e / i.space_size as f64).min(1.0);
    let ef = walk_ef(i.ef, i.n, s, i.ef_max);
    let distances =
        (c.walk_per_ef * ef as f64 + c.walk_base) * s.powf(-c.walk_selectivity_exponent);
    let walk_ns = distances
        * at(if i.walk_codes {
            c.walk_distance_i8
        } else {
            c.walk_distance
        });
    let keep = i.ef.max(i.n).saturating_mul(PREFILTER_KEEP_PER_EF);
    let prefilter_ns = (i.eligible >= i.quantized_min
        && i.dim >= PREFILTER_MIN_DIM
        && (keep as f64) <= e * PREFILTER_MAX_SHARE)
        .then(|| e * at(c.prefilter_bit) + keep as f64 * at(c.scan_i8));
    match prefilter_ns {
        Some(p) if p < scan_ns && p < walk_ns => Plan::Prefiltered {
            keep,
            cost_ns: p,
            scan_ns,
            walk_ns,
        },
        _ if scan_ns <= walk_ns => Plan::Exact {
            cost_ns: scan_ns,
            walk_ns,
        },
        _ => Plan::Walk {
            ef,
            cost_ns: walk_ns,
            scan_ns,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn input(eligible: u64, space_size: u64, ef: usize) -> PlanInput {
        PlanInput {
            eligible,
            space_size,
            ef,
            n: 10,
            ef_max: 4096,
            quantized_min: 128,
            dim: 384,
            walk_codes: false,
        }
    }

    fn is_exact(p: &Plan) -> bool {
        matches!(p, Plan::Exact { .. })
    }

    fn is_walk(p: &Plan) -> bool {
        matches!(p, Plan::Walk { .. })
    }

    #[test]
    fn small_sets_are_scanned_and_whole_large_spaces_walked() {
        assert!(is_exact(&plan_vector(&input(200, 200_000, 16), &COSTS)));
        assert!(is_exact(&plan_vector(&input(2_000, 200_000, 64), &COSTS)));
        assert!(is_exact(&plan_vector(&input(0, 0, 16), &COSTS)));
        assert!(is_exact(&plan_vector(&input(500, 500, 16), &COSTS)));
        match plan_vector(&input(200_000, 200_000, 32), &COSTS) {
            Plan::Walk { ef, .. } => assert_eq!(ef, 32),
            p => panic!("a whole 200k space should be walked: {p:?}"),
        }
    }

    #[test]
    fn a_tenth_of_a_large_space_is_prefiltered_and_small_sets_never_are() {
        // 18,700 of 200,000 (the benchmark's tenant filter): bits for all,
        // int8 codes for 512
        match plan_vector(&input(18_700, 200_000, 16), &COSTS) {
            Plan::Prefiltered { keep, .. } => assert_eq!(keep, 512),
            p => panic!("{p:?}"),
        }
        // 1,861 of 20,000: keeping 512 would keep over an eighth
        assert!(is_exact(&plan_vector(&input(1_861, 20_000, 16), &COSTS)));
        // Without codes the same set costs more than the walk at low ef.
        let no_codes = PlanInput {
            quantized_min: u64::MAX,
            ..input(18_700, 200_000, 16)
        };
        assert!(is_walk(&plan_vector(&no_codes, &COSTS)));
        // Sign bits of 8 dimensions say too little: never prefiltered.
        let low_dim = PlanInput {
            dim: 8,
            ..input(18_700, 200_000, 16)
        };
        assert!(!matches!(
            plan_vector(&low_dim, &COSTS),
            Plan::Prefiltered { .. }
        ));
    }

    /// A walk over int8 codes costs less, so it takes over from the scan
    /// at fewer eligible vectors.
    #[test]
    fn walks_over_codes_are_chosen_sooner() {
        let codes = |e, size, ef| PlanInput {
            walk_codes: true,
            ..input(e, size, ef)
        };
        // 4,000 vectors of 4,000 at ef 32: scanned when walking f32,
        // walked when walking codes.
        assert!(is_exact(&plan_vector(&input(4_000, 4_000, 32), &COSTS)));
        assert!(is_walk(&plan_vector(&codes(4_000, 4_000, 32), &COSTS)));
    }

    #[test]
    fn walk_ef_is_raised_for_selective_filters_within_bounds() {
        assert_eq!(walk_ef(16, 10, 1.0, 4096), 16);
        assert_eq!(walk_ef(16, 10, 0.25, 4096), 32);
        assert_eq!(walk_ef(16, 10, 0.0001, 4096), 128);
        assert_eq!(walk_ef(16, 50, 1.0, 4096), 50);
        assert_eq!(walk_ef(4000, 10, 0.01, 4096), 4096);
    }

    proptest! {
        /// Between the exact scan and the walk, fewer eligible vectors never
        /// turn a scan into a walk. (The prefilter is left out, at 64
        /// dimensions: it needs a set eight times what it keeps, so a
        /// slightly smaller set may fall back to the walk.)
        #[test]
        fn the_choice_is_monotonic_in_the_eligible_count(
            size in 1u64..5_000_000,
            a in 0u64..5_000_000,
            b in 0u64..5_000_000,
            ef in 1usize..512,
        ) {
            let (lo, hi) = (a.min(b).min(size), a.max(b).min(size));
            // within one scan kind (the int8 threshold changes the slope)
            prop_assume!((lo >= 128) == (hi >= 128));
            let at64 = |e| PlanInput { dim: 64, ..input(e, size, ef) };
            if !is_walk(&plan_vector(&at64(hi), &COSTS)) {
                prop_assert!(!is_walk(&plan_vector(&at64(lo), &COSTS)));
            }
        }

        /// The reported costs are the ones compared.
        #[test]
        fn the_cheaper_plan_is_chosen(size in 1u64..5_000_000, e in 0u64..5_000_000, ef in 1usize..512) {
            match plan_vector(&input(e.min(size), size, ef), &COSTS) {
                Plan::Exact { cost_ns, walk_ns } => prop_assert!(cost_ns <= walk_ns || e.min(size) == 0),
                Plan::Walk { cost_ns, scan_ns, .. } => prop_assert!(cost_ns < scan_ns),
                Plan::Prefiltered { cost_ns, scan_ns, walk_ns, keep } => {
                    prop_assert!(cost_ns < scan_ns && cost_ns < walk_ns);
                    prop_assert!(keep as f64 <= e.min(size) as f64 * PREFILTER_MAX_SHARE);
                }
            }
        }
    }
}
