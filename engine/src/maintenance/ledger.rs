//! The deletion/revocation ledger (`ledger.jsonl`): its line format, reading
//! and rendering, reconciliation with the log at every open, and
//! re-applying its entries after a restore or a repair.

use super::*;

/// Path of the ledger.
pub fn ledger_path(dir: &Path) -> PathBuf {
    dir.join("ledger.jsonl")
}

/// One line of the ledger file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerLine {
    /// Operation id.
    pub op_id: String,
    /// Tenant.
    pub tenant: String,
    /// Transaction time (ms).
    pub at_ms: i64,
    /// `delete`, `revoke`, `grant`, `hold` or `retention`.
    pub op: String,
    /// Deleted record.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub target: Option<String>,
    /// Deletion reason.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
    /// The other versions of the deleted record's correction chain when
    /// the deletion was written (oldest first; absent for a retention
    /// expiry, which removes one version). A restore of a backup that
    /// holds an older version but not `target` deletes the chain through
    /// the first of these it holds.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub versions: Vec<String>,
    /// Revoked principal.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub principal: Option<String>,
    /// Revoked label.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub label: Option<String>,
    /// Revoked role.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub role: Option<String>,
    /// Scope of a legal hold.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub scope: Option<String>,
    /// Whether a hold was placed (true) or lifted.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub on: Option<bool>,
    /// Retention class whose period was set.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub class: Option<String>,
    /// The period set, in ms (absent: kept forever).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub period_ms: Option<i64>,
}

impl From<&LedgerEntry> for LedgerLine {
    fn from(e: &LedgerEntry) -> Self {
        let mut l = LedgerLine {
            op_id: e.op_id.to_string(),
            tenant: e.tenant.clone(),
            at_ms: e.at,
            op: String::new(),
            target: None,
            reason: None,
            versions: Vec::new(),
            principal: None,
            label: None,
            role: None,
            scope: None,
            on: None,
            class: None,
            period_ms: None,
        };
        match &e.what {
            LedgerWhat::Delete { target, reason } => {
                l.op = "delete".into();
                l.target = Some(target.to_string());
                l.reason = reason.clone();
            }
            LedgerWhat::Revoke {
                principal,
                label,
                role,
            } => {
                l.op = "revoke".into();
                l.principal = principal.clone();
                l.label = label.clone();
                l.role = role.clone();
            }
            LedgerWhat::Grant {
                principal,
                label,
                role,
            } => {
                l.op = "grant".into();
                l.principal = principal.clone();
                l.label = label.clone();
                l.role = role.clone();
            }
            LedgerWhat::Hold { scope, on } => {
                l.op = "hold".into();
                l.scope = Some(scope.clone());
                l.on = Some(*on);
            }
            LedgerWhat::Retention { class, period_ms } => {
                l.op = "retention".into();
                l.class = Some(class.clone());
                l.period_ms = *period_ms;
            }
        }
        l
    }
}

impl LedgerLine {
    /// The line of `e`, with what the state adds: a deletion's other
    /// versions (`versions`).
    pub(crate) fn with_state(e: &LedgerEntry, st: &State) -> Self {
        let mut l = LedgerLine::from(e);
        if let LedgerWhat::Delete { target, reason } = &e.what {
            if !crate::state::is_retention_reason(reason.as_deref()) {
                if let Some(idx) = st.idx(*target) {
                    l.versions = st
                        .chain(idx)
                        .into_iter()
                        .filter(|&v| v != idx)
                        .map(|v| st.meta(v).id.to_string())
                        .collect();
                }
            }
        }
        l
    }
}

/// Reads the ledger file (empty if absent). Unparseable lines are an error
/// naming the line, except a torn last line (a crash while appending),
/// which is dropped: the log still holds that operation and the next
/// reconcile writes it again.
pub fn read_ledger(backend: &dyn Backend, dir: &Path) -> Result<Vec<LedgerLine>> {
    Ok(read_ledger_checked(backend, dir)?.0)
}

/// The ledger's lines, and whether its tail was torn.
pub(super) fn read_ledger_checked(
    backend: &dyn Backend,
    dir: &Path,
) -> Result<(Vec<LedgerLine>, bool)> {
    read_ledger_file(backend, &ledger_path(dir), LedgerFile::Ledger)
}

