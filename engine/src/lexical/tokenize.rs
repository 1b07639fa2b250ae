//! Tokenizer of the lexical index: turns text into the terms that the BM25
//! index stores and that queries look up.
//!
//! It owns the exact definition of a term. Index and query go through the
//! same function, so any change to the rules below changes which documents a
//! query can match: bump [`TOKENIZER_VERSION`] whenever the output of
//! [`tokenize`] changes for any input, so that stored indexes built with the
//! old rules are rejected and rebuilt instead of silently mismatching.
//!
//! It must never panic on any `&str`, never emit an empty token, never emit a
//! token that changes under lowercasing, and never depend on locale or on
//! anything but the input text (and [`TokenizerOptions`]).
//!
//! # Rules
//!
//! 1. **Split** on every character that is not alphanumeric
//!    ([`char::is_alphanumeric`]): whitespace, punctuation, symbols, emoji,
//!    underscores and apostrophes all separate tokens. Elisions therefore
//!    split: `dell'incidente` gives `dell`, `incidente`; `l'API` gives `l`,
//!    `api`; `conv_993` gives `conv`, `993`. Digits are kept (`v2`, `2025`).
//!    Letters of every script (CJK, Arabic, Hebrew, Devanagari, ...) are
//!    alphanumeric and kept as they are; CJK runs without spaces become one
//!    token per run (no word segmentation).
//! 2. **Lowercase** each character with full Unicode lowercasing
//!    ([`char::to_lowercase`], which may yield several characters, e.g.
//!    `İ` gives `i` + U+0307).
//! 3. **Strip combining marks** U+0300..=U+036F that follow a letter or
//!    digit inside a token (so decomposed `perche\u{301}` equals `perche`).
//!    A combining mark with no letter before it is a separator (rule 1).
//! 4. **Fold Latin diacritics**: every precomposed lowercase Latin letter
//!    whose canonical decomposition is an ASCII letter followed only by
//!    marks in U+0300..=U+036F folds to that ASCII letter (`à á â ã ä å` to
//!    `a`, `è é ê ë` to `e`, `ì í î ï` to `i`, `ò ó ô õ ö` to `o`, `ù ú û ü`
//!    to `u`, `ç` to `c`, `ñ` to `n`, and the same for Latin Extended-A/B
//!    and Latin Extended Additional, e.g. Vietnamese `ệ` to `e`). With rule
//!    3 this makes precomposed and decomposed spellings equal: `perché`,
//!    `perche\u{301}` and `perche` all give `perche`. Letters without such a
//!    decomposition (`ß`, `æ`, `ø`, `ł`, `đ`, Greek, Cyrillic) are kept.
//! 5. **Drop long tokens**: a token of more than [`MAX_TOKEN_CHARS`]
//!    characters (counted after rules 2-4) is dropped whole, not truncated.
//! 6. No stemming. No stopword removal by default: BM25's IDF already
//!    discounts frequent words. [`tokenize_with`] can drop the small English
//!    and Italian lists [`STOPWORDS_EN`] and [`STOPWORDS_IT`].

/// Version of the rules above. Part of a stored index's identity: bump it
/// whenever [`tokenize`] output changes for any input.
pub const TOKENIZER_VERSION: u32 = 1;

/// Tokens longer than this many characters (after folding) are dropped.
pub const MAX_TOKEN_CHARS: usize = 64;

/// Optional behaviour on top of the default rules.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenizerOptions {
    /// Drop tokens found in [`STOPWORDS_EN`] or [`STOPWORDS_IT`].
    pub drop_stopwords: bool,
}

/// Small English stopword list, already in tokenized (lowercase, folded)
/// form and sorted, so lookup is a binary search.
pub const STOPWORDS_EN: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "from", "if", "in", "into",
    "is", "it", "its", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then",
    "there", "these", "they", "this", "to", "was", "were", "will", "with",
];

