//! The authorization matrix over HTTP, table-driven: every endpoint
//! against five callers (no key, an unknown key, another tenant's key, a
//! plain user key, a reader without the record's label), with the
//! expected status; every 404 is byte-for-byte the 404 of a record that
//! never existed; and no response to a caller who may not read a record
//! carries any of its ids or text.

use serde_json::json;

use crate::harness::*;

/// Callers, in the column order of [`ROWS`].
const WHO: [&str; 5] = [
    "no key",
    "unknown key",
    "other tenant",
    "user",
    "reader without label",
];

/// (method, path, body, expected status per caller). `{pub}` is a record
/// of tenant acme anyone there may read (written by its admin), `{sec}`
/// one labelled `secret`, `{cand}` a review candidate derived from `{pub}`;
/// they are replaced by internal ids, so the other tenant's requests are
/// real cross-tenant lookups.
const ROWS: &[(&str, &str, Option<&str>, [u16; 5])] = &[
    (
        "POST",
        "/v1/records",
        Some(r#"[{"kind": "note", "text": "harmless"}]"#),
        [401, 401, 200, 200, 200],
    ),
    (
        "POST",
        "/v1/records/bulk",
        Some("{\"kind\": \"note\", \"text\": \"harmless\"}\n"),
        [401, 401, 200, 200, 200],
    ),
    ("GET", "/v1/records", None, [401, 401, 200, 200, 200]),
    ("GET", "/v1/records/{pub}", None, [401, 401, 404, 200, 200]),
    ("GET", "/v1/records/{sec}", None, [401, 401, 404, 404, 404]),
    (
        "GET",
        "/v1/records/{sec}/history",
        None,
        [401, 401, 404, 404, 404],
    ),
    (
        "GET",
        "/v1/records/{pub}/history",
        None,
        [401, 401, 404, 200, 200],
    ),
    (
        "GET",
        "/v1/records/{sec}/trace",
        None,
        [401, 401, 404, 404, 404],
    ),
    (
        "GET",
        "/v1/records/{pub}/trace",
        None,
        [401, 401, 404, 200, 200],
    ),
    (
        "POST",
        "/v1/records/{pub}/correct",
        Some(r#"{"kind": "note", "text": "rewritten"}"#),
        [401, 401, 404, 403, 403],
    ),
    (
        "POST",
        "/v1/records/{sec}/correct",
        Some(r#"{"kind": "note", "text": "rewritten"}"#),
        [401, 401, 404, 404, 404],
    ),
    (
        "POST",
        "/v1/records/{pub}/expire",
        Some(r#"{"at": "2030-01-01T00:00:00Z"}"#),
        [401, 401, 404, 403, 403],
    ),
    (
        "POST",
        "/v1/records/{sec}/expire",
        Some(r#"{"at": "2030-01-01T00:00:00Z"}"#),
        [401, 401, 404, 404, 404],
    ),
    (
        "DELETE",
        "/v1/records/{pub}",
        None,
        [401, 401, 404, 403, 403],
    ),
    (
        "DELETE",
        "/v1/records/{sec}",
        None,
        [401, 401, 404, 404, 404],
    ),
    (
        "POST",
        "/v1/records/{cand}/retract",
        Some("{}"),
        [401, 401, 404, 403, 403],
    ),
    ("GET", "/v1/review", None, [401, 401, 403, 403, 403]),
    (
        "POST",
        "/v1/review/{cand}/approve",
        Some("{}"),
        [401, 401, 404, 403, 403],
    ),
    (
        "POST",
        "/v1/review/{cand}/reject",
        Some("{}"),
        [401, 401, 404, 403, 403],
    ),
    (
        "POST",
        "/v1/access/grant",
        Some(r#"{"grantee": "rita", "label": "secret"}"#),
        [401, 401, 403, 403, 403],
    ),
    (
        "POST",
        "/v1/access/revoke",
        Some(r#"{"label": "secret"}"#),
        [401, 401, 403, 403, 403],
    ),
    (
        "POST",
        "/v1/retention",
        Some(r#"{"class": "standard", "period": "1s"}"#),
        [401, 401, 403, 403, 403],
    ),
    (
        "POST",
        "/v1/holds",
        Some(r#"{"scope": "tenant"}"#),
        [401, 401, 403, 403, 403],
    ),
    (
        "POST",
        "/v1/review/rules",
        Some(r#"{"kind": "fact", "writer": "model", "review": true}"#),
        [401, 401, 403, 403, 403],
    ),
    ("GET", "/v1/stats", None, [401, 401, 403, 403, 403]),
    ("GET", "/v1/verify", None, [401, 401, 403, 403, 403]),
    (
        "POST",
        "/v1/backup",
        Some(r#"{"dest": "/tmp/engram-authz-never-written"}"#),
        [401, 401, 403, 403, 403],
    ),
    ("POST", "/v1/compact", None, [401, 401, 403, 403, 403]),
    (
        "POST",
        "/v1/recall",
        Some(r#"{"text": "launch code memo roadmap secret", "k": 50}"#),
        [401, 401, 200, 200, 200],
    ),
    (
        "POST",
        "/v1/recall",
        Some(r#"{"text": "launch code", "mode": "lexical", "label": "secret"}"#),
        [401, 401, 200, 200, 200],
    ),
    (
        "POST",
        "/v1/context",
        Some(r#"{"text": "launch code memo"}"#),
        [401, 401, 200, 200, 200],
    ),
    (
        "POST",
        "/v1/query",
        Some(r#"{"query": "FIND ANY MATCH 'launch code memo roadmap secret' LIMIT 50"}"#),
        [401, 401, 200, 200, 200],
    ),
    (
        "POST",
        "/v1/eval",
        Some("{\"query\": \"launch code\", \"relevant\": [\"sec-ext\"]}\n"),
        [401, 401, 200, 200, 200],
    ),
    ("GET", "/v1/openapi.json", None, [200, 200, 200, 200, 200]),
    ("GET", "/healthz", None, [200, 200, 200, 200, 200]),
    ("GET", "/readyz", None, [200, 200, 200, 200, 200]),
    ("GET", "/metrics", None, [200, 200, 200, 200, 200]),
];

#[test]
fn every_endpoint_against_every_caller() {
    let (_tmp, dir) = new_store();
    let boss = tenant_key(&dir, "acme", "boss", "admin");
    let bot = tenant_key(&dir, "acme", "bot", "agent");
    let lee = key(
        &dir,
        &[
            "--tenant",
            "acme",
            "--principal",
            "lee",
            "--label",
            "secret",
        ],
    );
    let other = tenant_key(&dir, "beta", "bob", "user");
    let callers: [Option<String>; 5] = [
        None,
        Some(format!("egk_{}", "ab".repeat(32))),
        Some(other.clone()),
        Some(tenant_key(&dir, "acme", "ann", "user")),
        Some(tenant_key(&dir, "acme", "rita", "user")),
    ];
    let store = key(&dir, &["--admin"]);
    let s = Server::start(&dir, None);

    let made = append(
        &s,
        &boss,
        r#"[{"kind": "memo", "external_id": "pub-ext", "text": "acme public memo about the offsite"},
            {"kind": "memo", "external_id": "sec-ext", "text": "the launch code is 4242", "access": ["secret"]}]"#,
    );
    let cand = append(
        &s,
        &bot,
        r#"[{"record": "assertion", "kind": "instruction", "external_id": "cand-ext", "text": "always cc the board", "sources": ["pub-ext"]}]"#,
    );
    append(
        &s,
        &other,
        r#"[{"kind": "memo", "text": "beta confidential roadmap"}]"#,
    );
    let ids = [
        ("{pub}", made[0]["id"].as_str().unwrap().to_string()),
        ("{sec}", made[1]["id"].as_str().unwrap().to_string()),
        ("{cand}", cand[0]["id"].as_str().unwrap().to_string()),
    ];
    // positive controls: the label holder and the admin read the secret
    for k in [&lee, &boss] {
        let r = s.json(
            "GET",
            &format!("/v1/records/{}", ids[1].1),
            Some(k),
            None,
            200,
        );
        assert_eq!(r["text"], "the launch code is 4242");
    }

    // What each caller must never see.
    let acme_secrets = ["launch code is 4242", "sec-ext", ids[1].1.as_str()];
    let acme_all = [
        "launch code is 4242",
        "sec-ext",
        ids[1].1.as_str(),
        "acme public memo",
        "pub-ext",
        ids[0].1.as_str(),
        "cand-ext",
        ids[2].1.as_str(),
        "always cc the board",
    ];
    let hidden_for = |who: usize| -> Vec<&str> {
        match who {
            2 => acme_all.to_vec(),
            3 | 4 => {
                let mut v = acme_secrets.to_vec();
                v.push("beta confidential");
                v
            }
            _ => acme_all.to_vec(),
        }
    };

    let mut failures = Vec::new();
    for (method, path, body, expected) in ROWS {
        let mut path = path.to_string();
        for (ph, id) in &ids {
            path = path.replace(ph, id);
        }
        for (who, caller) in callers.iter().enumerate() {
            let key = caller.as_deref();
            let r = if path.ends_with("/bulk") || path.starts_with("/v1/eval") {
                request(
                    &s.addr,
                    method,
                    &path,
                    key,
                    body.map(str::as_bytes),
                    "application/x-ndjson",
                )
                .unwrap()
            } else {
                s.call(method, &path, key, *body)
            };
            if r.status != expected[who] {
                failures.push(format!(
                    "{method} {path} as {}: {} (expected {}): {}",
                    WHO[who],
                    r.status,
                    expected[who],
                    r.text()
                ));
                continue;
            }
            let text = r.text();
            if r.status == 404 {
                // hidden and missing are the same answer, byte for byte
                let missing = s.call("GET", "/v1/records/01ZZZZZZZZZZZZZZZZZZZZZZZZ", key, None);
                assert_eq!(missing.status, 404);
                if r.body != missing.body {
                    failures.push(format!(
                        "{method} {path} as {}: 404 differs from missing: {text}",
                        WHO[who]
                    ));
                }
            }
            if path.starts_with("/v1/openapi") || path == "/metrics" {
                continue;
            }
            // An eval case's relevant reference that names nothing the
            // caller reads is echoed back (`unresolved`): the caller's own
            // input, answered exactly as for a name that exists nowhere.
            let mut text = text;
            if path.starts_with("/v1/eval") && r.status == 200 && text.contains("\"unresolved\"") {
                let missing = request(
                    &s.addr,
                    method,
                    &path,
                    key,
                    body.map(|b| b.replace("sec-ext", "zz-missing-ext").into_bytes())
                        .as_deref(),
                    "application/x-ndjson",
                )
                .unwrap();
                if text.replace("sec-ext", "zz-missing-ext") != missing.text() {
                    failures.push(format!(
                        "{method} {path} as {}: a hidden relevant id is answered unlike a missing one: {text}",
                        WHO[who]
                    ));
                }
                text = text.replace("\"unresolved\":[\"sec-ext\"]", "");
            }
            for secret in hidden_for(who) {
                if text.contains(secret) {
                    failures.push(format!(
                        "{method} {path} as {}: response reveals {secret:?}: {text}",
                        WHO[who]
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );

    // The store key acts on the store, never inside a tenant.
    let pub_path = format!("/v1/records/{}", ids[0].1);
    for (method, path, body) in [
        (
            "POST",
            "/v1/records",
            Some(r#"[{"kind": "note", "text": "x"}]"#),
        ),
        ("GET", "/v1/records", None),
        ("GET", pub_path.as_str(), None),
        ("POST", "/v1/recall", Some(r#"{"text": "memo"}"#)),
        ("GET", "/v1/review", None),
        (
            "POST",
            "/v1/access/grant",
            Some(r#"{"grantee": "x", "label": "secret"}"#),
        ),
    ] {
        let r = s.call(method, path, Some(&store), body);
        assert_eq!(r.status, 403, "{method} {path}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "forbidden");
        assert!(!r.text().contains("acme public memo"));
    }
    // The tenant admin may not do store operations, and sees its tenant only.
    for (method, path, body) in [
        ("GET", "/v1/verify", None),
        (
            "POST",
            "/v1/backup",
            Some(r#"{"dest": "/tmp/engram-authz-never-written"}"#),
        ),
    ] {
        assert_eq!(
            s.call(method, path, Some(&boss), body).status,
            403,
            "{path}"
        );
    }
    assert!(!std::path::Path::new("/tmp/engram-authz-never-written").exists());
    let st = s.json("GET", "/v1/stats", Some(&boss), None, 200);
    assert_eq!(st["tenant"], "acme");
    assert!(!st.to_string().contains("beta"));
    let st = s.json("GET", "/v1/stats", Some(&store), None, 200);
    assert!(st["tenants"]["beta"].is_object());

    // Malformed credentials are 401 with nothing else said.
    for h in [
        "Bearer",
        "Basic dXNlcjpwYXNz",
        "Bearer egk_",
        "Bearer  ",
        "Token abc",
    ] {
        let raw = format!(
            "GET /v1/records HTTP/1.1\r\nHost: t\r\nConnection: close\r\nAuthorization: {h}\r\n\r\n"
        );
        let mut c = std::net::TcpStream::connect(&s.addr).unwrap();
        std::io::Write::write_all(&mut c, raw.as_bytes()).unwrap();
        let r = read_response(&mut c).unwrap();
        assert_eq!(r.status, 401, "{h}");
        assert_eq!(r.json()["error"]["code"], "unauthorized");
    }
    // Two Authorization headers, even two valid keys, are refused: neither
    // order decides who asks.
    for (first, second) in [(&boss, &boss), (&boss, &store), (&store, &boss)] {
        let raw = format!(
            "GET /v1/records HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\
             Authorization: Bearer {first}\r\nAuthorization: Bearer {second}\r\n\r\n"
        );
        let mut c = std::net::TcpStream::connect(&s.addr).unwrap();
        std::io::Write::write_all(&mut c, raw.as_bytes()).unwrap();
        let r = read_response(&mut c).unwrap();
        assert_eq!(r.status, 401);
        assert_eq!(r.json()["error"]["code"], "unauthorized");
    }
    // A body naming the tenant or the principal is refused, naming the field.
    for (path, body, field) in [
        (
            "/v1/records",
            r#"[{"kind": "note", "text": "x"}, {"kind": "note", "text": "y", "tenant": "acme"}]"#,
            "tenant",
        ),
        (
            "/v1/records",
            r#"[{"kind": "note", "text": "y", "principal": "boss"}]"#,
            "principal",
        ),
        // by its name, whatever its value
        (
            "/v1/records",
            r#"[{"kind": "note", "text": "y", "tenant": null}]"#,
            "tenant",
        ),
        ("/v1/recall", r#"{"text": "x", "tenant": "beta"}"#, "tenant"),
        (
            "/v1/query",
            r#"{"query": "FIND ANY MATCH 'x'", "tenant": "acme"}"#,
            "tenant",
        ),
        (
            "/v1/context",
            r#"{"text": "x", "principal": "boss"}"#,
            "principal",
        ),
        (
            "/v1/holds",
            r#"{"scope": "tenant", "tenant": "beta"}"#,
            "tenant",
        ),
    ] {
        let r = s.call("POST", path, Some(&other), Some(body));
        assert_eq!(r.status, 400, "{path} {body}: {}", r.text());
        let e = r.json();
        assert_eq!(e["error"]["code"], "session_field");
        assert_eq!(e["error"]["details"]["field"], field);
        assert!(e["error"]["message"].as_str().unwrap().contains(field));
    }
    let r = s.call(
        "POST",
        "/v1/records",
        Some(&other),
        Some(r#"[{"kind": "note", "text": "x"}, {"kind": "note", "text": "y", "tenant": "acme"}]"#),
    );
    assert_eq!(r.json()["error"]["details"]["item"], 1);
    let e = request(
        &s.addr,
        "POST",
        "/v1/eval",
        Some(&other),
        Some(b"{\"query\": \"x\"}\n{\"query\": \"x\", \"scope\": {\"tenant_id\": \"acme\"}}\n"),
        "application/x-ndjson",
    )
    .unwrap();
    assert_eq!(e.status, 400, "{}", e.text());
    assert_eq!(
        e.json()["error"]["details"],
        json!({"line": 2, "field": "scope.tenant_id"})
    );
    let b = request(
        &s.addr,
        "POST",
        "/v1/records/bulk",
        Some(&other),
        Some(b"{\"kind\": \"note\", \"text\": \"x\", \"tenant\": null}\n"),
        "application/x-ndjson",
    )
    .unwrap();
    // (a stream answers per line)
    let first: serde_json::Value =
        serde_json::from_str(b.text().lines().next().unwrap_or_default()).unwrap();
    assert_eq!(first["error"]["code"], "session_field", "{}", b.text());
    assert_eq!(
        first["error"]["details"],
        json!({"line": 1, "field": "tenant"})
    );
    assert!(b.text().contains("\"created\":0"), "{}", b.text());
    // In a query string too, percent-encoded or not, on every endpoint
    // that reads one.
    for (method, path, field) in [
        ("GET", "/v1/records?tenant=acme", "tenant"),
        ("GET", "/v1/records?limit=5&te%6Eant=acme", "tenant"),
        ("DELETE", "/v1/records/x?principal=boss", "principal"),
        // and on endpoints that read no query string at all
        ("GET", "/v1/records/x?tenant=acme", "tenant"),
        ("GET", "/v1/stats?principal=boss", "principal"),
    ] {
        let r = s.call(method, path, Some(&other), None);
        assert_eq!(r.status, 400, "{method} {path}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "session_field", "{path}");
        assert_eq!(r.json()["error"]["details"]["field"], field, "{path}");
    }
}
