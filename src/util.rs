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

/// A seed for XXH3 digests that decide what the process reuses (the render cache's steps,
/// the split cache's body prefixes): random per process, so that no client can craft two
/// inputs of one digest offline (XXH3 is not collision-resistant against chosen inputs) and be
/// given what another's input made. Such digests are never stored.
pub fn digest_seed() -> u64 {
    use std::hash::BuildHasher;
    static SEED: std::sync::LazyLock<u64> = std::sync::LazyLock::new(|| {
        std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64)
    });
    *SEED
}

/// XXH3-128 of `bytes` under a secret random per process: the digest by which the process
/// finds what it decoded or rendered before (messages, `tools` arrays, what a step's
/// observation is keyed by), so that no client can craft two texts of one digest offline, nor
/// texts that fall in one bucket of a table keyed by it ([`DigestHasher`]). A secret of the
/// default size rather than a seed: XXH3 derives a secret from a seed on every call.
pub fn digest(bytes: &[u8]) -> u128 {
    static SECRET: std::sync::LazyLock<[u8; 192]> = std::sync::LazyLock::new(|| {
        use std::hash::BuildHasher;
        let state = std::collections::hash_map::RandomState::new();
        let mut secret = [0u8; 192];
        for (i, chunk) in secret.chunks_mut(8).enumerate() {
            chunk.copy_from_slice(&state.hash_one(i).to_le_bytes());
        }
        secret
    });
    xxhash_rust::xxh3::xxh3_128_with_secret(bytes, &*SECRET)
}

/// [`digest`] of `text`: what the render cache keys a step's observation by ([`DigestMemo`]
/// keeps it with a decoded message).
pub fn text_digest(text: &str) -> u128 {
    digest(text.as_bytes())
}

/// A [`std::hash::Hasher`] for keys that are [`digest`]s: their high 64 bits, which are
/// uniform and unknown to clients, instead of SipHash over them again (the message cache
/// looks up every message of every request; it admits messages by their digests' low bits,
/// which a table must not bucket by). Other keys are folded in with FNV-1a.
#[derive(Debug, Default, Clone, Copy)]
pub struct DigestHasher(u64);

impl std::hash::Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u128(&mut self, digest: u128) {
        // Truncation intended: the high half of a uniform digest.
        #[allow(clippy::cast_possible_truncation)]
        {
            self.0 ^= (digest >> 64) as u64;
        }
    }
}

/// The [`std::hash::BuildHasher`] of tables keyed by [`digest`]s.
pub type DigestKeyed = std::hash::BuildHasherDefault<DigestHasher>;

/// A [`text_digest`] worked out once and kept with the immutable text it is of (a decoded
/// message's `content`, which the message cache hands to every later request of its
/// session). A clone starts empty, as [`Memo`]'s does.
#[derive(Debug, Default)]
pub struct DigestMemo(std::sync::OnceLock<u128>);

impl Clone for DigestMemo {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl DigestMemo {
    /// The kept digest, or `text`'s, kept. `text` must be the text the memo is kept with.
    pub fn of(&self, text: &str) -> u128 {
        *self.0.get_or_init(|| text_digest(text))
    }
}

/// Appends `text` to `out` as a JSON string literal (quotes included), byte for byte what
/// `serde_json` writes: `"` and `\` backslash-escaped, `\b \t \n \f \r` by their short
/// escapes, other control characters as `\u00XX` (lower-case hex), everything else as is
/// (RFC 8259 section 7). Fast on long texts (see [`each_json_escape`]).
pub fn push_json_string(out: &mut Vec<u8>, text: &str) {
    out.reserve(text.len() + text.len() / 8 + 2);
    out.push(b'"');
    push_json_escaped(out, text.as_bytes());
    out.push(b'"');
}

/// Appends `bytes` as the inside of a JSON string literal (no quotes), escaped as
/// [`push_json_string`] escapes. Only ASCII bytes are ever escaped, so `bytes` may be any
/// slice of a UTF-8 text, even one cut inside a character: the pieces of a text escaped one
/// by one, in order, are the text escaped whole (the backend body streams its prompt so).
pub fn push_json_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    each_json_escape(bytes, |run, escaped| {
        out.extend_from_slice(run);
        let Some(b) = escaped else {
            return;
        };
        match short_escape(b) {
            Some(short) => out.extend_from_slice(&[b'\\', short]),
            None => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xF)],
            ]),
        }
    });
}

