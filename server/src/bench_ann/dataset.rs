//! Checks of a `bench ann` dataset: its attributes and filters, which
//! files a kept store was built from, and what a filter definition of
//! `filters.json` may hold; and the texts of `base.jsonl` and
//! `queries.jsonl` (shared with `bench recall --seed-data`).

use std::path::Path;

use serde::Deserialize;

use super::{Npy, read_npy};
use crate::bench::fail;
use crate::cli::CliError;

/// The length and modification time of the dataset's `base.npy` and
/// `attrs.npy`, as text (`-` for a file that is absent).
pub(super) fn dataset_files(d: &Path) -> String {
    ["base.npy", "attrs.npy"]
        .iter()
        .map(|f| match std::fs::metadata(d.join(f)) {
            Ok(m) => {
                let mtime = m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |t| t.as_nanos());
                format!("{f}:{}:{mtime}", m.len())
            }
            Err(_) => format!("{f}:-"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A filter definition of `filters.json`: `tenants` (integers) and
/// `ts_min` (an integer, unix seconds) select rows; `predicate`,
/// `n_eligible` and `selectivity` describe them. Any other key, or a key
/// of the wrong type, is refused: a filter misread as no filter would be
/// scored against ground truth it does not match. (An empty definition is
/// every live row, as `live` is.)
pub(super) fn check_filter_def(def: &serde_json::Value) -> Result<(), String> {
    let Some(fields) = def.as_object() else {
        return Err("expected an object".into());
    };
    for (k, v) in fields {
        // an empty list would read as no tenant term, so every row
        if v.as_array().is_some_and(Vec::is_empty) && k == "tenants" {
            return Err(
                "`tenants` is empty: name at least one tenant, or leave the key out for every tenant"
                    .into(),
            );
        }
        let ok = match k.as_str() {
            "tenants" => v
                .as_array()
                .is_some_and(|a| a.iter().all(serde_json::Value::is_i64)),
            "ts_min" => v.as_i64().is_some_and(|t| TIMESTAMPS.contains(&t)),
            "n_eligible" => v.is_i64(),
            "predicate" => v.is_string(),
            "selectivity" => v.is_number(),
            other => {
                return Err(format!(
                    "unknown key `{other}` (keys: tenants, ts_min, predicate, n_eligible, selectivity)"
                ));
            }
        };
        if !ok {
            return Err(format!(
                "`{k}` must be {}",
                match k.as_str() {
                    "tenants" => "an array of integers",
                    "ts_min" => TIMESTAMP_RULE,
                    "n_eligible" => "an integer",
                    "predicate" => "a string",
                    _ => "a number",
                }
            ));
        }
    }
    Ok(())
}

/// The timestamps (Unix seconds) a record's `occurred_at` may take: years
/// 0001 to 9999.
const TIMESTAMPS: std::ops::RangeInclusive<i64> =
    engram_engine::time::TIMESTAMP_MIN_MS / 1000..=engram_engine::time::TIMESTAMP_MAX_MS / 1000;

/// [`TIMESTAMPS`], as an error says it.
const TIMESTAMP_RULE: &str = "an integer of Unix seconds within years 0001..9999";

/// The dataset's `attrs.npy` (tenant, timestamp and deleted per base row),
/// if it has one, checked against its `n` base rows; `filters.json`'s
/// definitions checked, and `--only`'s names (`only`) against them: what
/// would stop the run is said before anything is built.
pub(super) fn attributes_and_filters(
    d: &Path,
    n: usize,
    (only, no_filters): (&[String], bool),
) -> Result<Option<Npy<i64>>, CliError> {
    let attrs = if d.join("attrs.npy").exists() {
        let at = read_npy::<i64>(&d.join("attrs.npy"))?;
        if at.shape.len() != 2 || at.shape[0] != n || at.shape[1] != 3 {
            return Err(CliError::Message(format!(
                "attrs.npy must be [{n}, 3] (tenant, timestamp, deleted per base row); it is {:?}",
                at.shape
            )));
        }
        if let Some(row) = (0..n).find(|&i| !matches!(at.data[i * 3 + 2], 0 | 1)) {
            return Err(CliError::Message(format!(
                "attrs.npy row {row}: deleted is {}, not 0 or 1",
                at.data[row * 3 + 2]
            )));
        }
        if let Some(row) = (0..n).find(|&i| !TIMESTAMPS.contains(&at.data[i * 3 + 1])) {
            return Err(CliError::Message(format!(
                "attrs.npy row {row}: timestamp is {}, not {TIMESTAMP_RULE}",
                at.data[row * 3 + 1]
            )));
        }
        Some(at)
    } else {
        None
    };
    // A malformed filters.json stops the run before anything is measured.
    if let Ok(fjson) = std::fs::read_to_string(d.join("filters.json")) {
        let defs: serde_json::Value = serde_json::from_str(&fjson)
            .map_err(|e| CliError::Message(format!("filters.json: {e}")))?;
        let Some(named) = defs.as_object() else {
            return Err(CliError::Message(
                "filters.json: expected an object of named filters".into(),
            ));
        };
        if named.contains_key("none") {
            return Err(CliError::Message(
                "filters.json: a filter named 'none': the name is the unfiltered run's (gt.npy); rename it".into(),
            ));
        }
        for (name, def) in named {
            check_filter_def(def)
                .map_err(|e| CliError::Message(format!("filters.json: filter '{name}': {e}")))?;
        }
        // and so does an `--only` naming no filter (before the build)
        if let Some(unknown) = only
            .iter()
            .find(|o| *o != "none" && !named.contains_key(o.as_str()))
        {
            let mut names: Vec<&str> = named.keys().map(String::as_str).collect();
            names.sort_unstable();
            return Err(CliError::Message(format!(
                "--only: no ground truth named '{unknown}' (available: none, {})",
                names.join(", ")
            )));
        }
    }
    // `--only` asking only for filtered configurations that cannot run
    // measures nothing: said before anything is built
    let filtered_only = !only.is_empty() && only.iter().all(|o| o != "none");
    if filtered_only && no_filters {
        return Err(CliError::Message(
            "--only names filtered configurations only, and --no-filters skips them all: nothing to measure".into(),
        ));
    }
    if filtered_only && (attrs.is_none() || !d.join("filters.json").exists()) {
        return Err(CliError::Message(
            "--only names filtered configurations only, and the dataset has no attrs.npy and filters.json: nothing to measure".into(),
        ));
    }
    Ok(attrs)
}

/// The `text` of each line of a JSON-lines file (blank lines skipped); a
/// line that is not an object with a string `text` is named by its number.
pub(crate) fn read_texts(path: &Path) -> Result<Vec<String>, CliError> {
    #[derive(Deserialize)]
    struct Row {
        id: Option<serde_json::Value>,
        text: String,
    }
    let body =
        std::fs::read_to_string(path).map_err(|e| fail(format!("{}: {e}", path.display())))?;
    // (a byte-order mark is no part of the first line, as ingest reads it)
    let body = body.strip_prefix('\u{feff}').unwrap_or(&body);
    body.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .enumerate()
        .map(|(row, (n, l))| {
            let at = |what: String| fail(format!("{} line {}: {what}", path.display(), n + 1));
            let r = serde_json::from_str::<Row>(l).map_err(|e| at(e.to_string()))?;
            // one line per row, in order: an `id` says which row it is
            match r.id.as_ref().and_then(serde_json::Value::as_i64) {
                Some(id) if id != row as i64 => Err(at(format!(
                    "id {id} on the line of row {row}: one line per row, in order"
                ))),
                _ => Ok(r.text),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{check_filter_def, read_texts};
    use serde_json::json;

    #[test]
    fn filter_definitions_are_read_strictly() {
        // the shapes of the 20k set's filters.json
        for ok in [
            json!({"predicate": "tenant == 0 AND deleted == 0", "tenants": [0], "n_eligible": 1861, "selectivity": 0.09}),
            json!({"tenants": [1, 2], "ts_min": 1_704_067_200, "n_eligible": 19, "selectivity": 0.001, "predicate": "p"}),
            json!({"predicate": "deleted == 0", "n_eligible": 19_600, "selectivity": 0.98}),
            json!({}),
        ] {
            assert_eq!(check_filter_def(&ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            (json!({"tenant": [0]}), "unknown key `tenant`"),
            (
                json!({"tenants": 0}),
                "`tenants` must be an array of integers",
            ),
            (
                json!({"tenants": ["0"]}),
                "`tenants` must be an array of integers",
            ),
            (json!({"tenants": []}), "`tenants` is empty"),
            (
                json!({"ts_min": "2024-01-01"}),
                "`ts_min` must be an integer",
            ),
            // past what a time may hold (it overflowed into milliseconds)
            (
                json!({"ts_min": 4_611_686_018_427_387_904_i64}),
                "years 0001..9999",
            ),
            (json!({"ts_min": -62_135_596_801_i64}), "years 0001..9999"),
            (json!([0]), "expected an object"),
        ] {
            let e = check_filter_def(&bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn texts_are_one_line_per_row_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("base.jsonl");
        std::fs::write(&p, "\u{feff}{\"id\": 0, \"text\": \"a\"}\n\n{\"id\": 1, \"text\": \"b\"}\n{\"text\": \"c\"}\n").unwrap();
        assert_eq!(read_texts(&p).unwrap(), ["a", "b", "c"]);
        std::fs::write(
            &p,
            "{\"id\": 0, \"text\": \"a\"}\n{\"id\": 8, \"text\": \"b\"}\n",
        )
        .unwrap();
        let e = read_texts(&p).unwrap_err().to_string();
        assert!(e.contains("line 2: id 8 on the line of row 1"), "{e}");
    }
}
