//! The checkpoint of the in-memory state: everything replaying the log
//! builds (record table, bitmaps, lineage, graph, per-tenant policy,
//! histories, the ledger, and each vector space's slot map), written at one
//! LSN so that an open loads it and replays only the log after it.
//!
//! Layout: a snapshot file (`derived/state.snap`, checksummed and replaced
//! atomically by `engram_storage::files`) whose body is the encoding below,
//! every integer little-endian, every collection written in a fixed order
//! (sorted), so the same state always encodes to the same bytes.
//!
//! ```text
//! body := anchor strings metas by_ext_free bitmaps lineage graph tenants
//!         status_log expiry_log ledger spaces
//! anchor := applied_lsn:u64 segment:u64 offset:u64 lsn:u64 anchor_crc:u32
//!           last_ingested_at:i64
//! ```
//!
//! The anchor names the last frame applied and its checksum (its payload's,
//! combined with the sealed segments before it: [`anchor_crc`]): an open
//! uses the checkpoint only if the log holds that very frame there, after
//! the same segments.
//!
//! The checkpoint is derived state: a damaged one, one of another format
//! version, or one whose lexical snapshot or vector files do not sit at the
//! same LSN is discarded, and the open replays the whole log instead.
//!
//! This module must never decide anything: it only writes and reads back
//! what the state holds.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap as HashMap;
use std::path::{Path, PathBuf};

use engram_storage::Backend;
use engram_storage::SegmentLog;
use engram_storage::files::{read_snapshot, write_snapshot};
use roaring::RoaringBitmap;

use crate::embed::Embedder;
use crate::error::Result;
use crate::id::RecordId;
use crate::lexical::Bm25Index;
use crate::model::{AssertionKind, RecordType, Status, WriterKind};
use crate::state::{
    Edge, ExpiryChange, Grants, Idx, Interner, LedgerEntry, LedgerWhat, Meta, State, StatusChange,
    Sym, TenantState,
};
use crate::vector::space::SpaceSlots;
use crate::vector::space::VectorSpaces;
use engram_storage::FrameLoc;

mod bytes;
use bytes::{R, W, corrupt};

/// Magic of the checkpoint snapshot.
pub const MAGIC: [u8; 8] = *b"ENGRSTAT";
/// Format version of the body (2: the ledger holds legal holds; 3: and
/// retention settings; 4: and grants; 5: whether each record's
/// `valid_from` was given; 6: the anchor checksum covers the segments
/// before the anchor's, [`anchor_crc`]). A checkpoint of an earlier
/// version, which lacks them, is not used and the log is replayed.
pub const VERSION: u32 = 6;

const STATUSES: [Status; 8] = [
    Status::Active,
    Status::Candidate,
    Status::Approved,
    Status::Rejected,
    Status::Superseded,
    Status::Retracted,
    Status::Stale,
    Status::Deleted,
];

fn status_code(s: Status) -> u8 {
    STATUSES
        .iter()
        .position(|x| *x == s)
        .and_then(|p| u8::try_from(p).ok())
        .unwrap_or(0)
}

/// The anchor checksum of the last frame `st` applied, read from `log`
/// (0 for an empty state): its payload checksum combined with
/// [`SegmentLog::sealed_fingerprint`] of the segments before it. It ties a
/// checkpoint (and the lexical snapshot) to the log it was taken of: a
/// checkpoint of another log with the same LSNs is refused, and so is one
/// of this store before a compaction rewrote a segment before the anchor's
/// (its record locations there moved; the anchor frame itself did not).
pub fn anchor_crc(log: &SegmentLog, st: &State) -> Result<u32> {
    match st.applied_loc {
        Some(loc) if loc.lsn != 0 => {
            let payload = log.read(loc.segment, loc.offset)?.header.payload_crc;
            Ok(combine(payload, log.sealed_fingerprint(loc.segment)))
        }
        _ => Ok(0),
    }
}

/// Whether `log` holds, at `(segment, offset)`, the frame of LSN `lsn`
/// whose [`anchor_crc`] is `crc` (the check both derived snapshots make
/// before they are used).
pub fn anchored(log: &SegmentLog, (segment, offset, lsn): (u64, u64, u64), crc: u32) -> bool {
    log.read(segment, offset).is_ok_and(|f| {
        f.header.lsn == lsn && combine(f.header.payload_crc, log.sealed_fingerprint(segment)) == crc
    })
}

