//! Operator repair of a log that recovery refused to open: find how far the
//! log is intact, and cut it at an LSN the operator names, moving every cut
//! byte into a quarantine directory instead of deleting it.
//!
//! Recovery itself only ever cuts a torn tail that nothing proves was
//! acknowledged. Anything else (damage in the middle of the log, a damaged
//! tail that a snapshot or the state checkpoint proves durable, a missing
//! segment) stops the store from opening; cutting the log there loses
//! acknowledged records, which is an operator's decision, made here.
//!
//! This module must never delete bytes of a segment: what it cuts is
//! written to quarantine and synced before the segment is shortened.

use std::path::{Path, PathBuf};

use crate::backend::{Backend, MapOptions, OpenMode};
use crate::error::{StorageError, StorageResult};
use crate::frame::Lsn;
use crate::log::recovery;
use crate::log::segment::{self, SEGMENT_HEADER_BYTES};

/// How far the log is intact, as [`inspect`] found it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogInspection {
    /// Segment files found.
    pub n_segments: usize,
    /// Every LSN from 1 through this one is present, intact, and ends an
    /// atomic batch: the largest LSN a cut may keep.
    pub intact_through: Lsn,
    /// Batch-end LSNs a cut may keep, newest last (at most the last 20).
    pub recent_batch_ends: Vec<Lsn>,
    /// The first problem found after `intact_through`, if any.
    pub problem: Option<String>,
    /// Bytes after `intact_through` (what cutting there would quarantine).
    pub bytes_after: u64,
    /// Highest LSN of an intact frame found anywhere after the problem
    /// (what cutting at `intact_through` would lose, at least).
    pub highest_lsn_seen: Lsn,
    /// LSN of the last frame of the intact part (`intact_through` may be
    /// past it: a compacted segment's header records an end past frames
    /// the compaction dropped). What derived state's evidence is held to.
    pub last_frame_lsn: Lsn,
}

/// What [`repair`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// The log now ends at this LSN.
    pub kept_through: Lsn,
    /// Files written or moved into quarantine.
    pub quarantined: Vec<PathBuf>,
    /// Bytes moved into quarantine.
    pub bytes_quarantined: u64,
}

struct SegInfo {
    no: u64,
    path: PathBuf,
    len: u64,
    first_lsn: Lsn,
    end_lsn: Option<Lsn>,
    /// The length its header records a rewrite wrote whole.
    whole_len: Option<u64>,
    /// (batch-end LSN, offset just past that frame)
    batch_ends: Vec<(Lsn, u64)>,
    /// Whether the walk stopped inside this segment (at the problem): its
    /// header's `end_lsn` then says what it held, not what is intact.
    damaged: bool,
}

