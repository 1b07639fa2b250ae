//! Stage 1 of the write path, without the writer lock: the batch's size
//! and every record checked, `data` in canonical form, access and
//! retention normalized, and the content hash of each record that names no
//! other record. The state is read only where a record needs it and, for
//! the store's record limit, at the end: a large batch's writer runs this
//! while its previous batch is applied (docs/architecture.md, "A large
//! group is acknowledged under the state's write lock").

use super::*;

/// A record's access labels (sorted, deduplicated), retention class, and
/// content hash when it names no other record (computed before the lock).
pub(super) type Normalized = (Vec<String>, String, Option<[u8; 32]>);

/// What stage 1 hands to the locked stages.
pub(super) struct Validated {
    /// Each record's `data` in canonical JSON.
    pub(super) data_json: Vec<Option<String>>,
    pub(super) normalized: Vec<Normalized>,
}

impl Session {
    /// Stage 1, without a lock: checks the batch's size and every record,
    /// puts `data` in canonical form, normalizes access and retention, and
    /// hashes every record that names no other record.
    pub(super) fn validate_batch(&self, records: &[NewRecord]) -> Result<Validated> {
        let db = &self.db;
        db.check_open()?;
        if records.is_empty() {
            return Err(EngineError::invalid("batch", "no records"));
        }
        if records.len() > limits::BATCH_RECORDS_MAX {
            return Err(EngineError::LimitExceeded {
                item: None,
                what: "records in one batch".into(),
                limit: limits::BATCH_RECORDS_MAX as u64,
                got: records.len() as u64,
            });
        }
        crate::model::check_tenant(self.principal.tenant())?;
        // (the transaction time, only for an end of validity without a start)
        let needs_last = records
            .iter()
            .any(|r| r.valid_from.is_none() && r.valid_until.is_some());
        let last = if needs_last {
            db.inner.state.read().last_ingested_at
        } else {
            i64::MIN
        };
        // (the clock, `occurred_at`'s default, and the transaction time at
        // least, which ends a start given later)
        let now = db.now();
        let stamped = now.max(last);
        for (i, r) in records.iter().enumerate() {
            r.validate().map_err(|e| e.at_item(i))?;
            // Without `valid_from`, validity starts at the earlier of
            // `occurred_at` and when the record is stored (no earlier than
            // now; `Meta::valid_start`): an end before that would make it
            // historical from birth, as `expire` refuses to.
            if let (None, Some(until)) = (r.valid_from, r.valid_until) {
                let start = r.occurred_at.map_or(now, |o| o.min(stamped));
                if until < start {
                    return Err(EngineError::invalid(
                        "valid_until",
                        format!(
                            "{} is before the start of validity {} (without valid_from, the earlier of occurred_at and the time the record is stored); give valid_from",
                            crate::time::format_rfc3339(until),
                            crate::time::format_rfc3339(start)
                        ),
                    )
                    .at_item(i));
                }
            }
            if let Some((field, why)) = r.misplaced_replace_access() {
                return Err(EngineError::invalid(field, why).at_item(i));
            }
        }
        // Each record's canonical `data`, normalized access and retention,
        // and the content hash of a record that names no other record:
        // computed before the writer lock, over the cores for a large batch.
        let per_record: Vec<Result<(Option<String>, Normalized)>> =
            crate::split::map(records, crate::split::SPLIT_MIN, |i, r| {
                let data = r
                    .data
                    .as_ref()
                    .map(|d| crate::model::canonical_data(d).map_err(|e| e.at_item(i)))
                    .transpose()?;
                let mut access = r.access.clone();
                access.sort();
                access.dedup();
                let retention = r
                    .retention_class
                    .clone()
                    .unwrap_or_else(|| DEFAULT_RETENTION_CLASS.to_string());
                let hash = (!has_references(r)).then(|| {
                    content_hash(
                        r,
                        &Resolved::default(),
                        &retention,
                        &access,
                        data.as_deref(),
                    )
                });
                Ok((data, (access, retention, hash)))
            });
        let mut data_json = Vec::with_capacity(records.len());
        let mut normalized: Vec<Normalized> = Vec::with_capacity(records.len());
        for r in per_record {
            let (d, n) = r?;
            data_json.push(d);
            normalized.push(n);
        }
        let n_records = db.inner.state.read().len();
        if n_records + records.len() > limits::RECORDS_MAX {
            return Err(EngineError::LimitExceeded {
                item: None,
                what: "records in the store".into(),
                limit: limits::RECORDS_MAX as u64,
                got: (n_records + records.len()) as u64,
            });
        }
        Ok(Validated {
            data_json,
            normalized,
        })
    }
}
