//! Retrievers and their options (`SIMILAR TO`, `MATCH`, `RECENT`,
//! `AROUND`, `EXPAND` with its seeds), and the fusion clauses (`FUSE`,
//! `WEIGHTS`).

use super::*;

impl Parser<'_> {
    /// `AS name` if next (and not `AS OF`), then the retriever is done.
    fn top_and_name(&mut self, top_idx: usize) -> PResult<(Option<Arg<u64>>, Option<Name>)> {
        let top = match self.eat_kw("TOP") {
            Some(_) => {
                self.reached(top_idx);
                Some(self.count_arg("a number of candidates after TOP")?)
            }
            None => None,
        };
        let name = if self.is_kw_at(0, "AS") && !self.is_kw_at(1, "OF") {
            self.bump();
            self.reached(top_idx + 1);
            Some(self.name("a retriever name after AS")?)
        } else {
            self.note("AS");
            None
        };
        Ok((top, name))
    }

    /// A retriever name: an identifier that is not a keyword (the default
    /// names excepted).
    fn name(&mut self, wanted: &str) -> PResult<Name> {
        let t = self.peek().clone();
        let Some(w) = self.word_at(0) else {
            self.note("a name");
            return Err(self.unexpected(wanted));
        };
        if is_keyword(w) && !DEFAULT_NAMES.contains(&w) {
            return Err(LangError::new(
                ErrorKind::ReservedName {
                    name: w.to_string(),
                },
                t.span,
            )
            .with_hint(format!(
                "pick another name, e.g. `{}_1`",
                w.to_ascii_lowercase()
            )));
        }
        self.bump();
        Ok(Spanned::new(w.to_string(), t.span))
    }

    fn start_options(&mut self, owner: &'static str, order: &'static [&'static str]) {
        self.enter_clause(C_RETRIEVERS);
        self.options = Some(Options {
            owner,
            order,
            reached: None,
        });
    }

    pub(super) fn similar(&mut self, start: Span) -> PResult<Retriever> {
        self.enter_clause(C_RETRIEVERS);
        self.expect_kw("TO", "TO after SIMILAR")?;
        let query = self.string_arg("a query text or a $parameter after SIMILAR TO")?;
        self.start_options("SIMILAR", SIMILAR_OPTIONS);
        let model = match self.eat_kw("MODEL") {
            Some(_) => {
                self.reached(0);
                Some(self.string_arg("a model id after MODEL")?)
            }
            None => None,
        };
        let min = match self.eat_kw("MIN") {
            Some(_) => {
                self.reached(1);
                Some(self.number_arg("a minimum similarity after MIN")?)
            }
            None => None,
        };
        let (top, name) = self.top_and_name(2)?;
        Ok(Retriever::Similar(Similar {
            query,
            model,
            min,
            top,
            name,
            span: self.span_from(start),
        }))
    }

    pub(super) fn match_retriever(&mut self, start: Span) -> PResult<Retriever> {
        self.enter_clause(C_RETRIEVERS);
        let text = self.string_arg("a query text or a $parameter after MATCH")?;
        self.start_options("MATCH", TOP_AS_OPTIONS);
        let (top, name) = self.top_and_name(0)?;
        Ok(Retriever::Match(Match {
            text,
            top,
            name,
            span: self.span_from(start),
        }))
    }

    pub(super) fn recent(&mut self, start: Span) -> PResult<Retriever> {
        self.only_top_and_name("RECENT", start)
            .map(Retriever::Recent)
    }

    pub(super) fn around(&mut self, start: Span) -> PResult<Retriever> {
        self.only_top_and_name("AROUND", start)
            .map(Retriever::Around)
    }

    /// A retriever whose only options are `TOP` and `AS`.
    fn only_top_and_name(&mut self, keyword: &'static str, start: Span) -> PResult<Recent> {
        self.start_options(keyword, TOP_AS_OPTIONS);
        let (top, name) = self.top_and_name(0)?;
        Ok(Recent {
            top,
            name,
            span: self.span_from(start),
        })
    }

    pub(super) fn expand(&mut self, start: Span) -> PResult<Retriever> {
        self.enter_clause(C_RETRIEVERS);
        self.expect_kw("FROM", "FROM after EXPAND")?;
        let mut from = Vec::new();
        loop {
            self.seeds(&mut from)?;
            if self.eat(TokenKind::Comma, "`,`").is_none() {
                break;
            }
        }
        self.start_options("EXPAND", EXPAND_OPTIONS);
        let hops = match self.eat_kw("HOPS") {
            Some(kw) => {
                self.reached(0);
                let a = self.integer("a number of hops after HOPS")?;
                let (min, max) = if self.eat(TokenKind::DotDot, "`..`").is_some() {
                    (a.value, self.integer("the most hops after `..`")?.value)
                } else {
                    (1, a.value)
                };
                Some(HopRange {
                    min,
                    max,
                    span: self.span_from(kw),
                })
            }
            None => None,
        };
        let via = match self.eat_kw("VIA") {
            Some(_) => {
                self.reached(1);
                Some(self.via_list()?)
            }
            None => None,
        };
        let direction = match self.eat_kw("DIRECTION") {
            Some(_) => {
                self.reached(2);
                let d = if let Some(s) = self.eat_kw("OUT") {
                    Spanned::new(Direction::Out, s)
                } else if let Some(s) = self.eat_kw("IN") {
                    Spanned::new(Direction::In, s)
                } else if let Some(s) = self.eat_kw("BOTH") {
                    Spanned::new(Direction::Both, s)
                } else {
                    return Err(self.unexpected("OUT, IN or BOTH after DIRECTION"));
                };
                Some(d)
            }
            None => None,
        };
        let max = match self.eat_kw("MAX") {
            Some(_) => {
                self.reached(3);
                Some(self.integer("a number of nodes after MAX")?)
            }
            None => None,
        };
        let (top, name) = self.top_and_name(4)?;
        Ok(Retriever::Expand(Expand {
            from,
            hops,
            via,
            direction,
            max,
            top,
            name,
            span: self.span_from(start),
        }))
    }

    /// After `VIA`: `'p'`, `$p`, or `('p1', $p2)`.
    fn via_list(&mut self) -> PResult<StrList> {
        if self.peek().kind == TokenKind::LParen {
            return self.list_after_in("a list of relation predicates after VIA");
        }
        if let TokenKind::Param(name) = &self.peek().kind {
            let name = name.clone();
            let span = self.bump();
            return Ok(StrList::Param { name, span });
        }
        self.note("`(`");
        let v = self.string_arg("a relation predicate or a list of them after VIA")?;
        Ok(StrList::Items {
            span: v.span(),
            items: vec![v],
        })
    }

    /// One seed group: `ENTITY v`, `ENTITY (v, ...)`, `ID v`, `ID (v, ...)`,
    /// an external id (string or parameter), or a retriever name.
    fn seeds(&mut self, out: &mut Vec<Seed>) -> PResult<()> {
        const WANTED: &str =
            "a seed: ENTITY and a name, ID and an id, an external id, or a retriever name";
        let kw = if let Some(s) = self.eat_kw("ENTITY") {
            Some((s, true))
        } else {
            self.eat_kw("ID").map(|s| (s, false))
        };
        if let Some((kw, entity)) = kw {
            let what = if entity {
                "an entity name"
            } else {
                "a record id"
            };
            let (args, grouped) = if self.peek().kind == TokenKind::LParen {
                self.bump();
                let mut args = Vec::new();
                loop {
                    args.push(self.string_arg(what)?);
                    if self.eat(TokenKind::Comma, "`,`").is_none() {
                        break;
                    }
                }
                self.expect(TokenKind::RParen, "`)`", "`)` to close the list")?;
                (args, true)
            } else {
                self.note("`(`");
                (vec![self.string_arg(what)?], false)
            };
            for a in args {
                let span = if grouped { a.span() } else { kw.to(a.span()) };
                out.push(if entity {
                    Seed::Entity { name: a, span }
                } else {
                    Seed::Record(RecordRef::Id { value: a, span })
                });
            }
            return Ok(());
        }
        let t = self.peek().clone();
        match t.kind {
            TokenKind::Str(_) | TokenKind::Param(_) => {
                let value = self.string_arg(WANTED)?;
                out.push(Seed::Record(RecordRef::External {
                    span: value.span(),
                    value,
                }));
                Ok(())
            }
            TokenKind::Word => {
                let w = self.text(&t);
                if is_keyword(w) && !DEFAULT_NAMES.contains(&w) {
                    self.note("a string");
                    self.note("a retriever name");
                    return Err(self.unexpected(WANTED));
                }
                self.bump();
                out.push(Seed::Retriever(Spanned::new(w.to_string(), t.span)));
                Ok(())
            }
            _ => {
                self.note("a string");
                self.note("a $parameter");
                self.note("a retriever name");
                Err(self.unexpected(WANTED))
            }
        }
    }

    pub(super) fn fusion(&mut self, start: Span) -> PResult<Fusion> {
        if self.eat_kw("RRF").is_some() {
            let k = match self.eat_kw("K") {
                Some(_) => Some(self.integer("the RRF constant after K")?),
                None => None,
            };
            return Ok(Fusion::Rrf {
                k,
                span: self.span_from(start),
            });
        }
        if self.eat_kw("LINEAR").is_some() {
            let normalize = if let Some(s) = self.eat_kw("MINMAX") {
                Some(Spanned::new(Normalize::MinMax, s))
            } else {
                self.eat_kw("ZSCORE")
                    .map(|s| Spanned::new(Normalize::ZScore, s))
            };
            return Ok(Fusion::Linear {
                normalize,
                span: self.span_from(start),
            });
        }
        Err(self.unexpected("RRF or LINEAR after FUSE"))
    }

    pub(super) fn weights(&mut self) -> PResult<Vec<Weight>> {
        self.expect(TokenKind::LParen, "`(`", "`(` after WEIGHTS")?;
        let mut out = Vec::new();
        loop {
            let name = self.name("a retriever name")?;
            self.expect(TokenKind::Eq, "`=`", "`=` after the retriever name")?;
            let value = self.number_arg("a weight")?;
            out.push(Weight {
                span: name.span.to(value.span()),
                name,
                value,
            });
            if self.eat(TokenKind::Comma, "`,`").is_none() {
                break;
            }
        }
        self.expect(TokenKind::RParen, "`)`", "`)` to close WEIGHTS")?;
        Ok(out)
    }
}