/// The text [`push_json_escaped`] made `escaped` from: its escapes (`\"`, `\\`, the short
/// ones, `\u00XX`) read back, anything else kept as it is (any JSON escape of a character below
/// U+0100 reads right; a lone backslash or a cut escape is kept). Never fails: bytes that are
/// not UTF-8 become U+FFFD.
pub fn json_unescaped(escaped: &[u8]) -> String {
    let mut out = Vec::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(at) = memchr::memchr(b'\\', rest) {
        out.extend_from_slice(&rest[..at]);
        let hex = |b: u8| char::from(b).to_digit(16);
        let (byte, len) = match rest.get(at + 1) {
            Some(b'b') => (Some(0x08), 2),
            Some(b't') => (Some(b'\t'), 2),
            Some(b'n') => (Some(b'\n'), 2),
            Some(b'f') => (Some(0x0C), 2),
            Some(b'r') => (Some(b'\r'), 2),
            Some(&b @ (b'"' | b'\\' | b'/')) => (Some(b), 2),
            Some(b'u') => match rest.get(at + 2..at + 6) {
                Some([b'0', b'0', hi, lo]) => match (hex(*hi), hex(*lo)) {
                    (Some(hi), Some(lo)) => (u8::try_from(hi * 16 + lo).ok(), 6),
                    _ => (None, 1),
                },
                _ => (None, 1),
            },
            _ => (None, 1),
        };
        match byte {
            // Below 0x80 a byte is its character; U+0080..U+00FF take two bytes in UTF-8.
            Some(b) if b < 0x80 => out.push(b),
            Some(b) => out.extend_from_slice(char::from(b).encode_utf8(&mut [0; 2]).as_bytes()),
            None => out.push(b'\\'),
        }
        rest = &rest[at + len..];
    }
    out.extend_from_slice(rest);
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// A text JSON-escaped ([`push_json_escaped`], no quotes) as shared frames, so that a text
/// which extends another escapes only its new bytes: the frames of the older body are shared,
/// not copied (`bytes::Bytes`). The text is a *body* that grows and a short *end* (a prompt's
/// cue) that each extension writes again after the new bytes. Every frame but the end and the
/// last one of the body holds at least [`JsonFrames::MIN_FRAME`] bytes (an extension copies a
/// shorter last frame into its first new one), so a long text is a few dozen frames, not one
/// per extension. The render cache keeps them with its prompts (issue 23: escaping the prompt
/// was a third of a next turn's instructions at 100 turns); the backend body sends them as they
/// are, and a trace record that stores its prompt whole writes them as they are
/// (`trace::PromptText::Escaped`; a prompt the cache does not hold is escaped once for both).
#[derive(Debug, Clone, Default)]
pub struct JsonFrames {
    /// The body's frames, then the end's (one frame, possibly empty).
    frames: Vec<bytes::Bytes>,
    /// Escaped bytes of all frames.
    len: usize,
}

impl JsonFrames {
    /// Escaped bytes a frame of the body holds at least (except the last one).
    pub const MIN_FRAME: usize = 32 * 1024;

    /// `body` then `end`, escaped.
    pub fn of(body: &[u8], end: &[u8]) -> Self {
        Self::default().with(Vec::new(), body, end)
    }

    /// These frames with their end replaced by `new` (escaped) and `end`: the escaped form of
    /// this text's body followed by `new` and `end`.
    pub fn extended(&self, new: &[u8], end: &[u8]) -> Self {
        let body = &self.frames[..self.frames.len().saturating_sub(1)];
        let mut frames = Vec::with_capacity(body.len() + 2);
        frames.extend_from_slice(body);
        // A short last frame is copied into the first new one.
        let carry = match frames.last() {
            Some(last) if last.len() < Self::MIN_FRAME => {
                let last = frames.pop().unwrap_or_default();
                let mut carry = Vec::with_capacity(last.len() + new.len() + new.len() / 8);
                carry.extend_from_slice(&last);
                carry
            }
            _ => Vec::new(),
        };
        let len = frames.iter().map(bytes::Bytes::len).sum();
        Self { frames, len }.with(carry, new, end)
    }

    /// Appends `new` escaped to `carry` (the start of the next body frame), then the end frame.
    fn with(mut self, mut carry: Vec<u8>, new: &[u8], end: &[u8]) -> Self {
        // Escaping takes at most six bytes for one: cut the input so that a frame ends near
        // MIN_FRAME without a pass to count.
        for chunk in new.chunks(Self::MIN_FRAME) {
            if carry.is_empty() {
                carry.reserve(chunk.len() + chunk.len() / 8);
            }
            push_json_escaped(&mut carry, chunk);
            if carry.len() >= Self::MIN_FRAME {
                self.push(std::mem::take(&mut carry));
            }
        }
        if !carry.is_empty() {
            self.push(carry);
        }
        let mut escaped_end = Vec::with_capacity(end.len() + 8);
        push_json_escaped(&mut escaped_end, end);
        self.push(escaped_end);
        self
    }

    fn push(&mut self, mut frame: Vec<u8>) {
        // Held for as long as the text is: little spare capacity (escaping grew a typical
        // frame by less than the eighth reserved for it, so this rarely copies).
        if frame.capacity() - frame.len() > frame.len() / 8 {
            frame.shrink_to_fit();
        }
        self.len += frame.len();
        self.frames.push(frame.into());
    }

    /// Escaped bytes in all: [`json_escaped_len`] of the text.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the text is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The frames, in order; together the escaped text.
    pub fn frames(&self) -> &[bytes::Bytes] {
        &self.frames
    }
}

/// Length in bytes of what [`push_json_escaped`] appends for `bytes`.
pub fn json_escaped_len(bytes: &[u8]) -> usize {
    let mut len = bytes.len();
    each_json_escape(bytes, |_, escaped| {
        if let Some(b) = escaped {
            // Two bytes (`\n`) or six (`\u001b`) in place of one.
            len += if short_escape(b).is_some() { 1 } else { 5 };
        }
    });
    len
}

/// Index just past the closing quote of the JSON string literal whose opening quote is at
/// `bytes[open]`; `None` when it does not close. The closing quote is found by a SIMD search
/// (a quote after an odd run of backslashes is escaped), so scanners skip a string's content
/// at memory speed instead of a step per byte. Escapes are not checked.
pub fn json_string_end(bytes: &[u8], open: usize) -> Option<usize> {
    let mut from = open + 1;
    loop {
        let quote = from + memchr::memchr(b'"', bytes.get(from..)?)?;
        let backslashes = bytes[open + 1..quote]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if backslashes % 2 == 0 {
            return Some(quote + 1);
        }
        from = quote + 1;
    }
}

/// Fixed texts searched for in every request (side-call and subagent markers): one
/// substring finder each, built once. `str::contains` sets up a two-way searcher on every
/// call; for a dozen markers over a system prompt of a few KiB that was a tenth of a short
/// request's instructions (callgrind). Matches are exactly `str::contains`'s.
#[derive(Debug)]
pub struct Markers(Vec<memchr::memmem::Finder<'static>>);

impl Markers {
    /// Finders for `markers`, in order.
    pub fn new<'a>(markers: impl IntoIterator<Item = &'a &'static str>) -> Self {
        Self(
            markers
                .into_iter()
                .map(|m| memchr::memmem::Finder::new(m.as_bytes()))
                .collect(),
        )
    }

    /// Whether marker `i` occurs in `text`.
    pub fn in_text(&self, i: usize, text: &str) -> bool {
        self.0[i].find(text.as_bytes()).is_some()
    }

    /// The index of the first marker, in list order, that occurs in `text`.
    pub fn first_in(&self, text: &str) -> Option<usize> {
        (0..self.0.len()).find(|&i| self.in_text(i, text))
    }
}

/// The second byte of `b`'s two-byte escape, `None` for `\u00XX`.
fn short_escape(b: u8) -> Option<u8> {
    match b {
        b'"' => Some(b'"'),
        b'\\' => Some(b'\\'),
        b'\n' => Some(b'n'),
        b'\t' => Some(b't'),
        b'\r' => Some(b'r'),
        0x08 => Some(b'b'),
        0x0C => Some(b'f'),
        _ => None,
    }
}

/// Walks `bytes` in order: `f(run, Some(b))` for each byte `b` to escape (`"`, `\` or below
/// 0x20) with the run of plain bytes before it, then `f(rest, None)` once.
///
/// Eight bytes are tested at a time for a byte to escape (a prompt has a line break every
/// few dozen bytes, and runs between them are copied whole): about three times the speed of
/// `serde_json`'s byte-at-a-time loop on a rendered prompt, which the backend body and the
/// trace carry whole.
fn each_json_escape(bytes: &[u8], mut f: impl FnMut(&[u8], Option<u8>)) {
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
    // Start of the bytes not yet passed on.
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
        f(&bytes[copied..at], Some(bytes[at]));
        copied = at + 1;
        i = at + 1;
    }
    f(&bytes[copied..], None);
}

