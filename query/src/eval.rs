//! Evaluation cases (one JSON object per line) and retrieval metrics.
//!
//! A case has the shape of the memory-architecture seed's example:
//!
//! ```json
//! {"case_id": "mem_eval_014",
//!  "query": "Which retention policy applies to export logs?",
//!  "scope": {"tenant_id": "tenant_42", "user_id": "user_18"},
//!  "as_of": "2025-03-01T00:00:00Z",
//!  "relevant_event_ids": ["evt_policy_07", "evt_decision_12"],
//!  "forbidden_event_ids": ["evt_other_tenant_03"],
//!  "notes": "The later approval supersedes the draft."}
//! ```
//!
//! Accepted spellings: `query` or `text`; `vector` and `model`; `scope` with
//! `tenant`/`tenant_id`, `user`/`user_id`, `conversation`/`conversation_id`,
//! `agent`/`agent_id` (or `tenant` at the top level); `relevant_ids` /
//! `relevant_event_ids` / `relevant`; `forbidden_ids` / `forbidden_event_ids`
//! / `forbidden`; optional `principal`, `mode`, `k`, `kind`, `valid_at`,
//! `slice` (a string or list: the slices the case counts towards),
//! `notes`. Ids may be internal ids or external ids.
//!
//! Metrics per case at cutoff k: recall@k = relevant found / relevant;
//! precision@k = relevant found / k; reciprocal rank = 1 / rank of the first
//! relevant hit (0 if none); forbidden hits = returned hits named in the
//! forbidden list. The forbidden-hit rate is forbidden hits / hits returned,
//! over all cases; it must be 0.
//!
//! This module must never touch a store.

use std::collections::{BTreeMap, HashSet};

use engram_engine::retrieval::episodic::{self, Window as EpisodicWindow};
use engram_engine::retrieval::{
    Filters, Fusion, Hit, Mode, Norm, RRF_K, RecallRequest, RetrieverParams, SearchRequest,
};
use engram_engine::time::parse_query_time;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::ingest::{LineError, parse_vector};
use crate::recall::build_request;

/// One evaluation case.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalCase {
    /// Line in the file.
    pub line: usize,
    /// Case id.
    pub case_id: String,
    /// Tenant.
    pub tenant: String,
    /// Principal (None: tenant admin).
    pub principal: Option<String>,
    /// The request (k from the case or the command line).
    pub request: RecallRequest,
    /// Relevant ids or external ids.
    pub relevant: Vec<String>,
    /// Forbidden ids or external ids.
    pub forbidden: Vec<String>,
    /// Slices.
    pub slices: Vec<String>,
    /// Whether the case set its own k.
    pub k_from_case: bool,
}

/// A filter's values ([`strs`]); an empty list is refused, as a recall
/// request refuses it (it would read as no filter at all).
fn filter(o: &Map<String, Value>, keys: &[&str]) -> Result<Vec<String>, (String, String)> {
    if let Some(k) = keys
        .iter()
        .find(|k| matches!(o.get(**k), Some(Value::Array(a)) if a.is_empty()))
    {
        return Err((k.to_string(), crate::recall::EMPTY_LIST.into()));
    }
    strs(o, keys)
}

/// Most record references one case may list as relevant, and as
/// forbidden: each is looked up in the store.
pub const CASE_IDS_MAX: usize = 10_000;

fn capped(ids: Vec<String>, field: &str) -> Result<Vec<String>, (String, String)> {
    if ids.len() > CASE_IDS_MAX {
        return Err((
            field.to_string(),
            format!(
                "{} ids, above the limit of {CASE_IDS_MAX} per case",
                ids.len()
            ),
        ));
    }
    Ok(ids)
}

fn strs(o: &Map<String, Value>, keys: &[&str]) -> Result<Vec<String>, (String, String)> {
    // Two spellings of one field: which one counts would be a guess.
    let given: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| o.get(*k).is_some_and(|v| !v.is_null()))
        .collect();
    if given.len() > 1 {
        return Err((
            given[1].to_string(),
            format!("give one of {}, not both", given.join(" and ")),
        ));
    }
    for k in keys {
        match o.get(*k) {
            None | Some(Value::Null) => continue,
            Some(Value::String(s)) => return Ok(vec![s.clone()]),
            Some(Value::Array(a)) => {
                return a
                    .iter()
                    .map(|v| match v {
                        Value::String(s) => Ok(s.clone()),
                        Value::Number(n) => Ok(n.to_string()),
                        _ => Err((k.to_string(), "expected strings".into())),
                    })
                    .collect();
            }
            Some(_) => {
                return Err((
                    k.to_string(),
                    "expected a string or a list of strings".into(),
                ));
            }
        }
    }
    Ok(Vec::new())
}

fn one(o: &Map<String, Value>, keys: &[&str]) -> Result<Option<String>, (String, String)> {
    Ok(strs(o, keys)?.into_iter().next())
}

/// Parses one case.
pub fn parse_case(text: &str, line: usize) -> Result<EvalCase, LineError> {
    parse_case_as(text, line, false)
}

/// Parses one case run as a session's principal (the server's API key):
/// the case may not name a tenant or principal (`tenant`, `tenant_id`,
/// `principal` at the top level or in `scope`), and its `tenant` is left
/// empty for the caller to ignore.
pub fn parse_session_case(text: &str, line: usize) -> Result<EvalCase, LineError> {
    parse_case_as(text, line, true)
}

/// Parses a JSONL text of cases run as a session's principal (see
/// [`parse_session_case`]); blank and `#` lines are skipped.
pub fn parse_session_cases(text: &str) -> Result<Vec<EvalCase>, LineError> {
    parse_lines(text, parse_session_case)
}

