//! Random statements (filters, retrievers, expansions, lineage, AS OF,
//! traces) run by random principals of several tenants never return a
//! record of another tenant or one carrying a label the principal does not
//! hold: not as a row, not as an attached source or derivative.

use std::collections::{BTreeSet, HashMap};

use engram::query::lang::{Params, QueryExt};
use engram::{ListFilter, Principal, RecordRef};

use super::common::Rng;

const TENANTS: &[&str] = &["A", "B", "C"];
const LABELS: &[&str] = &["red", "blue"];
const WORDS: &[&str] = &["alpha", "beta", "gamma", "delta", "omega", "sigma"];

fn jsonl(db: &engram::Engram, tenant: &str, text: &str) {
    let lines = engram::query::parse_jsonl(text).unwrap_or_else(|e| panic!("{e}"));
    db.session(Principal::admin(tenant))
        .append(lines.into_iter().map(|l| l.record).collect())
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn random_statements_never_return_a_forbidden_record() {
    let n_statements: usize = std::env::var("ENGRAM_QUERY_ISOLATION_STATEMENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let tmp = tempfile::tempdir().unwrap();
    let clock = engram::ManualClock::new(1_750_000_000_000);
    let db = super::fixture::open(tmp.path(), &clock);
    let seed = super::common::seed();
    let mut rng = Rng(seed | 1);
    for t in TENANTS {
        for i in 0..30 {
            let label = match rng.below(3) {
                0 => String::new(),
                n => format!(r#","access":["{}"]"#, LABELS[n as usize - 1]),
            };
            let w = |r: &mut Rng| *r.pick(WORDS);
            let text = format!("{} {} {}", w(&mut rng), w(&mut rng), w(&mut rng));
            jsonl(
                &db,
                t,
                &format!(
                    r#"{{"external_id":"{t}/e{i}","kind":"note","text":"{text}","scope":{{"user":"u{}"}}{label}}}
{{"external_id":"{t}/ent{i}","record":"entity","entity_type":"thing","name":"{} {i}"{label}}}
"#,
                    i % 3,
                    w(&mut rng)
                ),
            );
            if i > 0 {
                jsonl(
                    &db,
                    t,
                    &format!(
                        r#"{{"external_id":"{t}/rel{i}","record":"relation","subject":"{t}/ent{i}","predicate":"links","object":"{t}/ent{}"}}
{{"external_id":"{t}/sum{i}","record":"summary","generator":"g","text":"summary {text}","sources":["{t}/e{i}","{t}/e{}"]}}
"#,
                        rng.below(i),
                        rng.below(i)
                    ),
                );
            }
            clock.advance(60_000);
        }
    }
    // who may read what: (tenant, effective labels) of every record
    let mut oracle: HashMap<String, (String, Vec<String>)> = HashMap::new();
    for t in TENANTS {
        for r in db
            .session(Principal::admin(*t))
            .list(&ListFilter::default())
            .unwrap()
        {
            oracle.insert(
                r.id.to_string(),
                (t.to_string(), r.effective_access.clone()),
            );
        }
    }
    // principals and their grants
    let mut held: HashMap<(String, String), BTreeSet<String>> = HashMap::new();
    for t in TENANTS {
        let admin = db.session(Principal::admin(*t));
        for (p, labels) in [
            ("p0", vec![]),
            ("p1", vec!["red"]),
            ("p2", vec!["red", "blue"]),
        ] {
            for l in &labels {
                admin.grant(Some(p), Some(l), None).unwrap();
            }
            held.insert(
                (t.to_string(), p.to_string()),
                labels.iter().map(|s| s.to_string()).collect(),
            );
        }
    }
    let mut rows_checked = 0usize;
    for round in 0..n_statements {
        let t = *rng.pick(TENANTS);
        let ps: &[&str] = &["p0", "p1", "p2"];
        let p = *rng.pick(ps);
        let s = db.session(Principal::user(t, p));
        let labels = &held[&(t.to_string(), p.to_string())];
        let other = *rng.pick(TENANTS);
        let stmt = random_statement(&mut rng, other);
        let out = match s.query(&stmt, &Params::new()) {
            Ok(o) => o,
            Err(e) => {
                // a statement may name nothing the principal can see
                let m = e.to_string();
                assert!(
                    m.contains("no record"),
                    "seed {seed} round {round}: {stmt}\n{m}"
                );
                continue;
            }
        };
        for row in &out.rows {
            let mut ids = vec![row["id"].as_str().unwrap().to_string()];
            for k in ["sources", "derivatives"] {
                if let Some(a) = row.get(k).and_then(|v| v.as_array()) {
                    ids.extend(a.iter().map(|x| x["id"].as_str().unwrap().to_string()));
                }
            }
            for id in ids {
                let (rt, rl) = &oracle[&id];
                assert_eq!(
                    rt, t,
                    "seed {seed} round {round}: {stmt}: another tenant's {id}"
                );
                assert!(
                    rl.iter().all(|l| labels.contains(l)),
                    "seed {seed} round {round}: {stmt}: {id} carries {rl:?}, {p} holds {labels:?}"
                );
                rows_checked += 1;
            }
        }
    }
    assert!(
        rows_checked > n_statements,
        "too few rows to mean anything: {rows_checked}"
    );
    // the hidden and the other tenant's records exist: a trace of them is "not found"
    let hidden = oracle
        .iter()
        .find(|(_, (t, l))| t == "A" && !l.is_empty())
        .map(|(id, _)| id.clone())
        .unwrap();
    let e = db
        .session(Principal::user("A", "p0"))
        .query(&format!("TRACE ID '{hidden}' BOTH"), &Params::new())
        .unwrap_err();
    assert!(e.to_string().contains("no record"), "{e}");
    let _ = RecordRef::Id(hidden.parse().unwrap());
    db.close().unwrap();
}

fn random_statement(rng: &mut Rng, other: &str) -> String {
    let w = *rng.pick(WORDS);
    if rng.below(6) == 0 {
        let i = rng.below(30);
        let target = match rng.below(3) {
            0 => format!("'{other}/e{i}'"),
            1 => format!("'{other}/sum{}'", 1 + rng.below(29)),
            _ => format!("'{other}/ent{i}'"),
        };
        let dirs: &[&str] = &["SOURCES", "DERIVATIVES", "BOTH"];
        let dir = *rng.pick(dirs);
        return format!("TRACE {target} {dir} DEPTH {}", 1 + rng.below(5));
    }
    let mut s = String::from("FIND ");
    let targets: &[&str] = &[
        "ANY",
        "events",
        "entities, relations",
        "summaries",
        "events, summaries",
    ];
    let target: &str = targets[rng.below(targets.len() as u64) as usize];
    s.push_str(target);
    let mut terms = Vec::new();
    if rng.below(2) == 0 {
        terms.push(format!(
            "scope.user IN ('u{}', 'u{}')",
            rng.below(3),
            rng.below(3)
        ));
    }
    if rng.below(3) == 0 {
        terms.push(format!(
            "NOT (kind = 'note' AND scope.user = 'u{}')",
            rng.below(3)
        ));
    }
    if rng.below(3) == 0 {
        let st: &[&str] = &[
            "status IN (active, superseded, stale)",
            "status = historical",
            "record != relation",
        ];
        terms.push(rng.pick(st).to_string());
    }
    if !terms.is_empty() {
        let op = if rng.below(2) == 0 { " AND " } else { " OR " };
        s.push_str(&format!(" WHERE {}", terms.join(op)));
    }
    if rng.below(4) == 0 {
        s.push_str(" AS OF now - 1h");
    }
    let mut names = Vec::new();
    if rng.below(2) == 0 {
        s.push_str(&format!(" SIMILAR TO '{w} {}' AS sem", rng.pick(WORDS)));
        names.push("sem");
    }
    if rng.below(2) == 0 {
        s.push_str(&format!(" MATCH '{w}' AS kw"));
        names.push("kw");
    }
    if rng.below(4) == 0 {
        s.push_str(" RECENT TOP 5");
    }
    if rng.below(2) == 0 {
        let from = if !names.is_empty() && rng.below(2) == 0 {
            names.join(", ")
        } else {
            format!(
                "ENTITY '{w} {}', '{other}/ent{}'",
                rng.below(30),
                rng.below(30)
            )
        };
        s.push_str(&format!(
            " EXPAND FROM {from} HOPS {} DIRECTION {} AS ex",
            1 + rng.below(3),
            {
                let d: &[&str] = &["OUT", "IN", "BOTH"];
                *rng.pick(d)
            }
        ));
    }
    match rng.below(4) {
        0 => s.push_str(" WITH SOURCES DEPTH 3"),
        1 => s.push_str(" WITH DERIVATIVES DEPTH 2"),
        2 => s.push_str(" WITH SOURCES, DERIVATIVES"),
        _ => {}
    }
    s.push_str(&format!(" LIMIT {}", 1 + rng.below(20)));
    s
}