/// The lines of a ledger file named by path (`restore --ledger`): as
/// [`read_ledger`], with a remedy for damage that fits a file of another
/// store.
pub(super) fn read_external_ledger(backend: &dyn Backend, path: &Path) -> Result<Vec<LedgerLine>> {
    Ok(read_ledger_file(backend, path, LedgerFile::External)?.0)
}

/// Which file of ledger lines is read: they differ in how they are
/// written, so in what a damaged line means and how it is mended.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum LedgerFile {
    /// `ledger.jsonl`, appended to: a torn last line is a crash while
    /// appending (the log still holds that operation).
    Ledger,
    /// `restore.pending`, written whole (a temporary file renamed into
    /// place): any torn or undecodable line is damage.
    RestorePending,
    /// Another store's `ledger.jsonl`, named by `restore --ledger`: read
    /// as a ledger, but this store's log cannot write it anew.
    External,
}

/// Reads ledger lines from `path` (empty if absent); see [`read_ledger`].
pub(super) fn read_ledger_file(
    backend: &dyn Backend,
    path: &Path,
    kind: LedgerFile,
) -> Result<(Vec<LedgerLine>, bool)> {
    let Some(bytes) = read_all(backend, path)? else {
        return Ok((Vec::new(), false));
    };
    let text = String::from_utf8_lossy(&bytes);
    let mut lines: Vec<&str> = text.split('\n').collect();
    let mut out = Vec::new();
    let mut torn = !bytes.is_empty() && !bytes.ends_with(b"\n");
    let damaged = |line: usize, why: String| {
        let remedy = match kind {
            LedgerFile::Ledger => {
                "The log holds every deletion, revocation, grant and hold of this \
                 store: move the file aside and open the store again to write it \
                 anew from the log (entries it held only for a restore of an \
                 older backup are then lost; keep the moved file to pass as \
                 `restore --ledger`)"
            }
            LedgerFile::External => {
                "It was named with `restore --ledger` (the ledger of the store the \
                 backup came from): repair or remove that line, or restore without \
                 `--ledger` (the deletions and revocations it lists are then not \
                 re-applied)"
            }
            LedgerFile::RestorePending => {
                "It lists what an interrupted restore must re-apply. Run the same \
                 `engram restore BACKUP` (with the same `--ledger`, if one was given) \
                 again: it re-applies this store's operations from its ledger.jsonl. \
                 Moving the file aside instead re-applies those of ledger.jsonl at \
                 the next open, but not those of an external `--ledger`"
            }
        };
        EngineError::Corrupt {
            what: format!("{} line {line}", path.display()),
            detail: format!("{why}. {remedy}"),
        }
    };
    // `restore.pending` ends with `{"end": N}`, N its entries: a file cut
    // at a line's end is told from a whole one by it
    let mut expected = None;
    if kind == LedgerFile::RestorePending {
        let last = lines.iter().rposition(|l| !l.trim().is_empty());
        let end = last.and_then(|i| {
            let v: serde_json::Value = serde_json::from_str(lines[i]).ok()?;
            let o = v.as_object().filter(|o| o.len() == 1)?;
            Some((i, o.get("end")?.as_u64()?))
        });
        match end {
            Some((i, n)) => {
                expected = Some(n);
                lines.truncate(i);
            }
            None => {
                return Err(damaged(
                    last.map_or(1, |i| i + 1),
                    "the file was cut short (its closing {\"end\": N} line is missing)".into(),
                ));
            }
        }
    }
    for (i, l) in lines.iter().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(l) {
            Ok(x) => out.push(x),
            Err(_) if i + 1 == lines.len() && kind != LedgerFile::RestorePending => torn = true,
            Err(e) => return Err(damaged(i + 1, e.to_string())),
        }
    }
    if let Some(n) = expected.filter(|&n| n != out.len() as u64) {
        return Err(damaged(
            out.len() + 1,
            format!("the file holds {} entries where it says {n}", out.len()),
        ));
    }
    if torn && kind == LedgerFile::RestorePending {
        return Err(damaged(lines.len(), "the file ends inside a line".into()));
    }
    Ok((out, torn))
}

/// `restore.pending`'s text: the entries as the ledger writes them, then
/// `{"end": N}` (so a file cut at a line's end is known to be cut).
pub(crate) fn render_restore_pending(lines: &[LedgerLine]) -> String {
    let mut text = render_ledger(lines);
    text.push_str(&format!("{{\"end\": {}}}\n", lines.len()));
    text
}

