//! Planning: a checked [`Statement`] and its parameters become the engine's
//! plain request types, so a statement runs on exactly the path every other
//! request takes (`Session::search`, `Session::trace`).
//!
//! - `FIND` becomes a [`SearchRequest`]: targets, `KIND`, `WHERE` and the
//!   default status compile into one filter expression (evaluated as a
//!   bitmap before any scoring); each retriever keeps its name, budget and
//!   weight; fusion, limit and lineage attachment carry over.
//! - `TRACE` becomes a record reference with a direction, a depth and
//!   whether superseded versions count.
//!
//! This module must never touch a store or read a clock: `now` comes from
//! the caller's [`Binder`].

use engram_engine::retrieval::{
    Attach, Direction as EDirection, FilterExpr, Fusion as EFusion, Norm, RetrieverParams,
    RetrieverSpec, SearchRequest, Seed as ESeed, StatusClass,
    eligibility::{CmpOp as ECmp, NameField, TimeField as ETime},
};
use engram_engine::{RecordId, RecordRef as ERef, RecordType as ERecordType};

use super::ast::{
    self, Body, CmpOp, Direction, Expr, Find, Fusion, Normalize, RecordRef, RecordStatus,
    Retriever, ReturnField, Seed, Statement, TextField, TimeField, Trace, TraceDirection,
};
use super::error::LangError;
use super::params::{Binder, QueryInput};

/// What a statement runs as.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// A search.
    Find {
        /// The request.
        request: SearchRequest,
        /// The fields of each row.
        returns: Vec<ReturnField>,
    },
    /// A lineage walk.
    Trace {
        /// The record.
        target: ERef,
        /// Which way.
        direction: TraceDirection,
        /// Levels.
        depth: usize,
        /// Whether superseded versions are shown.
        include_superseded: bool,
        /// The fields of each row.
        returns: Vec<ReturnField>,
    },
}

/// Plans a checked statement (run [`super::check()`] first: this trusts its
/// ranges and names, and fails only on parameters).
pub fn plan(stmt: &Statement, b: &Binder<'_>) -> Result<Plan, LangError> {
    match &stmt.body {
        Body::Find(f) => Ok(Plan::Find {
            request: find(f, b)?,
            returns: f.projection(),
        }),
        Body::Trace(t) => trace(t, b),
    }
}

fn record_type(t: ast::RecordType) -> ERecordType {
    t.to_engine()
}

fn find(f: &Find, b: &Binder<'_>) -> Result<SearchRequest, LangError> {
    let mut terms = Vec::new();
    if !f.targets.is_empty() {
        let mut types: Vec<ERecordType> = f.targets.iter().map(|t| record_type(t.value)).collect();
        types.sort();
        types.dedup();
        terms.push(FilterExpr::RecordIn { types });
    }
    if let Some(k) = &f.kinds {
        terms.push(FilterExpr::In {
            field: NameField::Kind,
            values: sorted(b.strings(k)?),
        });
    }
    if let Some(e) = &f.filter {
        terms.push(expr(e, b)?);
    }
    let filter = match terms.len() {
        0 => FilterExpr::All,
        _ => FilterExpr::And { terms },
    };
    let limit = match &f.limit {
        Some(l) => b.count(l)?,
        None => ast::DEFAULT_LIMIT,
    };
    let mut retrievers = Vec::with_capacity(f.retrievers.len());
    for r in &f.retrievers {
        let name = r.name().to_string();
        let top = match r.top() {
            Some(t) => b.count(t)?,
            None => ast::default_top(limit),
        } as usize;
        let weight = match f.weights.iter().find(|w| w.name.value == name) {
            Some(w) => b.number(&w.value)?,
            None => r.kind().default_weight(),
        };
        let params = match r {
            Retriever::Similar(s) => {
                let (text, vector) = match b.query(&s.query)? {
                    QueryInput::Text(t) => (Some(t), None),
                    QueryInput::Vector(v) => (None, Some(v)),
                };
                RetrieverParams::Similar {
                    text,
                    vector: vector.map(Into::into),
                    model: s.model.as_ref().map(|m| b.string(m)).transpose()?,
                    min: s.min.as_ref().map(|m| b.number(m)).transpose()?,
                    ef: None,
                }
            }
            Retriever::Match(m) => RetrieverParams::Match {
                text: Some(b.string(&m.text)?),
            },
            Retriever::Recent(_) => RetrieverParams::Recent,
            Retriever::Around(_) => {
                RetrieverParams::Episodic(engram_engine::retrieval::episodic::DEFAULT)
            }
            Retriever::Expand(e) => {
                let mut seeds = Vec::new();
                for s in &e.from {
                    match s {
                        Seed::Entity { name, .. } => {
                            for n in b.strings_of(name)? {
                                seeds.push(ESeed::Entity { name: n });
                            }
                        }
                        // (a list parameter is spliced in, as the checker
                        // counted it)
                        Seed::Record(r) => {
                            for v in b.strings_of(r.value())? {
                                seeds.push(ESeed::Record {
                                    reference: named(r, v)?,
                                });
                            }
                        }
                        Seed::Retriever(n) => seeds.push(ESeed::Retriever {
                            name: n.value.clone(),
                        }),
                    }
                }
                let hops = e.hops.map_or(ast::DEFAULT_HOPS, |h| (h.min, h.max));
                RetrieverParams::Expand {
                    seeds,
                    hops: (hops.0 as usize, hops.1 as usize),
                    via: match &e.via {
                        Some(v) => sorted(b.strings(v)?),
                        None => Vec::new(),
                    },
                    direction: match e.direction.as_ref().map(|d| d.value) {
                        Some(Direction::Out) => EDirection::Out,
                        Some(Direction::In) => EDirection::In,
                        Some(Direction::Both) | None => EDirection::Both,
                    },
                    max_nodes: e
                        .max
                        .as_ref()
                        .map_or(ast::DEFAULT_EXPANDED_NODES, |m| m.value)
                        as usize,
                }
            }
        };
        retrievers.push(RetrieverSpec {
            name,
            top,
            weight,
            params,
        });
    }
    let fusion = match &f.fusion {
        None => EFusion::Rrf {
            k: ast::DEFAULT_RRF_K as f64,
        },
        Some(Fusion::Rrf { k, .. }) => EFusion::Rrf {
            k: k.as_ref().map_or(ast::DEFAULT_RRF_K, |k| k.value) as f64,
        },
        Some(Fusion::Linear { normalize, .. }) => EFusion::Linear {
            norm: match normalize.as_ref().map(|n| n.value) {
                Some(Normalize::ZScore) => Norm::ZScore,
                Some(Normalize::MinMax) | None => Norm::MinMax,
            },
        },
    };
    let depth = |a: &Option<ast::Attach>| {
        a.as_ref().map(|a| {
            a.depth
                .as_ref()
                .map_or(ast::DEFAULT_ATTACH_DEPTH, |d| d.value) as usize
        })
    };
    Ok(SearchRequest {
        filter,
        as_of: f.as_of.as_ref().map(|t| b.time(t)).transpose()?,
        valid_at: f.valid_at.as_ref().map(|t| b.time(t)).transpose()?,
        retrievers,
        fusion,
        limit: limit as usize,
        attach: Attach {
            sources: depth(&f.sources),
            derivatives: depth(&f.derivatives),
        },
        // text is read from the log only when a result shows it
        with_text: f.projection().contains(&ast::ReturnField::Text),
    })
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v.dedup();
    v
}

