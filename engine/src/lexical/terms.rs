//! Index terms: the tokenizer's tokens (`tokenize.rs`), each reduced to its
//! English Snowball stem, so `walks`, `walked` and `walking` meet at
//! `walk`. The BM25 index stores terms and queries look terms up; the
//! tokenizer itself stays unstemmed (entity names, manifests' `tokens`).
//!
//! Only tokens of three or more ASCII letters are stemmed: tokens with
//! digits (`v2`, `conv993`) are identifiers, and words of other scripts
//! would be damaged by English rules. Italian words folded to ASCII are
//! stemmed with the English rules too (no language is detected): measured
//! on the English locomo-dev set only (docs/benchmarks.md, "Retrieval
//! quality"); a per-store language setting is the way to Italian stems.
//!
//! Bump [`TERMS_VERSION`] whenever [`terms`] changes for any input: it is
//! part of a stored index's identity.

use std::borrow::Cow;
use std::sync::LazyLock;

use rust_stemmers::{Algorithm, Stemmer};

use super::tokenize::{TOKENIZER_VERSION, tokenize, tokenize_spans};

/// Identity of the term rules: the tokenizer's version times 100 plus
/// this module's own (1: English Snowball stems).
pub const TERMS_VERSION: u32 = TOKENIZER_VERSION * 100 + 1;

static ENGLISH: LazyLock<Stemmer> = LazyLock::new(|| Stemmer::create(Algorithm::English));

/// Tokens remembered per thread with their stems (None: unchanged). A
/// Snowball stem costs about a microsecond; vocabularies are small and
/// skewed, so nearly every token of a batch is a hit. Cleared when full.
const STEM_CACHE_MAX: usize = 1 << 16;

thread_local! {
    static STEMS: std::cell::RefCell<rustc_hash::FxHashMap<Box<str>, Option<Box<str>>>> =
        std::cell::RefCell::new(rustc_hash::FxHashMap::default());
}

fn stem_uncached(token: &str) -> Option<String> {
    match ENGLISH.stem(token) {
        Cow::Owned(s) if !s.is_empty() && s != token => Some(s),
        _ => None,
    }
}

/// Calls `f` with the stem of `token` when it differs from the token.
pub(super) fn with_stem<R>(token: &str, f: impl FnOnce(Option<&str>) -> R) -> R {
    if token.len() < 3 || !token.bytes().all(|b| b.is_ascii_lowercase()) {
        return f(None);
    }
    STEMS.with_borrow_mut(|cache| {
        if let Some(s) = cache.get(token) {
            return f(s.as_deref());
        }
        if cache.len() >= STEM_CACHE_MAX {
            cache.clear();
        }
        let s = stem_uncached(token).map(String::into_boxed_str);
        let r = f(s.as_deref());
        cache.insert(token.into(), s);
        r
    })
}

/// The stem of `token` when it differs from the token.
pub fn stem(token: &str) -> Option<String> {
    with_stem(token, |s| s.map(str::to_string))
}

/// Appends the terms of `text` to `out`.
pub fn terms(text: &str, out: &mut Vec<String>) {
    let from = out.len();
    tokenize(text, out);
    for t in &mut out[from..] {
        if let Some(s) = stem(t) {
            *t = s;
        }
    }
}

/// The terms of `text`.
pub fn terms_of(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    terms(text, &mut out);
    out
}

/// [`terms`] into one buffer: every term's bytes appended to `buf` and its
/// byte range pushed to `spans` (the index's write path). `scratch` is
/// reused between calls.
pub fn terms_spans(
    text: &str,
    buf: &mut String,
    spans: &mut Vec<(u32, u32)>,
    scratch: &mut String,
) {
    let (from_buf, from_span) = (buf.len(), spans.len());
    tokenize_spans(text, buf, spans);
    scratch.clear();
    scratch.push_str(&buf[from_buf..]);
    buf.truncate(from_buf);
    for s in &mut spans[from_span..] {
        let (a, b) = (s.0 as usize - from_buf, s.1 as usize - from_buf);
        let tok = &scratch[a..b];
        let start = buf.len();
        with_stem(tok, |st| buf.push_str(st.unwrap_or(tok)));
        *s = (
            u32::try_from(start).expect("term offsets of texts below 4 GiB"),
            u32::try_from(buf.len()).expect("term offsets of texts below 4 GiB"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inflections_meet_and_identifiers_stay() {
        assert_eq!(
            terms_of("Caroline walked; she walks, walking to the running club v2 conv993"),
            [
                "carolin", "walk", "she", "walk", "walk", "to", "the", "run", "club", "v2",
                "conv993"
            ]
        );
        // folded to ASCII letters: stemmed; other scripts and short
        // tokens: unchanged
        assert_eq!(terms_of("Ünïcödé 東京 ab"), ["unicod", "東京", "ab"]);
        assert_eq!(terms_of("ﬂäche straße"), ["ﬂache", "straße"]);
    }

    #[test]
    fn the_cache_returns_what_the_stemmer_does() {
        for w in [
            "walking",
            "walking",
            "running",
            "ran",
            "generalization",
            "abc",
            "x",
        ] {
            let direct = if w.len() < 3 { None } else { stem_uncached(w) };
            assert_eq!(stem(w), direct, "{w}");
            assert_eq!(stem(w), direct, "{w} (cached)");
        }
    }

    #[test]
    fn spans_equal_terms_for_many_texts() {
        let texts = [
            "",
            "   ",
            "The meetings were rescheduled, perché l'API è lenta",
            "supporting supported supports support",
            "İstanbul ǅemal ﬁnancing x",
            &"a".repeat(200),
            "mixed: Running2 runners' RUNS",
        ];
        let (mut buf, mut spans, mut scratch) =
            (String::from("prefix"), vec![(0, 6)], String::new());
        for t in texts {
            let (b0, s0) = (buf.len(), spans.len());
            terms_spans(t, &mut buf, &mut spans, &mut scratch);
            let got: Vec<&str> = spans[s0..]
                .iter()
                .map(|&(a, b)| &buf[a as usize..b as usize])
                .collect();
            assert_eq!(got, terms_of(t), "{t}");
            assert!(spans[s0..].iter().all(|&(a, _)| a as usize >= b0));
        }
        assert_eq!(&buf[..6], "prefix");
    }
}