/// A value worked out once from the immutable thing that holds the memo and kept with it: a
/// later stage's reading of a decoded message, which the message cache hands to every later
/// request of its session. Type-erased, so that the holder's module need not know the
/// reader's types (a stage owns its types; the holder sits below it). The reader keys what
/// it keeps (`fits`): a reading made under other inputs is not taken for this one.
///
/// A clone starts empty: a cloned holder may be changed, and the memo would then describe
/// the original.
#[derive(Debug, Default)]
pub struct Memo(std::sync::OnceLock<std::sync::Arc<dyn std::any::Any + Send + Sync>>);

impl Clone for Memo {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl Memo {
    /// The kept value when it is a `T` that `fits`; else `make()`, kept when the memo was
    /// empty (the first reading stays: a holder read two ways makes the second each time).
    pub fn get_or<T: std::any::Any + Send + Sync>(
        &self,
        fits: impl Fn(&T) -> bool,
        make: impl FnOnce() -> T,
    ) -> std::sync::Arc<T> {
        if let Some(kept) = self.0.get() {
            if let Ok(kept) = std::sync::Arc::clone(kept).downcast::<T>() {
                if fits(&kept) {
                    return kept;
                }
            }
            return std::sync::Arc::new(make());
        }
        let made = std::sync::Arc::new(make());
        // A racing reader may have kept its own, equal, value first: either is right.
        let _ = self.0.set(made.clone());
        made
    }
}

#[cfg(test)]
mod tests {
    use super::{json_escaped_len, json_unescaped, push_json_escaped, push_json_string, utc, Memo};

