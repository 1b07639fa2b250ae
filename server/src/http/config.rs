//! Configuration of `engram serve`: the listen address, the key file and
//! every limit, as named constants with defaults that an optional TOML file
//! (`--config engram.toml`) overrides.
//!
//! ```toml
//! listen = "127.0.0.1:7878"
//! key_file = "keys.json"        # relative to the data directory
//! metrics_auth = "none"         # or "admin": /metrics needs the store key
//!
//! [limits]
//! body_bytes_max = 16777216
//! request_timeout_ms = 30000
//! appends_in_flight_max = 64
//! ```
//!
//! Limits the engine also enforces (batch size, k, query text) may only be
//! lowered here. This module must never read anything but the file it is
//! given, and never accept an unknown setting silently.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use engram_engine::model::limits as engine;
use serde::Deserialize;

use crate::http::error::{ServerError, ServerResult};

/// Default listen address.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:7878";
/// Bytes of a request body (bulk ingest has its own limit).
pub const BODY_BYTES_MAX_DEFAULT: u64 = 16 << 20;
/// Bytes of a bulk ingest body (streamed: never held whole in memory).
pub const BULK_BODY_BYTES_MAX_DEFAULT: u64 = 4 << 30;
/// Bytes of one line of a bulk ingest body.
pub const BULK_LINE_BYTES_MAX_DEFAULT: usize = 4 << 20;
/// Records of one append request (and most lines of one bulk batch).
pub const BATCH_RECORDS_MAX_DEFAULT: usize = engine::BATCH_RECORDS_MAX;
/// Lines per atomic batch of bulk ingest when the request does not say.
pub const BULK_BATCH_DEFAULT: usize = 1000;
/// Results of one recall.
pub const K_MAX_DEFAULT: usize = engine::K_MAX;
/// Bytes of a query text.
pub const QUERY_TEXT_BYTES_MAX_DEFAULT: usize = engine::QUERY_TEXT_BYTES_MAX;
/// Byte budget of one context assembly.
pub const CONTEXT_BUDGET_BYTES_MAX_DEFAULT: usize = 1 << 20;
/// Items of one context section (semantic, episodic, recent).
pub const CONTEXT_ITEMS_MAX_DEFAULT: usize = 200;
/// Cases of one eval request.
pub const EVAL_CASES_MAX_DEFAULT: usize = 1000;
/// Records of one list request.
pub const LIST_LIMIT_MAX_DEFAULT: usize = 1000;
/// Deadline of one request (bulk ingest: until its response starts).
pub const REQUEST_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Time a client has to send the request head.
pub const HEADER_READ_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// Longest silence within a streamed bulk ingest body.
pub const BODY_IDLE_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Writes (appends, lifecycle operations, bulk batches) in flight.
pub const APPENDS_IN_FLIGHT_MAX_DEFAULT: usize = 64;
/// How long a write waits for a slot before 429.
pub const APPEND_QUEUE_WAIT_MS_DEFAULT: u64 = 0;
/// Reads (get, recall, context, eval, verify, ...) in flight.
pub const QUERIES_IN_FLIGHT_MAX_DEFAULT: usize = 32;
/// How long a read waits for a slot before 429.
pub const QUERY_QUEUE_WAIT_MS_DEFAULT: u64 = 250;
/// Bytes of answers built and waiting for their clients to read them
/// (512 MiB): an answer of 64 KiB or more that finds no room is answered
/// `429 busy` (docs/server.md, "Limits"; counted in KiB).
pub const ANSWER_BYTES_IN_FLIGHT_MAX_DEFAULT: u64 = 512 << 20;
/// How long a client may read nothing of its answer before its
/// connection is closed (the answer's memory given back).
pub const WRITE_STALL_TIMEOUT_MS_DEFAULT: u64 = 60_000;
/// Open connections; more are closed at once.
pub const CONNECTIONS_MAX_DEFAULT: usize = 1024;
/// Open connections from one client address: a quarter of
/// [`CONNECTIONS_MAX_DEFAULT`], so one client stalling connections (headers
/// sent slowly, or never) cannot take every slot and lock others out.
pub const CONNECTIONS_PER_CLIENT_MAX_DEFAULT: usize = 256;
/// How long shutdown waits for in-flight requests.
pub const SHUTDOWN_GRACE_MS_DEFAULT: u64 = 30_000;
/// How long closing the store at shutdown may go on putting waiting
/// vectors into their graphs before it writes the checkpoint with the
/// graphs as far as they got (`Engram::close_within`); the next start
/// indexes the rest. Ten seconds: with the request grace, shutdown fits
/// the stop timeouts service managers use (systemd's 90 s), so a large
/// ingest's backlog never turns a stop into a kill.
pub const SHUTDOWN_INDEX_MS_DEFAULT: u64 = 10_000;