fn combine(payload_crc: u32, sealed: u32) -> u32 {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&payload_crc.to_le_bytes());
    b[4..].copy_from_slice(&sealed.to_le_bytes());
    crc32c::crc32c(&b)
}

/// Encodes everything of `st` but its indexes (the lexical index and the
/// vector graphs have their own snapshots) and the slot maps in `spaces`;
/// `anchor_crc` is [`anchor_crc`] of the log `st` was built from.
pub fn encode(st: &State, spaces: &[SpaceSlots], anchor_crc: u32) -> Vec<u8> {
    let mut w = W::default();
    w.u64(st.applied_lsn);
    let loc = st.applied_loc.unwrap_or(FrameLoc {
        segment: 0,
        offset: 0,
        lsn: 0,
    });
    w.u64(loc.segment);
    w.u64(loc.offset);
    w.u64(loc.lsn);
    w.u32(anchor_crc);
    w.i64(st.last_ingested_at);
    w.strs(st.strings.names().iter());
    // record table
    w.len(st.metas.len());
    for m in &st.metas {
        w.id(m.id);
        w.u64(m.loc.segment);
        w.u64(m.loc.offset);
        w.u64(m.loc.lsn);
        w.u32(m.tenant);
        w.u8(m.rtype.code());
        w.u32(m.kind);
        w.u8(m.akind.map_or(u8::MAX, |k| {
            AssertionKind::ALL
                .iter()
                .position(|x| *x == k)
                .and_then(|p| u8::try_from(p).ok())
                .unwrap_or(0)
        }));
        w.u8(m.writer_kind.code());
        w.u32(m.writer);
        w.i64(m.occurred_at);
        w.i64(m.ingested_at);
        w.i64(m.valid_from);
        w.bool(m.valid_from_given);
        w.opt_i64(m.valid_until);
        w.u8(status_code(m.status));
        w.u32(m.retention);
        w.opt_u32(m.user);
        w.opt_u32(m.conversation);
        w.opt_u32(m.agent);
        w.u32s(&m.scope_labels);
        w.u32s(&m.access);
        w.opt_u32(m.supersedes);
        w.opt_u32(m.superseded_by);
        w.bool(m.has_text);
        w.bool(m.tombstone);
        w.opt_str(m.external_id.as_deref());
        w.opt_u32(m.subject);
        w.opt_u32(m.object);
        w.opt_u32(m.predicate);
    }
    // bitmaps
    w.sym_bitmaps(&st.bm_tenant);
    w.len(st.bm_status.len());
    for (s, b) in &st.bm_status {
        w.u8(status_code(*s));
        w.bitmap(b);
    }
    w.len(st.bm_type.len());
    for (t, b) in &st.bm_type {
        w.u8(t.code());
        w.bitmap(b);
    }
    for m in [
        &st.bm_kind,
        &st.bm_user,
        &st.bm_conversation,
        &st.bm_agent,
        &st.bm_scope_label,
        &st.bm_retention,
        &st.bm_access,
    ] {
        w.sym_bitmaps(m);
    }
    w.bitmap(&st.bm_bounded);
    // lineage and graph
    w.idx_lists(&st.sources);
    w.idx_lists(&st.dependents);
    w.idx_lists(&st.about);
    let mut keys: Vec<&Idx> = st.edges.keys().collect();
    keys.sort();
    w.len(keys.len());
    for k in keys {
        w.u32(*k);
        let es = &st.edges[k];
        w.len(es.len());
        for e in es {
            w.u32(e.relation);
            w.u32(e.other);
            w.bool(e.outgoing);
        }
    }
    // tenants
    let mut keys: Vec<&Sym> = st.tenants.keys().collect();
    keys.sort();
    w.len(keys.len());
    for k in keys {
        let t = &st.tenants[k];
        w.u32(*k);
        w.str(&t.name);
        w.u64(t.last_lsn);
        w.len(t.grants.len());
        for (p, g) in &t.grants {
            w.str(p);
            w.strs(g.labels.iter());
            w.strs(g.roles.iter());
        }
        w.strs(t.revoked_labels.iter());
        w.len(t.retention.len());
        for (c, p) in &t.retention {
            w.str(c);
            w.opt_i64(*p);
        }
        w.strs(t.holds.iter());
        let mut ext: Vec<(&std::sync::Arc<str>, &Idx)> = t.external_ids.iter().collect();
        ext.sort();
        w.len(ext.len());
        for (e, i) in ext {
            w.str(e);
            w.u32(*i);
        }
        let mut names: Vec<(&String, &Vec<Idx>)> = t.entity_names.iter().collect();
        names.sort();
        w.len(names.len());
        for (n, v) in names {
            w.str(n);
            w.u32s(v);
        }
        let labels: Vec<u32> = t.labels.iter().copied().collect();
        w.u32s(&labels);
        w.len(t.review_rules.len());
        for ((k, wk), on) in &t.review_rules {
            w.str(k);
            w.str(wk);
            w.bool(*on);
        }
    }
    // histories and the ledger
    w.len(st.status_log.len());
    for c in &st.status_log {
        w.i64(c.at);
        w.u32(c.idx);
        w.u8(status_code(c.from));
        w.u8(status_code(c.to));
    }
    w.len(st.expiry_log.len());
    for c in &st.expiry_log {
        w.i64(c.at);
        w.u32(c.idx);
        w.opt_i64(c.before);
    }
    w.len(st.ledger.len());
    for e in &st.ledger {
        w.u64(e.lsn);
        w.id(e.op_id);
        w.str(&e.tenant);
        w.i64(e.at);
        match &e.what {
            LedgerWhat::Delete { target, reason } => {
                w.u8(0);
                w.id(*target);
                w.opt_str(reason.as_deref());
            }
            LedgerWhat::Revoke {
                principal,
                label,
                role,
            } => {
                w.u8(1);
                w.opt_str(principal.as_deref());
                w.opt_str(label.as_deref());
                w.opt_str(role.as_deref());
            }
            LedgerWhat::Hold { scope, on } => {
                w.u8(2);
                w.str(scope);
                w.bool(*on);
            }
            LedgerWhat::Retention { class, period_ms } => {
                w.u8(3);
                w.str(class);
                w.opt_i64(*period_ms);
            }
            LedgerWhat::Grant {
                principal,
                label,
                role,
            } => {
                w.u8(4);
                w.opt_str(principal.as_deref());
                w.opt_str(label.as_deref());
                w.opt_str(role.as_deref());
            }
        }
    }
    // vector spaces' slot maps
    w.len(spaces.len());
    for s in spaces {
        w.str(&s.tenant);
        w.str(&s.model);
        w.u64(s.dim as u64);
        w.bool(s.derived);
        w.u32s(&s.slot_to_idx);
    }
    w.0
}