    #[test]
    fn digests_are_keyed_per_process_and_tables_keyed_by_them_find_them() {
        use std::collections::HashMap;
        let a = super::digest(b"the same text");
        assert_eq!(a, super::digest(b"the same text"));
        // Keyed: not the unkeyed XXH3 anyone can compute offline, short inputs included.
        for text in [&b"x"[..], &[b'y'; 300][..]] {
            assert_ne!(super::digest(text), xxhash_rust::xxh3::xxh3_128(text));
        }
        let mut table: HashMap<u128, usize, super::DigestKeyed> = HashMap::default();
        for i in 0..1000usize {
            table.insert(super::digest(&i.to_le_bytes()), i);
        }
        assert!((0..1000usize).all(|i| table[&super::digest(&i.to_le_bytes())] == i));
    }

    #[test]
    fn a_memo_keeps_the_first_fitting_value_and_a_clone_starts_empty() {
        let memo = Memo::default();
        let made = std::cell::Cell::new(0);
        let make = |v: u32| {
            made.set(made.get() + 1);
            v
        };
        assert_eq!(*memo.get_or(|_: &u32| true, || make(1)), 1);
        assert_eq!(*memo.get_or(|_: &u32| true, || make(2)), 1, "kept");
        assert_eq!(made.get(), 1);
        // A value that does not fit, or of another type, is made and not kept.
        assert_eq!(*memo.get_or(|v: &u32| *v == 2, || make(2)), 2);
        assert_eq!(*memo.get_or(|_: &String| true, || "s".to_string()), "s");
        assert_eq!(*memo.get_or(|_: &u32| true, || make(3)), 1);
        assert_eq!(made.get(), 2);
        assert_eq!(*memo.clone().get_or(|_: &u32| true, || make(4)), 4);
    }

    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(utc(1_709_251_200_000), "2024-03-01 00:00:00");
        assert_eq!(utc(1_764_503_237_123), "2025-11-30 11:47:17");
    }

