//! Reading trace files: envelopes in file order, with each step's full prompt and request
//! rebuilt from the deltas ([`super::delta`]).
//!
//! A last line without its newline is a write cut short by a crash: it is skipped and
//! reported in [`TraceReader::torn_tail`]. Other lines that are not valid records are skipped
//! and listed in [`TraceReader::invalid_lines`] (1-based), so one bad line never hides a
//! session. A record spread over several lines (older writers copied a pretty-printed
//! request's line breaks into it) is joined back and read as one, numbered by its first line.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::value::RawValue;

use super::delta::RequestState;
use super::{NudgeRecord, SessionRecord, StepRecord, TerminateRecord, SCHEMA_VERSION};
use crate::util::sha256_hex;

/// A path given to [`trace_files`] that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("reading {path}: {source}")]
pub struct TraceFilesError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Every trace file (`*.jsonl`, `*.jsonl.zst`) under `paths` (files are taken as given; directories are searched
/// recursively, symbolic links followed), sorted, each file once: a file reached by several
/// paths (a path given twice, a file inside a directory also given, a link) is read once, and
/// a directory already searched (a link loop) is not searched again.
///
/// Errors: a path that cannot be read.
pub fn trace_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, TraceFilesError> {
    let mut found = Vec::new();
    let mut dirs = HashSet::new();
    for path in paths {
        collect(path, &mut found, &mut dirs)?;
    }
    found.sort();
    let mut seen = HashSet::new();
    Ok(found
        .into_iter()
        .filter(|path| seen.insert(std::fs::canonicalize(path).unwrap_or_else(|_| path.clone())))
        .collect())
}

/// Whether `path` names a trace file: `*.jsonl`, or `*.jsonl.zst` (compressed).
pub fn is_trace_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.ends_with(".jsonl") || name.ends_with(".jsonl.zst")
}

/// The name of a trace file without `.jsonl` or `.jsonl.zst` (a session id, for files the
/// writer made); the file stem for other names.
pub fn trace_stem(path: &Path) -> &str {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.strip_suffix(".jsonl.zst")
        .or_else(|| name.strip_suffix(".jsonl"))
        .or_else(|| path.file_stem().and_then(|s| s.to_str()))
        .unwrap_or("")
}

fn collect(
    path: &Path,
    files: &mut Vec<PathBuf>,
    dirs: &mut HashSet<PathBuf>,
) -> Result<(), TraceFilesError> {
    let io = |source| TraceFilesError {
        path: path.to_path_buf(),
        source,
    };
    if !path.is_dir() {
        std::fs::metadata(path).map_err(io)?;
        files.push(path.to_path_buf());
        return Ok(());
    }
    if !dirs.insert(std::fs::canonicalize(path).map_err(io)?) {
        return Ok(());
    }
    for entry in std::fs::read_dir(path).map_err(io)? {
        let entry = entry.map_err(io)?;
        let child = entry.path();
        if child.is_dir() {
            collect(&child, files, dirs)?;
        } else if is_trace_file(&child) {
            files.push(child);
        }
    }
    Ok(())
}

/// The first bytes of a zstd frame (RFC 8878 section 3.1.1): a compressed trace file
/// (`--trace-compression zstd`) starts with them, a plain one with `{`.
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// A compressed trace file read frame by frame (each record is one frame): the text of the
/// frames that decode, and where the last of them ends. A frame that does not decode (a
/// record cut short by a failed write, then more records after it) is skipped up to the next
/// frame's magic number and marked by a line no reader takes for a record (`invalid_lines`),
/// so what follows is still read; a cut-short last frame is a torn last line (reported and
/// skipped as in a plain file). Frames carry a checksum, so damage is found, not decoded as
/// text.
pub fn zstd_frames(bytes: &[u8]) -> (Vec<u8>, usize) {
    let mut text = Vec::with_capacity(bytes.len() * 6);
    let mut at = 0;
    let mut good_end = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        if let Ok(len) = zstd::zstd_safe::find_frame_compressed_size(rest) {
            if len > 0 && len <= rest.len() {
                if let Ok(out) = zstd::stream::decode_all(&rest[..len]) {
                    text.extend_from_slice(&out);
                    at += len;
                    good_end = at;
                    continue;
                }
            }
        }
        match memchr::memmem::find(&rest[1..], &ZSTD_MAGIC) {
            Some(next) => {
                text.extend_from_slice(b"\n(a damaged zstd frame was skipped here)\n");
                at += 1 + next;
            }
            None => {
                // The last frame, cut short (even by its checksum alone: the writer cuts it
                // off too): a last line without its newline, which the reader reports as a
                // torn tail and skips.
                text.extend_from_slice(b"(a zstd frame cut short)");
                break;
            }
        }
    }
    (text, good_end)
}

