//! The in-memory derived state: everything retrieval and lifecycle need,
//! rebuilt from the log on open and kept current by the commit hook.
//!
//! - a dense record table: each record gets the next index (`Idx`) in log
//!   order; [`Meta`] holds what eligibility needs (tenant, type, kind,
//!   status, the two clocks, access, scope, lineage links);
//! - roaring bitmaps over indexes, per tenant, scope value, kind, type,
//!   status, retention class and effective access label;
//! - lineage both ways (`sources` / `dependents`), correction chains, the
//!   entity graph (relations as adjacency lists, assertions about entities,
//!   a name/alias index);
//! - per-tenant policy: grants, revoked labels, retention periods, holds,
//!   external ids;
//! - a status and expiry history, so `as_of` reads can see an earlier state;
//! - the lexical index and the vector spaces.
//!
//! Because ingest time never decreases along the log, "ingested at or
//! before t" is always a prefix of the index space.
//!
//! This module must never write to the log; it only applies what the log
//! already holds, in LSN order, deterministically (replaying the same log
//! gives the same indexes, bitmaps and lineage).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;
use rustc_hash::FxHashSet as HashSet;

use engram_storage::frame::Lsn;
use engram_storage::log::FrameLoc;
use roaring::RoaringBitmap;

use crate::codec;
use crate::codec::{ArchivedOpBody, ArchivedStoredOp, ArchivedStoredRecord, StoredTombstone};
use crate::embed::Embedder;
use crate::error::Result;
use crate::id::RecordId;
use crate::lexical::Bm25Index;
use crate::model::{AssertionKind, RecordType, Status, WriterKind};
use crate::vector::space::VectorSpaces;

/// Dense record index.
pub type Idx = u32;

/// A record position as an [`Idx`]. Positions stay below
/// `limits::RECORDS_MAX` (< `u32::MAX`): the write path and `apply_record`
/// refuse records beyond it, so this never fails in a consistent state.
#[inline]
pub(crate) fn idx_of(i: usize) -> Idx {
    Idx::try_from(i).expect("invariant violated: record position beyond RECORDS_MAX")
}

/// Interned string id.
pub type Sym = u32;

/// Per-record metadata.
#[derive(Clone, Debug)]
pub struct Meta {
    /// Record id.
    pub id: RecordId,
    /// Where its frame is.
    pub loc: FrameLoc,
    /// Tenant.
    pub tenant: Sym,
    /// Type.
    pub rtype: RecordType,
    /// Kind.
    pub kind: Sym,
    /// Assertion kind.
    pub akind: Option<AssertionKind>,
    /// Writer kind.
    pub writer_kind: WriterKind,
    /// Principal that wrote the record (interned).
    pub writer: Sym,
    /// Valid time of the event.
    pub occurred_at: i64,
    /// Transaction time.
    pub ingested_at: i64,
    /// Start of validity.
    pub valid_from: i64,
    /// Whether `valid_from` was given (else it is `occurred_at`'s): a
    /// `valid_from` given equal to `occurred_at` still starts validity.
    pub valid_from_given: bool,
    /// End of validity (set at ingest or by an expiry).
    pub valid_until: Option<i64>,
    /// Current status.
    pub status: Status,
    /// Retention class.
    pub retention: Sym,
    /// Scope user.
    pub user: Option<Sym>,
    /// Scope conversation.
    pub conversation: Option<Sym>,
    /// Scope agent.
    pub agent: Option<Sym>,
    /// Scope labels.
    pub scope_labels: Vec<Sym>,
    /// Effective access labels (own + every source's), sorted.
    pub access: Vec<Sym>,
    /// The record this corrects.
    pub supersedes: Option<Idx>,
    /// The record correcting this one.
    pub superseded_by: Option<Idx>,
    /// Whether it has text.
    pub has_text: bool,
    /// Content purged by compaction (only identity and lineage remain).
    pub tombstone: bool,
    /// External id.
    pub external_id: Option<Arc<str>>,
    /// Subject entity (relations, assertions).
    pub subject: Option<Idx>,
    /// Object entity (relations).
    pub object: Option<Idx>,
    /// Predicate (relations, assertions).
    pub predicate: Option<Sym>,
}

impl Meta {
    /// Whether the record becomes valid only after it was ingested: a
    /// `valid_from` given (else it is `occurred_at`'s), even equal to
    /// `occurred_at`, and later than the ingestion. A record about an event dated later
    /// (a meeting planned for tomorrow, or a client clock ahead of the
    /// store's) is known, and valid, from when it is written.
    pub fn valid_later(&self) -> bool {
        self.valid_from_given && self.valid_from > self.ingested_at
    }

