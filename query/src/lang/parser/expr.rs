//! `WHERE`: boolean expressions with bounded nesting, and their predicates
//! on text, record type, status and time.

use super::*;

impl Parser<'_> {
    fn check_depth(&self, depth: usize, span: Span) -> PResult<()> {
        if depth > NESTING_DEPTH_MAX {
            return Err(LangError::new(
                ErrorKind::LimitExceeded {
                    what: "nesting depth of the WHERE expression".into(),
                    limit: NESTING_DEPTH_MAX as u64,
                    got: depth as u64,
                },
                span,
            ));
        }
        Ok(())
    }

    pub(super) fn or_expr(&mut self) -> PResult<(Expr, usize)> {
        let (first, mut depth) = self.and_expr()?;
        if !self.is_kw_at(0, "OR") {
            self.note("OR");
            return Ok((first, depth));
        }
        let mut items = vec![first];
        while self.eat_kw("OR").is_some() {
            let (e, d) = self.and_expr()?;
            depth = depth.max(d);
            items.push(e);
        }
        let span = items[0].span().to(items[items.len() - 1].span());
        self.check_depth(depth + 1, span)?;
        Ok((Expr::Or { items, span }, depth + 1))
    }

    fn and_expr(&mut self) -> PResult<(Expr, usize)> {
        let (first, mut depth) = self.not_expr()?;
        if !self.is_kw_at(0, "AND") {
            self.note("AND");
            return Ok((first, depth));
        }
        let mut items = vec![first];
        while self.eat_kw("AND").is_some() {
            let (e, d) = self.not_expr()?;
            depth = depth.max(d);
            items.push(e);
        }
        let span = items[0].span().to(items[items.len() - 1].span());
        self.check_depth(depth + 1, span)?;
        Ok((Expr::And { items, span }, depth + 1))
    }

    /// Enters a `NOT` or a parenthesis: the levels entered so far plus the
    /// predicate that must still come below them are checked, so a bracket
    /// pair costs a level exactly as a `NOT` does.
    fn enter_nesting(&mut self, at: Span) -> PResult<()> {
        self.nesting += 1;
        self.check_depth(self.nesting + 1, at)
    }

    fn not_expr(&mut self) -> PResult<(Expr, usize)> {
        if self.is_kw_at(0, "NOT") {
            let kw = self.bump();
            self.enter_nesting(kw)?;
            let (operand, d) = self.not_expr()?;
            self.nesting -= 1;
            let span = kw.to(operand.span());
            self.check_depth(d + 1, span)?;
            return Ok((
                Expr::Not {
                    operand: Box::new(operand),
                    span,
                },
                d + 1,
            ));
        }
        if self.peek().kind == TokenKind::LParen {
            let open = self.bump();
            self.enter_nesting(open)?;
            let (inner, depth) = self.or_expr()?;
            let close = self.expect(TokenKind::RParen, "`)`", "`)` to close the parenthesis")?;
            self.nesting -= 1;
            return Ok((inner.with_span(open.to(close)), depth));
        }
        Ok((self.predicate()?, 1))
    }

    fn predicate(&mut self) -> PResult<Expr> {
        let t = self.peek().clone();
        let word = self.word_at(0);
        let lower = word.map(str::to_ascii_lowercase);
        let field = match lower.as_deref() {
            Some("scope") => {
                self.bump();
                self.expect(TokenKind::Dot, "`.`", "`.` after scope")?;
                let sub = self.peek().clone();
                let f = match self.word_at(0).map(str::to_ascii_lowercase).as_deref() {
                    Some("user") => TextField::ScopeUser,
                    Some("conversation") => TextField::ScopeConversation,
                    Some("agent") => TextField::ScopeAgent,
                    Some("label") => TextField::ScopeLabel,
                    other => {
                        for f in &FIELD_NAMES[..4] {
                            self.note(&f["scope.".len()..]);
                        }
                        if let Some(o) = other {
                            let name = format!("scope.{}", self.text(&sub));
                            let mut e = LangError::new(
                                ErrorKind::UnknownField {
                                    name: truncated(&name),
                                },
                                t.span.to(sub.span),
                            )
                            .with_expected(self.expected_list());
                            let hint = if o == "labels" {
                                Some("`scope.label = 'x'` holds when x is one of the record's scope labels".to_string())
                            } else {
                                closest(o, &self.expected)
                                    .map(|k| format!("did you mean `scope.{k}`?"))
                            };
                            if let Some(h) = hint {
                                e = e.with_hint(h);
                            }
                            return Err(e);
                        }
                        return Err(self.unexpected("a scope field after `scope.`"));
                    }
                };
                self.bump();
                f
            }
            Some("kind") => {
                self.bump();
                TextField::Kind
            }
            Some("record") => {
                self.bump();
                return self.record_predicate(t.span);
            }
            Some("status") => {
                self.bump();
                return self.status_predicate(t.span);
            }
            Some(f @ ("occurred_at" | "ingested_at")) => {
                let field = if f == "occurred_at" {
                    TimeField::OccurredAt
                } else {
                    TimeField::IngestedAt
                };
                self.bump();
                return self.time_predicate(field, t.span);
            }
            _ => {
                for f in FIELD_NAMES {
                    self.note(f);
                }
                self.note("NOT");
                self.note("`(`");
                if let Some(w) = word.filter(|w| !is_keyword(w)) {
                    let mut e =
                        self.unknown(ErrorKind::UnknownField { name: truncated(w) }, w, t.span);
                    let scope_field = ["user", "conversation", "agent", "label"]
                        .iter()
                        .any(|f| w.eq_ignore_ascii_case(f));
                    if e.hint().is_none() && scope_field {
                        e = e.with_hint(format!(
                            "scope fields are written `scope.{}`",
                            w.to_ascii_lowercase()
                        ));
                    }
                    return Err(e);
                }
                return Err(self.unexpected("a condition"));
            }
        };
        let wanted = format!("`=`, `!=`, IN or NOT IN after {}", field.name());
        let (negated, values) = if self.eat(TokenKind::Eq, "`=`").is_some() {
            (false, self.single_value()?)
        } else if self.eat(TokenKind::Ne, "`!=`").is_some() {
            (true, self.single_value()?)
        } else if self.eat_kw("IN").is_some() {
            (false, self.list_after_in("a list after IN")?)
        } else if self.eat_kw("NOT").is_some() {
            self.expect_kw("IN", "IN after NOT")?;
            (true, self.list_after_in("a list after NOT IN")?)
        } else {
            return Err(self.unexpected(&wanted));
        };
        Ok(Expr::Text(TextPredicate {
            field,
            negated,
            values,
            span: self.span_from(t.span),
        }))
    }

    fn single_value(&mut self) -> PResult<StrList> {
        let v = self.string_arg("a string or a $parameter")?;
        Ok(StrList::Items {
            span: v.span(),
            items: vec![v],
        })
    }

    /// After a field: `=` / `!=` and one value, or `[NOT] IN (` values `)`,
    /// each value read by `one`.
    fn enum_values<T>(
        &mut self,
        field: &str,
        one: &mut dyn FnMut(&mut Self) -> PResult<Spanned<T>>,
    ) -> PResult<(bool, Vec<Spanned<T>>)> {
        if self.eat(TokenKind::Eq, "`=`").is_some() {
            return Ok((false, vec![one(self)?]));
        }
        if self.eat(TokenKind::Ne, "`!=`").is_some() {
            return Ok((true, vec![one(self)?]));
        }
        let negated = if self.eat_kw("IN").is_some() {
            false
        } else if self.eat_kw("NOT").is_some() {
            self.expect_kw("IN", "IN after NOT")?;
            true
        } else {
            return Err(self.unexpected(&format!("`=`, `!=`, IN or NOT IN after {field}")));
        };
        self.expect(TokenKind::LParen, "`(`", "`(` and a list")?;
        let mut values = Vec::new();
        loop {
            values.push(one(self)?);
            if self.eat(TokenKind::Comma, "`,`").is_none() {
                break;
            }
        }
        self.expect(TokenKind::RParen, "`)`", "`)` to close the list")?;
        Ok((negated, values))
    }

    fn record_predicate(&mut self, start: Span) -> PResult<Expr> {
        let (negated, values) = self.enum_values("record", &mut |p: &mut Self| {
            p.record_type("a record type", false)
        })?;
        Ok(Expr::Record(RecordPredicate {
            negated,
            values,
            span: self.span_from(start),
        }))
    }

    fn status_predicate(&mut self, start: Span) -> PResult<Expr> {
        let (negated, values) = self.enum_values("status", &mut |p: &mut Self| p.status())?;
        Ok(Expr::Status(StatusPredicate {
            negated,
            values,
            span: self.span_from(start),
        }))
    }

    fn status(&mut self) -> PResult<Spanned<RecordStatus>> {
        let t = self.peek().clone();
        let written = match &t.kind {
            TokenKind::Word => Some(self.text(&t).to_string()),
            TokenKind::Str(s) => Some(s.clone()),
            _ => None,
        };
        if let Some(s) = written.as_deref().and_then(RecordStatus::parse) {
            self.bump();
            return Ok(Spanned::new(s, t.span));
        }
        for s in &RecordStatus::ALL[..4] {
            self.note(s.name());
        }
        match written {
            Some(w) if t.kind != TokenKind::Word || !is_keyword(&w) => {
                let mut e = self.unknown(
                    ErrorKind::UnknownStatus {
                        name: truncated(&w),
                    },
                    &w,
                    t.span,
                );
                if e.hint().is_none() && w.eq_ignore_ascii_case("approved") {
                    e = e.with_hint("`active` covers approved records");
                }
                Err(e)
            }
            _ => Err(self.unexpected("a status")),
        }
    }

    fn time_predicate(&mut self, field: TimeField, start: Span) -> PResult<Expr> {
        let op = match self.peek().kind.clone() {
            TokenKind::Lt => CmpOp::Lt,
            TokenKind::Le => CmpOp::Le,
            TokenKind::Gt => CmpOp::Gt,
            TokenKind::Ge => CmpOp::Ge,
            k => {
                for o in ["`<`", "`<=`", "`>`", "`>=`"] {
                    self.note(o);
                }
                let e = self.unexpected(&format!("a comparison after {}", field.name()));
                return Err(if matches!(k, TokenKind::Eq | TokenKind::Ne) {
                    e.with_hint("compare times with <, <=, > or >=; for an instant, give a range")
                } else {
                    e
                });
            }
        };
        self.bump();
        let value = self.time(&format!("a time after {} {}", field.name(), op.symbol()))?;
        Ok(Expr::Time(TimePredicate {
            field,
            op,
            value,
            span: self.span_from(start),
        }))
    }
}