/// What [`decode`] gives back: the state's parts (the caller adds the
/// indexes) and the slot maps.
pub struct Decoded {
    /// State without indexes (lexical and vectors are left empty).
    pub parts: StateParts,
    /// Vector spaces' slot maps.
    pub spaces: Vec<SpaceSlots>,
}

/// The parts of a [`State`] a checkpoint holds.
pub struct StateParts {
    pub(crate) interner: Option<Interner>,
    pub(crate) by_id: HashMap<RecordId, Idx>,
    pub(crate) applied_lsn: u64,
    pub(crate) applied_loc: FrameLoc,
    pub(crate) anchor_crc: u32,
    pub(crate) last_ingested_at: i64,
    pub(crate) strings: Vec<String>,
    pub(crate) metas: Vec<Meta>,
    pub(crate) bm_tenant: HashMap<Sym, RoaringBitmap>,
    pub(crate) bm_status: BTreeMap<Status, RoaringBitmap>,
    pub(crate) bm_type: BTreeMap<RecordType, RoaringBitmap>,
    pub(crate) sym_maps: Vec<HashMap<Sym, RoaringBitmap>>,
    pub(crate) bm_bounded: RoaringBitmap,
    pub(crate) sources: HashMap<Idx, Vec<Idx>>,
    pub(crate) dependents: HashMap<Idx, Vec<Idx>>,
    pub(crate) about: HashMap<Idx, Vec<Idx>>,
    pub(crate) edges: HashMap<Idx, Vec<Edge>>,
    pub(crate) tenants: HashMap<Sym, TenantState>,
    pub(crate) status_log: Vec<StatusChange>,
    pub(crate) expiry_log: Vec<ExpiryChange>,
    pub(crate) ledger: Vec<LedgerEntry>,
}

