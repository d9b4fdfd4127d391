//! Lenient decoding of request bodies: what terminals put in tool output that strict JSON
//! parsers refuse.
//!
//! A lone UTF-16 surrogate escape (`\udce9`: Python's `surrogateescape` for an undecodable
//! byte; `\ud83d` at the end of a string: an emoji cut in half by a length limit) is not a
//! character, and serde_json refuses the whole body. [`replace_lone_surrogates`] rewrites each
//! `\uD800`–`\uDFFF` escape that is not half of a valid pair (a high `\uD800`–`\uDBFF`
//! directly followed by a low `\uDC00`–`\uDFFF`) as `\uFFFD` (U+FFFD REPLACEMENT CHARACTER)
//! before the body is parsed. The replacement has the same length as the escape it
//! replaces, so nothing else in the body moves; a body without a lone surrogate (almost all)
//! is returned as it is, scanned once and not copied. A chat request's search skips the
//! messages a running session's previous body had ([`has_lone_surrogates_outside`]): their
//! text is that body's after its replacement, so only a turn's new bytes are searched. The rewritten body is the one the
//! trace stores, so the recorded request is the one the proxy answered. A UTF-8 byte-order
//! mark before the body (some Windows tools write one) is dropped the same way.
//!
//! Raw control characters inside strings are invalid JSON and stay refused; their escapes
//! (`\u0000`, `\u001b`) are valid and accepted as they always were.

use std::borrow::Cow;

/// The hex value of four ASCII hex digits, `None` if any is not one.
fn hex4(digits: &[u8]) -> Option<u16> {
    let digits = digits.get(..4)?;
    let mut value = 0u16;
    for &d in digits {
        let nibble = (d as char).to_digit(16)?;
        value = value << 4 | nibble as u16;
    }
    Some(value)
}

/// Offsets of the `\` of every lone surrogate escape in `body`.
///
/// Backslashes only occur inside JSON strings, where each starts a two-character escape
/// (`\\`, `\"`, `\n`, …) or a six-character `\uXXXX`. Only `\u` is searched for (SIMD
/// substring search: a body's many `\n` escapes cost nothing); a hit is an escape when the
/// run of backslashes ending at it is odd, so the text `\\udce9` (an escaped backslash, then
/// `udce9`) is not taken for one.
fn lone_surrogates(body: &[u8]) -> Vec<usize> {
    lone_surrogates_in(body, 0..body.len())
}

/// [`lone_surrogates`] within `range` of `body`, which starts and ends outside strings (at
/// bytes between JSON values), so no escape crosses its ends.
fn lone_surrogates_in(body: &[u8], range: std::ops::Range<usize>) -> Vec<usize> {
    let mut found = Vec::new();
    // Escapes before this offset were read already (the low half of a pair).
    let mut next = 0;
    let start = range.start;
    for at in memchr::memmem::find_iter(&body[range], b"\\u").map(|at| start + at) {
        if at < next {
            continue;
        }
        let run = body[..=at]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if run % 2 == 0 {
            continue;
        }
        let Some(unit) = hex4(&body[at + 2..]) else {
            continue;
        };
        next = at + 6;
        match unit {
            0xD800..=0xDBFF => {
                let low = (body.get(at + 6) == Some(&b'\\') && body.get(at + 7) == Some(&b'u'))
                    .then(|| hex4(&body[at + 8..]))
                    .flatten();
                if matches!(low, Some(0xDC00..=0xDFFF)) {
                    next = at + 12;
                } else {
                    found.push(at);
                }
            }
            0xDC00..=0xDFFF => found.push(at),
            _ => {}
        }
    }
    found
}

/// `body` with every lone surrogate escape replaced by `\uFFFD` (see the module doc);
/// borrowed when there is none.
pub fn replace_lone_surrogates(body: &[u8]) -> Cow<'_, [u8]> {
    // A UTF-8 byte-order mark before the JSON (Windows tools, PowerShell) is no part of it.
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    let found = lone_surrogates(body);
    if found.is_empty() {
        return Cow::Borrowed(body);
    }
    let mut fixed = body.to_vec();
    for at in found {
        fixed[at + 2..at + 6].copy_from_slice(b"FFFD");
    }
    Cow::Owned(fixed)
}

/// Whether `body` has a lone surrogate escape outside `skip`, a range that starts and ends
/// outside strings (between JSON values). The request decoder skips the messages it found
/// unchanged since a previous body (`super::split::BodySplit::of_extending`): text that body
/// had after its own lone surrogates were replaced.
pub fn has_lone_surrogates_outside(body: &[u8], skip: std::ops::Range<usize>) -> bool {
    !lone_surrogates_in(body, 0..skip.start).is_empty()
        || !lone_surrogates_in(body, skip.end..body.len()).is_empty()
}

/// `body` without a UTF-8 byte-order mark before it (some Windows tools write one); the same
/// `Bytes`, not copied.
pub fn without_byte_order_mark(body: bytes::Bytes) -> bytes::Bytes {
    match body.strip_prefix(b"\xEF\xBB\xBF") {
        Some(rest) => body.slice(body.len() - rest.len()..),
        None => body,
    }
}