/// Parses every case line of `text` with `parse`; blank and `#` lines are
/// skipped.
fn parse_lines(
    text: &str,
    parse: fn(&str, usize) -> Result<EvalCase, LineError>,
) -> Result<Vec<EvalCase>, LineError> {
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let t = l.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        out.push(parse(t, i + 1)?);
    }
    Ok(out)
}

/// Cases whose `case_id` an earlier case already has, as (id, line of the
/// first, line of the repeat). Such cases still run (results are in file
/// order), but reports keyed by case id cannot tell them apart.
pub fn repeated_ids(cases: &[EvalCase]) -> Vec<(String, usize, usize)> {
    let mut first = std::collections::HashMap::new();
    let mut out = Vec::new();
    for c in cases {
        if let Some(&l) = first.get(c.case_id.as_str()) {
            out.push((c.case_id.clone(), l, c.line));
        } else {
            first.insert(c.case_id.as_str(), c.line);
        }
    }
    out
}

/// Fields of a case that name who runs it.
const SESSION_FIELDS: &[&str] = &["tenant", "tenant_id", "principal"];

/// Every field a case may have (docs/ingest.md, "Evaluation cases"): any
/// other is refused, since a misspelt one would be silently lost.
const CASE_FIELDS: &[&str] = &[
    "case_id",
    "query",
    "text",
    "vector",
    "model",
    "scope",
    "tenant",
    "tenant_id",
    "principal",
    "relevant_ids",
    "relevant_event_ids",
    "relevant",
    "forbidden_ids",
    "forbidden_event_ids",
    "forbidden",
    "mode",
    "k",
    "kind",
    "as_of",
    "valid_at",
    "slice",
    "slices",
    "notes",
];

/// Every field a case's `scope` may have.
const CASE_SCOPE_FIELDS: &[&str] = &[
    "tenant",
    "tenant_id",
    "user",
    "user_id",
    "conversation",
    "conversation_id",
    "agent",
    "agent_id",
];

/// The first field of `o` not in `known`, as the error naming it.
fn unknown_field(
    o: &Map<String, Value>,
    known: &[&str],
    prefix: &str,
) -> Result<(), (String, String)> {
    match o.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err((
            format!("{prefix}{k}"),
            format!("unknown field (known: {})", known.join(", ")),
        )),
        None => Ok(()),
    }
}

fn parse_case_as(text: &str, line: usize, session: bool) -> Result<EvalCase, LineError> {
    let o = crate::ingest::json_object(text, line)?;
    (|| {
        let case_id = match o.get("case_id") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => format!("line-{line}"),
        };
        let empty = Map::new();
        let scope = match o.get("scope") {
            Some(Value::Object(s)) => s,
            None | Some(Value::Null) => &empty,
            Some(_) => return Err(("scope".to_string(), "expected an object".to_string())),
        };
        unknown_field(&o, CASE_FIELDS, "")?;
        unknown_field(scope, CASE_SCOPE_FIELDS, "scope.")?;
        let tenant = if session {
            for (prefix, m) in [("", &o), ("scope.", scope)] {
                if let Some(f) = SESSION_FIELDS.iter().find(|f| m.contains_key(**f)) {
                    return Err((
                        format!("{prefix}{f}"),
                        "a case cannot name a tenant or principal here: it runs as the \
                         principal of the API key"
                            .to_string(),
                    ));
                }
            }
            String::new()
        } else {
            // One place or the other: two tenants would leave which one
            // the case runs in to a guess.
            match (
                one(scope, &["tenant", "tenant_id"])?,
                one(&o, &["tenant", "tenant_id"])?,
            ) {
                (Some(a), Some(b)) if a != b => {
                    return Err((
                        "scope.tenant".to_string(),
                        format!("'{a}' differs from the case's tenant '{b}'; give one"),
                    ));
                }
                (Some(t), _) | (None, Some(t)) => t,
                (None, None) => return Err(("scope.tenant".to_string(), "required".to_string())),
            }
        };
        // as the engine holds a tenant or principal written in a record:
        // one that prints like another is refused, not run as a tenant
        // holding nothing
        let identifier = |field: &str, name: &Option<String>| match name {
            Some(n) => engram_engine::model::check_identifier(field, n).map_err(|e| match e {
                engram_engine::EngineError::InvalidInput { reason, .. } => {
                    (field.to_string(), reason)
                }
                e => (field.to_string(), e.to_string()),
            }),
            None => Ok(()),
        };
        identifier("tenant", &(!tenant.is_empty()).then(|| tenant.clone()))?;
        let principal = one(&o, &["principal"])?;
        identifier("principal", &principal)?;
        let filters = Filters {
            users: filter(scope, &["user", "user_id"])?,
            conversations: filter(scope, &["conversation", "conversation_id"])?,
            agents: filter(scope, &["agent", "agent_id"])?,
            kinds: filter(&o, &["kind"])?,
            ..Filters::default()
        };
        let vector = match o.get("vector") {
            None | Some(Value::Null) => None,
            Some(v) => Some(parse_vector(v, "vector")?),
        };
        let time = |f: &str| -> Result<Option<i64>, (String, String)> {
            one(&o, &[f])?
                .map(|s| parse_query_time(&s).map_err(|e| (f.to_string(), e.to_string())))
                .transpose()
        };
        // (counted as a recall line counts it: `1e1` is 10)
        let k = match crate::recall::opt_uint(&o, "k")? {
            Some(0) => {
                return Err(("k".to_string(), "expected a positive integer".to_string()));
            }
            k => k,
        };
        let text = one(&o, &["query", "text"])?.filter(|t| !t.trim().is_empty());
        // A case that can never run is malformed, like a bad `k`: refused
        // with the file, before any case runs.
        match (&text, &vector, one(&o, &["mode"])?.as_deref()) {
            (None, _, Some("lexical")) => {
                return Err((
                    "query".to_string(),
                    "required: lexical mode needs a query text".to_string(),
                ));
            }
            (None, None, _) => {
                return Err((
                    "query".to_string(),
                    "required: a case needs a query text (or a vector)".to_string(),
                ));
            }
            _ => {}
        }
        let request = build_request(
            text,
            vector,
            one(&o, &["model"])?,
            one(&o, &["mode"])?.as_deref(),
            k,
            None,
            filters,
            time("as_of")?,
            time("valid_at")?,
            false,
        )?;
        Ok(EvalCase {
            line,
            case_id,
            tenant,
            principal,
            request,
            relevant: capped(
                strs(&o, &["relevant_ids", "relevant_event_ids", "relevant"])?,
                "relevant_ids",
            )?,
            forbidden: capped(
                strs(&o, &["forbidden_ids", "forbidden_event_ids", "forbidden"])?,
                "forbidden_ids",
            )?,
            slices: {
                let mut slices = strs(&o, &["slice", "slices"])?;
                // (a slice of no name is a row a report cannot label, and
                // `overall` is the report's row of every case)
                if slices.iter().any(|s| s.trim().is_empty()) {
                    return Err(("slices".to_string(), "a slice name is empty".to_string()));
                }
                if slices.iter().any(|s| s.trim() == "overall") {
                    return Err((
                        "slices".to_string(),
                        "'overall' names the row of every case; name the slice otherwise"
                            .to_string(),
                    ));
                }
                // a case counts once in a slice it names twice
                let mut seen = std::collections::HashSet::new();
                slices.retain(|s| seen.insert(s.clone()));
                slices
            },
            k_from_case: k.is_some(),
        })
    })()
    .map_err(crate::ingest::at_line(line))
}