fn status(c: u8) -> Result<Status> {
    STATUSES
        .get(c as usize)
        .copied()
        .ok_or_else(|| corrupt("status code"))
}

/// Decodes a checkpoint body.
pub fn decode(body: &[u8]) -> Result<Decoded> {
    let mut r = R { b: body, p: 0 };
    let applied_lsn = r.u64()?;
    let applied_loc = FrameLoc {
        segment: r.u64()?,
        offset: r.u64()?,
        lsn: r.u64()?,
    };
    let anchor_crc = r.u32()?;
    let last_ingested_at = r.i64()?;
    let strings = r.strs()?;
    let n = r.len()?;
    let mut metas = Vec::with_capacity(n.min(body.len() / 64 + 1));
    for _ in 0..n {
        let id = r.id()?;
        let loc = FrameLoc {
            segment: r.u64()?,
            offset: r.u64()?,
            lsn: r.u64()?,
        };
        let tenant = r.u32()?;
        let rtype = RecordType::from_code(r.u8()?).ok_or_else(|| corrupt("record type"))?;
        let kind = r.u32()?;
        let ak = r.u8()?;
        let akind = if ak == u8::MAX {
            None
        } else {
            Some(
                *AssertionKind::ALL
                    .get(ak as usize)
                    .ok_or_else(|| corrupt("assertion kind"))?,
            )
        };
        let writer_kind = WriterKind::from_code(r.u8()?).ok_or_else(|| corrupt("writer kind"))?;
        metas.push(Meta {
            id,
            loc,
            tenant,
            rtype,
            kind,
            akind,
            writer_kind,
            writer: r.u32()?,
            occurred_at: r.i64()?,
            ingested_at: r.i64()?,
            valid_from: r.i64()?,
            valid_from_given: r.bool()?,
            valid_until: r.opt_i64()?,
            status: status(r.u8()?)?,
            retention: r.u32()?,
            user: r.opt_u32()?,
            conversation: r.opt_u32()?,
            agent: r.opt_u32()?,
            scope_labels: r.u32s()?,
            access: r.u32s()?,
            supersedes: r.opt_u32()?,
            superseded_by: r.opt_u32()?,
            has_text: r.bool()?,
            tombstone: r.bool()?,
            external_id: r.opt_str()?.map(Into::into),
            subject: r.opt_u32()?,
            object: r.opt_u32()?,
            predicate: r.opt_u32()?,
        });
    }
    let bm_tenant = r.sym_bitmaps()?;
    let n = r.len()?;
    let mut bm_status = BTreeMap::new();
    for _ in 0..n {
        let s = status(r.u8()?)?;
        bm_status.insert(s, r.bitmap()?);
    }
    let n = r.len()?;
    let mut bm_type = BTreeMap::new();
    for _ in 0..n {
        let t = RecordType::from_code(r.u8()?).ok_or_else(|| corrupt("record type"))?;
        bm_type.insert(t, r.bitmap()?);
    }
    let mut sym_maps = Vec::with_capacity(7);
    for _ in 0..7 {
        sym_maps.push(r.sym_bitmaps()?);
    }
    let bm_bounded = r.bitmap()?;
    let sources = r.idx_lists()?;
    let dependents = r.idx_lists()?;
    let about = r.idx_lists()?;
    let n = r.len()?;
    let mut edges = HashMap::with_capacity_and_hasher(r.cap(n), Default::default());
    for _ in 0..n {
        let k = r.u32()?;
        let m = r.len()?;
        let mut v = Vec::with_capacity(r.cap(m));
        for _ in 0..m {
            v.push(Edge {
                relation: r.u32()?,
                other: r.u32()?,
                outgoing: r.bool()?,
            });
        }
        edges.insert(k, v);
    }
    let n = r.len()?;
    let mut tenants = HashMap::with_capacity_and_hasher(r.cap(n), Default::default());
    for _ in 0..n {
        let k = r.u32()?;
        let name = r.str()?;
        let last_lsn = r.u64()?;
        let mut grants = BTreeMap::new();
        for _ in 0..r.len()? {
            let p = r.str()?;
            let labels: BTreeSet<String> = r.strs()?.into_iter().collect();
            let roles: BTreeSet<String> = r.strs()?.into_iter().collect();
            grants.insert(p, Grants { labels, roles });
        }
        let revoked_labels = r.strs()?.into_iter().collect();
        let mut retention = BTreeMap::new();
        for _ in 0..r.len()? {
            let c = r.str()?;
            retention.insert(c, r.opt_i64()?);
        }
        let holds = r.strs()?.into_iter().collect();
        let mut external_ids: HashMap<std::sync::Arc<str>, Idx> = HashMap::default();
        for _ in 0..r.len()? {
            let e = r.str()?;
            external_ids.insert(e.into(), r.u32()?);
        }
        let mut entity_names = HashMap::default();
        for _ in 0..r.len()? {
            let n = r.str()?;
            entity_names.insert(n, r.u32s()?);
        }
        let labels = r.u32s()?.into_iter().collect();
        let mut review_rules = BTreeMap::new();
        for _ in 0..r.len()? {
            let a = r.str()?;
            let b = r.str()?;
            review_rules.insert((a, b), r.bool()?);
        }
        tenants.insert(
            k,
            TenantState {
                name,
                last_lsn,
                grants,
                revoked_labels,
                retention,
                holds,
                purged_external_ids: external_ids
                    .keys()
                    .filter(|k| k.starts_with(crate::state::PURGED_EXTERNAL_ID_PREFIX))
                    .count(),
                external_ids,
                entity_names,
                labels,
                review_rules,
            },
        );
    }
    let n = r.len()?;
    let mut status_log = Vec::with_capacity(r.cap(n));
    for _ in 0..n {
        status_log.push(StatusChange {
            at: r.i64()?,
            idx: r.u32()?,
            from: status(r.u8()?)?,
            to: status(r.u8()?)?,
        });
    }
    let n = r.len()?;
    let mut expiry_log = Vec::with_capacity(r.cap(n));
    for _ in 0..n {
        expiry_log.push(ExpiryChange {
            at: r.i64()?,
            idx: r.u32()?,
            before: r.opt_i64()?,
        });
    }
    let n = r.len()?;
    let mut ledger = Vec::with_capacity(r.cap(n));
    for _ in 0..n {
        let lsn = r.u64()?;
        let op_id = r.id()?;
        let tenant = r.str()?;
        let at = r.i64()?;
        let what = match r.u8()? {
            0 => LedgerWhat::Delete {
                target: r.id()?,
                reason: r.opt_str()?,
            },
            1 => LedgerWhat::Revoke {
                principal: r.opt_str()?,
                label: r.opt_str()?,
                role: r.opt_str()?,
            },
            2 => LedgerWhat::Hold {
                scope: r.str()?,
                on: r.bool()?,
            },
            3 => LedgerWhat::Retention {
                class: r.str()?,
                period_ms: r.opt_i64()?,
            },
            4 => LedgerWhat::Grant {
                principal: r.opt_str()?,
                label: r.opt_str()?,
                role: r.opt_str()?,
            },
            _ => return Err(corrupt("ledger entry")),
        };
        ledger.push(LedgerEntry {
            lsn,
            op_id,
            tenant,
            at,
            what,
        });
    }
    let n = r.len()?;
    let mut spaces = Vec::with_capacity(r.cap(n));
    for _ in 0..n {
        spaces.push(SpaceSlots {
            tenant: r.str()?,
            model: r.str()?,
            dim: usize::try_from(r.u64()?).map_err(|_| corrupt("dim"))?,
            derived: r.bool()?,
            slot_to_idx: r.u32s()?,
        });
    }
    if r.p != body.len() {
        return Err(corrupt("trailing bytes"));
    }
    Ok(Decoded {
        parts: StateParts {
            interner: None,
            by_id: HashMap::default(),
            applied_lsn,
            applied_loc,
            anchor_crc,
            last_ingested_at,
            strings,
            metas,
            bm_tenant,
            bm_status,
            bm_type,
            sym_maps,
            bm_bounded,
            sources,
            dependents,
            about,
            edges,
            tenants,
            status_log,
            expiry_log,
            ledger,
        },
        spaces,
    })
}