    /// When the record starts to be valid: its `valid_from` when given
    /// (equal to `occurred_at` or not); else (it defaults to `occurred_at`) the
    /// earlier of `occurred_at` and its ingestion, since a record about
    /// an event dated later is valid from when it is written. Why not
    /// `valid_from` alone with a special case at the present: the answer
    /// for a fixed `valid_at` must not depend on when it is asked (a
    /// manifest replays).
    pub fn valid_start(&self) -> i64 {
        if self.valid_from_given {
            self.valid_from
        } else {
            self.occurred_at.min(self.ingested_at)
        }
    }
}

/// Grants of one principal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grants {
    /// Access labels.
    pub labels: BTreeSet<String>,
    /// Roles (`reviewer`, `admin`).
    pub roles: BTreeSet<String>,
}

/// Per-tenant policy and lookups.
#[derive(Clone, Debug, Default)]
pub struct TenantState {
    /// Tenant name.
    pub name: String,
    /// LSN of the last log entry of this tenant applied: the tenant's
    /// snapshot position (what a manifest reports; it moves only with the
    /// tenant's own writes, so it says nothing about other tenants).
    pub last_lsn: u64,
    /// Grants per principal.
    pub grants: BTreeMap<String, Grants>,
    /// Labels revoked for everyone.
    pub revoked_labels: BTreeSet<String>,
    /// Retention period per class (None = forever).
    pub retention: BTreeMap<String, Option<i64>>,
    /// Scopes under legal hold.
    pub holds: BTreeSet<String>,
    /// External id -> newest record holding it. A record purged by
    /// compaction keeps its key taken under [`purged_external_id_key`]
    /// (the tombstone holds only the id's SHA-256).
    pub external_ids: HashMap<Arc<str>, Idx>,
    /// How many keys of `external_ids` are purged records' (none: a new
    /// external id need not be hashed to be checked against them).
    pub purged_external_ids: usize,
    /// Entity name/alias (see `lexical::name_key`) -> entities.
    pub entity_names: HashMap<String, Vec<Idx>>,
    /// Every access label used in the tenant.
    pub labels: BTreeSet<Sym>,
    /// Review rules: (assertion kind, writer kind) -> review required.
    pub review_rules: BTreeMap<(String, String), bool>,
}

impl TenantState {
    /// The record external id `e` names: the newest version holding it, or
    /// the tombstone of a record compaction purged (named by it as by its
    /// id).
    pub fn by_external_id(&self, e: &str) -> Option<Idx> {
        self.external_ids
            .get(e)
            .copied()
            .or_else(|| self.purged_external_id(e))
    }

    /// The purged record (its tombstone) that held external id `e`, if
    /// compaction purged one.
    pub fn purged_external_id(&self, e: &str) -> Option<Idx> {
        if self.purged_external_ids == 0 {
            return None;
        }
        let key = purged_external_id_key(&crate::canonical::sha256(e.as_bytes()));
        self.external_ids.get(&key).copied()
    }
}

/// The key under which a purged record's external id stays taken: its
/// SHA-256 behind a control character, which no external id may contain,
/// so it never names a live record. Why: deleted is final; a retried or
/// replayed ingest after compaction must not bring the record back.
pub fn purged_external_id_key(sha256: &[u8; 32]) -> Arc<str> {
    format!("{PURGED_EXTERNAL_ID_PREFIX}{}", crate::db::hex(sha256)).into()
}

/// What every [`purged_external_id_key`] starts with.
pub const PURGED_EXTERNAL_ID_PREFIX: &str = "\u{1}sha256:";

/// One status transition (for `as_of` reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusChange {
    /// Transaction time.
    pub at: i64,
    /// Record.
    pub idx: Idx,
    /// Before.
    pub from: Status,
    /// After.
    pub to: Status,
}

/// One expiry (for `as_of` reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpiryChange {
    /// Transaction time.
    pub at: i64,
    /// Record.
    pub idx: Idx,
    /// valid_until before.
    pub before: Option<i64>,
}

/// An entry of the deletion and revocation ledger (survives restore).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerEntry {
    /// LSN of the operation.
    pub lsn: Lsn,
    /// Operation id.
    pub op_id: RecordId,
    /// Tenant.
    pub tenant: String,
    /// Transaction time.
    pub at: i64,
    /// Kind of entry.
    pub what: LedgerWhat,
}