/// Limits of the server.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// See [`BODY_BYTES_MAX_DEFAULT`].
    pub body_bytes_max: u64,
    /// See [`BULK_BODY_BYTES_MAX_DEFAULT`].
    pub bulk_body_bytes_max: u64,
    /// See [`BULK_LINE_BYTES_MAX_DEFAULT`].
    pub bulk_line_bytes_max: usize,
    /// See [`BATCH_RECORDS_MAX_DEFAULT`].
    pub batch_records_max: usize,
    /// See [`BULK_BATCH_DEFAULT`].
    pub bulk_batch_default: usize,
    /// See [`K_MAX_DEFAULT`].
    pub k_max: usize,
    /// See [`QUERY_TEXT_BYTES_MAX_DEFAULT`].
    pub query_text_bytes_max: usize,
    /// See [`CONTEXT_BUDGET_BYTES_MAX_DEFAULT`].
    pub context_budget_bytes_max: usize,
    /// See [`CONTEXT_ITEMS_MAX_DEFAULT`].
    pub context_items_max: usize,
    /// See [`EVAL_CASES_MAX_DEFAULT`].
    pub eval_cases_max: usize,
    /// See [`LIST_LIMIT_MAX_DEFAULT`].
    pub list_limit_max: usize,
    /// See [`REQUEST_TIMEOUT_MS_DEFAULT`].
    pub request_timeout_ms: u64,
    /// See [`HEADER_READ_TIMEOUT_MS_DEFAULT`].
    pub header_read_timeout_ms: u64,
    /// See [`BODY_IDLE_TIMEOUT_MS_DEFAULT`].
    pub body_idle_timeout_ms: u64,
    /// See [`APPENDS_IN_FLIGHT_MAX_DEFAULT`].
    pub appends_in_flight_max: usize,
    /// See [`APPEND_QUEUE_WAIT_MS_DEFAULT`].
    pub append_queue_wait_ms: u64,
    /// See [`QUERIES_IN_FLIGHT_MAX_DEFAULT`].
    pub queries_in_flight_max: usize,
    /// See [`QUERY_QUEUE_WAIT_MS_DEFAULT`].
    pub query_queue_wait_ms: u64,
    /// See [`ANSWER_BYTES_IN_FLIGHT_MAX_DEFAULT`].
    pub answer_bytes_in_flight_max: u64,
    /// See [`WRITE_STALL_TIMEOUT_MS_DEFAULT`].
    pub write_stall_timeout_ms: u64,
    /// See [`CONNECTIONS_MAX_DEFAULT`].
    pub connections_max: usize,
    /// See [`CONNECTIONS_PER_CLIENT_MAX_DEFAULT`].
    pub connections_per_client_max: usize,
    /// See [`SHUTDOWN_GRACE_MS_DEFAULT`].
    pub shutdown_grace_ms: u64,
    /// See [`SHUTDOWN_INDEX_MS_DEFAULT`].
    pub shutdown_index_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            body_bytes_max: BODY_BYTES_MAX_DEFAULT,
            bulk_body_bytes_max: BULK_BODY_BYTES_MAX_DEFAULT,
            bulk_line_bytes_max: BULK_LINE_BYTES_MAX_DEFAULT,
            batch_records_max: BATCH_RECORDS_MAX_DEFAULT,
            bulk_batch_default: BULK_BATCH_DEFAULT,
            k_max: K_MAX_DEFAULT,
            query_text_bytes_max: QUERY_TEXT_BYTES_MAX_DEFAULT,
            context_budget_bytes_max: CONTEXT_BUDGET_BYTES_MAX_DEFAULT,
            context_items_max: CONTEXT_ITEMS_MAX_DEFAULT,
            eval_cases_max: EVAL_CASES_MAX_DEFAULT,
            list_limit_max: LIST_LIMIT_MAX_DEFAULT,
            request_timeout_ms: REQUEST_TIMEOUT_MS_DEFAULT,
            header_read_timeout_ms: HEADER_READ_TIMEOUT_MS_DEFAULT,
            body_idle_timeout_ms: BODY_IDLE_TIMEOUT_MS_DEFAULT,
            appends_in_flight_max: APPENDS_IN_FLIGHT_MAX_DEFAULT,
            append_queue_wait_ms: APPEND_QUEUE_WAIT_MS_DEFAULT,
            queries_in_flight_max: QUERIES_IN_FLIGHT_MAX_DEFAULT,
            query_queue_wait_ms: QUERY_QUEUE_WAIT_MS_DEFAULT,
            answer_bytes_in_flight_max: ANSWER_BYTES_IN_FLIGHT_MAX_DEFAULT,
            write_stall_timeout_ms: WRITE_STALL_TIMEOUT_MS_DEFAULT,
            connections_max: CONNECTIONS_MAX_DEFAULT,
            connections_per_client_max: CONNECTIONS_PER_CLIENT_MAX_DEFAULT,
            shutdown_grace_ms: SHUTDOWN_GRACE_MS_DEFAULT,
            shutdown_index_ms: SHUTDOWN_INDEX_MS_DEFAULT,
        }
    }
}