/// The text of a compressed trace file ([`zstd_frames`]).
pub fn zstd_text(bytes: &[u8]) -> Vec<u8> {
    zstd_frames(bytes).0
}

/// The first line of a trace file (its session record), plain or compressed; `None` when
/// the file cannot be read or has no line.
pub fn first_line(path: &Path) -> Option<Vec<u8>> {
    use std::io::{BufRead, BufReader, Read};
    let mut file = std::fs::File::open(path).ok()?;
    let mut magic = [0u8; 4];
    let n = file.read(&mut magic).ok()?;
    let head = std::io::Cursor::new(magic[..n].to_vec()).chain(file);
    let mut line = Vec::new();
    if magic == ZSTD_MAGIC {
        let decoder = zstd::stream::read::Decoder::new(head).ok()?;
        BufReader::new(decoder).read_until(b'\n', &mut line).ok()?;
    } else {
        BufReader::new(head).read_until(b'\n', &mut line).ok()?;
    }
    Some(line)
}

/// Errors reading a trace file.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

/// One record: its envelope fields and its typed `data`.
#[derive(Debug, Clone)]
pub struct Record {
    /// 1-based line number in the file.
    pub line: usize,
    pub time_ms: u64,
    pub body: Body,
}

/// A record's `data`, typed by the envelope's `type` (the schema of [`super`]).
#[derive(Debug, Clone)]
pub enum Body {
    Session(Box<SessionRecord>),
    Step(Box<StepRecord>),
    /// A [`StepRecord`] with its `kind`.
    SideCall(Box<StepRecord>),
    Nudge(Box<NudgeRecord>),
    Terminate(Box<TerminateRecord>),
    /// A `type` this build does not know (a newer build's): skipped by every reader.
    Other(String),
    /// A `session`, `nudge` or `terminate` record whose `data` does not fit the schema:
    /// its type and why (readers skip it; a `step` or `side_call` that does not fit is an
    /// error of [`TraceReader::next_record`] instead, as its prompt cannot be rebuilt).
    Invalid {
        kind: String,
        message: String,
    },
}

impl Record {
    /// The envelope's `type`: `session`, `step`, `nudge`, `terminate`, `side_call`, or
    /// another one (see [`Body::Other`]).
    pub fn kind(&self) -> &str {
        match &self.body {
            Body::Session(_) => "session",
            Body::Step(_) => "step",
            Body::SideCall(_) => "side_call",
            Body::Nudge(_) => "nudge",
            Body::Terminate(_) => "terminate",
            Body::Other(kind) | Body::Invalid { kind, .. } => kind,
        }
    }

    /// The typed `data` serialised again (what the writer writes for a current record;
    /// `null` for [`Body::Other`] and [`Body::Invalid`]).
    pub fn data(&self) -> serde_json::Value {
        let value = match &self.body {
            Body::Session(r) => serde_json::to_value(r),
            Body::Step(r) | Body::SideCall(r) => serde_json::to_value(r),
            Body::Nudge(r) => serde_json::to_value(r),
            Body::Terminate(r) => serde_json::to_value(r),
            Body::Other(_) | Body::Invalid { .. } => Ok(serde_json::Value::Null),
        };
        value.unwrap_or_default()
    }

    /// The completion call of a `step` or `side_call` record.
    pub fn call(&self) -> Option<&StepRecord> {
        match &self.body {
            Body::Step(step) | Body::SideCall(step) => Some(step),
            _ => None,
        }
    }
}