fn expr(e: &Expr, b: &Binder<'_>) -> Result<FilterExpr, LangError> {
    let not = |negated: bool, x: FilterExpr| {
        if negated {
            FilterExpr::Not { term: Box::new(x) }
        } else {
            x
        }
    };
    Ok(match e {
        Expr::And { items, .. } => FilterExpr::And {
            terms: items.iter().map(|x| expr(x, b)).collect::<Result<_, _>>()?,
        },
        Expr::Or { items, .. } => FilterExpr::Or {
            terms: items.iter().map(|x| expr(x, b)).collect::<Result<_, _>>()?,
        },
        Expr::Not { operand, .. } => FilterExpr::Not {
            term: Box::new(expr(operand, b)?),
        },
        Expr::Text(p) => not(
            p.negated,
            FilterExpr::In {
                field: match p.field {
                    TextField::ScopeUser => NameField::User,
                    TextField::ScopeConversation => NameField::Conversation,
                    TextField::ScopeAgent => NameField::Agent,
                    TextField::ScopeLabel => NameField::ScopeLabel,
                    TextField::Kind => NameField::Kind,
                },
                values: sorted(b.strings(&p.values)?),
            },
        ),
        Expr::Record(p) => {
            let mut types: Vec<ERecordType> =
                p.values.iter().map(|t| record_type(t.value)).collect();
            types.sort();
            types.dedup();
            not(p.negated, FilterExpr::RecordIn { types })
        }
        Expr::Status(p) => {
            let mut statuses: Vec<StatusClass> = p
                .values
                .iter()
                .filter_map(|s| match s.value {
                    RecordStatus::Active => Some(StatusClass::Active),
                    RecordStatus::Superseded => Some(StatusClass::Superseded),
                    RecordStatus::Historical => Some(StatusClass::Historical),
                    RecordStatus::Stale => Some(StatusClass::Stale),
                    // refused by the checker; never selectable
                    RecordStatus::Deleted => None,
                })
                .collect();
            statuses.sort();
            statuses.dedup();
            not(p.negated, FilterExpr::StatusIn { statuses })
        }
        Expr::Time(p) => FilterExpr::Time {
            field: match p.field {
                TimeField::OccurredAt => ETime::OccurredAt,
                TimeField::IngestedAt => ETime::IngestedAt,
            },
            cmp: match p.op {
                CmpOp::Lt => ECmp::Lt,
                CmpOp::Le => ECmp::Le,
                CmpOp::Gt => ECmp::Gt,
                CmpOp::Ge => ECmp::Ge,
            },
            at_ms: b.time(&p.value)?,
        },
    })
}

fn reference(r: &RecordRef, b: &Binder<'_>) -> Result<ERef, LangError> {
    named(r, b.string(r.value())?)
}

/// The record `r` names by its bound value `v`.
fn named(r: &RecordRef, v: String) -> Result<ERef, LangError> {
    match r {
        RecordRef::Id { span, .. } => v.parse::<RecordId>().map(ERef::Id).map_err(|_| {
            LangError::new(
                super::error::ErrorKind::InvalidRecordId { text: v.clone() },
                *span,
            )
        }),
        RecordRef::External { .. } => Ok(ERef::External(v)),
    }
}

fn trace(t: &Trace, b: &Binder<'_>) -> Result<Plan, LangError> {
    Ok(Plan::Trace {
        target: reference(&t.target, b)?,
        direction: t.direction.value,
        depth: t
            .depth
            .as_ref()
            .map_or(ast::DEFAULT_TRACE_DEPTH, |d| d.value) as usize,
        include_superseded: t.include_superseded,
        returns: t.projection(),
    })
}