/// Parses a JSONL file of cases.
pub fn parse_cases(text: &str) -> Result<Vec<EvalCase>, LineError> {
    parse_lines(text, parse_case)
}

/// Metrics of one case.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CaseResult {
    /// Case id.
    pub case_id: String,
    /// k used.
    pub k: usize,
    /// Relevant records named by the case.
    pub relevant: usize,
    /// Relevant records in the top k.
    pub relevant_found: usize,
    /// recall@k; `None` (JSON `null`) for a case naming no relevant id
    /// (a forbidden-hits check has no relevance to measure).
    pub recall: Option<f64>,
    /// precision@k; `None` as `recall`.
    pub precision: Option<f64>,
    /// Reciprocal rank of the first relevant hit; `None` as `recall`.
    pub reciprocal_rank: Option<f64>,
    /// Hits returned.
    pub hits: usize,
    /// Hits named in the forbidden list.
    pub forbidden_hits: Vec<String>,
    /// Slices.
    pub slices: Vec<String>,
    /// Returned ids, in rank order.
    pub returned: Vec<String>,
    /// Relevant ids that name no record the case's principal can read
    /// (counted as relevant and not found: a misspelt id shows here).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unresolved: Vec<String>,
}

/// A case's relevant records: one entry per record, whatever names it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Relevant {
    /// Each relevant record once: its internal id when the reference was
    /// resolved, else the reference as given.
    pub ids: Vec<String>,
    /// References that name no record the principal can read.
    pub unresolved: Vec<String>,
    /// `ids` are internal ids resolved against the store: a hit is
    /// relevant by its internal id alone (a record whose external id
    /// spells another record's internal id is not that record). Without a
    /// store, a hit is relevant by either of its ids.
    pub by_internal_id: bool,
}

impl Relevant {
    /// Resolves a case's relevant references with `canonical` (a
    /// reference to the internal id of the record it names, when the
    /// case's principal can read it): a record named twice, or by its
    /// external id and its internal id, counts once.
    pub fn resolve(case: &EvalCase, canonical: impl Fn(&str) -> Option<String>) -> Relevant {
        let mut out = Relevant::default();
        // (sets beside the lists: a case of many ids costs linear time)
        let (mut ids, mut unresolved) = (HashSet::new(), HashSet::new());
        for r in &case.relevant {
            let id = match canonical(r) {
                Some(id) => id,
                None => {
                    if unresolved.insert(r.clone()) {
                        out.unresolved.push(r.clone());
                    }
                    r.clone()
                }
            };
            if ids.insert(id.clone()) {
                out.ids.push(id);
            }
        }
        out.by_internal_id = true;
        out
    }

    /// The case's references as given, repeats merged (no store at hand).
    fn as_given(case: &EvalCase) -> Relevant {
        Relevant {
            by_internal_id: false,
            ..Relevant::resolve(case, |r| Some(r.to_string()))
        }
    }
}

fn names(h: &Hit) -> [Option<String>; 2] {
    [
        Some(h.id.to_string()),
        h.external_id.as_deref().map(str::to_string),
    ]
}

/// Scores one case's hits, its relevant ids as given (repeats merged).
pub fn score_case(case: &EvalCase, k: usize, hits: &[Hit]) -> CaseResult {
    score_resolved(case, &Relevant::as_given(case), k, hits)
}

