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
//!    (revocations apply to every read after them, time travel included),
//!    and minus deleted records. One step, so that no count in a manifest
//!    includes records the principal may not read, or deleted ones;
//! 2. `as_of`: records ingested at or before the cut (a prefix of the log);
//! 3. `status`: current versions that passed review (active, approved), as
//!    they stood at `as_of` (a version superseded or approved later counts
//!    as it was then); deleted records are excluded whatever the time;
//! 4. (access is step 1)
//! 5. `retention`: records past their class's retention period, and
//!    every record built on one (its summaries, claims: what carries its
//!    content);
//! 6. `validity`: records whose validity ended before `valid_at` (kept, and
//!    labelled historical, when history is requested);
//! 7. request filters: scope (user, conversation, agent, labels), kind,
//!    record type, occurred-at range.
//!
//! This module must never consult scores or texts: eligibility is decided
//! before and apart from ranking.

use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use roaring::{MultiOps, RoaringBitmap};
use serde::Serialize;

use crate::model::{RecordType, Status};
use crate::state::{Idx, State};

mod statuses;

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

/// A filter list in its normalized form: sorted, without repeats.
fn sorted_unique<T: Ord + Clone>(v: &[T]) -> Vec<T> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.dedup();
    v
}

impl Filters {
    /// Sorts and deduplicates every list (the normalized form).
    pub fn normalized(&self) -> Filters {
        Filters {
            users: sorted_unique(&self.users),
            conversations: sorted_unique(&self.conversations),
            agents: sorted_unique(&self.agents),
            scope_labels: sorted_unique(&self.scope_labels),
            kinds: sorted_unique(&self.kinds),
            record_types: sorted_unique(&self.record_types),
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
    /// What graph expansion may walk through: the set before the
    /// request's own filters (tenant, time, access, retention, validity),
    /// in the active status class and the classes the filter may select
    /// ([`FilterExpr::selectable_statuses`]); results are still restricted
    /// to `bitmap`.
    pub traversable: RoaringBitmap,
    /// Steps with counts (shared: every manifest of a cached result
    /// names them without a copy).
    pub steps: std::sync::Arc<[Step]>,
    /// The filter's canonical form ([`FilterExpr::normalized`]), as
    /// manifests show it (shared, as `steps`).
    pub filter: std::sync::Arc<FilterExpr>,
    /// BM25's corpus statistics over `bitmap`, set by the first lexical
    /// search over it: a cached result keeps them for the searches after
    /// (they cost a pass over the eligible documents' lengths).
    pub lexical_corpus: std::sync::OnceLock<crate::lexical::CorpusStats>,
    /// Each searched vector space's share of `bitmap`, kept for the
    /// searches after (see [`SpaceShares`]).
    pub space_shares: SpaceShares,
    /// Model ids of the tenant's vector spaces that hold vectors of
    /// records the principal cannot read only: not shown to it, not
    /// searched (see `hidden_models`).
    pub hidden_spaces: Box<[String]>,
    /// With `as_of`: the status then of each record whose status changed
    /// since (see [`State::statuses_at`]); empty without `as_of`.
    pub status_then: FxHashMap<Idx, Status>,
}

impl Eligibility {
    /// The status of `idx` at the request's `as_of` (now, without one).
    pub fn status(&self, st: &State, idx: Idx) -> Status {
        self.status_then
            .get(&idx)
            .copied()
            .unwrap_or_else(|| st.meta(idx).status)
    }
}

/// The tenant's records carrying a label the principal does not hold.
pub(crate) fn denied(
    st: &State,
    tenant: &crate::state::TenantState,
    held: &BTreeSet<String>,
) -> RoaringBitmap {
    let mut denied = RoaringBitmap::new();
    for &l in &tenant.labels {
        if !held.contains(st.strings.name(l)) {
            if let Some(x) = st.bm_access.get(&l) {
                denied |= x;
            }
        }
    }
    denied
}

/// Model ids of `tenant`'s vector spaces whose every vector belongs to a
/// record in `denied` or a deleted record. A space is tenant metadata a principal would
/// otherwise see in manifests and model errors; one that only records it
/// cannot read fill would tell it that such records exist (their model and
/// dimension), so for that principal it does not exist.
pub(crate) fn hidden_models(st: &State, tenant: &str, denied: &RoaringBitmap) -> Box<[String]> {
    let deleted = st
        .bm_status
        .get(&crate::model::Status::Deleted)
        .filter(|d| !d.is_empty());
    if denied.is_empty() && deleted.is_none() {
        return Box::default();
    }
    // a space holding only deleted records (or those and records the
    // principal may not read) is not shown either: its model id was
    // written with them, and deleted means gone
    let hidden = |s: &crate::vector::space::VectorSpace| match deleted {
        None => s.members.is_subset(denied),
        // by the counts first: a space with more members than the denied
        // and deleted records together (the common case) is shown, without
        // a difference of bitmaps on each eligibility computation
        Some(d) => s.members.len() <= denied.len() + d.len() && (&s.members - denied).is_subset(d),
    };
    st.vectors
        .of_tenant(tenant)
        .filter(|s| hidden(s))
        .map(|s| s.model.clone())
        .collect()
}

/// The eligible records of each vector space searched with one
/// [`Eligibility`] (`bitmap & members`), made on the first search of the
/// space and kept with the cached result. Keyed by the space's
/// identity and size (`VectorSpace::uid`, `VectorSpace::len`): a space's
/// members are exactly the records of its slot list, which only grows,
/// so the key names them exactly.
///
/// Why: at 200,000 vectors, intersecting 200 eligible records with the
/// space's members cost a sixth of a recall, more than fusing its hits.
#[derive(Debug, Default)]
pub struct SpaceShares(parking_lot::Mutex<Vec<(ShareKey, std::sync::Arc<RoaringBitmap>)>>);

/// A space's identity and size (see [`SpaceShares`]).
pub type ShareKey = (u64, usize);

/// Spaces whose share one result keeps (a tenant has few spaces); the
/// oldest made goes first.
const SPACE_SHARES_MAX: usize = 4;

impl Clone for SpaceShares {
    /// A copy starts empty: its shares are made again when asked for.
    fn clone(&self) -> Self {
        SpaceShares::default()
    }
}

impl SpaceShares {
    /// The share kept under `key`, or `make()`'s, kept from now on.
    pub fn get_or_make(
        &self,
        key: ShareKey,
        make: impl FnOnce() -> RoaringBitmap,
    ) -> std::sync::Arc<RoaringBitmap> {
        if let Some((_, b)) = self.0.lock().iter().find(|(k, _)| *k == key) {
            return b.clone();
        }
        let b = std::sync::Arc::new(make());
        let mut kept = self.0.lock();
        // a space's older share (fewer slots) is replaced, not kept beside
        kept.retain(|(k, _)| k.0 != key.0);
        if kept.len() == SPACE_SHARES_MAX {
            kept.remove(0);
        }
        kept.push((key, b.clone()));
        b
    }
}

fn union_of(st: &State, map: &FxHashMap<u32, RoaringBitmap>, values: &[String]) -> RoaringBitmap {
    values
        .iter()
        .filter_map(|v| st.strings.get(v).and_then(|sym| map.get(&sym)))
        .union()
}

/// A status class a statement may select. `Active` is the default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StatusClass {
    /// Current versions that passed review (active, approved), valid at
    /// `valid_at`.
    Active,
    /// Versions replaced by a correction.
    Superseded,
    /// Current versions whose validity ended before `valid_at`.
    Historical,
    /// Records one of whose inputs changed, not yet regenerated.
    Stale,
}

/// A field compared with a list of names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NameField {
    /// `scope.user`.
    User,
    /// `scope.conversation`.
    Conversation,
    /// `scope.agent`.
    Agent,
    /// One of the record's scope labels.
    ScopeLabel,
    /// The record's kind.
    Kind,
}