    proptest::proptest! {
        /// A text escaped piece by piece, cut anywhere (inside a character too), is the text
        /// escaped whole; the length is known before.
        #[test]
        fn pieces_escape_as_the_whole(
            text in "(\\PC|[\\x00-\\x1f\"\\\\é])*",
            cuts in proptest::collection::vec(0usize..64, 0..6),
        ) {
            let bytes = text.as_bytes();
            let mut whole = Vec::new();
            push_json_escaped(&mut whole, bytes);
            proptest::prop_assert_eq!(json_escaped_len(bytes), whole.len());
            let mut pieces = Vec::new();
            let mut from = 0;
            for cut in cuts {
                let to = (from + cut).min(bytes.len());
                push_json_escaped(&mut pieces, &bytes[from..to]);
                from = to;
            }
            push_json_escaped(&mut pieces, &bytes[from..]);
            proptest::prop_assert_eq!(pieces, whole);
        }

        #[test]
        fn push_json_string_writes_what_serde_json_writes(text in "(\\PC|[\\x00-\\x1f\"\\\\\u{7f}\u{80}-\u{ff}\u{2028}])*") {
            let mut out = Vec::new();
            push_json_string(&mut out, &text);
            proptest::prop_assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(&text).unwrap());
        }

        /// What `push_json_escaped` writes reads back as the text; so does any JSON escape of
        /// a character below U+0100 (what serde_json reads).
        #[test]
        fn json_unescaped_reads_back_the_escaped_text(
            text in "(\\PC|[\\x00-\\x1f\"\\\\\u{7f}\u{80}-\u{ff}\u{2028}])*",
        ) {
            let mut escaped = Vec::new();
            push_json_escaped(&mut escaped, text.as_bytes());
            proptest::prop_assert_eq!(json_unescaped(&escaped), text.clone());
            let other: String = text
                .chars()
                .map(|c| match u32::from(c) {
                    n @ 0..0x100 => format!("\\u{n:04X}"),
                    _ => c.to_string(),
                })
                .collect();
            proptest::prop_assert_eq!(json_unescaped(other.as_bytes()), text);
        }
    }

    /// A lone backslash, an unknown or cut escape and one above U+00FF are kept as they are.
    #[test]
    fn json_unescaped_keeps_what_it_does_not_read() {
        assert_eq!(
            json_unescaped(br#"a\/b\q\u12\u0100\u00e9\"#),
            "a/b\\q\\u12\\u0100\u{e9}\\"
        );
    }

    proptest::proptest! {
        /// Frames extended piece by piece are the whole text escaped, each with its end, and
        /// every body frame but the last holds at least `MIN_FRAME` bytes.
        #[test]
        fn json_frames_are_the_text_escaped(
            text in "(\\PC|[\\x00-\\x1f\"\\\\é])*",
            cuts in proptest::collection::vec(0usize..40_000, 0..6),
            ends in proptest::collection::vec("[\\n#\"a]{0,4}", 7),
        ) {
            let bytes = text.repeat(1 + 50_000 / (text.len() + 1));
            let bytes = bytes.as_bytes();
            let mut to = cuts.first().copied().unwrap_or(0).min(bytes.len());
            let mut frames = super::JsonFrames::of(&bytes[..to], ends[0].as_bytes());
            let check = |frames: &super::JsonFrames, to: usize, end: &str| {
                let mut whole = Vec::new();
                push_json_escaped(&mut whole, &bytes[..to]);
                push_json_escaped(&mut whole, end.as_bytes());
                proptest::prop_assert_eq!(frames.frames().concat(), whole.clone());
                proptest::prop_assert_eq!(frames.len(), whole.len());
                let body = &frames.frames()[..frames.frames().len() - 1];
                let short = body.iter().rev().skip(1).filter(|f| f.len() < super::JsonFrames::MIN_FRAME).count();
                proptest::prop_assert_eq!(short, 0);
                Ok(())
            };
            check(&frames, to, &ends[0])?;
            for (i, cut) in cuts.iter().enumerate().skip(1) {
                let from = to;
                to = (to + cut).min(bytes.len());
                frames = frames.extended(&bytes[from..to], ends[i].as_bytes());
                check(&frames, to, &ends[i])?;
            }
            let rest = frames.extended(&bytes[to..], ends[6].as_bytes());
            check(&rest, bytes.len(), &ends[6])?;
        }
    }

    proptest::proptest! {
        /// The first marker found is the first, in list order, that `str::contains` finds.
        #[test]
        fn markers_find_what_contains_finds(text in "[abé ]{0,40}") {
            const LIST: [&str; 5] = ["ab", "ba", "aab", "é a", "bbbb"];
            let markers = super::Markers::new(&LIST);
            proptest::prop_assert_eq!(
                markers.first_in(&text),
                LIST.iter().position(|m| text.contains(m))
            );
            for (i, m) in LIST.iter().enumerate() {
                proptest::prop_assert_eq!(markers.in_text(i, &text), text.contains(m));
            }
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