/// [`replace_lone_surrogates`] for a shared body: the same `Bytes` (not copied) when there is
/// nothing to replace.
pub fn replace_lone_surrogates_bytes(body: bytes::Bytes) -> bytes::Bytes {
    match replace_lone_surrogates(&body) {
        Cow::Borrowed(rest) if rest.len() == body.len() => body,
        Cow::Borrowed(rest) => body.slice(body.len() - rest.len()..),
        Cow::Owned(fixed) => bytes::Bytes::from(fixed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scan before the substring search (byte by byte, stepping over whole escapes):
    /// the oracle of the property test.
    ///
    /// Backslashes only occur inside JSON strings, where each starts a two-character escape
    /// (`\\`, `\"`, `\n`, …) or a six-character `\uXXXX`; the scan steps over whole escapes, so
    /// the text `\\udce9` (an escaped backslash, then `udce9`) is not taken for an escape.
    fn lone_surrogates_bytewise(body: &[u8]) -> Vec<usize> {
        let mut found = Vec::new();
        let mut i = 0;
        while let Some(at) = body
            .get(i..)
            .and_then(|rest| rest.iter().position(|&b| b == b'\\'))
        {
            let at = i + at;
            if body.get(at + 1) != Some(&b'u') {
                i = at + 2;
                continue;
            }
            let Some(unit) = hex4(&body[at + 2..]) else {
                i = at + 2;
                continue;
            };
            i = at + 6;
            match unit {
                0xD800..=0xDBFF => {
                    let low = (body.get(at + 6) == Some(&b'\\') && body.get(at + 7) == Some(&b'u'))
                        .then(|| hex4(&body[at + 8..]))
                        .flatten();
                    if matches!(low, Some(0xDC00..=0xDFFF)) {
                        i = at + 12;
                    } else {
                        found.push(at);
                    }
                }
                0xDC00..=0xDFFF => found.push(at),
                _ => {}
            }
        }
        found
    }

    proptest::proptest! {
        #[test]
        fn the_substring_search_finds_what_the_bytewise_scan_found(
            text in "[\\\\u\"dDcCeE809fFx ]{0,40}"
        ) {
            proptest::prop_assert_eq!(lone_surrogates(text.as_bytes()), lone_surrogates_bytewise(text.as_bytes()));
        }
    }

    #[test]
    fn a_lone_surrogate_is_found_outside_the_skipped_range_only() {
        let body = br#"["\udce9",{"a":"\ud83d"},"ok"]"#;
        let second = body.iter().position(|&b| b == b'{').unwrap();
        let end = second + br#"{"a":"\ud83d"}"#.len();
        assert!(has_lone_surrogates_outside(body, 0..0));
        assert!(has_lone_surrogates_outside(body, second..end));
        assert!(has_lone_surrogates_outside(body, 1..10));
        assert!(!has_lone_surrogates_outside(body, 1..end));
        assert_eq!(lone_surrogates_in(body, second..end), vec![second + 6]);
    }

    #[test]
    fn a_byte_order_mark_is_dropped() {
        let marked = bytes::Bytes::from_static(b"\xEF\xBB\xBF{}");
        assert_eq!(&without_byte_order_mark(marked)[..], b"{}");
        assert_eq!(fix("\u{feff}{\"a\": 1}"), "{\"a\": 1}");
        let body = bytes::Bytes::from_static(b"\xEF\xBB\xBF{}");
        assert_eq!(&replace_lone_surrogates_bytes(body)[..], b"{}");
    }

    fn fix(text: &str) -> String {
        String::from_utf8(replace_lone_surrogates(text.as_bytes()).into_owned()).unwrap()
    }

    #[test]
    fn lone_surrogates_become_replacement_characters() {
        assert_eq!(fix(r#""a\udce9b""#), r#""a\uFFFDb""#);
        assert_eq!(fix(r#""cut \ud83d""#), r#""cut \uFFFD""#);
        assert_eq!(fix(r#""\ud83d\ud83d\ude00""#), r#""\uFFFD\ud83d\ude00""#);
        assert_eq!(fix(r#""\ude00\ud83d""#), r#""\uFFFD\uFFFD""#);
        assert_eq!(fix(r#""\uD83Dx""#), r#""\uFFFDx""#);
        assert_eq!(fix(r#""\ud83d\n""#), r#""\uFFFD\n""#);
        let v: serde_json::Value = serde_json::from_str(&fix(r#""a\udce9\ud83d""#)).unwrap();
        assert_eq!(v, "a\u{fffd}\u{fffd}");
    }

    #[test]
    fn valid_text_is_borrowed_unchanged() {
        for text in [
            r#""\ud83d\ude00""#,
            r#""\\udce9""#,
            r#""\\\\ud83d""#,
            r#""\u0000\u001b[31m\u00e9 \n\t\"""#,
            r#""\u12""#,
            "\"trailing \\",
            "",
        ] {
            assert!(
                matches!(replace_lone_surrogates(text.as_bytes()), Cow::Borrowed(_)),
                "{text}"
            );
        }
        // An escaped backslash before a real lone escape.
        assert_eq!(fix(r#""\\\udce9""#), r#""\\\uFFFD""#);
    }
}