/// Small Italian stopword list (articles, articulated prepositions, common
/// conjunctions and pronouns), already in tokenized form (`perché` is
/// stored as `perche`, `è` as `e`, `dell'` as `dell`) and sorted.
pub const STOPWORDS_IT: &[&str] = &[
    "a", "ad", "agli", "ai", "al", "all", "alla", "alle", "allo", "anche", "c", "che", "chi", "ci",
    "col", "come", "con", "cui", "d", "da", "dagli", "dai", "dal", "dall", "dalla", "dalle",
    "dallo", "degli", "dei", "del", "dell", "della", "delle", "dello", "di", "e", "ed", "fra",
    "gli", "i", "il", "in", "l", "la", "le", "lo", "ma", "mi", "ne", "negli", "nei", "nel", "nell",
    "nella", "nelle", "nello", "non", "o", "per", "perche", "piu", "quella", "quelle", "quello",
    "questa", "queste", "questo", "se", "si", "sono", "su", "sugli", "sui", "sul", "sull", "sulla",
    "sulle", "sullo", "tra", "un", "una", "uno",
];

/// Whether `token` (already tokenized) is in either stopword list.
pub fn is_stopword(token: &str) -> bool {
    STOPWORDS_EN.binary_search(&token).is_ok() || STOPWORDS_IT.binary_search(&token).is_ok()
}

/// Appends the tokens of `text` to `out` using the default rules (no
/// stopword removal). `out` is not cleared.
pub fn tokenize(text: &str, out: &mut Vec<String>) {
    tokenize_with(text, TokenizerOptions::default(), out);
}

/// Convenience wrapper: the tokens of `text` under the default rules.
pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    tokenize(text, &mut out);
    out
}

/// Appends the tokens of `text` to `out`, applying `opts` on top of the
/// default rules. `out` is not cleared.
pub fn tokenize_with(text: &str, opts: TokenizerOptions, out: &mut Vec<String>) {
    tokens_each(text, &mut String::new(), |t| {
        if !(opts.drop_stopwords && is_stopword(t)) {
            out.push(t.to_owned());
        }
    });
}

/// [`ASCII_CLASS`] bit of an ASCII letter or digit.
const ALNUM: u8 = 1;
/// [`ASCII_CLASS`] bit of an ASCII uppercase letter.
const UPPER: u8 = 2;

/// The class of each byte value: one table load per byte of a run, where
/// the range tests took several compares and branches.
const ASCII_CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c: u8 = 0;
    loop {
        if c.is_ascii_alphanumeric() {
            t[c as usize] = ALNUM;
        }
        if c.is_ascii_uppercase() {
            t[c as usize] |= UPPER;
        }
        if c == u8::MAX {
            break;
        }
        c += 1;
    }
    t
};

/// Calls `f` with each token of `text`, in order, under the rules above
/// (without stopword removal): the one implementation of the rules, which
/// every other entry point and the index's write path go through. A
/// token that is a run of lowercase ASCII letters and digits between ASCII
/// separators (most tokens of most texts) is passed as a slice of `text`
/// itself; any other is built in `scratch` first. No allocation per token.
pub fn tokens_each(text: &str, scratch: &mut String, mut f: impl FnMut(&str)) {
    scratch.clear();
    // chars of the token being built in `scratch` (0: none)
    let mut chars = 0usize;
    let flush = |scratch: &mut String, chars: &mut usize, f: &mut dyn FnMut(&str)| {
        if *chars > 0 && *chars <= MAX_TOKEN_CHARS {
            f(scratch);
        }
        scratch.clear();
        *chars = 0;
    };
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if ASCII_CLASS[b as usize] & ALNUM != 0 {
            let run = i;
            let mut class = 0;
            while let Some(&c) = bytes.get(i) {
                let c = ASCII_CLASS[c as usize];
                if c & ALNUM == 0 {
                    break;
                }
                class |= c;
                i += 1;
            }
            let upper = class & UPPER != 0;
            let n = i - run;
            // The whole token, when nothing came before the run and an
            // ASCII separator (or the end) comes after it.
            if chars == 0 && bytes.get(i).is_none_or(u8::is_ascii) {
                if n <= MAX_TOKEN_CHARS {
                    if upper {
                        scratch.push_str(&text[run..i]);
                        scratch.make_ascii_lowercase();
                        f(scratch);
                        scratch.clear();
                    } else {
                        f(&text[run..i]);
                    }
                }
                continue;
            }
            let keep = n.min(MAX_TOKEN_CHARS.saturating_sub(chars));
            let at = scratch.len();
            scratch.push_str(&text[run..run + keep]);
            scratch[at..].make_ascii_lowercase();
            chars += n;
            continue;
        }
        if b.is_ascii() {
            flush(scratch, &mut chars, &mut f);
            i += 1;
            continue;
        }
        // `i` is always on a char boundary: it only ever advances by whole
        // ASCII bytes or by the UTF-8 length of the char decoded here.
        let Some(c) = text[i..].chars().next() else {
            break;
        };
        i += c.len_utf8();
        if c.is_alphanumeric() {
            for l in c.to_lowercase() {
                if is_combining_mark(l) {
                    continue;
                }
                chars += 1;
                if chars <= MAX_TOKEN_CHARS {
                    scratch.push(fold(l));
                }
            }
        } else if is_combining_mark(c) && chars > 0 {
            // a mark after a letter or digit is dropped, the token goes on
        } else {
            flush(scratch, &mut chars, &mut f);
        }
    }
    flush(scratch, &mut chars, &mut f);
}