/// A time field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeField {
    /// Valid time.
    OccurredAt,
    /// Transaction time.
    IngestedAt,
}

/// A time comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CmpOp {
    /// <
    Lt,
    /// <=
    Le,
    /// >
    Gt,
    /// >=
    Ge,
}

impl CmpOp {
    fn holds(self, a: i64, b: i64) -> bool {
        match self {
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
}

/// A boolean eligibility filter: what a request may narrow the eligible
/// set to. Evaluated over the session's universe (tenant, access, time,
/// retention, validity), always before any scoring.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum FilterExpr {
    /// Every record of the universe.
    All,
    /// All of these.
    And {
        /// Terms.
        terms: Vec<FilterExpr>,
    },
    /// Any of these.
    Or {
        /// Terms.
        terms: Vec<FilterExpr>,
    },
    /// Not this.
    Not {
        /// Term.
        term: Box<FilterExpr>,
    },
    /// The field is one of the values.
    In {
        /// Field.
        field: NameField,
        /// Values (sorted, deduplicated in normalized form).
        values: Vec<String>,
    },
    /// The record type is one of these.
    RecordIn {
        /// Types.
        types: Vec<RecordType>,
    },
    /// The status class is one of these (without any status term the
    /// selection is `Active`).
    StatusIn {
        /// Classes.
        statuses: Vec<StatusClass>,
    },
    /// A time comparison.
    Time {
        /// Field.
        field: TimeField,
        /// Comparison.
        cmp: CmpOp,
        /// The time compared with (ms since the epoch).
        at_ms: i64,
    },
}

impl FilterExpr {
    /// Whether a status term appears anywhere.
    pub fn mentions_status(&self) -> bool {
        match self {
            FilterExpr::StatusIn { .. } => true,
            FilterExpr::And { terms } | FilterExpr::Or { terms } => {
                terms.iter().any(FilterExpr::mentions_status)
            }
            FilterExpr::Not { term } => term.mentions_status(),
            _ => false,
        }
    }

