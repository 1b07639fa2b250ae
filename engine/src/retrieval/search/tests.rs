//! Unit tests of `search.rs`: fusion and score normalisation.
use proptest::prelude::*;

use super::*;

fn spec(name: &str, weight: f64, recent: bool) -> RetrieverSpec {
    RetrieverSpec {
        name: name.into(),
        top: 10,
        weight,
        params: if recent {
            RetrieverParams::Recent
        } else {
            RetrieverParams::Match { text: None }
        },
    }
}

fn output(name: &str, scores: &[f64]) -> RetrieverOutput {
    RetrieverOutput {
        retriever: name.into(),
        ..RetrieverOutput::ran(
            scores
                .iter()
                .enumerate()
                .map(|(i, &score)| Candidate {
                    // ids out of rank order, some scores tied
                    id: RecordId(((i * 7919) % 101) as u128),
                    rank: i + 1,
                    score,
                    idx: i as Idx,
                })
                .collect(),
        )
    }
}

/// Min-max over candidates that all scored the same: full weight when
/// that score says something matched, none when it is 0 or below.
#[test]
fn min_max_of_equal_scores_weighs_only_a_positive_score() {
    let norm = |scores: &[f64]| {
        normalize_scores(
            &output("v", scores).candidates,
            Norm::MinMax,
            RetrieverKind::Similar,
        )
    };
    assert_eq!(norm(&[0.0, 0.0, 0.0]), [0.0, 0.0, 0.0]);
    assert_eq!(norm(&[-0.2]), [0.0]);
    assert_eq!(norm(&[0.4]), [1.0]);
    assert_eq!(norm(&[2.0, 1.0, 0.0]), [1.0, 0.5, 0.0]);
    // recency's score is a time: a date before 1970 is below 0
    let recent = |scores: &[f64]| {
        normalize_scores(
            &output("r", scores).candidates,
            Norm::MinMax,
            RetrieverKind::Recent,
        )
    };
    assert_eq!(recent(&[-14_182_940_000.0]), [1.0]);
    assert_eq!(recent(&[932_501_820_000.0]), [1.0]);
    assert_eq!(recent(&[-5.0, -5.0]), [1.0, 1.0]);
    assert_eq!(recent(&[-10.0, -5.0]), [0.0, 1.0]);
}

proptest! {
    /// The one-retriever shortcut ranks exactly as the grouping path:
    /// same records, contributions and scores, in the same order.
    #[test]
    fn fuse_single_is_fuse(
        scores in prop::collection::vec(prop::sample::select(vec![0.0, 0.5, 1.0, 2.0, -1.0]), 0..40),
        weight in prop::sample::select(vec![0.0, 0.3, 1.0]),
        fusion in prop::sample::select(vec![
            Fusion::Rrf { k: RRF_K },
            Fusion::Linear { norm: Norm::MinMax },
            Fusion::Linear { norm: Norm::ZScore },
        ]),
        // which of three retrievers proposed, and whether it is recency
        who in 0usize..3,
        recent in any::<bool>(),
        others_recent in any::<bool>(),
        // the others propose too (records shared by index)
        others in prop::collection::vec(prop::sample::select(vec![0.0, 1.0, 3.0]), 0..12),
    ) {
        let specs: Vec<RetrieverSpec> = (0..3)
            .map(|i| spec(&format!("r{i}"), weight, if i == who { recent } else { others_recent }))
            .collect();
        let outputs: Vec<RetrieverOutput> = (0..3)
            .map(|i| output(&format!("r{i}"), if i == who { &scores } else { &others }))
            .collect();
        let grouped = fuse_grouped(&specs, &outputs, fusion);
        prop_assert_eq!(&fuse(&specs, &outputs, fusion), &grouped);
        // Taken exactly when one retriever proposed (the others share
        // `others`: both or neither), it is not recency beside a
        // content retriever, and it is turned on (weight 0: off).
        let one_proposer = !scores.is_empty() && others.is_empty();
        let recency_beside_content = recent && !others_recent;
        let covered = one_proposer && !recency_beside_content && weight > 0.0;
        if weight == 0.0 {
            // every retriever off: nothing is a result
            prop_assert!(grouped.is_empty());
        }
        let single = fuse_single(&specs, &outputs, fusion);
        prop_assert_eq!(single.is_some(), covered);
        if let Some(single) = single {
            prop_assert_eq!(single, grouped);
        }
    }
}
