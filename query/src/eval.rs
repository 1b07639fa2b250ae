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

use std::collections::BTreeMap;

use engram_engine::retrieval::{Filters, Hit, RecallRequest};
use engram_engine::time::parse_rfc3339;
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

fn strs(o: &Map<String, Value>, keys: &[&str]) -> Result<Vec<String>, (String, String)> {
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
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let t = l.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        out.push(parse_session_case(t, i + 1)?);
    }
    Ok(out)
}

/// Fields of a case that name who runs it.
const SESSION_FIELDS: &[&str] = &["tenant", "tenant_id", "principal"];

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
            one(scope, &["tenant", "tenant_id"])?
                .or(one(&o, &["tenant", "tenant_id"])?)
                .ok_or_else(|| ("scope.tenant".to_string(), "required".to_string()))?
        };
        let filters = Filters {
            users: strs(scope, &["user", "user_id"])?,
            conversations: strs(scope, &["conversation", "conversation_id"])?,
            agents: strs(scope, &["agent", "agent_id"])?,
            kinds: strs(&o, &["kind"])?,
            ..Filters::default()
        };
        let vector = match o.get("vector") {
            None | Some(Value::Null) => None,
            Some(v) => Some(parse_vector(v, "vector")?),
        };
        let time = |f: &str| -> Result<Option<i64>, (String, String)> {
            one(&o, &[f])?
                .map(|s| parse_rfc3339(&s).map_err(|e| (f.to_string(), e.to_string())))
                .transpose()
        };
        let k = match o.get("k") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => Some(
                n.as_u64()
                    .ok_or_else(|| ("k".to_string(), "expected a positive integer".to_string()))?
                    as usize,
            ),
            Some(_) => return Err(("k".to_string(), "expected an integer".to_string())),
        };
        let text = one(&o, &["query", "text"])?;
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
            principal: one(&o, &["principal"])?,
            request,
            relevant: strs(&o, &["relevant_ids", "relevant_event_ids", "relevant"])?,
            forbidden: strs(&o, &["forbidden_ids", "forbidden_event_ids", "forbidden"])?,
            slices: strs(&o, &["slice", "slices"])?,
            k_from_case: k.is_some(),
        })
    })()
    .map_err(crate::ingest::at_line(line))
}

/// Parses a JSONL file of cases.
pub fn parse_cases(text: &str) -> Result<Vec<EvalCase>, LineError> {
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let t = l.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        out.push(parse_case(t, i + 1)?);
    }
    Ok(out)
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
    /// recall@k.
    pub recall: f64,
    /// precision@k.
    pub precision: f64,
    /// Reciprocal rank of the first relevant hit.
    pub reciprocal_rank: f64,
    /// Hits returned.
    pub hits: usize,
    /// Hits named in the forbidden list.
    pub forbidden_hits: Vec<String>,
    /// Slices.
    pub slices: Vec<String>,
    /// Returned ids, in rank order.
    pub returned: Vec<String>,
}

fn names(h: &Hit) -> [Option<String>; 2] {
    [Some(h.id.to_string()), h.external_id.clone()]
}

/// Scores one case's hits.
pub fn score_case(case: &EvalCase, k: usize, hits: &[Hit]) -> CaseResult {
    let is = |h: &Hit, list: &[String]| names(h).iter().flatten().any(|n| list.contains(n));
    let top = &hits[..hits.len().min(k)];
    let found: Vec<&Hit> = top.iter().filter(|h| is(h, &case.relevant)).collect();
    let first = top.iter().position(|h| is(h, &case.relevant));
    let forbidden: Vec<String> = hits
        .iter()
        .filter(|h| is(h, &case.forbidden))
        .map(|h| h.external_id.clone().unwrap_or_else(|| h.id.to_string()))
        .collect();
    CaseResult {
        case_id: case.case_id.clone(),
        k,
        relevant: case.relevant.len(),
        relevant_found: found.len(),
        recall: if case.relevant.is_empty() {
            1.0
        } else {
            found.len() as f64 / case.relevant.len() as f64
        },
        precision: found.len() as f64 / k as f64,
        reciprocal_rank: first.map_or(0.0, |p| 1.0 / (p + 1) as f64),
        hits: hits.len(),
        forbidden_hits: forbidden,
        slices: case.slices.clone(),
        returned: top
            .iter()
            .map(|h| h.external_id.clone().unwrap_or_else(|| h.id.to_string()))
            .collect(),
    }
}

/// Aggregate metrics.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Cases.
    pub cases: usize,
    /// Mean recall@k.
    pub recall_at_k: f64,
    /// Mean precision@k.
    pub precision_at_k: f64,
    /// Mean reciprocal rank.
    pub mrr: f64,
    /// Forbidden hits.
    pub forbidden_hits: usize,
    /// Hits returned.
    pub hits: usize,
    /// forbidden_hits / hits.
    pub forbidden_hit_rate: f64,
}

/// Aggregates results overall and per slice.
pub fn summarize(results: &[CaseResult]) -> (Summary, BTreeMap<String, Summary>) {
    fn agg<'a>(rs: impl Iterator<Item = &'a CaseResult>) -> Summary {
        let mut s = Summary::default();
        for r in rs {
            s.cases += 1;
            s.recall_at_k += r.recall;
            s.precision_at_k += r.precision;
            s.mrr += r.reciprocal_rank;
            s.forbidden_hits += r.forbidden_hits.len();
            s.hits += r.hits;
        }
        if s.cases > 0 {
            let n = s.cases as f64;
            s.recall_at_k /= n;
            s.precision_at_k /= n;
            s.mrr /= n;
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
            occurred_at: String::new(),
            historical: false,
            text: None,
            found_by: vec![],
            ranks: vec![],
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
        assert!((r.recall - 0.5).abs() < 1e-12);
        assert!((r.precision - 1.0 / 3.0).abs() < 1e-12);
        assert!((r.reciprocal_rank - 0.5).abs() < 1e-12);
        assert_eq!(r.forbidden_hits, vec!["x"]);
        let (s, per) = summarize(&[r]);
        assert_eq!(s.forbidden_hits, 1);
        assert!((s.forbidden_hit_rate - 0.25).abs() < 1e-12);
        assert_eq!(per["s1"].cases, 1);
    }
}