fn is_combining_mark(c: char) -> bool {
    ('\u{0300}'..='\u{036F}').contains(&c)
}

/// Rule 4: folds a lowercase precomposed Latin letter to its ASCII base.
fn fold(c: char) -> char {
    if !('\u{00C0}'..='\u{1EFF}').contains(&c) {
        return c;
    }
    match FOLD.binary_search_by(|&(from, _)| from.cmp(&c)) {
        Ok(i) => FOLD[i].1,
        Err(_) => c,
    }
}

/// Every lowercase character in U+00C0..=U+024F and U+1E00..=U+1EFF whose
/// canonical decomposition is an ASCII letter followed only by combining
/// marks U+0300..=U+036F, with that letter. Sorted by the first column.
/// Generated from the Unicode Character Database (NFD).
#[rustfmt::skip]
const FOLD: &[(char, char)] = &[
    ('\u{00E0}', 'a'), ('\u{00E1}', 'a'), ('\u{00E2}', 'a'), ('\u{00E3}', 'a'), ('\u{00E4}', 'a'), ('\u{00E5}', 'a'),
    ('\u{00E7}', 'c'), ('\u{00E8}', 'e'), ('\u{00E9}', 'e'), ('\u{00EA}', 'e'), ('\u{00EB}', 'e'), ('\u{00EC}', 'i'),
    ('\u{00ED}', 'i'), ('\u{00EE}', 'i'), ('\u{00EF}', 'i'), ('\u{00F1}', 'n'), ('\u{00F2}', 'o'), ('\u{00F3}', 'o'),
    ('\u{00F4}', 'o'), ('\u{00F5}', 'o'), ('\u{00F6}', 'o'), ('\u{00F9}', 'u'), ('\u{00FA}', 'u'), ('\u{00FB}', 'u'),
    ('\u{00FC}', 'u'), ('\u{00FD}', 'y'), ('\u{00FF}', 'y'), ('\u{0101}', 'a'), ('\u{0103}', 'a'), ('\u{0105}', 'a'),
    ('\u{0107}', 'c'), ('\u{0109}', 'c'), ('\u{010B}', 'c'), ('\u{010D}', 'c'), ('\u{010F}', 'd'), ('\u{0113}', 'e'),
    ('\u{0115}', 'e'), ('\u{0117}', 'e'), ('\u{0119}', 'e'), ('\u{011B}', 'e'), ('\u{011D}', 'g'), ('\u{011F}', 'g'),
    ('\u{0121}', 'g'), ('\u{0123}', 'g'), ('\u{0125}', 'h'), ('\u{0129}', 'i'), ('\u{012B}', 'i'), ('\u{012D}', 'i'),
    ('\u{012F}', 'i'), ('\u{0135}', 'j'), ('\u{0137}', 'k'), ('\u{013A}', 'l'), ('\u{013C}', 'l'), ('\u{013E}', 'l'),
    ('\u{0144}', 'n'), ('\u{0146}', 'n'), ('\u{0148}', 'n'), ('\u{014D}', 'o'), ('\u{014F}', 'o'), ('\u{0151}', 'o'),
    ('\u{0155}', 'r'), ('\u{0157}', 'r'), ('\u{0159}', 'r'), ('\u{015B}', 's'), ('\u{015D}', 's'), ('\u{015F}', 's'),
    ('\u{0161}', 's'), ('\u{0163}', 't'), ('\u{0165}', 't'), ('\u{0169}', 'u'), ('\u{016B}', 'u'), ('\u{016D}', 'u'),
    ('\u{016F}', 'u'), ('\u{0171}', 'u'), ('\u{0173}', 'u'), ('\u{0175}', 'w'), ('\u{0177}', 'y'), ('\u{017A}', 'z'),
    ('\u{017C}', 'z'), ('\u{017E}', 'z'), ('\u{01A1}', 'o'), ('\u{01B0}', 'u'), ('\u{01CE}', 'a'), ('\u{01D0}', 'i'),
    ('\u{01D2}', 'o'), ('\u{01D4}', 'u'), ('\u{01D6}', 'u'), ('\u{01D8}', 'u'), ('\u{01DA}', 'u'), ('\u{01DC}', 'u'),
    ('\u{01DF}', 'a'), ('\u{01E1}', 'a'), ('\u{01E7}', 'g'), ('\u{01E9}', 'k'), ('\u{01EB}', 'o'), ('\u{01ED}', 'o'),
    ('\u{01F0}', 'j'), ('\u{01F5}', 'g'), ('\u{01F9}', 'n'), ('\u{01FB}', 'a'), ('\u{0201}', 'a'), ('\u{0203}', 'a'),
    ('\u{0205}', 'e'), ('\u{0207}', 'e'), ('\u{0209}', 'i'), ('\u{020B}', 'i'), ('\u{020D}', 'o'), ('\u{020F}', 'o'),
    ('\u{0211}', 'r'), ('\u{0213}', 'r'), ('\u{0215}', 'u'), ('\u{0217}', 'u'), ('\u{0219}', 's'), ('\u{021B}', 't'),
    ('\u{021F}', 'h'), ('\u{0227}', 'a'), ('\u{0229}', 'e'), ('\u{022B}', 'o'), ('\u{022D}', 'o'), ('\u{022F}', 'o'),
    ('\u{0231}', 'o'), ('\u{0233}', 'y'), ('\u{1E01}', 'a'), ('\u{1E03}', 'b'), ('\u{1E05}', 'b'), ('\u{1E07}', 'b'),
    ('\u{1E09}', 'c'), ('\u{1E0B}', 'd'), ('\u{1E0D}', 'd'), ('\u{1E0F}', 'd'), ('\u{1E11}', 'd'), ('\u{1E13}', 'd'),
    ('\u{1E15}', 'e'), ('\u{1E17}', 'e'), ('\u{1E19}', 'e'), ('\u{1E1B}', 'e'), ('\u{1E1D}', 'e'), ('\u{1E1F}', 'f'),
    ('\u{1E21}', 'g'), ('\u{1E23}', 'h'), ('\u{1E25}', 'h'), ('\u{1E27}', 'h'), ('\u{1E29}', 'h'), ('\u{1E2B}', 'h'),
    ('\u{1E2D}', 'i'), ('\u{1E2F}', 'i'), ('\u{1E31}', 'k'), ('\u{1E33}', 'k'), ('\u{1E35}', 'k'), ('\u{1E37}', 'l'),
    ('\u{1E39}', 'l'), ('\u{1E3B}', 'l'), ('\u{1E3D}', 'l'), ('\u{1E3F}', 'm'), ('\u{1E41}', 'm'), ('\u{1E43}', 'm'),
    ('\u{1E45}', 'n'), ('\u{1E47}', 'n'), ('\u{1E49}', 'n'), ('\u{1E4B}', 'n'), ('\u{1E4D}', 'o'), ('\u{1E4F}', 'o'),
    ('\u{1E51}', 'o'), ('\u{1E53}', 'o'), ('\u{1E55}', 'p'), ('\u{1E57}', 'p'), ('\u{1E59}', 'r'), ('\u{1E5B}', 'r'),
    ('\u{1E5D}', 'r'), ('\u{1E5F}', 'r'), ('\u{1E61}', 's'), ('\u{1E63}', 's'), ('\u{1E65}', 's'), ('\u{1E67}', 's'),
    ('\u{1E69}', 's'), ('\u{1E6B}', 't'), ('\u{1E6D}', 't'), ('\u{1E6F}', 't'), ('\u{1E71}', 't'), ('\u{1E73}', 'u'),
    ('\u{1E75}', 'u'), ('\u{1E77}', 'u'), ('\u{1E79}', 'u'), ('\u{1E7B}', 'u'), ('\u{1E7D}', 'v'), ('\u{1E7F}', 'v'),
    ('\u{1E81}', 'w'), ('\u{1E83}', 'w'), ('\u{1E85}', 'w'), ('\u{1E87}', 'w'), ('\u{1E89}', 'w'), ('\u{1E8B}', 'x'),
    ('\u{1E8D}', 'x'), ('\u{1E8F}', 'y'), ('\u{1E91}', 'z'), ('\u{1E93}', 'z'), ('\u{1E95}', 'z'), ('\u{1E96}', 'h'),
    ('\u{1E97}', 't'), ('\u{1E98}', 'w'), ('\u{1E99}', 'y'), ('\u{1EA1}', 'a'), ('\u{1EA3}', 'a'), ('\u{1EA5}', 'a'),
    ('\u{1EA7}', 'a'), ('\u{1EA9}', 'a'), ('\u{1EAB}', 'a'), ('\u{1EAD}', 'a'), ('\u{1EAF}', 'a'), ('\u{1EB1}', 'a'),
    ('\u{1EB3}', 'a'), ('\u{1EB5}', 'a'), ('\u{1EB7}', 'a'), ('\u{1EB9}', 'e'), ('\u{1EBB}', 'e'), ('\u{1EBD}', 'e'),
    ('\u{1EBF}', 'e'), ('\u{1EC1}', 'e'), ('\u{1EC3}', 'e'), ('\u{1EC5}', 'e'), ('\u{1EC7}', 'e'), ('\u{1EC9}', 'i'),
    ('\u{1ECB}', 'i'), ('\u{1ECD}', 'o'), ('\u{1ECF}', 'o'), ('\u{1ED1}', 'o'), ('\u{1ED3}', 'o'), ('\u{1ED5}', 'o'),
    ('\u{1ED7}', 'o'), ('\u{1ED9}', 'o'), ('\u{1EDB}', 'o'), ('\u{1EDD}', 'o'), ('\u{1EDF}', 'o'), ('\u{1EE1}', 'o'),
    ('\u{1EE3}', 'o'), ('\u{1EE5}', 'u'), ('\u{1EE7}', 'u'), ('\u{1EE9}', 'u'), ('\u{1EEB}', 'u'), ('\u{1EED}', 'u'),
    ('\u{1EEF}', 'u'), ('\u{1EF1}', 'u'), ('\u{1EF3}', 'y'), ('\u{1EF5}', 'y'), ('\u{1EF7}', 'y'), ('\u{1EF9}', 'y'),
];

