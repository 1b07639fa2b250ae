//! The vector planner: exact scan of the eligible vectors or a filtered
//! graph walk, whichever the cost model says is cheaper.
//!
//! A pure function of counts ([`plan_vector`]); the constants in
//! [`COSTS`] were measured with `engram bench ann` on 20,000 and 200,000
//! real-embedding vectors (docs/benchmarks.md, "Filtered search at 200k",
//! gives the runs and the fit), and the prefilter's and the walk's
//! re-fitted with every plan forced at 200,000 and 1,000,000 ("The
//! planner at a million vectors"). Both plans return the `n` best eligible
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
    /// [`PlanInput::quantized_min`] vectors: the space's
    /// `scans_codes_from`, [`crate::vector::space::QUANTIZED_SCAN_MIN`] in
    /// inner-product spaces; an L2 space's scans always read f32 rows).
    pub scan_i8: (f64, f64),
    /// One eligible vector of the binary prefilter (its sign bits and the
    /// cut-off histogram).
    pub prefilter_bit: (f64, f64),
    /// One vector the prefilter keeps (its int8 estimate, and its exact
    /// distance when it may be among the best).
    pub prefilter_keep: (f64, f64),
    /// The prefilter's cost per query whatever the set's size (the query's
    /// sign bits and codes, the histogram, the selection), ns.
    pub prefilter_base: f64,
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
    /// The space size (vectors) at which the walk's per-distance costs
    /// were measured; see [`walk_size_factor`].
    pub walk_size_ref: f64,
    /// Share added to a walk's per-distance cost per doubling of the
    /// space above `walk_size_ref`; see [`walk_size_factor`].
    pub walk_size_slope: f64,
}

/// The costs measured on this project's reference machine at 384
/// dimensions (see the module documentation); the split between the fixed
/// and the per-dimension part is an assumption (bytes read), not measured
/// at other dimensions.
pub const COSTS: Costs = Costs {
    scan_f32: (10.0, 0.36),
    scan_i8: (4.0, 0.06),
    // The prefilter and the int8 walk were re-measured at 200,000 and
    // 1,000,000 vectors with every plan forced on the same filters
    // (`engram bench ann --plan`; docs/benchmarks.md, "The planner at a
    // million vectors"): 4.1 ns per eligible vector, 55 ns per kept one
    // and 22 us per query for the prefilter (it had been priced at 9.8 ns
    // per vector and nothing per query, which made it lose to walks it
    // beats at 1M), and 150 ns per walk distance at 200k, 1.6x that at
    // 1M (the slope below).
    prefilter_bit: (2.2, 0.005),
    prefilter_keep: (10.0, 0.117),
    prefilter_base: 22_000.0,
    walk_distance: (150.0, 0.31),
    // An int8 walk's distance, at 200k: the vector stage's time per
    // distance over int8 codes / over f32 rows was 0.37-0.71 (mean ~0.5)
    // in unfiltered walks at 20k and 200k (docs/benchmarks.md, "Int8
    // graph walks"), and 150 ns in forced walks at 200k. Measured at 384
    // dimensions only, like the others: the split into a fixed and a
    // per-dimension part is a fit there, not a model of fewer dimensions.
    walk_distance_i8: (83.6, 0.173),
    walk_per_ef: 10.3,
    walk_base: 210.0,
    walk_selectivity_exponent: 0.72,
    walk_size_ref: 200_000.0,
    // 150 ns per int8 walk distance at 200k, 168-269 ns (median 239) at
    // 1M, in the same runs: 0.6 more over log2(5) = 2.3 doublings.
    walk_size_slope: 0.26,
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

/// Which plan a vector retrieval uses: the planner's choice (the default)
/// or one forced, for benchmarks that measure the plans against each other
/// (`engram bench ann --plan`). A forced plan is reported with the
/// estimated costs of both sides, and its reason says it was forced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PlanChoice {
    /// The cheaper plan by the cost model.
    #[default]
    Auto,
    /// Always the exact scan.
    Exact,
    /// The sign-bit prefilter wherever it applies (sets of at least the
    /// int8 threshold, so never in an L2 space; enough dimensions; eight
    /// times what it keeps), else the exact scan, which the manifest's
    /// reason then names as a fallback.
    Prefiltered,
    /// Always the graph walk, when anything is eligible (else the exact
    /// scan of nothing).
    Walk,
}

impl PlanChoice {
    /// Whether `plan` is a plan this choice asks for (`Auto` takes any).
    /// A forced choice falls back to the exact scan where its plan does
    /// not apply, and the manifest says so.
    pub fn ran(self, plan: &Plan) -> bool {
        matches!(
            (self, plan),
            (PlanChoice::Auto, _)
                | (PlanChoice::Exact, Plan::Exact { .. })
                | (PlanChoice::Prefiltered, Plan::Prefiltered { .. })
                | (PlanChoice::Walk, Plan::Walk { .. })
        )
    }

