//! Eligibility: the one bitmap every retriever is restricted to.
//!
//! Computed per read from the session (tenant, labels held *now*), the
//! request's filters, the transaction-time cut (`as_of`), the valid-time
//! point (`valid_at`), review status, deletion and retention. Each step is
//! recorded with the count left after it, for the manifest.
//!
//! Order of steps (each narrows the set):
//! 1. `tenant and access`: the session's tenant, nothing else, ever, minus
//!    records carrying a label the principal does not hold now
//!    (revocations apply to every read after them, time travel included).
//!    One step, so that no count in a manifest includes records the
//!    principal may not read;
//! 2. `as_of`: records ingested at or before the cut (a prefix of the log);
//! 3. `status`: current versions that passed review (active, approved), as
//!    they stood at `as_of` (a version superseded or approved later counts
//!    as it was then); deleted records are excluded whatever the time;
//! 4. (access is step 1)
//! 5. `retention`: records past their class's retention period;
//! 6. `validity`: records whose validity ended before `valid_at` (kept, and
//!    labelled historical, when history is requested);
//! 7. request filters: scope (user, conversation, agent, labels), kind,
//!    record type, occurred-at range.
//!
//! This module must never consult scores or texts: eligibility is decided
//! before and apart from ranking.

use rustc_hash::FxHashMap;
use std::collections::{BTreeSet, HashMap};

use roaring::RoaringBitmap;
use serde::Serialize;

use crate::model::{RecordType, Status};
use crate::state::{Idx, State};

/// Request filters (all optional; values within a field are OR-ed, fields
/// are AND-ed).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Filters {
    /// Scope users.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// Scope conversations.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conversations: Vec<String>,
    /// Scope agents.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<String>,
    /// Scope labels.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scope_labels: Vec<String>,
    /// Kinds.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<String>,
    /// Record types.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub record_types: Vec<RecordType>,
    /// occurred_at >= this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub occurred_after: Option<i64>,
    /// occurred_at <= this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub occurred_before: Option<i64>,
}

impl Filters {
    /// Sorts and deduplicates every list (the normalized form).
    pub fn normalized(&self) -> Filters {
        let n = |v: &Vec<String>| {
            let mut v = v.clone();
            v.sort();
            v.dedup();
            v
        };
        let mut types = self.record_types.clone();
        types.sort();
        types.dedup();
        Filters {
            users: n(&self.users),
            conversations: n(&self.conversations),
            agents: n(&self.agents),
            scope_labels: n(&self.scope_labels),
            kinds: n(&self.kinds),
            record_types: types,
            occurred_after: self.occurred_after,
            occurred_before: self.occurred_before,
        }
    }
}

/// One step of the eligibility computation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Step {
    /// What was applied.
    pub step: String,
    /// Records eligible after it.
    pub remaining: u64,
}

/// Inputs besides the filters.
#[derive(Clone, Debug)]
pub struct Cut {
    /// Transaction-time cut.
    pub as_of: Option<i64>,
    /// Valid-time point (usually now).
    pub valid_at: i64,
    /// Keep records whose validity ended (they are labelled historical).
    pub include_historical: bool,
    /// Now, for retention.
    pub now: i64,
    /// Also admit review candidates (review queue listings).
    pub include_candidates: bool,
}

/// The result: the eligible set and how it was reached.
#[derive(Clone, Debug)]
pub struct Eligibility {
    /// Eligible record indexes.
    pub bitmap: RoaringBitmap,
    /// Of those, the ones whose validity ended before `valid_at`.
    pub historical: RoaringBitmap,
    /// The set before the request's own filters (tenant, time, status,
    /// access, retention, validity only): what graph expansion may walk
    /// through; results are still restricted to `bitmap`.
    pub traversable: RoaringBitmap,
    /// Steps with counts.
    pub steps: Vec<Step>,
}

fn union_of(st: &State, map: &FxHashMap<u32, RoaringBitmap>, values: &[String]) -> RoaringBitmap {
    let mut out = RoaringBitmap::new();
    for v in values {
        if let Some(sym) = st.strings.get(v) {
            if let Some(b) = map.get(&sym) {
                out |= b;
            }
        }
    }
    out
}

