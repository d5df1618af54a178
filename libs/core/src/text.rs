//! Text a person reads before money moves: what an approver is shown must be what is paid.
//!
//! Three kinds of text reach people:
//! - **Plain** values — identifiers and intent fields (asset, source, destination, memo,
//!   idempotency keys, account names). Printable characters only: no control or format
//!   characters (bidi overrides and isolates, zero-width space and joiners, BOM, soft hyphen,
//!   word joiner), no separators other than the ASCII space, no letters or marks that UTS #39
//!   restricts from identifiers (the Hangul fillers, variation selectors, the combining
//!   grapheme joiner …), no space at either end. Such a value cannot be reordered or hidden on
//!   screen.
//! - **Free text** — reasons and descriptions: any printable text, new lines and tabs
//!   included; no control, format (but the zero-width joiners that emoji and some scripts
//!   need), private-use or unassigned characters. Shown isolated by the console.
//! - **Principals** — plain, and compared by [`principal_keys`]: NFKC, case folded, and the
//!   UTS #39 confusable skeleton, so `rita`, `RITA`, `rіta` (Cyrillic і) and `ritа` (Cyrillic
//!   а) are one principal to every four-eyes rule ([`same_principal`]).
//!
//! The character tables come from the `unicode-properties` (general category),
//! `unicode-security` (identifier status, confusables) and `unicode-normalization` crates.

use unicode_normalization::UnicodeNormalization;
use unicode_properties::{GeneralCategory, GeneralCategoryGroup, UnicodeGeneralCategory};
use unicode_security::GeneralSecurityProfile;

/// Why a text was refused; its `Display` names the field and the offending character by code
/// point (never the character itself, which may be invisible).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    #[error("{field} must not be empty")]
    Empty { field: String },
    #[error("{field} is longer than {max} characters")]
    TooLong { field: String, max: usize },
    #[error("{field} must not start or end with whitespace")]
    Padded { field: String },
    #[error("{field} holds {code} ({kind}) at character {at}: only printable text is accepted")]
    Hidden { field: String, code: String, kind: &'static str, at: usize },
}

/// A plain value: non-empty, at most `max` characters, printable, no space at either end.
pub fn check_plain(field: &str, value: &str, max: usize) -> Result<(), TextError> {
    if value.is_empty() {
        return Err(TextError::Empty { field: field.into() });
    }
    if value.chars().count() > max {
        return Err(TextError::TooLong { field: field.into(), max });
    }
    if let Some((at, c, kind)) = value.chars().enumerate().find_map(|(i, c)| hidden_in_plain(c).map(|k| (i, c, k))) {
        return Err(hidden(field, at, c, kind));
    }
    if value.starts_with(' ') || value.ends_with(' ') {
        return Err(TextError::Padded { field: field.into() });
    }
    Ok(())
}

/// Free text (a reason, a description): at most `max` characters of printable text, lines
/// and tabs included. Empty is the caller's choice.
pub fn check_free(field: &str, value: &str, max: usize) -> Result<(), TextError> {
    if value.chars().count() > max {
        return Err(TextError::TooLong { field: field.into(), max });
    }
    match value.chars().enumerate().find_map(|(i, c)| hidden_in_free(c).map(|k| (i, c, k))) {
        Some((at, c, kind)) => Err(hidden(field, at, c, kind)),
        None => Ok(()),
    }
}

/// Every string in a JSON value — object keys included — is plain (at most `max` characters
/// each); `field` names the path of the first that is not (`intent.destination.memo`).
pub fn check_plain_json(field: &str, value: &serde_json::Value, max: usize) -> Result<(), TextError> {
    use serde_json::Value;
    match value {
        Value::String(s) => check_plain(field, s, max),
        Value::Array(items) => {
            items.iter().enumerate().try_for_each(|(i, v)| check_plain_json(&format!("{field}[{i}]"), v, max))
        }
        Value::Object(map) => map.iter().try_for_each(|(k, v)| {
            let path = format!("{field}.{k}");
            check_plain(&format!("a key of {field}"), k, max)?;
            check_plain_json(&path, v, max)
        }),
        _ => Ok(()),
    }
}

/// The keys principals are compared by: the UTS #39 confusable skeleton of the principal
/// case folded (NFKC, lower case, NFKC) and of the principal as written (NFKC) — folding
/// first makes `RITA` `rita`, the skeleton of the written form keeps `aIice` (capital I)
/// beside `alice`. Two principals that share either key look alike.
pub fn principal_keys(principal: &str) -> [String; 2] {
    let written: String = principal.nfkc().collect();
    let folded: String = written.chars().flat_map(char::to_lowercase).nfkc().collect();
    [unicode_security::skeleton(&folded).collect(), unicode_security::skeleton(&written).collect()]
}

/// Whether two principals are one identity to every rule (see [`principal_keys`]).
pub fn same_principal(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let (ka, kb) = (principal_keys(a), principal_keys(b));
    ka[0] == kb[0] || ka[1] == kb[1]
}