impl SegInfo {
    /// The end LSN its header records, when that is known to be intact (a
    /// sealed segment walked to its end: a compacted segment may have
    /// dropped frames at its end and still covers their LSNs).
    fn intact_end(&self) -> Option<Lsn> {
        if self.damaged { None } else { self.end_lsn }
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StorageError + '_ {
    move |e| StorageError::io(path, e)
}

/// What [`walk`] found.
struct Walk {
    /// Segments walked (the last one possibly cut short by the problem).
    intact: Vec<SegInfo>,
    /// The first problem.
    problem: Option<String>,
    /// Segments not walked: (number, path, length).
    rest: Vec<(u64, PathBuf, u64)>,
    /// Highest LSN of an intact frame seen past the problem.
    highest: Lsn,
}

/// Walks the log from its start and stops at the first problem.
fn walk(backend: &dyn Backend, dir: &Path) -> StorageResult<Walk> {
    let numbers = segment::segment_numbers(backend, dir, false)?;
    let mut intact: Vec<SegInfo> = Vec::new();
    let mut problem = None;
    let mut rest = Vec::new();
    let mut highest = 0;
    let mut prev_end: Lsn = 0;
    let mut expected_no = 1;
    for (i, &no) in numbers.iter().enumerate() {
        let path = segment::segment_path(dir, no);
        let file = backend.open(&path, OpenMode::Read).map_err(io_err(&path))?;
        let len = file.len().map_err(io_err(&path))?;
        if problem.is_some() {
            highest = highest.max(highest_lsn_in(&*file, len));
            rest.push((no, path, len));
            continue;
        }
        let map = file
            .map(len, MapOptions::default())
            .map_err(io_err(&path))?;
        let header = match segment::decode_header(&map) {
            Ok(h) => h,
            Err(segment::HeaderProblem::Incomplete | segment::HeaderProblem::Damaged(_))
                if i + 1 == numbers.len() && len <= SEGMENT_HEADER_BYTES as u64 =>
            {
                // never written to: not a problem, nothing to keep (the
                // rule recovery applies; a longer file whose header is
                // zeros or damaged holds frames that cannot be read
                // without it, and every open refuses it)
                rest.push((no, path, len));
                continue;
            }
            // A newer Engram's segment is not damage: nothing here may
            // judge (or cut) it.
            Err(segment::HeaderProblem::Unsupported(v)) if v > segment::LOG_FORMAT_VERSION => {
                return Err(StorageError::UnsupportedFormat {
                    segment: no,
                    found: v,
                    supported: segment::LOG_FORMAT_VERSION,
                });
            }
            Err(p) => {
                problem = Some(format!("segment {no}: bad header: {p}"));
                rest.push((no, path, len));
                continue;
            }
        };
        if no != expected_no || header.first_lsn != prev_end + 1 {
            problem = Some(format!(
                "LSNs {}..={} are missing (segment {no} starts at LSN {}{})",
                prev_end + 1,
                header.first_lsn.saturating_sub(1).max(prev_end + 1),
                header.first_lsn,
                if no != expected_no {
                    format!("; segment file {expected_no} is missing")
                } else {
                    String::new()
                }
            ));
            highest = highest.max(highest_lsn_in(&*file, len));
            rest.push((no, path, len));
            continue;
        }
        expected_no = no + 1;
        let scan = recovery::scan(
            &map,
            SEGMENT_HEADER_BYTES as u64,
            header.first_lsn - 1,
            header.end_lsn.unwrap_or(0),
        );
        let mut info = SegInfo {
            no,
            path: path.clone(),
            len,
            first_lsn: header.first_lsn,
            end_lsn: header.end_lsn,
            whole_len: header.whole_len,
            batch_ends: Vec::new(),
            damaged: false,
        };
        // Batch ends of the intact prefix, found by walking it again.
        let mut pos = SEGMENT_HEADER_BYTES as u64;
        while pos < scan.batch_end {
            let Ok((h, _)) = crate::frame::decode(&map[crate::cast::usize_from(pos)..]) else {
                break;
            };
            pos += h.encoded_len() as u64;
            if h.is_batch_end() {
                info.batch_ends.push((h.lsn, pos));
            }
        }
        let last_kept = scan.last_lsn.unwrap_or(header.first_lsn - 1);
        let zero_tail = matches!(
            &scan.stop,
            Some((at, recovery::StopReason::Frame(crate::frame::FrameError::ZeroFilled)))
                if *at == scan.batch_end && map[crate::cast::usize_from(*at)..].iter().all(|&b| b == 0)
        );
        if let Some((at, why)) = &scan.stop
            && !zero_tail
        {
            problem = Some(format!("segment {no} offset {at}: {why}"));
        } else if scan.valid_end != scan.batch_end {
            problem = Some(format!(
                "segment {no} offset {}: the segment ends inside a batch",
                scan.batch_end
            ));
        }
        // (the header proves a rewrite wrote it whole past where its
        // batches end: whatever ends them there is damage)
        if let Some(w) = header.whole_past(scan.batch_end) {
            let whole = format!(
                "its header records that a compaction, restore or repair wrote it whole \
                 through byte {w}"
            );
            problem = Some(match problem.take() {
                Some(p) => format!("{p}; {whole}"),
                None => format!(
                    "segment {no} offset {}: its frames end there, but {whole}",
                    scan.batch_end
                ),
            });
        }
        if problem.is_some() {
            info.damaged = true;
            highest = highest.max(scan.unfinished_batch_lsns.last().copied().unwrap_or(0));
            highest = highest.max(highest_lsn_in(&*file, len));
        }
        prev_end = last_kept.max(info.intact_end().unwrap_or(0));
        intact.push(info);
    }
    Ok(Walk {
        intact,
        problem,
        rest,
        highest,
    })
}

/// Highest LSN of any intact frame in a file (looked for at every aligned
/// offset, so it also finds frames after damage).
fn highest_lsn_in(file: &dyn crate::backend::BackendFile, len: u64) -> Lsn {
    let Ok(map) = file.map(len, MapOptions::default()) else {
        return 0;
    };
    let mut best = 0;
    let mut pos = SEGMENT_HEADER_BYTES;
    while pos + crate::frame::FRAME_HEADER_BYTES <= map.len() {
        if let Ok((h, _)) = crate::frame::decode(&map[pos..]) {
            best = best.max(h.lsn);
            pos += h.encoded_len();
        } else {
            pos += crate::frame::FRAME_ALIGN;
        }
    }
    best
}

/// Reads the log in `dir` without changing anything and reports how far it
/// is intact and what is wrong after that.
pub fn inspect(backend: &dyn Backend, dir: &Path) -> StorageResult<LogInspection> {
    let Walk {
        intact,
        problem,
        rest,
        highest,
    } = walk(backend, dir)?;
    let all_ends: Vec<Lsn> = std::iter::once(0)
        .chain(
            intact
                .iter()
                .flat_map(|s| s.batch_ends.iter().map(|&(l, _)| l)),
        )
        .collect();
    let intact_through = intact
        .iter()
        .map(|s| {
            s.batch_ends
                .last()
                .map_or(s.first_lsn - 1, |&(l, _)| l)
                .max(s.intact_end().unwrap_or(0))
        })
        .max()
        .unwrap_or(0);
    let mut bytes_after = rest.iter().map(|r| r.2).sum::<u64>();
    if let Some(last) = intact.last() {
        let kept = last
            .batch_ends
            .last()
            .map_or(SEGMENT_HEADER_BYTES as u64, |&(_, o)| o);
        bytes_after += last.len.saturating_sub(kept);
    }
    let last_frame_lsn = intact
        .iter()
        .filter_map(|s| s.batch_ends.last().map(|&(l, _)| l))
        .max()
        .unwrap_or(0);
    Ok(LogInspection {
        n_segments: intact.len() + rest.len(),
        intact_through,
        last_frame_lsn,
        recent_batch_ends: all_ends[all_ends.len().saturating_sub(20)..].to_vec(),
        problem,
        bytes_after,
        highest_lsn_seen: highest.max(intact_through),
    })
}

/// Where a cut keeping `keep_through` goes (segment index and offset), or
/// an error naming the batch ends a cut may keep.
fn cut_point(intact: &[SegInfo], keep_through: Lsn) -> StorageResult<Option<(usize, u64)>> {
    let mut at: Option<(usize, u64)> = None;
    if keep_through == 0 {
        if !intact.is_empty() {
            at = Some((0, SEGMENT_HEADER_BYTES as u64));
        }
    } else {
        for (i, s) in intact.iter().enumerate() {
            if let Some(&(_, off)) = s.batch_ends.iter().find(|&&(l, _)| l == keep_through) {
                at = Some((i, off));
                break;
            }
            // A rewritten segment whose frames all were dropped still covers its LSNs.
            if s.batch_ends.is_empty() && s.intact_end() == Some(keep_through) {
                at = Some((i, SEGMENT_HEADER_BYTES as u64));
                break;
            }
        }
        if at.is_none() {
            let ends: Vec<String> = intact
                .iter()
                .flat_map(|s| s.batch_ends.iter().map(|&(l, _)| l))
                .rev()
                .take(5)
                .map(|l| l.to_string())
                .collect();
            return Err(StorageError::InvalidOptions {
                reason: format!(
                    "LSN {keep_through} is not the end of an intact atomic batch of this log \
                     (the latest are: {}); a cut may only keep whole batches of intact data",
                    if ends.is_empty() {
                        "none".to_string()
                    } else {
                        ends.join(", ")
                    }
                ),
            });
        }
    }
    Ok(at)
}

/// Checks, changing nothing, that [`repair`] would accept `keep_through`
/// for the log in `dir`.
pub fn check_cut(backend: &dyn Backend, dir: &Path, keep_through: Lsn) -> StorageResult<()> {
    let Walk { intact, .. } = walk(backend, dir)?;
    cut_point(&intact, keep_through).map(|_| ())
}

/// Cuts the log in `dir` so that it ends at `keep_through` (a batch-end
/// LSN inside the intact part, or 0 for an empty log). Every byte after
/// it is written to (or, for whole segments, moved into) `quarantine`,
/// synced, before anything is shortened. The store must be closed.
pub fn repair(
    backend: &dyn Backend,
    dir: &Path,
    keep_through: Lsn,
    quarantine: &Path,
) -> StorageResult<RepairReport> {
    let Walk { intact, rest, .. } = walk(backend, dir)?;
    let at = cut_point(&intact, keep_through)?;
    backend
        .create_dir_all(quarantine)
        .map_err(io_err(quarantine))?;
    let mut report = RepairReport {
        kept_through: keep_through,
        ..RepairReport::default()
    };
    let mut moves: Vec<(PathBuf, u64)> = Vec::new();
    if let Some((idx, offset)) = at {
        let s = &intact[idx];
        // The segment now covers LSNs, and holds bytes written whole, only
        // up to the cut (also when the cut removes no byte: a segment cut
        // at a batch's edge before it came here).
        let new_end = s
            .end_lsn
            .map(|end| {
                if end > keep_through {
                    keep_through
                } else {
                    end
                }
            })
            .filter(|&end| end >= s.first_lsn);
        let new_whole = s.whole_len.map(|w| w.min(offset));
        let new_header = new_end != s.end_lsn || new_whole != s.whole_len;
        if s.len > offset || new_header {
            let file = backend
                .open(&s.path, OpenMode::Write)
                .map_err(io_err(&s.path))?;
            if s.len > offset {
                let mut buf = vec![0u8; crate::cast::usize_from(s.len - offset)];
                file.read_exact_at(&mut buf, offset)
                    .map_err(io_err(&s.path))?;
                let q = quarantine.join(format!(
                    "{}.from-{offset}",
                    segment::segment_file_name(s.no)
                ));
                let qf = backend.open(&q, OpenMode::Truncate).map_err(io_err(&q))?;
                qf.write_all_at(&buf, 0).map_err(io_err(&q))?;
                qf.sync_data().map_err(io_err(&q))?;
                backend.sync_dir(quarantine).map_err(io_err(quarantine))?;
                report.bytes_quarantined += buf.len() as u64;
                report.quarantined.push(q);
                file.set_len(offset).map_err(io_err(&s.path))?;
            }
            if new_header {
                file.write_all_at(
                    &segment::encode_header_with_end(s.no, s.first_lsn, new_end, new_whole),
                    0,
                )
                .map_err(io_err(&s.path))?;
            }
            file.sync_data().map_err(io_err(&s.path))?;
        }
        for later in &intact[idx + 1..] {
            moves.push((later.path.clone(), later.len));
        }
    }
    for (_, path, len) in &rest {
        moves.push((path.clone(), *len));
    }
    for (path, len) in moves {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let q = quarantine.join(name);
        backend.rename(&path, &q).map_err(io_err(&path))?;
        report.bytes_quarantined += len;
        report.quarantined.push(q);
    }
    backend.sync_dir(quarantine).map_err(io_err(quarantine))?;
    backend.sync_dir(dir).map_err(io_err(dir))?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemBackend;

    /// A segment a newer Engram wrote is not damage: inspecting or
    /// repairing the log refuses it by name, and nothing is cut or moved.
    #[test]
    fn a_newer_format_segment_is_refused_not_judged_damaged() {
        let b = MemBackend::new();
        let dir = Path::new("/s/log");
        b.create_dir_all(dir).unwrap();
        let mut h = segment::encode_header(1, 1);
        h[8..10].copy_from_slice(&2u16.to_le_bytes());
        let crc = crc32c::crc32c(&h[..60]);
        h[60..].copy_from_slice(&crc.to_le_bytes());
        let path = segment::segment_path(dir, 1);
        b.write_file(&path, &h);
        for e in [
            inspect(&b, dir).map(|_| ()).unwrap_err(),
            check_cut(&b, dir, 0).unwrap_err(),
            repair(&b, dir, 0, Path::new("/s/quarantine/repair-1"))
                .map(|_| ())
                .unwrap_err(),
        ] {
            assert!(
                matches!(e, StorageError::UnsupportedFormat { found: 2, .. }),
                "{e}"
            );
        }
        assert_eq!(b.read_file(&path).unwrap(), h);
        assert!(!b.exists(Path::new("/s/quarantine/repair-1")));
    }

    /// A last segment no longer than a header that never became whole was
    /// never written to (nothing to repair), as recovery reads it; a
    /// longer one whose header is zeros holds frames that cannot be read,
    /// which every open refuses: inspecting names it (it said "intact
    /// through LSN 0; nothing to repair").
    #[test]
    fn a_zeroed_header_before_frames_is_a_problem_not_an_empty_segment() {
        let b = MemBackend::new();
        let dir = Path::new("/s/log");
        b.create_dir_all(dir).unwrap();
        let path = segment::segment_path(dir, 1);
        b.write_file(&path, &[0u8; SEGMENT_HEADER_BYTES]);
        let i = inspect(&b, dir).unwrap();
        assert!(i.problem.is_none(), "{:?}", i.problem);
        b.write_file(&path, &[0u8; SEGMENT_HEADER_BYTES + 512]);
        let i = inspect(&b, dir).unwrap();
        let p = i.problem.expect("a problem");
        assert!(p.contains("segment 1: bad header"), "{p}");
    }
}