/// Computes eligibility for `tenant` with the labels `held`.
pub fn compute(
    st: &State,
    tenant: &str,
    held: &BTreeSet<String>,
    filters: &Filters,
    cut: &Cut,
) -> Eligibility {
    let mut steps = Vec::new();
    let mut push = |name: &str, b: &RoaringBitmap| {
        steps.push(Step {
            step: name.to_string(),
            remaining: b.len(),
        });
    };
    let empty = Eligibility {
        bitmap: RoaringBitmap::new(),
        historical: RoaringBitmap::new(),
        traversable: RoaringBitmap::new(),
        steps: Vec::new(),
    };
    let Some(tsym) = st.tenant_sym(tenant) else {
        let mut e = empty;
        e.steps.push(Step {
            step: "tenant and access".into(),
            remaining: 0,
        });
        return e;
    };
    let tstate = &st.tenants[&tsym];
    let mut b = st.bm_tenant.get(&tsym).cloned().unwrap_or_default();
    // access, in the same step as the tenant: no count a principal sees
    // ever includes records it may not read
    let mut denied = RoaringBitmap::new();
    for &l in &tstate.labels {
        if !held.contains(st.strings.name(l)) {
            if let Some(x) = st.bm_access.get(&l) {
                denied |= x;
            }
        }
    }
    if !denied.is_empty() {
        b -= &denied;
    }
    push("tenant and access", &b);

    // as_of: ingestion prefix
    let as_of = cut.as_of;
    if let Some(t) = as_of {
        let n = st.ingested_prefix(t);
        if n < st.len() as u32 {
            b.remove_range(n..);
        }
        push("as_of", &b);
    }

    // status (as it stood at as_of), deleted always excluded
    let mut allowed_status = vec![Status::Active, Status::Approved];
    if cut.include_candidates {
        allowed_status.push(Status::Candidate);
    }
    let mut by_status = RoaringBitmap::new();
    for s in &allowed_status {
        if let Some(x) = st.bm_status.get(s) {
            by_status |= x;
        }
    }
    if let Some(t) = as_of {
        // Revert transitions made after t: the status at t is the `from`
        // of the first later transition.
        let mut then: HashMap<Idx, Status> = HashMap::new();
        for c in st.status_log.iter().rev() {
            if c.at > t {
                then.insert(c.idx, c.from);
            }
        }
        for (idx, s) in then {
            let now_deleted = st.meta(idx).status == Status::Deleted;
            if allowed_status.contains(&s) && !now_deleted {
                by_status.insert(idx);
            } else {
                by_status.remove(idx);
            }
        }
    }
    b &= &by_status;
    push("status", &b);

    // retention
    let mut expired_by_policy = RoaringBitmap::new();
    for (class, period) in &tstate.retention {
        let (Some(p), Some(sym)) = (period, st.strings.get(class)) else {
            continue;
        };
        if let Some(x) = st.bm_retention.get(&sym) {
            let n = st.ingested_prefix(cut.now.saturating_sub(*p));
            let mut old = x.clone();
            if n < st.len() as u32 {
                old.remove_range(n..);
            }
            expired_by_policy |= old;
        }
    }
    if !expired_by_policy.is_empty() {
        b -= &expired_by_policy;
        push("retention", &b);
    }

    // validity at valid_at (valid_until as known at as_of)
    let mut historical = RoaringBitmap::new();
    let mut not_yet = RoaringBitmap::new();
    let reverted: HashMap<Idx, Option<i64>> = match as_of {
        Some(t) => {
            let mut m = HashMap::new();
            for c in st.expiry_log.iter().rev() {
                if c.at > t {
                    m.insert(c.idx, c.before);
                }
            }
            m
        }
        None => HashMap::new(),
    };
    for idx in (&b & &st.bm_bounded).iter() {
        let until = match reverted.get(&idx) {
            Some(u) => *u,
            None => st.meta(idx).valid_until,
        };
        if until.is_some_and(|u| u <= cut.valid_at) {
            historical.insert(idx);
        }
    }
    // records not yet valid at valid_at (valid_from in the future of it)
    if cut.valid_at < cut.now {
        for idx in b.iter() {
            if st.meta(idx).valid_from > cut.valid_at {
                not_yet.insert(idx);
            }
        }
        b -= &not_yet;
    }
    if !cut.include_historical {
        b -= &historical;
        historical.clear();
    }
    push("validity", &b);
    let traversable = b.clone();

    // request filters
    let f = filters;
    if !f.users.is_empty() {
        b &= union_of(st, &st.bm_user, &f.users);
        push("scope.user", &b);
    }
    if !f.conversations.is_empty() {
        b &= union_of(st, &st.bm_conversation, &f.conversations);
        push("scope.conversation", &b);
    }
    if !f.agents.is_empty() {
        b &= union_of(st, &st.bm_agent, &f.agents);
        push("scope.agent", &b);
    }
    if !f.scope_labels.is_empty() {
        b &= union_of(st, &st.bm_scope_label, &f.scope_labels);
        push("scope.labels", &b);
    }
    if !f.kinds.is_empty() {
        b &= union_of(st, &st.bm_kind, &f.kinds);
        push("kind", &b);
    }
    if !f.record_types.is_empty() {
        let mut t = RoaringBitmap::new();
        for r in &f.record_types {
            if let Some(x) = st.bm_type.get(r) {
                t |= x;
            }
        }
        b &= t;
        push("record", &b);
    }
    if f.occurred_after.is_some() || f.occurred_before.is_some() {
        let lo = f.occurred_after.unwrap_or(i64::MIN);
        let hi = f.occurred_before.unwrap_or(i64::MAX);
        let out: RoaringBitmap = b
            .iter()
            .filter(|&i| {
                let t = st.meta(i).occurred_at;
                t < lo || t > hi
            })
            .collect();
        b -= out;
        push("occurred_at", &b);
    }
    historical &= &b;
    Eligibility {
        bitmap: b,
        historical,
        traversable,
        steps,
    }
}