/// Who may read `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum MetricsAuth {
    /// Anyone who can reach the listener (the default: the metrics carry
    /// no tenant ids, texts or keys).
    #[default]
    None,
    /// Only the store admin key.
    Admin,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ConfigFile {
    listen: Option<String>,
    key_file: Option<PathBuf>,
    metrics_auth: MetricsAuth,
    limits: Limits,
}

/// The resolved configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The key file.
    pub key_file: PathBuf,
    /// Who may read `/metrics`.
    pub metrics_auth: MetricsAuth,
    /// Limits.
    pub limits: Limits,
}

impl Config {
    /// Resolves the configuration: `--listen` over the file's `listen` over
    /// [`LISTEN_DEFAULT`]; `--key-file` (as given, like `engram keys
    /// --key-file`) over the file's `key_file` (relative to `data_dir`)
    /// over `data_dir/keys.json`.
    pub fn load(
        data_dir: &Path,
        file: Option<&Path>,
        (listen_flag, key_file_flag): (Option<&str>, Option<&Path>),
    ) -> ServerResult<Config> {
        let parsed = match file {
            None => ConfigFile::default(),
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| ServerError::Config {
                    path: p.to_path_buf(),
                    reason: format!("cannot read: {e}"),
                })?;
                let mut parsed: ConfigFile =
                    toml::from_str(&text).map_err(|e| ServerError::Config {
                        path: p.to_path_buf(),
                        reason: e.to_string().trim_end().to_string(),
                    })?;
                // A bulk batch left to its default fits a lower
                // `batch_records_max` (the start was refused, naming a
                // setting the file never gave); one given is checked.
                let given = toml::from_str::<toml::Table>(&text).is_ok_and(|t| {
                    t.get("limits")
                        .and_then(toml::Value::as_table)
                        .is_some_and(|l| l.contains_key("bulk_batch_default"))
                });
                if !given {
                    let l = &mut parsed.limits;
                    l.bulk_batch_default = l.bulk_batch_default.min(l.batch_records_max);
                }
                parsed
            }
        };
        let cfg_path = || file.map_or_else(|| PathBuf::from("--config"), Path::to_path_buf);
        // (`name`: the key in the file; the flag is named by the error's
        // path already)
        let address = |text: &str, source: PathBuf, name: Option<&str>| {
            text.parse::<SocketAddr>().map_err(|_| ServerError::Config {
                path: source,
                reason: format!(
                    "{}'{text}' is not an address like 127.0.0.1:7878",
                    name.map(|n| format!("{n}: ")).unwrap_or_default()
                ),
            })
        };
        // (the file's, checked even when --listen overrides it: a mistake
        // in it would surface only once the flag is dropped)
        let from_file = match &parsed.listen {
            Some(l) => Some(address(l, cfg_path(), Some("listen"))?),
            None => None,
        };
        let listen = match (listen_flag, from_file) {
            (Some(l), _) => address(l, PathBuf::from("--listen"), None)?,
            (None, Some(l)) => l,
            (None, None) => address(LISTEN_DEFAULT, PathBuf::from("--listen"), None)?,
        };
        let key_file = match parsed.key_file {
            _ if let Some(k) = key_file_flag => k.to_path_buf(),
            Some(k) if k.is_absolute() => k,
            Some(k) => data_dir.join(k),
            None => crate::http::keys::default_key_file(data_dir),
        };
        let cfg = Config {
            listen,
            key_file,
            metrics_auth: parsed.metrics_auth,
            limits: parsed.limits,
        };
        cfg.limits.check().map_err(|reason| ServerError::Config {
            path: cfg_path(),
            reason,
        })?;
        Ok(cfg)
    }
}