/// Ledger lines as JSONL text.
pub(crate) fn render_ledger(lines: &[LedgerLine]) -> String {
    let mut text = String::new();
    for l in lines {
        text.push_str(&serde_json::to_string(l).expect("ledger line serializes"));
        text.push('\n');
    }
    text
}

/// Checks a ledger line that a restore is about to re-apply: its operation
/// id, tenant and, for a deletion, its target must parse; a revocation must
/// name a label or role as `revoke` requires. Returns the operation id.
pub(super) fn check_line(l: &LedgerLine) -> Result<RecordId> {
    let bad = |field: &str, why: &str| {
        EngineError::invalid("ledger", format!("entry {}: {field}: {why}", l.op_id))
    };
    let op_id = l
        .op_id
        .parse::<RecordId>()
        .map_err(|_| bad("op_id", "not an id"))?;
    if l.tenant.is_empty() {
        return Err(bad("tenant", "empty"));
    }
    match l.op.as_str() {
        "delete" => {
            if l.target
                .as_deref()
                .and_then(|t| t.parse::<RecordId>().ok())
                .is_none()
            {
                return Err(bad("target", "missing or not an id"));
            }
            if l.versions.iter().any(|v| v.parse::<RecordId>().is_err()) {
                return Err(bad("versions", "not a list of ids"));
            }
        }
        "revoke" | "grant" => crate::lifecycle::check_grant(
            l.principal.as_deref(),
            l.label.as_deref(),
            l.role.as_deref(),
        )?,
        "hold" => {
            let scope = l.scope.as_deref().ok_or_else(|| bad("scope", "missing"))?;
            crate::lifecycle::check_hold_scope(scope)?;
            if l.on.is_none() {
                return Err(bad("on", "missing"));
            }
        }
        "retention" => {
            let class = l.class.as_deref().ok_or_else(|| bad("class", "missing"))?;
            crate::model::check_name("class", class)?;
            if l.period_ms.is_some_and(|p| p <= 0) {
                return Err(bad("period_ms", "must be positive"));
            }
        }
        other => {
            return Err(bad(
                "op",
                &format!("'{other}' is not delete, revoke, grant, hold or retention"),
            ));
        }
    }
    Ok(op_id)
}

/// Re-applies the deletions and revocations of `lines` that the store's log
/// does not hold, each under its original operation id. Idempotent: an
/// operation already in the log is skipped and a deletion already in effect
/// is counted, not repeated, so an interrupted run can simply run again.
fn reapply_ledger(db: &Engram, lines: Vec<LedgerLine>, report: &mut RestoreReport) -> Result<()> {
    // Ids compare as ids, not as text: a ledger kept elsewhere may spell
    // them differently.
    let present: BTreeSet<RecordId> = db.state().ledger.iter().map(|e| e.op_id).collect();
    let mut seen = BTreeSet::new();
    for l in lines {
        // Lines were checked before the restore started; one that is not
        // valid now is skipped rather than blocking every open.
        let Ok(op_id) = check_line(&l) else {
            report.skipped += 1;
            continue;
        };
        if present.contains(&op_id) || !seen.insert(op_id) {
            continue;
        }
        let s = db.session(crate::principal::Principal::admin(l.tenant.clone()));
        match l.op.as_str() {
            "delete" => {
                let Some(t) = l.target.as_deref().and_then(|t| t.parse::<RecordId>().ok()) else {
                    continue;
                };
                // a retention expiry keeps its reason: it is what limits the
                // deletion to the expired version
                let reason = match l.reason.as_deref() {
                    Some(r) if crate::state::is_retention_reason(Some(r)) => r.to_string(),
                    _ => format!("restore: re-applied {}", l.op_id),
                };
                // The target first; when the backup does not hold it, the
                // first older (or newer) version it does hold: deleting a
                // record deletes its whole chain, and an older version must
                // not come back because its last version was written after
                // the backup.
                // (a retention expiry removes one version: not its chain)
                let others: &[String] = if crate::state::is_retention_reason(Some(&reason)) {
                    &[]
                } else {
                    &l.versions
                };
                let delete =
                    |id: RecordId| s.delete_as(&RecordRef::Id(id), Some(&reason), Some(op_id));
                let mut outcome = delete(t);
                for v in others.iter().filter_map(|v| v.parse::<RecordId>().ok()) {
                    if !matches!(outcome, Err(EngineError::NotFound { .. })) {
                        break;
                    }
                    outcome = delete(v);
                }
                match outcome {
                    Ok(_) => report.deletions_reapplied += 1,
                    Err(EngineError::NotFound { .. }) => report.not_in_backup += 1,
                    Err(EngineError::InvalidState { .. }) => report.already_applied += 1,
                    Err(e) => return Err(e),
                }
            }
            "revoke" => {
                s.access_as(
                    false,
                    l.principal.as_deref(),
                    l.label.as_deref(),
                    l.role.as_deref(),
                    Some(op_id),
                )?;
                report.revocations_reapplied += 1;
            }
            "grant" => {
                s.access_as(
                    true,
                    l.principal.as_deref(),
                    l.label.as_deref(),
                    l.role.as_deref(),
                    Some(op_id),
                )?;
                report.grants_reapplied += 1;
            }
            "hold" => {
                let (Some(scope), Some(on)) = (l.scope.as_deref(), l.on) else {
                    continue;
                };
                s.hold_as(scope, on, Some(op_id))?;
                report.holds_reapplied += 1;
            }
            "retention" => {
                let Some(class) = l.class.as_deref() else {
                    continue;
                };
                s.set_retention_as(class, l.period_ms, Some(op_id))?;
                report.retention_reapplied += 1;
            }
            _ => report.skipped += 1,
        }
    }
    db.sync_ledger()?;
    Ok(())
}

