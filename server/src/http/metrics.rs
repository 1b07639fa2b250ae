//! Metrics of the server in the Prometheus text exposition format
//! (version 0.0.4), written by hand: a few counters and fixed-bucket
//! histograms behind short mutexes, rendered on each scrape together with
//! the engine's own counters (`Engram::log_stats`, `Engram::gauges`).
//!
//! Labels are route templates (`/v1/records/{ref}`), methods, status codes,
//! operation names and error codes: bounded sets. This module must never
//! use a tenant, principal, key, record id or any request content as a
//! label or value.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use engram_engine::admin::StoreGauges;
use engram_storage::LogStats;

/// Latency buckets, seconds.
const LATENCY_BUCKETS_S: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Batch size buckets, records.
const BATCH_BUCKETS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 50.0, 100.0, 500.0, 1000.0, 5000.0, 10000.0,
];

#[derive(Clone, Debug)]
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, v: f64) {
        if let Some(i) = self.bounds.iter().position(|b| v <= *b) {
            self.counts[i] += 1;
        }
        self.sum += v;
        self.count += 1;
    }

    /// Writes the `_bucket`, `_sum` and `_count` lines; `labels` is either
    /// empty or `k="v",...` without braces.
    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            cumulative += c;
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {cumulative}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = |s: &str| {
            if s.is_empty() {
                String::new()
            } else {
                format!("{{{s}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {}", braces(labels), self.sum);
        let _ = writeln!(out, "{name}_count{} {}", braces(labels), self.count);
    }
}

/// Key of a request series: route template, method, status.
type RequestKey = (String, &'static str, u16);

/// The server's counters.
#[derive(Debug)]
pub struct Metrics {
    started: Instant,
    requests: Mutex<BTreeMap<RequestKey, Histogram>>,
    append_batch_records: Mutex<Histogram>,
    append_seconds: Mutex<Histogram>,
    lifecycle: Mutex<BTreeMap<&'static str, u64>>,
    rejected: Mutex<BTreeMap<&'static str, u64>>,
    throttled: Mutex<BTreeMap<&'static str, u64>>,
    connections_open: AtomicU64,
    connections_total: AtomicU64,
    bulk_lines: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            started: Instant::now(),
            requests: Mutex::default(),
            append_batch_records: Mutex::new(Histogram::new(BATCH_BUCKETS)),
            append_seconds: Mutex::new(Histogram::new(LATENCY_BUCKETS_S)),
            lifecycle: Mutex::default(),
            rejected: Mutex::default(),
            throttled: Mutex::default(),
            connections_open: AtomicU64::new(0),
            connections_total: AtomicU64::new(0),
            bulk_lines: AtomicU64::new(0),
        }
    }
}

fn bump(m: &Mutex<BTreeMap<&'static str, u64>>, k: &'static str) {
    if let Ok(mut g) = m.lock() {
        *g.entry(k).or_default() += 1;
    }
}

/// Method names as static labels (others are `other`).
pub fn method_label(m: &axum::http::Method) -> &'static str {
    match m.as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "HEAD" => "HEAD",
        "PATCH" => "PATCH",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    }
}

/// What the engine and the queues say at scrape time.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Segment log counters.
    pub log: LogStats,
    /// Store gauges.
    pub store: StoreGauges,
    /// Writes in flight and their limit.
    pub appends_in_flight: (usize, usize),
    /// Reads in flight and their limit.
    pub queries_in_flight: (usize, usize),
    /// Active API keys.
    pub keys_active: usize,
    /// Whether the server accepts requests (not shutting down).
    pub ready: bool,
}

impl Metrics {
    /// One finished request.
    pub fn request(&self, route: &str, method: &'static str, status: u16, seconds: f64) {
        if let Ok(mut g) = self.requests.lock() {
            g.entry((route.to_string(), method, status))
                .or_insert_with(|| Histogram::new(LATENCY_BUCKETS_S))
                .observe(seconds);
        }
    }

    /// One acknowledged append batch of `n_records`, which took `seconds`
    /// in the engine (validation, group commit, apply).
    pub fn append(&self, n_records: usize, seconds: f64) {
        if let Ok(mut h) = self.append_batch_records.lock() {
            h.observe(n_records as f64);
        }
        if let Ok(mut h) = self.append_seconds.lock() {
            h.observe(seconds);
        }
    }

    /// One lifecycle operation done.
    pub fn lifecycle(&self, op: &'static str) {
        bump(&self.lifecycle, op);
    }

    /// One request refused with error `code`.
    pub fn rejected(&self, code: &'static str) {
        bump(&self.rejected, code);
    }

    /// One request refused because queue `what` was full.
    pub fn throttled(&self, what: &'static str) {
        bump(&self.throttled, what);
    }

