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

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(utc(1_709_251_200_000), "2024-03-01 00:00:00");
        assert_eq!(utc(1_764_503_237_123), "2025-11-30 11:47:17");
    }
}
