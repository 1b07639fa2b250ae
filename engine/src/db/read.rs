//! Point reads (`get`, `history`, `current`, `list`) and the record view
//! built from the state and the log.

use super::*;

/// Bytes of text and data (as JSON writes them) one history answer
/// carries at most, newest versions first: the budget of a recall's hits
/// ([`crate::retrieval::HITS_TEXT_BYTES_MAX`], 16 MiB). Older versions
/// past it come with `content_omitted` (read them by id).
pub const HISTORY_BYTES_MAX: u64 = crate::retrieval::HITS_TEXT_BYTES_MAX;

impl Session {
    /// Reads a record by id or external id. Records of other tenants, records
    /// the principal may not read, and deleted records are all "not found".
    pub fn get(&self, r: &RecordRef) -> Result<Record> {
        self.db.check_open()?;
        let st = self.db.inner.state.read();
        let idx = self.resolve_in(&st, r)?;
        let held = self.held_labels(&st);
        if !self.can_read_with(&st, idx, &held) {
            return Err(self.not_found(r));
        }
        self.view(&st, idx, &held)
    }

    /// [`Session::get`] as the store knew the record at `as_of` (None:
    /// now): its end of validity as it stood then, an `expire` made later
    /// not applied, so a row read `AS OF` a time agrees with its status
    /// then.
    pub fn get_as_of(&self, r: &RecordRef, as_of: Option<i64>) -> Result<Record> {
        let mut rec = self.get(r)?;
        if let Some(t) = as_of {
            let st = self.db.inner.state.read();
            if let Some(idx) = st.idx(rec.id) {
                rec.valid_until = st.valid_until_at(idx, t);
            }
        }
        Ok(rec)
    }

    /// The view of record `idx` as this principal sees it: a newer or older
    /// version it cannot read (a correction that added a label, an old
    /// version whose label the admin dropped) is not named. The record's
    /// status still says it was superseded, which is true and names nothing.
    /// `held`: the labels the principal holds.
    pub(crate) fn view(&self, st: &State, idx: Idx, held: &BTreeSet<String>) -> Result<Record> {
        let mut r = self.db.record_view(st, idx)?;
        let readable = |x: Idx| self.target(st, x, held).readable;
        if st.meta(idx).superseded_by.is_some_and(|n| !readable(n)) {
            r.superseded_by = None;
        }
        if r.supersedes
            .and_then(|s| st.idx(s))
            .is_some_and(|o| !readable(o))
        {
            r.supersedes = None;
        }
        Ok(r)
    }

    /// Every version of a record's correction chain, oldest first, that the
    /// principal may read.
    pub fn history(&self, r: &RecordRef) -> Result<Vec<Record>> {
        self.db.check_open()?;
        let st = self.db.inner.state.read();
        let idx = self.resolve_in(&st, r)?;
        let held = self.held_labels(&st);
        // the version named must be one `get` reads (not deleted, not past
        // its retention period): its id says nothing of its chain otherwise
        if !self.can_read_with(&st, idx, &held) {
            return Err(self.not_found(r));
        }
        let chain = st.chain(idx);
        let mut out = Vec::new();
        // newest first: past the byte budget, older versions come without
        // their content (a chain of a hundred mebibyte versions would
        // otherwise be one answer of gigabytes)
        let mut bytes = 0u64;
        for i in chain.into_iter().rev() {
            if self.can_read_with(&st, i, &held) {
                let mut v = self.view(&st, i, &held)?;
                if bytes >= HISTORY_BYTES_MAX {
                    (v.text, v.data, v.content_omitted) = (None, None, true);
                } else {
                    bytes = bytes.saturating_add(v.answer_bytes() as u64);
                }
                out.push(v);
            }
        }
        if out.is_empty() {
            return Err(self.not_found(r));
        }
        out.reverse();
        Ok(out)
    }

    /// The newest version of a record's correction chain.
    pub fn current(&self, r: &RecordRef) -> Result<Record> {
        let mut h = self.history(r)?;
        Ok(h.pop().expect("history is never empty"))
    }

    /// Lists readable records of the tenant in log order.
    pub fn list(&self, filter: &ListFilter) -> Result<Vec<Record>> {
        self.list_page(filter).map(|(records, _)| records)
    }

