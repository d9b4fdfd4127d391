//! Deltas that keep a session's log linear in its length (docs/trace-format.md).
//!
//! **Prompt.** `prompt(n) = prompt(n-1)[..prefix_bytes] + delta`, where `prompt(n-1)` is the
//! full prompt of the previous `step` record of the file (side calls are stored whole and are
//! not part of the chain). `prefix_bytes` is 0 when the prompt is stored whole: the first
//! step of a file, or a prompt that does not extend the previous one (a new process extends
//! the file's records: [`rebase`]).
//!
//! **Request.** The body the client sent is rebuilt as `rest` (every top-level field except
//! `messages`, stored when it changes) plus `messages`: the previous record's messages
//! truncated to `messages_from`, then the new `messages` of this record. A new message whose
//! string `content` (≥ [`MIN_REF_BYTES`] bytes) appears verbatim in this record's prompt,
//! searched for from where the message before it was found (in the part the prompt delta
//! stores, or where the last kept message was found when the client sent later ones again),
//! has its content replaced by `null` and a `content_refs` entry `{message, start, len}`
//! (index into the new messages; byte range of the full prompt): observations are stored once,
//! not twice. The `text` of each part of a list content likewise, its entry naming the `part`
//! (schema version 3). A content of which only a
//! run of at least [`MIN_REF_BYTES`] bytes appears there (the prompt keeps a terminal's
//! output but not its last prompt line, a tool result without its wrapper) gets an entry
//! with the bytes around that run as `before` and `after` ([`ContentRef::text`]; such a
//! record is schema version 2, [`RequestDelta::schema_version`]). Headers the proxy reads
//! (`x-asap-task`, `x-asap-run`) are stored in `headers` when they change. A record of a
//! request already stored (an attempt after a nudge) has no `request`.
//!
//! Whatever the client's whitespace (a pretty-printed body, CRLF line ends, tabs), the
//! stored request is compact JSON: messages are re-serialised and the `rest` fields have
//! the whitespace between their tokens removed ([`compact_json`]), so a record stays one
//! line.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use sha2::{Digest, Sha256};

use std::sync::Arc;

use super::{PromptRecord, PromptText, RequestInput};
use crate::util::sha256_hex;

/// Shortest message content worth replacing by a reference into the prompt, bytes.
pub const MIN_REF_BYTES: usize = 64;

/// A message content stored as a byte range of the record's full prompt, between two texts
/// stored as they are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContentRef {
    /// Index into the record's new `messages`.
    pub message: usize,
    /// When the content is a list of parts: the index of the part whose `text` this is
    /// (schema version 3); absent: the content is a string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<usize>,
    /// Byte offset into the full prompt.
    pub start: usize,
    /// Length, bytes.
    pub len: usize,
    /// The content's text before the range (schema version 2; empty: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub before: String,
    /// The content's text after the range (schema version 2; empty: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub after: String,
}

impl ContentRef {
    /// The content: `before`, the range of `prompt` (the record's full prompt), `after`.
    /// `None` when the range is not within `prompt` on character boundaries.
    pub fn text(&self, prompt: &str) -> Option<String> {
        let range = prompt.get(self.start..self.start.checked_add(self.len)?)?;
        Some([self.before.as_str(), range, &self.after].concat())
    }

    /// Whether the content is more than the range (schema version 2).
    pub fn is_partial(&self) -> bool {
        !self.before.is_empty() || !self.after.is_empty()
    }

    /// Writes the content ([`ContentRef::text`] of `prompt`) into `message`, a message of the
    /// record's new `messages`: as its `content`, or as the `text` of its content's part
    /// `part`.
    ///
    /// Errors: the range is not within `prompt`, or `message` has no such place (not an
    /// object; a part that is not an object of a list content).
    pub fn put(&self, message: &mut Value, prompt: &str) -> Result<(), String> {
        let text = self.text(prompt).ok_or_else(|| {
            format!(
                "content ref {}..+{} outside the prompt",
                self.start, self.len
            )
        })?;
        let message = message
            .as_object_mut()
            .ok_or_else(|| format!("content ref to message {}, not an object", self.message))?;
        match self.part {
            None => {
                message.insert("content".into(), Value::String(text));
            }
            Some(part) => {
                let part = message
                    .get_mut("content")
                    .and_then(Value::as_array_mut)
                    .and_then(|parts| parts.get_mut(part))
                    .and_then(Value::as_object_mut)
                    .ok_or_else(|| {
                        format!(
                            "content ref to part {part} of message {}, which has none",
                            self.message
                        )
                    })?;
                part.insert("text".into(), Value::String(text));
            }
        }
        Ok(())
    }
}

/// The request of a record, as a delta against the previous record's. Read back (from JSON
/// text: `rest` stays raw) by [`RequestState::apply_delta`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RequestDelta {
    /// Messages of the previous request kept (a prefix of it).
    pub messages_from: usize,
    /// Messages appended after those, each its JSON text compacted (a referenced content
    /// written as `null`): kept as text, not as a tree of values, so a record that opens a
    /// session does not hold its history as one while its completion call runs.
    #[serde(default)]
    pub messages: Vec<StoredMessage>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content_refs: Vec<ContentRef>,
    /// Every top-level field but `messages`, when it differs from the previous request's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rest: Option<Box<RawValue>>,
    /// Headers the proxy reads, when they differ from the previous request's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
}

impl RequestDelta {
    /// The lowest schema version whose readers rebuild this request right: 3 when a content
    /// reference names a part of a list content (an older reader would write the text over
    /// the whole list), else 2 when one has text around its range (a version 1 reader would
    /// drop that text), else 1.
    pub fn schema_version(&self) -> u32 {
        if self.content_refs.iter().any(|r| r.part.is_some()) {
            3
        } else if self.content_refs.iter().any(ContentRef::is_partial) {
            2
        } else {
            1
        }
    }
}

/// A new message of a [`RequestDelta`]: its stored JSON text.
#[derive(Debug, Clone)]
pub enum StoredMessage {
    /// Checked JSON text: read back from a file, or built through serde_json.
    Checked(Box<RawValue>),
    /// Built by the request delta from a message of a body the decoder read (its members'
    /// JSON text compacted, `null` in place of a referenced content: JSON by construction,
    /// since the decoder parsed the same text strictly). The record's write copies it into
    /// the line as it is when the built messages are long (a session's first record:
    /// `trace::Line::write_record`) instead of checking it again:
    /// `RawValue::from_string`'s parse was a twentieth of a 100-turn opening's
    /// instructions (issue 23). Checked when serialised any other way (`null` if it is not
    /// JSON, as a check at build time wrote it).
    Built(String),
}

impl StoredMessage {
    /// The JSON text.
    pub fn get(&self) -> &str {
        match self {
            Self::Checked(raw) => raw.get(),
            Self::Built(text) => text,
        }
    }
}

impl Serialize for StoredMessage {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Checked(raw) => raw.serialize(serializer),
            Self::Built(text) => RawValue::from_string(text.clone())
                .unwrap_or_else(|_| RawValue::NULL.to_owned())
                .serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for StoredMessage {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(deserializer).map(Self::Checked)
    }
}

impl PartialEq for RequestDelta {
    fn eq(&self, other: &Self) -> bool {
        self.messages_from == other.messages_from
            && self.messages.len() == other.messages.len()
            && self
                .messages
                .iter()
                .zip(&other.messages)
                .all(|(a, b)| a.get() == b.get())
            && self.content_refs == other.content_refs
            && self.rest.as_ref().map(|r| r.get()) == other.rest.as_ref().map(|r| r.get())
            && self.headers == other.headers
    }
}

type Digest16 = [u8; 16];

/// Where JSON text is, byte by byte: inside a string literal or not (escapes followed), for
/// the scanners that must not read a string's content as structure.
#[derive(Debug, Default)]
pub(super) struct JsonStrings {
    in_string: bool,
    escaped: bool,
}

impl JsonStrings {
    /// Feeds the next byte; true when it is inside a string (its closing quote included),
    /// false for a byte of structure (an opening quote included).
    pub(super) fn inside(&mut self, b: u8) -> bool {
        if !self.in_string {
            self.in_string = b == b'"';
            return false;
        }
        if self.escaped {
            self.escaped = false;
        } else if b == b'\\' {
            self.escaped = true;
        } else if b == b'"' {
            self.in_string = false;
        }
        true
    }
}

/// `json` (valid JSON text) without the whitespace between its tokens; borrowed when it has
/// none. Strings are copied byte for byte (a raw line break cannot occur in a valid JSON
/// string), numbers keep their spelling.
pub fn compact_json(json: &str) -> std::borrow::Cow<'_, str> {
    let bytes = json.as_bytes();
    // Allocated at the first whitespace between tokens; `None` while there has been none.
    let mut out: Option<Vec<u8>> = None;
    // Bytes before `copied` are in `out` (or need not be, while it is `None`).
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            // A string is skipped whole (an unclosed one runs to the end).
            b'"' => i = crate::util::json_string_end(bytes, i).unwrap_or(bytes.len()),
            b' ' | b'\t' | b'\n' | b'\r' => {
                out.get_or_insert_with(|| Vec::with_capacity(bytes.len()))
                    .extend_from_slice(&bytes[copied..i]);
                i += 1;
                copied = i;
            }
            _ => i += 1,
        }
    }
    match out {
        None => std::borrow::Cow::Borrowed(json),
        Some(mut out) => {
            out.extend_from_slice(&bytes[copied..]);
            // Only ASCII whitespace outside strings was removed: still UTF-8.
            std::borrow::Cow::Owned(String::from_utf8(out).unwrap_or_else(|_| json.to_string()))
        }
    }
}

/// A 128-bit XXH3 digest under the process's secret ([`crate::util::digest`]): these digests only ever compare texts within one process (they
/// are never written), so a fast non-cryptographic hash does; the prompt's SHA-256 in the
/// record still checks every rebuilt prompt.
fn digest16(bytes: &[u8]) -> Digest16 {
    crate::util::digest(bytes).to_le_bytes()
}

