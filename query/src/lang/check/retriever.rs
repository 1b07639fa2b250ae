//! The checks of a `FIND`'s retrievers (names, `TOP`, `SIMILAR TO` with its
//! model, query and embedder, `EXPAND` with its seeds and cycles) and of
//! its fusion clauses (`FUSE`, `WEIGHTS`).

use super::*;

impl Checker<'_> {
    pub(super) fn retrievers(&mut self, f: &Find) {
        if f.retrievers.len() > RETRIEVERS_MAX {
            self.over(
                "retrievers",
                RETRIEVERS_MAX as u64,
                f.retrievers.len() as u64,
                f.retrievers[RETRIEVERS_MAX].span(),
            );
            // their names and parts are not worth checking one by one
            return;
        }
        // Names: first retriever of each name, by position.
        let mut by_name: HashMap<&str, usize> = HashMap::new();
        for (i, r) in f.retrievers.iter().enumerate() {
            if let Some(n) = r.explicit_name() {
                self.name(n);
            }
            match by_name.get(r.name()) {
                Some(&first) => {
                    let span = r.explicit_name().map_or(r.span(), |n| n.span);
                    let hint = if r.explicit_name().is_none()
                        && f.retrievers[first].explicit_name().is_none()
                    {
                        format!(
                            "an unnamed {} is called `{}`: name each with AS, e.g. `AS {}2`",
                            r.kind().keyword(),
                            r.name(),
                            r.name()
                        )
                    } else {
                        "each retriever needs its own name".to_string()
                    };
                    self.push_hint(
                        ErrorKind::DuplicateRetriever {
                            name: r.name().into(),
                        },
                        span,
                        hint,
                    );
                }
                None => {
                    by_name.insert(r.name(), i);
                }
            }
            if let Some(t) = r.top() {
                if let Some(n) = self.ok(self.bind.count(t)) {
                    self.within(&format!("TOP of `{}`", r.name()), n, 1, TOP_MAX, t.span());
                }
            }
            match r {
                Retriever::Similar(s) => self.similar(s),
                Retriever::Match(m) => {
                    if let Some(text) = self.ok(self.bind.string(&m.text)) {
                        self.text_value(
                            "the MATCH text",
                            &text,
                            QUERY_TEXT_BYTES_MAX,
                            m.text.span(),
                        );
                        if !text.trim().is_empty()
                            && text.len() <= QUERY_TEXT_BYTES_MAX
                            && tokens(&text).is_empty()
                        {
                            let hint = if text.chars().any(char::is_alphanumeric) {
                                format!(
                                    "keyword search drops words longer than {MAX_TOKEN_CHARS} characters, and every word here is longer"
                                )
                            } else {
                                "keyword search looks for letters and digits, and this text has none"
                                    .to_string()
                            };
                            self.push_hint(
                                ErrorKind::EmptyValue {
                                    what: "the MATCH text, as words,".into(),
                                },
                                m.text.span(),
                                hint,
                            );
                        }
                    }
                }
                Retriever::Recent(_) | Retriever::Around(_) => {}
                Retriever::Expand(e) => self.expand(f, i, e),
            }
        }
        self.expand_cycles(f);
    }

    fn similar(&mut self, s: &Similar) {
        let model = match &s.model {
            Some(m) => self.ok(self.bind.string(m)).map(|v| (v, m.span())),
            None => None,
        };
        if let Some((m, span)) = &model {
            self.text_value("the model id", m, NAME_BYTES_MAX, *span);
        }
        if let Some(min) = &s.min {
            if let Some(v) = self.ok(self.bind.number(min)) {
                if !(v.is_finite() && (-1.0..=1.0).contains(&v)) {
                    self.push(
                        ErrorKind::OutOfRange {
                            what: "MIN".into(),
                            got: v.to_string(),
                            range: "[-1, 1] (a similarity)".into(),
                        },
                        min.span(),
                    );
                }
            }
        }
        let Some(query) = self.ok(self.bind.query(&s.query)) else {
            return;
        };
        let available: Vec<String> = self.ctx.models.keys().cloned().collect();
        match query {
            QueryInput::Text(text) => {
                self.text_value(
                    "the SIMILAR TO text",
                    &text,
                    QUERY_TEXT_BYTES_MAX,
                    s.query.span(),
                );
                match (&self.ctx.embedder, &model) {
                    (Embedder::Absent, _) => self.push_hint(
                        ErrorKind::NoEmbedder {
                            reason: "the store has no embedder, so SIMILAR TO cannot embed a text".into(),
                        },
                        s.query.span(),
                        "pass the query vector as a parameter: SIMILAR TO $qvec MODEL '...'",
                    ),
                    (Embedder::Model(e), Some((m, span))) if e != m => self.push_hint(
                        ErrorKind::NoEmbedder {
                            reason: format!(
                                "the store's embedder makes '{e}' vectors, so a text cannot be compared in '{m}'"
                            ),
                        },
                        *span,
                        format!("drop MODEL, or pass a '{m}' vector as a parameter"),
                    ),
                    (Embedder::Unknown, Some((m, span)))
                        if self.models_known() && !self.ctx.models.contains_key(m) =>
                    {
                        self.unknown_model(m, *span, available);
                    }
                    _ => {}
                }
            }
            QueryInput::Vector(v) => {
                let name = match &s.query {
                    Arg::Param { name, .. } => name.clone(),
                    Arg::Lit { .. } => String::new(),
                };
                // the engine's one check of a query vector (not empty,
                // within the dimension limit, finite, not all zeros),
                // located here at the vector
                if let Err(e) = engram_engine::model::check_query_vector("query vector", &v) {
                    let kind = match e {
                        engram_engine::EngineError::LimitExceeded {
                            what, limit, got, ..
                        } => ErrorKind::LimitExceeded { what, limit, got },
                        engram_engine::EngineError::InvalidInput { reason, .. } => {
                            ErrorKind::InvalidParam { name, reason }
                        }
                        other => ErrorKind::InvalidParam {
                            name,
                            reason: other.to_string(),
                        },
                    };
                    self.push(kind, s.query.span());
                    return;
                }
                // nothing to check against; or no space at all and none
                // named (the engine answers that)
                if !self.models_known() || (model.is_none() && self.ctx.models.is_empty()) {
                    return;
                }
                let space = match &model {
                    Some((m, span)) => match self.ctx.models.get(m) {
                        Some(dims) => Some((m.clone(), *dims)),
                        None => {
                            self.unknown_model(m, *span, available);
                            None
                        }
                    },
                    None if self.ctx.models.len() == 1 => {
                        self.ctx.models.iter().next().map(|(m, d)| (m.clone(), *d))
                    }
                    None => {
                        // a space of the vector's dimensions, if there is one
                        let fits: Vec<&String> = self
                            .ctx
                            .models
                            .iter()
                            .filter(|(_, d)| **d == v.len())
                            .map(|(m, _)| m)
                            .collect();
                        let hint = match fits.as_slice() {
                            [] => format!(
                                "no space has {} dimensions (the vector's); spaces: {}",
                                v.len(),
                                self.ctx
                                    .models
                                    .iter()
                                    .map(|(m, d)| format!("'{m}' ({d})"))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                            [one] => {
                                format!("add MODEL '{one}' (the space of {} dimensions)", v.len())
                            }
                            many => format!(
                                "add MODEL with one of {} ({} dimensions each)",
                                many.iter()
                                    .map(|m| format!("'{m}'"))
                                    .collect::<Vec<_>>()
                                    .join(", "),
                                v.len()
                            ),
                        };
                        self.push_hint(
                            ErrorKind::ModelRequired { available },
                            s.query.span(),
                            hint,
                        );
                        None
                    }
                };
                if let Some((model, dims)) = space {
                    if dims != v.len() {
                        self.push(
                            ErrorKind::DimensionMismatch {
                                model,
                                expected: dims,
                                got: v.len(),
                            },
                            s.query.span(),
                        );
                    }
                }
            }
        }
    }

    fn expand(&mut self, f: &Find, idx: usize, e: &Expand) {
        if e.from.is_empty() {
            self.push(
                ErrorKind::EmptyList {
                    what: "EXPAND FROM".into(),
                },
                e.span,
            );
        }
        let mut n_seeds = 0usize;
        for seed in &e.from {
            match seed {
                Seed::Entity { name, .. } => {
                    if let Some(names) = self.ok(self.bind.strings_of(name)) {
                        if names.is_empty() {
                            self.push(
                                ErrorKind::EmptyList {
                                    what: "ENTITY".into(),
                                },
                                name.span(),
                            );
                        }
                        n_seeds += names.len();
                        for n in names {
                            self.text_value("the entity name", &n, NAME_BYTES_MAX, name.span());
                        }
                    }
                }
                Seed::Record(r) => n_seeds += self.record_ref(r, true),
                Seed::Retriever(n) => {
                    n_seeds += 1;
                    let at = f.retrievers.iter().position(|r| r.name() == n.value);
                    if n.value == f.retrievers[idx].name() {
                        // reported as a cycle by expand_cycles
                    } else if at.is_none() {
                        let e = self.unknown_retriever(f, n);
                        self.error(e);
                    } else if at.is_some_and(|at| at > idx) {
                        // the seeds are the hits found so far
                        self.push_hint(
                            ErrorKind::SeedOrder {
                                expand: f.retrievers[idx].name().to_string(),
                                seed: n.value.clone(),
                            },
                            n.span,
                            format!("write `{}` before the EXPAND", n.value),
                        );
                    }
                }
            }
        }
        if n_seeds > SEEDS_MAX {
            self.over("seeds of EXPAND", SEEDS_MAX as u64, n_seeds as u64, e.span);
        }
        if let Some(h) = &e.hops {
            if h.max == 0 {
                self.push(
                    ErrorKind::OutOfRange {
                        // (`HOPS 0..0`: 0 may start a range, not end it;
                        // `HOPS 0` is read as 1..0)
                        what: if h.min == 0 {
                            "HOPS (its upper end)".into()
                        } else {
                            "HOPS".into()
                        },
                        got: "0".into(),
                        range: format!("1..={HOPS_MAX}"),
                    },
                    h.span,
                );
            } else if h.min > h.max {
                self.push_hint(
                    ErrorKind::InvertedRange {
                        min: h.min,
                        max: h.max,
                    },
                    h.span,
                    format!("write the fewer hops first: HOPS {}..{}", h.max, h.min),
                );
            } else if h.max > HOPS_MAX {
                self.over("HOPS", HOPS_MAX, h.max, h.span);
            }
        }
        if let Some(v) = &e.via {
            self.str_list(v, "VIA", "a relation predicate");
        }
        if let Some(m) = &e.max {
            self.within(
                "MAX (nodes expanded)",
                m.value,
                1,
                EXPANDED_NODES_MAX,
                m.span,
            );
        }
    }

    /// `MODEL m` names no vector space the principal sees.
    fn unknown_model(&mut self, m: &str, span: Span, available: Vec<String>) {
        // (an overlong model has its own error, and is quoted nowhere: it
        // names no space whatever its bytes)
        if m.len() > engram_engine::model::limits::NAME_BYTES_MAX {
            return;
        }
        let hint = models_hint(&available);
        self.push_hint(
            ErrorKind::UnknownModel {
                model: m.to_string(),
                available,
            },
            span,
            hint,
        );
    }

    fn unknown_retriever(&self, f: &Find, n: &Name) -> LangError {
        let known: Vec<String> = f.retrievers.iter().map(|r| r.name().to_string()).collect();
        let close = known
            .iter()
            .find(|k| k.eq_ignore_ascii_case(&n.value))
            .or_else(|| {
                known.iter().find(|k| {
                    crate::lang::parser::edit_distance(k, &n.value) <= 2 && n.value.len() > 2
                })
            });
        let hint = match close {
            Some(k) => format!("did you mean `{k}`? (names are case-sensitive)"),
            None if known.is_empty() => "this statement has no retrievers".to_string(),
            None => format!(
                "the retrievers here are {}; an unnamed retriever is called similar, match, recent or expand",
                known
                    .iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        LangError::new(
            ErrorKind::UnknownRetriever {
                name: n.value.clone(),
                known,
            },
            n.span,
        )
        .with_hint(hint)
    }

    /// EXPAND retrievers seeded (directly or not) by their own hits.
    fn expand_cycles(&mut self, f: &Find) {
        // Edges from an EXPAND to the EXPANDs it is seeded by, with the
        // seed's span.
        let idx_of = |name: &str| f.retrievers.iter().position(|r| r.name() == name);
        let edges: Vec<Vec<(usize, Span)>> = f
            .retrievers
            .iter()
            .map(|r| match r {
                Retriever::Expand(e) => e
                    .from
                    .iter()
                    .filter_map(|s| match s {
                        Seed::Retriever(n) => idx_of(&n.value)
                            .filter(|&j| matches!(f.retrievers[j], Retriever::Expand(_)))
                            .map(|j| (j, n.span)),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            })
            .collect();
        // Iterative DFS with colours: 0 unvisited, 1 on the path, 2 done.
        let mut colour = vec![0u8; edges.len()];
        for root in 0..edges.len() {
            if colour[root] != 0 {
                continue;
            }
            let mut path: Vec<(usize, usize)> = vec![(root, 0)];
            colour[root] = 1;
            while let Some(&mut (node, ref mut next)) = path.last_mut() {
                if let Some(&(to, span)) = edges[node].get(*next) {
                    *next += 1;
                    match colour[to] {
                        0 => {
                            colour[to] = 1;
                            path.push((to, 0));
                        }
                        1 => {
                            let from = path.iter().position(|(n, _)| *n == to).unwrap_or(0);
                            let mut cycle: Vec<String> = path[from..]
                                .iter()
                                .map(|(n, _)| f.retrievers[*n].name().to_string())
                                .collect();
                            cycle.push(f.retrievers[to].name().to_string());
                            let hint = if cycle.len() == 2 {
                                "an EXPAND cannot start from its own hits".to_string()
                            } else {
                                "seed one of them from ENTITY, ID or a SIMILAR/MATCH/RECENT retriever".to_string()
                            };
                            self.push_hint(ErrorKind::ExpandCycle { cycle }, span, hint);
                        }
                        _ => {}
                    }
                } else {
                    colour[node] = 2;
                    path.pop();
                }
            }
        }
    }

    pub(super) fn fusion(&mut self, f: &Find) {
        if f.retrievers.is_empty() {
            let hint =
                "add a retriever (SIMILAR TO, MATCH, RECENT, EXPAND FROM) or drop the clause";
            if let Some(fu) = &f.fusion {
                self.push_hint(
                    ErrorKind::FusionWithoutRetrievers {
                        clause: "FUSE".into(),
                    },
                    fu.span(),
                    hint,
                );
            }
            if let (Some(first), Some(last)) = (f.weights.first(), f.weights.last()) {
                self.push_hint(
                    ErrorKind::FusionWithoutRetrievers {
                        clause: "WEIGHTS".into(),
                    },
                    first.span.to(last.span),
                    hint,
                );
            }
            return;
        }
        if let Some(Fusion::Rrf { k: Some(k), .. }) = &f.fusion {
            self.within("K", k.value, 1, RRF_K_MAX, k.span);
        }
        if f.weights.len() > RETRIEVERS_MAX {
            self.over(
                "weights",
                RETRIEVERS_MAX as u64,
                f.weights.len() as u64,
                f.weights[RETRIEVERS_MAX].name.span,
            );
            return;
        }
        let mut seen: Vec<&str> = Vec::new();
        for w in &f.weights {
            if seen.contains(&w.name.value.as_str()) {
                self.push(
                    ErrorKind::DuplicateWeight {
                        name: w.name.value.clone(),
                    },
                    w.name.span,
                );
            } else {
                seen.push(&w.name.value);
                if f.retriever(&w.name.value).is_none() {
                    let e = self.unknown_retriever(f, &w.name);
                    self.error(e);
                }
            }
            if let Some(v) = self.ok(self.bind.number(&w.value)) {
                let max = engram_engine::model::limits::WEIGHT_MAX;
                // a whole weight above the limit is a count past it; one
                // with a fraction (1000000.4) is out of range as written
                // (from 2^53 on, a double holds no longer every whole
                // number, and JSON readers no longer every count)
                if v.is_finite() && v > max && v.fract() == 0.0 && v < crate::EXACT_WHOLE_MAX {
                    self.over(
                        format!("the weight of `{}`", w.name.value),
                        max as u64,
                        v.ceil() as u64,
                        w.value.span(),
                    );
                } else if !(v.is_finite() && (0.0..=max).contains(&v)) {
                    self.push(
                        ErrorKind::OutOfRange {
                            what: format!("the weight of `{}`", w.name.value),
                            // (-1e308 in full is 309 digits)
                            got: if v.abs() >= 1e15 {
                                format!("{v:e}")
                            } else {
                                v.to_string()
                            },
                            range: format!("0..={}", engram_engine::model::limits::WEIGHT_MAX),
                        },
                        w.value.span(),
                    );
                }
            }
        }
        // Every retriever weighted 0 ranks nothing: the hits would come in
        // id order, each scored 0 (a recall refuses the same).
        let zero = |name: &str| {
            f.weights
                .iter()
                .find(|w| w.name.value == name)
                .and_then(|w| self.bind.number(&w.value).ok())
                .is_some_and(|v| v == 0.0)
        };
        if f.retrievers.iter().all(|r| zero(r.name()))
            && let Some(last) = f.weights.iter().rev().find(|w| zero(&w.name.value))
        {
            self.push_hint(
                ErrorKind::OutOfRange {
                    what: format!("the weight of `{}`", last.name.value),
                    got: "0".into(),
                    range: "0..=1000000 with one retriever's weight above 0".into(),
                },
                last.value.span(),
                "every retriever is weighted 0 (0 turns a retriever off), so nothing would rank the \
                 hits: give one a weight above 0, or leave it out of WEIGHTS to keep its default",
            );
        }
    }
}