/// What a ledger entry records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LedgerWhat {
    /// A record (and its derivatives) deleted.
    Delete {
        /// Target.
        target: RecordId,
        /// Reason.
        reason: Option<String>,
    },
    /// A label or role granted (to a principal, or a tenant-wide
    /// revocation lifted): a restore re-applies it after the revocations
    /// before it, so a revocation lifted after a backup stays lifted.
    Grant {
        /// Principal (None: lifts a tenant-wide revocation).
        principal: Option<String>,
        /// Label.
        label: Option<String>,
        /// Role.
        role: Option<String>,
    },
    /// A label or role revoked.
    Revoke {
        /// Principal (None: everyone).
        principal: Option<String>,
        /// Label.
        label: Option<String>,
        /// Role.
        role: Option<String>,
    },
    /// A legal hold placed or lifted: what compaction may purge depends on
    /// it, so a restore of an older backup applies it again.
    Hold {
        /// `tenant`, `user:<id>`, `conversation:<id>`, `agent:<id>` or
        /// `label:<l>`.
        scope: String,
        /// Placed (true) or lifted.
        on: bool,
    },
    /// A retention period set: what is eligible, and what compaction
    /// purges, depends on it, so a restore of an older backup applies it
    /// again.
    Retention {
        /// Retention class.
        class: String,
        /// Period in ms (none: kept forever).
        period_ms: Option<i64>,
    },
}

/// Edge of the entity graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edge {
    /// The relation record.
    pub relation: Idx,
    /// The entity at the other end.
    pub other: Idx,
    /// Whether this entity is the subject.
    pub outgoing: bool,
}

/// Interner for small repeated strings. Each string is held once, shared
/// by the lookup map and the symbol table, and handed out without a copy
/// ([`Interner::shared`]: a hit's kind).
#[derive(Clone, Debug, Default)]
pub struct Interner {
    map: HashMap<Arc<str>, Sym>,
    names: Vec<Arc<str>>,
}

impl Interner {
    /// The symbol of `s`, creating it.
    pub fn intern(&mut self, s: &str) -> Sym {
        if let Some(&x) = self.map.get(s) {
            return x;
        }
        let x = Sym::try_from(self.names.len()).expect("fewer than 2^32 distinct names");
        let s: Arc<str> = s.into();
        self.names.push(s.clone());
        self.map.insert(s, x);
        x
    }
    /// The symbol of `s`, if it exists.
    pub fn get(&self, s: &str) -> Option<Sym> {
        self.map.get(s).copied()
    }
    /// The string of a symbol.
    pub fn name(&self, x: Sym) -> &str {
        &self.names[x as usize]
    }
    /// The string of a symbol, shared (no copy).
    pub fn shared(&self, x: Sym) -> Arc<str> {
        self.names[x as usize].clone()
    }
    /// Every string, in symbol order.
    pub fn names(&self) -> &[Arc<str>] {
        &self.names
    }
    /// An interner holding `names` as symbols 0, 1, ... (refused when a
    /// name repeats: symbols must stay one per string).
    pub fn from_names(names: Vec<Arc<str>>) -> Option<Interner> {
        let mut map = HashMap::with_capacity_and_hasher(names.len(), Default::default());
        for (i, n) in names.iter().enumerate() {
            if map.insert(n.clone(), Sym::try_from(i).ok()?).is_some() {
                return None;
            }
        }
        Some(Interner { map, names })
    }
}

/// What this process learnt the first time it read a record's frame whole
/// (see [`crate::db`]'s `hit_content`): that the payload's checksums
/// matched and the archive is valid, and where the text lies in the
/// payload. A later read takes only the text's bytes from the frame
/// ([`engram_storage::log::FrameReader::payload_part`]: neither the
/// header nor the checksums are read again); they must lie within the
/// segment's durable bytes and be UTF-8, but the rest of the archive is
/// not validated again (a span that fails either check sends the read
/// back to verifying the whole frame). Why it is
/// safe: a frame's bytes never change while its segment exists, and a
/// record's location never changes once it is in the table. One word per
/// record, set through `&self` (relaxed atomics: a reader that misses a
/// fresh span reads and checks the frame again); 0 is "not known", as is
/// any record beyond the table.
#[derive(Debug, Default)]
pub struct TextSpans {
    words: Vec<std::sync::atomic::AtomicU64>,
}

/// [`TextSpans`]' word of a record without text.
const NO_TEXT: u64 = u64::MAX;

