//! Hostile input: random and malformed bodies on every endpoint that
//! takes one (property test with a bounded number of cases), deep
//! nesting, huge numbers, invalid UTF-8, a 100 MB body, slow clients, a
//! full writer queue. Never a 5xx for bad input, never a crash.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config as PropConfig, TestRunner};
use serde_json::{Value, json};

use crate::harness::*;

/// Small limits so that the limit paths are cheap to reach.
const CONFIG: &str = "[limits]
body_bytes_max = 1048576
request_timeout_ms = 1500
header_read_timeout_ms = 1000
body_idle_timeout_ms = 1000
";

const BODY_ENDPOINTS: &[(&str, &str)] = &[
    ("POST", "/v1/records"),
    ("POST", "/v1/records/bulk"),
    ("POST", "/v1/recall"),
    ("POST", "/v1/context"),
    ("POST", "/v1/eval"),
    ("POST", "/v1/records/seed/correct"),
    ("POST", "/v1/records/seed/expire"),
    ("POST", "/v1/records/seed/retract"),
    ("POST", "/v1/review/seed/approve"),
    ("POST", "/v1/access/grant"),
    ("POST", "/v1/retention"),
    ("POST", "/v1/holds"),
    ("POST", "/v1/backup"),
    ("GET", "/v1/records?limit=abc&kind=%FF"),
];

/// Field names the parsers know, so values reach the per-field checks.
const FIELDS: &[&str] = &[
    "kind",
    "text",
    "record",
    "external_id",
    "scope",
    "occurred_at",
    "valid_until",
    "data",
    "access",
    "supersedes",
    "sources",
    "embedding",
    "vector",
    "model",
    "mode",
    "k",
    "ef",
    "as_of",
    "valid_at",
    "user",
    "label",
    "at",
    "reason",
    "grantee",
    "role",
    "class",
    "period",
    "scope",
    "on",
    "dest",
    "budget_bytes",
    "semantic_k",
    "query",
    "relevant",
    "confidence",
    "subject",
    "name",
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        Just(json!(1e308)),
        Just(json!(-0.0)),
        ".{0,16}".prop_map(Value::String),
        "20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]Z".prop_map(Value::String),
        Just(json!("hybrid")),
        Just(json!("seed")),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(FIELDS), inner), 0..5).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
        ]
    })
}

/// Bodies: JSON of the right and wrong shapes, texts JSON cannot hold,
/// random bytes, and JSON with raw non-UTF-8 bytes spliced in.
fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        json_value().prop_map(|v| v.to_string().into_bytes()),
        prop::collection::vec(json_value(), 0..4)
            .prop_map(|v| Value::Array(v).to_string().into_bytes()),
        prop::collection::vec(json_value(), 0..4).prop_map(|v| {
            v.iter()
                .map(|x| format!("{x}\n"))
                .collect::<String>()
                .into_bytes()
        }),
        prop::collection::vec(any::<u8>(), 0..256),
        (
            json_value(),
            any::<usize>(),
            prop::collection::vec(128u8..=255, 1..4)
        )
            .prop_map(|(v, at, junk)| {
                let mut b = v.to_string().into_bytes();
                let at = at % (b.len() + 1);
                b.splice(at..at, junk);
                b
            }),
        Just(b"{\"k\": 1e400, \"text\": \"x\"}".to_vec()),
        Just(b"{\"k\": 18446744073709551616, \"text\": \"x\"}".to_vec()),
        Just(b"[NaN, Infinity]".to_vec()),
        Just(b"{\"text\": \"\\ud800\"}".to_vec()),
    ]
}

fn assert_sane(r: &Resp, what: &str) {
    assert!(r.status < 500, "{what}: {} {}", r.status, r.text());
    assert!(r.status >= 200, "{what}: {}", r.status);
    if r.status >= 400 {
        let v = r.json();
        assert!(v["error"]["code"].is_string(), "{what}: {v}");
        assert!(v["error"]["message"].is_string(), "{what}: {v}");
    }
}

