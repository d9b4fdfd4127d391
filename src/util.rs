//! Small helpers with no home in a pipeline stage (hashing, wall-clock time, a Markdown fence
//! marker) shared by modules that must not depend on each other. Imports nothing from the
//! crate, so any module may use it.

use sha2::{Digest, Sha256};

/// `text` percent-encoded as one URL path segment (all but ASCII letters, digits and `-_.~`,
/// RFC 3986's unreserved characters): session ids in the viewer's and the report's links.
pub fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Unix time in seconds.
pub fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Unix time, milliseconds.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Unix milliseconds as `YYYY-MM-DD HH:MM:SS` (UTC), without a date-time dependency (the
/// civil-from-days conversion of the proleptic Gregorian calendar).
pub fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// A Markdown code fence at the start of a (blank-stripped) line: its character, its length
/// (at least 3) and the rest of the line (CommonMark 0.31, "Fenced code blocks": three or more
/// backticks or tildes).
pub fn fence_marker(line: &str) -> Option<(char, usize, &str)> {
    let ch = line.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let len = line.len() - line.trim_start_matches(ch).len();
    (len >= 3).then(|| (ch, len, &line[len..]))
}

/// Appends `text` to `out` as a JSON string literal (quotes included), byte for byte what
/// `serde_json` writes: `"` and `\` backslash-escaped, `\b \t \n \f \r` by their short
/// escapes, other control characters as `\u00XX` (lower-case hex), everything else as is
/// (RFC 8259 section 7).
///
/// Eight bytes are tested at a time for a byte to escape (a prompt has a line break every
/// few dozen bytes, and runs between them are copied whole): about three times the speed of
/// `serde_json`'s byte-at-a-time loop on a rendered prompt, which the backend body and the
/// trace carry whole.
pub fn push_json_string(out: &mut Vec<u8>, text: &str) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // High bit of each byte of `word` that is zero.
    let zero_bytes = |word: u64| word.wrapping_sub(ONES) & !word & HIGHS;
    // High bits of the bytes of `word` that are `"`, `\` or below 0x20. A borrow can only set
    // a false bit above a true one, so the lowest bit set is exact: the first byte to escape.
    let to_escape = |word: u64| {
        zero_bytes(word ^ (ONES * u64::from(b'"')))
            | zero_bytes(word ^ (ONES * u64::from(b'\\')))
            | (word.wrapping_sub(ONES * 0x20) & !word & HIGHS)
    };
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + bytes.len() / 8 + 2);
    out.push(b'"');
    // Start of the bytes not yet copied.
    let mut copied = 0;
    let mut i = 0;
    loop {
        // The next byte to escape, from `i` on.
        let at = match bytes.get(i..i + 8) {
            Some(chunk) => {
                let mut word = [0u8; 8];
                word.copy_from_slice(chunk);
                let mask = to_escape(u64::from_le_bytes(word));
                if mask == 0 {
                    i += 8;
                    continue;
                }
                i + (mask.trailing_zeros() / 8) as usize
            }
            None => match bytes[i..]
                .iter()
                .position(|&b| b < 0x20 || b == b'"' || b == b'\\')
            {
                Some(at) => i + at,
                None => break,
            },
        };
        let b = bytes[at];
        out.extend_from_slice(&bytes[copied..at]);
        copied = at + 1;
        i = at + 1;
        let short = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            b'\n' => b'n',
            b'\t' => b't',
            b'\r' => b'r',
            0x08 => b'b',
            0x0C => b'f',
            _ => b'u',
        };
        out.push(b'\\');
        out.push(short);
        if short == b'u' {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(&[
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xF)],
            ]);
        }
    }
    out.extend_from_slice(&bytes[copied..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::{push_json_string, utc};

    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(utc(1_709_251_200_000), "2024-03-01 00:00:00");
        assert_eq!(utc(1_764_503_237_123), "2025-11-30 11:47:17");
    }

    proptest::proptest! {
        #[test]
        fn push_json_string_writes_what_serde_json_writes(text in "(\\PC|[\\x00-\\x1f\"\\\\\u{7f}\u{80}-\u{ff}\u{2028}])*") {
            let mut out = Vec::new();
            push_json_string(&mut out, &text);
            proptest::prop_assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(&text).unwrap());
        }
    }

    #[test]
    fn push_json_string_escapes_control_characters_quotes_and_backslashes() {
        let mut out = Vec::new();
        push_json_string(&mut out, "a\"b\\c\n\u{1}\u{1f}\té\u{8}\u{c}\r0123456789");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#""a\"b\\c\n\u0001\u001f\té\b\f\r0123456789""#
        );
    }
}
