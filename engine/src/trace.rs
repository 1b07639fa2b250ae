//! Lineage: from any record to everything it came from, and to everything
//! built on it.
//!
//! `trace(id)` returns a graph: the record, its **upstream** (sources,
//! recursively down to events; the version it corrects; for relations and
//! assertions, the entities they are about) and its **downstream** (records
//! derived from it, recursively; the version correcting it), plus the
//! derived retrieval artifacts of every record in the graph: its chunk
//! (Engram indexes each record's text as one chunk, boundaries `[0, len)`),
//! its vector in each space (indexed in the graph or still pending) and its
//! lexical index entry.
//!
//! Deleted records appear as tombstones (id, type, status) without content,
//! so a trace shows that something was there and was removed. A trace shows
//! only records whose labels the session holds: a record it may not read
//! is not in the graph at all (no node, no edge, no placeholder), so nothing
//! in a trace depends on records the principal cannot read. Tracing such a
//! record is "not found", exactly like a missing one.
//!
//! This module must never reveal anything of a record the session cannot
//! read, not even that it exists.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::Serialize;

use crate::db::Session;
use crate::error::Result;
use crate::id::RecordId;
use crate::model::{RecordRef, RecordType};
use crate::state::{Idx, State};
use crate::time::format_rfc3339;

/// Depth limit of a trace in each direction.
pub const TRACE_DEPTH_MAX: usize = 32;

/// A node of the lineage graph.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TraceNode {
    /// Record id.
    pub id: RecordId,
    /// Record type.
    pub record: &'static str,
    /// Kind.
    pub kind: String,
    /// Status.
    pub status: &'static str,
    /// `upstream`, `target` or `downstream`.
    pub side: &'static str,
    /// Hops from the target.
    pub depth: usize,
    /// External id (if readable).
    pub external_id: Option<String>,
    /// First 120 characters of the text (if readable).
    pub text: Option<String>,
    /// Valid time.
    pub occurred_at: Option<String>,
    /// Effective access labels.
    pub access: Vec<String>,
    /// Whether the session may read it (otherwise only id and type are shown).
    pub readable: bool,
    /// Content purged by compaction.
    pub tombstone: bool,
    /// Derived artifacts: chunk, vectors, lexical entry.
    pub artifacts: Vec<String>,
}

/// An edge of the lineage graph.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct TraceEdge {
    /// From.
    pub from: RecordId,
    /// To.
    pub to: RecordId,
    /// `source_of` (from is a source of to), `corrected_by`, `about` (to is
    /// an entity the from-record is about).
    pub relation: &'static str,
}

/// A lineage graph.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Trace {
    /// The record traced.
    pub target: RecordId,
    /// Nodes (target first, then upstream, then downstream).
    pub nodes: Vec<TraceNode>,
    /// Edges.
    pub edges: Vec<TraceEdge>,
    /// The lineage goes on past [`TRACE_DEPTH_MAX`] hops in some
    /// direction: records further away are not in `nodes`.
    pub truncated: bool,
    /// Where the walk stopped at the limit: each node with a record past
    /// it that is not listed, and its side (`truncated` is whether there is
    /// one), for a reader of one side only or whose walk passes no older
    /// version (`TRACE ... SOURCES`, `TRACE` without `INCLUDE SUPERSEDED`).
    #[serde(skip)]
    pub cut_at: Vec<CutAt>,
    /// Edges between listed records that the walk reached only at the
    /// limit (not in `edges`, which holds the steps it took), for a
    /// reader's own walk over the nodes.
    #[serde(skip)]
    pub limit_edges: Vec<TraceEdge>,
    /// The listed records that are older versions (superseded by a
    /// correction shown, not gone), which a walk passing no older version
    /// does not pass; the rule `cut_at`'s `current` follows.
    #[serde(skip)]
    pub older: Vec<RecordId>,
}

/// A node of a [`Trace`] at [`TRACE_DEPTH_MAX`] hops with a record past
/// the limit that the trace does not list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CutAt {
    /// The node.
    pub from: RecordId,
    /// On the upstream side (sources) rather than the downstream one.
    pub upstream: bool,
    /// Some record past it is no older version (a walk that passes none
    /// would go on there too).
    pub current: bool,
}