/// The most slots of a kind (appends, queries, connections) a server may
/// be configured with: far above what a machine serves at once.
pub const SLOTS_MAX: usize = 1_000_000;

impl Limits {
    /// Refuses zero limits and limits above what the engine enforces.
    pub fn check(&self) -> Result<(), String> {
        let nonzero: [(&str, u64); 20] = [
            ("body_bytes_max", self.body_bytes_max),
            ("bulk_body_bytes_max", self.bulk_body_bytes_max),
            ("bulk_line_bytes_max", self.bulk_line_bytes_max as u64),
            ("batch_records_max", self.batch_records_max as u64),
            ("bulk_batch_default", self.bulk_batch_default as u64),
            ("k_max", self.k_max as u64),
            ("query_text_bytes_max", self.query_text_bytes_max as u64),
            (
                "context_budget_bytes_max",
                self.context_budget_bytes_max as u64,
            ),
            ("eval_cases_max", self.eval_cases_max as u64),
            ("context_items_max", self.context_items_max as u64),
            ("list_limit_max", self.list_limit_max as u64),
            ("request_timeout_ms", self.request_timeout_ms),
            // (0 dropped every client that did not send its head at once,
            // and ended every chunked body)
            ("header_read_timeout_ms", self.header_read_timeout_ms),
            ("body_idle_timeout_ms", self.body_idle_timeout_ms),
            ("appends_in_flight_max", self.appends_in_flight_max as u64),
            ("queries_in_flight_max", self.queries_in_flight_max as u64),
            ("connections_max", self.connections_max as u64),
            (
                "connections_per_client_max",
                self.connections_per_client_max as u64,
            ),
            (
                "answer_bytes_in_flight_max",
                self.answer_bytes_in_flight_max,
            ),
            ("write_stall_timeout_ms", self.write_stall_timeout_ms),
        ];
        for (name, v) in nonzero {
            if v == 0 {
                return Err(format!("limits.{name} must be at least 1"));
            }
        }
        let capped: [(&str, usize, usize); 4] = [
            (
                "batch_records_max",
                self.batch_records_max,
                engine::BATCH_RECORDS_MAX,
            ),
            ("k_max", self.k_max, engine::K_MAX),
            (
                "query_text_bytes_max",
                self.query_text_bytes_max,
                engine::QUERY_TEXT_BYTES_MAX,
            ),
            (
                "context_budget_bytes_max",
                self.context_budget_bytes_max,
                engine::CONTEXT_BUDGET_BYTES_MAX,
            ),
        ];
        for (name, v, cap) in capped {
            if v > cap {
                return Err(format!(
                    "limits.{name} is {v}, over the engine's limit of {cap}"
                ));
            }
        }
        // slots are counted by semaphores, which hold at most so many
        // permits (past it the server panicked at start)
        let slots = [
            ("appends_in_flight_max", self.appends_in_flight_max),
            ("queries_in_flight_max", self.queries_in_flight_max),
            ("connections_max", self.connections_max),
            (
                "connections_per_client_max",
                self.connections_per_client_max,
            ),
        ];
        for (name, v) in slots {
            if v > SLOTS_MAX {
                return Err(format!(
                    "limits.{name} is {v}, over the most of {SLOTS_MAX}"
                ));
            }
        }
        if self.bulk_batch_default > self.batch_records_max {
            return Err(format!(
                "limits.bulk_batch_default ({}) is over limits.batch_records_max ({})",
                self.bulk_batch_default, self.batch_records_max
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_flags_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let c = Config::load(dir.path(), None, (None, None)).unwrap();
        assert_eq!(c.listen.to_string(), LISTEN_DEFAULT);
        assert_eq!(c.key_file, dir.path().join("keys.json"));
        assert_eq!(c.limits, Limits::default());

        let f = dir.path().join("engram.toml");
        std::fs::write(
            &f,
            "listen = \"127.0.0.1:9\"\nkey_file = \"k.json\"\nmetrics_auth = \"admin\"\n[limits]\nk_max = 50\nshutdown_index_ms = 0\n",
        )
        .unwrap();
        let c = Config::load(dir.path(), Some(&f), (None, None)).unwrap();
        assert_eq!(c.listen.port(), 9);
        assert_eq!(c.key_file, dir.path().join("k.json"));
        assert_eq!(c.metrics_auth, MetricsAuth::Admin);
        assert_eq!(c.limits.k_max, 50);
        // no indexing at close is a choice, not a zero to refuse
        assert_eq!(c.limits.shutdown_index_ms, 0);
        assert_eq!(c.limits.body_bytes_max, BODY_BYTES_MAX_DEFAULT);
        let c = Config::load(dir.path(), Some(&f), (Some("127.0.0.1:0"), None)).unwrap();
        assert_eq!(c.listen.port(), 0);
        // --key-file over the file's key_file, taken as given
        let flag = Path::new("elsewhere/keys.json");
        let c = Config::load(dir.path(), Some(&f), (None, Some(flag))).unwrap();
        assert_eq!(c.key_file, flag);
    }

    #[test]
    fn bad_settings_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("engram.toml");
        for (text, needle) in [
            ("[limits]\nk_maxx = 5\n", "k_maxx"),
            ("[limits]\nk_max = 5000\n", "k_max"),
            ("[limits]\nbody_bytes_max = 0\n", "body_bytes_max"),
            ("[limits]\ncontext_items_max = 0\n", "context_items_max"),
            (
                "[limits]\nheader_read_timeout_ms = 0\n",
                "header_read_timeout_ms",
            ),
            (
                "[limits]\nbody_idle_timeout_ms = 0\n",
                "body_idle_timeout_ms",
            ),
            // (past what a semaphore holds: a panic at start)
            (
                "[limits]\nappends_in_flight_max = 2305843009213693952\n",
                "appends_in_flight_max",
            ),
            ("[limits]\nconnections_max = 1000001\n", "connections_max"),
            ("listen = \"nowhere\"\n", "nowhere"),
            ("lisen = 1\n", "lisen"),
        ] {
            std::fs::write(&f, text).unwrap();
            let e = Config::load(dir.path(), Some(&f), (None, None))
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{text}: {e}");
        }
        let e = Config::load(dir.path(), None, (Some("x"), None)).unwrap_err();
        assert!(e.to_string().contains("--listen"), "{e}");
        // (named once: the flag is the error's path)
        assert_eq!(e.to_string().matches("--listen").count(), 1, "{e}");
        // a bulk batch left to its default fits a lower batch_records_max;
        // one given above it is refused
        std::fs::write(&f, "[limits]\nbatch_records_max = 500\n").unwrap();
        let c = Config::load(dir.path(), Some(&f), (None, None)).unwrap();
        assert_eq!(c.limits.bulk_batch_default, 500);
        std::fs::write(
            &f,
            "[limits]\nbatch_records_max = 500\nbulk_batch_default = 1000\n",
        )
        .unwrap();
        let e = Config::load(dir.path(), Some(&f), (None, None)).unwrap_err();
        assert!(e.to_string().contains("bulk_batch_default"), "{e}");
        // the file's listen is checked also when --listen overrides it
        std::fs::write(&f, "listen = \"nonsense\"\n").unwrap();
        let e = Config::load(dir.path(), Some(&f), (Some("127.0.0.1:1"), None)).unwrap_err();
        assert!(e.to_string().contains("listen: 'nonsense'"), "{e}");
    }
}