    /// [`Session::list`], and whether the page ended at
    /// [`ListFilter::bytes_max`] (before `limit`, with records maybe left).
    pub fn list_page(&self, filter: &ListFilter) -> Result<(Vec<Record>, bool)> {
        self.db.check_open()?;
        // No record has an empty kind: the filter would match nothing.
        if filter.kind.as_deref() == Some("") {
            return Err(EngineError::invalid(
                "kind",
                "empty: a kind is never empty; leave it out for records of every kind",
            ));
        }
        // nor does a kind no record may have (a control character, spaces
        // around it, past the length of a name)
        if let Some(k) = &filter.kind {
            crate::model::check_name("kind", k)?;
        }
        // (as a recall refuses occurred_after past occurred_before: an
        // empty answer would hide the mistake)
        if let (Some(a), Some(b)) = (filter.since, filter.until)
            && a > b
        {
            return Err(EngineError::invalid(
                "since",
                "later than until: the range holds no time",
            ));
        }
        let st = self.db.inner.state.read();
        let Some(t) = st.tenant_sym(self.principal.tenant()) else {
            return Ok((Vec::new(), false));
        };
        let Some(bm) = st.bm_tenant.get(&t) else {
            return Ok((Vec::new(), false));
        };
        let held = self.held_labels(&st);
        let (expired, _) = st.past_retention_set(t, self.db.now());
        let mut out = Vec::new();
        let mut bytes = 0usize;
        // records are in log order: the first one past the cursor is found
        // by its LSN, and the walk starts there
        let start = filter.after_lsn.map_or(0, |a| {
            Idx::try_from(st.metas.partition_point(|m| m.loc.lsn <= a)).unwrap_or(Idx::MAX)
        });
        for idx in bm.range(start..) {
            let m = st.meta(idx);
            if filter.since.is_some_and(|s| m.occurred_at < s)
                || filter.until.is_some_and(|u| m.occurred_at > u)
                || filter
                    .kind
                    .as_ref()
                    .is_some_and(|k| st.strings.name(m.kind) != k)
                || filter.record.is_some_and(|r| m.rtype != r)
                || (!filter.include_superseded && m.status == Status::Superseded)
            {
                continue;
            }
            if !self.can_read_listed(&st, idx, &held, &expired) {
                continue;
            }
            let r = self.view(&st, idx, &held)?;
            bytes = bytes.saturating_add(r.answer_bytes());
            out.push(r);
            if out.len() >= filter.limit {
                break;
            }
            if bytes >= filter.bytes_max {
                return Ok((out, true));
            }
        }
        Ok((out, false))
    }
}

/// Filter for [`Session::list`].
#[derive(Clone, Debug)]
pub struct ListFilter {
    /// occurred_at >= since.
    pub since: Option<i64>,
    /// occurred_at <= until.
    pub until: Option<i64>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this record type.
    pub record: Option<RecordType>,
    /// Include superseded versions.
    pub include_superseded: bool,
    /// At most this many.
    pub limit: usize,
    /// Only records after this log position (a record's `lsn`): give the
    /// last `lsn` of a page to get the next one.
    pub after_lsn: Option<u64>,
    /// The page ends once its records' text and data as an answer writes
    /// them ([`crate::Record::answer_bytes`]) reach this many bytes (after at
    /// least one record): a page of the largest records would otherwise
    /// need gigabytes.
    pub bytes_max: usize,
}

impl Default for ListFilter {
    fn default() -> Self {
        ListFilter {
            since: None,
            until: None,
            kind: None,
            record: None,
            include_superseded: true,
            limit: usize::MAX,
            after_lsn: None,
            bytes_max: usize::MAX,
        }
    }
}

impl Engram {
    /// External id and text of record `idx`: the text read in place from
    /// the log, the external id the record table's (the same string, taken
    /// from the same frame when it was applied; shared, not copied). The
    /// first read validates the whole archive and notes where the text lies
    /// ([`crate::state::TextSpans`]); later reads take the text from there.
    pub(crate) fn hit_content(
        &self,
        st: &State,
        idx: Idx,
    ) -> Result<(Option<std::sync::Arc<str>>, Option<String>)> {
        self.hit_content_with(st, idx, &mut self.frame_reader())
    }

