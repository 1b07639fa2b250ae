//! `engram serve`: binds its port, opens the store once, serves
//! connections until SIGTERM or SIGINT, then stops accepting, lets
//! in-flight requests finish (up to `limits.shutdown_grace_ms`, or until a
//! second signal), and closes the store (which checkpoints derived state,
//! indexing waiting vectors first for at most `limits.shutdown_index_ms`).
//!
//! Connections are HTTP/1.1 (hyper) with a deadline on reading the request
//! head and a cap on open connections; requests go through the axum router
//! of [`crate::http::routes`]. Durability needs nothing here: the engine
//! acknowledges an append only after its fsync, and a response is sent
//! only after the engine returned, so every 2xx append survives a kill -9.
//!
//! This module must never answer a request itself, nor buffer an
//! acknowledgement.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use engram_engine::{Engram, Options};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::http::app::{App, Shared};
use crate::http::config::Config;
use crate::http::error::{ServerError, ServerResult};
use crate::http::keys::KeyStore;
use crate::http::logging::log;
use crate::http::routes;

/// Blocking threads beyond the read and write queues (readiness probes,
/// a backup, the store's close).
const EXTRA_BLOCKING_THREADS: usize = 8;

/// Runs the server for the store in `data` until a signal stops it;
/// `embedder` is the `--embedder` choice, if one was given (else the
/// store's settings decide); `flags` are `--listen` and `--key-file`.
pub fn serve(
    data: &Path,
    embedder: Option<&str>,
    config: Option<&Path>,
    flags: (Option<&str>, Option<&Path>),
) -> ServerResult<()> {
    let cfg = Config::load(data, config, flags)?;
    let keys = KeyStore::open(&cfg.key_file)?;
    let l = &cfg.limits;
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(2);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .max_blocking_threads(
            l.appends_in_flight_max + l.queries_in_flight_max + EXTRA_BLOCKING_THREADS,
        )
        .enable_all()
        .thread_name("engram-serve")
        .build()
        .map_err(|e| ServerError::Listen {
            addr: cfg.listen.to_string(),
            source: e,
        })?;
    // The port before the store: a port in use is said at once, without
    // opening (and replaying) a store it would then close again.
    // (Connections made meanwhile wait until the store is open.)
    let listener = rt
        .block_on(TcpListener::bind(cfg.listen))
        .map_err(|e| ServerError::Listen {
            addr: cfg.listen.to_string(),
            source: e,
        })?;
    let db = open(data, embedder)?;
    if keys.n_active() == 0 {
        log(
            "warn",
            "no API keys yet: every /v1 request will be refused; create one with `engram keys create`",
            &[("key_file", json!(cfg.key_file.display().to_string()))],
        );
    }
    // (moved, not cloned: a clone kept here would hold the files the
    // first handle opened, the log segments online compaction purges
    // included, open until the server stops)
    let app: Shared = Arc::new(App::new(db, keys, cfg));
    let served = rt.block_on(run(app.clone(), listener));
    let indexing = Duration::from_millis(app.cfg.limits.shutdown_index_ms);
    log(
        "info",
        "closing the store",
        &[("index_ms", json!(app.cfg.limits.shutdown_index_ms))],
    );
    // the handle now (online compaction may have replaced the first)
    let closed = app.db().close_within(indexing);
    rt.shutdown_timeout(Duration::from_secs(5));
    served?;
    // Every acknowledged write is durable in the log by now; what closing
    // can fail at is derived state, rebuilt from the log at the next open:
    // logged, and the server stops as it was asked to.
    match closed {
        Err(e) => log(
            "warn",
            "writing derived state at close failed; it is rebuilt from the log at the next open",
            &[("error", e.to_string().into())],
        ),
        Ok(0) => {}
        Ok(left) => log(
            "info",
            "vectors left out of their graphs at close; the next start indexes them",
            &[("vectors", json!(left))],
        ),
    }
    log("info", "stopped", &[]);
    Ok(())
}

