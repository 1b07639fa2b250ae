//! Every endpoint doing its job for the right key, the served OpenAPI
//! document, the request log, metrics, keys applied to a running server,
//! and shutdown on SIGTERM.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::*;

struct Keys {
    boss: String,
    ann: String,
    rev: String,
    bot: String,
    store: String,
}

fn keys(dir: &std::path::Path) -> Keys {
    Keys {
        boss: tenant_key(dir, "acme", "boss", "admin"),
        ann: tenant_key(dir, "acme", "ann", "user"),
        rev: tenant_key(dir, "acme", "rev", "reviewer"),
        bot: tenant_key(dir, "acme", "bot", "agent"),
        store: key(dir, &["--admin"]),
    }
}

#[test]
fn endpoints_do_their_job() {
    let (tmp, dir) = new_store();
    let k = keys(&dir);
    let s = Server::start(&dir, None);

    assert_eq!(
        s.json("GET", "/healthz", None, None, 200),
        json!({"status": "ok"})
    );
    assert_eq!(s.json("GET", "/readyz", None, None, 200)["status"], "ready");
    let committed: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        s.json("GET", "/v1/openapi.json", None, None, 200),
        committed
    );
    // the document's own path refuses a query parameter, as it declares
    let e = s.json("GET", "/v1/openapi.json?x=1", None, None, 400);
    assert_eq!(e["error"]["code"], "bad_request", "{e}");
    assert!(
        committed["paths"]["/v1/openapi.json"]["get"]["responses"]["400"].is_object(),
        "400 not declared"
    );
    // every failure has one shape, a wrong method on any route too
    for (method, path) in [
        ("GET", "/v1/backup"),
        ("DELETE", "/v1/compact"),
        ("DELETE", "/v1/recall"),
    ] {
        let e = s.json(method, path, Some(&k.store), None, 405);
        assert_eq!(e["error"]["code"], "method_not_allowed", "{method} {path}");
        assert_eq!(
            e["error"]["message"],
            format!(
                "method {method} not allowed on {path} (the Allow header lists the methods it takes)"
            )
        );
    }
    // a query parameter no endpoint reads is refused, not ignored (one
    // naming the tenant as the session field it is)
    for (method, path, body, code) in [
        (
            "POST",
            "/v1/recall?tenant=beta",
            Some(r#"{"text": "x"}"#),
            "session_field",
        ),
        (
            "POST",
            "/v1/records?tenant=beta",
            Some(r#"[{"kind": "note", "text": "x"}]"#),
            "session_field",
        ),
        ("GET", "/v1/stats?x=1", None, "bad_request"),
        ("GET", "/v1/records/nope/history?x=1", None, "bad_request"),
    ] {
        let e = s.json(method, path, Some(&k.boss), body, 400);
        assert_eq!(e["error"]["code"], code, "{method} {path}");
    }
    s.json("GET", "/v1/records?limit=1", Some(&k.boss), None, 200);
    // the query string is read once the route, the method and the key
    // are: a wrong method is 405, a missing key 401, and HEAD reads what
    // GET does
    for (method, path, key, status) in [
        ("PUT", "/v1/records/bulk?batch=1", Some(&k.boss), 405),
        ("PATCH", "/v1/records/x?x=1", Some(&k.boss), 405),
        ("GET", "/v1/records?tenant=beta", None, 401),
        ("POST", "/v1/stats?x=1", None, 405),
        ("GET", "/v1/stats?x=1", None, 401),
        ("HEAD", "/v1/records?limit=1", Some(&k.boss), 200),
    ] {
        let r = s.call(method, path, key.map(String::as_str), None);
        assert_eq!(r.status, status, "{method} {path}: {}", r.text());
    }
    // a known parameter's bad value is one field error (422) however far
    // off it is: not a number, past the integer type, out of range
    for path in [
        "/v1/records?limit=abc",
        "/v1/records?limit=18446744073709551616",
        "/v1/records?limit=-1",
        "/v1/records?limit=0",
        "/v1/records?limit=4294967296",
    ] {
        let e = s.json("GET", path, Some(&k.boss), None, 422);
        assert_eq!(
            (&e["error"]["code"], &e["error"]["details"]["field"]),
            (&json!("invalid_input"), &json!("limit")),
            "{path}: {e}"
        );
    }

    // append: per-item results after fsync
    let r = append(
        &s,
        &k.ann,
        r#"[{"kind": "user_message", "external_id": "conv/1", "text": "checkout is slow since the deploy", "scope": {"user": "u1", "conversation": "c1"}},
            {"kind": "user_message", "external_id": "n2", "text": "the payment provider timed out"}]"#,
    );
    assert_eq!(r.len(), 2);
    assert_eq!(r[0]["outcome"], "created");
    assert_eq!(r[0]["item"], 0);
    let id1 = r[0]["id"].as_str().unwrap().to_string();
    // the same again is idempotent by external id
    let again = s.json(
        "POST",
        "/v1/records",
        Some(&k.ann),
        Some(r#"[{"kind": "user_message", "external_id": "n2", "text": "the payment provider timed out"}]"#),
        200,
    );
    assert_eq!(again["duplicates"], 1);

    // reads by id, id:, ext:, and a percent-encoded external id
    for path in [
        format!("/v1/records/{id1}"),
        format!("/v1/records/id:{id1}"),
        format!("/v1/records/{}", enc("ext:conv/1")),
        format!("/v1/records/{}", enc("conv/1")),
    ] {
        let rec = s.json("GET", &path, Some(&k.ann), None, 200);
        assert_eq!(rec["id"], id1.as_str(), "{path}");
        assert_eq!(rec["tenant"], "acme");
        assert_eq!(rec["writer"]["principal"], "ann");
    }
    let list = s.json(
        "GET",
        "/v1/records?kind=user_message&limit=10",
        Some(&k.ann),
        None,
        200,
    );
    assert_eq!(list["records"].as_array().unwrap().len(), 2);
    assert!(list["next_after_lsn"].is_null(), "{list}");
    // pages: a full one names the cursor of the next
    let first = s.json(
        "GET",
        "/v1/records?kind=user_message&limit=1",
        Some(&k.ann),
        None,
        200,
    );
    let after = first["next_after_lsn"].as_u64().expect("a cursor");
    assert_eq!(first["records"][0]["lsn"].as_u64(), Some(after));
    let second = s.json(
        "GET",
        &format!("/v1/records?kind=user_message&limit=1&after_lsn={after}"),
        Some(&k.ann),
        None,
        200,
    );
    assert_ne!(second["records"][0]["id"], first["records"][0]["id"]);
    let last = second["next_after_lsn"].as_u64().expect("a full page");
    let none = s.json(
        "GET",
        &format!("/v1/records?kind=user_message&limit=1&after_lsn={last}"),
        Some(&k.ann),
        None,
        200,
    );
    assert_eq!(none["records"].as_array().unwrap().len(), 0, "{none}");
    assert!(none["next_after_lsn"].is_null());
    // an empty kind matches nothing: refused, naming the parameter
    let e = s.json("GET", "/v1/records?kind=", Some(&k.ann), None, 422);
    assert_eq!(e["error"]["details"]["field"], "kind", "{e}");
    // and so does one no record may have (it listed nothing, 200); a `%`
    // that starts no escape is bad encoding
    for bad in ["%0A", "%20note", "note%00"] {
        let e = s.json(
            "GET",
            &format!("/v1/records?kind={bad}"),
            Some(&k.ann),
            None,
            422,
        );
        assert_eq!(e["error"]["details"]["field"], "kind", "{e}");
    }
    // a reference naming nothing by its form: `id:` and `ext:` alike
    for bad in ["/v1/records/id:", "/v1/records/ext:"] {
        s.json("GET", bad, Some(&k.ann), None, 400);
    }
    let e = s.json("GET", "/v1/records?kind=%ZZ", Some(&k.ann), None, 400);
    assert!(
        e["error"]["message"].as_str().unwrap().contains("%25"),
        "{e}"
    );
    // escapes of bytes that are not UTF-8 (read as U+FFFD, a kind of that
    // name matched)
    let e = s.json("GET", "/v1/records?kind=%FF", Some(&k.ann), None, 400);
    assert!(
        e["error"]["message"].as_str().unwrap().contains("UTF-8"),
        "{e}"
    );
    let e = s.json(
        "POST",
        "/v1/recall",
        Some(&k.ann),
        Some(r#"{"text": "checkout", "kind": "\u0000"}"#),
        422,
    );
    assert_eq!(e["error"]["details"]["field"], "kind", "{e}");

    // recall, with and without the manifest
    let hits = s.json(
        "POST",
        "/v1/recall",
        Some(&k.ann),
        Some(r#"{"text": "checkout slow", "k": 5, "id": "q1"}"#),
        200,
    );
    assert_eq!(hits["query_id"], "q1");
    assert_eq!(hits["hits"][0]["external_id"], "conv/1");
    assert!(hits.get("manifest").is_none());
    let explained = s.json(
        "POST",
        "/v1/recall",
        Some(&k.ann),
        Some(r#"{"text": "checkout", "explain": true}"#),
        200,
    );
    assert_eq!(explained["manifest"]["principal"]["tenant"], "acme");
    assert_eq!(explained["manifest"]["principal"]["id"], "ann");
    // weights per request: 0 turns a retriever off, an unknown one is named
    let weighted = s.json(
        "POST",
        "/v1/recall",
        Some(&k.ann),
        Some(r#"{"text": "checkout", "explain": true, "weights": {"episodic": 0, "lexical": 2}}"#),
        200,
    );
    // (a weight of 0 turns a retriever off: not run, and said so)
    let ran: Vec<(&str, &serde_json::Value)> = weighted["manifest"]["retrievers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["retriever"].as_str().unwrap(), &r["skipped"]))
        .collect();
    assert!(
        ran.contains(&("episodic", &json!("weight 0: turned off")))
            && ran.contains(&("lexical", &serde_json::Value::Null)),
        "{ran:?}"
    );
    let bad = s.call(
        "POST",
        "/v1/recall",
        Some(&k.ann),
        Some(r#"{"text": "checkout", "weights": {"bogus": 1}}"#),
    );
    assert!(bad.status == 400 || bad.status == 422, "{}", bad.text());
    assert!(bad.text().contains("weights.bogus"), "{}", bad.text());

    // context and eval run as the key's principal
    let ctx = s.json(
        "POST",
        "/v1/context",
        Some(&k.ann),
        Some(r#"{"text": "why is checkout slow", "user": "u1", "conversation": "c1"}"#),
        200,
    );
    assert_eq!(ctx["context"]["principal"], "ann");
    assert!(ctx["rendered"].as_str().unwrap().contains("checkout"));
    let ev = s.call(
        "POST",
        "/v1/eval?k=5",
        Some(&k.ann),
        Some("{\"case_id\": \"c1\", \"query\": \"checkout slow\", \"relevant_ids\": [\"conv/1\"]}\n# a comment\n{\"case_id\": \"c2\", \"query\": \"payment\", \"relevant\": [\"n2\"]}\n"),
    );
    assert_eq!(ev.status, 200, "{}", ev.text());
    let ev = ev.json();
    assert_eq!(ev["overall"]["cases"], 2);
    assert_eq!(ev["overall"]["recall_at_k"], 1.0);
    // a case that cannot run stops the request before any case runs, as
    // `engram eval` does: a k past the limit, vector mode without an
    // embedder
    for bad in [
        "{\"case_id\": \"big\", \"query\": \"x\", \"k\": 5000}\n",
        "{\"case_id\": \"vec\", \"query\": \"x\", \"mode\": \"vector\"}\n",
    ] {
        let body = format!("{{\"case_id\": \"ok\", \"query\": \"payment\"}}\n{bad}");
        let e = s.json("POST", "/v1/eval", Some(&k.ann), Some(&body), 422);
        let msg = e["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("(line 2)") && msg.contains("nothing was run"),
            "{msg}"
        );
        assert_eq!(e["error"]["details"]["line"], 2, "{e}");
        let id = if bad.contains("big") { "big" } else { "vec" };
        assert_eq!(e["error"]["details"]["case_id"], id, "{e}");
    }
    // a case refused as it is read (a field of its own) is named by its
    // id too
    for (bad, field) in [
        ("{\"case_id\": \"zero\", \"query\": \"x\", \"k\": 0}\n", "k"),
        (
            "{\"case_id\": \"zero\", \"query\": \"x\", \"mode\": \"fuzzy\"}\n",
            "mode",
        ),
    ] {
        let body = format!("{{\"case_id\": \"ok\", \"query\": \"payment\"}}\n{bad}");
        let e = s.json("POST", "/v1/eval", Some(&k.ann), Some(&body), 422);
        let d = &e["error"]["details"];
        assert_eq!(
            (d["line"].as_u64(), d["field"].as_str()),
            (Some(2), Some(field)),
            "{e}"
        );
        assert_eq!(d["case_id"], "zero", "{e}");
    }

    // correction and history
    let c = s.json(
        "POST",
        &format!("/v1/records/{}/correct", enc("conv/1")),
        Some(&k.ann),
        Some(r#"{"kind": "user_message", "text": "checkout is slow since Tuesday's deploy"}"#),
        200,
    );
    assert_eq!(c["record"]["supersedes"], id1.as_str());
    let h = s.json(
        "GET",
        &format!("/v1/records/{id1}/history"),
        Some(&k.ann),
        None,
        200,
    );
    assert_eq!(h["versions"].as_array().unwrap().len(), 2);
    // correcting the old version again: a conflict about this record, not
    // about "item 0" of a batch the caller never sent
    let again = s.json(
        "POST",
        &format!("/v1/records/id:{id1}/correct"),
        Some(&k.ann),
        Some(r#"{"kind": "user_message", "text": "a second correction"}"#),
        409,
    );
    assert_eq!(again["error"]["code"], "already_superseded", "{again}");
    assert!(again["error"]["details"]["item"].is_null(), "{again}");
    assert!(
        !again["error"]["message"]
            .as_str()
            .unwrap()
            .contains("item 0"),
        "{again}"
    );

    // review: an agent's instruction is a candidate until a reviewer approves
    let inst = append(
        &s,
        &k.bot,
        r#"[{"record": "assertion", "kind": "instruction", "text": "always answer in French", "sources": ["n2"], "external_id": "i1"}]"#,
    );
    assert_eq!(inst[0]["status"], "candidate");
    let q = s.json("GET", "/v1/review", Some(&k.rev), None, 200);
    assert_eq!(q["candidates"][0]["external_id"], "i1");
    assert_eq!(s.call("GET", "/v1/review", Some(&k.ann), None).status, 403);
    // `note` and `reason` are one field under two names (both in the
    // OpenAPI document): one of them
    let both = s.call(
        "POST",
        "/v1/review/i1/approve",
        Some(&k.rev),
        Some(r#"{"note": "fine", "reason": "fine"}"#),
    );
    assert_eq!(both.status, 422, "{}", both.text());
    assert!(both.text().contains("not both"), "{}", both.text());
    let ok = s.json(
        "POST",
        "/v1/review/i1/approve",
        Some(&k.rev),
        Some(r#"{"note": "fine"}"#),
        200,
    );
    assert_eq!(ok["affected"].as_array().unwrap().len(), 1);
    // a derived assertion can be retracted by its writer, expired by the admin
    append(
        &s,
        &k.ann,
        r#"[{"record": "assertion", "kind": "fact", "text": "the provider is slow", "sources": ["n2"], "external_id": "f1"}]"#,
    );
    s.json(
        "POST",
        "/v1/records/f1/retract",
        Some(&k.ann),
        Some(r#"{"reason": "wrong"}"#),
        200,
    );
    s.json(
        "POST",
        "/v1/records/n2/expire",
        Some(&k.boss),
        Some(r#"{"at": "2030-01-01T00:00:00Z"}"#),
        200,
    );

    // tenant admin operations
    s.json(
        "POST",
        "/v1/access/grant",
        Some(&k.boss),
        Some(r#"{"grantee": "ann", "label": "secret"}"#),
        200,
    );
    s.json(
        "POST",
        "/v1/access/revoke",
        Some(&k.boss),
        Some(r#"{"grantee": "ann", "label": "secret"}"#),
        200,
    );
    // a role needs a grantee: the error names the body's field
    let e = s.json(
        "POST",
        "/v1/access/grant",
        Some(&k.boss),
        Some(r#"{"label": "secret", "role": "reviewer"}"#),
        422,
    );
    assert_eq!(e["error"]["details"]["field"], "grantee", "{e}");
    s.json(
        "POST",
        "/v1/retention",
        Some(&k.boss),
        Some(r#"{"class": "ephemeral", "period": "6h"}"#),
        200,
    );
    // a period needs its unit (a bare "30" would be read as milliseconds)
    let e = s.json(
        "POST",
        "/v1/retention",
        Some(&k.boss),
        Some(r#"{"class": "ephemeral", "period": "30"}"#),
        422,
    );
    assert_eq!(e["error"]["details"]["field"], "period", "{e}");
    let e = s.json(
        "POST",
        "/v1/retention",
        Some(&k.boss),
        Some(r#"{"class": "", "period": "30d"}"#),
        422,
    );
    assert_eq!(e["error"]["details"]["field"], "class", "{e}");
    // a review rule: the tenant admin makes a model's facts wait for
    // review; `GET /v1/stats` lists it; an unknown writer kind is a field
    // error
    s.json(
        "POST",
        "/v1/review/rules",
        Some(&k.boss),
        Some(r#"{"kind": "fact", "writer": "model", "review": true}"#),
        200,
    );
    let made = append(
        &s,
        &k.bot,
        r#"[{"kind": "turn", "external_id": "rr/e", "text": "the printer is on floor 3"},
            {"record": "assertion", "kind": "fact", "external_id": "rr/f", "text": "printer on floor 3", "sources": ["rr/e"]}]"#,
    );
    assert_eq!(made[1]["status"], "candidate", "{made:?}");
    let st = s.json("GET", "/v1/stats", Some(&k.boss), None, 200);
    assert_eq!(
        st["review_rules"],
        json!([{"kind": "fact", "writer": "model", "review": true}]),
        "{st}"
    );
    let e = s.json(
        "POST",
        "/v1/review/rules",
        Some(&k.boss),
        Some(r#"{"kind": "fact", "writer": "robot", "review": true}"#),
        422,
    );
    assert_eq!(e["error"]["details"]["field"], "writer", "{e}");
    // a hold's scope value is a name like any other: at most 256 bytes
    let long = format!(r#"{{"scope": "user:{}"}}"#, "u".repeat(300));
    let e = s.json("POST", "/v1/holds", Some(&k.boss), Some(&long), 422);
    assert!(
        e["error"]["message"].as_str().unwrap().contains("256"),
        "{e}"
    );
    // a type error speaks JSON, not Rust
    let e = s.json(
        "POST",
        "/v1/context",
        Some(&k.ann),
        Some(r#"{"text": "x", "recent_turns": -1}"#),
        422,
    );
    let m = e["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("non-negative integer") && !m.contains("usize"),
        "{e}"
    );
    s.json(
        "POST",
        "/v1/holds",
        Some(&k.boss),
        Some(r#"{"scope": "user:u1"}"#),
        200,
    );
    s.json(
        "POST",
        "/v1/holds",
        Some(&k.boss),
        Some(r#"{"scope": "user:u1", "on": false}"#),
        200,
    );
    let st = s.json("GET", "/v1/stats", Some(&k.boss), None, 200);
    assert_eq!(st["tenant"], "acme");
    assert!(st["records"].as_u64().unwrap() >= 4);

    // delete: gone at once, the same 404 as a record that never existed
    let d = s.json(
        "DELETE",
        "/v1/records/n2?reason=user%20asked",
        Some(&k.ann),
        None,
        200,
    );
    assert!(d["affected"].as_array().unwrap().len() >= 2, "{d}");
    let gone = s.call("GET", "/v1/records/n2", Some(&k.ann), None);
    let never = s.call("GET", "/v1/records/never-existed", Some(&k.ann), None);
    assert_eq!((gone.status, never.status), (404, 404));
    assert_eq!(gone.body, never.body);

    // bulk ingest: results per line after each batch, idempotent by external id
    // (line 3 is a comment, skipped as `engram ingest` skips it)
    let lines = "{\"kind\": \"note\", \"text\": \"b1\", \"external_id\": \"b1\"}\n{\"kind\": \"note\", \"text\": \"b2\", \"external_id\": \"b2\"}\n// a comment\n{\"kind\": \"note\", \"text\": \"b3\", \"external_id\": \"b3\"}\n";
    for expected in ["created", "duplicate"] {
        // (the second time opening with a byte-order mark, skipped as
        // `engram ingest` skips it)
        let body = match expected {
            "created" => lines.to_string(),
            _ => format!("\u{feff}{lines}"),
        };
        let r = request(
            &s.addr,
            "POST",
            "/v1/records/bulk?batch=2",
            Some(&k.ann),
            Some(body.as_bytes()),
            "application/x-ndjson",
        )
        .unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
        let out = r.ndjson();
        assert_eq!(out.len(), 4, "{out:?}");
        assert_eq!(
            out.iter()
                .map(|l| l["line"].as_u64().unwrap_or(0))
                .collect::<Vec<_>>(),
            [1, 2, 4, 0]
        );
        assert!(out[..3].iter().all(|l| l["outcome"] == expected), "{out:?}");
        assert_eq!(out[3]["summary"]["batches"], 2);
        assert_eq!(out[3]["summary"]["complete"], true);
    }
    // an error the engine finds (a correction of a record that does not
    // exist) names the body's line in its details, as a parse error does,
    // not the position in its batch
    let body = "{\"kind\": \"note\", \"text\": \"c1\", \"external_id\": \"c1\"}\n{\"kind\": \"note\", \"text\": \"c2\"}\n{\"kind\": \"note\", \"text\": \"c3\", \"supersedes\": \"no-such-record\"}\n";
    let r = request(
        &s.addr,
        "POST",
        "/v1/records/bulk?batch=2",
        Some(&k.ann),
        Some(body.as_bytes()),
        "application/x-ndjson",
    )
    .unwrap();
    let out = r.ndjson();
    let bad = out.iter().find(|l| l["line"] == 3).expect("line 3");
    assert_eq!(bad["error"]["details"]["line"], 3, "{out:?}");
    assert!(bad["error"]["details"].get("item").is_none(), "{out:?}");

    // store operations with the store key
    let st = s.json("GET", "/v1/stats", Some(&k.store), None, 200);
    assert!(st["tenants"]["acme"]["records"].as_u64().unwrap() >= 7);
    let v = s.json("GET", "/v1/verify", Some(&k.store), None, 200);
    assert_eq!(v["ok"], true, "{v}");
    let dest = tmp.path().join("backup");
    let b = s.json(
        "POST",
        "/v1/backup",
        Some(&k.store),
        Some(&json!({"dest": dest.to_str().unwrap()}).to_string()),
        200,
    );
    assert!(b["last_lsn"].as_u64().unwrap() > 0);
    engram(&dest, &["verify"]);
    // a destination that is a link to nothing is bad input (422), not an
    // unavailable store
    let dangling = tmp.path().join("dangling");
    std::os::unix::fs::symlink(tmp.path().join("nowhere"), &dangling).unwrap();
    let e = s.json(
        "POST",
        "/v1/backup",
        Some(&k.store),
        Some(&json!({"dest": dangling.to_str().unwrap()}).to_string()),
        422,
    );
    assert_eq!(e["error"]["code"], "invalid_input", "{e}");
    assert!(!tmp.path().join("nowhere").exists());
    // a NUL character is named as such
    let e = s.json(
        "POST",
        "/v1/backup",
        Some(&k.store),
        Some(r#"{"dest": "/tmp/a\u0000b"}"#),
        422,
    );
    assert!(
        e["error"]["message"].as_str().unwrap().contains("NUL"),
        "{e}"
    );

    // metrics: route templates, batch sizes, engine counters; no tenant
    let m = s.call("GET", "/metrics", None, None);
    assert_eq!(m.status, 200);
    assert!(m.header("content-type").unwrap().starts_with("text/plain"));
    let text = m.text();
    for needle in [
        "engram_http_requests_total{route=\"/v1/records\",method=\"POST\",status=\"200\"}",
        "engram_http_request_duration_seconds_bucket{route=\"/v1/records/{ref}\",method=\"GET\",status=\"404\",le=\"+Inf\"} 2",
        "engram_append_batch_records_count",
        "engram_log_group_commits_total",
        "engram_log_fsync_seconds_total",
        "engram_writer_queue_depth 0",
        "engram_pending_vectors",
        "engram_unbatched_vectors 0",
        "engram_writes_failed 0",
        "engram_lifecycle_operations_total{op=\"delete\"} 1",
        "engram_http_rejected_total{code=\"not_found\"} 2",
    ] {
        assert!(text.contains(needle), "metrics lack {needle}:\n{text}");
    }
    for secret in ["acme", "ann", &k.ann[4..12]] {
        assert!(!text.contains(secret), "metrics name {secret}");
    }

    // the log: one JSON object per request line, no keys, no bodies
    let log = s.log_text();
    let requests: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("every log line is JSON"))
        .filter(|v| v["msg"] == "request")
        .collect();
    assert!(requests.len() > 30);
    for f in ["request_id", "method", "route", "status", "latency_us"] {
        assert!(requests.iter().all(|r| !r[f].is_null()), "{f}");
    }
    for secret in [&k.ann[4..], "checkout is slow", "always answer in French"] {
        assert!(!log.contains(secret), "the log holds {secret}");
    }
}

#[test]
fn keys_created_and_revoked_apply_to_a_running_server() {
    let (_tmp, dir) = new_store();
    let s = Server::start(&dir, None);
    // no key yet: refused
    assert_eq!(s.call("GET", "/v1/records", None, None).status, 401);
    let k = tenant_key(&dir, "t", "p", "user");
    s.json("GET", "/v1/records", Some(&k), None, 200);
    let list = engram(&dir, &["keys", "list", "--json"]);
    let entries: Value = serde_json::from_str(list.trim()).unwrap();
    assert_eq!(entries[0]["id"], &k[4..12]);
    assert!(
        entries[0].get("sha256").is_none(),
        "list never shows hashes"
    );
    assert!(!list.contains(&k[12..]));
    let out = engram(&dir, &["keys", "revoke", &k[4..12]]);
    assert!(out.starts_with("revoked"), "{out}");
    let r = s.call("GET", "/v1/records", Some(&k), None);
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    // revoking it again changes nothing, and says so
    let again = engram(&dir, &["keys", "revoke", &k[4..12]]);
    assert!(again.starts_with("already revoked"), "{again}");
    // a label named twice is one label
    let labelled = engram(
        &dir,
        &[
            "keys",
            "create",
            "--tenant",
            "t",
            "--principal",
            "q",
            "--role",
            "user",
            "--label",
            "a",
            "--label",
            "a",
            "--json",
        ],
    );
    let v: Value = serde_json::from_str(labelled.trim()).unwrap();
    assert_eq!(v["labels"], serde_json::json!(["a"]), "{v}");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(dir.join("keys.json"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);

    // A bulk stream opened with a key that is revoked while it runs stops
    // at its next batch: nothing after the revocation is stored.
    let k = tenant_key(&dir, "t", "bulk", "user");
    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let chunk = |text: &str| format!("{:x}\r\n{text}\r\n", text.len());
    c.write_all(
        format!(
            "POST /v1/records/bulk?batch=1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\
             Authorization: Bearer {k}\r\nTransfer-Encoding: chunked\r\n\r\n{}",
            chunk("{\"kind\": \"note\", \"external_id\": \"b/1\", \"text\": \"before\"}\n")
        )
        .as_bytes(),
    )
    .unwrap();
    // the first line is stored (its batch of one is full)
    let admin = tenant_key(&dir, "t", "boss", "admin");
    let stored = |ext: &str| {
        s.call("GET", &format!("/v1/records/{ext}"), Some(&admin), None)
            .status
            == 200
    };
    let t0 = std::time::Instant::now();
    while !stored("b%2F1") {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "line 1 never stored"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    engram(&dir, &["keys", "revoke", &k[4..12]]);
    c.write_all(
        format!(
            "{}0\r\n\r\n",
            chunk("{\"kind\": \"note\", \"external_id\": \"b/2\", \"text\": \"after\"}\n")
        )
        .as_bytes(),
    )
    .unwrap();
    let r = read_response(&mut c).unwrap();
    let text = r.text();
    assert!(text.contains("\"unauthorized\""), "{text}");
    assert!(text.contains("\"complete\":false"), "{text}");
    // the error line names the line not stored, to send again
    assert!(
        text.contains("\"not_stored\":{\"from_line\":2,\"to_line\":2}"),
        "{text}"
    );
    assert!(
        !stored("b%2F2"),
        "a line sent after the revocation was stored"
    );
    drop(c);
    // A key file removed while serving: every key is refused, and the
    // server log says why.
    let kept = std::fs::read(dir.join("keys.json")).unwrap();
    std::fs::remove_file(dir.join("keys.json")).unwrap();
    assert_eq!(s.call("GET", "/v1/records", Some(&admin), None).status, 401);
    let log = s.log_text();
    assert!(log.contains("keys.json was removed"), "{log}");
    // and the server is not ready (it answered ready while refusing every
    // key), nor while the file is damaged; ready again once it is whole
    let e = s.json("GET", "/readyz", None, None, 503);
    assert!(
        e["error"]["message"].as_str().unwrap().contains("key file"),
        "{e}"
    );
    std::fs::write(dir.join("keys.json"), b"{broken").unwrap();
    s.json("GET", "/readyz", None, None, 503);
    // the probe read the damage first: the log still says it, once
    let said = |s: &Server| s.log_text().matches("key file unusable").count();
    assert_eq!(said(&s), 2, "{}", s.log_text());
    s.json("GET", "/readyz", None, None, 503);
    assert_eq!(s.call("GET", "/v1/records", Some(&admin), None).status, 401);
    assert_eq!(said(&s), 2, "{}", s.log_text());
    std::fs::write(dir.join("keys.json"), &kept).unwrap();
    assert_eq!(s.json("GET", "/readyz", None, None, 200)["status"], "ready");
    assert_eq!(s.call("GET", "/v1/records", Some(&admin), None).status, 200);
}

#[test]
fn a_missing_store_is_an_error_naming_engram_init() {
    let tmp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(bin())
        .arg("--data")
        .arg(tmp.path().join("nothing"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("engram init"), "{err}");
    assert!(out.stdout.is_empty());
    let out = std::process::Command::new(bin())
        .arg("--data")
        .arg(tmp.path().join("nothing"))
        .args(["keys", "create", "--admin"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("engram init"));
}

#[test]
fn sigterm_finishes_the_request_in_flight_then_closes_the_store() {
    let (_tmp, dir) = new_store();
    let k = tenant_key(&dir, "t", "p", "user");
    let mut s = Server::start(&dir, None);
    let body: String = (0..40)
        .map(|i| {
            format!("{{\"kind\": \"note\", \"text\": \"line {i}\", \"external_id\": \"e{i}\"}}\n")
        })
        .collect();
    let (first, second) = body.as_bytes().split_at(body.len() / 2);
    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(
        head(
            "POST",
            "/v1/records/bulk?batch=5",
            Some(&k),
            "application/x-ndjson",
            Some(body.len() as u64),
        )
        .as_bytes(),
    )
    .unwrap();
    c.write_all(first).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    s.signal_term();
    std::thread::sleep(Duration::from_millis(300));
    // new connections are refused while the one in flight goes on
    assert!(
        request(&s.addr, "GET", "/healthz", None, None, "").is_err(),
        "a new connection was served after SIGTERM"
    );
    c.write_all(second).unwrap();
    let r = read_response(&mut c).unwrap();
    assert_eq!(r.status, 200);
    let out = r.ndjson();
    let summary = &out.last().unwrap()["summary"];
    assert_eq!(summary["created"], 40, "{out:?}");
    assert_eq!(summary["complete"], true);
    let st = s.wait(Duration::from_secs(20));
    assert!(st.success(), "{st:?}");
    let log = s.log_text();
    assert!(log.contains("\"signal\":\"SIGTERM\""), "{log}");
    assert!(log.contains("\"msg\":\"stopped\""), "{log}");
    // closed cleanly: it verifies, and everything acknowledged is there
    engram(&dir, &["verify"]);
    let s = Server::start(&dir, None);
    s.json("GET", "/v1/records/e39", Some(&k), None, 200);
}

/// A second signal ends the wait for requests in flight (it used to be
/// ignored, leaving the operator SIGKILL alone), and the store is still
/// closed cleanly.
#[test]
fn a_second_signal_ends_the_wait_for_requests_in_flight() {
    let (_tmp, dir) = new_store();
    let k = tenant_key(&dir, "t", "p", "user");
    // a request that never finishes, and a grace period of a minute
    let mut s = Server::start(&dir, Some("[limits]\nshutdown_grace_ms = 60000\n"));
    append(
        &s,
        &k,
        r#"[{"kind": "note", "text": "kept", "external_id": "k1"}]"#,
    );
    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.write_all(
        head(
            "POST",
            "/v1/records/bulk",
            Some(&k),
            "application/x-ndjson",
            Some(1000),
        )
        .as_bytes(),
    )
    .unwrap();
    c.write_all(b"{\"kind\": \"note\", \"text\": \"half\"}\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    s.signal("-TERM");
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    s.signal("-INT");
    let st = s.wait(Duration::from_secs(30));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "waited {:?}",
        started.elapsed()
    );
    assert!(st.success(), "{st:?}");
    let log = s.log_text();
    assert!(log.contains("second signal"), "{log}");
    engram(&dir, &["verify"]);
    let s = Server::start(&dir, None);
    s.json("GET", "/v1/records/k1", Some(&k), None, 200);
}

/// A port in use is named at once, as a line of the JSON log, before the
/// store is opened (it used to be opened and replayed first, and the
/// error was a plain-text line among the JSON ones).
#[test]
fn a_port_in_use_is_named_before_the_store_is_opened() {
    let (_tmp, dir) = new_store();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = std::process::Command::new(bin())
        .arg("--data")
        .arg(&dir)
        .args(["serve", "--listen", &addr])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for line in err.lines() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert_ne!(v["msg"], "store opened", "{err}");
    }
    assert!(err.contains("cannot serve") && err.contains(&addr), "{err}");
    drop(taken);
}

/// A backup whose client went away still runs to its end, and is counted
/// (the count came after the answer, which a client gone never gets).
#[test]
fn a_backup_whose_client_went_away_is_counted() {
    let (tmp, dir) = new_store();
    let store = key(&dir, &["--admin"]);
    let k = tenant_key(&dir, "t", "p", "user");
    let s = Server::start(&dir, None);
    // enough to copy that the backup outlasts its client
    let batch: Vec<Value> = (0..500)
        .map(|i| json!({"kind": "note", "text": format!("backed up {i} {}", "x".repeat(2000))}))
        .collect();
    for _ in 0..8 {
        append(&s, &k, &Value::Array(batch.clone()).to_string());
    }
    let dest = tmp.path().join("bk");
    let body = json!({"dest": dest.display().to_string()}).to_string();
    // (read by the server before it goes)
    send_and_leave(
        &s.addr,
        ("POST", "/v1/backup"),
        Some(&store),
        ("application/json", body.as_bytes()),
        Duration::from_millis(20),
    );
    let started = Instant::now();
    loop {
        let m = s.call("GET", "/metrics", None, None).text();
        if m.contains("engram_lifecycle_operations_total{op=\"backup\"} 1") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no backup counted: {m}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(dest.join("backup.json").exists());
    // the client was gone before the answer
    let log = s.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("/v1/backup") && l.contains("\"status\":499")),
        "{log}"
    );
}

/// A page of the listing ends once its records' text and data reach
/// 16 MiB, and says where the next begins: a thousand records of a
/// mebibyte each, asked for in one page, took the server down.
#[test]
fn a_listing_page_of_large_records_ends_early_and_goes_on() {
    let (_tmp, dir) = new_store();
    let k = tenant_key(&dir, "t", "p", "user");
    let s = Server::start(&dir, None);
    let text = "lorem ".repeat(170_000); // about 1 MiB
    for i in 0..24 {
        append(
            &s,
            &k,
            &json!([{"kind": "note", "text": format!("{i} {text}"), "external_id": format!("big{i}")}])
                .to_string(),
        );
    }
    let mut seen = Vec::new();
    let mut after: Option<u64> = None;
    let mut pages = 0;
    loop {
        let path = match after {
            Some(a) => format!("/v1/records?limit=1000&after_lsn={a}"),
            None => "/v1/records?limit=1000".to_string(),
        };
        let page = s.json("GET", &path, Some(&k), None, 200);
        let records = page["records"].as_array().unwrap();
        pages += 1;
        assert!(records.len() < 24 || pages > 1, "one page held them all");
        let bytes: usize = records
            .iter()
            .map(|r| r["text"].as_str().unwrap().len())
            .sum();
        assert!(bytes < (16 << 20) + (2 << 20), "{bytes} bytes in a page");
        seen.extend(records.iter().map(|r| r["external_id"].clone()));
        match page["next_after_lsn"].as_u64() {
            Some(a) => after = Some(a),
            None => break,
        }
        assert!(pages < 10, "the listing does not end");
    }
    assert!(pages >= 2);
    let want: Vec<Value> = (0..24).map(|i| json!(format!("big{i}"))).collect();
    assert_eq!(seen, want);
}

#[test]
fn metrics_can_require_the_store_key() {
    let (_tmp, dir) = new_store();
    let tenant = tenant_key(&dir, "t", "p", "admin");
    let store = key(&dir, &["--admin"]);
    let s = Server::start(&dir, Some("metrics_auth = \"admin\"\n"));
    assert_eq!(s.call("GET", "/metrics", None, None).status, 401);
    assert_eq!(s.call("GET", "/metrics", Some(&tenant), None).status, 403);
    let m = s.call("GET", "/metrics", Some(&store), None);
    assert_eq!(m.status, 200);
    assert!(m.text().contains("engram_up 1"));
    // the probes stay open
    s.json("GET", "/healthz", None, None, 200);
    s.json("GET", "/readyz", None, None, 200);
}

#[test]
fn query_runs_statements_as_the_key_and_locates_errors() {
    let (_tmp, dir) = new_store();
    let k = keys(&dir);
    let other = tenant_key(&dir, "globex", "gus", "admin");
    let s = Server::start(&dir, None);
    append(
        &s,
        &k.ann,
        r#"[{"kind": "note", "external_id": "q/1", "text": "checkout latency after the deploy"},
            {"kind": "note", "external_id": "q/2", "text": "the catalog cache is cold", "access": ["ops"]}]"#,
    );
    let r = s.json(
        "POST",
        "/v1/query",
        Some(&k.boss),
        Some(r#"{"query": "EXPLAIN FIND ANY MATCH $t AS kw LIMIT 5 RETURN id, text, score", "params": {"t": "checkout"}}"#),
        200,
    );
    assert_eq!(r["columns"], json!(["id", "text", "score"]));
    assert_eq!(r["rows"][0]["text"], "checkout latency after the deploy");
    assert_eq!(r["manifest"]["retrievers"][0]["retriever"], "kw");
    // the JSON form
    let ast = json!({"ast": {"body": {"statement": "find", "retrievers": [{"retriever": "match", "text": "cache"}]}}});
    let r = s.json(
        "POST",
        "/v1/query",
        Some(&k.boss),
        Some(&ast.to_string()),
        200,
    );
    assert_eq!(r["rows"][0]["text"], "the catalog cache is cold");
    // a field the tree does not have is refused, not dropped (a misspelt
    // limit, or one that hopes to name who asks)
    for ast in [
        json!({"ast": {"body": {"statement": "find", "limt": 1}}}),
        json!({"ast": {"body": {"statement": "find"}, "principal": "boss"}}),
        json!({"ast": {"body": {"statement": "find", "tenant": "globex"}}}),
        json!({"ast": {"body": {"statement": "find", "retrievers": [{"retriever": "match", "text": "x", "tenant": "t"}]}}}),
        json!({"ast": {"body": {"statement": "find", "limit": {"lit": 1, "principal": "x"}}}}),
        json!({"ast": {"body": {"statement": "find", "retrievers": [{"retriever": "match", "text": {"param": "t", "tenant": "globex"}}]}}}),
    ] {
        let e = s.json(
            "POST",
            "/v1/query",
            Some(&k.boss),
            Some(&ast.to_string()),
            422,
        );
        assert_eq!(e["error"]["code"], "invalid_input", "{ast}: {e}");
        // the field at fault by its path in the tree
        let field = e["error"]["details"]["field"].as_str().unwrap_or_default();
        assert!(field.starts_with("ast."), "{ast}: {e}");
        if ast.to_string().contains("limt") {
            assert_eq!(field, "ast.body", "{e}");
        }
    }
    // another tenant's key and a reader without the label see nothing
    for key in [&other, &k.ann] {
        let r = s.json(
            "POST",
            "/v1/query",
            Some(key),
            Some(r#"{"query": "FIND ANY MATCH 'cache'"}"#),
            200,
        );
        assert_eq!(r["rows"], json!([]), "{r}");
    }
    // a wrong statement: 422 with the position
    let e = s.json(
        "POST",
        "/v1/query",
        Some(&k.boss),
        Some(r#"{"query": "FIND ANY LIMIT 0"}"#),
        422,
    );
    assert_eq!(e["error"]["code"], "query_error");
    assert_eq!(e["error"]["details"]["line"], 1);
    // the documented details are all there, `null` when there is none
    let d = e["error"]["details"].as_object().unwrap();
    for key in ["line", "column", "expected", "hint"] {
        assert!(d.contains_key(key), "details lack {key}: {e}");
    }
    assert!(d["hint"].is_null());
    // a hidden record's external id, to a principal that did not write
    // it: in use, the record not named (`null`)
    let e = s.json(
        "POST",
        "/v1/records",
        Some(&k.bot),
        Some(r#"[{"kind": "note", "external_id": "q/2", "text": "a guess"}]"#),
        409,
    );
    assert_eq!(e["error"]["code"], "external_id_conflict", "{e}");
    let d = e["error"]["details"].as_object().unwrap();
    assert!(d.contains_key("existing") && d["existing"].is_null(), "{e}");
    // the body never names who asks
    s.json(
        "POST",
        "/v1/query",
        Some(&k.boss),
        Some(r#"{"query": "FIND ANY", "tenant": "globex"}"#),
        400,
    );
}

/// `POST /v1/compact` purges deleted content while the server serves:
/// reads running throughout all answer 200, appends work after it, and the
/// deleted text is in no file of the store.
#[test]
fn compaction_purges_while_serving() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    const CANARY: &str = "heron-canary-93b1d0";
    let (_tmp, dir) = new_store();
    let k = keys(&dir);
    let s = Server::start(&dir, None);
    let notes: Vec<Value> = (0..40)
        .map(|i| json!({"kind": "note", "external_id": format!("n{i}"), "text": format!("kept note {i} about the harbour")}))
        .collect();
    append(&s, &k.ann, &Value::Array(notes).to_string());
    append(
        &s,
        &k.ann,
        &json!([{"kind": "note", "external_id": "canary", "text": format!("the code is {CANARY}")}])
            .to_string(),
    );
    s.json("DELETE", "/v1/records/canary", Some(&k.ann), None, 200);

    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (addr, key, stop) = (s.addr.clone(), k.ann.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut statuses = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Acquire) {
                let path = format!("/v1/records/n{}", i % 40);
                let r = request(&addr, "GET", &path, Some(&key), None, "application/json").unwrap();
                statuses.push(r.status);
                let body = r#"{"text": "harbour", "k": 5}"#;
                let r = request(
                    &addr,
                    "POST",
                    "/v1/recall",
                    Some(&key),
                    Some(body.as_bytes()),
                    "application/json",
                )
                .unwrap();
                statuses.push(r.status);
                i += 1;
            }
            statuses
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let frames = |s: &Server| -> f64 {
        let m = s.call("GET", "/metrics", None, None);
        String::from_utf8_lossy(&m.body)
            .lines()
            .find_map(|l| l.strip_prefix("engram_log_frames_appended_total "))
            .expect("the counter is exported")
            .trim()
            .parse()
            .unwrap()
    };
    let frames_before = frames(&s);
    assert!(frames_before >= 42.0, "{frames_before}");
    // a tenant key may not compact
    s.json("POST", "/v1/compact", Some(&k.boss), None, 403);
    let c = s.json("POST", "/v1/compact", Some(&k.store), None, 200);
    assert_eq!(c["purged"], 1, "{c}");
    // counters keep counting across the swap of the store's handle
    assert!(frames(&s) >= frames_before, "a counter went back");
    assert!(c["segments_rewritten"].as_u64().unwrap() >= 1, "{c}");
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Release);
    let statuses = reader.join().unwrap();
    assert!(
        statuses.len() > 4,
        "the reader ran {} requests",
        statuses.len()
    );
    assert!(statuses.iter().all(|&x| x == 200), "{statuses:?}");

    let r = append(
        &s,
        &k.ann,
        r#"[{"kind": "note", "external_id": "after", "text": "written after compaction"}]"#,
    );
    assert_eq!(r[0]["outcome"], "created");
    s.json("GET", "/v1/records/n7", Some(&k.ann), None, 200);
    s.json("GET", "/v1/records/canary", Some(&k.ann), None, 404);
    let v = s.json("GET", "/v1/verify", Some(&k.store), None, 200);
    assert_eq!(v["ok"], true, "{v}");
    let left = crate::common::grep(&dir, CANARY);
    assert!(left.is_empty(), "deleted content left in {left:?}");
    // nor in a file compaction replaced that the server still holds open
    // (or mapped): a name gone from the directory is not bytes gone
    let held = deleted_files_held(s.pid(), &dir);
    assert!(held.is_empty(), "the server still holds {held:?}");
}

/// The files under `dir` that process `pid` holds open or mapped although
/// they were removed from the directory (Linux's "(deleted)" links).
fn deleted_files_held(pid: u32, dir: &std::path::Path) -> Vec<String> {
    let dir = std::fs::canonicalize(dir).unwrap();
    let dir = dir.to_string_lossy().into_owned();
    let mut held: Vec<String> = Vec::new();
    if cfg!(target_os = "linux") {
        assert!(pid != 0, "the server runs");
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).expect("its open files are listed");
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                held.push(target.to_string_lossy().into_owned());
            }
        }
    }
    if let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) {
        held.extend(
            maps.lines()
                .filter_map(|l| l.find('/').map(|i| l[i..].to_string())),
        );
    }
    held.retain(|f| f.starts_with(&dir) && f.ends_with(" (deleted)"));
    held.sort();
    held.dedup();
    held
}

/// Appends waiting for a write slot while an online compaction holds them
/// all give up when it swaps the store in (429, to retry), rather than
/// hold the swap, and so the compaction, until their wait runs out: with a
/// 20 s wait the compaction took 20 s, and every waiting append failed
/// anyway.
#[test]
fn appends_waiting_during_online_compaction_do_not_hold_it() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let (_tmp, dir) = new_store();
    let k = keys(&dir);
    let s = Server::start(&dir, Some("[limits]\nappend_queue_wait_ms = 20000\n"));
    let notes: Vec<Value> = (0..50)
        .map(|i| json!({"kind": "note", "external_id": format!("n{i}"), "text": format!("note {i}")}))
        .collect();
    append(&s, &k.ann, &Value::Array(notes).to_string());
    s.json("DELETE", "/v1/records/n3", Some(&k.ann), None, 200);
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let (addr, key, stop) = (s.addr.clone(), k.ann.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut statuses = Vec::new();
                let mut i = 0;
                while !stop.load(Ordering::Acquire) {
                    let body = format!(r#"[{{"kind": "note", "text": "writer {w} note {i}"}}]"#);
                    let r = request(
                        &addr,
                        "POST",
                        "/v1/records",
                        Some(&key),
                        Some(body.as_bytes()),
                        "application/json",
                    )
                    .unwrap();
                    statuses.push(r.status);
                    i += 1;
                }
                statuses
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let c = s.json("POST", "/v1/compact", Some(&k.store), None, 200);
    let took = started.elapsed();
    stop.store(true, Ordering::Release);
    assert_eq!(c["purged"], 1, "{c}");
    for w in writers {
        for status in w.join().unwrap() {
            assert!(matches!(status, 200 | 429), "{status}");
        }
    }
    assert!(
        took < Duration::from_secs(15),
        "the compaction waited for the appends' 20 s: {took:?}"
    );
}

/// A store of `n` notes `n0`.. of tenant `t`, ingested with `flags`, `n7`
/// deleted (what a compaction purges).
fn store_with_a_deleted_note(n: usize, flags: &[&str]) -> (tempfile::TempDir, std::path::PathBuf) {
    let (tmp, dir) = new_store();
    let lines = tmp.path().join("in.jsonl");
    let text: String = (0..n)
        .map(|i| {
            format!(
                "{{\"tenant\": \"t\", \"kind\": \"note\", \"external_id\": \"n{i}\", \"text\": \"note {i} about the harbour and its ships\"}}\n"
            )
        })
        .collect();
    std::fs::write(&lines, text).unwrap();
    let mut args: Vec<&str> = flags.to_vec();
    args.extend(["ingest", "-q", lines.to_str().unwrap()]);
    engram(&dir, &args);
    engram(&dir, &["delete", "n7", "--tenant", "t", "--reason", "test"]);
    (tmp, dir)
}

/// Store maintenance has no request deadline: with a 1 ms deadline every
/// other request may time out, but a compaction answers with its report.
#[test]
fn compaction_is_not_cut_by_the_request_deadline() {
    let (_tmp, dir) = store_with_a_deleted_note(200, &[]);
    let store = key(&dir, &["--admin"]);
    let s = Server::start(&dir, Some("[limits]\nrequest_timeout_ms = 1\n"));
    let c = s.json("POST", "/v1/compact", Some(&store), None, 200);
    assert_eq!(c["purged"], 1, "{c}");
}

/// `/metrics` counts the keys of the key file as it stands: a revocation
/// showed only after some other request had read the file again.
#[test]
fn metrics_count_keys_as_the_file_stands() {
    let (_tmp, dir) = new_store();
    let ann = tenant_key(&dir, "acme", "ann", "user");
    tenant_key(&dir, "acme", "bob", "user");
    let s = Server::start(&dir, None);
    let active = |s: &Server| -> String {
        let m = s.call("GET", "/metrics", None, None);
        String::from_utf8_lossy(&m.body)
            .lines()
            .find_map(|l| l.strip_prefix("engram_api_keys_active "))
            .expect("the gauge is exported")
            .trim()
            .to_string()
    };
    assert_eq!(active(&s), "2");
    engram(&dir, &["keys", "revoke", &ann[4..12]]);
    assert_eq!(active(&s), "1");
}

/// A compaction whose client went away runs on, and holds the one slot of
/// backups and compactions until it ends: a backup sent meanwhile took the
/// slot and the server hung (the backup held the swap gate the compaction
/// waited for); a second compaction waited behind the first.
#[test]
fn a_compaction_whose_client_left_still_holds_its_slot() {
    // (vectors: their graph makes the compaction take seconds)
    let (tmp, dir) = store_with_a_deleted_note(3000, &["--embedder", "hash"]);
    let store = key(&dir, &["--admin"]);
    let user = tenant_key(&dir, "t", "p", "user");
    let s = Server::start(&dir, None);
    let started = std::time::Instant::now();
    send_and_leave(
        &s.addr,
        ("POST", "/v1/compact"),
        Some(&store),
        ("application/json", b""),
        Duration::from_millis(100),
    );
    std::thread::sleep(Duration::from_millis(200));
    let dest = tmp.path().join("backup");
    let body = json!({"dest": dest.to_str().unwrap()}).to_string();
    let second = s.call("POST", "/v1/compact", Some(&store), None);
    let backup = s.call("POST", "/v1/backup", Some(&store), Some(&body));
    // a bulk batch is refused as an append is (it waited out the whole
    // compaction, unanswered)
    let bulk = s.call(
        "POST",
        "/v1/records/bulk",
        Some(&user),
        Some("{\"kind\": \"note\", \"external_id\": \"late\", \"text\": \"sent during\"}\n"),
    );
    let busy = started.elapsed();
    // the first compaction must still have been running for this to say
    // anything: it took seconds in every run (3,000 vectors' graph)
    assert_eq!(second.status, 429, "{}", second.text());
    assert_eq!(backup.status, 429, "{}", backup.text());
    assert!(
        bulk.text().contains(r#""code":"busy""#)
            && bulk
                .text()
                .contains(r#""not_stored":{"from_line":1,"to_line":1}"#),
        "{}",
        bulk.text()
    );
    assert!(busy < Duration::from_secs(5), "answered after {busy:?}");
    // and it ends: the store serves, and the next compaction finds the
    // deleted record purged
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let c = loop {
        let r = s.call("POST", "/v1/compact", Some(&store), None);
        if r.status == 200 {
            break r.json();
        }
        assert_eq!(r.status, 429, "{}", r.text());
        assert!(
            std::time::Instant::now() < deadline,
            "the compaction never ended"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(c["purged"], 0, "{c}");
    s.json(
        "GET",
        "/v1/records/n8",
        Some(&tenant_key(&dir, "t", "p", "user")),
        None,
        200,
    );
}

/// An endpoint that reads no body refuses one rather than ignoring it: a
/// deletion's reason sent in a body would be dropped without a word.
#[test]
fn a_body_sent_to_an_endpoint_that_reads_none_is_refused() {
    let (_tmp, dir) = new_store();
    let k = keys(&dir);
    let store = key(&dir, &["--admin"]);
    let s = Server::start(&dir, None);
    append(
        &s,
        &k.ann,
        r#"[{"kind": "note", "external_id": "kept", "text": "still here"}]"#,
    );
    let e = s.json(
        "DELETE",
        "/v1/records/kept",
        Some(&k.ann),
        Some(r#"{"reason": "gdpr"}"#),
        400,
    );
    assert_eq!(e["error"]["details"]["field"], "body", "{e}");
    s.json("GET", "/v1/records/kept", Some(&k.ann), None, 200);
    let e = s.json(
        "POST",
        "/v1/compact",
        Some(&store),
        Some(r#"{"x": 1}"#),
        400,
    );
    assert_eq!(e["error"]["code"], "bad_request", "{e}");
    // whitespace is no body, nor is a byte-order mark (skipped, as it is
    // opening any body)
    s.json("POST", "/v1/compact", Some(&store), Some(" \n"), 200);
    s.json("POST", "/v1/compact", Some(&store), Some("\u{feff}"), 200);
    s.json(
        "POST",
        "/v1/compact",
        Some(&store),
        Some("\u{feff} \n"),
        200,
    );
    s.json(
        "DELETE",
        "/v1/records/kept?reason=gdpr",
        Some(&k.ann),
        None,
        200,
    );
}

/// What a lifecycle operation on a deleted record answers (409
/// `invalid_state`) is in the published contract of its endpoint.
#[test]
fn conflicts_of_lifecycle_operations_are_in_the_contract() {
    let (_tmp, dir) = new_store();
    let k = keys(&dir);
    let s = Server::start(&dir, None);
    append(
        &s,
        &k.ann,
        r#"[{"kind": "note", "external_id": "gone", "text": "to be deleted"}]"#,
    );
    s.json("DELETE", "/v1/records/gone", Some(&k.ann), None, 200);
    let api = s.json("GET", "/v1/openapi.json", None, None, 200);
    for (method, path, body, op) in [
        (
            "DELETE",
            "/v1/records/gone",
            None,
            ("/v1/records/{ref}", "delete"),
        ),
        (
            "POST",
            "/v1/records/gone/expire",
            Some(r#"{"at": "2025-01-01T00:00:00Z"}"#),
            ("/v1/records/{ref}/expire", "post"),
        ),
    ] {
        let e = s.json(method, path, Some(&k.ann), body, 409);
        assert_eq!(e["error"]["code"], "invalid_state", "{method} {path}: {e}");
        assert!(
            api["paths"][op.0][op.1]["responses"].get("409").is_some(),
            "{method} {path}: 409 not in openapi"
        );
    }
}

/// A SIGTERM sent the moment `listening on` appears is caught (the store
/// is closed cleanly, exit 0), not fatal: the handlers are installed
/// before the line is printed.
#[test]
fn sigterm_right_after_the_listening_line_closes_cleanly() {
    let (_tmp, dir) = new_store();
    for round in 0..5 {
        let mut s = Server::start(&dir, None);
        s.signal_term();
        let st = s.wait(Duration::from_secs(20));
        assert!(st.success(), "round {round}: {st:?}\n{}", s.log_text());
    }
}

/// A correction that carries a label the key does not hold is stored and
/// answered 200 (its new version shown as `null`), never 404: the write
/// happened, and a client told `not_found` would think it had not.
#[test]
fn a_correction_the_key_cannot_read_afterwards_is_answered_as_stored() {
    let (_tmp, dir) = new_store();
    let user = tenant_key(&dir, "t", "ursula", "user");
    let admin = tenant_key(&dir, "t", "boss", "admin");
    let s = Server::start(&dir, None);
    s.json(
        "POST",
        "/v1/records",
        Some(&user),
        Some(r#"[{"external_id": "rc/1", "kind": "note", "text": "orig"}]"#),
        200,
    );
    let out = s.json(
        "POST",
        "/v1/records/ext:rc%2F1/correct",
        Some(&user),
        Some(r#"{"kind": "note", "text": "v2", "access": ["zzz"]}"#),
        200,
    );
    assert_eq!(out["result"]["outcome"], "created", "{out}");
    assert!(out["record"].is_null(), "{out}");
    let h = s.json(
        "GET",
        "/v1/records/ext:rc%2F1/history",
        Some(&admin),
        None,
        200,
    );
    assert_eq!(h["versions"].as_array().map(Vec::len), Some(2), "{h}");
}

/// A revoke from a principal whose API key carries the label (or role)
/// says so: the key's label holds on top of the store's grants, so the
/// principal still reads; the answer names the key and the ways out.
#[test]
fn a_revoke_that_a_key_still_carries_says_so() {
    let (_tmp, dir) = new_store();
    let boss = tenant_key(&dir, "acme", "boss", "admin");
    let alice = key(
        &dir,
        &[
            "--tenant",
            "acme",
            "--principal",
            "alice",
            "--role",
            "user",
            "--label",
            "secret",
        ],
    );
    let s = Server::start(&dir, None);
    let alice_id = &alice[4..12];
    // a label only the key gives: nothing to revoke in the store, refused,
    // naming the key
    let body = json!({"grantee": "alice", "label": "secret"}).to_string();
    let r = s.json("POST", "/v1/access/revoke", Some(&boss), Some(&body), 422);
    let msg = r["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    assert!(
        msg.contains("holds no grant")
            && msg.contains(alice_id)
            && msg.contains("keys revoke")
            && msg.contains("tenant-wide"),
        "{msg}"
    );
    // granted in the store too: the grant is revoked, the key named
    let grant = |body: &serde_json::Value| {
        s.json(
            "POST",
            "/v1/access/grant",
            Some(&boss),
            Some(&body.to_string()),
            200,
        )
    };
    grant(&json!({"grantee": "alice", "label": "secret"}));
    let r = s.json("POST", "/v1/access/revoke", Some(&boss), Some(&body), 200);
    let note = r["note"].as_str().unwrap_or_else(|| panic!("{r}"));
    assert!(
        note.contains(alice_id) && note.contains("keys revoke") && note.contains("tenant-wide"),
        "{note}"
    );
    // a role is granted to principals only: no tenant-wide way out is offered
    key(
        &dir,
        &[
            "--tenant",
            "acme",
            "--principal",
            "rev1",
            "--role",
            "reviewer",
        ],
    );
    grant(&json!({"grantee": "rev1", "role": "reviewer"}));
    let body = json!({"grantee": "rev1", "role": "reviewer"}).to_string();
    let r = s.json("POST", "/v1/access/revoke", Some(&boss), Some(&body), 200);
    let note = r["note"].as_str().unwrap_or_else(|| panic!("{r}"));
    assert!(
        note.contains("keys revoke") && !note.contains("tenant-wide"),
        "{note}"
    );
    // another principal's revoke: no note; a label nobody granted (a
    // typo), or a grantee misspelt: refused, nothing said of keys
    grant(&json!({"grantee": "bob", "label": "secret"}));
    let body = json!({"grantee": "bob", "label": "secret"}).to_string();
    let r = s.json("POST", "/v1/access/revoke", Some(&boss), Some(&body), 200);
    assert!(r.get("note").is_none(), "{r}");
    for body in [
        json!({"grantee": "bob", "label": "secret"}),
        json!({"grantee": "alice", "label": "other"}),
        json!({"grantee": "Bob", "label": "secret"}),
    ] {
        let r = s.json(
            "POST",
            "/v1/access/revoke",
            Some(&boss),
            Some(&body.to_string()),
            422,
        );
        let msg = r["error"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("{r}"));
        assert!(
            msg.contains("nothing was revoked") && !msg.contains("keys revoke"),
            "{msg}"
        );
    }
}

/// The correct endpoint names the corrected record in its path: a body
/// with `replace_access` needs no `supersedes` of its own.
#[test]
fn a_correction_by_path_takes_replace_access() {
    let (_tmp, dir) = new_store();
    let boss = tenant_key(&dir, "acme", "boss", "admin");
    let s = Server::start(&dir, None);
    let rec = r#"[{"kind": "note", "text": "v1", "external_id": "ra1", "access": ["secret"]}]"#;
    s.json("POST", "/v1/records", Some(&boss), Some(rec), 200);
    let body = r#"{"kind": "note", "text": "v2", "access": [], "replace_access": true}"#;
    let r = s.json(
        "POST",
        "/v1/records/ra1/correct",
        Some(&boss),
        Some(body),
        200,
    );
    assert_eq!(r["record"]["access"], json!([]), "{r}");
}

/// A context request without a budget gets the default, or the configured
/// maximum when that is lower (it was refused, naming a field it lacked);
/// so do its counts, a recall's `k` and an evaluation's.
#[test]
fn a_context_without_a_budget_fits_a_lower_configured_maximum() {
    let (_tmp, dir) = new_store();
    let ann = tenant_key(&dir, "acme", "ann", "user");
    let s = Server::start(
        &dir,
        Some("[limits]\ncontext_budget_bytes_max = 4096\ncontext_items_max = 2\nk_max = 3\n"),
    );
    let notes: Vec<Value> = (0..6)
        .map(|i| json!({"kind": "note", "text": format!("checkout note {i}")}))
        .collect();
    append(&s, &ann, &Value::Array(notes).to_string());
    let post =
        |path: &str, body: &str, status: u16| s.json("POST", path, Some(&ann), Some(body), status);
    let r = post("/v1/recall", r#"{"text": "checkout"}"#, 200);
    assert_eq!(r["hits"].as_array().unwrap().len(), 3, "{r}");
    post("/v1/recall", r#"{"text": "checkout", "k": 4}"#, 422);
    let e = s.call(
        "POST",
        "/v1/eval",
        Some(&ann),
        Some("{\"query\": \"checkout\", \"relevant\": []}\n"),
    );
    assert_eq!(e.status, 200, "{}", e.text());
    let c = post(
        "/v1/context",
        r#"{"text": "checkout", "recent_turns": 0}"#,
        200,
    );
    assert!(c["context"].is_object(), "{c}");
    post(
        "/v1/context",
        r#"{"text": "checkout", "semantic_k": 3}"#,
        422,
    );
    let r = post("/v1/context", r#"{"text": "checkout"}"#, 200);
    assert!(r["context"]["used_bytes"].as_u64().unwrap() <= 4096, "{r}");
    post(
        "/v1/context",
        r#"{"text": "checkout", "budget_bytes": 8192}"#,
        422,
    );
}

/// A bulk result line carries the append's notes (a duplicate with vectors
/// says it stored none of them).
#[test]
fn bulk_result_lines_carry_notes() {
    let (_tmp, dir) = new_store();
    let ann = tenant_key(&dir, "acme", "ann", "user");
    let s = Server::start(&dir, None);
    let line = |v: &str| {
        format!(
            "{{\"kind\": \"n\", \"text\": \"x\", \"external_id\": \"k\", \"embedding\": {{\"model\": \"m\", \"vector\": {v}}}}}\n"
        )
    };
    let body = format!("{}{}", line("[1, 0, 0]"), line("[0, 1, 0]"));
    let r = request(
        &s.addr,
        "POST",
        "/v1/records/bulk?batch=1",
        Some(&ann),
        Some(body.as_bytes()),
        "application/x-ndjson",
    )
    .unwrap();
    let out = r.ndjson();
    assert!(out[0].get("notes").is_none(), "{out:?}");
    assert_eq!(out[1]["outcome"], "duplicate", "{out:?}");
    assert!(
        out[1]["notes"][0]
            .as_str()
            .is_some_and(|n| n.contains("keeps the vectors it has")),
        "{out:?}"
    );
}

/// A byte-order mark opening a JSON body is skipped, as bulk ingest and
/// `engram ingest` skip one (it was a 400 "expected value at line 1
/// column 1" that did not name it).
#[test]
fn a_byte_order_mark_opening_a_body_is_skipped() {
    let (_tmp, dir) = new_store();
    let k = keys(&dir);
    let s = Server::start(&dir, None);
    let body =
        "\u{feff}[{\"kind\": \"note\", \"external_id\": \"bom\", \"text\": \"with a mark\"}]";
    s.json("POST", "/v1/records", Some(&k.ann), Some(body), 200);
    s.json("GET", "/v1/records/bom", Some(&k.ann), None, 200);
    let recall = "\u{feff}{\"text\": \"mark\"}";
    let r = s.json("POST", "/v1/recall", Some(&k.ann), Some(recall), 200);
    assert_eq!(r["hits"].as_array().unwrap().len(), 1, "{r}");
}

/// An ambiguous reference (one record's internal id, another's external
/// id) is a 422 naming the batch item and field it was in, inside a batch
/// as across batches; a read's has neither.
#[test]
fn an_ambiguous_reference_names_its_item_and_field() {
    let (_tmp, dir) = new_store();
    let boss = tenant_key(&dir, "acme", "boss", "admin");
    let s = Server::start(&dir, None);
    let r = s.json(
        "POST",
        "/v1/records",
        Some(&boss),
        Some(r#"[{"kind": "note", "text": "base"}]"#),
        200,
    );
    let id = r["results"][0]["id"].as_str().unwrap().to_string();
    let batch = format!(
        r#"[{{"kind": "note", "external_id": "{id}", "text": "lookalike"}},
            {{"kind": "note", "text": "fix", "supersedes": "{id}"}}]"#
    );
    let e = s.json("POST", "/v1/records", Some(&boss), Some(&batch), 422);
    assert_eq!(e["error"]["code"], "ambiguous_reference", "{e}");
    assert_eq!(e["error"]["details"]["item"], 1, "{e}");
    assert_eq!(e["error"]["details"]["field"], "supersedes", "{e}");
    // stored now: the same from a later batch, and a read names no item
    let lookalike = format!(r#"[{{"kind": "note", "external_id": "{id}", "text": "lookalike"}}]"#);
    s.json("POST", "/v1/records", Some(&boss), Some(&lookalike), 200);
    let later = format!(r#"[{{"kind": "note", "text": "fix", "supersedes": "{id}"}}]"#);
    let e = s.json("POST", "/v1/records", Some(&boss), Some(&later), 422);
    assert_eq!(e["error"]["details"]["item"], 0, "{e}");
    let e = s.json("GET", &format!("/v1/records/{id}"), Some(&boss), None, 422);
    assert_eq!(e["error"]["code"], "ambiguous_reference", "{e}");
    assert_eq!(e["error"]["details"], json!({"reference": id}), "{e}");
}
