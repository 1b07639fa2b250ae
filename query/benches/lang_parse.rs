//! How long the front end takes on a statement: parse, parse + check, and
//! parse + check + plan (to the engine's request type) of each of the six
//! acceptance examples (`tests/lang/ok/example*.eql`), in a plain loop of
//! about 200 ms per example after a warm-up. Prints the mean ns of each.
//!
//! Run: `cargo bench -p engram-query --bench lang_parse`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use engram_query::lang::{self, CheckContext, Embedder, Params};

const EXAMPLES: &[(&str, &str)] = &[
    (
        "example1_billing",
        include_str!("../tests/lang/ok/example1_billing.eql"),
    ),
    (
        "example2_diet",
        include_str!("../tests/lang/ok/example2_diet.eql"),
    ),
    (
        "example3_apollo",
        include_str!("../tests/lang/ok/example3_apollo.eql"),
    ),
    (
        "example4_claim_sources",
        include_str!("../tests/lang/ok/example4_claim_sources.eql"),
    ),
    (
        "example5_derived",
        include_str!("../tests/lang/ok/example5_derived.eql"),
    ),
    (
        "example6_outage",
        include_str!("../tests/lang/ok/example6_outage.eql"),
    ),
];

const MEASURE: Duration = Duration::from_millis(200);

/// Mean ns per call of `f`, over about [`MEASURE`].
fn mean_ns(mut f: impl FnMut()) -> f64 {
    for _ in 0..1_000 {
        f();
    }
    let mut n_calls = 0u64;
    let start = Instant::now();
    while start.elapsed() < MEASURE {
        for _ in 0..1_000 {
            f();
        }
        n_calls += 1_000;
    }
    start.elapsed().as_nanos() as f64 / n_calls as f64
}

fn main() {
    let params =
        Params::from_json(r#"{"qvec": [0.12, -0.4, 0.33, 0.85]}"#).expect("valid parameters");
    let mut ctx = CheckContext::new(params, 1_749_718_800_000);
    ctx.models = BTreeMap::from([
        ("text-embedding-3-small".to_string(), 4),
        ("mini-embed".to_string(), 8),
    ]);
    ctx.embedder = Embedder::Model("mini-embed".into());
    println!(
        "{:<24} {:>7} {:>12} {:>18} {:>22}",
        "statement", "bytes", "parse ns", "parse+check ns", "parse+check+plan ns"
    );
    for (name, text) in EXAMPLES {
        if let Err(errors) = lang::compile(text, &ctx) {
            for e in errors {
                eprint!("{}", e.render(text));
            }
            std::process::exit(1);
        }
        let parse = mean_ns(|| {
            black_box(lang::parse(black_box(text)).is_ok());
        });
        let both = mean_ns(|| {
            let ok = lang::parse(black_box(text)).is_ok_and(|s| lang::check(&s, &ctx).is_ok());
            black_box(ok);
        });
        let binder = lang::Binder::new(&ctx.params, ctx.now_ms);
        let all = mean_ns(|| {
            let ok = lang::parse(black_box(text))
                .is_ok_and(|s| lang::check(&s, &ctx).is_ok() && lang::plan(&s, &binder).is_ok());
            black_box(ok);
        });
        println!(
            "{name:<24} {:>7} {parse:>12.0} {both:>18.0} {all:>22.0}",
            text.len()
        );
    }
}