/// The entries of `restore.pending` in `dir` (none when it is absent),
/// read as the whole file it is written as.
fn read_restore_pending(backend: &dyn Backend, dir: &Path) -> Result<Vec<LedgerLine>> {
    let marker = layout::restore_pending(dir);
    Ok(read_ledger_file(backend, &marker, LedgerFile::RestorePending)?.0)
}

/// Checks that a pending `restore.pending` reads whole (a read-only open,
/// which cannot finish the restore, reports a damaged one rather than
/// saying the next write finishes it).
pub(crate) fn check_restore_pending(db: &Engram) -> Result<()> {
    read_restore_pending(db.backend().as_ref(), db.dir()).map(|_| ())
}

/// Whether `restore.pending` in `dir` is there and damaged: a new restore
/// may then replace it (it lists again, from `ledger.jsonl` and the
/// `--ledger` given, what the damaged file listed).
pub(crate) fn restore_pending_damaged(backend: &dyn Backend, dir: &Path) -> bool {
    read_restore_pending(backend, dir).is_err()
}

/// Re-applies the entries of `restore.pending` and removes it: the last
/// step of a restore, run by every open so that a restore interrupted after
/// its log swap is finished before the store serves anything (see the
/// module documentation). `None` without `restore.pending`.
pub(crate) fn resume_restore(db: &Engram) -> Result<Option<RestoreReport>> {
    let backend = db.backend().clone();
    let marker = layout::restore_pending(db.dir());
    if !backend.exists(&marker) {
        return Ok(None);
    }
    let lines = read_restore_pending(backend.as_ref(), db.dir())?;
    let mut report = RestoreReport::default();
    reapply_ledger(db, lines, &mut report)?;
    // (a restore into a new directory cut short after its swap: finished)
    // (durably before the pending file goes: the other order could leave
    // a restored store refused as unfinished)
    let partial = db.dir().join(crate::store_dir::PARTIAL_RESTORE_FILE);
    if backend.exists(&partial) {
        backend.remove_file(&partial).map_err(io(&partial))?;
        backend.sync_dir(db.dir()).map_err(io(db.dir()))?;
    }
    backend.remove_file(&marker).map_err(io(&marker))?;
    backend.sync_dir(db.dir()).map_err(io(db.dir()))?;
    Ok(Some(report))
}

/// Re-applies the ledger file's operations that the log no longer holds,
/// after recovery cut its tail: a ledger line is written only once its
/// operation is durable, so it proves the operation was acknowledged even
/// when the frame holding it was damaged and cut. `None` when there was
/// nothing to re-apply.
pub(crate) fn reapply_cut_ledger(
    db: &Engram,
    ledger: Vec<LedgerLine>,
) -> Result<Option<RestoreReport>> {
    let mut missing = ledger_not_applied(db, ledger);
    if missing.is_empty() {
        return Ok(None);
    }
    // in the order they were written (ids are minted in log order; a
    // restore with `--ledger` may have appended older lines after newer
    // ones), so the log they are written into keeps its ids in order
    missing.sort_by_key(|l| l.op_id.parse::<RecordId>().ok());
    let mut report = RestoreReport::default();
    reapply_ledger(db, missing, &mut report)?;
    Ok(Some(report))
}