    /// The expression of the classic filters: fields AND-ed, values of one
    /// field OR-ed, `include_historical` adding the historical class.
    pub fn from_filters(f: &Filters, include_historical: bool) -> FilterExpr {
        // Each list as `Filters::normalized` gives it, copied only where
        // the filter names something.
        let mut terms = Vec::new();
        if include_historical {
            terms.push(FilterExpr::StatusIn {
                statuses: vec![StatusClass::Active, StatusClass::Historical],
            });
        }
        for (field, values) in [
            (NameField::User, &f.users),
            (NameField::Conversation, &f.conversations),
            (NameField::Agent, &f.agents),
            (NameField::ScopeLabel, &f.scope_labels),
            (NameField::Kind, &f.kinds),
        ] {
            if !values.is_empty() {
                terms.push(FilterExpr::In {
                    field,
                    values: sorted_unique(values),
                });
            }
        }
        if !f.record_types.is_empty() {
            terms.push(FilterExpr::RecordIn {
                types: sorted_unique(&f.record_types),
            });
        }
        if let Some(t) = f.occurred_after {
            terms.push(FilterExpr::Time {
                field: TimeField::OccurredAt,
                cmp: CmpOp::Ge,
                at_ms: t,
            });
        }
        if let Some(t) = f.occurred_before {
            terms.push(FilterExpr::Time {
                field: TimeField::OccurredAt,
                cmp: CmpOp::Le,
                at_ms: t,
            });
        }
        match terms.len() {
            0 => FilterExpr::All,
            _ => FilterExpr::And { terms },
        }
    }

