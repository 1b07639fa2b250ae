//! Data-driven tests of the query language front end.
//!
//! - `tests/lang/ok/NAME.eql`: a statement that must parse and check; its
//!   AST as pretty JSON is in `NAME.ast.json`. Each is also printed, parsed
//!   back and compared (spans aside), and read back from its JSON.
//! - `tests/lang/err/NAME.eql`: a statement that must fail; the rendered
//!   reports of its errors (blank-line separated) are in `NAME.err`.
//!
//! Every case runs with the same context: now is 2025-06-12T09:00:00Z, the
//! store has the vector spaces `text-embedding-3-small` (4 dimensions, small
//! so parameters stay short) and `mini-embed` (8), and its embedder makes
//! `mini-embed` vectors. A case changes that with header comments:
//! `-- params: {JSON object}`, `-- models: {JSON object of model: dims}`,
//! `-- embedder: MODEL | none | unknown`.
//!
//! To rewrite the expected files after an intended change, run
//! `ENGRAM_BLESS=1 cargo test -p engram-query --test lang_cases` and review
//! the diff before committing it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use engram_query::lang::{self, CheckContext, Embedder, Params, Statement};
use serde_json::Value;

const NOW_MS: i64 = 1_749_718_800_000; // 2025-06-12T09:00:00Z

fn context(text: &str) -> Result<CheckContext, String> {
    let mut ctx = CheckContext::new(Params::new(), NOW_MS);
    ctx.models = BTreeMap::from([
        ("text-embedding-3-small".to_string(), 4),
        ("mini-embed".to_string(), 8),
    ]);
    ctx.embedder = Embedder::Model("mini-embed".into());
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("--") else {
            continue;
        };
        let rest = rest.trim();
        if let Some(p) = rest.strip_prefix("params:") {
            ctx.params = Params::from_json(p).map_err(|e| format!("params header: {e}"))?;
        } else if let Some(m) = rest.strip_prefix("models:") {
            ctx.models = serde_json::from_str(m).map_err(|e| format!("models header: {e}"))?;
        } else if let Some(e) = rest.strip_prefix("embedder:") {
            ctx.embedder = match e.trim() {
                "none" => Embedder::Absent,
                "unknown" => Embedder::Unknown,
                m => Embedder::Model(m.to_string()),
            };
        }
    }
    Ok(ctx)
}

/// The AST as JSON with every `span` removed.
fn without_spans(s: &Statement) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("span");
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(s).expect("an AST serializes");
    strip(&mut v);
    v
}

/// Compares `actual` with the file at `expected` (or writes it when
/// blessing).
fn compare(expected: &Path, actual: &str) -> Result<(), String> {
    if std::env::var_os("ENGRAM_BLESS").is_some() {
        std::fs::write(expected, actual).map_err(|e| format!("{}: {e}", expected.display()))?;
        return Ok(());
    }
    let want = std::fs::read_to_string(expected).map_err(|e| {
        format!(
            "{}: {e} (run with ENGRAM_BLESS=1 to create it)",
            expected.display()
        )
    })?;
    if want != actual {
        return Err(format!(
            "{} differs (ENGRAM_BLESS=1 rewrites it)\n--- expected\n{want}\n--- actual\n{actual}",
            expected.display()
        ));
    }
    Ok(())
}

/// Runs one case file.
fn check(path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let ctx = context(&text)?;
    let ok_case = path.parent().is_some_and(|d| d.ends_with("ok"));
    let result = lang::compile(&text, &ctx);
    if ok_case {
        let stmt = result.map_err(|errors| {
            let reports: Vec<String> = errors.iter().map(|e| e.render(&text)).collect();
            format!("expected success, got:\n{}", reports.join("\n"))
        })?;
        let json = serde_json::to_string_pretty(&stmt).map_err(|e| e.to_string())? + "\n";
        compare(&path.with_extension("ast.json"), &json)?;
        // canonical text and one-line text parse back to the same AST
        for printed in [stmt.to_string(), stmt.to_line()] {
            let again = lang::parse(&printed).map_err(|e| {
                format!(
                    "printed text does not parse:\n{printed}\n{}",
                    e.render(&printed)
                )
            })?;
            if without_spans(&again) != without_spans(&stmt) {
                return Err(format!("printed text parses to another AST:\n{printed}"));
            }
        }
        // the JSON form reads back to the same AST, spans included
        let back: Statement =
            serde_json::from_str(&json).map_err(|e| format!("JSON does not read back: {e}"))?;
        if back != stmt {
            return Err("the JSON form reads back to another AST".into());
        }
        Ok(())
    } else {
        let errors = match result {
            Ok(_) => return Err("expected errors, got none".into()),
            Err(errors) => errors,
        };
        let reports: Vec<String> = errors.iter().map(|e| e.render(&text)).collect();
        compare(&path.with_extension("err"), &reports.join("\n"))
    }
}

fn cases(dir: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/lang")
        .join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "eql"))
        .collect();
    files.sort();
    files
}

fn run(dir: &str, at_least: usize) {
    let files = cases(dir);
    assert!(
        files.len() >= at_least,
        "{dir}: {} cases, expected at least {at_least}",
        files.len()
    );
    let failures: Vec<String> = files
        .iter()
        .filter_map(|p| check(p).err().map(|e| format!("{}: {e}", p.display())))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
}

#[test]
fn ok_cases() {
    run("ok", 6);
}

#[test]
fn err_cases() {
    run("err", 25);
}

/// Every `.ast.json` and `.err` has its `.eql` (a renamed case leaves none
/// behind).
#[test]
fn no_orphan_snapshots() {
    for dir in ["ok", "err"] {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/lang")
            .join(dir);
        for e in std::fs::read_dir(&root).expect("case directory").flatten() {
            let p = e.path();
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let stem = name
                .strip_suffix(".ast.json")
                .or_else(|| name.strip_suffix(".err"));
            if let Some(stem) = stem {
                assert!(
                    root.join(format!("{stem}.eql")).exists(),
                    "{} has no .eql",
                    p.display()
                );
            }
        }
    }
}
