//! Checks of a `bench ann` dataset: which files a kept store was built
//! from, and what a filter definition of `filters.json` may hold.

use std::path::Path;

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
        let ok = match k.as_str() {
            "tenants" => v
                .as_array()
                .is_some_and(|a| a.iter().all(serde_json::Value::is_i64)),
            "ts_min" | "n_eligible" => v.is_i64(),
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
                    "ts_min" | "n_eligible" => "an integer",
                    "predicate" => "a string",
                    _ => "a number",
                }
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_filter_def;
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
            (
                json!({"ts_min": "2024-01-01"}),
                "`ts_min` must be an integer",
            ),
            (json!([0]), "expected an object"),
        ] {
            let e = check_filter_def(&bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