impl StateParts {
    /// Checks that every symbol and record index the parts hold points
    /// inside the string table and the record table (a checkpoint that
    /// passed its checksum but does not hold together is refused, never
    /// indexed out of bounds later).
    pub(crate) fn validate(&mut self) -> Result<()> {
        let n_str = self.strings.len() as u64;
        let n_rec = self.metas.len() as u64;
        let sym = |x: u32| -> Result<()> {
            if u64::from(x) < n_str {
                Ok(())
            } else {
                Err(corrupt("symbol out of range"))
            }
        };
        let idx = |x: u32| -> Result<()> {
            if u64::from(x) < n_rec {
                Ok(())
            } else {
                Err(corrupt("record index out of range"))
            }
        };
        let opt = |x: Option<u32>, f: &dyn Fn(u32) -> Result<()>| x.map_or(Ok(()), f);
        for m in &self.metas {
            sym(m.tenant)?;
            sym(m.kind)?;
            sym(m.writer)?;
            sym(m.retention)?;
            opt(m.user, &sym)?;
            opt(m.conversation, &sym)?;
            opt(m.agent, &sym)?;
            opt(m.predicate, &sym)?;
            m.scope_labels.iter().try_for_each(|&x| sym(x))?;
            m.access.iter().try_for_each(|&x| sym(x))?;
            opt(m.supersedes, &idx)?;
            opt(m.superseded_by, &idx)?;
            opt(m.subject, &idx)?;
            opt(m.object, &idx)?;
        }
        let bitmap = |b: &RoaringBitmap| match b.max() {
            Some(x) => idx(x),
            None => Ok(()),
        };
        for (k, b) in self.bm_tenant.iter().chain(self.sym_maps.iter().flatten()) {
            sym(*k)?;
            bitmap(b)?;
        }
        for b in self
            .bm_status
            .values()
            .chain(self.bm_type.values())
            .chain(std::iter::once(&self.bm_bounded))
        {
            bitmap(b)?;
        }
        for m in [&self.sources, &self.dependents, &self.about] {
            for (k, v) in m {
                idx(*k)?;
                v.iter().try_for_each(|&x| idx(x))?;
            }
        }
        for (k, es) in &self.edges {
            idx(*k)?;
            for e in es {
                // the relation record and the entity at the other end
                idx(e.relation)?;
                idx(e.other)?;
            }
        }
        for (k, t) in &self.tenants {
            sym(*k)?;
            t.external_ids.values().try_for_each(|&x| idx(x))?;
            t.entity_names
                .values()
                .flatten()
                .try_for_each(|&x| idx(x))?;
            t.labels.iter().try_for_each(|&x| sym(x))?;
        }
        self.status_log.iter().try_for_each(|c| idx(c.idx))?;
        self.expiry_log.iter().try_for_each(|c| idx(c.idx))?;
        if self.sym_maps.len() != 7 {
            return Err(corrupt("bitmap families"));
        }
        let strings = std::mem::take(&mut self.strings);
        self.interner = Some(
            Interner::from_names(strings.into_iter().map(Into::into).collect())
                .ok_or_else(|| corrupt("a string is listed twice"))?,
        );
        let mut by_id = HashMap::with_capacity_and_hasher(self.metas.len(), Default::default());
        for (i, m) in self.metas.iter().enumerate() {
            let i = Idx::try_from(i).map_err(|_| corrupt("record table too long"))?;
            if by_id.insert(m.id, i).is_some() {
                return Err(corrupt("a record id is listed twice"));
            }
        }
        self.by_id = by_id;
        Ok(())
    }