    /// The canonical form: nested `And`s flattened, `All` terms dropped,
    /// the top-level terms in a fixed order (status, scope, kind, record
    /// type, times, then the rest as given), lists sorted. Two requests that
    /// mean the same filter in the same order have the same form, so their
    /// eligibility steps and manifests are identical.
    pub fn normalized(&self) -> FilterExpr {
        fn flatten(e: &FilterExpr, out: &mut Vec<FilterExpr>) {
            match e {
                FilterExpr::All => {}
                FilterExpr::And { terms } => {
                    for t in terms {
                        flatten(t, out);
                    }
                }
                other => out.push(other.normalized_term()),
            }
        }
        let mut terms = Vec::new();
        flatten(self, &mut terms);
        // stable: terms of equal rank keep their order
        terms.sort_by_key(FilterExpr::rank);
        match terms.len() {
            0 => FilterExpr::All,
            _ => FilterExpr::And { terms },
        }
    }

    fn normalized_term(&self) -> FilterExpr {
        match self {
            FilterExpr::In { field, values } => {
                let mut v = values.clone();
                v.sort();
                v.dedup();
                FilterExpr::In {
                    field: *field,
                    values: v,
                }
            }
            FilterExpr::RecordIn { types } => {
                let mut t = types.clone();
                t.sort();
                t.dedup();
                FilterExpr::RecordIn { types: t }
            }
            FilterExpr::StatusIn { statuses } => {
                let mut t = statuses.clone();
                t.sort();
                t.dedup();
                FilterExpr::StatusIn { statuses: t }
            }
            FilterExpr::Or { terms } => FilterExpr::Or {
                terms: terms.iter().map(FilterExpr::normalized).collect(),
            },
            FilterExpr::Not { term } => FilterExpr::Not {
                term: Box::new(term.normalized()),
            },
            other => other.clone(),
        }
    }

    fn rank(&self) -> u8 {
        match self {
            FilterExpr::StatusIn { .. } => 0,
            FilterExpr::In { field, .. } => match field {
                NameField::User => 1,
                NameField::Conversation => 2,
                NameField::Agent => 3,
                NameField::ScopeLabel => 4,
                NameField::Kind => 5,
            },
            FilterExpr::RecordIn { .. } => 6,
            FilterExpr::Time { field, .. } => match field {
                TimeField::OccurredAt => 7,
                TimeField::IngestedAt => 8,
            },
            _ => 9,
        }
    }

