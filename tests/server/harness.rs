//! A server process on a temporary store, API keys made with the CLI, and
//! a small HTTP/1.1 client over `TcpStream` (raw enough to send invalid
//! UTF-8, lie about lengths and stall).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The `engram` binary.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_engram")
}

/// Runs `engram --data DIR args...`; panics with its output on failure.
pub fn engram(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(bin())
        .arg("--data")
        .arg(dir)
        .args(args)
        .output()
        .expect("engram runs");
    assert!(
        out.status.success(),
        "engram {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// A fresh store in a temporary directory; returns (guard, store dir).
pub fn new_store() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    engram(&dir, &["init"]);
    (tmp, dir)
}

/// Creates a key: `--admin`, or `--tenant T --principal P --role R [--label L]...`.
pub fn key(dir: &Path, args: &[&str]) -> String {
    let mut a = vec!["keys", "create"];
    a.extend_from_slice(args);
    let k = engram(dir, &a).trim().to_string();
    assert!(k.starts_with("egk_") && k.len() == 68, "{k}");
    k
}

/// A tenant key.
pub fn tenant_key(dir: &Path, tenant: &str, principal: &str, role: &str) -> String {
    key(
        dir,
        &["--tenant", tenant, "--principal", principal, "--role", role],
    )
}

/// A running `engram serve`.
pub struct Server {
    child: Option<Child>,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// The store.
    pub dir: PathBuf,
    /// Where its stderr (the JSON log) goes.
    pub log: PathBuf,
}

impl Server {
    /// Starts a server on `dir` with an optional TOML configuration.
    pub fn start(dir: &Path, config: Option<&str>) -> Server {
        let log = dir.with_extension(format!("log.{}", std::process::id()));
        let mut cmd = Command::new(bin());
        cmd.arg("--data")
            .arg(dir)
            .args(["serve", "--listen", "127.0.0.1:0"]);
        if let Some(c) = config {
            let p = dir.with_extension("toml");
            std::fs::write(&p, c).unwrap();
            cmd.arg("--config").arg(p);
        }
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("server starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut first = String::new();
            let mut r = BufReader::new(stdout);
            let _ = r.read_line(&mut first);
            let _ = tx.send(first);
            // keep draining so the server never blocks on stdout
            let mut sink = Vec::new();
            let _ = r.read_to_end(&mut sink);
        });
        let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| {
                let _ = child.kill();
                panic!(
                    "no `listening on` line (got {line:?}); log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            })
            .to_string();
        Server {
            child: Some(child),
            addr,
            dir: dir.to_path_buf(),
            log,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// SIGKILL, and wait for the process.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGTERM (the server then finishes requests in flight).
    pub fn signal_term(&self) {
        self.signal("-TERM");
    }

    /// Sends a signal (`-TERM`, `-INT`, ...).
    pub fn signal(&self, name: &str) {
        let st = Command::new("kill")
            .args([name, &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    }

    /// Waits for the process to exit (at most `limit`).
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let mut c = self.child.take().expect("running");
        let started = Instant::now();
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                return st;
            }
            if started.elapsed() > limit {
                let _ = c.kill();
                panic!("server did not exit within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A request with an optional key and JSON body.
    pub fn call(&self, method: &str, path: &str, key: Option<&str>, body: Option<&str>) -> Resp {
        request(
            &self.addr,
            method,
            path,
            key,
            body.map(str::as_bytes),
            "application/json",
        )
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// `call` expecting `status`; returns the JSON body.
    pub fn json(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<&str>,
        status: u16,
    ) -> Value {
        let r = self.call(method, path, key, body);
        assert_eq!(r.status, status, "{method} {path}: {}", r.text());
        r.json()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A response.
#[derive(Debug, Clone)]
pub struct Resp {
    /// Status code.
    pub status: u16,
    /// Header lines, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body (chunked encoding removed).
    pub body: Vec<u8>,
}

impl Resp {
    /// Body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    /// A header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Each line of an NDJSON body.
    pub fn ndjson(&self) -> Vec<Value> {
        self.text()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// Sends a request, then goes away after `after` without reading the
/// answer (a client that gave up).
pub fn send_and_leave(
    addr: &str,
    (method, path): (&str, &str),
    key: Option<&str>,
    (content_type, body): (&str, &[u8]),
    after: Duration,
) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(head(method, path, key, content_type, Some(body.len() as u64)).as_bytes())
        .unwrap();
    c.write_all(body).unwrap();
    std::thread::sleep(after);
}

/// The head of a request (`Connection: close`).
pub fn head(
    method: &str,
    path: &str,
    key: Option<&str>,
    content_type: &str,
    content_length: Option<u64>,
) -> String {
    let mut h = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    if let Some(k) = key {
        h.push_str(&format!("Authorization: Bearer {k}\r\n"));
    }
    if let Some(n) = content_length {
        h.push_str(&format!(
            "Content-Type: {content_type}\r\nContent-Length: {n}\r\n"
        ));
    }
    h.push_str("\r\n");
    h
}

/// One request on a new connection; reads the response to EOF.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<&[u8]>,
    content_type: &str,
) -> std::io::Result<Resp> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let len = body.map(|b| b.len() as u64).or(match method {
        "POST" | "PUT" => Some(0),
        _ => None,
    });
    s.write_all(head(method, path, key, content_type, len).as_bytes())?;
    if let Some(b) = body {
        match s.write_all(b) {
            Ok(()) => {}
            // refused before the body was read (413): the answer is there
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                ) => {}
            Err(e) => return Err(e),
        }
    }
    read_response(&mut s)
}

/// Reads a whole response (until the server closes).
pub fn read_response(s: &mut TcpStream) -> std::io::Result<Resp> {
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse_response(&raw)
}

/// Parses a complete response.
pub fn parse_response(raw: &[u8]) -> std::io::Result<Resp> {
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no response head"))?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| bad("head not utf-8"))?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| bad("no status"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
    {
        body = dechunk(&body).ok_or_else(|| bad("bad chunked body"))?;
    }
    Ok(Resp {
        status,
        headers,
        body,
    })
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let i = b.windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(std::str::from_utf8(&b[..i]).ok()?.trim(), 16).ok()?;
        b = &b[i + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
}

/// Appends `records` (a JSON array text) and returns the results.
pub fn append(s: &Server, key: &str, records: &str) -> Vec<Value> {
    let v = s.json("POST", "/v1/records", Some(key), Some(records), 200);
    v["results"].as_array().unwrap().clone()
}

/// Percent-encodes a path segment.
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