    /// Lines received by bulk ingest.
    pub fn bulk_lines(&self, n: u64) {
        self.bulk_lines.fetch_add(n, Ordering::Relaxed);
    }

    /// A connection opened.
    pub fn connection_opened(&self) {
        self.connections_open.fetch_add(1, Ordering::Relaxed);
        self.connections_total.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection closed.
    pub fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
    }

    /// The exposition text.
    pub fn render(&self, s: &Snapshot) -> String {
        let mut o = String::with_capacity(8192);
        let family = |o: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(o, "# HELP {name} {help}");
            let _ = writeln!(o, "# TYPE {name} {kind}");
        };
        let gauge = |o: &mut String, name: &str, v: f64| {
            let _ = writeln!(o, "{name} {v}");
        };

        family(
            &mut o,
            "engram_up",
            "gauge",
            "1 while the server accepts requests, 0 while it shuts down.",
        );
        gauge(&mut o, "engram_up", if s.ready { 1.0 } else { 0.0 });
        family(
            &mut o,
            "engram_uptime_seconds",
            "gauge",
            "Seconds since the server started.",
        );
        gauge(
            &mut o,
            "engram_uptime_seconds",
            self.started.elapsed().as_secs_f64(),
        );

        family(
            &mut o,
            "engram_http_request_duration_seconds",
            "histogram",
            "HTTP requests by route template, method and status, with their latency.",
        );
        if let Ok(g) = self.requests.lock() {
            for ((route, method, status), h) in g.iter() {
                let labels = format!(
                    "route=\"{}\",method=\"{method}\",status=\"{status}\"",
                    escape(route)
                );
                h.render(&mut o, "engram_http_request_duration_seconds", &labels);
            }
        }
        family(
            &mut o,
            "engram_http_requests_total",
            "counter",
            "HTTP requests by route template, method and status.",
        );
        if let Ok(g) = self.requests.lock() {
            for ((route, method, status), h) in g.iter() {
                let _ = writeln!(
                    o,
                    "engram_http_requests_total{{route=\"{}\",method=\"{method}\",status=\"{status}\"}} {}",
                    escape(route),
                    h.count
                );
            }
        }
        for (name, help, m) in [
            (
                "engram_http_rejected_total",
                "Requests answered with an error, by error code.",
                &self.rejected,
            ),
            (
                "engram_http_throttled_total",
                "Requests refused with 429 because a queue was full, and connections refused over a connection cap, by queue.",
                &self.throttled,
            ),
        ] {
            family(&mut o, name, "counter", help);
            if let Ok(g) = m.lock() {
                let label = if name.ends_with("rejected_total") {
                    "code"
                } else {
                    "queue"
                };
                for (k, v) in g.iter() {
                    let _ = writeln!(o, "{name}{{{label}=\"{k}\"}} {v}");
                }
            }
        }
        family(
            &mut o,
            "engram_http_connections_open",
            "gauge",
            "Open client connections.",
        );
        gauge(
            &mut o,
            "engram_http_connections_open",
            self.connections_open.load(Ordering::Relaxed) as f64,
        );
        family(
            &mut o,
            "engram_http_connections_total",
            "counter",
            "Client connections accepted.",
        );
        gauge(
            &mut o,
            "engram_http_connections_total",
            self.connections_total.load(Ordering::Relaxed) as f64,
        );

        family(
            &mut o,
            "engram_append_batch_records",
            "histogram",
            "Records per acknowledged append batch.",
        );
        if let Ok(h) = self.append_batch_records.lock() {
            h.render(&mut o, "engram_append_batch_records", "");
        }
        family(
            &mut o,
            "engram_append_duration_seconds",
            "histogram",
            "Engine time of an acknowledged append batch: validation, group commit (write + fsync) and apply.",
        );
        if let Ok(h) = self.append_seconds.lock() {
            h.render(&mut o, "engram_append_duration_seconds", "");
        }
        family(
            &mut o,
            "engram_bulk_lines_total",
            "counter",
            "Lines received by bulk ingest.",
        );
        gauge(
            &mut o,
            "engram_bulk_lines_total",
            self.bulk_lines.load(Ordering::Relaxed) as f64,
        );
        family(
            &mut o,
            "engram_lifecycle_operations_total",
            "counter",
            "Lifecycle operations done, by operation.",
        );
        if let Ok(g) = self.lifecycle.lock() {
            for (k, v) in g.iter() {
                let _ = writeln!(o, "engram_lifecycle_operations_total{{op=\"{k}\"}} {v}");
            }
        }