impl Session {
    /// The lineage graph of a record (see the module documentation).
    pub fn trace(&self, r: &RecordRef) -> Result<Trace> {
        self.db.check_open()?;
        let st = self.db.state();
        let target = self.resolve_in(&st, r)?;
        self.authorize(&st, crate::authz::Operation::Read, Some((target, r)))?;
        let held = self.held_labels(&st);
        let visible = |i: Idx| self.target(&st, i, &held).readable;
        let mut edges: BTreeSet<TraceEdge> = BTreeSet::new();
        let mut sides: BTreeMap<Idx, (&'static str, usize)> = BTreeMap::new();
        sides.insert(target, ("target", 0));
        // the steps past the limit: (from, past it, relation, upstream)
        let mut past: Vec<(Idx, Idx, &'static str, bool)> = Vec::new();
        // upstream
        let mut q = VecDeque::from([(target, 0usize)]);
        while let Some((i, d)) = q.pop_front() {
            let m = st.meta(i);
            let mut ups: Vec<(Idx, &'static str)> = Vec::new();
            if let Some(srcs) = st.sources.get(&i) {
                ups.extend(srcs.iter().map(|&s| (s, "source_of")));
            }
            if let Some(p) = m.supersedes {
                ups.push((p, "corrected_by"));
            }
            for e in [m.subject, m.object].into_iter().flatten() {
                ups.push((e, "about"));
            }
            for (u, rel) in ups {
                if !visible(u) {
                    continue;
                }
                if d >= TRACE_DEPTH_MAX {
                    // (said, not shown: the walk stops at the limit)
                    past.push((i, u, rel, true));
                    continue;
                }
                let (from, to) = if rel == "about" {
                    (st.meta(i).id, st.meta(u).id)
                } else {
                    (st.meta(u).id, st.meta(i).id)
                };
                edges.insert(TraceEdge {
                    from,
                    to,
                    relation: rel,
                });
                if let std::collections::btree_map::Entry::Vacant(v) = sides.entry(u) {
                    v.insert(("upstream", d + 1));
                    q.push_back((u, d + 1));
                }
            }
        }
        // downstream
        let mut q = VecDeque::from([(target, 0usize)]);
        while let Some((i, d)) = q.pop_front() {
            let m = st.meta(i);
            let mut downs: Vec<(Idx, &'static str)> = Vec::new();
            if let Some(ds) = st.dependents.get(&i) {
                downs.extend(ds.iter().map(|&x| (x, "source_of")));
            }
            if let Some(n) = m.superseded_by {
                downs.push((n, "corrected_by"));
            }
            for (x, rel) in downs {
                if !visible(x) {
                    continue;
                }
                if d >= TRACE_DEPTH_MAX {
                    past.push((i, x, rel, false));
                    continue;
                }
                edges.insert(TraceEdge {
                    from: st.meta(i).id,
                    to: st.meta(x).id,
                    relation: rel,
                });
                if let std::collections::btree_map::Entry::Vacant(v) = sides.entry(x) {
                    v.insert(("downstream", d + 1));
                    q.push_back((x, d + 1));
                }
            }
        }
        // what is past its retention period, asked once for every node
        let expired = self.past_retention_now(&st);
        // An older version: one a correction supersedes that is shown (not
        // gone, and readable), whatever its own status shows (past
        // retention it shows `deleted`); a version whose correction is
        // hidden shows `superseded`, and a deleted chain shows every
        // version as the tombstone it is.
        let older = |x: Idx| match st.meta(x).superseded_by {
            None => false,
            Some(n) => !st.shown_gone(x, &expired) || (visible(n) && !st.shown_gone(n, &expired)),
        };
        let mut cut_at: Vec<CutAt> = Vec::new();
        let mut limit_edges: BTreeSet<TraceEdge> = BTreeSet::new();
        // A step past the limit to a record listed anyway (on either side)
        // cuts nothing: its edge is kept aside for a reader's own walk. To
        // any other record it cuts the walk there, and for a walk passing no
        // older version too when that record is none.
        for (i, x, rel, upstream) in past {
            let (mi, mx) = (st.meta(i), st.meta(x));
            if sides.contains_key(&x) {
                let (from, to) = match (upstream, rel) {
                    (true, "about") | (false, _) => (mi.id, mx.id),
                    (true, _) => (mx.id, mi.id),
                };
                limit_edges.insert(TraceEdge {
                    from,
                    to,
                    relation: rel,
                });
                continue;
            }
            let current = !older(x);
            // (the steps from one record on one side come one after another)
            match cut_at
                .last_mut()
                .filter(|c| c.from == mi.id && c.upstream == upstream)
            {
                Some(c) => c.current |= current,
                None => cut_at.push(CutAt {
                    from: mi.id,
                    upstream,
                    current,
                }),
            }
        }
        let mut order: Vec<(Idx, &'static str, usize)> =
            sides.into_iter().map(|(i, (s, d))| (i, s, d)).collect();
        let rank = |s: &str| match s {
            "target" => 0,
            "upstream" => 1,
            _ => 2,
        };
        order.sort_by(|a, b| {
            rank(a.1)
                .cmp(&rank(b.1))
                .then(a.2.cmp(&b.2))
                .then_with(|| st.meta(a.0).id.cmp(&st.meta(b.0).id))
        });
        let older_listed: Vec<RecordId> = order
            .iter()
            .filter(|&&(i, _, _)| older(i))
            .map(|&(i, _, _)| st.meta(i).id)
            .collect();
        let mut nodes = Vec::with_capacity(order.len());
        for (i, side, depth) in order {
            nodes.push(self.trace_node(&st, (&held, &expired), i, (side, depth))?);
        }
        Ok(Trace {
            target: st.meta(target).id,
            nodes,
            edges: edges.into_iter().collect(),
            truncated: !cut_at.is_empty(),
            cut_at,
            limit_edges: limit_edges.into_iter().collect(),
            older: older_listed,
        })
    }

    /// One node of a trace: `held` are the principal's labels, `expired`
    /// the tenant's records past their retention period
    /// ([`State::past_retention_set`]), both asked once per trace.
    fn trace_node(
        &self,
        st: &State,
        (held, expired): (&BTreeSet<String>, &roaring::RoaringBitmap),
        i: Idx,
        (side, depth): (&'static str, usize),
    ) -> Result<TraceNode> {
        let m = st.meta(i);
        let now = self.db.now();
        // Only visible records reach here (same tenant, labels held); a
        // deleted one, or one past its retention period, shows as a
        // tombstone without content.
        let readable = self.can_read_listed(st, i, held, expired);
        // (an ended current record is historical, as retrieval shows it)
        let (kind, status) = st.shown_kind_and_status(i, m.status, (now, None), expired);
        let mut node = TraceNode {
            id: m.id,
            record: m.rtype.name(),
            kind: kind.to_string(),
            status,
            side,
            depth,
            external_id: None,
            text: None,
            occurred_at: None,
            access: st.access_names(i),
            readable,
            tombstone: m.tombstone,
            artifacts: Vec::new(),
        };
        if !readable {
            return Ok(node);
        }
        let (ext, text) = self.db.hit_content(st, i)?;
        node.external_id = ext.as_deref().map(str::to_string);
        node.occurred_at = Some(format_rfc3339(m.occurred_at));
        if let Some(t) = &text {
            node.artifacts
                .push(format!("chunk 0: bytes [0, {})", t.len()));
            node.text = Some(t.chars().take(120).collect());
            if m.has_text {
                node.artifacts.push("lexical index entry".into());
            }
        }
        for s in st.vectors.of_tenant(self.principal.tenant()) {
            if let Some(slot) = s.slot_of(i) {
                let (pending, indexable) = s.pending_and_indexable();
                let in_graph = s.len() - pending;
                node.artifacts.push(format!(
                    "vector '{}' slot {slot} ({})",
                    s.model,
                    if (slot as usize) < in_graph {
                        "in the HNSW graph"
                    } else if (slot as usize) < in_graph + indexable {
                        "pending indexing"
                    } else {
                        "waiting for its HNSW batch to fill; searched exactly"
                    }
                ));
            }
        }
        if m.rtype == RecordType::Entity {
            // Edges the principal could follow: relations it may read
            // (labels held), not deleted.
            let n = st.edges.get(&i).map_or(0, |e| {
                e.iter()
                    .filter(|e| self.can_read_listed(st, e.relation, held, expired))
                    .count()
            });
            node.artifacts
                .push(format!("graph node with {n} relation edge(s)"));
        }
        Ok(node)
    }
}

/// Renders a trace as an indented tree: the target, then its upstream
/// records under the record each one is a source of (or that is about
/// it), then its downstream records under the record each is built on.
/// A record reached from several is shown once, under the first of them;
/// the edge list after the tree holds every link.
pub fn render_trace(t: &Trace) -> String {
    // the nodes each edge links, by position (either direction)
    let at: std::collections::HashMap<RecordId, usize> =
        t.nodes.iter().enumerate().map(|(k, n)| (n.id, k)).collect();
    let mut linked: Vec<Vec<usize>> = vec![Vec::new(); t.nodes.len()];
    for e in &t.edges {
        if let (Some(&a), Some(&b)) = (at.get(&e.from), at.get(&e.to)) {
            linked[a].push(b);
            linked[b].push(a);
        }
    }
    // each node's parent: the first node one hop nearer the target on its
    // side (the target for the first hop) that an edge links it to
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); t.nodes.len()];
    let target = t.nodes.iter().position(|n| n.side == "target");
    for (k, n) in t.nodes.iter().enumerate() {
        if n.side == "target" {
            continue;
        }
        let parent = linked[k]
            .iter()
            .copied()
            .filter(|&q| {
                let p = &t.nodes[q];
                p.depth + 1 == n.depth && (p.side == n.side || p.side == "target")
            })
            .min()
            .or(target);
        if let Some(p) = parent {
            children[p].push(k);
        }
    }
    let mut out = String::new();
    if let Some(root) = target {
        let mut stack = vec![root];
        while let Some(k) = stack.pop() {
            render_node(&mut out, &t.nodes[k]);
            // upstream before downstream, each in node order
            stack.extend(children[k].iter().rev());
        }
    }
    if t.truncated {
        out.push_str(&format!(
            "(the lineage goes on past {TRACE_DEPTH_MAX} hops: records further away are not shown)\n"
        ));
    }
    out.push_str("edges:\n");
    for e in &t.edges {
        out.push_str(&format!("  {} -{}-> {}\n", e.from, e.relation, e.to));
    }
    out
}

fn render_node(out: &mut String, n: &TraceNode) {
    let indent = "  ".repeat(n.depth);
    let marker = match n.side {
        "target" => "*",
        "upstream" => "^",
        _ => "v",
    };
    out.push_str(&format!(
        "{indent}{marker} {} {} {} [{}]{}{}\n",
        n.id,
        n.record,
        n.kind,
        n.status,
        n.external_id
            .as_ref()
            .map(|e| format!(" ext={e}"))
            .unwrap_or_default(),
        if n.tombstone {
            " (tombstone: content purged)"
        } else if !n.readable {
            " (not readable)"
        } else {
            ""
        }
    ));
    if let Some(t) = &n.text {
        // quoted with its quotes and line breaks escaped: stored text
        // cannot fake a line of the trace
        out.push_str(&format!("{indent}    \"{}\"\n", t.escape_debug()));
    }
    for a in &n.artifacts {
        out.push_str(&format!("{indent}    - {a}\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stored text is data: a quote or a line break in it cannot make the
    /// rendered trace show a node or an edge that is not there.
    #[test]
    fn text_cannot_fake_a_line_of_the_rendered_trace() {
        let node = TraceNode {
            id: RecordId(1),
            record: "event",
            kind: "note".into(),
            status: "active",
            side: "target",
            depth: 0,
            external_id: None,
            text: Some("ok\"\n  v 01FAKE summary summary [approved] ext=fake".into()),
            occurred_at: None,
            access: vec![],
            readable: true,
            tombstone: false,
            artifacts: vec![],
        };
        let t = Trace {
            target: RecordId(1),
            nodes: vec![node],
            edges: vec![],
            truncated: false,
            cut_at: vec![],
            limit_edges: vec![],
            older: vec![],
        };
        let out = render_trace(&t);
        assert_eq!(out.lines().count(), 3, "{out}");
        assert!(out.contains(r#""ok\"\n  v 01FAKE"#), "{out}");
    }

    fn node(id: u128, side: &'static str, depth: usize) -> TraceNode {
        TraceNode {
            id: RecordId(id),
            record: "summary",
            kind: "summary".into(),
            status: "approved",
            side,
            depth,
            external_id: None,
            text: None,
            occurred_at: None,
            access: vec![],
            readable: true,
            tombstone: false,
            artifacts: vec![],
        }
    }

    /// A record is drawn under the record it is built on, not under the
    /// one listed just before it at its depth (the tree used to be drawn
    /// depth by depth).
    #[test]
    fn a_rendered_trace_draws_each_record_under_its_parent() {
        let edge = |from: u128, to: u128| TraceEdge {
            from: RecordId(from),
            to: RecordId(to),
            relation: "source_of",
        };
        let t = Trace {
            target: RecordId(1),
            // 3 and 4 are built on the target; 5 on 3 only
            nodes: vec![
                node(1, "target", 0),
                node(3, "downstream", 1),
                node(4, "downstream", 1),
                node(5, "downstream", 2),
            ],
            edges: vec![edge(1, 3), edge(1, 4), edge(3, 5)],
            truncated: false,
            cut_at: vec![],
            limit_edges: vec![],
            older: vec![],
        };
        let out = render_trace(&t);
        let ids: Vec<String> = out
            .lines()
            .take(4)
            .map(|l| l.split_whitespace().nth(1).unwrap().to_string())
            .collect();
        let id = |n: u128| RecordId(n).to_string();
        assert_eq!(ids, [id(1), id(3), id(5), id(4)], "{out}");
        assert!(!out.contains("past 32 hops"), "{out}");
        let cut = Trace {
            truncated: true,
            ..t
        };
        assert!(render_trace(&cut).contains("past 32 hops"));
    }
}
