//! Nothing a principal sees depends on records it cannot read: manifests,
//! errors and vector-space facts of one tenant never show another tenant's
//! (or a hidden record's) model names, dimensions, counts or positions.

use super::cli::{self, ok};

fn two_tenants(root: &std::path::Path) -> std::path::PathBuf {
    let store = root.join("store");
    let f = root.join("a.jsonl");
    let mut s = String::new();
    for i in 0..20 {
        s.push_str(&format!(
            "{{\"external_id\":\"a/{i}\",\"tenant\":\"A\",\"kind\":\"m\",\"text\":\"alpha project note {i}\",\"access\":[\"secret\"],\"embedding\":{{\"model\":\"acme-secret-project-model\",\"vector\":[1,{i},0.5,0.25]}}}}\n"
        ));
    }
    s.push_str("{\"external_id\":\"a/pub\",\"tenant\":\"A\",\"kind\":\"m\",\"text\":\"alpha public note\"}\n");
    s.push_str(
        "{\"external_id\":\"b/1\",\"tenant\":\"B\",\"kind\":\"m\",\"text\":\"beta note\"}\n",
    );
    std::fs::write(&f, s).unwrap();
    ok(&store, &["ingest", f.to_str().unwrap()]);
    store
}

#[test]
fn another_tenants_vector_spaces_and_counts_never_show() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = two_tenants(tmp.path());
    let o = ok(
        &store,
        &[
            "recall",
            "--tenant",
            "B",
            "--text",
            "note",
            "--explain",
            "--json",
        ],
    );
    let out = cli::text(&o);
    assert!(!out.contains("acme-secret"), "{out}");
    let j = cli::json(&o);
    let m = &j["manifest"];
    assert_eq!(m["versions"]["vector_spaces"], serde_json::json!({}), "{m}");
    assert!(m["versions"].get("lexical_documents").is_none(), "{m}");
    assert_eq!(m["eligibility"][0]["remaining"], 1, "{m}");
    // B's position moves with B's writes only
    let b_lsn = m["snapshot_lsn"].as_u64().unwrap();
    let more = tmp.path().join("more.jsonl");
    std::fs::write(
        &more,
        "{\"tenant\":\"A\",\"kind\":\"m\",\"text\":\"another alpha\"}\n",
    )
    .unwrap();
    ok(&store, &["ingest", more.to_str().unwrap()]);
    let again = cli::json(&ok(
        &store,
        &[
            "recall",
            "--tenant",
            "B",
            "--text",
            "note",
            "--explain",
            "--json",
        ],
    ));
    assert_eq!(again["manifest"]["snapshot_lsn"].as_u64().unwrap(), b_lsn);

    // A query vector in B is about B's spaces only.
    let e = cli::fails(&store, &["recall", "--tenant", "B", "--vector", "[1,2,3]"]);
    assert!(!e.contains("acme-secret") && !e.contains("4 dim"), "{e}");
    let e2 = cli::fails(
        &store,
        &[
            "recall",
            "--tenant",
            "B",
            "--vector",
            "[1,2,3]",
            "--model",
            "acme-secret-project-model",
        ],
    );
    let e3 = cli::fails(
        &store,
        &[
            "recall",
            "--tenant",
            "B",
            "--vector",
            "[1,2,3]",
            "--model",
            "never-used-model",
        ],
    );
    assert_eq!(
        e2.replace("acme-secret-project-model", "M"),
        e3.replace("never-used-model", "M")
    );
    // B may use the same model id with its own dimension.
    let bv = tmp.path().join("bv.jsonl");
    std::fs::write(
        &bv,
        "{\"tenant\":\"B\",\"kind\":\"m\",\"text\":\"beta vec\",\"embedding\":{\"model\":\"acme-secret-project-model\",\"vector\":[1,2,3]}}\n",
    )
    .unwrap();
    ok(&store, &["ingest", bv.to_str().unwrap()]);
    ok(
        &store,
        &[
            "recall",
            "--tenant",
            "B",
            "--vector",
            "[1,2,3]",
            "--model",
            "acme-secret-project-model",
        ],
    );
}

#[test]
fn a_principal_without_a_label_sees_no_count_that_includes_what_it_carries() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = two_tenants(tmp.path());
    let o = ok(
        &store,
        &[
            "recall",
            "--tenant",
            "A",
            "--principal",
            "pat",
            "--text",
            "alpha",
            "--explain",
            "--json",
        ],
    );
    let j = cli::json(&o);
    let m = &j["manifest"];
    for step in m["eligibility"].as_array().unwrap() {
        assert!(
            step["remaining"].as_u64().unwrap() <= 1,
            "{step}: counts a hidden record"
        );
    }
    assert_eq!(j["hits"].as_array().unwrap().len(), 1);
    // a space holding only hidden records is not there for pat at all
    assert_eq!(m["versions"]["vector_spaces"], serde_json::json!({}), "{m}");
    let refused = super::cli::fails(
        &store,
        &[
            "recall",
            "--tenant",
            "A",
            "--principal",
            "pat",
            "--vector",
            "[1,2,3,4]",
        ],
    );
    assert!(!refused.contains("acme-secret"), "{refused}");
    assert!(refused.contains("no vectors"), "{refused}");
    // once pat can read one of its vectors, the space shows, but its size
    // (which counts hidden records) is the tenant admin's view only
    let public = store.parent().unwrap().join("pub.jsonl");
    std::fs::write(
        &public,
        "{\"tenant\":\"A\",\"kind\":\"m\",\"text\":\"public vector\",\"embedding\":{\"model\":\"acme-secret-project-model\",\"vector\":[0,1,0,0]}}\n",
    )
    .unwrap();
    ok(&store, &["ingest", public.to_str().unwrap()]);
    let j = cli::json(&ok(
        &store,
        &[
            "recall",
            "--tenant",
            "A",
            "--principal",
            "pat",
            "--text",
            "alpha",
            "--explain",
            "--json",
        ],
    ));
    assert_eq!(
        j["manifest"]["versions"]["vector_spaces"]["acme-secret-project-model"],
        serde_json::json!([4, 0, 0]),
        "{}",
        j["manifest"]
    );
    let v = cli::json(&ok(
        &store,
        &[
            "recall",
            "--tenant",
            "A",
            "--principal",
            "pat",
            "--vector",
            "[1,2,3,4]",
            "--explain",
            "--json",
        ],
    ));
    let plan = &v["manifest"]["vector_plan"];
    assert_eq!(plan["eligible_in_space"], 1, "{plan}");
    // nor anything computed from the space's size (a walk's ef)
    assert!(
        ["space_size", "selectivity", "indexed", "ef_used"]
            .iter()
            .all(|k| plan.get(k).is_none()),
        "{plan}"
    );
    let reason = plan["reason"].as_str().unwrap();
    assert!(!reason.contains("20") && !reason.contains("21"), "{plan}");
}