#[cfg(test)]
mod span_tests {
    use super::*;
    use proptest::prelude::*;

    /// The rules of the module documentation, one char at a time: the
    /// reference [`tokens_each`] (and so every tokenizer entry point) is
    /// held to.
    fn reference_tokens(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut cur = Builder::default();
        for c in text.chars() {
            if c.is_ascii() {
                if c.is_ascii_alphanumeric() {
                    cur.push(c.to_ascii_lowercase());
                } else {
                    cur.flush(&mut out);
                }
            } else if c.is_alphanumeric() {
                for l in c.to_lowercase() {
                    if is_combining_mark(l) {
                        // Only produced after a letter (e.g. `İ` -> `i` U+0307):
                        // rule 3 strips it.
                        continue;
                    }
                    cur.push(fold(l));
                }
            } else if is_combining_mark(c) && !cur.is_empty() {
                // Rule 3: a mark after a letter or digit is dropped and does not
                // split the token.
            } else {
                cur.flush(&mut out);
            }
        }
        cur.flush(&mut out);
        out
    }

    /// The token being built: its text and its length in chars. Characters
    /// past [`MAX_TOKEN_CHARS`] are counted but not stored, since the token
    /// will be dropped anyway.
    #[derive(Default)]
    struct Builder {
        text: String,
        chars: usize,
    }

