//! What a vector space's graph walk reads: the full-precision vectors or
//! their int8 codes (see `quant`), chosen per space.

use super::distance::Metric;

/// Graphs of at least this many vectors are walked over int8 codes under
/// [`GraphPrecision::Auto`] (inner-product spaces). Below it the
/// full-precision vectors are a few MiB and stay in the CPU's caches, so
/// codes would only add memory.
pub const GRAPH_CODES_MIN: u32 = 8192;

/// What a space's graph walk reads. Either way the `k` results carry
/// full-precision distances: an int8 walk keeps its `max(ef, k)` best candidates
/// and re-ranks them from the full-precision vectors (memory-mapped, read
/// only for those candidates). The graph itself is the same, built from
/// the full-precision vectors, so the choice can change at any open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GraphPrecision {
    /// Int8 codes for inner-product spaces (cosine, dot) whose graph holds
    /// at least [`GRAPH_CODES_MIN`] vectors; full precision otherwise.
    #[default]
    Auto,
    /// Always the full-precision vectors.
    F32,
    /// Int8 codes for every inner-product space (L2 spaces still walk the
    /// full-precision vectors: the codes estimate inner products only).
    Int8,
}

impl GraphPrecision {
    /// Whether a graph of `indexed` vectors under `metric` (the space's
    /// internal metric) is walked over int8 codes.
    pub fn walks_codes(self, metric: Metric, indexed: u32) -> bool {
        metric == Metric::Dot
            && match self {
                GraphPrecision::Auto => indexed >= GRAPH_CODES_MIN,
                GraphPrecision::F32 => false,
                GraphPrecision::Int8 => true,
            }
    }

    const ALL: [GraphPrecision; 3] = [
        GraphPrecision::Auto,
        GraphPrecision::F32,
        GraphPrecision::Int8,
    ];

    /// The name it is given on the command line: `auto`, `f32`, `int8`.
    pub fn name(self) -> &'static str {
        match self {
            GraphPrecision::Auto => "auto",
            GraphPrecision::F32 => "f32",
            GraphPrecision::Int8 => "int8",
        }
    }
}

impl std::str::FromStr for GraphPrecision {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        GraphPrecision::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown graph precision '{s}' (expected auto, f32 or int8)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_walked_only_in_inner_product_spaces_and_from_the_threshold_under_auto() {
        for p in [
            GraphPrecision::Auto,
            GraphPrecision::F32,
            GraphPrecision::Int8,
        ] {
            assert!(
                !p.walks_codes(Metric::L2, 1 << 20),
                "{p:?}: codes bound inner products only"
            );
        }
        assert!(!GraphPrecision::Auto.walks_codes(Metric::Dot, GRAPH_CODES_MIN - 1));
        assert!(GraphPrecision::Auto.walks_codes(Metric::Dot, GRAPH_CODES_MIN));
        assert!(!GraphPrecision::F32.walks_codes(Metric::Dot, 1 << 20));
        assert!(GraphPrecision::Int8.walks_codes(Metric::Dot, 1));
    }

    #[test]
    fn precisions_parse_by_name_and_unknown_names_are_refused() {
        assert_eq!("auto".parse(), Ok(GraphPrecision::Auto));
        assert_eq!("f32".parse(), Ok(GraphPrecision::F32));
        assert_eq!("int8".parse(), Ok(GraphPrecision::Int8));
        for p in GraphPrecision::ALL {
            assert_eq!(p.name().parse(), Ok(p));
        }
        let err = "int4".parse::<GraphPrecision>().unwrap_err();
        assert!(
            err.contains("int4") && err.contains("auto, f32 or int8"),
            "{err}"
        );
    }
}