/// Of the ledger file's lines (`ledger`, as [`Engram::sync_ledger`] left
/// the file), those whose operation the log does not hold and whose effect
/// is not in the state either: any but a deletion (a grant, a revocation,
/// a hold, a retention setting is logged when re-applied), and a deletion
/// of a record the state holds undeleted. A deletion of a record the log
/// does not hold at all, or holds deleted, has nothing left to do
/// (re-applying it logs nothing, so it would be found again at every open).
///
/// Only an operation newer than everything the log holds can have been
/// lost with its tail (ids are minted above every record and ledger
/// operation the log holds, in log order, and the log that is
/// left is a prefix of the one that was): a line older than the log's
/// newest record or operation is not applied but named among the ledger's
/// problems (`verify`), as an edited line or one copied from another
/// store's ledger. (Re-applying it gave a principal back a label revoked
/// after it.)
pub(crate) fn ledger_not_applied(db: &Engram, ledger: Vec<LedgerLine>) -> Vec<LedgerLine> {
    let st = db.state();
    let present: BTreeSet<RecordId> = st.ledger.iter().map(|e| e.op_id).collect();
    let newest = st
        .metas
        .iter()
        .map(|m| m.id)
        .chain(present.iter().copied())
        .max();
    let live = |t: &str| {
        t.parse::<RecordId>()
            .ok()
            .and_then(|id| st.idx(id))
            .is_some_and(|i| st.meta(i).status != crate::model::Status::Deleted)
    };
    let mut refused = Vec::new();
    let apply = ledger
        .into_iter()
        .enumerate()
        .filter(|(_, l)| {
            l.op_id
                .parse::<RecordId>()
                .is_ok_and(|id| !present.contains(&id))
        })
        .filter(|(_, l)| {
            l.op != "delete"
                || l.target.as_deref().is_some_and(&live)
                || l.versions.iter().any(|v| live(v))
        })
        .filter(|(n, l)| {
            let lost_with_the_tail = l
                .op_id
                .parse::<RecordId>()
                .is_ok_and(|id| newest.is_none_or(|newest| id > newest));
            if !lost_with_the_tail {
                refused.push(format!(
                    "{LEDGER_NOT_LOST}: line {}, operation {} ({}), is not in the log, which holds newer records and operations, so it was not lost with the log's tail; it is not applied (a line edited, or copied from another store's ledger): remove the line",
                    n + 1,
                    l.op_id,
                    l.op
                ));
            }
            lost_with_the_tail
        })
        .map(|(_, l)| l)
        .collect();
    drop(st);
    let mut found = db.ledger_sync();
    found.retain(|p| !p.starts_with(LEDGER_NOT_LOST));
    found.extend(refused);
    apply
}

/// How `verify` names a ledger line that a log's lost tail cannot explain
/// (the start of its problem line).
const LEDGER_NOT_LOST: &str = "ledger.jsonl names an operation the log never held";

/// What a ledger line does when re-applied: its operation and target,
/// and whether a deletion is a retention expiry (which reaches its version
/// only). (Not its time, nor the rest of its reason: an entry re-applied
/// by a restore is logged again under its operation id with the restore's
/// time and reason.)
fn effect(l: &LedgerLine) -> impl PartialEq + '_ {
    (
        (&l.op, &l.tenant, &l.target),
        crate::state::is_retention_reason(l.reason.as_deref()),
        (&l.principal, &l.label, &l.role),
        (&l.scope, &l.on),
        (&l.class, &l.period_ms),
    )
}

/// Whether a deletion's line lists the other versions of its chain as the
/// state knows them (`want`, from [`LedgerLine::with_state`]): each one the
/// state holds, and no record the state holds outside the chain. (Ids the
/// state does not hold may be there: versions a restore of an older
/// backup left out.) A restore deletes the chain through these, so a line
/// missing one would leave that version alive.
fn versions_agree(l: &LedgerLine, want: &LedgerLine, st: &State) -> bool {
    want.versions.iter().all(|v| l.versions.contains(v))
        && l.versions.iter().all(|v| {
            want.versions.contains(v)
                || v.parse::<RecordId>()
                    .map_or(true, |id| st.idx(id).is_none())
        })
}