impl TextSpans {
    /// Makes room for records `0..n`.
    fn cover(&mut self, n: usize) {
        if self.words.len() < n {
            self.words
                .resize_with(n, || std::sync::atomic::AtomicU64::new(0));
        }
    }

    /// Record `idx`'s text span, if known: `Some(None)` for a record
    /// without text, `Some(Some(range))` for the text's bytes.
    #[inline]
    pub fn get(&self, idx: Idx) -> Option<Option<std::ops::Range<usize>>> {
        let w = self
            .words
            .get(idx as usize)?
            .load(std::sync::atomic::Ordering::Relaxed);
        match w {
            0 => None,
            NO_TEXT => Some(None),
            w => {
                let start = (w >> 32) as usize - 1;
                Some(Some(start..start + (w & 0xFFFF_FFFF) as usize))
            }
        }
    }

    /// Records record `idx`'s text span (ignored beyond the table, or for a
    /// span that does not fit the word).
    #[inline]
    pub fn set(&self, idx: Idx, span: Option<std::ops::Range<usize>>) {
        let w = match span {
            None => NO_TEXT,
            Some(r) => match (u32::try_from(r.start + 1), u32::try_from(r.len())) {
                (Ok(s), Ok(n)) if s < u32::MAX => u64::from(s) << 32 | u64::from(n),
                _ => return,
            },
        };
        if let Some(x) = self.words.get(idx as usize) {
            x.store(w, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Everything derived from the log and held in memory.
pub struct State {
    /// Last LSN applied.
    pub applied_lsn: Lsn,
    /// Recent eligibility results of this state (cleared by any change).
    pub eligibility_cache: crate::retrieval::eligibility::EligibilityCache,
    /// Record table. Records are added only by [`State::push_meta`].
    pub metas: Vec<Meta>,
    /// `occurred_prefix_max[i]`: the latest `occurred_at` among records
    /// `0..=i`. The recency retriever walks records newest index first and
    /// stops once nothing at or below the index can enter its top n.
    pub occurred_prefix_max: Vec<i64>,
    /// Records valid only from after their ingestion
    /// ([`Meta::valid_later`]): the only ones that can be not yet valid at
    /// the present or a later moment. Derived from the record table (kept
    /// with it, not in checkpoints).
    pub bm_valid_later: RoaringBitmap,
    /// Records whose frame was read whole, and where their text lies (see
    /// [`TextSpans`]).
    pub text_spans: TextSpans,
    /// Id -> index.
    pub by_id: HashMap<RecordId, Idx>,
    /// Strings.
    pub strings: Interner,
    /// Tenants by symbol.
    pub tenants: HashMap<Sym, TenantState>,
    /// Records per tenant.
    pub bm_tenant: HashMap<Sym, RoaringBitmap>,
    /// Records per status.
    pub bm_status: BTreeMap<Status, RoaringBitmap>,
    /// Records per type.
    pub bm_type: BTreeMap<RecordType, RoaringBitmap>,
    /// Records per kind.
    pub bm_kind: HashMap<Sym, RoaringBitmap>,
    /// Records per scope user.
    pub bm_user: HashMap<Sym, RoaringBitmap>,
    /// Records per scope conversation.
    pub bm_conversation: HashMap<Sym, RoaringBitmap>,
    /// Records per scope agent.
    pub bm_agent: HashMap<Sym, RoaringBitmap>,
    /// Records per scope label.
    pub bm_scope_label: HashMap<Sym, RoaringBitmap>,
    /// Records per retention class.
    pub bm_retention: HashMap<Sym, RoaringBitmap>,
    /// Records per effective access label.
    pub bm_access: HashMap<Sym, RoaringBitmap>,
    /// Records with a bounded validity.
    pub bm_bounded: RoaringBitmap,
    /// Lineage: record -> its sources (ordered).
    pub sources: HashMap<Idx, Vec<Idx>>,
    /// Lineage: record -> records built on it.
    pub dependents: HashMap<Idx, Vec<Idx>>,
    /// Entity graph.
    pub edges: HashMap<Idx, Vec<Edge>>,
    /// Entity -> assertions about it.
    pub about: HashMap<Idx, Vec<Idx>>,
    /// Status history.
    pub status_log: Vec<StatusChange>,
    /// Expiry history.
    pub expiry_log: Vec<ExpiryChange>,
    /// Deletions and revocations, in log order.
    pub ledger: Vec<LedgerEntry>,
    /// The operation ids of `ledger` (an operation frame repeated in the
    /// log is refused when applied, `State::apply_op`).
    pub ledger_ids: HashSet<RecordId>,
    /// The deleting operation of each tombstone this state applied (see
    /// [`State::deleted_before`]). Needed only while a compacted log is
    /// replayed from its start (compaction removes the derived state, so
    /// it always is); not kept in checkpoints.
    pub tombstone_deleted_by: HashMap<Idx, RecordId>,
    /// Lexical index.
    pub lexical: Bm25Index,
    /// LSN up to which the lexical index was loaded from its snapshot (adds
    /// at or below it are skipped during replay).
    pub lexical_loaded_lsn: Lsn,
    /// Vector spaces.
    pub vectors: VectorSpaces,
    /// Embedder for derived vectors.
    pub embedder: Option<std::sync::Arc<dyn Embedder>>,
    /// Last transaction time applied.
    pub last_ingested_at: i64,
    /// Where the frame of `applied_lsn` sits in the log (a checkpoint
    /// records it to check, at the next open, that it belongs to this log).
    pub applied_loc: Option<engram_storage::FrameLoc>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("applied_lsn", &self.applied_lsn)
            .field("n_records", &self.metas.len())
            .finish()
    }
}

fn bm_add(map: &mut HashMap<Sym, RoaringBitmap>, key: Sym, idx: Idx) {
    map.entry(key).or_default().insert(idx);
}

/// Whether derived vectors are computed for a record of this type/kind.
pub fn embeds(rtype: RecordType, akind: Option<AssertionKind>) -> bool {
    match rtype {
        RecordType::Entity | RecordType::Relation => false,
        RecordType::Assertion => !akind.is_some_and(|k| k.is_procedural()),
        RecordType::Event | RecordType::Summary => true,
    }
}

impl State {
    /// Empty state.
    pub fn new(
        lexical: Bm25Index,
        lexical_loaded_lsn: Lsn,
        vectors: VectorSpaces,
        embedder: Option<std::sync::Arc<dyn Embedder>>,
    ) -> Self {
        State {
            applied_lsn: 0,
            eligibility_cache: Default::default(),
            metas: Vec::new(),
            occurred_prefix_max: Vec::new(),
            bm_valid_later: RoaringBitmap::new(),
            text_spans: TextSpans::default(),
            by_id: HashMap::default(),
            strings: Interner::default(),
            tenants: HashMap::default(),
            bm_tenant: HashMap::default(),
            bm_status: BTreeMap::new(),
            bm_type: BTreeMap::new(),
            bm_kind: HashMap::default(),
            bm_user: HashMap::default(),
            bm_conversation: HashMap::default(),
            bm_agent: HashMap::default(),
            bm_scope_label: HashMap::default(),
            bm_retention: HashMap::default(),
            bm_access: HashMap::default(),
            bm_bounded: RoaringBitmap::new(),
            sources: HashMap::default(),
            dependents: HashMap::default(),
            edges: HashMap::default(),
            about: HashMap::default(),
            status_log: Vec::new(),
            expiry_log: Vec::new(),
            ledger: Vec::new(),
            ledger_ids: HashSet::default(),
            tombstone_deleted_by: HashMap::default(),
            lexical,
            lexical_loaded_lsn,
            vectors,
            embedder,
            last_ingested_at: i64::MIN,
            applied_loc: None,
        }
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.metas.len()
    }

    /// Whether there are no records.
    pub fn is_empty(&self) -> bool {
        self.metas.is_empty()
    }

    /// The tenant symbol of `name`, if the tenant has records or policy.
    pub fn tenant_sym(&self, name: &str) -> Option<Sym> {
        self.strings
            .get(name)
            .filter(|s| self.tenants.contains_key(s))
    }

    /// The tenant state of `name`.
    pub fn tenant(&self, name: &str) -> Option<&TenantState> {
        self.tenant_sym(name).and_then(|s| self.tenants.get(&s))
    }

    fn tenant_mut(&mut self, name: &str) -> (Sym, &mut TenantState) {
        let sym = self.strings.intern(name);
        let t = self.tenants.entry(sym).or_insert_with(|| TenantState {
            name: name.to_string(),
            ..TenantState::default()
        });
        (sym, t)
    }

    /// Index of a record id.
    pub fn idx(&self, id: RecordId) -> Option<Idx> {
        self.by_id.get(&id).copied()
    }

    /// Index of a record id within a tenant.
    pub fn idx_in(&self, tenant: Sym, id: RecordId) -> Option<Idx> {
        self.idx(id)
            .filter(|&i| self.metas[i as usize].tenant == tenant)
    }

    /// Metadata of a record.
    pub fn meta(&self, idx: Idx) -> &Meta {
        &self.metas[idx as usize]
    }

    /// Appends a record to the table (the one place records are added, so
    /// `occurred_prefix_max` and `bm_valid_later` stay in step).
    pub fn push_meta(&mut self, meta: Meta) {
        let before = self.occurred_prefix_max.last().copied().unwrap_or(i64::MIN);
        self.occurred_prefix_max.push(before.max(meta.occurred_at));
        if meta.valid_later() {
            self.bm_valid_later.insert(idx_of(self.metas.len()));
        }
        self.metas.push(meta);
        self.text_spans.cover(self.metas.len());
    }

    /// Replaces the record table (restoring a checkpoint) and recomputes
    /// `occurred_prefix_max` and `bm_valid_later`.
    pub fn set_metas(&mut self, metas: Vec<Meta>) {
        self.bm_valid_later = metas
            .iter()
            .enumerate()
            .filter(|(_, m)| m.valid_later())
            .map(|(i, _)| idx_of(i))
            .collect();
        let mut max = i64::MIN;
        self.occurred_prefix_max = metas
            .iter()
            .map(|m| {
                max = max.max(m.occurred_at);
                max
            })
            .collect();
        self.metas = metas;
        self.text_spans = TextSpans::default();
        self.text_spans.cover(self.metas.len());
    }

    /// Records ingested at or before `t`: the prefix `[0, n)`.
    pub fn ingested_prefix(&self, t: i64) -> u32 {
        idx_of(self.metas.partition_point(|m| m.ingested_at <= t))
    }

    fn set_status(&mut self, idx: Idx, to: Status, at: i64) {
        let from = self.metas[idx as usize].status;
        // Deleted is terminal: no later frame (a correction or review that
        // raced the deletion) brings a record back.
        if from == to || from == Status::Deleted {
            return;
        }
        if let Some(b) = self.bm_status.get_mut(&from) {
            b.remove(idx);
        }
        self.bm_status.entry(to).or_default().insert(idx);
        self.metas[idx as usize].status = to;
        self.status_log.push(StatusChange { at, idx, from, to });
    }

    /// Every record reachable through `dependents`, transitively (excluding `idx`).
    pub fn derivatives(&self, idx: Idx) -> Vec<Idx> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![idx];
        while let Some(i) = stack.pop() {
            if let Some(ds) = self.dependents.get(&i) {
                for &d in ds {
                    if d != idx && seen.insert(d) {
                        stack.push(d);
                    }
                }
            }
        }
        seen.into_iter().collect()
    }

    /// Adds to `set` every record derived, directly or not, from one in it
    /// ([`State::derivatives`] of a whole set, walked once).
    pub fn add_derivatives(&self, set: &mut RoaringBitmap) {
        let mut stack: Vec<Idx> = set
            .iter()
            .filter(|i| self.dependents.contains_key(i))
            .collect();
        while let Some(i) = stack.pop() {
            for &d in self.dependents.get(&i).into_iter().flatten() {
                if set.insert(d) {
                    stack.push(d);
                }
            }
        }
    }

    /// Whether record `idx` is past its tenant's retention period for its
    /// class at `now` (by ingest time), or built, directly or not, on a
    /// record that is: what retrieval leaves out at once and `compact`
    /// deletes. Reads by id and listings leave it out too, before
    /// `compact` as after (docs/lifecycle.md, "Retention and legal holds").
    pub fn past_retention(&self, idx: Idx, now: i64) -> bool {
        let Some(t) = self.tenants.get(&self.metas[idx as usize].tenant) else {
            return false;
        };
        if t.retention.values().all(Option::is_none) {
            return false;
        }
        let expired = |i: Idx| {
            let m = &self.metas[i as usize];
            t.retention
                .get(self.strings.name(m.retention))
                .copied()
                .flatten()
                .is_some_and(|p| m.ingested_at.saturating_add(p) <= now)
        };
        let mut seen = BTreeSet::new();
        let mut stack = vec![idx];
        while let Some(i) = stack.pop() {
            if expired(i) {
                return true;
            }
            for &s in self.sources.get(&i).into_iter().flatten() {
                if seen.insert(s) {
                    stack.push(s);
                }
            }
        }
        false
    }

    /// Every record of `tenant` past its retention period at `now`, and
    /// every record built on one: [`State::past_retention`] for a whole
    /// tenant at once (retrieval's retention step, and a listing, ask it
    /// once, not once per record). Also the next moment a record of the
    /// tenant's classes expires (`i64::MAX`: none), for cached answers.
    pub fn past_retention_set(&self, tenant: Sym, now: i64) -> (RoaringBitmap, i64) {
        let (mut out, mut next) = (RoaringBitmap::new(), i64::MAX);
        // (a tenant without records has none past retention)
        let (Some(t), Some(own)) = (self.tenants.get(&tenant), self.bm_tenant.get(&tenant)) else {
            return (out, next);
        };
        for (class, period) in &t.retention {
            let (Some(p), Some(sym)) = (period, self.strings.get(class)) else {
                continue;
            };
            if let Some(x) = self.bm_retention.get(&sym) {
                let n = self.ingested_prefix(now.saturating_sub(*p));
                // (class bitmaps are store-wide: the tenant's own records
                // only, taken before anything is copied)
                let mut old = x & own;
                if (n as usize) < self.len() {
                    old.remove_range(n..);
                    // record n (the first ingested after now - p) expires next
                    next = next.min(self.meta(n).ingested_at.saturating_add(*p));
                }
                out |= old;
            }
        }
        // What was built on an expired record carries its content: it
        // expires with it, as compaction then purges it with it.
        self.add_derivatives(&mut out);
        (out, next)
    }

    /// Every version in the correction chain of `idx` (oldest first).
    pub fn chain(&self, idx: Idx) -> Vec<Idx> {
        let mut first = idx;
        let mut guard = 0;
        while let Some(p) = self.metas[first as usize].supersedes {
            first = p;
            guard += 1;
            if guard > self.metas.len() {
                break;
            }
        }
        let mut out = vec![first];
        let mut cur = first;
        while let Some(n) = self.metas[cur as usize].superseded_by {
            out.push(n);
            cur = n;
            if out.len() > self.metas.len() {
                break;
            }
        }
        out
    }

    /// Marks every current record derived from `idx` stale.
    /// A source of `idx` that is no longer current (superseded, stale,
    /// retracted, rejected or deleted), if any: what a derivative approved
    /// now would be built on outdated input.
    pub fn outdated_source(&self, idx: Idx) -> Option<Idx> {
        self.sources.get(&idx)?.iter().copied().find(|&s| {
            !matches!(
                self.metas[s as usize].status,
                Status::Active | Status::Approved | Status::Candidate
            )
        })
    }

    /// A review candidate is left a candidate: stale is a status of
    /// knowledge in use, and a candidate is not in use until approved (a
    /// stale record can be listed, so a candidate turned stale would have
    /// shown its never-approved text and left the review queue). Approving
    /// one whose source is no longer current is refused instead
    /// (`Session::approve`).
    fn mark_dependents_stale(&mut self, idx: Idx, at: i64) {
        for d in self.derivatives(idx) {
            let st = self.metas[d as usize].status;
            if matches!(st, Status::Active | Status::Approved) {
                self.set_status(d, Status::Stale, at);
            }
        }
    }

    /// Record `idx`'s end of validity as known at transaction time `t`: the
    /// value before its first change made after `t` (eligibility reverts
    /// every record at once with the same rule).
    pub fn valid_until_at(&self, idx: Idx, t: i64) -> Option<i64> {
        match self.expiry_log.iter().find(|c| c.idx == idx && c.at > t) {
            Some(c) => c.before,
            None => self.metas[idx as usize].valid_until,
        }
    }

    /// Whether record `idx` is shown as a tombstone: deleted, or past its
    /// retention period (in `expired`, the tenant's
    /// [`State::past_retention_set`], asked once per request: what
    /// `compact` deletes, shown as it will be then).
    pub fn shown_gone(&self, idx: Idx, expired: &RoaringBitmap) -> bool {
        self.metas[idx as usize].status == Status::Deleted || expired.contains(idx)
    }

    /// How a record's status `status` (the one it had at `as_of`, or now)
    /// is shown at valid time `valid_at`: a current record whose validity
    /// had ended by then (its end as known at `as_of`) is `historical`, as
    /// retrieval marks it; every other status is its name.
    pub fn shown_status(
        &self,
        idx: Idx,
        status: Status,
        valid_at: i64,
        as_of: Option<i64>,
    ) -> &'static str {
        let current = matches!(status, Status::Active | Status::Approved);
        let until = match as_of {
            Some(t) => self.valid_until_at(idx, t),
            None => self.metas[idx as usize].valid_until,
        };
        if current && until.is_some_and(|u| u <= valid_at) {
            "historical"
        } else {
            status.name()
        }
    }

    /// The kind and status a trace's node or an attachment shows for
    /// record `idx`, whose status is `status` (the one it had at `as_of`,
    /// or now): both `deleted` for a record [`State::shown_gone`] (a kind
    /// is free text, content like any other; its tombstone reads the same
    /// after compaction), else its kind and [`State::shown_status`].
    pub fn shown_kind_and_status(
        &self,
        idx: Idx,
        status: Status,
        (valid_at, as_of): (i64, Option<i64>),
        expired: &RoaringBitmap,
    ) -> (&str, &'static str) {
        if self.shown_gone(idx, expired) {
            ("deleted", Status::Deleted.name())
        } else {
            (
                self.strings.name(self.metas[idx as usize].kind),
                self.shown_status(idx, status, valid_at, as_of),
            )
        }
    }

    /// The status each record changed after transaction time `t` had at
    /// `t`: the `from` of its first transition made after it. Records
    /// missing from the map have their current status.
    pub fn statuses_at(&self, t: i64) -> HashMap<Idx, Status> {
        let mut then = HashMap::default();
        for c in self.status_log.iter().rev() {
            if c.at > t {
                then.insert(c.idx, c.from);
            }
        }
        then
    }

    /// What deleting `idx` removes: every version of its correction chain,
    /// every record derived from any of them, and in turn every version of
    /// each such record's chain and what derives from those, to the end.
    ///
    /// Why the chains of derivatives too: no version of a deleted chain may
    /// live. A correction applied after a deletion of the record it corrects
    /// is deleted as it is applied (`apply_record`, "born deleted"), and a
    /// compacted log applies a correction after its deleted predecessor's
    /// tombstone; a correction written before the deletion must end the
    /// same way, or the state would depend on when the log was compacted.
    pub fn deletion_set(&self, idx: Idx) -> Vec<Idx> {
        let mut out = BTreeSet::new();
        let mut stack = vec![idx];
        while let Some(i) = stack.pop() {
            for v in self.chain(i) {
                if out.insert(v) {
                    stack.extend(self.dependents.get(&v).into_iter().flatten().copied());
                }
            }
        }
        out.into_iter().collect()
    }

    /// What a deletion with `reason` removes: [`State::deletion_set`],
    /// except for a retention expiry (reason `retention:<class>`, written
    /// only by compaction), which removes the expired version and what was
    /// built on it, not the other versions of its chain. Why: retention is
    /// how long a record's content may be kept; a correction is a newer
    /// statement with its own class and period (retrieval's retention step
    /// leaves it eligible), and compaction must not change what is
    /// eligible.
    pub fn deletion_set_for(&self, idx: Idx, reason: Option<&str>) -> Vec<Idx> {
        if !is_retention_reason(reason) {
            return self.deletion_set(idx);
        }
        let mut set = RoaringBitmap::new();
        set.insert(idx);
        self.add_derivatives(&mut set);
        set.iter().collect()
    }

    /// Whether `p`, a record `id` names as a source or corrects, was
    /// deleted before `id` was written: it is deleted, and unless it is a
    /// tombstone whose deleting operation came after `id` (a compacted log
    /// replays a purged record's tombstone at the record's place, before
    /// the operation that deleted it). Operation and record ids follow log
    /// order (both are minted under the writer lock with their queueing).
    pub fn deleted_before(&self, p: Idx, id: RecordId) -> bool {
        self.metas[p as usize].status == Status::Deleted
            && self.tombstone_deleted_by.get(&p).is_none_or(|&op| op < id)
    }

    /// The effective label names of a record.
    pub fn access_names(&self, idx: Idx) -> Vec<String> {
        self.metas[idx as usize]
            .access
            .iter()
            .map(|&s| self.strings.name(s).to_string())
            .collect()
    }
}

/// The reason compaction gives a retention expiry's deletion.
pub const RETENTION_REASON_PREFIX: &str = "retention:";

/// Whether a deletion's reason marks a retention expiry.
pub fn is_retention_reason(reason: Option<&str>) -> bool {
    reason.is_some_and(|r| r.starts_with(RETENTION_REASON_PREFIX))
}

mod apply;
pub use apply::{FrameCheck, apply_frame, apply_frame_prepared, check_frame, prepare_frame};

#[cfg(test)]
mod tests;