/// The first occurrence of `needle` in `haystack` (what `str::find` returns). Only the
/// needle's first 32 bytes are searched for (a two-way searcher set up for a whole 10 KiB
/// observation costs more than the search); each hit is then compared in full. The
/// reference for what [`find_run`] finds whole (its property tests).
#[cfg(test)]
fn find_text(haystack: &[u8], needle: &str) -> Option<usize> {
    let needle = needle.as_bytes();
    let head = memchr::memmem::Finder::new(&needle[..needle.len().min(32)]);
    // Hits may overlap (a head that repeats itself), so each search starts one byte after
    // the last hit (`find_iter` would skip overlapping ones).
    let mut from = 0;
    while let Some(at) = head.find(haystack.get(from..)?) {
        let at = from + at;
        if haystack[at..].starts_with(needle) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// Where a run of `content` (≥ [`MIN_REF_BYTES`] bytes) appears in `haystack`:
/// `(content_from, at, len)`, the content's bytes `content_from..content_from + len` equal to
/// `haystack[at..at + len]`. The whole content at its first occurrence when it appears (what
/// `str::find` finds); else the first run from the content's start, compared forward to the
/// first difference from each place its first 32 bytes occur, in order (the prompt trims a
/// trailing prompt line, rewrites an exit code; a whole copy is still taken over that run if
/// its first 32 bytes end within twice the content's length plus [`NARROW_SLACK`] of the
/// run's start, and is not looked for further); else, when there is none, the same from
/// after the content's first line break, then its second (within its first
/// [`ANCHOR_BYTES`]: a wrapper line such as `New Terminal Output:` or `<output>` that the
/// prompt does not keep), compared at [`ANCHOR_HITS`] places at most. A run must cover at
/// least half the content: a shorter one (the first line of a task the prompt quotes line by
/// line) saves little and would make the record version 2; and the first such run, not the
/// longest, so that a content is not placed at a later message's text that shares its start.
/// A content the prompt does not hold costs three searches of the window.
fn find_run(haystack: &[u8], content: &str) -> Option<(usize, usize, usize)> {
    let bytes = content.as_bytes();
    if bytes.len() < MIN_REF_BYTES {
        return None;
    }
    let breaks = bytes[..bytes.len().min(ANCHOR_BYTES)]
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(i, _)| i + 1)
        .take(2);
    for (k, from) in std::iter::once(0).chain(breaks).enumerate() {
        let Some(head) = bytes.get(from..from + 32) else {
            continue;
        };
        let mut first: Option<(usize, usize, usize)> = None;
        let finder = memchr::memmem::Finder::new(head);
        // Hits may overlap (a head that repeats itself): each search starts one byte after
        // the last hit, as in `find_text`.
        let mut next = 0;
        let mut compared = 0;
        // Where heads are searched for up to: the window, then, once a run was found, a
        // whole copy only as far as the content's own place could reach.
        let mut limit = haystack.len();
        while let Some(found) = haystack.get(next..limit).and_then(|w| finder.find(w)) {
            let at = next + found;
            next = at + 1;
            compared += 1;
            if k > 0 && compared > ANCHOR_HITS {
                break;
            }
            let mut len = common_prefix(&bytes[from..], &haystack[at..]);
            if k == 0 && len == bytes.len() {
                return Some((0, at, len));
            }
            if first.is_some() {
                // Only a whole content, found later, is taken over the first run.
                continue;
            }
            // Equal bytes from a character start: a boundary in the content is one in the
            // prompt too.
            while !content.is_char_boundary(from + len) {
                len -= 1;
            }
            if len >= MIN_REF_BYTES && 2 * len >= bytes.len() {
                if k > 0 {
                    return Some((from, at, len));
                }
                first = Some((from, at, len));
                limit = limit.min(at + 2 * bytes.len() + NARROW_SLACK);
            }
        }
        if first.is_some() {
            return first;
        }
    }
    None
}

/// The length of the longest common prefix of `a` and `b`, compared 64 bytes at a time.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 64 <= n && a[i..i + 64] == b[i..i + 64] {
        i += 64;
    }
    i + a[i..n]
        .iter()
        .zip(&b[i..n])
        .take_while(|(x, y)| x == y)
        .count()
}

/// Bytes past twice a content's length that [`DeltaState::request_delta`] searches for it
/// after the previous content found: the markup of a step, and before the first step the
/// tool documentation and the example (8 to 9 KiB in the built-in profiles).
const WIDE_SLACK: usize = 16 * 1024;

/// Contents of one role not found in a row after which [`DeltaState::request_delta`] searches
/// for that role's next ones near their place only: twice the JSON bytes of the messages since
/// the last content found (the found message's own bytes past its content included), plus
/// [`NARROW_SLACK`], and never past the wide reach. A miss counts only when another content
/// was found since the role's last one, and a search is narrowed only then: a cursor that has
/// not moved may still be before a long header or reference prefix that no message accounts
/// for, which a narrowed search would never pass (three reviews broke looser rules: two misses,
/// two after a first find, eight counted while the cursor stood before such a header).
const MISSES_TO_NARROW: usize = 8;

/// Bytes a narrowed search reaches past its estimate: a step's markup. Also how far past twice
/// a content's length from its first run [`find_run`] still looks for a whole copy.
const NARROW_SLACK: usize = 1024;

/// How far into a content [`find_run`] looks for the line breaks its runs may start after.
const ANCHOR_BYTES: usize = 256;

/// Places of a run's first 32 bytes [`find_run`] compares when the run starts after a line
/// break.
const ANCHOR_HITS: usize = 8;

/// The writer's memory of the last request of a session.
#[derive(Debug, Default)]
pub struct DeltaState {
    messages: Vec<Digest16>,
    /// Per message of the last request: where the search stood in that record's full prompt
    /// after it (just past the last content found up to it), so that a message the client
    /// sends again changed (SWE-agent moving `cache_control` to its latest messages) is looked
    /// for where it was, not only in the new part of the prompt.
    ends: Vec<usize>,
    /// The first of the last request's messages that were new (`messages_from`): `ends` from
    /// there were found in that request's prompt.
    fresh_from: usize,
    rest: Option<Digest16>,
    headers: BTreeMap<String, String>,
    known: bool,
}

impl DeltaState {
    /// Whether a record of this session was written by this process since the state was made.
    pub fn is_known(&self) -> bool {
        self.known
    }

    /// Marks the state as describing the file's last record.
    pub fn mark_known(&mut self) {
        self.known = true;
    }

    /// Forgets where the last request's new messages were found: they were found in a prompt
    /// outside the chain (a side call's), so a next record that sends one of them again
    /// searches from where its own stored prompt begins. The places of the messages the
    /// request kept (found in the chain's prompts) stay.
    pub fn forget_places(&mut self) {
        for end in &mut self.ends[self.fresh_from.min(self.messages.len())..] {
            *end = usize::MAX;
        }
    }

    /// The delta of `input` against the last request, and the state moved to `input`.
    /// `prompt` is the record's full prompt and `stored_from` where its stored delta begins.
    /// `None` when the request equals the last one (or its body is not a JSON object).
    pub fn request_delta(
        &mut self,
        input: &RequestInput,
        prompt: &str,
        stored_from: usize,
    ) -> Option<RequestDelta> {
        // Only the parts stored are checked to be UTF-8 (each is a whole JSON value of a body
        // the decoder read as UTF-8): a repeated message is only compared by its digest, so a
        // running session's request costs no pass over its whole body here.
        let body: &[u8] = &input.body;
        let text = |range: std::ops::Range<usize>| std::str::from_utf8(body.get(range)?).ok();
        // The decoder's split when it describes this body, else a split of our own.
        let own;
        let fits = |split: &crate::openai::split::BodySplit| {
            let ends = split.messages.iter().map(|m| m.range.end);
            ends.chain(split.rest.iter().map(|(_, r)| r.end))
                .all(|end| end <= body.len())
        };
        let (split, decoded) = match input.split.as_deref().filter(|s| fits(s)) {
            // The decoder's messages, one per element of its split: their contents decoded.
            Some(split) => (
                split,
                (input.contents.len() == split.messages.len()).then_some(&input.contents),
            ),
            None => {
                own = crate::openai::split::BodySplit::of(std::str::from_utf8(body).ok()?)?;
                (&own, None)
            }
        };
        let digests: Vec<Digest16> = split
            .messages
            .iter()
            .map(|m| m.digest.to_le_bytes())
            .collect();
        let top: BTreeMap<&str, &str> = split
            .rest
            .iter()
            .map(|(k, r)| Some((k.as_str(), text(r.clone())?)))
            .collect::<Option<_>>()?;
        let kept = self
            .messages
            .iter()
            .zip(&digests)
            .take_while(|(a, b)| a == b)
            .count();
        let kept = if self.known { kept } else { 0 };
        let messages: Vec<&str> = split.messages[kept..]
            .iter()
            .map(|m| text(m.range.clone()))
            .collect::<Option<_>>()?;
        let rest_json = compact_object(
            top.iter().map(|(k, v)| (*k, *v)),
            top.values().map(|v| v.len() + 16).sum(),
        );
        let rest_json = String::from_utf8(rest_json).ok()?;
        let rest_digest = digest16(rest_json.as_bytes());
        let mut headers = BTreeMap::new();
        if let Some(task) = &input.task_header {
            headers.insert("x-asap-task".to_string(), task.clone());
        }
        if let Some(run) = &input.run_header {
            headers.insert("x-asap-run".to_string(), run.clone());
        }
        let unchanged = self.known
            && kept == digests.len()
            && kept == self.messages.len()
            && self.rest == Some(rest_digest)
            && self.headers == headers;
        let headers_changed = !self.known || self.headers != headers;
        let rest_changed = !self.known || self.rest != Some(rest_digest);
        // Messages the last request had and this one sends again changed (from `kept` up to
        // `sent_again`) are searched for from where the last kept one's search ended, when
        // that part of the prompt is the last one's (`stored_from` is where the prompts
        // part); the messages after them, new, from `stored_from` at least.
        let sent_again = if self.known { self.messages.len() } else { 0 };
        let resume = match kept {
            0 => 0,
            _ if kept >= sent_again => stored_from,
            _ => self.ends.get(kept - 1).copied().unwrap_or(stored_from),
        };
        let mut ends = std::mem::take(&mut self.ends);
        ends.truncate(kept);
        self.fresh_from = kept;
        self.messages = digests;
        self.rest = Some(rest_digest);
        self.headers = headers.clone();
        self.known = true;
        if unchanged {
            self.ends = ends;
            return None;
        }
        // Messages appear in the prompt in order: each is searched for after the previous
        // match, within a window of its own size plus some markup (linear in the prompt, also
        // for a first record of thousands of messages). A role whose last contents were not
        // found (a content dialect's assistant text, which the prompt holds as a thought and an
        // action) is searched for near where its message would be only: a content the prompt
        // does not hold costs a search of the whole window.
        // A message sent again changed is searched for from where its predecessor was found.
        let mut cursor = stored_from.min(resume).min(prompt.len());
        // JSON bytes of the messages since the last content found, this one's included.
        let mut since = 0;
        // Per role (its JSON text): contents not found in a row, each after some other content
        // was found (a cursor that stays put may be behind a long header, where a narrowed
        // search would miss what a wide one finds), and the count of contents found at its
        // last miss.
        let mut missed: Vec<(&str, usize, usize)> = Vec::new();
        let mut found = 0;
        let mut new_messages = Vec::with_capacity(messages.len());
        let mut content_refs = Vec::new();
        for (i, raw) in messages.iter().enumerate() {
            if kept + i == sent_again {
                cursor = cursor.max(stored_from.min(prompt.len()));
            }
            let decoded = decoded.map(|contents| &*contents[kept + i]);
            let raw_len = raw.len();
            since += raw_len;
            new_messages.push(stored_message(raw, decoded, |content, role, part| {
                if content.len() < MIN_REF_BYTES {
                    return false;
                }
                let slot = match missed.iter().position(|(r, ..)| *r == role) {
                    Some(slot) => slot,
                    None => {
                        missed.push((role, 0, 0));
                        missed.len() - 1
                    }
                };
                let (_, misses, found_then) = &mut missed[slot];
                // Only a cursor that moved since this role last missed is trusted to be
                // where the trajectory is.
                let moved = found > *found_then;
                // Never past the wide reach: a cursor that stays put (nothing found for many
                // messages) must not make each search longer than the last.
                let wide = 2 * content.len() + WIDE_SLACK;
                let reach = if moved && *misses >= MISSES_TO_NARROW {
                    (2 * since + NARROW_SLACK).min(wide)
                } else {
                    wide
                };
                let mut end = (cursor + reach).min(prompt.len());
                while !prompt.is_char_boundary(end) {
                    end -= 1;
                }
                let Some((from, at, len)) = find_run(&prompt.as_bytes()[cursor..end], content)
                else {
                    if moved || *misses == 0 {
                        *misses += 1;
                    }
                    *found_then = found;
                    return false;
                };
                *misses = 0;
                found += 1;
                // What of this message the prompt holds after its content (a tool call's
                // arguments after the thought) counts toward the next one's place.
                since = raw_len.saturating_sub(content.len());
                content_refs.push(ContentRef {
                    message: i,
                    part,
                    start: cursor + at,
                    len,
                    before: content[..from].to_string(),
                    after: content[from + len..].to_string(),
                });
                cursor += at + len;
                true
            }));
            ends.push(cursor);
        }
        self.ends = ends;
        Some(RequestDelta {
            messages_from: kept,
            messages: new_messages,
            content_refs,
            rest: rest_changed
                .then(|| RawValue::from_string(rest_json).ok())
                .flatten(),
            headers: headers_changed.then_some(headers),
        })
    }
}