/// Lines of the ledger file whose effect differs from the log's entry
/// under the same operation id (a line damaged in place but still JSON),
/// as (line number, the log's line). The log is checksummed; the file is
/// not.
fn ledger_mismatches(lines: &[LedgerLine], st: &State) -> Vec<(usize, LedgerLine)> {
    let in_log: std::collections::HashMap<String, &LedgerEntry> =
        st.ledger.iter().map(|e| (e.op_id.to_string(), e)).collect();
    lines
        .iter()
        .enumerate()
        .filter_map(|(n, l)| {
            let want = LedgerLine::with_state(in_log.get(&l.op_id)?, st);
            (effect(&want) != effect(l) || !versions_agree(l, &want, st)).then_some((n + 1, want))
        })
        .collect()
}

/// A damaged ledger line written again: its number, and the log's entry.
type Rewritten = (usize, LedgerLine);

/// Appends the log's ledger entries missing from the ledger file. A torn
/// tail, or a line that differs from the log's entry of its operation
/// (damaged in place), is repaired by rewriting the file whole, the log's
/// entry in place of the damaged line.
/// Returns the damaged lines it rewrote, as (line number, the log's line),
/// the file's lines as it read them (damaged ones replaced), the log's
/// entries it lacked, and whether writing them succeeded (the file is
/// then as they say, whole or lagging).
#[allow(clippy::type_complexity)]
fn reconcile_ledger(
    backend: &dyn Backend,
    dir: &Path,
    st: &State,
) -> Result<(Vec<Rewritten>, Vec<LedgerLine>, Vec<LedgerLine>, Result<()>)> {
    let (mut lines, torn) = read_ledger_checked(backend, dir)?;
    let have: BTreeSet<String> = lines.iter().map(|l| l.op_id.clone()).collect();
    let missing: Vec<LedgerLine> = st
        .ledger
        .iter()
        .filter(|e| !have.contains(&e.op_id.to_string()))
        .map(|e| LedgerLine::with_state(e, st))
        .collect();
    let damaged = ledger_mismatches(&lines, st);
    for (n, want) in &damaged {
        lines[n - 1] = want.clone();
    }
    let written = if torn || !damaged.is_empty() {
        let mut all = lines.clone();
        all.extend(missing.iter().cloned());
        write_all_durable(backend, &ledger_path(dir), render_ledger(&all).as_bytes())
    } else if !missing.is_empty() {
        append_durable(
            backend,
            &ledger_path(dir),
            render_ledger(&missing).as_bytes(),
        )
    } else {
        Ok(())
    };
    Ok((damaged, lines, missing, written.map_err(EngineError::from)))
}

/// How `verify` names a ledger file that could not be written after an
/// operation (the start of its problem line).
const LEDGER_LAGS: &str = "ledger.jsonl lags the log";

impl Engram {
    /// After the lifecycle operation `op` is durable in the log: the ledger
    /// file brought up to date. A failure to write it (a full disk) neither
    /// fails nor undoes the operation, which the log holds and every later
    /// open (or operation) writes into the ledger again; until then
    /// `verify` names it. (Why: answering an error for an operation that
    /// is stored and applied would tell its caller it did not happen.)
    pub(crate) fn sync_ledger_after_op(&self, op: RecordId) {
        let synced = self.sync_ledger();
        self.ledger_lags(&format!("after operation {op}"), synced.err());
    }

    /// Says in `verify`'s problems that the ledger file lags the log
    /// because writing it failed `when` (`Some` error), or that it no
    /// longer does (`None`).
    pub(crate) fn ledger_lags(&self, when: &str, failed: Option<EngineError>) {
        let mut found = self.ledger_sync();
        found.retain(|p| !p.starts_with(LEDGER_LAGS));
        if let Some(e) = failed {
            found.push(format!(
                "{LEDGER_LAGS}: it could not be written {when} ({e}); every operation is stored in the log, and the next open or lifecycle operation writes the ledger from it"
            ));
        }
    }

    /// Brings the ledger file up to date with the log; returns its lines
    /// as it left them (so an open reads the file once).
    pub(crate) fn sync_ledger(&self) -> Result<Vec<LedgerLine>> {
        let (lines, _, written) = self.sync_ledger_counted()?;
        written?;
        Ok(lines)
    }