    /// The record id at a record index, if there is one.
    pub fn id_of(&self, idx: Idx) -> Option<RecordId> {
        self.metas.get(idx as usize).map(|m| m.id)
    }

    /// The state these parts describe, with its indexes: the lexical index
    /// (loaded from its own snapshot at the same LSN) and the vector spaces
    /// (which adopted the checkpoint's slot maps). Call only on parts that
    /// passed `StateParts::validate`.
    pub fn into_state(
        self,
        lexical: Bm25Index,
        vectors: VectorSpaces,
        embedder: Option<std::sync::Arc<dyn Embedder>>,
    ) -> Result<State> {
        let strings = self
            .interner
            .ok_or_else(|| corrupt("checkpoint used before validation"))?;
        let by_id = self.by_id;
        let [
            bm_kind,
            bm_user,
            bm_conversation,
            bm_agent,
            bm_scope_label,
            bm_retention,
            bm_access,
        ]: [HashMap<Sym, RoaringBitmap>; 7] = self
            .sym_maps
            .try_into()
            .map_err(|_| corrupt("bitmap families"))?;
        let mut st = State::new(lexical, self.applied_lsn, vectors, embedder);
        st.applied_lsn = self.applied_lsn;
        st.applied_loc = (self.applied_loc.lsn != 0).then_some(self.applied_loc);
        st.last_ingested_at = self.last_ingested_at;
        st.set_metas(self.metas);
        st.by_id = by_id;
        st.strings = strings;
        st.tenants = self.tenants;
        st.bm_tenant = self.bm_tenant;
        st.bm_status = self.bm_status;
        st.bm_type = self.bm_type;
        st.bm_kind = bm_kind;
        st.bm_user = bm_user;
        st.bm_conversation = bm_conversation;
        st.bm_agent = bm_agent;
        st.bm_scope_label = bm_scope_label;
        st.bm_retention = bm_retention;
        st.bm_access = bm_access;
        st.bm_bounded = self.bm_bounded;
        st.sources = self.sources;
        st.dependents = self.dependents;
        st.edges = self.edges;
        st.about = self.about;
        st.status_log = self.status_log;
        st.expiry_log = self.expiry_log;
        st.ledger_ids = self.ledger.iter().map(|e| e.op_id).collect();
        st.ledger = self.ledger;
        Ok(st)
    }
}