/// A message's members in order, borrowed from its JSON text; `None` for a message that is
/// not an object or repeats a key (stored through a JSON value instead, which keeps the last).
struct Members<'a>(Option<Vec<(String, &'a RawValue)>>);

impl<'de: 'a, 'a> Deserialize<'de> for Members<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = Members<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<Members<'a>, M::Error> {
                let mut members: Vec<(String, &'a RawValue)> = Vec::new();
                let mut unique = true;
                while let Some(key) = map.next_key::<String>()? {
                    unique &= members.iter().all(|(k, _)| *k != key);
                    members.push((key, map.next_value()?));
                }
                Ok(Members(unique.then_some(members)))
            }
            // Any other JSON value: not an object.
            fn visit_bool<E>(self, _: bool) -> Result<Members<'a>, E> {
                Ok(Members(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Members<'a>, E> {
                Ok(Members(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Members<'a>, E> {
                Ok(Members(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Members<'a>, E> {
                Ok(Members(None))
            }
            fn visit_str<E>(self, _: &str) -> Result<Members<'a>, E> {
                Ok(Members(None))
            }
            fn visit_unit<E>(self) -> Result<Members<'a>, E> {
                Ok(Members(None))
            }
            fn visit_seq<S: serde::de::SeqAccess<'de>>(
                self,
                mut seq: S,
            ) -> Result<Members<'a>, S::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Members(None))
            }
        }
        deserializer.deserialize_any(Visit(std::marker::PhantomData))
    }
}

/// A new message of a request delta: its JSON text `raw` compacted, with each text of its
/// `content` that `refer` stores as a reference into the prompt written as `null`. `refer`
/// is asked, in order, for a string `content` (part `None`) or for the `text` of each part of
/// a list `content` that is an object with a string `text` (part `Some(index in the list)`:
/// SWE-agent's tool results, OpenHands' messages); it is given the message's `role` as JSON
/// text. `decoded` is the content as the decoder read it, when it did (a string content, or
/// the text of a list's only part: not decoded again here, a tenth of a 100-turn opening
/// record's instructions). Built from the text's members, not from a JSON value, so a long
/// history costs its compacted text and no tree; a message that is not an object (or repeats
/// a key) goes through a JSON value, as records always stored it.
fn stored_message<'r>(
    raw: &'r str,
    decoded: Option<&str>,
    mut refer: impl FnMut(&str, &'r str, Option<usize>) -> bool,
) -> StoredMessage {
    let null = || RawValue::NULL.to_owned();
    // The usual message: an object whose keys have no escapes, split by the structural
    // scanner (strings skipped at memory speed), and not checked again: `raw` is JSON the
    // decoder read ([`RequestInput::body`]), compacting keeps it so.
    if let Some(members) = plain_members(raw) {
        let role = members
            .iter()
            .find(|(key, _)| &raw[key.clone()] == "\"role\"")
            .map_or("", |(_, value)| &raw[value.clone()]);
        let mut text = String::with_capacity(raw.len() + 2);
        push_object(&mut text, raw, &members, |key, value| {
            if key == "\"content\"" {
                stored_content(value, decoded, role, &mut refer)
            } else {
                compact_json(value)
            }
        });
        // A referenced content leaves most of the room unused, and the record holds the text
        // while its completion call runs.
        if text.capacity() > text.len() + text.len() / 8 + 64 {
            text.shrink_to_fit();
        }
        return StoredMessage::Built(text);
    }
    let Ok(Members(Some(members))) = serde_json::from_str::<Members<'_>>(raw) else {
        let mut message: Value = serde_json::from_str(raw).unwrap_or(Value::Null);
        // Not a message the decoder read: searched for as a role of its own.
        match message.get_mut("content") {
            Some(content) if content.as_str().is_some_and(|c| refer(c, "", None)) => {
                *content = Value::Null;
            }
            Some(Value::Array(parts)) => {
                for (p, part) in parts.iter_mut().enumerate() {
                    if let Some(text) = part.get_mut("text") {
                        if text.as_str().is_some_and(|t| refer(t, "", Some(p))) {
                            *text = Value::Null;
                        }
                    }
                }
            }
            _ => {}
        }
        return StoredMessage::Checked(
            serde_json::value::to_raw_value(&message).unwrap_or_else(|_| null()),
        );
    };
    let role = members
        .iter()
        .find(|(key, _)| key == "role")
        .map_or("", |(_, value)| value.get());
    let stored: Vec<(&str, std::borrow::Cow<'_, str>)> = members
        .iter()
        .map(|(key, value)| {
            let value = if key == "content" {
                stored_content(value.get(), None, role, &mut refer)
            } else {
                std::borrow::Cow::Borrowed(value.get())
            };
            (key.as_str(), value)
        })
        .collect();
    let members = stored.iter().map(|(key, value)| (*key, value.as_ref()));
    StoredMessage::Checked(
        String::from_utf8(compact_object(members, raw.len() + 2))
            .ok()
            .and_then(|text| RawValue::from_string(text).ok())
            .unwrap_or_else(null),
    )
}

/// The members of JSON object text `text` when its keys have no escapes and none repeats
/// (then each is its name in quotes), else `None`.
fn plain_members(text: &str) -> Option<Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>> {
    crate::openai::split::object_members(text).filter(|members| {
        members.iter().enumerate().all(|(i, (key, _))| {
            let key = &text[key.clone()];
            !key.contains('\\') && members[..i].iter().all(|(k, _)| &text[k.clone()] != key)
        })
    })
}

/// Appends the object of `members` of `text` ([`plain_members`]), each value as
/// `value(key in quotes, value's JSON text)` gives it.
fn push_object<'t>(
    out: &mut String,
    text: &'t str,
    members: &[(std::ops::Range<usize>, std::ops::Range<usize>)],
    mut value: impl FnMut(&'t str, &'t str) -> std::borrow::Cow<'t, str>,
) {
    out.push('{');
    for (i, (key, at)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let key = &text[key.clone()];
        out.push_str(key);
        out.push(':');
        out.push_str(&value(key, &text[at.clone()]));
    }
    out.push('}');
}

/// A message's `content` (JSON text `value`) as stored: `null` for a string `refer` stores, a
/// list with each part's `text` that `refer` stores written as `null`, else compacted
/// ([`stored_message`]).
fn stored_content<'v, 'r>(
    value: &'v str,
    decoded: Option<&str>,
    role: &'r str,
    refer: &mut impl FnMut(&str, &'r str, Option<usize>) -> bool,
) -> std::borrow::Cow<'v, str> {
    let mut refer_text = |text: &str, decoded: Option<&str>, part: Option<usize>| {
        if !text.contains('\\') {
            refer(&text[1..text.len() - 1], role, part)
        } else if let Some(decoded) = decoded {
            refer(decoded, role, part)
        } else {
            serde_json::from_str::<String>(text).is_ok_and(|c| refer(&c, role, part))
        }
    };
    if value.starts_with('"') {
        return if refer_text(value, decoded, None) {
            "null".into()
        } else {
            value.into()
        };
    }
    let Some(elements) = value
        .starts_with('[')
        .then(|| crate::openai::split::array_elements(value))
        .flatten()
    else {
        return compact_json(value);
    };
    // The decoder's text of a list is its parts' texts joined: the only part's own.
    let decoded = decoded.filter(|_| elements.len() == 1);
    let mut out = String::with_capacity(value.len());
    let mut referenced = false;
    out.push('[');
    for (p, element) in elements.iter().enumerate() {
        if p > 0 {
            out.push(',');
        }
        let element = &value[element.clone()];
        let part = plain_members(element).filter(|members| {
            members.iter().any(|(key, value)| {
                &element[key.clone()] == "\"text\"" && element[value.clone()].starts_with('"')
            })
        });
        if let Some(members) = part {
            let (_, text) = members
                .iter()
                .find(|(key, _)| &element[key.clone()] == "\"text\"")
                .cloned()
                .unwrap_or_default();
            if refer_text(&element[text], decoded, Some(p)) {
                referenced = true;
                push_object(&mut out, element, &members, |key, value| {
                    if key == "\"text\"" {
                        "null".into()
                    } else {
                        compact_json(value)
                    }
                });
                continue;
            }
        }
        out.push_str(&compact_json(element));
    }
    out.push(']');
    if referenced {
        out.into()
    } else {
        compact_json(value)
    }
}