/// `value` for a terminal or a log line: every character a plain value may not hold (see
/// [`check_plain`]) spelled out as `<U+202E>`, so nothing hidden shows and nothing reorders
/// the text around it. Values stored before the rules held are shown this way too.
pub fn visible(value: &str) -> std::borrow::Cow<'_, str> {
    if !value.chars().any(|c| hidden_in_plain(c).is_some()) {
        return std::borrow::Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len() + 16);
    for c in value.chars() {
        match hidden_in_plain(c) {
            Some(_) => out.push_str(&format!("<U+{:04X}>", c as u32)),
            None => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

fn hidden(field: &str, at: usize, c: char, kind: &'static str) -> TextError {
    TextError::Hidden { field: field.into(), code: format!("U+{:04X}", c as u32), kind, at: at + 1 }
}

/// Why `c` may not appear in a plain value, if it may not.
fn hidden_in_plain(c: char) -> Option<&'static str> {
    if c == ' ' || c.is_ascii_graphic() {
        return None;
    }
    match c.general_category_group() {
        GeneralCategoryGroup::Letter | GeneralCategoryGroup::Mark | GeneralCategoryGroup::Number => {
            (!c.identifier_allowed()).then_some("a character restricted from identifiers")
        }
        // U+2800 BRAILLE PATTERN BLANK is a symbol that renders as nothing.
        GeneralCategoryGroup::Punctuation | GeneralCategoryGroup::Symbol => {
            (c == '\u{2800}').then_some("a blank symbol")
        }
        GeneralCategoryGroup::Separator => Some("a space or separator other than the ASCII space"),
        GeneralCategoryGroup::Other => Some(other_kind(c)),
    }
}

/// Why `c` may not appear in free text, if it may not.
fn hidden_in_free(c: char) -> Option<&'static str> {
    match c {
        '\n' | '\t' | '\u{200C}' | '\u{200D}' => return None,
        _ => {}
    }
    match c.general_category() {
        GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator => Some("a line separator"),
        _ if c.general_category_group() == GeneralCategoryGroup::Other => Some(other_kind(c)),
        _ => None,
    }
}

fn other_kind(c: char) -> &'static str {
    match c.general_category() {
        GeneralCategory::Control => "a control character",
        GeneralCategory::Format => "a format character (bidi control, zero-width or similar)",
        GeneralCategory::PrivateUse => "a private-use character",
        _ => "an unassigned character",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_refuses_what_cannot_be_seen() {
        for ok in ["USDT", "0xAbC", "venue-a/main", "Zürich", "東京", "memo 12: rent", "α-β"] {
            assert_eq!(check_plain("f", ok, 64), Ok(()), "{ok}");
        }
        for (bad, code) in [
            ("0xabc\u{202E}def", "U+202E"), // right-to-left override
            ("US\u{200B}DT", "U+200B"),     // zero-width space
            ("\u{FEFF}USDT", "U+FEFF"),     // BOM
            ("ab\u{00AD}c", "U+00AD"),      // soft hyphen
            ("ab\u{2060}c", "U+2060"),      // word joiner
            ("ab\u{034F}c", "U+034F"),      // combining grapheme joiner
            ("ab\u{2066}c\u{2069}", "U+2066"),
            ("ab\u{3164}c", "U+3164"), // Hangul filler (a letter that renders blank)
            ("ab\u{FE0F}c", "U+FE0F"), // variation selector
            ("a\u{00A0}b", "U+00A0"),  // no-break space
            ("a\u{2800}b", "U+2800"),
            ("a\tb", "U+0009"),
            ("a\u{E000}b", "U+E000"),
        ] {
            match check_plain("intent.destination", bad, 64) {
                Err(TextError::Hidden { code: c, field, .. }) => {
                    assert_eq!((c.as_str(), field.as_str()), (code, "intent.destination"))
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert!(matches!(check_plain("f", " a", 64), Err(TextError::Padded { .. })));
        assert!(matches!(check_plain("f", "", 64), Err(TextError::Empty { .. })));
        assert!(matches!(check_plain("f", "abc", 2), Err(TextError::TooLong { .. })));
    }

    #[test]
    fn free_text_takes_any_printable_text() {
        assert_eq!(check_free("reason", "Paid per ticket #12.\nOK — ✅ 👩\u{200D}💻 «ok»", 2000), Ok(()));
        assert_eq!(check_free("reason", "", 2000), Ok(()));
        for bad in ["a\u{202E}b", "a\u{200B}b", "a\u{0007}b", "a\u{2028}b"] {
            assert!(check_free("reason", bad, 2000).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn hidden_characters_are_spelled_out() {
        assert_eq!(visible("0xabc\u{202E}def"), "0xabc<U+202E>def");
        assert_eq!(visible("plain text"), "plain text");
    }

    #[test]
    fn nested_values_name_the_path() {
        let v = serde_json::json!({"destination": {"address": "0xabc", "memo": "x\u{200B}"}});
        let e = check_plain_json("intent", &v, 256).unwrap_err();
        assert!(e.to_string().starts_with("intent.destination.memo holds U+200B"), "{e}");
    }

    #[test]
    fn lookalike_principals_are_one() {
        for (a, b) in [
            ("rita", "RITA"),
            ("rita", "r\u{0456}ta"), // Cyrillic і
            ("rita", "rit\u{0430}"), // Cyrillic а
            ("rita", "ｒｉｔａ"),    // fullwidth
            ("ops.alice", "ops.aIice"),
        ] {
            assert!(same_principal(a, b), "{a} / {b}");
        }
        for (a, b) in [("rita", "rito"), ("alice", "bob"), ("ops-1", "ops-2")] {
            assert!(!same_principal(a, b), "{a} / {b}");
        }
    }
}