    impl Builder {
        fn is_empty(&self) -> bool {
            self.chars == 0
        }

        fn push(&mut self, c: char) {
            self.chars += 1;
            if self.chars <= MAX_TOKEN_CHARS {
                self.text.push(c);
            }
        }

        fn flush(&mut self, out: &mut Vec<String>) {
            if self.chars == 0 {
                return;
            }
            if self.chars <= MAX_TOKEN_CHARS {
                out.push(std::mem::take(&mut self.text));
            } else {
                self.text.clear();
            }
            self.chars = 0;
        }
    }

    proptest! {
        #[test]
        fn each_token_agrees_with_tokens(text in ".{0,200}") {
            let mut got = Vec::new();
            tokens_each(&text, &mut String::from("stale"), |t| got.push(t.to_string()));
            prop_assert_eq!(got, reference_tokens(&text));
        }

        /// Lower and upper case runs around the length limit, accents and
        /// marks that continue a run, and separators, ASCII or not.
        #[test]
        fn each_token_agrees_with_tokens_on_mostly_ascii(
            text in "([a-zA-Z0-9]{0,70}[ .,'_\u{e9}\u{301}\u{130}\u{df}\u{2014}\u{1F600}]?){0,6}"
        ) {
            let mut got = Vec::new();
            tokens_each(&text, &mut String::new(), |t| got.push(t.to_string()));
            prop_assert_eq!(got, reference_tokens(&text));
        }
    }
}