    /// The name it is given on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PlanChoice::Auto => "auto",
            PlanChoice::Exact => "exact",
            PlanChoice::Prefiltered => "prefiltered",
            PlanChoice::Walk => "walk",
        }
    }
}

impl std::str::FromStr for PlanChoice {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        [
            PlanChoice::Auto,
            PlanChoice::Exact,
            PlanChoice::Prefiltered,
            PlanChoice::Walk,
        ]
        .into_iter()
        .find(|c| c.name() == s)
        .ok_or_else(|| format!("unknown plan '{s}' (expected auto, exact, prefiltered or walk)"))
    }
}

/// How much more a walk's distance costs in a space of `size` vectors
/// than in one of [`Costs::walk_size_ref`]: `1 + walk_size_slope *
/// log2(size / walk_size_ref)`, linear in the doublings above it (the
/// graph's lists and the vectors or codes a walk reads outgrow the
/// caches), never less than 1. Measured on int8 walks; applied to f32
/// walks too, whose rows outgrow the caches sooner.
pub fn walk_size_factor(size: u64, c: &Costs) -> f64 {
    #[allow(clippy::cast_precision_loss)] // counts far below 2^52
    let doublings = (size as f64 / c.walk_size_ref).log2().max(0.0);
    1.0 + c.walk_size_slope * doublings
}

/// The estimated cost of every plan for one input.
struct Estimates {
    scan_ns: f64,
    walk_ns: f64,
    ef: usize,
    /// (vectors kept, cost) where the prefilter applies.
    prefilter: Option<(usize, f64)>,
}

#[allow(clippy::cast_precision_loss)] // counts far below 2^52
fn estimate(i: &PlanInput, c: &Costs) -> Estimates {
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
        return Estimates {
            scan_ns,
            walk_ns: 0.0,
            ef: 0,
            prefilter: None,
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
        })
        * walk_size_factor(i.space_size, c);
    let keep = i.ef.max(i.n).saturating_mul(PREFILTER_KEEP_PER_EF);
    let prefilter = (i.eligible >= i.quantized_min
        && i.dim >= PREFILTER_MIN_DIM
        && (keep as f64) <= e * PREFILTER_MAX_SHARE)
        .then(|| {
            let cost =
                c.prefilter_base + e * at(c.prefilter_bit) + keep as f64 * at(c.prefilter_keep);
            (keep, cost)
        });
    Estimates {
        scan_ns,
        walk_ns,
        ef,
        prefilter,
    }
}

/// Chooses between an exact scan and a filtered walk by estimated cost.
pub fn plan_vector(i: &PlanInput, c: &Costs) -> Plan {
    plan_vector_as(i, c, PlanChoice::Auto)
}