/// Scores one case's hits against its resolved relevant records.
pub fn score_resolved(case: &EvalCase, relevant: &Relevant, k: usize, hits: &[Hit]) -> CaseResult {
    let wanted: HashSet<&str> = relevant.ids.iter().map(String::as_str).collect();
    let refused: HashSet<&str> = case.forbidden.iter().map(String::as_str).collect();
    let is =
        |h: &Hit, set: &HashSet<&str>| names(h).iter().flatten().any(|n| set.contains(n.as_str()));
    // the relevant record a hit is, if any
    let relevant_as = |h: &Hit| -> Option<String> {
        let [id, ext] = names(h);
        let names = if relevant.by_internal_id {
            [id, None]
        } else {
            [id, ext]
        };
        names
            .into_iter()
            .flatten()
            .find(|n| wanted.contains(n.as_str()))
    };
    let top = &hits[..hits.len().min(k)];
    // each relevant record once, however many hits name it
    let found: HashSet<String> = top.iter().filter_map(relevant_as).collect();
    let first = top.iter().position(|h| relevant_as(h).is_some());
    let forbidden: Vec<String> = hits
        .iter()
        .filter(|h| is(h, &refused))
        .map(|h| {
            h.external_id
                .as_deref()
                .map_or_else(|| h.id.to_string(), str::to_string)
        })
        .collect();
    let scored = !relevant.ids.is_empty();
    CaseResult {
        case_id: case.case_id.clone(),
        k,
        relevant: relevant.ids.len(),
        relevant_found: found.len(),
        recall: scored.then(|| found.len() as f64 / relevant.ids.len() as f64),
        precision: scored.then(|| found.len() as f64 / k as f64),
        reciprocal_rank: scored.then(|| first.map_or(0.0, |p| 1.0 / (p + 1) as f64)),
        hits: hits.len(),
        forbidden_hits: forbidden,
        slices: case.slices.clone(),
        returned: top
            .iter()
            .map(|h| {
                h.external_id
                    .as_deref()
                    .map_or_else(|| h.id.to_string(), str::to_string)
            })
            .collect(),
        unresolved: relevant.unresolved.clone(),
    }
}

/// Aggregate metrics. In JSON, the relevance means are `null` when no
/// case names a relevant id (`scored` is 0: there is nothing to average,
/// as the text output's `n/a` says).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Cases.
    pub cases: usize,
    /// Cases with at least one relevant id: the relevance means (recall,
    /// precision, MRR, all-evidence) are over these. A case with none (a
    /// forbidden-hits check) counts toward the forbidden-hit rate only.
    pub scored: usize,
    /// Mean recall@k.
    pub recall_at_k: f64,
    /// Mean precision@k.
    pub precision_at_k: f64,
    /// Mean reciprocal rank.
    pub mrr: f64,
    /// Share of cases with every relevant record in the top k.
    pub all_evidence_at_k: f64,
    /// Forbidden hits.
    pub forbidden_hits: usize,
    /// Hits returned.
    pub hits: usize,
    /// forbidden_hits / hits.
    pub forbidden_hit_rate: f64,
}

impl Serialize for Summary {
    fn serialize<S: serde::Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Shown {
            cases: usize,
            scored: usize,
            recall_at_k: Option<f64>,
            precision_at_k: Option<f64>,
            mrr: Option<f64>,
            all_evidence_at_k: Option<f64>,
            forbidden_hits: usize,
            hits: usize,
            forbidden_hit_rate: f64,
        }
        let mean = |v: f64| (self.scored > 0).then_some(v);
        Shown {
            cases: self.cases,
            scored: self.scored,
            recall_at_k: mean(self.recall_at_k),
            precision_at_k: mean(self.precision_at_k),
            mrr: mean(self.mrr),
            all_evidence_at_k: mean(self.all_evidence_at_k),
            forbidden_hits: self.forbidden_hits,
            hits: self.hits,
            forbidden_hit_rate: self.forbidden_hit_rate,
        }
        .serialize(out)
    }
}