    /// A reader of the log's frames one after another (a search's hits:
    /// [`Engram::hit_content_with`]).
    pub(crate) fn frame_reader(&self) -> engram_storage::log::FrameReader<'_> {
        self.inner.log.reader()
    }

    /// [`Engram::hit_content`] through `reader`.
    pub(crate) fn hit_content_with(
        &self,
        st: &State,
        idx: Idx,
        reader: &mut engram_storage::log::FrameReader<'_>,
    ) -> Result<(Option<std::sync::Arc<str>>, Option<String>)> {
        let m = st.meta(idx);
        // A frame's payload is checksummed, and its archive validated, on
        // its first read only (see `TextSpans`).
        let known = st.text_spans.get(idx);
        if let Some(span) = &known {
            let text = match span {
                None => Some(None),
                Some(r) => reader
                    .payload_part(m.loc.segment, m.loc.offset, r.clone())
                    .and_then(|b| std::str::from_utf8(b).ok())
                    .map(|t| Some(t.to_string())),
            };
            // (a span that does not fit, or bytes that are not UTF-8:
            // verify the frame and validate the archive, below)
            if let Some(text) = text {
                return Ok((m.external_id.clone(), text));
            }
        }
        let payload = reader.payload(m.loc.segment, m.loc.offset, true)?;
        let a = codec::view_record(payload)?;
        debug_assert_eq!(
            a.external_id.as_ref().map(|s| s.as_str()),
            m.external_id.as_deref()
        );
        let text = a.text.as_ref().map(|s| s.as_str());
        // The text's place in the payload (a validated archive's strings lie
        // inside its buffer).
        let span = text.and_then(|t| {
            let start = (t.as_ptr() as usize).checked_sub(payload.as_ptr() as usize)?;
            (start + t.len() <= payload.len()).then_some(start..start + t.len())
        });
        if text.is_none() || span.is_some() {
            st.text_spans.set(idx, span);
        }
        Ok((m.external_id.clone(), text.map(str::to_string)))
    }

    /// Builds the public view of record `idx` (content read from the log).
    pub(crate) fn record_view(&self, st: &State, idx: Idx) -> Result<Record> {
        let m = st.meta(idx);
        let f = self.inner.log.read(m.loc.segment, m.loc.offset)?;
        let superseded_by = m.superseded_by.map(|i| st.meta(i).id);
        if m.tombstone {
            return Err(EngineError::NotFound {
                tenant: st.strings.name(m.tenant).to_string(),
                reference: m.id.to_string(),
            });
        }
        let a = codec::view_record(f.payload())?;
        let r = codec::record_to_owned(a);
        let data = match &r.data_json {
            Some(s) => Some(serde_json::from_str(s).map_err(|e| EngineError::Corrupt {
                what: format!(
                    "data of record {} (log segment {} offset {}, LSN {})",
                    m.id, m.loc.segment, m.loc.offset, m.loc.lsn
                ),
                detail: e.to_string(),
            })?),
            None => None,
        };
        Ok(Record {
            id: m.id,
            external_id: r.external_id,
            record: m.rtype,
            tenant: r.tenant,
            scope: Scope {
                user: r.scope_user,
                conversation: r.scope_conversation,
                agent: r.scope_agent,
                labels: r.scope_labels,
            },
            kind: r.kind,
            status: m.status,
            historical: st.shown_status(idx, m.status, self.now(), None) == "historical",
            occurred_at: r.occurred_at_ms,
            ingested_at: r.ingested_at_ms,
            valid_from: r.valid_from_ms,
            valid_until: m.valid_until,
            last_verified_at: r.last_verified_at_ms,
            text: r.text,
            data,
            content_sha256: hex(&r.content_sha256),
            schema_version: r.schema_version,
            ingest_run_id: RecordId::from_bytes(r.ingest_run_id),
            supersedes: r.supersedes.map(RecordId::from_bytes),
            superseded_by,
            retention_class: r.retention_class,
            access: r.access,
            effective_access: st.access_names(idx),
            writer: Writer {
                principal: r.writer_principal,
                kind: WriterKind::from_code(r.writer_kind).unwrap_or_default(),
            },
            embeddings: st
                .vectors
                .all()
                .iter()
                .filter(|s| s.slot_of(idx).is_some())
                .map(|s| EmbeddingInfo {
                    model: s.model.clone(),
                    dim: s.dim,
                })
                .collect(),
            entity_type: r.entity_type,
            name: r.name,
            aliases: r.aliases,
            subject: r.subject.map(RecordId::from_bytes),
            predicate: r.predicate,
            object: r.object.map(RecordId::from_bytes),
            object_value: r.object_value,
            sources: r.sources.into_iter().map(RecordId::from_bytes).collect(),
            derivation: r.derivation.map(|d| crate::model::Derivation {
                extractor: d.extractor,
                model_config: d.model_config,
                generated: d.generated,
            }),
            confidence: r.confidence,
            generator: r.generator,
            lsn: m.loc.lsn,
            content_omitted: false,
        })
    }

    /// Kind of an assertion record, if it is one.
    pub fn assertion_kind(&self, id: RecordId) -> Option<AssertionKind> {
        let st = self.inner.state.read();
        st.idx(id).and_then(|i| st.meta(i).akind)
    }
}
