//! A small store for the acceptance examples: conversations, entities and
//! relations, preferences, summaries with client vectors, lineage chains,
//! written at controlled transaction times.

use std::sync::Arc;

use engram::{Engram, HashEmbedder, ManualClock, Options, Principal};

/// 2025-06-01T00:00:00Z
pub const JUNE_1: i64 = 1_748_736_000_000;
pub const DAY: i64 = 86_400_000;

/// The six acceptance examples of docs/query-language.md, as typed.
pub const EXAMPLE_1: &str = "FIND ANY WHERE scope.user = 'user_18' OR record = entity AS OF 2025-06-10 \
     SIMILAR TO 'billing issue' AS sem MATCH 'billing issue' AS kw \
     EXPAND FROM sem, kw HOPS 2 AS graph LIMIT 20 \
     RETURN id, record, kind, text, score, ranks";
pub const EXAMPLE_2: &str =
    "FIND assertions KIND 'preference' WHERE ingested_at >= 2025-03-01 MATCH 'diet'";
pub const EXAMPLE_3: &str = "FIND summaries WHERE scope.label = 'apollo' OR scope.conversation = 'apollo' VALID AT now \
     SIMILAR TO $qvec MODEL 'text-embedding-3-small' MIN 0.35";
pub const EXAMPLE_4: &str = "FIND assertions SIMILAR TO 'Acme renews in Q3' AS sem MATCH 'Acme renews in Q3' AS kw \
     WITH SOURCES DEPTH 3 LIMIT 5 RETURN id, text, score, sources";
pub const EXAMPLE_5: &str = "TRACE 'evt_9f2' DERIVATIVES DEPTH 5 INCLUDE SUPERSEDED";
pub const EXAMPLE_6: &str = "FIND ANY WHERE record = entity OR occurred_at >= now - 7d \
     SIMILAR TO 'database outage postmortem' TOP 20 AS outage \
     EXPAND FROM outage HOPS 1 VIA ('mentions', 'assigned_to', 'reported_by') AS graph \
     WEIGHTS (outage = 1.0, graph = 1.5) RETURN id, record, kind, text, score, ranks";

/// Whether a row's `ranks` (a JSON list) names the retriever `name`.
pub fn found_by(ranks: &serde_json::Value, name: &str) -> bool {
    ranks
        .as_array()
        .is_some_and(|rs| rs.iter().any(|x| x["retriever"] == name))
}

