//! Statements built to make the checker's answer large: a field repeated
//! thousands of times, thousands of retrievers or weights. The answer stays
//! small (at most `ERRORS_MAX` errors, the last saying how many there were)
//! and comes at once, in the text form and in the JSON form alike.

use engram::query::lang::limits::{ERRORS_MAX, RETRIEVERS_MAX, RETURN_FIELDS_MAX};
use engram::query::lang::{CheckContext, ErrorKind, LangError, Statement, check, compile};

fn ctx() -> CheckContext {
    CheckContext::default()
}

fn limit_of(e: &LangError) -> Option<(&str, u64, u64)> {
    match e.kind() {
        ErrorKind::LimitExceeded { what, limit, got } => Some((what.as_str(), *limit, *got)),
        _ => None,
    }
}

#[test]
fn many_errors_are_counted_past_the_limit_not_listed() {
    // 40 failures, one per seed (retrievers would stop at their own limit)
    let ids: Vec<String> = (0..ERRORS_MAX + 8)
        .map(|i| format!("ID 'bad{i}'"))
        .collect();
    let text = format!("FIND ANY EXPAND FROM {}", ids.join(", "));
    let errors = compile(&text, &ctx()).unwrap_err();
    assert_eq!(errors.len(), ERRORS_MAX + 1, "{errors:?}");
    let last = limit_of(errors.last().unwrap()).expect("the last error counts the rest");
    assert_eq!(
        last,
        (
            "errors in one statement",
            ERRORS_MAX as u64,
            ERRORS_MAX as u64 + 8
        )
    );
}

#[test]
fn a_return_list_repeating_a_field_is_refused_by_its_length() {
    // text form: duplicates under the length limit are reported, capped
    let fields = vec!["id"; RETURN_FIELDS_MAX].join(", ");
    let errors = compile(&format!("FIND ANY RETURN {fields}"), &ctx()).unwrap_err();
    assert!(errors.len() <= ERRORS_MAX + 1, "{}", errors.len());
    // JSON form: two hundred thousand copies, one error
    let many = vec!["\"id\""; 200_000].join(",");
    let json = format!(r#"{{"body": {{"statement": "find", "returns": [{many}]}}}}"#);
    let stmt: Statement = serde_json::from_str(&json).unwrap();
    let errors = check(&stmt, &ctx()).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        limit_of(&errors[0]),
        Some(("fields in RETURN", RETURN_FIELDS_MAX as u64, 200_000))
    );
}

#[test]
fn thousands_of_retrievers_or_weights_get_one_limit_error_each() {
    let retrievers: Vec<String> = (0..2000).map(|i| format!("MATCH 'w' AS m{i}")).collect();
    let text = format!("FIND ANY {}", retrievers.join(" "));
    let errors = compile(&text, &ctx()).unwrap_err();
    assert!(errors.len() <= 2, "{errors:?}");
    assert!(
        errors
            .iter()
            .any(|e| limit_of(e).map(|l| l.0) == Some("retrievers"))
    );

    let weights: Vec<String> = (0..5000).map(|i| format!("m{i} = 1")).collect();
    let text = format!(
        "FIND ANY MATCH 'w' AS m0 FUSE LINEAR WEIGHTS ({})",
        weights.join(", ")
    );
    let errors = compile(&text, &ctx()).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        limit_of(&errors[0]),
        Some(("weights", RETRIEVERS_MAX as u64, 5000))
    );
}

#[test]
fn a_match_text_of_only_overlong_words_says_why_it_has_no_words() {
    let long = "a".repeat(65);
    let errors = compile(&format!("FIND ANY MATCH '{long}'"), &ctx()).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let hint = errors[0].hint().unwrap_or_default();
    assert!(hint.contains("longer than 64 characters"), "{hint}");
    // a text over the byte limit gets the limit error alone
    let huge = "a".repeat(20_000);
    let errors = compile(&format!("FIND ANY MATCH '{huge}'"), &ctx()).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(limit_of(&errors[0]).is_some(), "{errors:?}");
}

#[test]
fn a_weight_too_large_to_sum_is_out_of_range() {
    let huge = "9".repeat(308);
    let text = format!(
        "FIND ANY MATCH 'turn' AS a MATCH 'turn' AS b FUSE LINEAR WEIGHTS (a = {huge}, b = 1)"
    );
    let errors = compile(&text, &ctx()).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        // (out of range as written: a count past 2^53 would be clamped)
        matches!(errors[0].kind(), ErrorKind::OutOfRange { what, got, .. } if what.contains("weight of `a`") && got == "1e308"),
        "{errors:?}"
    );
    compile(
        "FIND ANY MATCH 'turn' AS a MATCH 'turn' AS b FUSE LINEAR WEIGHTS (a = 1000000, b = 0)",
        &ctx(),
    )
    .unwrap();
}

#[test]
fn a_model_hint_names_the_space_of_the_vector_s_dimensions() {
    use engram::query::lang::{ParamValue, Params};
    let mut params = Params::new();
    params.insert("v", ParamValue::Vector(vec![0.0, 1.0, 0.0, 0.0]));
    let ctx = CheckContext {
        params,
        models: [("big".to_string(), 8), ("small".to_string(), 4)].into(),
        ..CheckContext::default()
    };
    let errors = compile("FIND ANY SIMILAR TO $v", &ctx).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let hint = errors[0].hint().unwrap_or_default();
    assert!(
        hint.contains("'small'") && !hint.contains("'big'"),
        "{hint}"
    );
}