#[test]
fn hostile_bodies_never_get_a_5xx() {
    let (_tmp, dir) = new_store();
    let k = tenant_key(&dir, "t", "p", "admin");
    let s = Server::start(&dir, Some(CONFIG));
    append(
        &s,
        &k,
        r#"[{"kind": "note", "text": "seed", "external_id": "seed"}]"#,
    );
    let cases: u32 = std::env::var("ENGRAM_SERVER_FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(96);
    let mut runner = TestRunner::new(PropConfig {
        cases,
        failure_persistence: None,
        ..PropConfig::default()
    });
    let addr = s.addr.clone();
    let key = k.clone();
    runner
        .run(
            &(prop::sample::select(BODY_ENDPOINTS), body()),
            |((method, path), bytes)| {
                let ct = if path.contains("bulk") || path.contains("eval") {
                    "application/x-ndjson"
                } else {
                    "application/json"
                };
                let r = request(&addr, method, path, Some(&key), Some(&bytes), ct)
                    .map_err(|e| TestCaseError::fail(format!("{method} {path}: {e}")))?;
                prop_assert!(
                    r.status < 500,
                    "{} {}: {} {}",
                    method,
                    path,
                    r.status,
                    r.text()
                );
                if r.status >= 400 {
                    let v: Value = serde_json::from_slice(&r.body)
                        .map_err(|e| TestCaseError::fail(format!("{path}: not JSON: {e}")))?;
                    prop_assert!(v["error"]["code"].is_string());
                } else if path.contains("bulk") {
                    // every line answered, then a summary
                    let lines = r.ndjson();
                    prop_assert!(
                        lines.last().is_some_and(|l| l["summary"].is_object()),
                        "{lines:?}"
                    );
                }
                Ok(())
            },
        )
        .unwrap();
    s.json("GET", "/healthz", None, None, 200);
    assert!(!s.log_text().contains("panicked"), "{}", s.log_text());
}

#[test]
fn deep_nesting_huge_numbers_invalid_utf8_and_limits() {
    let (_tmp, dir) = new_store();
    let k = tenant_key(&dir, "t", "p", "user");
    let s = Server::start(&dir, Some(CONFIG));
    let send = |path: &str, body: &[u8]| -> Resp {
        let r = request(
            &s.addr,
            "POST",
            path,
            Some(&k),
            Some(body),
            "application/json",
        )
        .unwrap();
        assert_sane(&r, path);
        r
    };
    // deep nesting, in every body position
    let deep = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
    for path in ["/v1/records", "/v1/recall", "/v1/context", "/v1/holds"] {
        assert_eq!(send(path, deep.as_bytes()).status, 400, "{path}");
    }
    let nested_item = format!(
        "[{{\"kind\": \"n\", \"data\": {}1{}}}]",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    // JSON too deep, a number out of range, a lone surrogate: each is
    // `invalid_json` with a position, like any other syntax error
    for body in [
        nested_item.clone(),
        r#"[{"kind": "n", "text": "x", "data": 1e999999}]"#.to_string(),
        r#"[{"kind": "n", "text": "\ud800"}]"#.to_string(),
    ] {
        let r = send("/v1/records", body.as_bytes());
        assert_eq!(r.status, 400, "{body:.60}");
        let e = r.json();
        assert_eq!(e["error"]["code"], "invalid_json", "{e}");
        assert_eq!(e["error"]["details"]["item"], 0, "{e}");
        assert!(e["error"]["details"]["column"].as_u64().is_some(), "{e}");
    }
    // huge and odd numbers
    for (body, field) in [
        (r#"{"text": "x", "k": 1e400}"#, None),
        (r#"{"text": "x", "k": 18446744073709551616}"#, Some("k")),
        (r#"{"text": "x", "k": -1}"#, Some("k")),
        (r#"{"text": "x", "k": 1.5}"#, Some("k")),
        (r#"{"text": "x", "k": 1001}"#, Some("k")),
        (r#"{"text": "x", "ef": 0}"#, Some("ef")),
        (r#"{"vector": [1e39, 1], "model": "m"}"#, Some("vector")),
    ] {
        let r = send("/v1/recall", body.as_bytes());
        assert!(r.status == 400 || r.status == 422, "{body}: {}", r.text());
        if let Some(f) = field {
            let e = r.json();
            assert_eq!(e["error"]["details"]["field"], f, "{body}: {e}");
        }
    }
    // invalid UTF-8: the position is named
    let r = send("/v1/recall", b"{\"text\":\n  \"caf\xe9\"}");
    assert_eq!(r.status, 400);
    let e = r.json();
    assert_eq!(
        (
            e["error"]["details"]["line"].as_u64(),
            e["error"]["details"]["column"].as_u64()
        ),
        (Some(2), Some(7)),
        "{e}"
    );
    // an empty body is not JSON where a body is required, on every
    // endpoint alike (some read it as `{}`); where every field is optional
    // (approve, reject, retract) it reads as `{}`
    for path in [
        "/v1/records",
        "/v1/recall",
        "/v1/context",
        "/v1/retention",
        "/v1/holds",
    ] {
        for body in [&b""[..], b"   "] {
            let r = send(path, body);
            assert_eq!(
                (r.status, r.json()["error"]["code"].clone()),
                (400, "invalid_json".into()),
                "{path}: {}",
                r.text()
            );
        }
    }
    // a body that is not JSON is `invalid_json` even where its first byte
    // already shows the wrong shape; valid JSON of the wrong shape is not
    let r = send("/v1/records", b"{not json");
    assert_eq!(
        (r.status, r.json()["error"]["code"].clone()),
        (400, "invalid_json".into())
    );
    let r = send("/v1/records", br#"{"kind": "n", "text": "x"}"#);
    assert_eq!(
        (r.status, r.json()["error"]["code"].clone()),
        (400, "bad_request".into())
    );
    // malformed JSON names line and column
    let r = send("/v1/records", b"[\n {\"kind\": \"n\",\n  \"text\": }]");
    assert_eq!(r.status, 400);
    let e = r.json();
    assert_eq!(e["error"]["code"], "invalid_json");
    assert_eq!(e["error"]["details"]["line"], 3, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("line 3"),
        "{e}"
    );
    // an invalid field of one item rejects the batch, naming item and field
    let r = send(
        "/v1/records",
        br#"[{"kind": "n", "text": "ok"}, {"kind": "n", "text": "x", "occurred_at": "yesterday"}]"#,
    );
    assert_eq!(r.status, 422);
    let e = r.json();
    assert_eq!(
        (
            e["error"]["details"]["item"].as_u64(),
            e["error"]["details"]["field"].as_str()
        ),
        (Some(1), Some("occurred_at"))
    );
    assert_eq!(
        s.json("GET", "/v1/records", Some(&k), None, 200)["records"],
        json!([]),
        "nothing of it was stored"
    );
    // limits: batch size, body size
    let many = format!("[{}]", vec![r#"{"kind":"n","text":"x"}"#; 10_001].join(","));
    let r = send("/v1/records", many.as_bytes());
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["error"]["code"], "limit_exceeded");
    let big = format!(
        "[{{\"kind\": \"n\", \"text\": \"{}\"}}]",
        "x".repeat(2 << 20)
    );
    let r = send("/v1/records", big.as_bytes());
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["error"]["details"]["limit_bytes"], 1_048_576);
    // bulk: a bad line (invalid UTF-8, too long, wrong type) fails its batch only
    let mut bulk = b"{\"kind\": \"n\", \"text\": \"one\"}\n{\"kind\": \"n\", \"text\": \"t\xffo\"}\n{\"kind\": \"n\", \"text\": \"three\"}\n".to_vec();
    bulk.extend_from_slice(b"{\"kind\": 7}\n{\"kind\": \"n\", \"text\": \"five\"}\n");
    let r = request(
        &s.addr,
        "POST",
        "/v1/records/bulk?batch=1",
        Some(&k),
        Some(&bulk),
        "application/x-ndjson",
    )
    .unwrap();
    assert_eq!(r.status, 200);
    let out = r.ndjson();
    assert_eq!(out[0]["outcome"], "created");
    assert_eq!(out[1]["error"]["code"], "invalid_json");
    assert_eq!(out[1]["error"]["details"]["line"], 2);
    assert_eq!(out[1]["error"]["details"]["column"], 25);
    assert_eq!(out[2]["outcome"], "created");
    assert_eq!(out[3]["error"]["details"]["field"], "kind");
    assert_eq!(out[4]["outcome"], "created");
    assert_eq!(out[5]["summary"]["rejected"], 2);
    // unknown query parameters and bad path references
    assert_eq!(
        s.call("GET", "/v1/records?colour=red", Some(&k), None)
            .status,
        400
    );
    assert_eq!(
        s.call("GET", "/v1/records/id:not-an-id", Some(&k), None)
            .status,
        400
    );
    s.json("GET", "/healthz", None, None, 200);
}

/// The 1 MiB limit of a question is applied to its `Content-Length` before
/// a byte of the body is read (the server waited for the body, and read up
/// to 1 MiB of it, where a 16 MiB declaration was refused at once); a
/// body that ends before its declared length is told so (400), to a
/// client that half-closed and still reads.
#[test]
fn a_questions_limit_is_checked_from_its_head_and_a_body_cut_short_is_told_so() {
    let (_tmp, dir) = new_store();
    let k = tenant_key(&dir, "t", "p", "user");
    let s = Server::start(&dir, None);
    for path in ["/v1/query", "/v1/recall", "/v1/context"] {
        let mut c = TcpStream::connect(&s.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(head("POST", path, Some(&k), "application/json", Some(2_000_000)).as_bytes())
            .unwrap();
        // no body: the answer must come from the head alone
        let r = read_response(&mut c).unwrap();
        assert_eq!(r.status, 413, "{path}: {}", r.text());
        assert_eq!(
            r.json()["error"]["details"]["limit_bytes"],
            1 << 20,
            "{path}"
        );
    }
    // a body that ends before its declared length, from a client that
    // half-closes and still reads: a 400 saying so, not a 499 nobody reads
    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(
        head(
            "POST",
            "/v1/recall",
            Some(&k),
            "application/json",
            Some(100),
        )
        .as_bytes(),
    )
    .unwrap();
    c.write_all(br#"{"text": "#).unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let r = read_response(&mut c).unwrap();
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains("ended before its declared length"),
        "{}",
        r.text()
    );
    s.json("GET", "/healthz", None, None, 200);
}

/// A transfer coding other than `chunked` is refused, even before
/// `chunked` (the HTTP layer read `gzip, chunked` as chunked and stored
/// the bytes as if the gzip coding were not there).
#[test]
fn a_transfer_coding_other_than_chunked_is_refused() {
    let (_tmp, dir) = new_store();
    let k = tenant_key(&dir, "t", "p", "user");
    let s = Server::start(&dir, None);
    let body = r#"[{"kind": "note", "text": "sent gzip, chunked"}]"#;
    for coding in [
        "gzip, chunked",
        "chunked, identity, chunked",
        "chunked, chunked",
        ", chunked",
    ] {
        let mut c = TcpStream::connect(&s.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(
            format!(
                "POST /v1/records HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {k}\r\n\
                 Content-Type: application/json\r\nConnection: close\r\nTransfer-Encoding: {coding}\r\n\r\n\
                 {:x}\r\n{body}\r\n0\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        )
        .unwrap();
        let r = read_response(&mut c).unwrap();
        assert_eq!(r.status, 400, "{coding}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "bad_request", "{coding}");
        assert!(r.text().contains("transfer-encoding"), "{}", r.text());
    }
    // nothing was stored, and plain chunked still is
    let listed = s.json("GET", "/v1/records", Some(&k), None, 200);
    assert!(!listed.to_string().contains("sent gzip"), "{listed}");
    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(
        format!(
            "POST /v1/records HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {k}\r\n\
             Content-Type: application/json\r\nConnection: close\r\nTransfer-Encoding: Chunked\r\n\r\n\
             {:x}\r\n{body}\r\n0\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    let r = read_response(&mut c).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    // malformed chunks: the answer says what was wrong (it said only that
    // the body could not be read), on a plain and on a bulk append
    for (path, chunks, says) in [
        ("/v1/records", "zz\r\nabc\r\n0\r\n\r\n", "chunk size"),
        ("/v1/records", "3\r\nabcXX0\r\n\r\n", "chunk"),
        ("/v1/records/bulk", "zz\r\nabc\r\n0\r\n\r\n", "chunk size"),
    ] {
        let mut c = TcpStream::connect(&s.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(
            format!(
                "POST {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {k}\r\n\
                 Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n{chunks}"
            )
            .as_bytes(),
        )
        .unwrap();
        let r = read_response(&mut c).unwrap();
        let text = r.text();
        assert!(
            text.contains("could not read the request body: ") && text.contains(says),
            "{path} {chunks:?}: {text}"
        );
    }
}

/// A query, a recall or a context request is a question, not data: its
/// body is refused past 1 MiB (a parsed JSON body takes tens of times its
/// size in memory, and a few 16 MiB queries at once took the server
/// down), while an append of 3 MB is stored.
#[test]
fn a_question_body_past_a_mebibyte_is_refused() {
    let (_tmp, dir) = new_store();
    let k = tenant_key(&dir, "t", "p", "user");
    let s = Server::start(&dir, None);
    let zeros = vec!["0"; 600_000].join(",");
    for (path, body) in [
        (
            "/v1/query",
            format!(r#"{{"query": "FIND ANY SIMILAR TO $v", "params": {{"v": [{zeros}]}}}}"#),
        ),
        (
            "/v1/recall",
            format!(r#"{{"text": "x", "vector": [{zeros}]}}"#),
        ),
        (
            "/v1/context",
            format!(r#"{{"text": "x", "junk": [{zeros}]}}"#),
        ),
    ] {
        let r = s.call("POST", path, Some(&k), Some(&body));
        assert_eq!(r.status, 413, "{path}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "payload_too_large", "{path}");
    }
    let big = format!(
        r#"[{{"kind": "note", "text": "{}", "external_id": "big"}}, {{"kind": "note", "text": "{}"}}, {{"kind": "note", "text": "{}"}}]"#,
        "a ".repeat(500_000),
        "b ".repeat(500_000),
        "c ".repeat(500_000)
    );
    assert!(big.len() > 1 << 21);
    s.json("POST", "/v1/records", Some(&k), Some(&big), 200);
    s.json("GET", "/v1/records/big", Some(&k), None, 200);
}

#[test]
fn a_100_mb_body_is_refused_before_it_is_read() {
    let (_tmp, dir) = new_store();
    let k = tenant_key(&dir, "t", "p", "user");
    let s = Server::start(&dir, Some(CONFIG));
    const HUNDRED_MB: u64 = 100 << 20;
    // declared: answered at once, after 64 KiB of the 100 MB were sent
    let started = Instant::now();
    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(
        head(
            "POST",
            "/v1/records",
            Some(&k),
            "application/json",
            Some(HUNDRED_MB),
        )
        .as_bytes(),
    )
    .unwrap();
    c.write_all(&vec![b' '; 64 << 10]).unwrap();
    let r = read_response(&mut c).unwrap();
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "payload_too_large");
    assert!(started.elapsed() < Duration::from_secs(5));
    // chunked (no length): refused once the limit is passed; the client
    // never gets to send the 100 MB
    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut reader = c.try_clone().unwrap();
    let got = std::thread::spawn(move || {
        let mut raw = Vec::new();
        reader
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let _ = reader.read_to_end(&mut raw);
        raw
    });
    c.write_all(
        format!("POST /v1/records HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {k}\r\nTransfer-Encoding: chunked\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    let chunk = format!("{:x}\r\n{}\r\n", 64 << 10, " ".repeat(64 << 10));
    let mut sent = 0u64;
    while sent < HUNDRED_MB {
        if c.write_all(chunk.as_bytes()).is_err() {
            break;
        }
        sent += 64 << 10;
    }
    let raw = got.join().unwrap();
    assert!(sent < HUNDRED_MB, "the server read all of a 100 MB body");
    let r = parse_response(&raw).expect("a response before the connection closed");
    assert_eq!(r.status, 413, "{}", r.text());
    s.json("GET", "/healthz", None, None, 200);
}

#[test]
fn slow_clients_time_out() {
    let (_tmp, dir) = new_store();
    let k = tenant_key(&dir, "t", "p", "user");
    let s = Server::start(&dir, Some(CONFIG));
    // a body that stops arriving: 503 timeout after the request deadline
    let started = Instant::now();
    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(
        head(
            "POST",
            "/v1/records",
            Some(&k),
            "application/json",
            Some(1000),
        )
        .as_bytes(),
    )
    .unwrap();
    c.write_all(b"[{\"kind\"").unwrap();
    let r = read_response(&mut c).unwrap();
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "timeout");
    assert!(r.header("retry-after").is_some());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // a head that never ends: the connection is closed
    let started = Instant::now();
    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n")
        .unwrap();
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    if let Ok(r) = parse_response(&raw) {
        assert!((400..500).contains(&r.status), "{}", r.status);
    }
    // a bulk body that stalls: the stream ends with a timeout line
    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(
        head(
            "POST",
            "/v1/records/bulk",
            Some(&k),
            "application/x-ndjson",
            Some(10_000),
        )
        .as_bytes(),
    )
    .unwrap();
    c.write_all(b"{\"kind\": \"n\", \"text\": \"a\"}\n")
        .unwrap();
    let r = read_response(&mut c).unwrap();
    assert_eq!(r.status, 200);
    let out = r.ndjson();
    let err = out
        .iter()
        .find(|l| l["error"]["code"] == "timeout")
        .unwrap_or_else(|| panic!("{out:?}"));
    // the unfinished batch is not stored, and the error line says which
    // lines to send again
    assert_eq!(err["not_stored"]["from_line"], 1, "{err}");
    assert_eq!(err["not_stored"]["to_line"], 1, "{err}");
    // and it says the body fell silent, not that a deadline passed
    let msg = err["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("sent nothing for 1000 ms (body_idle_timeout_ms)"),
        "{msg}"
    );
    assert_eq!(out.last().unwrap()["summary"]["complete"], false);
    let listed = s.json("GET", "/v1/records", Some(&k), None, 200);
    assert_eq!(listed["records"].as_array().unwrap().len(), 0, "{listed}");
    s.json("GET", "/healthz", None, None, 200);
}

/// A bulk body cut off inside a batch (the client goes away before the
/// declared length): the batches it completed are stored, the unfinished
/// one is not (batches are atomic); it used to be stored in part.
#[test]
fn a_bulk_body_cut_off_stores_whole_batches_only() {
    let (_tmp, dir) = new_store();
    let k = tenant_key(&dir, "t", "p", "user");
    let s = Server::start(&dir, None);
    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(
        head(
            "POST",
            "/v1/records/bulk?batch=2",
            Some(&k),
            "application/x-ndjson",
            Some(10_000),
        )
        .as_bytes(),
    )
    .unwrap();
    let lines: String = (1..=3)
        .map(|i| {
            format!("{{\"kind\": \"n\", \"text\": \"line {i}\", \"external_id\": \"l{i}\"}}\n")
        })
        .collect();
    c.write_all(lines.as_bytes()).unwrap();
    c.write_all(b"{\"kind\": \"n\", \"te").unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let r = read_response(&mut c).unwrap();
    let out = r.ndjson();
    let err = out
        .iter()
        .find(|l| l.get("error").is_some())
        .unwrap_or_else(|| panic!("{out:?}"));
    // line 3 waited for its batch; line 4 was cut inside
    assert_eq!(err["not_stored"]["from_line"], 3, "{err}");
    assert_eq!(err["not_stored"]["to_line"], 4, "{err}");
    assert_eq!(out.last().unwrap()["summary"]["complete"], false);
    let listed = s.json("GET", "/v1/records", Some(&k), None, 200);
    let ext: Vec<&str> = listed["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["external_id"].as_str().unwrap())
        .collect();
    assert_eq!(ext, vec!["l1", "l2"], "{listed}");
}

#[test]
fn a_full_writer_queue_answers_429_with_retry_after() {
    let (_tmp, dir) = new_store();
    let k = tenant_key(&dir, "t", "p", "user");
    let s = Server::start(&dir, Some("[limits]\nappends_in_flight_max = 1\n"));
    let batch = format!(
        "[{}]",
        (0..2000)
            .map(|i| format!(r#"{{"kind": "n", "text": "record {i} with some words to index"}}"#))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut throttled = None;
    for _attempt in 0..5 {
        let results: Vec<Resp> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..12)
                .map(|_| {
                    sc.spawn(|| {
                        request(
                            &s.addr,
                            "POST",
                            "/v1/records",
                            Some(&k),
                            Some(batch.as_bytes()),
                            "application/json",
                        )
                        .unwrap()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for r in &results {
            assert!(
                r.status == 200 || r.status == 429,
                "{}: {}",
                r.status,
                r.text()
            );
        }
        if let Some(r) = results.into_iter().find(|r| r.status == 429) {
            throttled = Some(r);
            break;
        }
    }
    let r = throttled.expect("12 concurrent appends through one slot: some must be refused");
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.json()["error"]["code"], "busy");
    let m = s.call("GET", "/metrics", None, None).text();
    assert!(
        m.contains("engram_http_throttled_total{queue=\"appends\"}"),
        "{m}"
    );
}

/// An eval past its deadline stops running its cases: its caller has had
/// its 503, and the query slot is free for the next read. (It ran every
/// case to the end holding the slot; a few such requests from one tenant
/// kept every tenant's reads out for minutes.)
#[test]
fn an_eval_past_its_deadline_frees_its_query_slot() {
    let (_tmp, dir, ann) = notes_store();
    let s = Server::start(
        &dir,
        Some(
            "[limits]\nrequest_timeout_ms = 1000\nqueries_in_flight_max = 1\nquery_queue_wait_ms = 3000\n",
        ),
    );
    let cases = slow_eval_cases();
    let r = s.call("POST", "/v1/eval?k=1000", Some(&ann), Some(&cases));
    assert_eq!(r.status, 503, "{}", r.text());
    // the eval stops at its next case; the recall gets the slot
    s.json(
        "POST",
        "/v1/recall",
        Some(&ann),
        Some(r#"{"text": "lorem"}"#),
        200,
    );
}

/// A bulk batch ends once its lines reach `body_bytes_max`, whatever
/// `?batch` says: it never holds more in memory than one append request.
/// (A batch of 10,000 lines of 4 MiB was held whole, 40 GiB for one key.)
#[test]
fn a_bulk_batch_is_cut_at_the_body_size_of_one_append() {
    let (_tmp, dir) = new_store();
    let k = tenant_key(&dir, "t", "p", "user");
    let s = Server::start(&dir, Some("[limits]\nbody_bytes_max = 1048576\n"));
    let filler = "lorem ipsum ".repeat(300 * 1024 / 12);
    let body: String = (1..=10)
        .map(|i| {
            format!(
                "{{\"kind\": \"n\", \"text\": \"line {i} {filler}\", \"external_id\": \"b{i}\"}}\n"
            )
        })
        .collect();
    let r = s.call("POST", "/v1/records/bulk?batch=100", Some(&k), Some(&body));
    assert_eq!(r.status, 200, "{}", r.text());
    let out = r.ndjson();
    let summary = &out.last().unwrap()["summary"];
    // a fourth line of ~300 KiB would pass 1 MiB: batches of 3, 3, 3, 1
    assert_eq!(summary["batches"], 4, "{summary}");
    assert_eq!(summary["created"], 10, "{summary}");
    assert_eq!(summary["complete"], true, "{summary}");
}

/// A client that goes away before its answer still leaves its request's
/// log line (status 499), as the request log promises one line per
/// request: a backup whose client disconnected left none. An eval whose
/// client went away runs no further case: its query slot is free again
/// (it ran to its end).
#[test]
fn a_request_whose_client_went_away_is_logged_and_its_eval_stops() {
    let (_tmp, dir, ann) = notes_store();
    let s = Server::start(
        &dir,
        Some("[limits]\nqueries_in_flight_max = 1\nquery_queue_wait_ms = 1000\n"),
    );
    let cases = slow_eval_cases();
    send_and_leave(
        &s.addr,
        ("POST", "/v1/eval?k=1000"),
        Some(&ann),
        ("application/x-ndjson", cases.as_bytes()),
        Duration::from_millis(300),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let log = s.log_text();
        if log
            .lines()
            .any(|l| l.contains("\"/v1/eval\"") && l.contains("\"status\":499"))
        {
            break;
        }
        assert!(Instant::now() < deadline, "no line for the eval:\n{log}");
        std::thread::sleep(Duration::from_millis(100));
    }
    s.json(
        "POST",
        "/v1/recall",
        Some(&ann),
        Some(r#"{"text": "lorem"}"#),
        200,
    );
}

/// A store of 3,000 notes in tenant `t`, and a key of user `ann` there.
fn notes_store() -> (tempfile::TempDir, std::path::PathBuf, String) {
    let (tmp, dir) = new_store();
    let lines = tmp.path().join("notes.jsonl");
    let text: String = (0..3000)
        .map(|i| {
            format!("{{\"tenant\": \"t\", \"kind\": \"note\", \"text\": \"note {i} lorem\"}}\n")
        })
        .collect();
    std::fs::write(&lines, text).unwrap();
    engram(&dir, &["ingest", lines.to_str().unwrap()]);
    let ann = tenant_key(&dir, "t", "ann", "user");
    (tmp, dir, ann)
}

/// 1,000 eval cases: run at k=1000 on [`notes_store`], seconds of work.
fn slow_eval_cases() -> String {
    (0..1000)
        .map(|i| format!("{{\"query\": \"note lorem {i}\", \"relevant_ids\": [\"x\"]}}\n"))
        .collect()
}

/// An answer waiting for a client that does not read it holds its room
/// among answers in flight: past the room, a large read's answer is `429
/// busy` (small ones are not held), and a write is refused before it
/// runs; once the client has read nothing for `write_stall_timeout_ms`,
/// its connection is closed and the room given back.
#[test]
fn an_answer_nobody_reads_holds_its_room_until_its_connection_is_let_go() {
    let (_tmp, dir) = new_store();
    let k = tenant_key(&dir, "t", "p", "user");
    let s = Server::start(
        &dir,
        Some("[limits]\nanswer_bytes_in_flight_max = 4194304\nwrite_stall_timeout_ms = 5000\n"),
    );
    // a page of about 16 MiB: far more than loopback buffers hold
    let text = "\u{1}".repeat(1 << 20);
    for i in 0..4 {
        let body = json!([{"kind": "note", "text": text, "external_id": format!("big{i}")}]);
        append(&s, &k, &body.to_string());
    }
    append(
        &s,
        &k,
        r#"[{"kind": "note", "text": "small", "external_id": "small"}]"#,
    );
    let page = "/v1/records?limit=1000";
    let mut idle = TcpStream::connect(&s.addr).unwrap();
    idle.write_all(head("GET", page, Some(&k), "", None).as_bytes())
        .unwrap();
    // its answer is built (its status line came) and holds the room
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    let r = s.call("GET", page, Some(&k), None);
    assert_eq!(r.status, 429, "an answer while the room is held");
    assert_eq!(r.json()["error"]["code"], "busy");
    assert_eq!(r.header("retry-after"), Some("1"));
    // a small answer takes no room
    let r = s.call("GET", "/v1/records/small", Some(&k), None);
    assert_eq!(r.status, 200, "{}", r.text());
    // a write is refused before it runs (its answer, once it has run, is
    // never dropped: it says what was stored)
    let many: Vec<serde_json::Value> = (0..1000)
        .map(|i| json!({"kind": "note", "text": format!("n{i}")}))
        .collect();
    let body = serde_json::Value::Array(many).to_string();
    let r = s.call("POST", "/v1/records", Some(&k), Some(&body));
    assert_eq!(r.status, 429, "a write while the room is used up");
    assert_eq!(r.json()["error"]["details"]["queue"], "answer_bytes");
    // the idle client is let go after the stall limit: the room is back
    let started = Instant::now();
    loop {
        let r = s.call("GET", page, Some(&k), None);
        if r.status == 200 {
            // (a page ends past 16 MiB as JSON writes it: each of these
            // records is 6 MiB there, \u0001 for every byte)
            let page = r.json();
            assert_eq!(page["records"].as_array().unwrap().len(), 3);
            assert!(page["next_after_lsn"].is_u64());
            // nothing of the refused write was stored; sent again, it is,
            // and its answer (over 64 KiB) comes whole
            let r = s.call("POST", "/v1/records", Some(&k), Some(&body));
            assert_eq!(r.status, 200);
            assert!(r.text().len() > 64 << 10);
            assert_eq!(r.json()["results"].as_array().map(Vec::len), Some(1000));
            let listed = s.call("GET", "/v1/records?limit=1000&after_lsn=5", Some(&k), None);
            assert_eq!(
                listed.json()["records"].as_array().map(Vec::len),
                Some(1000)
            );
            break;
        }
        assert_eq!(r.status, 429);
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the room never came back"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // the idle connection was closed before its answer was all sent
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut rest = Vec::new();
    let _ = idle.read_to_end(&mut rest);
    // (what the kernel's buffers held was sent; far from the 18 MiB page)
    assert!(rest.len() < 16 << 20, "{} bytes sent", rest.len());
}