/// The JSON object of `members` (keys, and values' JSON text) as serde_json writes a map of
/// raw values, each value compacted ([`compact_json`]); `capacity` bytes reserved.
fn compact_object<'a>(
    members: impl Iterator<Item = (&'a str, &'a str)>,
    capacity: usize,
) -> Vec<u8> {
    let mut text = Vec::with_capacity(capacity);
    text.push(b'{');
    for (i, (key, value)) in members.enumerate() {
        if i > 0 {
            text.push(b',');
        }
        crate::util::push_json_string(&mut text, key);
        text.push(b':');
        text.extend_from_slice(compact_json(value).as_bytes());
    }
    text.push(b'}');
    text
}

/// Block size of the writer's prompt memory, bytes.
pub const PROMPT_BLOCK: usize = 4096;

/// The writer's memory of the last prompt stored for a session: a digest per full
/// [`PROMPT_BLOCK`] and the bytes after the last full block (a few KiB per session instead of
/// the prompt). Enough to find, exactly, how much of the next prompt repeats it when the next
/// prompt extends it (the usual, append-only case), and to a block when the history was
/// rewritten in the middle (a scaffold eliding old outputs, a context-window cut).
#[derive(Debug, Default)]
pub struct PromptState {
    blocks: Vec<Digest16>,
    tail: Vec<u8>,
    /// SHA-256 state after the full blocks of the last prompt: the record's `sha256` of a
    /// prompt that extends it hashes only the new bytes (the hash of a growing prompt would
    /// otherwise cost its whole length on every step).
    full_sha: Option<Sha256>,
    known: bool,
    /// The render cache's id of the last stored prompt, when it came from there
    /// ([`crate::render::PromptLineage`]).
    last_id: Option<u64>,
}

impl PromptState {
    /// Whether a step's prompt was stored since this state began (side calls never are).
    pub fn is_known(&self) -> bool {
        self.known
    }

    /// Bytes at the start of `prompt` equal to the last stored prompt (0 when none is known),
    /// at a character boundary; then remembers `prompt` as the last stored one.
    pub fn shared_prefix(&mut self, prompt: &str) -> usize {
        self.shared_prefix_and_sha256(prompt).0
    }

    /// [`PromptState::shared_prefix`] and the hex SHA-256 of `prompt`.
    pub fn shared_prefix_and_sha256(&mut self, prompt: &str) -> (usize, String) {
        self.shared_prefix_and_sha256_of(prompt, None)
    }

    /// [`PromptState::shared_prefix_and_sha256`] of a prompt the render cache holds, with its
    /// `lineage`: the bytes it shares with the last stored prompt (the same prompt again, or
    /// one it extends) are known equal, and are not read to find the shared prefix (a pass
    /// over the whole history on every turn otherwise).
    pub fn shared_prefix_and_sha256_of(
        &mut self,
        prompt: &str,
        lineage: Option<crate::render::PromptLineage>,
    ) -> (usize, String) {
        let bytes = prompt.as_bytes();
        let trusted = match (lineage, self.last_id) {
            (Some(lineage), Some(last)) if self.known => match lineage.extends {
                _ if lineage.id == last => bytes.len(),
                Some((of, shared)) if of == last => shared.min(bytes.len()),
                _ => 0,
            },
            _ => 0,
        };
        let mut shared = 0;
        let mut verified = 0;
        if self.known {
            for (i, digest) in self.blocks.iter().enumerate() {
                let range = i * PROMPT_BLOCK..(i + 1) * PROMPT_BLOCK;
                match bytes.get(range.clone()) {
                    Some(_) if range.end <= trusted => verified = i + 1,
                    Some(block) if digest16(block) == *digest => verified = i + 1,
                    _ => break,
                }
            }
            shared = verified * PROMPT_BLOCK;
            if verified == self.blocks.len() {
                shared += if shared + self.tail.len() <= trusted {
                    self.tail.len()
                } else {
                    self.tail
                        .iter()
                        .zip(&bytes[shared..])
                        .take_while(|(a, b)| a == b)
                        .count()
                };
            }
        }
        self.last_id = lineage.map(|l| l.id);
        while !prompt.is_char_boundary(shared) {
            shared -= 1;
        }
        let full = bytes.len() / PROMPT_BLOCK;
        let kept = verified.min(full);
        // The saved state covers the old full blocks: usable when all of them are kept.
        let mut sha = match self.full_sha.take() {
            Some(sha) if self.known && kept == self.blocks.len() => sha,
            _ => {
                let mut sha = Sha256::new();
                sha.update(&bytes[..kept * PROMPT_BLOCK]);
                sha
            }
        };
        sha.update(&bytes[kept * PROMPT_BLOCK..full * PROMPT_BLOCK]);
        self.blocks.truncate(kept);
        for i in self.blocks.len()..full {
            self.blocks
                .push(digest16(&bytes[i * PROMPT_BLOCK..(i + 1) * PROMPT_BLOCK]));
        }
        self.tail = bytes[full * PROMPT_BLOCK..].to_vec();
        self.known = true;
        self.full_sha = Some(sha.clone());
        sha.update(&self.tail);
        (shared, format!("{:x}", sha.finalize()))
    }
}