/// Aggregates results overall and per slice.
pub fn summarize(results: &[CaseResult]) -> (Summary, BTreeMap<String, Summary>) {
    fn agg<'a>(rs: impl Iterator<Item = &'a CaseResult>) -> Summary {
        let mut s = Summary::default();
        for r in rs {
            s.cases += 1;
            s.forbidden_hits += r.forbidden_hits.len();
            s.hits += r.hits;
            if r.relevant == 0 {
                continue;
            }
            s.scored += 1;
            s.recall_at_k += r.recall.unwrap_or_default();
            s.precision_at_k += r.precision.unwrap_or_default();
            s.mrr += r.reciprocal_rank.unwrap_or_default();
            if r.relevant_found == r.relevant {
                s.all_evidence_at_k += 1.0;
            }
        }
        if s.scored > 0 {
            let n = s.scored as f64;
            s.recall_at_k /= n;
            s.precision_at_k /= n;
            s.mrr /= n;
            s.all_evidence_at_k /= n;
        }
        s.forbidden_hit_rate = if s.hits == 0 {
            0.0
        } else {
            s.forbidden_hits as f64 / s.hits as f64
        };
        s
    }
    let overall = agg(results.iter());
    let mut slices: BTreeMap<String, Vec<&CaseResult>> = BTreeMap::new();
    for r in results {
        for s in &r.slices {
            slices.entry(s.clone()).or_default().push(r);
        }
    }
    let per = slices
        .into_iter()
        .map(|(k, v)| (k, agg(v.into_iter())))
        .collect();
    (overall, per)
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_engine::RecordId;

    #[test]
    fn eval_configurations_change_only_what_they_name() {
        let req = RecallRequest::text("where did we go");
        let base = EvalConfig::parse("base").unwrap().search(&req);
        assert_eq!(base, req.to_search());
        let c = EvalConfig::parse("x: fusion=rrf, rrf_k=10, episodic=0.2, window=3, lexical=0")
            .unwrap()
            .search(&req);
        assert_eq!(c.fusion, Fusion::Rrf { k: 10.0 });
        // (a weight of 0 turns its retriever off: the search does not run it)
        let lex = c.retrievers.iter().find(|r| r.name == "lexical").unwrap();
        assert_eq!(lex.weight, 0.0);
        let ep = c.retrievers.iter().find(|r| r.name == "episodic").unwrap();
        assert_eq!(ep.weight, 0.2);
        assert!(matches!(
            ep.params,
            RetrieverParams::Episodic(EpisodicWindow { window: 3, .. })
        ));
        let none = EvalConfig::parse("off:episodic=0,mode=vector")
            .unwrap()
            .search(&req);
        assert!(none.retrievers.iter().all(|r| r.name == "vector"));
        for (bad, says) in [
            (":episodic=1", "needs a name"),
            ("a:episodic", "key=value"),
            ("a:episodic=-1", "number >= 0"),
            ("a:fusion=max", "rrf, minmax or zscore"),
            ("a:fusion=minmax,rrf_k=5", "rrf_k goes with fusion=rrf"),
            ("a:rrf_k=0", "from 1 to 10000"),
            ("a:rrf_k=1.5", "from 1 to 10000"),
            ("a:rrf_k=99999999999", "from 1 to 10000"),
            ("a:episodic=0,episodic=1", "episodic given twice"),
            ("a:colour=red", "unknown key 'colour'"),
            ("a:window=two", "whole number"),
        ] {
            let e = EvalConfig::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_tenant_or_principal_that_prints_like_another_is_refused() {
        for (t, field) in [
            (r#"{"query": "q", "tenant": "t\u200b"}"#, "tenant"),
            (
                r#"{"query": "q", "scope": {"tenant": "t\u200b"}}"#,
                "tenant",
            ),
            (
                r#"{"query": "q", "tenant": "t", "principal": "p\u00ad"}"#,
                "principal",
            ),
        ] {
            let e = parse_case(t, 2).unwrap_err();
            assert_eq!((e.line, e.field.as_str()), (2, field), "{t}");
            assert!(e.reason.contains("invisible"), "{}", e.reason);
        }
    }

    #[test]
    fn an_unknown_field_of_a_case_is_refused_with_its_name() {
        for (t, field) in [
            (r#"{"query": "q", "tenant": "t", "bogus": 1}"#, "bogus"),
            (
                r#"{"query": "q", "tenant": "t", "relevent_ids": ["a"]}"#,
                "relevent_ids",
            ),
            (
                r#"{"query": "q", "scope": {"tenant": "t", "usr": "u"}}"#,
                "scope.usr",
            ),
        ] {
            let e = parse_case(t, 3).unwrap_err();
            assert_eq!((e.line, e.field.as_str()), (3, field), "{t}");
            assert!(e.reason.contains("unknown field"), "{}", e.reason);
        }
        parse_case(
            r#"{"query": "q", "tenant": "t", "notes": "why", "slices": ["x"], "k": 3}"#,
            1,
        )
        .unwrap();
        // two spellings of one field: refused, never one silently dropped
        for (t, field) in [
            (
                r#"{"query": "q", "tenant": "t", "forbidden": ["a"], "forbidden_ids": ["b"]}"#,
                "forbidden",
            ),
            (r#"{"query": "q", "text": "r", "tenant": "t"}"#, "text"),
            (
                r#"{"query": "q", "tenant": "t", "scope": {"user": "u", "user_id": "v"}}"#,
                "user_id",
            ),
        ] {
            let e = parse_case(t, 4).unwrap_err();
            assert!(
                e.field.ends_with(field) && e.reason.contains("not both"),
                "{t}: {e:?}"
            );
        }
        // a k of 0 can never run: refused with the file, like -3
        for k in ["0", "-3"] {
            let e = parse_case(&format!(r#"{{"query": "q", "tenant": "t", "k": {k}}}"#), 2)
                .unwrap_err();
            assert_eq!(e.field, "k", "{k}");
        }
    }

    #[test]
    fn the_seed_example_parses() {
        let c = parse_case(
            r#"{"case_id": "mem_eval_014", "query": "Which retention policy applies to export logs?", "scope": {"tenant_id": "tenant_42", "user_id": "user_18"}, "as_of": "2025-03-01T00:00:00Z", "relevant_event_ids": ["evt_policy_07", "evt_decision_12"], "forbidden_event_ids": ["evt_other_tenant_03"], "notes": "The later approval supersedes the draft."}"#,
            1,
        )
        .unwrap();
        assert_eq!(c.case_id, "mem_eval_014");
        assert_eq!(c.tenant, "tenant_42");
        assert_eq!(c.request.filters.users, vec!["user_18"]);
        assert_eq!(c.relevant.len(), 2);
        assert_eq!(c.forbidden, vec!["evt_other_tenant_03"]);
        assert!(c.request.as_of.is_some());
        let e = parse_case(r#"{"query": "x"}"#, 4).unwrap_err();
        assert_eq!(e.field, "scope.tenant");
        // two tenants that differ: refused; the same one twice: fine
        let e = parse_cases(
            r#"{"query": "x", "tenant": "a", "scope": {"tenant": "b"}, "relevant_ids": ["r"]}"#,
        )
        .unwrap_err();
        assert_eq!(e.field, "scope.tenant", "{e}");
        assert!(e.reason.contains("differs"), "{e}");
        parse_cases(
            r#"{"query": "x", "tenant": "a", "scope": {"tenant": "a"}, "relevant_ids": ["r"]}"#,
        )
        .unwrap();
        // an empty filter list would run the case unfiltered; an empty list
        // of relevant ids is a case with nothing to find
        let e = parse_case(
            r#"{"query": "x", "tenant": "t", "scope": {"user_id": []}}"#,
            4,
        )
        .unwrap_err();
        assert!(
            e.field.ends_with("user_id") && e.reason.contains("empty list"),
            "{e:?}"
        );
        let c = parse_case(r#"{"query": "x", "tenant": "t", "relevant": []}"#, 4).unwrap();
        assert!(c.relevant.is_empty());
    }

    #[test]
    fn a_case_that_can_never_run_is_refused_with_its_line() {
        for (line, why) in [
            (r#"{"case_id": "c", "tenant": "t"}"#, "needs a query text"),
            (
                r#"{"case_id": "c", "tenant": "t", "query": "  "}"#,
                "needs a query text",
            ),
            (
                r#"{"case_id": "c", "tenant": "t", "vector": [1, 0], "mode": "lexical"}"#,
                "lexical mode needs a query text",
            ),
        ] {
            let e = parse_cases(&format!("\n{line}")).unwrap_err();
            assert_eq!((e.line, e.field.as_str()), (2, "query"), "{line}");
            assert!(e.reason.contains(why), "{line}: {}", e.reason);
        }
        let c = parse_case(r#"{"tenant": "t", "vector": [1, 0]}"#, 1).unwrap();
        assert_eq!(c.request.mode, Mode::Vector);
        // `k` counts as in a recall line: `1e1` is 10; 0 and 2.5 are refused
        let c = parse_case(r#"{"tenant": "t", "query": "x", "k": 1e1}"#, 1).unwrap();
        assert_eq!((c.request.k, c.k_from_case), (10, true));
        let e = parse_case(r#"{"tenant": "t", "query": "x", "slice": [""]}"#, 1).unwrap_err();
        assert_eq!(e.field, "slices");
        for overall in ["overall", " overall "] {
            let line = format!(r#"{{"tenant": "t", "query": "x", "slice": "{overall}"}}"#);
            assert_eq!(parse_case(&line, 1).unwrap_err().field, "slices");
        }
        let c = parse_case(
            r#"{"tenant": "t", "query": "x", "slices": ["a", "b", "a"]}"#,
            1,
        )
        .unwrap();
        assert_eq!(c.slices, ["a", "b"]);
        for bad in ["0", "2.5", "-1"] {
            let e = parse_case(
                &format!(r#"{{"tenant": "t", "query": "x", "k": {bad}}}"#),
                1,
            )
            .unwrap_err();
            assert_eq!(e.field, "k", "{bad}");
        }
    }

    #[test]
    fn repeated_case_ids_are_found_with_both_lines() {
        let text = "{\"case_id\": \"a\", \"tenant\": \"t\", \"query\": \"x\"}\n\
                    {\"case_id\": \"b\", \"tenant\": \"t\", \"query\": \"x\"}\n\
                    # note\n\
                    {\"case_id\": \"a\", \"tenant\": \"t\", \"query\": \"y\"}\n";
        let cases = parse_cases(text).unwrap();
        assert_eq!(cases.len(), 3);
        assert_eq!(repeated_ids(&cases), vec![("a".to_string(), 1, 4)]);
    }

    #[test]
    fn session_cases_name_no_tenant_or_principal() {
        let c = parse_session_case(r#"{"query": "x", "scope": {"user": "u"}}"#, 2).unwrap();
        assert_eq!(c.tenant, "");
        assert_eq!(c.request.filters.users, vec!["u"]);
        for (line, field) in [
            (r#"{"query": "x", "tenant": "t"}"#, "tenant"),
            (r#"{"query": "x", "principal": "p"}"#, "principal"),
            (
                r#"{"query": "x", "scope": {"tenant_id": "t"}}"#,
                "scope.tenant_id",
            ),
        ] {
            let e = parse_session_case(line, 3).unwrap_err();
            assert_eq!((e.line, e.field.as_str()), (3, field), "{line}");
        }
        let e = parse_session_cases("{\"query\": \"a\"}\n\n{\"query\": \"b\", \"tenant\": \"t\"}")
            .unwrap_err();
        assert_eq!(e.line, 3);
    }

    fn hit(ext: &str, rank: usize) -> Hit {
        Hit {
            rank,
            id: RecordId(rank as u128),
            external_id: Some(ext.into()),
            score: 1.0,
            record: "event",
            kind: "k".into(),
            status: "active",
            occurred_at: engram_engine::time::Rfc3339(0),
            historical: false,
            text: None,
            text_omitted: false,
            found_by: Default::default(),
            ranks: Default::default(),
            sources: vec![],
            derivatives: vec![],
        }
    }

    #[test]
    fn metrics_are_computed_as_documented() {
        let c = parse_case(
            r#"{"case_id": "c", "query": "q", "tenant": "t", "relevant": ["a", "b"], "forbidden": ["x"], "slice": "s1"}"#,
            1,
        )
        .unwrap();
        let r = score_case(&c, 3, &[hit("z", 1), hit("a", 2), hit("x", 3), hit("b", 4)]);
        assert_eq!(r.relevant_found, 1);
        assert!((r.recall.unwrap() - 0.5).abs() < 1e-12);
        assert!((r.precision.unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert!((r.reciprocal_rank.unwrap() - 0.5).abs() < 1e-12);
        assert_eq!(r.forbidden_hits, vec!["x"]);
        let (s, per) = summarize(std::slice::from_ref(&r));
        assert_eq!(s.forbidden_hits, 1);
        assert!((s.forbidden_hit_rate - 0.25).abs() < 1e-12);
        assert_eq!(per["s1"].cases, 1);
        // a case naming no relevant id checks forbidden hits only: it does
        // not count in the relevance means
        let only_forbidden = parse_case(
            r#"{"case_id": "f", "query": "q", "tenant": "t", "forbidden": ["x"]}"#,
            2,
        )
        .unwrap();
        let f = score_case(&only_forbidden, 3, &[hit("x", 1), hit("y", 2)]);
        // it has no relevance figures: null in JSON, as the text says n/a
        assert_eq!(
            (f.recall, f.precision, f.reciprocal_rank),
            (None, None, None)
        );
        let json = serde_json::to_value(&f).unwrap();
        assert!(
            json["recall"].is_null() && json["reciprocal_rank"].is_null(),
            "{json}"
        );
        // and neither has a summary of such cases only
        let (alone, _) = summarize(std::slice::from_ref(&f));
        let json = serde_json::to_value(&alone).unwrap();
        assert_eq!(json["scored"], 0);
        assert!(
            json["recall_at_k"].is_null() && json["mrr"].is_null(),
            "{json}"
        );
        assert_eq!(json["forbidden_hits"], 1);
        let (s, _) = summarize(&[r, f]);
        assert_eq!((s.cases, s.scored), (2, 1));
        assert!((s.recall_at_k - 0.5).abs() < 1e-12, "{s:?}");
        assert!((s.mrr - 0.5).abs() < 1e-12, "{s:?}");
        assert_eq!(s.forbidden_hits, 2);
        assert!((s.forbidden_hit_rate - 2.0 / 6.0).abs() < 1e-12, "{s:?}");
    }

    /// A case lists at most `CASE_IDS_MAX` relevant and forbidden ids (a
    /// 100,000-id case ran for minutes past its deadline), named in the
    /// error; a case of that many is scored in linear time.
    #[test]
    fn a_case_of_too_many_ids_is_refused_and_a_large_one_is_cheap() {
        let ids = |n: usize| {
            (0..n)
                .map(|i| format!("\"e{i}\""))
                .collect::<Vec<_>>()
                .join(",")
        };
        for field in ["relevant_ids", "forbidden_ids"] {
            let line = format!(
                r#"{{"query": "q", "tenant": "t", "{field}": [{}]}}"#,
                ids(CASE_IDS_MAX + 1)
            );
            let e = parse_case(&line, 1).unwrap_err().to_string();
            assert!(e.contains(field) && e.contains("10000"), "{e}");
        }
        let line = format!(
            r#"{{"query": "q", "tenant": "t", "relevant_ids": [{}], "forbidden_ids": [{}]}}"#,
            ids(CASE_IDS_MAX),
            ids(CASE_IDS_MAX)
        );
        let c = parse_case(&line, 1).unwrap();
        let started = std::time::Instant::now();
        let r = score_case(&c, 10, &[]);
        assert_eq!(r.relevant, CASE_IDS_MAX);
        // quadratic, this took about a second in a debug build
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn a_relevant_record_named_twice_or_by_two_names_counts_once() {
        let c = parse_case(
            r#"{"case_id": "c", "query": "q", "tenant": "t", "relevant": ["a", "a", "id-of-a", "nope"]}"#,
            1,
        )
        .unwrap();
        let hits = [hit("z", 1), hit("a", 2)];
        // as given: the repeat merged, the alias and the unknown id not
        let r = score_case(&c, 3, &hits);
        assert_eq!((r.relevant, r.relevant_found), (3, 1));
        assert!(r.unresolved.is_empty());
        // resolved: `a` and `id-of-a` are one record (the hit's id);
        // `nope` names none, and says so
        let a_id = hits[1].id.to_string();
        let rel = Relevant::resolve(&c, |r| match r {
            "a" | "id-of-a" => Some(a_id.clone()),
            _ => None,
        });
        let r = score_resolved(&c, &rel, 3, &hits);
        assert_eq!((r.relevant, r.relevant_found), (2, 1));
        assert!((r.recall.unwrap() - 0.5).abs() < 1e-12);
        assert_eq!(r.unresolved, vec!["nope".to_string()]);
    }

    #[test]
    fn an_external_id_spelling_a_relevant_internal_id_is_not_that_record() {
        // the second hit is the relevant record; the first only carries
        // its internal id as an external id
        let a_id = RecordId(2).to_string();
        let hits = [hit(&a_id, 1), hit("a", 2)];
        let c = parse_case(
            &format!(r#"{{"case_id": "c", "query": "q", "tenant": "t", "relevant": ["{a_id}"]}}"#),
            1,
        )
        .unwrap();
        // resolved against a store: by internal id alone
        let rel = Relevant::resolve(&c, |r| (r == a_id).then(|| a_id.clone()));
        let r = score_resolved(&c, &rel, 3, &hits);
        assert_eq!((r.relevant, r.relevant_found), (1, 1));
        assert!((r.recall.unwrap() - 1.0).abs() < 1e-12);
        assert!((r.reciprocal_rank.unwrap() - 0.5).abs() < 1e-12);
        // as given (no store): either name counts, the record still once
        let r = score_case(&c, 3, &hits);
        assert_eq!((r.relevant, r.relevant_found), (1, 1));
        assert!((r.recall.unwrap() - 1.0).abs() < 1e-12);
        assert!((r.precision.unwrap() - 1.0 / 3.0).abs() < 1e-12);
    }
}

/// A named retrieval configuration `engram eval --config` runs the cases
/// under: `NAME:key=value,...` with keys `mode` (hybrid, vector,
/// lexical), the weights `vector`, `lexical`, `recency`, `graph`,
/// `episodic`, `fusion` (`rrf`, `minmax`, `zscore`), `rrf_k`, and the
/// episodic retriever's `window`, `seeds`, `decay`, `gap_ms`. Keys left
/// out keep the recall's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalConfig {
    /// Its name in the comparison table.
    pub name: String,
    mode: Option<Mode>,
    weights: Vec<(String, f64)>,
    fusion: Option<Fusion>,
    episodic: EpisodicWindow,
}

impl EvalConfig {
    /// The recall `req` becomes under this configuration (its mode and
    /// weights; fusion and the episodic window apply to the search, see
    /// [`EvalConfig::search`]): what a run checks before any case runs.
    pub fn recall(&self, req: &RecallRequest) -> RecallRequest {
        let mut r = req.clone();
        if let Some(m) = self.mode {
            r.mode = m;
        }
        for (k, w) in &self.weights {
            match k.as_str() {
                "vector" => r.weights.vector = *w,
                "lexical" => r.weights.lexical = *w,
                "recency" => r.weights.recency = *w,
                "graph" => r.weights.graph = *w,
                _ => r.weights.episodic = *w,
            }
        }
        r
    }

    /// Parses `NAME:key=value,...` (or just `NAME` for the defaults).
    pub fn parse(text: &str) -> Result<EvalConfig, String> {
        let (name, spec) = text.split_once(':').unwrap_or((text, ""));
        let name = name.trim();
        if name.is_empty() {
            return Err(format!(
                "'{text}': a configuration needs a name (NAME:key=value,...)"
            ));
        }
        let mut c = EvalConfig {
            name: name.to_string(),
            mode: None,
            weights: Vec::new(),
            fusion: None,
            episodic: episodic::DEFAULT,
        };
        let mut rrf_k = None;
        let mut norm = None;
        let mut seen: Vec<&str> = Vec::new();
        for kv in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("'{kv}' in configuration {name}: expected key=value"))?;
            let (k, v) = (k.trim(), v.trim());
            // (the last would win without a word)
            if seen.contains(&k) {
                return Err(format!("{k} given twice in configuration {name}"));
            }
            seen.push(k);
            let num = || {
                v.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x >= 0.0)
                    .ok_or_else(|| {
                        format!("{k}={v} in configuration {name}: expected a number >= 0")
                    })
            };
            let int = || {
                v.parse::<usize>().map_err(|_| {
                    format!("{k}={v} in configuration {name}: expected a whole number")
                })
            };
            match k {
                "mode" => {
                    c.mode = Some(match v {
                        "hybrid" => Mode::Hybrid,
                        "vector" => Mode::Vector,
                        "lexical" => Mode::Lexical,
                        _ => {
                            return Err(format!(
                                "mode={v} in configuration {name}: expected hybrid, vector or lexical"
                            ));
                        }
                    })
                }
                "vector" | "lexical" | "recency" | "graph" | "episodic" => {
                    c.weights.push((k.to_string(), num()?))
                }
                "fusion" => {
                    norm = Some(match v {
                        "rrf" => None,
                        "minmax" => Some(Norm::MinMax),
                        "zscore" => Some(Norm::ZScore),
                        _ => {
                            return Err(format!(
                                "fusion={v} in configuration {name}: expected rrf, minmax or zscore"
                            ));
                        }
                    })
                }
                "rrf_k" => {
                    // as the query language's `RRF K` takes it
                    let max = crate::lang::limits::RRF_K_MAX;
                    let k = v.parse::<u64>().ok().filter(|k| (1..=max).contains(k));
                    let k = k.ok_or_else(|| {
                        format!(
                            "rrf_k={v} in configuration {name}: expected a whole number from 1 to {max}"
                        )
                    })?;
                    rrf_k = Some(k as f64)
                }
                "window" => c.episodic.window = int()?,
                "seeds" => c.episodic.seeds = int()?,
                "decay" => c.episodic.decay = num()?,
                "gap_ms" => {
                    c.episodic.max_gap_ms = i64::try_from(int()?)
                        .map_err(|_| format!("gap_ms={v} in configuration {name}: too large"))?
                }
                _ => {
                    return Err(format!(
                        "unknown key '{k}' in configuration {name} (mode, vector, lexical, recency, \
                         graph, episodic, fusion, rrf_k, window, seeds, decay, gap_ms)"
                    ));
                }
            }
        }
        c.fusion = match (norm, rrf_k) {
            (Some(Some(n)), None) => Some(Fusion::Linear { norm: n }),
            (Some(Some(_)), Some(_)) => {
                return Err(format!(
                    "configuration {name}: rrf_k goes with fusion=rrf only"
                ));
            }
            (_, Some(k)) => Some(Fusion::Rrf { k }),
            (Some(None), None) => Some(Fusion::Rrf { k: RRF_K }),
            (None, None) => None,
        };
        Ok(c)
    }

    /// The search a case's recall request means under this configuration.
    pub fn search(&self, req: &RecallRequest) -> SearchRequest {
        let mut s = self.recall(req).to_search();
        if let Some(f) = self.fusion {
            s.fusion = f;
        }
        for spec in &mut s.retrievers {
            if let RetrieverParams::Episodic(w) = &mut spec.params {
                *w = self.episodic;
            }
        }
        s
    }
}