/// Opens the existing store in `data` (never creates one) with the
/// embedder `--embedder` names, else the one its settings name, logging
/// what recovery did.
fn open(data: &Path, embedder: Option<&str>) -> ServerResult<Engram> {
    let opts = crate::cli::store_options(data, embedder).map_err(|e| ServerError::Config {
        path: data.to_path_buf(),
        reason: e.to_string(),
    })?;
    let opts = Options {
        create_if_missing: false,
        ..opts
    };
    let (db, report) = Engram::open_with_report(data, opts).map_err(ServerError::Engine)?;
    // the store is open to write (and locked): a new --embedder choice is
    // remembered now
    crate::cli::remember_embedder(data, embedder).map_err(|e| ServerError::Config {
        path: data.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut fields = vec![
        ("store", json!(data.display().to_string())),
        ("frames_replayed", json!(report.frames_replayed)),
        ("checkpoint_lsn", json!(report.checkpoint_lsn)),
    ];
    if let Some(t) = &report.log.truncation {
        fields.push((
            "log_tail_cut",
            json!({
                "segment": t.segment,
                "offset": t.offset,
                "bytes": t.bytes_dropped,
                "unacknowledged_frames": t.dropped_lsns.len(),
                "reason": t.reason.to_string(),
            }),
        ));
    }
    if let Some(why) = &report.checkpoint_discarded {
        fields.push(("checkpoint_discarded", json!(why)));
    }
    if report.lexical_rebuilt {
        fields.push(("lexical_rebuilt", json!(true)));
    }
    if !report.vectors_rebuilt.is_empty() {
        fields.push(("vectors_rebuilt", json!(report.vectors_rebuilt)));
    }
    if report.restore_resumed.is_some() {
        fields.push(("restore_resumed", json!(true)));
    }
    log("info", "store opened", &fields);
    Ok(db)
}

async fn run(app: Shared, listener: TcpListener) -> ServerResult<()> {
    let addr: SocketAddr = app.cfg.listen;
    let bound = listener.local_addr().map_err(|e| ServerError::Listen {
        addr: addr.to_string(),
        source: e,
    })?;
    // Signals are watched before anyone is told the server listens: a
    // SIGTERM sent the moment the line appears must close the store
    // cleanly, not kill the process (the default action).
    let mut signals = Signals::watch();
    {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on http://{bound}");
        let _ = out.flush();
    }
    log(
        "info",
        "listening",
        &[
            ("addr", json!(bound.to_string())),
            ("store", json!(app.db().dir().display().to_string())),
            ("key_file", json!(app.keys.path().display().to_string())),
        ],
    );
    let router = routes::router(app.clone());
    let mut conn_builder = http1::Builder::new();
    conn_builder
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(app.cfg.limits.header_read_timeout_ms))
        .keep_alive(true);
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(app.cfg.limits.connections_max));
    let per_client = PerClient::new(app.cfg.limits.connections_per_client_max);
    let first = {
        let signal = signals.next();
        tokio::pin!(signal);
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(x) => x,
                        Err(e) => {
                            // out of file descriptors and the like: pause, go on
                            log("warn", "accept failed", &[("error", json!(e.to_string()))]);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let Some(mine) = per_client.open(peer.ip()) else {
                        app.metrics.throttled("connections_per_client");
                        drop(stream);
                        continue;
                    };
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        app.metrics.throttled("connections");
                        drop(stream);
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    // (a client reading nothing of its answer is let go)
                    let stream = crate::http::answer::WriteStall::new(
                        stream,
                        Duration::from_millis(app.cfg.limits.write_stall_timeout_ms),
                    );
                    let conn = conn_builder.serve_connection(
                        TokioIo::new(stream),
                        // (the client's address, for its share of the
                        // room for answers)
                        TowerToHyperService::new(
                            tower::ServiceBuilder::new()
                                .layer(axum::Extension(crate::http::answer::Peer(peer.ip())))
                                .service(router.clone()),
                        ),
                    );
                    let watched = graceful.watch(conn);
                    let app = app.clone();
                    app.metrics.connection_opened();
                    tokio::spawn(async move {
                        // a client that sends garbage or stalls its head just
                        // loses its connection
                        let _ = watched.await;
                        app.metrics.connection_closed();
                        drop(slot);
                        drop(mine);
                    });
                }
                which = &mut signal => {
                    log("info", "shutting down: no new connections; finishing requests in flight", &[("signal", json!(which))]);
                    break which;
                }
            }
        }
    };
    app.stop_accepting();
    drop(listener);
    let grace = Duration::from_millis(app.cfg.limits.shutdown_grace_ms);
    tokio::select! {
        () = graceful.shutdown() => log("info", "requests in flight finished", &[]),
        () = tokio::time::sleep(grace) => log(
            "warn",
            "shutdown grace period over; closing with requests still in flight",
            &[("grace_ms", json!(app.cfg.limits.shutdown_grace_ms))],
        ),
        // a second signal: the operator will not wait for them (every
        // acknowledged write is durable already)
        which = signals.next() => log(
            "warn",
            "second signal; closing with requests still in flight",
            &[("signal", json!(which)), ("first", json!(first))],
        ),
    }
    Ok(())
}

/// SIGTERM and SIGINT, watched from when [`Signals::watch`] runs.
/// (SIGHUP keeps its disposition: `nohup engram serve` must outlive its
/// terminal, and a server started without it ends at once, losing nothing
/// acknowledged.)
struct Signals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Installs the handlers now (a signal that arrives from here on is
    /// caught, not fatal).
    fn watch() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        let one = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(s) => Some(s),
            Err(e) => {
                log(
                    "warn",
                    &format!("cannot watch {name}"),
                    &[("error", json!(e.to_string()))],
                );
                None
            }
        };
        Signals {
            term: one(SignalKind::terminate(), "SIGTERM"),
            int: one(SignalKind::interrupt(), "SIGINT"),
        }
    }

    /// Resolves on the next SIGTERM or SIGINT with the signal's name.
    async fn next(&mut self) -> &'static str {
        async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            () = recv(&mut self.term) => "SIGTERM",
            () = recv(&mut self.int) => "SIGINT",
        }
    }
}

/// Open connections per client address, each at most `max`.
#[derive(Clone)]
struct PerClient {
    open: Arc<parking_lot::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
    max: usize,
}

/// One open connection of a client; dropping it closes it in the count.
struct ClientSlot {
    of: PerClient,
    ip: std::net::IpAddr,
}

impl PerClient {
    fn new(max: usize) -> PerClient {
        PerClient {
            open: Default::default(),
            max,
        }
    }

    /// A slot for a new connection from `ip`, if it has fewer than `max`.
    fn open(&self, ip: std::net::IpAddr) -> Option<ClientSlot> {
        let mut open = self.open.lock();
        let n = open.entry(ip).or_default();
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            of: self.clone(),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.of.open.lock();
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_client_holds_at_most_its_share_of_connections() {
        let per = PerClient::new(2);
        let a: std::net::IpAddr = [10, 0, 0, 1].into();
        let b: std::net::IpAddr = [10, 0, 0, 2].into();
        let (a1, a2) = (per.open(a).unwrap(), per.open(a).unwrap());
        assert!(per.open(a).is_none(), "a third from the same client");
        let b1 = per.open(b).expect("another client is not locked out");
        drop(a1);
        let a3 = per.open(a).expect("a closed connection frees its slot");
        drop((a2, a3, b1));
        assert!(per.open.lock().is_empty(), "no count left behind");
    }
}