/// The prompt record of `prompt`, as a delta against the last stored prompt that `state`
/// remembers (`None` for a prompt outside the chain: stored whole, state untouched). A prompt
/// stored whole is shared, not copied; a delta is copied (usually the few KiB of the last
/// turn), so the record does not keep the whole prompt alive while its call waits.
/// `lineage`: the prompt's, when the render cache holds it
/// ([`PromptState::shared_prefix_and_sha256_of`]). `escaped`: the prompt JSON-escaped, when
/// its backend body was made from those frames: a prompt stored whole is then held as them
/// ([`PromptText::Escaped`]) and written without escaping it again.
pub fn prompt_record(
    prompt: &Arc<String>,
    state: Option<&mut PromptState>,
    lineage: Option<crate::render::PromptLineage>,
    escaped: Option<&Arc<crate::util::JsonFrames>>,
) -> PromptRecord {
    let (prefix_bytes, sha256) = match state {
        Some(state) => state.shared_prefix_and_sha256_of(prompt, lineage),
        None => (0, sha256_hex(prompt.as_bytes())),
    };
    PromptRecord {
        prefix_bytes,
        delta: match escaped {
            _ if prefix_bytes > 0 => PromptText::Owned(prompt[prefix_bytes..].to_string()),
            Some(frames) => {
                PromptText::Escaped(super::EscapedPrompt::new(Arc::clone(frames), prompt.len()))
            }
            None => PromptText::Shared(prompt.clone()),
        },
        sha256,
        bytes: prompt.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn find_text_is_str_find(
            haystack in "[ab\u{e9}]{0,80}",
            needle in "[ab\u{e9}]{1,40}",
        ) {
            proptest::prop_assert_eq!(find_text(haystack.as_bytes(), &needle), haystack.find(needle.as_str()));
        }

        /// Needles longer than the searched head whose head repeats (`ab` × 16, `=` × 70):
        /// hits overlap.
        #[test]
        fn find_text_finds_overlapping_heads(
            unit in "[ab=]{1,3}",
            repeats in 11usize..40,
            extra in 0usize..4,
            end in "[X!]",
        ) {
            let needle = format!("{}{end}", unit.repeat(repeats));
            let haystack = format!("{}{end}", unit.repeat(repeats + extra));
            proptest::prop_assert_eq!(find_text(haystack.as_bytes(), &needle), haystack.find(needle.as_str()));
            // A whole content is found where `find_text` finds it.
            let whole = haystack.find(needle.as_str()).map(|at| (0, at, needle.len()));
            let expected = whole.filter(|_| needle.len() >= MIN_REF_BYTES);
            proptest::prop_assert_eq!(find_run(haystack.as_bytes(), &needle), expected);
        }
    }

    /// A prompt stored whole is held as the frames the backend body sent when there are
    /// any, else shared; a delta is copied from the text whether or not there are frames.
    #[test]
    fn a_prompt_stored_whole_is_held_as_its_frames_and_a_delta_is_copied() {
        let first = Arc::new("# Task\n\"quoted\"\n## Thinking\n".repeat(200));
        let second = Arc::new(format!("{first}<observation>\nok\n</observation>\n"));
        let frames = |text: &str| Arc::new(crate::util::JsonFrames::of(text.as_bytes(), b""));
        let mut state = PromptState::default();
        let whole = prompt_record(&first, Some(&mut state), None, Some(&frames(&first)));
        assert_eq!(whole.prefix_bytes, 0);
        assert!(matches!(&whole.delta, PromptText::Escaped(_)));
        assert_eq!(
            (whole.delta.len(), &*whole.delta),
            (first.len(), first.as_str())
        );
        let delta = prompt_record(&second, Some(&mut state), None, Some(&frames(&second)));
        assert_eq!(delta.prefix_bytes, first.len());
        assert!(matches!(&delta.delta, PromptText::Owned(text) if *text == second[first.len()..]));
        let shared = prompt_record(&first, None, None, None);
        assert!(matches!(&shared.delta, PromptText::Shared(text) if Arc::ptr_eq(text, &first)));
        assert_eq!(shared.sha256, whole.sha256);
    }

    /// [`compact_json`] byte by byte with [`JsonStrings`]: the definition the string-skipping
    /// scan must keep.
    fn compact_json_bytewise(json: &str) -> String {
        let mut strings = JsonStrings::default();
        json.bytes()
            .filter(|&b| strings.inside(b) || !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
            .map(char::from)
            .collect::<String>()
    }

    proptest::proptest! {
        /// Any text (valid JSON or not: unclosed strings, backslash runs before quotes) is
        /// compacted as the byte-by-byte definition compacts it; a pretty-printed value
        /// comes out as serde_json's compact text.
        #[test]
        fn compact_json_is_the_bytewise_definition(
            text in "[\"\\\\ \t\n\r{}:,a]{0,40}",
            value in crate::openai::split::tests::json_value(),
        ) {
            let compacted = compact_json(&text).into_owned();
            proptest::prop_assert_eq!(compacted, compact_json_bytewise(&text));
            let pretty = serde_json::to_string_pretty(&value).unwrap();
            let compacted = compact_json(&pretty).into_owned();
            proptest::prop_assert_eq!(compacted, serde_json::to_string(&value).unwrap());
        }
    }

    #[test]
    fn compact_json_removes_whitespace_between_tokens_only() {
        let pretty = "{\r\n\t\"a\" : [ 1 ,\r\n 2.50 ],\n  \"b\": \"x y\\\" \\n\\\\\", \"c\":1e3}";
        let compact = compact_json(pretty);
        assert_eq!(compact, r#"{"a":[1,2.50],"b":"x y\" \n\\","c":1e3}"#);
        let a: Value = serde_json::from_str(pretty).unwrap();
        let b: Value = serde_json::from_str(&compact).unwrap();
        assert_eq!(a, b);
        assert!(matches!(
            compact_json(r#"{"a":"x y","b":[1]}"#),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn a_pretty_printed_request_is_stored_compact() {
        let body = "{\r\n  \"model\": \"m\",\r\n\t\"tools\": [\r\n    {\"type\": \"function\"}\r\n  ],\r\n  \"messages\": [\r\n    {\r\n      \"role\": \"user\",\r\n      \"content\": \"a\\r\\nb\"\r\n    }\r\n  ]\r\n}\r\n";
        let input = RequestInput {
            body: bytes::Bytes::from(body),
            ..RequestInput::default()
        };
        let delta = DeltaState::default().request_delta(&input, "", 0).unwrap();
        let line = serde_json::to_string(&delta).unwrap();
        assert!(!line.contains(['\n', '\r', '\t']), "{line}");
        let mut state = RequestState::default();
        state
            .apply(&serde_json::from_str(&line).unwrap(), "")
            .unwrap();
        let sent: Value = serde_json::from_str(body).unwrap();
        assert_eq!(state.body(), sent);
    }

    proptest::proptest! {
        /// A stored message reads back as the JSON value of the message, its content `null`
        /// when referenced, whatever its shape (spacing, escapes, repeated keys, not an
        /// object): what records stored when messages went through a JSON value.
        #[test]
        fn a_stored_message_reads_back_as_the_message_with_its_content_referenced(
            members in proptest::collection::vec(
                ("content|role|[a-z\"\\\\]{1,4}", crate::openai::split::tests::json_value()),
                0..5,
            ),
            content in proptest::option::of("(\\\\|\"|é|\\PC){0,80}"),
            // A list content after the string one (which a reader takes: the last).
            parts in proptest::option::of(proptest::collection::vec(
                proptest::option::of("(\\\\|\"|é|\\PC){0,80}"),
                0..4,
            )),
            other in crate::openai::split::tests::json_value(),
            pretty in proptest::bool::ANY,
            refer_even in proptest::bool::ANY,
        ) {
            // Members as a client writes them (a repeated key possible), then `content`.
            let mut raw = String::from("{");
            for (i, (key, value)) in members.iter().enumerate() {
                if i > 0 {
                    raw.push_str(if pretty { ",\n  " } else { "," });
                }
                raw.push_str(&serde_json::to_string(key).unwrap());
                raw.push_str(if pretty { ": " } else { ":" });
                raw.push_str(&if pretty {
                    serde_json::to_string_pretty(value).unwrap()
                } else {
                    serde_json::to_string(value).unwrap()
                });
            }
            if let Some(content) = &content {
                if !members.is_empty() {
                    raw.push(',');
                }
                raw.push_str(&format!("\"content\":{}", serde_json::to_string(content).unwrap()));
            }
            // A list content: text parts (one spaced, one with another member after its
            // text), an image part where a text is `None`.
            if let Some(parts) = &parts {
                if !members.is_empty() || content.is_some() {
                    raw.push(',');
                }
                let parts: Vec<String> = parts.iter().enumerate().map(|(i, text)| match text {
                    Some(text) if i % 2 == 0 => format!(
                        "{{ \"type\" : \"text\", \"text\" : {} }}",
                        serde_json::to_string(text).unwrap()
                    ),
                    Some(text) => format!(
                        "{{\"type\":\"text\",\"text\":{},\"cache_control\":{{\"type\":\"ephemeral\"}}}}",
                        serde_json::to_string(text).unwrap()
                    ),
                    None => r#"{"type":"image_url","image_url":{"url":"data:,"}}"#.to_string(),
                }).collect();
                raw.push_str(&format!("\"content\": [ {} ]", parts.join(" , ")));
            }
            raw.push('}');
            for raw in [raw, other.to_string()] {
                let refer = |c: &str| (c.len() % 2 == 0) == refer_even;
                let mut expected: Value = serde_json::from_str(&raw).unwrap();
                if expected.get("content").and_then(Value::as_str).is_some_and(refer) {
                    expected["content"] = Value::Null;
                }
                if let Some(parts) = expected.get_mut("content").and_then(Value::as_array_mut) {
                    for part in parts {
                        if part.get("text").and_then(Value::as_str).is_some_and(refer) {
                            part["text"] = Value::Null;
                        }
                    }
                }
                let stored = stored_message(&raw, None, |c, _, _| refer(c));
                let read: Value = serde_json::from_str(stored.get()).unwrap();
                proptest::prop_assert_eq!(&read, &expected, "{}", raw);
                proptest::prop_assert!(!stored.get().contains('\n'));
            }
        }
    }

    proptest::proptest! {
        /// A run [`find_run`] reports is the content's bytes at that place of the prompt, on
        /// character boundaries, at least [`MIN_REF_BYTES`] long; a content the prompt holds
        /// whole is found whole.
        #[test]
        fn a_found_run_is_the_contents_bytes_in_the_prompt(
            wrapper in "[a-z \n]{0,40}",
            kept in "[ab\u{e9}\n]{40,120}",
            trailer in "[#$ \u{e9}]{0,12}",
            noise in "[ab\u{e9}\n]{0,60}",
            whole in proptest::bool::ANY,
        ) {
            let content = format!("{wrapper}\n{kept}{trailer}");
            let prompt = if whole {
                format!("{noise}{content}{noise}")
            } else {
                format!("{noise}\n{kept}\n{noise}")
            };
            if let Some((from, at, len)) = find_run(prompt.as_bytes(), &content) {
                proptest::prop_assert!(len >= MIN_REF_BYTES && 2 * len >= content.len());
                proptest::prop_assert!(content.is_char_boundary(from) && content.is_char_boundary(from + len));
                proptest::prop_assert_eq!(prompt.get(at..at + len), Some(&content[from..from + len]));
            }
            if whole && content.len() >= MIN_REF_BYTES {
                proptest::prop_assert_eq!(find_run(prompt.as_bytes(), &content).map(|r| r.2), Some(content.len()));
            }
        }
    }

    /// The request delta of `body` as a session's first record stores it against `prompt`.
    fn first_delta(body: &str, prompt: &str) -> RequestDelta {
        let input = RequestInput {
            body: bytes::Bytes::from(body.to_string()),
            ..RequestInput::default()
        };
        DeltaState::default()
            .request_delta(&input, prompt, 0)
            .unwrap()
    }

    /// Terminus' terminal output as the prompt keeps it (its last prompt line trimmed) and a
    /// tool result inside a wrapper: each stored as a run of the prompt between the bytes
    /// around it, read back exactly, the record marked version 2; a request whose references
    /// are all whole stays version 1.
    #[test]
    fn a_content_kept_in_part_by_the_prompt_is_stored_around_its_run() {
        let output = "total 8\n-rw-r--r-- 1 root root 120 hello.c\n".repeat(3);
        let terminal =
            format!("New Terminal Output:\n\nroot@box:/app# ls -l\n{output}root@box:/app# ");
        let mini = format!("<returncode>0</returncode>\n<output>\n{output}</output>");
        // A long header first (tool documentation, an example), none of it a message's: the
        // search runs from the previous message's place, however far the first one is.
        let prompt = format!(
            "# Task\n\n{}\n<observation>\n{}\n</observation>\n\n<observation>\n{output}[exit 0]\n</observation>\n",
            "An example trajectory line of the header.\n".repeat(300),
            terminal.trim_end()
        );
        let body = serde_json::json!({"model": "m", "messages": [
            {"role": "user", "content": terminal},
            {"role": "user", "content": mini},
            {"role": "user", "content": "short"},
        ]})
        .to_string();
        let delta = first_delta(&body, &prompt);
        assert_eq!(delta.content_refs.len(), 2, "{delta:?}");
        let [terminal_ref, mini_ref] = [&delta.content_refs[0], &delta.content_refs[1]];
        assert_eq!(
            (terminal_ref.before.as_str(), terminal_ref.after.as_str()),
            ("", " ")
        );
        assert_eq!(mini_ref.before, "<returncode>0</returncode>\n<output>\n");
        assert_eq!(mini_ref.after, "</output>");
        assert_eq!(delta.schema_version(), 2);
        let line = serde_json::to_string(&delta).unwrap();
        assert!(line.len() < body.len(), "{line}");
        let mut state = RequestState::default();
        state
            .apply(&serde_json::from_str(&line).unwrap(), &prompt)
            .unwrap();
        assert_eq!(state.body(), serde_json::from_str::<Value>(&body).unwrap());
        // Written by a build before partial references: read as it always was.
        let old = r#"{"messages_from":0,"messages":[{"role":"user","content":null}],"content_refs":[{"message":0,"start":2,"len":4}]}"#;
        let old: RequestDelta = serde_json::from_str(old).unwrap();
        assert_eq!(old.schema_version(), 1);
        let mut state = RequestState::default();
        state.apply_delta(&old, "# Task\n").unwrap();
        assert_eq!(state.messages()[0]["content"], "Task");
    }

    /// A content of which the prompt holds only a run is stored around that run, unless a
    /// whole copy follows near it: within twice the content's length plus a step's markup.
    #[test]
    fn a_whole_copy_is_taken_over_a_first_run_only_near_it() {
        let shared = "Traceback (most recent call last): File \"a.py\", line 3, in <module>\n";
        let content = format!("{shared}ValueError: x");
        let run = format!("{shared}[exit 1]\n");
        let at = |gap: usize| format!("{run}{}{content}\n", ".".repeat(gap));
        let near = 2 * content.len() + NARROW_SLACK - 32 - run.len();
        assert_eq!(
            find_run(at(near).as_bytes(), &content),
            Some((0, run.len() + near, content.len()))
        );
        assert_eq!(
            find_run(at(near + 1).as_bytes(), &content),
            Some((0, 0, shared.len()))
        );
    }

    /// The contents of a role not found [`MISSES_TO_NARROW`] times in a row (a content
    /// dialect's assistant text, which the prompt holds rewritten) are searched for near their
    /// place only; the other roles' as before, past a long stretch of prompt too; a role's
    /// contents before that also.
    #[test]
    fn a_role_not_found_eight_times_in_a_row_is_searched_for_near_its_place_only() {
        let text = |what: &str, i: usize| {
            format!("{what} {i}: a text long enough to be stored as a reference into the prompt.")
        };
        let filler = "A line of the prompt that no message holds.\n".repeat(150);
        let obs = |i: usize| format!("<observation>\n{}\n</observation>\n", text("output", i));
        let n = MISSES_TO_NARROW;
        let mut prompt = format!("# Task\n\nFix the bug.\n{}", obs(0));
        let mut messages = vec![
            said("user", "Fix the bug."),
            said("user", &text("output", 0)),
        ];
        // Missed n - 1 times: the next one is still found 6 KiB on.
        for i in 1..n {
            messages.push(said("assistant", &text("rewritten action", i)));
            messages.push(said("user", &text("output", i)));
            prompt += &obs(i);
        }
        prompt += &format!("{filler}{}\n", text("found thought", 1));
        messages.push(said("assistant", &text("found thought", 1)));
        // Missed n times: the next one, as far on, is not looked for there.
        for i in n..2 * n {
            messages.push(said("assistant", &text("rewritten action", i)));
            messages.push(said("user", &text("output", i)));
            prompt += &obs(i);
        }
        prompt += &format!("{filler}{}\n{}", text("found thought", 2), obs(2 * n));
        messages.push(said("assistant", &text("found thought", 2)));
        messages.push(said("user", &text("output", 2 * n)));
        let found_thoughts: Vec<usize> = referenced(&messages, &prompt)
            .into_iter()
            .filter(|&i| messages[i]["role"] == "assistant")
            .collect();
        assert_eq!(found_thoughts, [2 * n]);
        // Every output is found, the last one after the thought that was not.
        let outputs = messages.iter().filter(|m| m["role"] == "user").count() - 1;
        assert_eq!(referenced(&messages, &prompt).len(), outputs + 1);
    }

    /// The JSON body of `messages` (role, content) and the roles' indexes of the contents its
    /// first record stores as references into `prompt`; the record reads back exactly.
    fn referenced(messages: &[serde_json::Value], prompt: &str) -> Vec<usize> {
        let body = serde_json::json!({"model": "m", "messages": messages}).to_string();
        let delta = first_delta(&body, prompt);
        let line = serde_json::to_string(&delta).unwrap();
        let mut state = RequestState::default();
        state
            .apply(&serde_json::from_str(&line).unwrap(), prompt)
            .unwrap();
        assert_eq!(state.body(), serde_json::from_str::<Value>(&body).unwrap());
        delta.content_refs.iter().map(|r| r.message).collect()
    }

    fn said(role: &str, content: &str) -> serde_json::Value {
        serde_json::json!({"role": role, "content": content})
    }

    /// A header longer than the wide reach (tool documentation, an example, reference steps)
    /// puts the first contents out of reach; the search stays wide until a role has missed
    /// [`MISSES_TO_NARROW`] times with the cursor moving, so the later ones are found as the
    /// wide search finds them, also when the system message was found before the header (found
    /// by three reviews: the user role was narrowed while the header was still ahead and every
    /// later observation was lost).
    #[test]
    fn a_long_header_does_not_narrow_the_search_for_what_follows() {
        let obs =
            |i: usize, n: usize| format!("output {i}: {}", "lorem ipsum dolor ".repeat(n / 18));
        let header = "Tool documentation, example trajectory and reference steps.\n".repeat(280);
        let system =
            "You are a helpful assistant that can interact with a computer to solve tasks.";
        // Short ones first, each past the wide reach: a role's misses while the cursor stays
        // put do not narrow its search.
        let outputs: Vec<String> = std::iter::repeat_n(150, MISSES_TO_NARROW)
            .chain([3000, 2000, 1500, 1500, 1500])
            .enumerate()
            .map(|(i, n)| obs(i + 1, n))
            .collect();
        let mut prompt =
            format!("# Task\n\n> {system}\n\n> quoted task\n\n{header}# Trajectory\n\n");
        let mut messages = vec![
            said("system", system),
            said("user", &"the parser drops the last field. ".repeat(4)),
        ];
        for output in &outputs {
            prompt += &format!("<bash>run</bash>\n<observation>\n{output}\n</observation>\n");
            messages.push(said("user", output));
        }
        let n = MISSES_TO_NARROW;
        let later: Vec<usize> = (n + 2..n + 7).collect();
        assert_eq!(referenced(&messages, &prompt), [&[0][..], &later].concat());
    }

    /// A narrowed search reaches no further than a wide one would: a cursor that stays put
    /// while long messages go by does not make each search longer (found by a review: Terminus-2
    /// in the JSON format, whose observations the prompt escapes, scanned 3.1 GB for a
    /// 1,000-turn first record).
    #[test]
    fn a_narrowed_search_reaches_no_further_than_a_wide_one() {
        let text = |what: &str| {
            format!("{what}: a text long enough to be stored as a reference into the prompt.")
        };
        let filler = "A line of the prompt that no message holds.\n".repeat(1400);
        let mut prompt = String::from("# Task\n\n");
        let mut messages = Vec::new();
        // The assistant role misses eight times, the cursor moving between (its outputs found).
        for i in 0..MISSES_TO_NARROW {
            messages.push(said("assistant", &text(&format!("rewritten action {i}"))));
            messages.push(said("user", &text(&format!("output {i}"))));
            prompt += &format!("{}\n", text(&format!("output {i}")));
        }
        prompt += &format!("{filler}{}\n", text("late thought"));
        // 40 KB the prompt does not hold: the narrowed estimate passes the late thought.
        messages.push(said("tool", &"x".repeat(40_000)));
        messages.push(said("assistant", &text("late thought")));
        let outputs: Vec<usize> = (0..MISSES_TO_NARROW).map(|i| 2 * i + 1).collect();
        assert_eq!(referenced(&messages, &prompt), outputs);
    }

    /// The bytes of a found message past its content (a tool call's arguments, which the
    /// prompt renders after the thought) count toward where the next content is (found by a
    /// review: a result after a large `create` was lost once the tool role was narrowed).
    #[test]
    fn a_found_messages_tool_call_counts_toward_the_next_contents_place() {
        let text = |what: &str| {
            format!("{what}: a text long enough to be stored as a reference into the prompt.")
        };
        let file_text = "print('a line of the new file')\n".repeat(300);
        let mut prompt = String::from("# Task\n\n");
        let mut messages = Vec::new();
        // The tool role misses eight times, the cursor moving between (the user's found).
        for i in 0..MISSES_TO_NARROW {
            messages.push(said("tool", &text(&format!("not in the prompt {i}"))));
            messages.push(said("user", &text(&format!("output {i}"))));
            prompt += &format!("{}\n", text(&format!("output {i}")));
        }
        prompt += &format!(
            "{}\n<create>{file_text}</create>\n{}\n",
            text("thought"),
            text("last output")
        );
        messages.push(
            serde_json::json!({"role": "assistant", "content": text("thought"),
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "create",
                "arguments": serde_json::json!({"file_text": file_text}).to_string()}}]}),
        );
        messages.push(said("tool", &text("last output")));
        let n = 2 * MISSES_TO_NARROW;
        let mut expected: Vec<usize> = (0..MISSES_TO_NARROW).map(|i| 2 * i + 1).collect();
        expected.extend([n, n + 1]);
        assert_eq!(referenced(&messages, &prompt), expected);
    }

    /// A task the prompt quotes line by line matches one line at most: stored whole, and
    /// the record stays version 1 (found by a review: the first line of most tasks made
    /// the first record of a mini or Terminus session version 2 for a hundred bytes).
    #[test]
    fn a_quoted_task_is_stored_whole() {
        let line = |i: usize| {
            format!("Line {i} of the task, long enough to pass the shortest run on its own.")
        };
        let task = (0..4).map(line).collect::<Vec<_>>().join("\n");
        let quoted = (0..4)
            .map(|i| format!("> {}", line(i)))
            .collect::<Vec<_>>()
            .join("\n");
        let prompt = format!("# Task\n\n{quoted}\n\n# Tools\n");
        let body = serde_json::json!({"messages": [{"role": "user", "content": task}]}).to_string();
        let delta = first_delta(&body, &prompt);
        assert!(delta.content_refs.is_empty(), "{:?}", delta.content_refs);
        assert_eq!(delta.schema_version(), 1);
    }

    #[test]
    fn a_request_delta_is_the_same_with_the_decoders_split_or_without() {
        // Escaped (`\n`), so the content is decoded, by the decoder or here.
        let observation = "x\\n".repeat(50);
        let bodies = [
            format!(
                r#"{{"model":"m","messages":[{{"role":"user","content":"{observation}"}}],"z\u00e9":1,"a":{{ "b" : [1, 2] }}}}"#
            ),
            format!(
                r#"{{"messages":[{{"role":"user","content":"{observation}"}},{{"role":"assistant","content":"ok"}}],"model":"m","a":{{"b":[1,2]}}}}"#
            ),
            format!(
                r#"{{"messages":[{{"role":"user","content":"{observation}"}},{{"role":"assistant","content":"ok"}}],"model":"n","a":{{"b":[1,2]}}}}"#
            ),
        ];
        let prompt = format!("# Task\n{}\n", "x\n".repeat(50));
        let (mut parsed, mut split, mut decoded) = (
            DeltaState::default(),
            DeltaState::default(),
            DeltaState::default(),
        );
        for (i, body) in bodies.iter().enumerate() {
            let input = RequestInput {
                body: bytes::Bytes::from(body.clone()),
                ..RequestInput::default()
            };
            let with_split = RequestInput {
                split: crate::openai::split::BodySplit::of(body).map(std::sync::Arc::new),
                ..input.clone()
            };
            assert!(with_split.split.is_some());
            // As the pipeline makes it: the decoder's split and decoded contents.
            let request = crate::openai::chat::ChatCompletionRequest::from_bytes(
                bytes::Bytes::from(body.clone()),
            )
            .unwrap();
            let from_decoder = RequestInput::from_request(&request, &Default::default());
            assert_eq!(from_decoder.contents.len(), request.messages.len());
            let a = parsed.request_delta(&input, &prompt, 0);
            let b = split.request_delta(&with_split, &prompt, 0);
            let c = decoded.request_delta(&from_decoder, &prompt, 0);
            assert_eq!(a, b, "{body}");
            assert_eq!(a, c, "{body}");
            let refs = a.map(|d| (d.content_refs.len(), d.rest.is_some()));
            assert_eq!(refs, Some((usize::from(i == 0), true)), "{body}");
        }
    }

    /// Contents sent as lists of text parts (SWE-agent's tool results with `cache_control`,
    /// OpenHands' messages): each part's `text` the prompt holds is stored as a reference to
    /// that part (the record version 3), the rest of the list as sent; the same from the
    /// decoder's split and contents as from the body alone, and read back exactly.
    #[test]
    fn a_list_contents_text_parts_are_stored_as_references() {
        let listing = "total 8\n-rw-r--r-- 1 root root 120 inventory.py\n".repeat(3);
        let source = "class Inventory:\n    def total(self):\n        return 0\n".repeat(2);
        let body = serde_json::json!({"model": "m", "messages": [
            {"role": "system", "content": "You are a careful assistant."},
            {"role": "user", "content": [{"type": "text", "text": "short task"}]},
            {"role": "assistant", "content": "List the files.", "tool_calls": [{"id": "c1",
                "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls -l\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": [
                {"type": "text", "text": listing, "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": "Read it.", "tool_calls": [{"id": "c2",
                "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"cat inventory.py\"}"}}]},
            {"role": "tool", "tool_call_id": "c2", "content": [
                {"type": "text", "text": source},
                {"type": "image_url", "image_url": {"url": "data:,"}},
                {"type": "text", "text": "a note that the prompt does not hold, long enough to be searched for"}]},
        ]})
        .to_string();
        let prompt = format!(
            "# Task\n\nshort task\n\n## Thinking\nList the files.\n\n<bash>ls -l</bash>\n\n<observation>\n{listing}</observation>\n\n## Thinking\nRead it.\n\n<bash>cat inventory.py</bash>\n\n<observation>\n{source}[image_url content omitted]\n</observation>\n"
        );
        let request = crate::openai::chat::ChatCompletionRequest::from_bytes(bytes::Bytes::from(
            body.clone(),
        ))
        .unwrap();
        let from_decoder = RequestInput::from_request(&request, &Default::default());
        assert!(from_decoder.split.is_some() && !from_decoder.contents.is_empty());
        let delta = first_delta(&body, &prompt);
        assert_eq!(
            DeltaState::default().request_delta(&from_decoder, &prompt, 0),
            Some(delta.clone())
        );
        let places: Vec<(usize, Option<usize>)> = delta
            .content_refs
            .iter()
            .map(|r| (r.message, r.part))
            .collect();
        assert_eq!(places, [(3, Some(0)), (5, Some(0))]);
        assert_eq!(delta.schema_version(), 3);
        let line = serde_json::to_string(&delta).unwrap();
        let escaped = serde_json::to_string(&listing).unwrap();
        assert!(!line.contains(escaped.trim_matches('"')), "{line}");
        assert!(
            line.contains(r#"{"type":"text","text":null,"cache_control":{"type":"ephemeral"}}"#),
            "{line}"
        );
        let mut state = RequestState::default();
        state
            .apply(&serde_json::from_str(&line).unwrap(), &prompt)
            .unwrap();
        assert_eq!(state.body(), serde_json::from_str::<Value>(&body).unwrap());
        // Taken again by a writer that lost the session (a restart): every message is the
        // file's, its part references read back to compare.
        let chain = FileChain {
            prompt: prompt.clone(),
            request: state,
        };
        let mut again = Some(delta.clone());
        rebase(
            &mut PromptRecord::default(),
            &mut again,
            &prompt,
            &chain,
            false,
        );
        let again = again.unwrap();
        assert_eq!((again.messages_from, again.messages.len()), (6, 0));
        assert!(again.content_refs.is_empty());
        // A reference to a part the stored list does not have is an error, not a panic.
        let mut wrong = delta.clone();
        wrong.content_refs[0].part = Some(7);
        let error = RequestState::default()
            .apply_delta(&wrong, &prompt)
            .unwrap_err();
        assert!(error.contains("part 7 of message 3"), "{error}");
    }

    /// A message the client sends again changed (SWE-agent's cache-control processor moves
    /// `cache_control` to its two latest tool results, so each turn re-sends the one it
    /// leaves) is searched for where it was in the prompt, before the part this record
    /// stores: its text stays a reference, not a second copy (found by a new-user review).
    #[test]
    fn a_message_sent_again_changed_is_found_where_it_was() {
        let output = |i: usize| {
            format!(
                "OBSERVATION:\n{}",
                format!("line {i} of a listing long enough to be referenced\n").repeat(3)
            )
        };
        let history = |turns: usize| {
            let mut messages = vec![
                serde_json::json!({"role": "system", "content": "You are a careful assistant."}),
                serde_json::json!({"role": "user", "content": "Fix the total."}),
            ];
            let mut prompt = String::from("# Task\n\nFix the total.\n\n");
            for i in 0..turns {
                messages.push(serde_json::json!({"role": "assistant",
                    "content": format!("Step {i}: look at the next file."),
                    "tool_calls": [{"id": format!("c{i}"), "type": "function", "function":
                        {"name": "bash", "arguments": format!("{{\"command\":\"cat f{i}\"}}")}}]}));
                let mut part = serde_json::json!({"type": "text", "text": output(i)});
                if i + 2 >= turns {
                    part["cache_control"] = serde_json::json!({"type": "ephemeral"});
                }
                messages.push(serde_json::json!({"role": "tool",
                    "tool_call_id": format!("c{i}"), "content": [part]}));
                prompt += &format!(
                    "## Thinking\nStep {i}: look at the next file.\n\n<bash>cat f{i}</bash>\n\n<observation>\n{}\n</observation>\n\n",
                    output(i)
                );
            }
            let body = serde_json::json!({"model": "m", "messages": messages}).to_string();
            let input = RequestInput {
                body: bytes::Bytes::from(body.clone()),
                ..RequestInput::default()
            };
            (body, input, prompt)
        };
        let mut state = DeltaState::default();
        let mut reader = RequestState::default();
        let (_, input, prompt) = history(5);
        let first = state.request_delta(&input, &prompt, 0).unwrap();
        assert_eq!(first.content_refs.len(), 5);
        reader.apply_delta(&first, &prompt).unwrap();
        let (body, input, next_prompt) = history(6);
        assert!(next_prompt.starts_with(&prompt));
        let second = state
            .request_delta(&input, &next_prompt, prompt.len())
            .unwrap();
        // The tool result of step 3 lost its cache_control: sent again from there.
        assert_eq!(second.messages_from, 9);
        let places: Vec<(usize, Option<usize>)> = second
            .content_refs
            .iter()
            .map(|r| (r.message, r.part))
            .collect();
        assert_eq!(places, [(0, Some(0)), (2, Some(0)), (4, Some(0))]);
        assert!(second.content_refs[0].start < prompt.len());
        reader.apply_delta(&second, &next_prompt).unwrap();
        assert_eq!(reader.body(), serde_json::from_str::<Value>(&body).unwrap());
    }

    /// A side call's prompt is outside the chain: where its new messages (Terminus-2's
    /// hand-off question, which the next step's history keeps) were found in it is forgotten,
    /// and the next step's new messages are searched for from where its stored prompt begins;
    /// later steps still find a message sent again changed where it was in the chain's
    /// prompt (a review found that forgetting every place left the places out of step with
    /// the messages for the rest of the session).
    #[test]
    fn places_found_in_a_side_calls_prompt_are_not_searched_from() {
        let output = |i: usize| {
            format!(
                "output {i}: {}\n",
                "a line of a long tool result. ".repeat(100)
            )
        };
        let said =
            |role: &str, content: String| serde_json::json!({"role": role, "content": content});
        let input = |messages: &[Value]| RequestInput {
            body: bytes::Bytes::from(
                serde_json::json!({"model": "m", "messages": messages}).to_string(),
            ),
            ..RequestInput::default()
        };
        let mut messages = vec![said("user", "Fix it.".into())];
        let mut prompt = format!(
            "# Task\n\nFix it.\n\n{}",
            "A line of the header.\n".repeat(900)
        );
        for i in 0..6 {
            messages.push(said("tool", output(i)));
            prompt += &output(i);
        }
        let mut state = DeltaState::default();
        let first = state.request_delta(&input(&messages), &prompt, 0).unwrap();
        assert_eq!(first.content_refs.len(), 6);
        // A side call: the history and a question, in a prompt of its own.
        let question = "Summarise what you did so far, in a few sentences, for the next agent.";
        messages.push(said("user", question.into()));
        let side = format!(
            "{}{question}\n",
            messages[1..7]
                .iter()
                .map(|m| m["content"].as_str().unwrap())
                .collect::<String>()
        );
        state.request_delta(&input(&messages), &side, 0).unwrap();
        state.forget_places();
        // The next step keeps the exchange and adds a short result.
        let short = "output 6: a short tool result, long enough to be stored as a reference.";
        messages.push(said("assistant", "I fixed it.".into()));
        messages.push(said("tool", short.into()));
        let next = format!("{prompt}{short}\n");
        let delta = state
            .request_delta(&input(&messages), &next, prompt.len())
            .unwrap();
        let places: Vec<usize> = delta.content_refs.iter().map(|r| r.message).collect();
        assert_eq!((delta.messages_from, places), (8, vec![1]));
        // A later step re-sends the second result changed: found where it was.
        messages[2]["name"] = serde_json::json!("cat");
        let delta = state
            .request_delta(&input(&messages), &next, next.len())
            .unwrap();
        let places: Vec<usize> = delta.content_refs.iter().map(|r| r.message).collect();
        assert_eq!((delta.messages_from, places), (2, vec![0, 1, 2, 3, 4, 7]));
        assert!(delta.content_refs[0].start < prompt.len());
    }

    #[test]
    fn incremental_sha256_equals_the_hash_of_the_whole_prompt() {
        let mut state = PromptState::default();
        let base: String = (0..2000).map(|i| format!("line {i}\n")).collect();
        let prompts = [
            base.clone(),
            format!("{base}appended\n"),
            format!("{base}appended\n{}", "more ".repeat(3000)),
            base.replacen("line 10\n", "line ten\n", 1), // rewritten near the start
            base[..5000].to_string(),                    // shorter
            base[..4096].to_string(),                    // exactly one block
            String::new(),
            base.clone(),
        ];
        for prompt in &prompts {
            let (_, sha) = state.shared_prefix_and_sha256(prompt);
            assert_eq!(sha, sha256_hex(prompt.as_bytes()), "{} bytes", prompt.len());
        }
    }

    #[test]
    fn a_rendered_prompts_lineage_gives_the_same_records_without_reading_the_shared_bytes() {
        use crate::render::PromptLineage;
        let lineage = |id, extends| Some(PromptLineage { id, extends });
        let cue = "\n## Thinking\n";
        let first = format!(
            "{}{cue}",
            (0..3000).map(|i| format!("line {i}\n")).collect::<String>()
        );
        let stem = first.strip_suffix(cue).unwrap();
        let second = format!("{stem}<observation>ok</observation>\n{cue}");
        let third = format!("{}more\n{cue}", second.strip_suffix(cue).unwrap());
        // Each prompt with its true lineage, then without any: the same prefix and hash.
        let steps = [
            (&first, lineage(1, None)),
            (&second, lineage(2, Some((1, stem.len())))),
            (&second, lineage(2, Some((1, stem.len())))), // a retry: the same prompt
            (&third, lineage(3, Some((2, second.len() - cue.len())))),
            (&first, lineage(4, None)), // another conversation's prompt
            (&second, lineage(5, Some((9, stem.len())))), // extends a prompt not stored last
        ];
        let mut with = PromptState::default();
        let mut without = PromptState::default();
        for (prompt, lineage) in steps {
            let got = with.shared_prefix_and_sha256_of(prompt, lineage);
            assert_eq!(got, without.shared_prefix_and_sha256(prompt));
            assert_eq!(got.1, sha256_hex(prompt.as_bytes()));
        }
        // The shared bytes are taken on the lineage's word, not read: a lineage that claimed
        // more than is shared would be believed (the render cache's joins make it exact).
        let mut state = PromptState::default();
        state.shared_prefix_and_sha256_of(&first, lineage(7, None));
        let rewritten = first.replacen("line 10\n", "line X\n", 1);
        let claimed = 4 * PROMPT_BLOCK;
        let (shared, _) =
            state.shared_prefix_and_sha256_of(&rewritten, lineage(8, Some((7, claimed))));
        assert_eq!(shared, claimed);
    }

    #[test]
    fn shared_prefix_is_exact_when_appending_and_block_wise_when_rewritten() {
        let mut state = PromptState::default();
        let first: String = (0..3000).map(|i| format!("line {i}\n")).collect();
        assert_eq!(state.shared_prefix(&first), 0);
        let stem = first.strip_suffix("line 2999\n").unwrap();
        let second = format!("{stem}line 2999 changed\nmore\n");
        assert_eq!(state.shared_prefix(&second), stem.len() + "line 2999".len());
        // A change in the middle: the prefix stops at the block before it.
        let third = second.replacen("line 1500\n", "line 1500 elided\n", 1);
        let at = second.find("line 1500\n").unwrap() + "line 1500".len();
        let shared = state.shared_prefix(&third);
        assert!(shared <= at && at - shared < PROMPT_BLOCK, "{shared} {at}");
        assert_eq!(third[..shared], second[..shared]);
        // Multi-byte characters are never split.
        let mut state = PromptState::default();
        state.shared_prefix("ab\u{e9}");
        assert_eq!(state.shared_prefix("ab\u{e8}"), 2);
    }
}

/// What a trace file's records leave for the next one to extend: the full prompt of its last
/// `step` record and its last request, rebuilt by the reader. A process that did not write the
/// file (a restart, a writer whose memory of the session was evicted) takes its first record
/// of the session as a delta against it ([`rebase`]) instead of storing it whole.
#[derive(Debug, Default, Clone)]
pub struct FileChain {
    /// Full prompt of the file's last `step` record (empty when it has none).
    pub prompt: String,
    /// The file's last request (`is_known` false when it has none).
    pub request: RequestState,
}

/// `prompt` and `request`, taken by a writer that knew nothing of the session (a prompt
/// stored whole, every message new), re-expressed against `chain`: the prompt keeps what it
/// shares with the chain's (`step` records only: a side call's prompt is outside the chain),
/// the request keeps the leading messages equal to the chain's (compared as JSON values, a
/// referenced content read from `full_prompt`), and `rest` and `headers` are dropped when
/// unchanged. Content references keep pointing into the full prompt, where the reader looks
/// them up. Nothing changes when the chain is empty.
pub fn rebase(
    prompt: &mut PromptRecord,
    request: &mut Option<RequestDelta>,
    full_prompt: &str,
    chain: &FileChain,
    step: bool,
) {
    if step && !chain.prompt.is_empty() && prompt.prefix_bytes == 0 {
        let mut shared = chain
            .prompt
            .as_bytes()
            .iter()
            .zip(full_prompt.as_bytes())
            .take_while(|(a, b)| a == b)
            .count();
        while !full_prompt.is_char_boundary(shared) {
            shared -= 1;
        }
        prompt.prefix_bytes = shared;
        prompt.delta = full_prompt[shared..].to_string().into();
    }
    let (Some(delta), true) = (request.as_mut(), chain.request.is_known()) else {
        return;
    };
    if delta.messages_from != 0 {
        return;
    }
    let resolved = |i: usize, message: &StoredMessage| -> Value {
        let mut message: Value = serde_json::from_str(message.get()).unwrap_or(Value::Null);
        for r in delta.content_refs.iter().filter(|r| r.message == i) {
            // A reference that does not apply leaves the message unequal to the chain's.
            let _ = r.put(&mut message, full_prompt);
        }
        message
    };
    let kept = delta
        .messages
        .iter()
        .enumerate()
        .zip(chain.request.messages())
        .take_while(|((i, new), old)| resolved(*i, new) == **old)
        .count();
    delta.messages_from = kept;
    delta.messages.drain(..kept);
    delta.content_refs.retain(|r| r.message >= kept);
    for r in &mut delta.content_refs {
        r.message -= kept;
    }
    let same_rest = delta.rest.as_ref().is_some_and(|rest| {
        serde_json::from_str::<Map<String, Value>>(rest.get())
            .is_ok_and(|r| r == chain.request.rest)
    });
    if same_rest {
        delta.rest = None;
    }
    if delta.headers.as_ref() == Some(&chain.request.headers) {
        delta.headers = None;
    }
}

/// The reader's state: the last request and prompt of a file, rebuilt record by record.
#[derive(Debug, Default, Clone)]
pub struct RequestState {
    messages: Vec<Value>,
    rest: Map<String, Value>,
    headers: BTreeMap<String, String>,
    seen: bool,
}

impl RequestState {
    /// Applies a record's `request` delta given as a JSON value (see
    /// [`RequestState::apply_delta`]).
    ///
    /// Errors: a malformed delta, or one that refers past the stored messages or prompt.
    pub fn apply(&mut self, delta: &Value, prompt: &str) -> Result<(), String> {
        let delta: RequestDelta = serde_json::to_string(delta)
            .and_then(|text| serde_json::from_str(&text))
            .map_err(|e| format!("request delta: {e}"))?;
        self.apply_delta(&delta, prompt)
    }

    /// Applies a record's `request` delta; `prompt` is the record's full prompt.
    ///
    /// Errors: a delta whose `rest` is not an object, or one that refers past the stored
    /// messages or prompt.
    pub fn apply_delta(&mut self, delta: &RequestDelta, prompt: &str) -> Result<(), String> {
        let rest: Option<Map<String, Value>> = delta
            .rest
            .as_ref()
            .map(|r| serde_json::from_str(r.get()))
            .transpose()
            .map_err(|e| format!("request delta: {e}"))?;
        if delta.messages_from > self.messages.len() {
            return Err(format!(
                "request delta keeps {} messages of {}",
                delta.messages_from,
                self.messages.len()
            ));
        }
        let mut messages = delta
            .messages
            .iter()
            .map(|m| serde_json::from_str::<Value>(m.get()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("request delta: {e}"))?;
        for r in &delta.content_refs {
            let message = messages
                .get_mut(r.message)
                .ok_or_else(|| format!("content ref to message {} of a delta", r.message))?;
            r.put(message, prompt)?;
        }
        self.messages.truncate(delta.messages_from);
        self.messages.extend(messages);
        if let Some(rest) = rest {
            self.rest = rest;
        }
        if let Some(headers) = &delta.headers {
            self.headers = headers.clone();
        }
        self.seen = true;
        Ok(())
    }

    /// Whether any request was read yet.
    pub fn is_known(&self) -> bool {
        self.seen
    }

    /// The full request body.
    pub fn body(&self) -> Value {
        let mut body = self.rest.clone();
        body.insert("messages".into(), Value::Array(self.messages.clone()));
        Value::Object(body)
    }

    /// The messages of the request.
    pub fn messages(&self) -> &[Value] {
        &self.messages
    }

    /// A header the proxy read (`x-asap-task`, `x-asap-run`).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}