/// [`plan_vector`], or the plan `choice` forces (with the same estimates).
pub fn plan_vector_as(i: &PlanInput, c: &Costs, choice: PlanChoice) -> Plan {
    let Estimates {
        scan_ns,
        walk_ns,
        ef,
        prefilter,
    } = estimate(i, c);
    let exact = Plan::Exact {
        cost_ns: scan_ns,
        walk_ns,
    };
    if i.space_size == 0 || i.eligible == 0 {
        return exact;
    }
    let walk = Plan::Walk {
        ef,
        cost_ns: walk_ns,
        scan_ns,
    };
    let prefiltered = |(keep, p): (usize, f64)| Plan::Prefiltered {
        keep,
        cost_ns: p,
        scan_ns,
        walk_ns,
    };
    match choice {
        PlanChoice::Exact => exact,
        PlanChoice::Walk => walk,
        PlanChoice::Prefiltered => prefilter.map_or(exact, prefiltered),
        PlanChoice::Auto => match prefilter {
            Some((keep, p)) if p < scan_ns && p < walk_ns => prefiltered((keep, p)),
            _ if scan_ns <= walk_ns => exact,
            _ => walk,
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
    fn a_walk_costs_more_per_distance_in_larger_spaces_never_less() {
        assert_eq!(walk_size_factor(0, &COSTS), 1.0);
        assert_eq!(walk_size_factor(20_000, &COSTS), 1.0);
        assert_eq!(walk_size_factor(200_000, &COSTS), 1.0);
        assert!((walk_size_factor(400_000, &COSTS) - 1.26).abs() < 1e-9);
        let mut last = 1.0;
        for size in [300_000, 1_000_000, 10_000_000, u64::MAX] {
            let f = walk_size_factor(size, &COSTS);
            assert!(f > last && f.is_finite(), "{size}: {f}");
            last = f;
        }
    }

    /// The cells measured at a million vectors (docs/benchmarks.md, "The
    /// planner at a million vectors"), each chosen as the fastest forced
    /// plan ran there.
    #[test]
    fn at_a_million_vectors_the_measured_winners_are_chosen() {
        let codes = |e, ef| PlanInput {
            walk_codes: true,
            ..input(e, 1_000_000, ef)
        };
        // the 9.4% tenant: prefiltered at ef 16 (2,178 q/s against the
        // walk's 1,099-1,667) and at ef 64 (1,834 against 365)
        for ef in [16, 64] {
            match plan_vector(&codes(93_619, ef), &COSTS) {
                Plan::Prefiltered { .. } => {}
                p => panic!("ef {ef}: {p:?}"),
            }
        }
        // 1%: prefiltered at ef 16 (10,563 against 3,176 exact and 78
        // walking); at ef 64 the prefilter would keep too many: exact
        match plan_vector(&codes(10_129, 16), &COSTS) {
            Plan::Prefiltered { .. } => {}
            p => panic!("{p:?}"),
        }
        assert!(is_exact(&plan_vector(&codes(10_129, 64), &COSTS)));
        // 0.1% scanned, the live 98% walked
        assert!(is_exact(&plan_vector(&codes(1_000, 16), &COSTS)));
        assert!(is_walk(&plan_vector(&codes(980_074, 64), &COSTS)));
        // With the constants fitted at 200k before the re-fit, the walk
        // won the 9.4% cell at ef 16.
        let before = Costs {
            walk_size_slope: 0.0,
            walk_distance_i8: (75.0, 0.155),
            prefilter_base: 0.0,
            prefilter_bit: (6.0, 0.01),
            prefilter_keep: COSTS.scan_i8,
            ..COSTS
        };
        assert!(is_walk(&plan_vector(&codes(93_619, 16), &before)));
        // The size factor decides where the two are close: 12% of 1M at
        // ef 16 is walked when priced as at 200k, prefiltered as at 1M.
        let at_200k = Costs {
            walk_size_slope: 0.0,
            ..COSTS
        };
        assert!(is_walk(&plan_vector(&codes(120_000, 16), &at_200k)));
        assert!(matches!(
            plan_vector(&codes(120_000, 16), &COSTS),
            Plan::Prefiltered { .. }
        ));
    }

    #[test]
    fn a_forced_plan_keeps_the_estimates_and_the_prefilter_only_where_it_applies() {
        let i = PlanInput {
            walk_codes: true,
            ..input(93_619, 1_000_000, 16)
        };
        let auto = plan_vector(&i, &COSTS);
        let Plan::Prefiltered {
            cost_ns,
            scan_ns,
            walk_ns,
            ..
        } = auto
        else {
            panic!("{auto:?}")
        };
        assert_eq!(plan_vector_as(&i, &COSTS, PlanChoice::Auto), auto);
        assert_eq!(plan_vector_as(&i, &COSTS, PlanChoice::Prefiltered), auto);
        assert_eq!(
            plan_vector_as(&i, &COSTS, PlanChoice::Exact),
            Plan::Exact {
                cost_ns: scan_ns,
                walk_ns
            }
        );
        match plan_vector_as(&i, &COSTS, PlanChoice::Walk) {
            Plan::Walk {
                cost_ns: w,
                scan_ns: sc,
                ef,
            } => {
                assert_eq!((w, sc), (walk_ns, scan_ns));
                assert!(ef > 16 && cost_ns < w);
            }
            p => panic!("{p:?}"),
        }
        for c in [PlanChoice::Exact, PlanChoice::Prefiltered, PlanChoice::Walk] {
            assert!(c.ran(&plan_vector_as(&i, &COSTS, c)), "{c:?}");
        }
        assert!(PlanChoice::Auto.ran(&auto));
        // too few vectors for the prefilter: the exact scan instead, and
        // not what was asked for
        let small = plan_vector_as(
            &input(1_000, 1_000_000, 16),
            &COSTS,
            PlanChoice::Prefiltered,
        );
        assert!(is_exact(&small) && !PlanChoice::Prefiltered.ran(&small));
        // nothing eligible: nothing to walk either
        let none = plan_vector_as(&input(0, 1_000_000, 16), &COSTS, PlanChoice::Walk);
        assert!(is_exact(&none) && !PlanChoice::Walk.ran(&none));
        for c in [
            PlanChoice::Auto,
            PlanChoice::Exact,
            PlanChoice::Prefiltered,
            PlanChoice::Walk,
        ] {
            assert_eq!(c.name().parse::<PlanChoice>(), Ok(c));
        }
        let e = "scan".parse::<PlanChoice>().unwrap_err();
        assert!(e.contains("'scan'") && e.contains("prefiltered"), "{e}");
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