/// Path of the checkpoint in the store `dir`.
pub fn path(dir: &Path) -> PathBuf {
    crate::layout::checkpoint(dir)
}

/// Writes a checkpoint body encoded at `lsn` (atomically replacing the
/// previous one).
pub fn write(backend: &dyn Backend, dir: &Path, lsn: u64, body: &[u8]) -> Result<()> {
    write_snapshot(backend, &path(dir), MAGIC, VERSION, lsn, body)?;
    Ok(())
}

/// Reads the checkpoint of the store in `dir`: `Ok(None)` when there is
/// none, `Err(reason)` when there is one that cannot be used (damaged, of
/// another version, or not belonging to `log`: the frame it was taken at
/// is not where it says). The caller then replays the whole log.
pub fn load(
    backend: &dyn Backend,
    dir: &Path,
    log: &SegmentLog,
) -> std::result::Result<Option<Decoded>, String> {
    let snap = match read_snapshot(backend, &path(dir), MAGIC, VERSION) {
        Ok(None) => return Ok(None),
        Ok(Some(s)) => s,
        Err(e) => return Err(e.to_string()),
    };
    if snap.applied_lsn > log.last_lsn() {
        return Err(format!(
            "it is at LSN {}, past the end of the log (LSN {})",
            snap.applied_lsn,
            log.last_lsn()
        ));
    }
    let d = decode(snap.body.as_slice()).map_err(|e| e.to_string())?;
    let p = &d.parts;
    if p.applied_lsn != snap.applied_lsn || p.applied_loc.lsn != p.applied_lsn {
        return Err("its header and body disagree on the LSN".into());
    }
    let at = (p.applied_loc.segment, p.applied_loc.offset, p.applied_lsn);
    if p.applied_lsn > 0 && !anchored(log, at, p.anchor_crc) {
        return Err(format!(
            "the log holds no frame of LSN {} where it says, or its segments before it were \
             rewritten since (it was taken of another log, or before a compaction)",
            p.applied_lsn
        ));
    }
    Ok(Some(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_refused_never_a_panic() {
        for body in [&b""[..], &[0u8; 7][..], &[0xFFu8; 64][..], &[1u8; 300][..]] {
            assert!(decode(body).is_err());
        }
    }

    #[test]
    fn interner_round_trip_and_duplicates() {
        let i = Interner::from_names(vec!["a".into(), "b".into()]).expect("distinct");
        assert_eq!(i.get("b"), Some(1));
        assert_eq!(i.name(0), "a");
        assert!(Interner::from_names(vec!["a".into(), "a".into()]).is_none());
    }
}
