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

use super::tokenize::{TOKENIZER_VERSION, tokenize};

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
}