/// Reads one session file record by record.
#[derive(Debug)]
pub struct TraceReader {
    path: PathBuf,
    records: std::vec::IntoIter<Record>,
    /// The full prompt of the last `step` record (the base of the next prompt delta).
    chain: String,
    /// The full prompt of the last side call, when the last prompt-bearing record was one.
    side_prompt: Option<String>,
    request: RequestState,
    invalid_lines: Vec<usize>,
    torn_tail: bool,
    session: Option<(SessionRecord, u64)>,
}

impl TraceReader {
    /// Opens and splits a file.
    ///
    /// Errors: the file cannot be read, or a record has a newer schema version.
    pub fn open(path: &Path) -> Result<Self, ReadError> {
        let bytes = std::fs::read(path).map_err(|source| ReadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_bytes(path, &bytes)
    }

    /// As [`TraceReader::open`], from the file's bytes.
    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Self, ReadError> {
        Self::read(path, bytes, false)
    }

    /// As [`TraceReader::from_bytes`], also reading the unversioned first layout (records
    /// without `v`, written before schema version 1): `time_ms` inside `data` instead of the
    /// envelope, and a `step` record's `nudge` or `termination` object (non-null) instead of
    /// its `decision` (`nudge`, `terminate`; else `accept`). Only `prefix build` reads that
    /// layout; for every other reader such lines are not records ([`Self::invalid_lines`]).
    pub fn from_bytes_with_unversioned(path: &Path, bytes: &[u8]) -> Result<Self, ReadError> {
        Self::read(path, bytes, true)
    }

    fn read(path: &Path, bytes: &[u8], unversioned: bool) -> Result<Self, ReadError> {
        let text;
        let bytes = if bytes.starts_with(&ZSTD_MAGIC) {
            text = zstd_text(bytes);
            &text[..]
        } else {
            bytes
        };
        let mut records = Vec::new();
        let mut invalid_lines = Vec::new();
        let mut torn_tail = false;
        let complete = bytes.ends_with(b"\n");
        let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
        let last = lines.len().saturating_sub(1);
        // Byte offset of each line's start.
        let starts: Vec<usize> = lines
            .iter()
            .scan(0, |at, line| {
                let start = *at;
                *at += line.len() + 1;
                Some(start)
            })
            .collect();
        let mut i = 0;
        while i < lines.len() {
            let line = lines[i];
            if line.iter().all(u8::is_ascii_whitespace) {
                i += 1;
                continue;
            }
            let mut parsed = parse_envelope(line, unversioned);
            let mut next = i + 1;
            if parsed.is_none() && i != last {
                if let Some(end) = spread_record_end(&lines, i) {
                    let text = &bytes[starts[i]..starts[end] + lines[end].len()];
                    if let Some(record) = parse_envelope(text, unversioned) {
                        parsed = Some(record);
                        next = end + 1;
                    }
                }
            }
            match parsed {
                Some(Ok(record)) => records.push(Record {
                    line: i + 1,
                    ..record
                }),
                Some(Err(v)) => {
                    return Err(ReadError::Invalid {
                        path: path.to_path_buf(),
                        line: i + 1,
                        message: format!(
                            "schema version {v} is newer than this reader's {SCHEMA_VERSION}"
                        ),
                    })
                }
                None if i == last && !complete => torn_tail = true,
                None => invalid_lines.push(i + 1),
            }
            i = next;
        }
        let session = records.iter().find_map(|r| match &r.body {
            Body::Session(s) => Some(((**s).clone(), r.time_ms)),
            _ => None,
        });
        Ok(Self {
            path: path.to_path_buf(),
            records: records.into_iter(),
            chain: String::new(),
            side_prompt: None,
            request: RequestState::default(),
            invalid_lines,
            torn_tail,
            session,
        })
    }

    /// The file's `session` record, if it has one.
    pub fn session(&self) -> Option<&SessionRecord> {
        self.session.as_ref().map(|(s, _)| s)
    }

    /// The `time_ms` of the file's `session` record (when the session started).
    pub fn session_time_ms(&self) -> Option<u64> {
        self.session.as_ref().map(|(_, t)| *t)
    }

    /// Lines skipped as invalid (1-based), not counting a torn last line.
    pub fn invalid_lines(&self) -> &[usize] {
        &self.invalid_lines
    }

    /// Whether the last line was cut short (skipped).
    pub fn torn_tail(&self) -> bool {
        self.torn_tail
    }

    /// The full prompt of the last `step` or `side_call` record returned.
    pub fn prompt(&self) -> &str {
        self.side_prompt.as_deref().unwrap_or(&self.chain)
    }

    /// The request of the last record returned that carries one (rebuilt).
    pub fn request(&self) -> &RequestState {
        &self.request
    }

    /// The full prompt of the last `step` record returned (what the next `step` record's
    /// prompt delta extends; empty before the first).
    pub fn chain_prompt(&self) -> &str {
        &self.chain
    }

    /// What the file's records leave for a next record to extend ([`super::delta::FileChain`]):
    /// every record read; `None` when one does not rebuild.
    pub fn into_chain(mut self) -> Option<super::delta::FileChain> {
        while let Some(record) = self.next_record() {
            record.ok()?;
        }
        Some(super::delta::FileChain {
            prompt: std::mem::take(&mut self.chain),
            request: self.request,
        })
    }

    /// The next record; for `step` and `side_call` records the prompt and request are
    /// rebuilt first (see [`TraceReader::prompt`], [`TraceReader::request`]).
    ///
    /// Errors: a delta that does not apply, or a prompt whose SHA-256 does not match.
    pub fn next_record(&mut self) -> Option<Result<Record, ReadError>> {
        let record = self.records.next()?;
        let result = match &record.body {
            Body::Invalid { kind, message } if kind == "step" || kind == "side_call" => {
                Err(message.clone())
            }
            Body::Step(step) => self.rebuild(step, false),
            Body::SideCall(step) => self.rebuild(step, true),
            _ => Ok(()),
        };
        Some(match result {
            Ok(()) => Ok(record),
            Err(message) => Err(ReadError::Invalid {
                path: self.path.clone(),
                line: record.line,
                message,
            }),
        })
    }

    fn rebuild(&mut self, record: &StepRecord, side_call: bool) -> Result<(), String> {
        let Some(prompt) = &record.prompt else {
            return Ok(());
        };
        let prefix_bytes = prompt.prefix_bytes;
        let base = self.chain.get(..prefix_bytes).ok_or_else(|| {
            format!("prompt delta keeps {prefix_bytes} bytes of a shorter prompt")
        })?;
        let full = format!("{base}{}", prompt.delta);
        if !prompt.sha256.is_empty() && sha256_hex(full.as_bytes()) != prompt.sha256 {
            return Err("rebuilt prompt does not match its sha256".into());
        }
        if side_call {
            self.side_prompt = Some(full);
        } else {
            self.chain = full;
            self.side_prompt = None;
        }
        if let Some(request) = &record.request {
            let prompt = self.side_prompt.as_deref().unwrap_or(&self.chain);
            self.request.apply_delta(request, prompt)?;
        }
        Ok(())
    }
}

/// The last line of a record that starts on line `first` and spreads over several lines (as
/// older writers stored a pretty-printed request's top-level fields with the client's line
/// breaks): where the JSON value opened on `first` closes, when that is at the end of a line
/// before the next line that starts a record (`{"v":`). Linear in the lines scanned.
fn spread_record_end(lines: &[&[u8]], first: usize) -> Option<usize> {
    if !lines[first].trim_ascii_start().starts_with(b"{") {
        return None;
    }
    let mut depth = 0usize;
    let mut strings = super::delta::JsonStrings::default();
    for (j, line) in lines.iter().enumerate().skip(first) {
        if j > first && line.starts_with(b"{\"v\":") {
            return None;
        }
        for (k, &b) in line.iter().enumerate() {
            if strings.inside(b) {
                continue;
            }
            match b {
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth = depth.checked_sub(1)?;
                    if depth == 0 {
                        let rest_blank = line[k + 1..].iter().all(u8::is_ascii_whitespace);
                        return (rest_blank && j > first).then_some(j);
                    }
                }
                _ => {}
            }
        }
    }
    None
}