    /// [`Engram::sync_ledger`], also counting the operations of the log
    /// the file lacked (a crash between an operation and its line, or a
    /// file cut short): a read-only open writes them in memory only, and
    /// `verify` says so. A failure to write the file is returned beside
    /// the lines, not as the error: an open goes on without it (on a full
    /// disk, a store whose last operation's line could not be written
    /// would otherwise not open at all, for a side record the log holds).
    pub(crate) fn sync_ledger_counted(&self) -> Result<(Vec<LedgerLine>, usize, Result<()>)> {
        let mut found = self.ledger_sync();
        let st = self.state();
        let (damaged, mut lines, missing, written) =
            reconcile_ledger(self.backend().as_ref(), self.dir(), &st)?;
        // (written now: a lag said earlier is over)
        if written.is_ok() {
            found.retain(|p| !p.starts_with(LEDGER_LAGS));
        }
        let n_missing = missing.len();
        lines.extend(missing);
        // A writable open has fixed the file; a read-only one only in
        // memory, so the file on disk is still damaged: `verify` says so.
        if self.options().read_only {
            found.extend(damaged.into_iter().map(|(n, want)| {
                format!(
                    "ledger.jsonl line {n} differs from the log's operation {} ({}); a writable open writes it again from the log",
                    want.op_id, want.op
                )
            }));
        }
        Ok((lines, n_missing, written))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_storage::MemBackend;

    /// `restore.pending` is written whole, so a line cut short is damage,
    /// refused with the restore's remedy (it was dropped as a torn append,
    /// and what the restore had to re-apply was lost); in the appended
    /// ledger a torn last line is a crash while appending.
    #[test]
    fn a_torn_line_is_damage_in_restore_pending_only() {
        let b = MemBackend::new();
        b.create_dir_all(Path::new("/s")).unwrap();
        let path = Path::new("/s/f.jsonl");
        b.write_file(
            path,
            b"{\"op_id\":\"01JYWFQM00WY5D3AH0QGQVB41C\",\"tenant\":\"t\",\"at_ms\":0,\"op\":\"del",
        );
        let (lines, torn) = read_ledger_file(&b, path, LedgerFile::Ledger).unwrap();
        assert!(lines.is_empty() && torn);
        let e = read_ledger_file(&b, path, LedgerFile::RestorePending).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("line 1"), "{text}");
        assert!(text.contains("engram restore BACKUP"), "{text}");
        b.write_file(path, b"not json\n{\"end\": 1}\n");
        let e = read_ledger_file(&b, path, LedgerFile::RestorePending).unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
        assert!(e.to_string().contains("interrupted restore"), "{e}");
    }

    /// A `restore.pending` cut at a line's end (or emptied) lacks its
    /// closing line, and one that lost lines says so by its count: both
    /// are refused (the first line alone was read as the whole file, and
    /// the deletions after it came back).
    #[test]
    fn restore_pending_cut_at_a_line_end_is_refused() {
        let b = MemBackend::new();
        b.create_dir_all(Path::new("/s")).unwrap();
        let path = Path::new("/s/restore.pending");
        let line = |n: u128| LedgerLine {
            op_id: RecordId(n).to_string(),
            tenant: "t".into(),
            op: "delete".into(),
            target: Some(RecordId(1).to_string()),
            ..LedgerLine::default()
        };
        let whole = render_restore_pending(&[line(10), line(11)]);
        b.write_file(path, whole.as_bytes());
        let (lines, _) = read_ledger_file(&b, path, LedgerFile::RestorePending).unwrap();
        assert_eq!(lines.len(), 2);
        let first_line_only = whole.lines().next().unwrap().to_string() + "\n";
        for cut in [first_line_only.as_str(), ""] {
            b.write_file(path, cut.as_bytes());
            let e = read_ledger_file(&b, path, LedgerFile::RestorePending).unwrap_err();
            assert!(e.to_string().contains("cut short"), "{e}");
        }
        let lost = whole.lines().skip(1).collect::<Vec<_>>().join("\n") + "\n";
        b.write_file(path, lost.as_bytes());
        let e = read_ledger_file(&b, path, LedgerFile::RestorePending).unwrap_err();
        assert!(
            e.to_string().contains("holds 1 entries where it says 2"),
            "{e}"
        );
        b.write_file(path, render_restore_pending(&[]).as_bytes());
        let (lines, _) = read_ledger_file(&b, path, LedgerFile::RestorePending).unwrap();
        assert!(lines.is_empty());
    }
}