/// The key under which entity names and aliases are indexed (and looked
/// up): their tokens joined by single spaces, so "Checkout-API" and
/// "checkout api" meet.
pub fn name_key(name: &str) -> String {
    tokens(name).join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn english_sentence() {
        assert_eq!(
            tokens("The quick brown Fox jumped over v2 of the API (2025 release)!"),
            [
                "the", "quick", "brown", "fox", "jumped", "over", "v2", "of", "the", "api", "2025",
                "release"
            ]
        );
        assert_eq!(tokens("conv_993"), ["conv", "993"]);
        assert_eq!(
            tokens("don't e-mail foo@bar.com"),
            ["don", "t", "e", "mail", "foo", "bar", "com"]
        );
    }

    #[test]
    fn italian_sentence_elisions_and_accents() {
        assert_eq!(
            tokens("Dell'incidente di ieri: perché l'API è caduta? Più tardi, città."),
            [
                "dell",
                "incidente",
                "di",
                "ieri",
                "perche",
                "l",
                "api",
                "e",
                "caduta",
                "piu",
                "tardi",
                "citta"
            ]
        );
        assert_eq!(tokens("L’ultima policy"), ["l", "ultima", "policy"]);
    }

    #[test]
    fn precomposed_and_decomposed_fold_equal() {
        let want = vec!["perche".to_string()];
        assert_eq!(tokens("perché"), want);
        assert_eq!(tokens("PERCHÉ"), want);
        assert_eq!(tokens("perche\u{301}"), want);
        assert_eq!(tokens("PERCHE\u{301}"), want);
        assert_eq!(tokens("perche"), want);
        assert_eq!(
            tokens("Ñandú Ça Façade naïve Ångström"),
            ["nandu", "ca", "facade", "naive", "angstrom"]
        );
        // Vietnamese: precomposed with two marks, and the decomposed spelling.
        assert_eq!(tokens("Thư viện"), ["thu", "vien"]);
        assert_eq!(tokens("Thu\u{31B} vie\u{323}\u{302}n"), ["thu", "vien"]);
        // Full lowercasing: İ lowercases to i + U+0307, the mark is stripped.
        assert_eq!(tokens("İstanbul"), ["istanbul"]);
    }

    #[test]
    fn non_latin_scripts_are_kept() {
        assert_eq!(tokens("Straße Øresund Łódź"), ["straße", "øresund", "łodz"]);
        assert_eq!(tokens("Москва ЙОД"), ["москва", "йод"]);
        assert_eq!(tokens("東京タワー、大阪"), ["東京タワー", "大阪"]);
        assert_eq!(tokens("مرحبا بالعالم"), ["مرحبا", "بالعالم"]);
        assert_eq!(tokens("שלום עולם"), ["שלום", "עולם"]);
        assert_eq!(tokens("ΣΟΦΙΑ"), ["σοφια"]);
    }

    #[test]
    fn emoji_and_stray_marks_separate() {
        assert_eq!(tokens("🚀rocket🔥launch 👨‍👩‍👧"), ["rocket", "launch"]);
        assert_eq!(tokens("\u{301}abc \u{301}\u{300}"), ["abc"]);
        assert!(tokens("").is_empty());
        assert!(tokens("  ,;!? \t\n").is_empty());
    }

    #[test]
    fn long_tokens_are_dropped_not_truncated() {
        let ok = "a".repeat(MAX_TOKEN_CHARS);
        let long = "a".repeat(MAX_TOKEN_CHARS + 1);
        assert_eq!(tokens(&format!("x {ok} y")), ["x", ok.as_str(), "y"]);
        assert_eq!(tokens(&format!("x {long} y")), ["x", "y"]);
        // Counted in chars after folding, not bytes.
        let accented = "é".repeat(MAX_TOKEN_CHARS);
        assert_eq!(tokens(&accented), ["e".repeat(MAX_TOKEN_CHARS)]);
        // Stripped combining marks do not count.
        let decomposed = "e\u{301}".repeat(MAX_TOKEN_CHARS);
        assert_eq!(tokens(&decomposed), ["e".repeat(MAX_TOKEN_CHARS)]);
    }

    #[test]
    fn tokenize_appends_to_out() {
        let mut out = vec!["keep".to_string()];
        tokenize("one two", &mut out);
        assert_eq!(out, ["keep", "one", "two"]);
    }

    #[test]
    fn stopwords_optional() {
        let text = "The retention policy della memoria è rivista per il tenant";
        let mut all = Vec::new();
        tokenize_with(text, TokenizerOptions::default(), &mut all);
        assert_eq!(all, tokens(text));
        let mut kept = Vec::new();
        tokenize_with(
            text,
            TokenizerOptions {
                drop_stopwords: true,
            },
            &mut kept,
        );
        assert_eq!(
            kept,
            ["retention", "policy", "memoria", "rivista", "tenant"]
        );
    }

    #[test]
    fn stopword_lists_are_sorted_tokens() {
        for list in [STOPWORDS_EN, STOPWORDS_IT] {
            assert!(
                list.windows(2).all(|w| w[0] < w[1]),
                "list must be sorted and unique"
            );
            for w in list {
                assert_eq!(
                    tokens(w),
                    [*w],
                    "stopword {w:?} must be a tokenizer fixed point"
                );
                assert!(is_stopword(w));
            }
        }
        assert!(!is_stopword("retention"));
    }

    #[test]
    fn fold_table_is_sorted_and_maps_to_ascii() {
        assert!(FOLD.windows(2).all(|w| w[0].0 < w[1].0));
        for &(from, to) in FOLD {
            assert!(to.is_ascii_lowercase(), "{from:?}");
            let one: String = from.to_string();
            assert_eq!(tokens(&one), [to.to_string()], "{from:?}");
            // The uppercase spelling folds the same way.
            let upper: String = from.to_uppercase().collect();
            if upper.chars().count() == 1 {
                assert_eq!(tokens(&upper), [to.to_string()], "{upper:?}");
            }
        }
    }

    fn interesting_char() -> impl Strategy<Value = char> {
        prop_oneof![
            prop::char::range('a', 'z'),
            prop::char::range('A', 'Z'),
            prop::char::range('0', '9'),
            Just(' '),
            Just('\''),
            Just('_'),
            Just('-'),
            prop::char::range('\u{00C0}', '\u{024F}'),
            prop::char::range('\u{0300}', '\u{036F}'),
            prop::char::range('\u{1E00}', '\u{1EFF}'),
            prop::char::range('\u{0370}', '\u{04FF}'),
            prop::char::range('\u{0590}', '\u{06FF}'),
            prop::char::range('\u{4E00}', '\u{4E3F}'),
            prop::char::range('\u{1F300}', '\u{1F64F}'),
            Just('\u{200D}'),
            Just('\u{0130}'),
            Just('\u{1E9E}'),
        ]
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            prop::collection::vec(interesting_char(), 0..200).prop_map(String::from_iter),
            "[a-zé\u{301}]{60,70}( [a-z]{1,5})?",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn tokens_are_nonempty_lowercase_stable_and_short(s in text()) {
            let toks = tokens(&s);
            for t in &toks {
                prop_assert!(!t.is_empty());
                prop_assert_eq!(&t.to_lowercase(), t);
                prop_assert!(t.chars().count() <= MAX_TOKEN_CHARS);
                prop_assert!(t.chars().all(char::is_alphanumeric), "{:?}", t);
            }
            // Tokenizing the tokens again is the identity.
            prop_assert_eq!(tokens(&toks.join(" ")), toks.clone());
            // Stopword removal only removes.
            let mut kept = Vec::new();
            tokenize_with(&s, TokenizerOptions { drop_stopwords: true }, &mut kept);
            let expected: Vec<String> = toks.into_iter().filter(|t| !is_stopword(t)).collect();
            prop_assert_eq!(kept, expected);
        }
    }
}