        let (a, a_max) = s.appends_in_flight;
        let (q, q_max) = s.queries_in_flight;
        for (name, help, v) in [
            (
                "engram_writer_queue_depth",
                "Writes (appends, lifecycle operations, bulk batches) in flight to the single group-commit writer.",
                a,
            ),
            (
                "engram_writer_queue_capacity",
                "Writes allowed in flight before 429.",
                a_max,
            ),
            ("engram_queries_in_flight", "Reads in flight.", q),
            ("engram_queries_capacity", "Reads allowed in flight.", q_max),
            (
                "engram_api_keys_active",
                "API keys that are not revoked.",
                s.keys_active,
            ),
        ] {
            family(&mut o, name, "gauge", help);
            gauge(&mut o, name, v as f64);
        }

        let l = &s.log;
        for (name, kind, help, v) in [
            (
                "engram_log_group_commits_total",
                "counter",
                "Group commits (one write and fsync for batches of concurrent writers).",
                l.n_groups as f64,
            ),
            (
                "engram_log_frames_appended_total",
                "counter",
                "Log frames appended.",
                l.n_frames_appended as f64,
            ),
            (
                "engram_log_fsyncs_total",
                "counter",
                "fdatasync calls of appended frames.",
                l.n_fsyncs as f64,
            ),
            (
                "engram_log_fsync_seconds_total",
                "counter",
                "Time spent in fdatasync of appended frames.",
                l.fsync_us_total as f64 / 1e6,
            ),
            (
                "engram_log_group_commit_seconds_total",
                "counter",
                "Time from writing a group to it being durable, summed over group commits (divide by engram_log_group_commits_total for the mean).",
                l.group_commit_us_total as f64 / 1e6,
            ),
            (
                "engram_log_segments",
                "gauge",
                "Segment files of the log.",
                l.n_segments as f64,
            ),
            (
                "engram_log_bytes",
                "gauge",
                "Durable bytes of the log.",
                l.bytes as f64,
            ),
            (
                "engram_log_last_lsn",
                "gauge",
                "Last durable log sequence number.",
                l.last_lsn as f64,
            ),
            (
                "engram_applied_lsn",
                "gauge",
                "Last log sequence number applied to the in-memory state.",
                s.store.applied_lsn as f64,
            ),
            (
                "engram_records",
                "gauge",
                "Records in the store (all tenants, versions and statuses).",
                s.store.records as f64,
            ),
            (
                "engram_vectors",
                "gauge",
                "Vectors in the store.",
                s.store.vectors as f64,
            ),
            (
                "engram_vector_spaces",
                "gauge",
                "Vector spaces (one per tenant and model).",
                s.store.vector_spaces as f64,
            ),
            (
                "engram_pending_vectors",
                "gauge",
                "Vectors waiting for the HNSW indexer (indexing lag; searched exactly meanwhile).",
                s.store.pending_vectors as f64,
            ),
            (
                "engram_writes_failed",
                "gauge",
                "1 when the log writer stopped after an I/O failure (every write refused until a restart), else 0.",
                if s.store.writes_failed { 1.0 } else { 0.0 },
            ),
            (
                "engram_unbatched_vectors",
                "gauge",
                "Vectors of HNSW batches not yet complete (at most 63 per space; searched exactly until the batch fills).",
                s.store.unbatched_vectors as f64,
            ),
        ] {
            family(&mut o, name, kind, help);
            gauge(&mut o, name, v);
        }
        o
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_families_typed() {
        let m = Metrics::default();
        m.request("/v1/records", "POST", 200, 0.002);
        m.request("/v1/records", "POST", 200, 0.2);
        m.request("/v1/records/{ref}", "GET", 404, 0.001);
        m.append(3, 0.004);
        m.lifecycle("delete");
        m.rejected("not_found");
        m.throttled("appends");
        let text = m.render(&Snapshot {
            ready: true,
            ..Snapshot::default()
        });
        assert!(text.contains(
            "engram_http_request_duration_seconds_bucket{route=\"/v1/records\",method=\"POST\",status=\"200\",le=\"0.0025\"} 1"
        ));
        assert!(text.contains(
            "engram_http_request_duration_seconds_bucket{route=\"/v1/records\",method=\"POST\",status=\"200\",le=\"+Inf\"} 2"
        ));
        assert!(text.contains("engram_http_requests_total{route=\"/v1/records/{ref}\",method=\"GET\",status=\"404\"} 1"));
        assert!(text.contains("engram_append_batch_records_bucket{le=\"5\"} 1"));
        assert!(text.contains("engram_lifecycle_operations_total{op=\"delete\"} 1"));
        assert!(text.contains("engram_http_throttled_total{queue=\"appends\"} 1"));
        assert!(text.contains("engram_up 1"));
        // every sample belongs to a declared family
        let declared: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let name = l.split(['{', ' ']).next().unwrap();
            assert!(
                declared.iter().any(|d| name == *d
                    || name
                        .strip_prefix(d)
                        .is_some_and(|s| ["_bucket", "_sum", "_count"].contains(&s))),
                "{l}"
            );
        }
    }
}