    /// The manifest's name of a term.
    fn step_name(&self) -> String {
        match self {
            FilterExpr::In { field, .. } => match field {
                NameField::User => "scope.user",
                NameField::Conversation => "scope.conversation",
                NameField::Agent => "scope.agent",
                NameField::ScopeLabel => "scope.labels",
                NameField::Kind => "kind",
            }
            .into(),
            FilterExpr::RecordIn { .. } => "record".into(),
            FilterExpr::StatusIn { .. } => "status".into(),
            FilterExpr::Time { field, .. } => match field {
                TimeField::OccurredAt => "occurred_at".into(),
                TimeField::IngestedAt => "ingested_at".into(),
            },
            _ => "filter".into(),
        }
    }
}

/// The status classes of the universe, at the request's times.
struct Classes {
    active: RoaringBitmap,
    superseded: RoaringBitmap,
    historical: RoaringBitmap,
    stale: RoaringBitmap,
    universe: RoaringBitmap,
}

/// Evaluates `e` over the universe. Only its intersection with `within`
/// (a subset of the universe the caller intersects the result with) has
/// to be right: terms that test records one by one test only `within`, so
/// a time term after a selective scope term costs what the scope holds,
/// not what the store holds. (`Not` keeps it right: `(u - X) ∩ S` needs `X`
/// only on `S`.)
fn eval(st: &State, e: &FilterExpr, c: &Classes, within: &RoaringBitmap) -> RoaringBitmap {
    let u = &c.universe;
    match e {
        FilterExpr::All => u.clone(),
        FilterExpr::And { terms } => {
            let mut b = u & within;
            for t in terms {
                let x = eval(st, t, c, &b);
                b &= x;
            }
            b
        }
        FilterExpr::Or { terms } => {
            let mut b = RoaringBitmap::new();
            for t in terms {
                b |= eval(st, t, c, within);
            }
            b
        }
        FilterExpr::Not { term } => u - &eval(st, term, c, within),
        FilterExpr::In { field, values } => {
            let map = match field {
                NameField::User => &st.bm_user,
                NameField::Conversation => &st.bm_conversation,
                NameField::Agent => &st.bm_agent,
                NameField::ScopeLabel => &st.bm_scope_label,
                NameField::Kind => &st.bm_kind,
            };
            union_of(st, map, values) & u
        }
        FilterExpr::RecordIn { types } => {
            let mut t = RoaringBitmap::new();
            for r in types {
                if let Some(x) = st.bm_type.get(r) {
                    t |= x;
                }
            }
            t & u
        }
        FilterExpr::StatusIn { statuses } => {
            let mut b = RoaringBitmap::new();
            for s in statuses {
                b |= match s {
                    StatusClass::Active => &c.active,
                    StatusClass::Superseded => &c.superseded,
                    StatusClass::Historical => &c.historical,
                    StatusClass::Stale => &c.stale,
                };
            }
            b
        }
        FilterExpr::Time { field, cmp, at_ms } => match field {
            TimeField::OccurredAt => (u & within)
                .iter()
                .filter(|&i| cmp.holds(st.meta(i).occurred_at, *at_ms))
                .collect(),
            // Transaction time follows the log: a prefix or a suffix.
            TimeField::IngestedAt => {
                let n = match cmp {
                    CmpOp::Lt => st.ingested_prefix(at_ms.saturating_sub(1)),
                    CmpOp::Le | CmpOp::Gt => st.ingested_prefix(*at_ms),
                    CmpOp::Ge => st.ingested_prefix(at_ms.saturating_sub(1)),
                };
                let mut b = u.clone();
                match cmp {
                    CmpOp::Lt | CmpOp::Le => {
                        if (n as usize) < st.len() {
                            b.remove_range(n..);
                        }
                    }
                    CmpOp::Gt | CmpOp::Ge => {
                        b.remove_range(..n);
                    }
                }
                b
            }
        },
    }
}

/// Computes eligibility for `tenant` with the labels `held`, from the
/// classic filters (see [`FilterExpr::from_filters`]).
pub fn compute(
    st: &State,
    tenant: &str,
    held: &BTreeSet<String>,
    filters: &Filters,
    cut: &Cut,
) -> Eligibility {
    compute_expr(
        st,
        tenant,
        held,
        &FilterExpr::from_filters(filters, cut.include_historical),
        cut,
    )
}

/// Computes eligibility for `tenant` with the labels `held` and a filter
/// expression. See the module documentation for the steps.
pub fn compute_expr(
    st: &State,
    tenant: &str,
    held: &BTreeSet<String>,
    filter: &FilterExpr,
    cut: &Cut,
) -> Eligibility {
    compute_windowed(st, tenant, held, filter, cut).0
}

/// [`compute_expr`], and the instant before which the same state gives the
/// same result at any later `now` (with `valid_at == now` and no `as_of`):
/// the next retention expiry or end of validity among the records it
/// looked at (`i64::MAX` if none is ahead).
fn compute_windowed(
    st: &State,
    tenant: &str,
    held: &BTreeSet<String>,
    filter: &FilterExpr,
    cut: &Cut,
) -> (Eligibility, i64) {
    let mut changes_at = i64::MAX;
    let normalized = std::sync::Arc::new(filter.normalized());
    let filter = &*normalized;
    let mut steps = Vec::new();
    let mut push = |name: &str, b: &RoaringBitmap| {
        steps.push(Step {
            step: name.to_string(),
            remaining: b.len(),
        });
    };
    let Some(tsym) = st.tenant_sym(tenant) else {
        let e = Eligibility {
            bitmap: RoaringBitmap::new(),
            historical: RoaringBitmap::new(),
            traversable: RoaringBitmap::new(),
            steps: [Step {
                step: "tenant and access".into(),
                remaining: 0,
            }]
            .into(),
            filter: normalized,
            lexical_corpus: std::sync::OnceLock::new(),
            space_shares: SpaceShares::default(),
            hidden_spaces: Box::default(),
            status_then: FxHashMap::default(),
        };
        return (e, changes_at);
    };
    let tstate = &st.tenants[&tsym];
    let mut b = st.bm_tenant.get(&tsym).cloned().unwrap_or_default();
    // access, in the same step as the tenant: no count a principal sees
    // ever includes records it may not read
    let denied = denied(st, tstate, held);
    let hidden_spaces = hidden_models(st, tenant, &denied);
    if !denied.is_empty() {
        b -= &denied;
    }
    // and deleted records: deleted means gone, from every count too
    if let Some(d) = st.bm_status.get(&Status::Deleted) {
        b -= d;
    }
    push("tenant and access", &b);

    // as_of: ingestion prefix
    let as_of = cut.as_of;
    if let Some(t) = as_of {
        let n = st.ingested_prefix(t);
        if (n as usize) < st.len() {
            b.remove_range(n..);
        }
        push("as_of", &b);
    }

    // status as it stood at as_of; deleted always excluded
    let mut status_then = FxHashMap::default();
    let statuses = [
        Status::Active,
        Status::Approved,
        Status::Superseded,
        Status::Stale,
        Status::Candidate,
    ];
    let mut at: BTreeMap<Status, RoaringBitmap> = statuses
        .iter()
        .map(|s| (*s, st.bm_status.get(s).cloned().unwrap_or_default()))
        .collect();
    if let Some(t) = as_of {
        // Revert transitions made after t: the status at t is the `from`
        // of the first later transition.
        status_then = st.statuses_at(t);
        for (&idx, &s) in &status_then {
            for bm in at.values_mut() {
                bm.remove(idx);
            }
            let now_deleted = st.meta(idx).status == Status::Deleted;
            if !now_deleted {
                if let Some(bm) = at.get_mut(&s) {
                    bm.insert(idx);
                }
            }
        }
    }
    let mut current = &at[&Status::Active] | &at[&Status::Approved];
    if cut.include_candidates {
        current |= &at[&Status::Candidate];
    }
    let mut superseded = &at[&Status::Superseded] & &b;
    let mut stale = &at[&Status::Stale] & &b;
    b &= &(&current | &(&superseded | &stale));
    push("status", &b);

    // retention: the rule every read by id asks too
    // (`State::past_retention`), so a record built on an expired one
    // leaves here even when its source left at an earlier step
    let (expired_by_policy, next_expiry) = st.past_retention_set(tsym, cut.now);
    changes_at = changes_at.min(next_expiry);
    if !expired_by_policy.is_disjoint(&b) {
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
    let current_now = &b & &current;
    for idx in (&current_now & &st.bm_bounded).iter() {
        let until = match reverted.get(&idx) {
            Some(u) => *u,
            None => st.meta(idx).valid_until,
        };
        match until {
            Some(u) if u <= cut.valid_at => {
                historical.insert(idx);
            }
            Some(u) => changes_at = changes_at.min(u),
            None => {}
        }
    }
    // records not yet valid at valid_at (their start, `Meta::valid_start`,
    // in the future of it): a record not valid only from after its
    // ingestion starts at its ingestion at the latest, so only those
    // ingested after valid_at (a suffix of the table: ingestion never goes
    // back along it) and those valid later (`bm_valid_later`) can be, at
    // any valid_at: at the present, the newest records only when the
    // clock is behind the store's last write
    let later_only = &b & &st.bm_valid_later;
    let ingested_after = b.range(st.ingested_prefix(cut.valid_at)..);
    for idx in later_only.iter().chain(ingested_after) {
        let from = st.meta(idx).valid_start();
        if from > cut.valid_at {
            not_yet.insert(idx);
            changes_at = changes_at.min(from);
        }
    }
    b -= &not_yet;
    superseded &= &b;
    stale &= &b;
    historical &= &b;
    let classes = Classes {
        active: &(&b & &current) - &historical,
        superseded,
        historical,
        stale,
        universe: b,
    };
    // Without a status term a request selects the active class.
    let selected = if filter.mentions_status() {
        classes.universe.clone()
    } else {
        classes.active.clone()
    };
    push("validity", &selected);
    // Graph expansion may walk through what the request's own filters
    // leave out, but only within the statuses the request may select
    // (and the active ones): `status = active` walks as no status term
    // does, and only naming `historical` passes through ended relations.
    let traversable = if filter.mentions_status() {
        let may = filter.selectable_statuses();
        let mut t = classes.active.clone();
        for (class, b) in [
            (StatusClass::Superseded, &classes.superseded),
            (StatusClass::Historical, &classes.historical),
            (StatusClass::Stale, &classes.stale),
        ] {
            if may & class.bit() != 0 {
                t |= b;
            }
        }
        t
    } else {
        selected.clone()
    };

    // request filters, one step per top-level term
    let mut out = selected;
    let terms: Vec<&FilterExpr> = match filter {
        FilterExpr::All => Vec::new(),
        FilterExpr::And { terms } => terms.iter().collect(),
        other => vec![other],
    };
    for t in terms {
        let x = eval(st, t, &classes, &out);
        out &= x;
        push(&t.step_name(), &out);
    }
    let historical = &classes.historical & &out;
    (
        Eligibility {
            bitmap: out,
            historical,
            traversable,
            steps: steps.into(),
            filter: normalized,
            lexical_corpus: std::sync::OnceLock::new(),
            space_shares: SpaceShares::default(),
            hidden_spaces,
            status_then,
        },
        changes_at,
    )
}

/// Most results an [`EligibilityCache`] keeps.
pub const ELIGIBILITY_CACHE_ENTRIES: usize = 64;

/// Recent eligibility results of one state.
///
/// An entry is used only for the same state (applied LSN and record
/// count: every change to what eligibility reads is a log frame), the same
/// tenant, held labels, filter and flags, no `as_of`, `valid_at == now`,
/// and a `now` inside the window where the result cannot change (from the
/// `now` it was computed at up to the next retention expiry or end of
/// validity, `compute_windowed`). Anything else computes afresh. The
/// result is then the one [`compute_expr`] would give, so the cache cannot
/// widen what a principal sees (`db::tests::cached_eligibility_equals_a_fresh_computation`
/// checks it against fresh computations under writes, deletions, label
/// changes and a moving clock).
#[derive(Debug, Default)]
pub struct EligibilityCache {
    inner: parking_lot::Mutex<CacheInner>,
}

#[derive(Debug, Default)]
struct CacheInner {
    state: (u64, usize),
    entries: Vec<CacheEntry>,
}

#[derive(Debug)]
struct CacheEntry {
    tenant: String,
    held: BTreeSet<String>,
    filter: FilterExpr,
    flags: (bool, bool),
    from: i64,
    until: i64,
    el: std::sync::Arc<Eligibility>,
}

impl EligibilityCache {
    /// Eligibility as [`compute_expr`] gives it, from the cache when the
    /// same question was answered for the same state.
    pub fn compute(
        &self,
        st: &State,
        tenant: &str,
        held: &BTreeSet<String>,
        filter: &FilterExpr,
        cut: &Cut,
    ) -> std::sync::Arc<Eligibility> {
        if cut.as_of.is_some() || cut.valid_at != cut.now {
            return std::sync::Arc::new(compute_expr(st, tenant, held, filter, cut));
        }
        let state = (st.applied_lsn, st.len());
        let flags = (cut.include_historical, cut.include_candidates);
        {
            let mut c = self.inner.lock();
            if c.state != state {
                c.entries.clear();
                c.state = state;
            }
            if let Some(i) = c.entries.iter().position(|e| {
                e.from <= cut.now
                    && cut.now < e.until
                    && e.flags == flags
                    && e.tenant == tenant
                    && e.held == *held
                    && e.filter == *filter
            }) {
                // most recently used first
                c.entries[..=i].rotate_right(1);
                return c.entries[0].el.clone();
            }
        }
        let (el, until) = compute_windowed(st, tenant, held, filter, cut);
        let el = std::sync::Arc::new(el);
        let mut c = self.inner.lock();
        if c.state == state {
            c.entries.insert(
                0,
                CacheEntry {
                    tenant: tenant.to_string(),
                    held: held.clone(),
                    filter: filter.clone(),
                    flags,
                    from: cut.now,
                    until,
                    el: el.clone(),
                },
            );
            c.entries.truncate(ELIGIBILITY_CACHE_ENTRIES);
        }
        el
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A filter's expression is the same whether its lists come sorted and
    /// without repeats or not: `from_filters` normalizes as
    /// `Filters::normalized` does.
    #[test]
    fn filter_lists_in_any_order_and_with_repeats_give_one_expression() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let messy = Filters {
            users: s(&["u2", "u1", "u2"]),
            kinds: s(&["b", "a", "b", "a"]),
            scope_labels: s(&["x"]),
            record_types: vec![RecordType::Summary, RecordType::Event, RecordType::Summary],
            occurred_after: Some(5),
            ..Filters::default()
        };
        let tidy = messy.normalized();
        assert_eq!(tidy.users, s(&["u1", "u2"]));
        for historical in [false, true] {
            let a = FilterExpr::from_filters(&messy, historical);
            assert_eq!(a, FilterExpr::from_filters(&tidy, historical));
            assert_eq!(a, a.normalized(), "already canonical");
        }
        let FilterExpr::And { terms } = FilterExpr::from_filters(&messy, false) else {
            panic!("several terms make an And")
        };
        assert_eq!(
            terms.len(),
            5,
            "users, labels, kinds, record types, time: {terms:?}"
        );
        assert!(terms.contains(&FilterExpr::RecordIn {
            types: vec![RecordType::Event, RecordType::Summary]
        }));
        assert_eq!(
            FilterExpr::from_filters(&Filters::default(), false),
            FilterExpr::All
        );
    }

    #[test]
    fn a_space_share_is_made_once_per_key_and_again_when_the_space_grows() {
        let shares = SpaceShares::default();
        let made = std::cell::Cell::new(0);
        let make = |v: u32| {
            made.set(made.get() + 1);
            RoaringBitmap::from_iter([v])
        };
        let a = shares.get_or_make((7, 3), || make(1));
        let again = shares.get_or_make((7, 3), || make(2));
        let one = RoaringBitmap::from_iter([1]);
        assert!(*a == one && *again == one && made.get() == 1);
        assert!(
            std::sync::Arc::ptr_eq(&a, &again),
            "the kept share is handed out"
        );
        // the same space with one more member, and another space: made anew
        let grown = shares.get_or_make((7, 4), || make(3));
        let other = shares.get_or_make((8, 3), || make(4));
        assert_eq!(made.get(), 3);
        assert!(grown.contains(3) && other.contains(4));
        // a copy starts empty
        let copy = shares.clone();
        assert!(copy.get_or_make((7, 3), || make(5)).contains(5));
    }

    #[test]
    fn space_shares_keep_the_last_few_made_and_one_per_space() {
        let shares = SpaceShares::default();
        for uid in 0..10u64 {
            shares.get_or_make((uid, 1), || RoaringBitmap::from_iter([1]));
        }
        assert_eq!(shares.0.lock().len(), SPACE_SHARES_MAX);
        let oldest_kept = 10 - SPACE_SHARES_MAX as u64;
        assert!(
            shares
                .0
                .lock()
                .iter()
                .all(|((uid, _), _)| *uid >= oldest_kept)
        );
        // a grown space's share replaces its old one
        shares.get_or_make((9, 2), || RoaringBitmap::from_iter([2]));
        let kept = shares.0.lock();
        assert_eq!(kept.iter().filter(|((uid, _), _)| *uid == 9).count(), 1);
        assert_eq!(kept.len(), SPACE_SHARES_MAX);
    }
}