/// The envelope of a line, its `data` still raw.
#[derive(Deserialize)]
struct RawEnvelope<'a> {
    v: u64,
    r#type: std::borrow::Cow<'a, str>,
    #[serde(default)]
    time_ms: Option<serde_json::Value>,
    #[serde(borrow)]
    data: &'a RawValue,
}

/// A line of the unversioned first layout: no `v` (one that has a `v` is not of this layout).
#[derive(Deserialize)]
struct RawUnversioned<'a> {
    #[serde(default)]
    v: Option<serde::de::IgnoredAny>,
    r#type: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    data: &'a RawValue,
}

/// What the unversioned first layout kept in `data` that version 1 keeps elsewhere.
#[derive(Deserialize, Default)]
struct UnversionedData {
    #[serde(default)]
    time_ms: Option<u64>,
    #[serde(default)]
    nudge: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    termination: Option<serde::de::IgnoredAny>,
}

/// `None`: not a record; `Some(Err(v))`: a record of a newer schema version `v`. With
/// `unversioned`, a line without `v` is read as the first layout
/// ([`TraceReader::from_bytes_with_unversioned`]).
fn parse_envelope(line: &[u8], unversioned: bool) -> Option<Result<Record, u64>> {
    let (kind, time_ms, data, first_layout) = match serde_json::from_slice::<RawEnvelope>(line) {
        Ok(envelope) => {
            if envelope.v > u64::from(SCHEMA_VERSION) {
                return Some(Err(envelope.v));
            }
            let time_ms = envelope
                .time_ms
                .as_ref()
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            (envelope.r#type, time_ms, envelope.data, None)
        }
        Err(_) if unversioned => {
            let raw: RawUnversioned = serde_json::from_slice(line).ok()?;
            if raw.v.is_some() {
                return None;
            }
            let old: UnversionedData = serde_json::from_str(raw.data.get()).unwrap_or_default();
            (raw.r#type, old.time_ms.unwrap_or(0), raw.data, Some(old))
        }
        Err(_) => return None,
    };
    let data = data.get();
    fn typed<T: serde::de::DeserializeOwned>(data: &str) -> Result<Box<T>, String> {
        serde_json::from_str(data).map_err(|e| format!("record data: {e}"))
    }
    let mut body = match &*kind {
        "session" => typed(data).map(Body::Session),
        "step" => typed(data).map(Body::Step),
        "side_call" => typed(data).map(Body::SideCall),
        "nudge" => typed(data).map(Body::Nudge),
        "terminate" => typed(data).map(Body::Terminate),
        other => Ok(Body::Other(other.to_string())),
    }
    .unwrap_or_else(|message| Body::Invalid {
        kind: kind.to_string(),
        message,
    });
    if let (Some(old), Body::Step(step) | Body::SideCall(step)) = (first_layout, &mut body) {
        if old.termination.is_some() {
            step.decision = super::StepDecision::Terminate;
        } else if old.nudge.is_some() {
            step.decision = super::StepDecision::Nudge;
        }
    }
    Some(Ok(Record {
        line: 0,
        time_ms,
        body,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_spread_over_lines_is_joined_and_bad_lines_stay_skipped() {
        let text = concat!(
            "{\"v\":1,\"type\":\"session\",\"time_ms\":1,\"data\":{}}\n",
            // An older writer's step: the request's `rest` with the client's CRLF and tabs.
            "{\"v\":1,\"type\":\"step\",\"time_ms\":2,\"data\":{\"prompt\":{\"prefix_bytes\":0,\"delta\":\"p\"},",
            "\"request\":{\"messages_from\":0,\"messages\":[{\"role\":\"user\",\"content\":\"a\\nb\"}],\"rest\":{\r\n",
            "\t\"tools\": [\r\n",
            "\t\t{\"x\": \"} ]\\\"\"}\r\n",
            "\t]\r\n",
            "}}}}\n",
            "not json\n",
            // Cut short, then a record: the cut line stays one invalid line.
            "{\"v\":1,\"type\":\"step\",\"data\":{\"x\":[\n",
            "{\"v\":1,\"type\":\"terminate\",\"time_ms\":3,\"data\":{}}\n",
            "{\"v\":1,\"type\":\"nudge\",\"time_ms\":4,\"da",
        );
        let mut reader = TraceReader::from_bytes(Path::new("t.jsonl"), text.as_bytes()).unwrap();
        assert_eq!(reader.invalid_lines(), [7, 8]);
        assert!(reader.torn_tail());
        let mut kinds = Vec::new();
        while let Some(record) = reader.next_record() {
            let record = record.unwrap();
            kinds.push((record.kind().to_string(), record.line));
            if record.kind() == "step" {
                assert_eq!(
                    reader.request().body(),
                    serde_json::json!({"tools": [{"x": "} ]\""}], "messages": [{"role": "user", "content": "a\nb"}]})
                );
            }
        }
        assert_eq!(
            kinds,
            [
                ("session".to_string(), 1),
                ("step".to_string(), 2),
                ("terminate".to_string(), 9)
            ]
        );
    }
    /// The unversioned first layout is read only on request (`prefix build`): `time_ms` from
    /// `data`, a step's `nudge`/`termination` as its decision. A versioned line reads the same
    /// either way.
    #[test]
    fn the_unversioned_first_layout_reads_only_on_request() {
        let text = concat!(
            "{\"type\":\"session\",\"data\":{\"profile\":\"swe-agent\",\"time_ms\":7}}\n",
            "{\"type\":\"step\",\"data\":{\"step\":0,\"prompt\":{\"prefix_bytes\":0,\"delta\":\"p\"},\"nudge\":null,\"termination\":null}}\n",
            "{\"type\":\"step\",\"data\":{\"step\":1,\"prompt\":{\"prefix_bytes\":1,\"delta\":\"q\"},\"nudge\":{\"kind\":\"repeated_action\"}}}\n",
            "{\"type\":\"step\",\"data\":{\"step\":1,\"attempt\":1,\"prompt\":{\"prefix_bytes\":1,\"delta\":\"r\"},\"nudge\":{},\"termination\":{\"reason\":\"step_cap\"}}}\n",
            "{\"v\":1,\"type\":\"nudge\",\"time_ms\":9,\"data\":{\"kind\":\"repeated_action\"}}\n",
        );
        let path = Path::new("t.jsonl");
        let mut reader = TraceReader::from_bytes(path, text.as_bytes()).unwrap();
        assert_eq!(reader.invalid_lines(), [1, 2, 3, 4]);
        assert!(reader.session().is_none());
        assert_eq!(reader.next_record().unwrap().unwrap().time_ms, 9);
        assert!(reader.next_record().is_none());

        let mut reader = TraceReader::from_bytes_with_unversioned(path, text.as_bytes()).unwrap();
        assert!(reader.invalid_lines().is_empty());
        assert_eq!(reader.session().unwrap().profile, "swe-agent");
        assert_eq!(reader.session_time_ms(), Some(7));
        let mut got = Vec::new();
        while let Some(record) = reader.next_record() {
            let record = record.unwrap();
            let decision = record.call().map(|c| c.decision.as_str());
            got.push((record.kind().to_string(), record.time_ms, decision));
            if record.kind() == "step" {
                assert!(["p", "pq", "pr"].contains(&reader.prompt()));
            }
        }
        let step = |decision| ("step".to_string(), 0, Some(decision));
        assert_eq!(
            got,
            [
                ("session".to_string(), 7, None),
                step("accept"),
                step("nudge"),
                step("terminate"),
                ("nudge".to_string(), 9, None),
            ]
        );
    }
}

#[cfg(test)]
mod schema_tests {
    use super::*;

    /// Every record of the committed traces of today's format (tests/fixtures/traces/v1):
    /// typed, serialised again to exactly the stored `data`, and deserialised again to the
    /// same typed record. Covers each record type: session, step, side_call, nudge, terminate.
    #[test]
    fn each_record_type_round_trips_through_the_schema() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/traces/v1");
        let mut kinds = std::collections::BTreeSet::new();
        for path in trace_files(&[dir]).unwrap() {
            let text = std::fs::read_to_string(&path).unwrap();
            for line in text.lines() {
                let stored: serde_json::Value = serde_json::from_str(line).unwrap();
                let record = parse_envelope(line.as_bytes(), false).unwrap().unwrap();
                assert!(!matches!(
                    record.body,
                    Body::Invalid { .. } | Body::Other(_)
                ));
                assert_eq!(record.kind(), stored["type"]);
                let data = record.data();
                assert_eq!(data, stored["data"], "{}: {line}", path.display());
                // Serialised again, it reads back as the same record.
                let again = serde_json::json!({"v": 1, "type": record.kind(), "data": data});
                let reread = parse_envelope(again.to_string().as_bytes(), false)
                    .unwrap()
                    .unwrap();
                assert_eq!(reread.data(), data);
                match (&record.body, &reread.body) {
                    (Body::Session(a), Body::Session(b)) => assert_eq!(a, b),
                    (Body::Nudge(a), Body::Nudge(b)) => assert_eq!(a, b),
                    (Body::Terminate(a), Body::Terminate(b)) => assert_eq!(a, b),
                    (Body::Step(a), Body::Step(b)) | (Body::SideCall(a), Body::SideCall(b)) => {
                        assert_eq!(a.prompt, b.prompt);
                        assert_eq!(a.request, b.request);
                        assert_eq!(a.completion, b.completion);
                        assert_eq!(a.parse, b.parse);
                        assert_eq!(a.response, b.response);
                        assert_eq!(a.timings, b.timings);
                        assert_eq!((a.kind, a.decision), (b.kind, b.decision));
                    }
                    _ => panic!("kind changed"),
                }
                kinds.insert(record.kind().to_string());
            }
        }
        assert_eq!(
            kinds.into_iter().collect::<Vec<_>>(),
            ["nudge", "session", "side_call", "step", "terminate"]
        );
    }

    /// What older traces lack reads with defaults, and names this build does not know do not
    /// fail the record.
    #[test]
    fn older_and_newer_shapes_read() {
        let old_session = r#"{"v":1,"type":"session","time_ms":5,"data":{"task":"t","label":"l","mode":"proxy","prefix":{"id":"p","matched_by":"default","k":2}}}"#;
        let Body::Session(s) = parse_envelope(old_session.as_bytes(), false)
            .unwrap()
            .unwrap()
            .body
        else {
            panic!("not a session")
        };
        assert_eq!(
            (s.rules, s.prefix_source, s.task_text.as_str()),
            (None, None, "")
        );
        assert_eq!(
            s.prefix.unwrap().matched_by,
            crate::trace::MatchedBy::Default
        );
        let retired = r#"{"v":1,"type":"terminate","data":{"step":3,"attempt":0,"reason":"same_action_thrice","window":3,"description":"d","on_terminate":"submit"}}"#;
        let Body::Terminate(t) = parse_envelope(retired.as_bytes(), false)
            .unwrap()
            .unwrap()
            .body
        else {
            panic!("not a terminate")
        };
        assert_eq!(t.termination.name(), "same_action_thrice");
        let newer =
            r#"{"v":1,"type":"terminate","data":{"reason":"a_newer_rule","on_terminate":"x"}}"#;
        let Body::Terminate(t) = parse_envelope(newer.as_bytes(), false)
            .unwrap()
            .unwrap()
            .body
        else {
            panic!("not a terminate")
        };
        assert_eq!((t.termination.name(), t.on_terminate), ("unknown", None));
        let step = r#"{"v":1,"type":"step","data":{"decision":"a_newer_decision","parse":{"action":{"kind":"odd"}}}}"#;
        let Body::Step(s) = parse_envelope(step.as_bytes(), false)
            .unwrap()
            .unwrap()
            .body
        else {
            panic!("not a step")
        };
        assert_eq!(s.decision, crate::trace::StepDecision::Unknown);
        assert!(s.parse.unwrap().action.is_none());
    }
}