/// A row's `sources` (a JSON list) as (external id, depth) pairs.
pub fn sources_of(sources: &serde_json::Value) -> Vec<(String, u64)> {
    sources
        .as_array()
        .map(|xs| {
            xs.iter()
                .map(|x| {
                    (
                        x["external_id"].as_str().unwrap_or("").to_string(),
                        x["depth"].as_u64().unwrap_or(u64::MAX),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The outage week of example 6: an incident, the people it involves
/// through three relation kinds (and one it does not: `likes`), and a
/// postmortem. Also ingested on its own through `engram ingest`.
pub const OUTAGE_WEEK: &str = r#"{"external_id":"ent_db","record":"entity","entity_type":"incident","name":"database outage postmortem","aliases":["db outage"]}
{"external_id":"ent_alice","record":"entity","entity_type":"person","name":"Alice"}
{"external_id":"ent_bob","record":"entity","entity_type":"person","name":"Bob"}
{"external_id":"ent_carol","record":"entity","entity_type":"person","name":"Carol"}
{"external_id":"ent_dave","record":"entity","entity_type":"person","name":"Dave"}
{"external_id":"r1","record":"relation","subject":"ent_db","predicate":"assigned_to","object":"ent_alice"}
{"external_id":"r2","record":"relation","subject":"ent_db","predicate":"reported_by","object":"ent_bob"}
{"external_id":"r3","record":"relation","subject":"ent_db","predicate":"mentions","object":"ent_carol"}
{"external_id":"r4","record":"relation","subject":"ent_db","predicate":"likes","object":"ent_dave"}
{"external_id":"pm/src","kind":"document","text":"Postmortem draft: the database outage lasted two hours"}
{"external_id":"pm","record":"assertion","kind":"observation","text":"database outage postmortem: the primary database failed over twice","sources":["pm/src"],"subject":"ent_db"}
"#;

fn append_jsonl(db: &Engram, tenant: &str, jsonl: &str) {
    let lines = engram::query::parse_jsonl(jsonl).unwrap_or_else(|e| panic!("{e}"));
    let s = db.session(Principal::admin(tenant));
    s.append(lines.into_iter().map(|l| l.record).collect())
        .unwrap_or_else(|e| panic!("{e}"));
}

pub fn open(dir: &std::path::Path, clock: &ManualClock) -> Engram {
    Engram::open(
        dir,
        Options {
            clock: Arc::new(clock.clone()),
            embedder: Some(Arc::new(HashEmbedder::default())),
            ..Options::default()
        },
    )
    .unwrap()
}

/// Builds the store; the clock ends at JUNE_1 + 30 days.
pub fn build(dir: &std::path::Path) -> (Engram, ManualClock) {
    let clock = ManualClock::new(JUNE_1 - 120 * DAY); // early February
    let db = open(dir, &clock);
    // February: an early diet preference (before March: not "since March")
    append_jsonl(
        &db,
        "t",
        r#"{"external_id":"diet/src1","kind":"user_message","text":"I am vegetarian now, no meat for me","scope":{"user":"user_18"}}
{"external_id":"diet/old","record":"assertion","kind":"preference","text":"user_18 follows a vegetarian diet","sources":["diet/src1"],"scope":{"user":"user_18"}}
"#,
    );
    clock.set(JUNE_1 - 60 * DAY); // early April
    append_jsonl(
        &db,
        "t",
        r#"{"external_id":"diet/src2","kind":"user_message","text":"Switched to a vegan diet this spring","scope":{"user":"user_18"}}
{"external_id":"diet/new","record":"assertion","kind":"preference","text":"user_18 prefers a vegan diet","sources":["diet/src2"],"scope":{"user":"user_18"}}
"#,
    );
    clock.set(JUNE_1); // June 1: billing
    append_jsonl(
        &db,
        "t",
        r#"{"external_id":"ent_acme","record":"entity","entity_type":"customer","name":"Acme Corp","aliases":["Acme"]}
{"external_id":"ent_invoice","record":"entity","entity_type":"invoice","name":"Invoice 7731"}
{"external_id":"ent_team","record":"entity","entity_type":"team","name":"Billing Team"}
{"external_id":"rel_owes","record":"relation","subject":"ent_acme","predicate":"owes","object":"ent_invoice"}
{"external_id":"rel_handles","record":"relation","subject":"ent_team","predicate":"handles","object":"ent_invoice"}
{"external_id":"bill/1","kind":"user_message","text":"My billing issue: invoice 7731 from Acme was charged twice","scope":{"user":"user_18","conversation":"c1"}}
{"external_id":"bill/2","record":"assertion","kind":"fact","text":"Acme Corp was charged twice for invoice 7731","sources":["bill/1"],"subject":"ent_acme","scope":{"user":"user_18"}}
{"external_id":"evt_9f2","kind":"observation","text":"Acme renews in Q3 according to the account manager"}
{"external_id":"acme/sum","record":"summary","generator":"sum@1","text":"Account summary: Acme renews in Q3","sources":["evt_9f2"]}
{"external_id":"acme/claim","record":"assertion","kind":"fact","text":"Acme renews in Q3","sources":["acme/sum"]}
{"external_id":"acme/claim2","record":"assertion","kind":"fact","text":"Acme plans to renew in Q3","sources":["evt_9f2"]}
"#,
    );
    // correct one derivative of evt_9f2: the old version is superseded
    append_jsonl(
        &db,
        "t",
        r#"{"external_id":"acme/claim2","record":"assertion","kind":"fact","text":"Acme renews in Q3, confirmed","sources":["evt_9f2"],"supersedes":"acme/claim2"}
"#,
    );
    clock.set(JUNE_1 + 5 * DAY);
    // apollo summaries with client vectors (text-embedding-3-small, 4 dims)
    append_jsonl(
        &db,
        "t",
        r#"{"external_id":"apollo/s1","record":"summary","generator":"sum@1","text":"Apollo launch checklist review","sources":["bill/1"],"scope":{"labels":["apollo"]},"embedding":{"model":"text-embedding-3-small","vector":[1,0,0,0]}}
{"external_id":"apollo/s2","record":"summary","generator":"sum@1","text":"Apollo budget overrun discussion","sources":["bill/1"],"scope":{"labels":["apollo"]},"embedding":{"model":"text-embedding-3-small","vector":[0,1,0,0]}}
{"external_id":"gemini/s1","record":"summary","generator":"sum@1","text":"Gemini launch checklist review","sources":["bill/1"],"scope":{"labels":["gemini"]},"embedding":{"model":"text-embedding-3-small","vector":[1,0.1,0,0]}}
"#,
    );
    clock.set(JUNE_1 + 20 * DAY); // after June 10: not known "as of" then
    append_jsonl(
        &db,
        "t",
        r#"{"external_id":"bill/late","kind":"user_message","text":"Another billing issue with invoice 7731, refund still missing","scope":{"user":"user_18","conversation":"c1"}}
"#,
    );
    clock.set(JUNE_1 + 28 * DAY); // this week's outage
    append_jsonl(&db, "t", OUTAGE_WEEK);
    clock.set(JUNE_1 + 30 * DAY);
    (db, clock)
}
