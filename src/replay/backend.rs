//! `--backend replay:DIR` (or `replay:FILE`): answers completion calls from recorded trace
//! logs, so a scaffold re-runs a recorded trajectory offline and deterministically.
//!
//! At start-up every trace file under the path is read ([`crate::trace::read::TraceReader`])
//! and every `step` and `side_call` record that has a `completion` is kept: by the SHA-256 of
//! its prompt, and in file order per recorded session (passthrough sessions are skipped: their
//! completions are chat replies, not continuations). A call is answered:
//! 1. **by prompt**: a recorded call whose prompt has the same SHA-256; among several, one of
//!    the recorded session this live session already follows, at or after its position, else
//!    the first recorded;
//! 2. **by session and step order**: when the prompt matches nothing but an earlier call of
//!    the same live session matched, the next call of that recorded session with the same step,
//!    attempt and side-call kind (a changed observation still gets the recorded answer);
//! 3. otherwise [`ProxyError::ReplayMiss`] (HTTP 502, code `replay_miss`) naming the prompt's
//!    SHA-256 and how many prompts were loaded.
//!
//! The live session → recorded session binding is in memory (one process); generation
//! parameters and stop sequences are ignored (the recorded text already ends where the
//! recorded call stopped).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::backend::{BackendCompletion, CallContext, Recorded};
use crate::error::ProxyError;
use crate::session::SessionId;
use crate::trace::read::TraceReader;
use crate::util::sha256_hex;

/// Live sessions whose binding is kept; past this the map is cleared (a later call of a
/// dropped session is still answered by prompt).
const MAX_LIVE_SESSIONS: usize = 65_536;

/// One recorded completion call.
#[derive(Debug, Clone)]
struct Entry {
    step: usize,
    attempt: usize,
    side_call: Option<String>,
    completion: BackendCompletion,
}

/// The calls of one recorded session (one trace file), in file order.
#[derive(Debug)]
struct RecordedSession {
    /// The trace file, for messages.
    path: PathBuf,
    entries: Vec<Entry>,
}

/// Where a live session stands in the recorded session it follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cursor {
    /// Index into [`ReplayBackend::sessions`].
    session: usize,
    /// Index of the next entry in step order.
    next: usize,
}

/// Recorded completions, indexed (see the module documentation).
#[derive(Debug)]
pub struct ReplayBackend {
    source: PathBuf,
    sessions: Vec<RecordedSession>,
    /// Prompt SHA-256 → (session, entry), in load order.
    by_prompt: HashMap<String, Vec<(usize, usize)>>,
    /// Calls loaded (prompts, counting repeats).
    loaded: usize,
    model: Option<String>,
    live: Mutex<HashMap<SessionId, Cursor>>,
}

impl ReplayBackend {
    /// Reads every `*.jsonl` and `*.jsonl.zst` trace under `source` (a directory, searched recursively, or one
    /// file).
    ///
    /// Errors (HTTP 400 shape, reported at start-up): the path cannot be read, a file cannot be
    /// read or has a newer schema version, or no recorded completion was found. Single records
    /// that cannot be rebuilt are skipped with a warning.
    pub fn load(source: &Path) -> Result<Self, ProxyError> {
        let invalid = |message: String| ProxyError::invalid(format!("replay backend: {message}"));
        let files = crate::trace::read::trace_files(&[source.to_path_buf()])
            .map_err(|e| invalid(e.to_string()))?;
        let mut backend = Self {
            source: source.to_path_buf(),
            sessions: Vec::new(),
            by_prompt: HashMap::new(),
            loaded: 0,
            model: None,
            live: Mutex::new(HashMap::new()),
        };
        let mut models: Vec<(String, usize)> = Vec::new();
        for path in files {
            let mut reader = TraceReader::open(&path).map_err(|e| invalid(e.to_string()))?;
            if reader
                .session()
                .and_then(|s| s.mode)
                .is_some_and(|m| m == crate::trace::SessionMode::Passthrough)
            {
                continue;
            }
            if !reader.invalid_lines().is_empty() {
                tracing::warn!(path = %path.display(), lines = ?reader.invalid_lines(), "replay backend: invalid lines skipped");
            }
            let index = backend.sessions.len();
            let mut entries = Vec::new();
            while let Some(record) = reader.next_record() {
                let record = match record {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!(error = %e, "replay backend: record skipped");
                        continue;
                    }
                };
                let Some(call) = record.call() else {
                    continue;
                };
                let Some(completion) = completion_of(call) else {
                    continue;
                };
                let Some(sha) = call.prompt.as_ref().map(|p| p.sha256.as_str()) else {
                    continue;
                };
                match models.iter_mut().find(|(m, _)| *m == completion.model) {
                    Some((_, n)) => *n += 1,
                    None => models.push((completion.model.clone(), 1)),
                }
                backend
                    .by_prompt
                    .entry(sha.to_string())
                    .or_default()
                    .push((index, entries.len()));
                entries.push(Entry {
                    step: call.step,
                    attempt: call.attempt,
                    side_call: (record.kind() == "side_call")
                        .then(|| call.kind.map_or("side_call", |k| k.as_str()).to_string()),
                    completion,
                });
            }
            backend.loaded += entries.len();
            backend.sessions.push(RecordedSession { path, entries });
        }
        if backend.loaded == 0 {
            return Err(invalid(format!(
                "no recorded completions in {} (expected asap-proxy trace logs, *.jsonl)",
                source.display()
            )));
        }
        // The most frequent model; the first loaded among equals.
        let mut best: Option<(String, usize)> = None;
        for (model, n) in models {
            if best.as_ref().is_none_or(|(_, b)| n > *b) {
                best = Some((model, n));
            }
        }
        backend.model = best.map(|(m, _)| m).filter(|m| !m.is_empty());
        tracing::info!(
            source = %source.display(),
            sessions = backend.sessions.len(),
            prompts = backend.loaded,
            distinct = backend.by_prompt.len(),
            "replay backend loaded"
        );
        Ok(backend)
    }

    /// Completion calls loaded.
    pub fn len(&self) -> usize {
        self.loaded
    }

    /// Whether nothing was loaded (never true for a backend [`ReplayBackend::load`] returned).
    pub fn is_empty(&self) -> bool {
        self.loaded == 0
    }

    /// The model the recorded completions were asked of (the most frequent), for
    /// `GET /v1/models`.
    pub fn model_name(&self) -> Option<String> {
        self.model.clone()
    }

    /// The recorded completion for `prompt` (see the module documentation for the order of
    /// lookups).
    ///
    /// Errors: [`ProxyError::ReplayMiss`] when neither lookup finds one.
    pub fn complete(
        &self,
        prompt: &str,
        call: CallContext<'_>,
    ) -> Result<BackendCompletion, ProxyError> {
        let sha = sha256_hex(prompt.as_bytes());
        let mut live = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let cursor = live.get(call.session).copied();
        let (found, how) = match self.by_prompt(&sha, cursor) {
            Some(found) => (found, "prompt"),
            None => match cursor.and_then(|c| self.by_order(c, call)) {
                Some(found) => (found, "session and step order"),
                None => return Err(self.miss(&sha, cursor, call)),
            },
        };
        if live.len() >= MAX_LIVE_SESSIONS && !live.contains_key(call.session) {
            live.clear();
        }
        live.insert(
            call.session.clone(),
            Cursor {
                session: found.0,
                next: found.1 + 1,
            },
        );
        drop(live);
        let recorded = &self.sessions[found.0];
        let entry = &recorded.entries[found.1];
        tracing::info!(
            session = %call.session,
            step = call.step,
            attempt = call.attempt,
            matched_by = how,
            recorded = %recorded.path.display(),
            recorded_step = entry.step,
            "replayed a recorded completion"
        );
        let mut completion = entry.completion.clone();
        completion.attempts = 1;
        Ok(completion)
    }

    /// A call recorded with this prompt: in the followed session at or after its position,
    /// else anywhere in it, else the first recorded.
    fn by_prompt(&self, sha: &str, cursor: Option<Cursor>) -> Option<(usize, usize)> {
        let candidates = self.by_prompt.get(sha)?;
        if let Some(c) = cursor {
            let in_session = || candidates.iter().filter(|(s, _)| *s == c.session);
            if let Some(found) = in_session().find(|(_, e)| *e >= c.next) {
                return Some(*found);
            }
            if let Some(found) = in_session().next() {
                return Some(*found);
            }
        }
        candidates.first().copied()
    }

    /// The next call of the followed session with the same step, attempt and side-call kind.
    fn by_order(&self, cursor: Cursor, call: CallContext<'_>) -> Option<(usize, usize)> {
        let session = self.sessions.get(cursor.session)?;
        session
            .entries
            .iter()
            .enumerate()
            .skip(cursor.next)
            .find(|(_, e)| {
                e.step == call.step
                    && e.attempt == call.attempt
                    && e.side_call.as_deref() == call.side_call
            })
            .map(|(i, _)| (cursor.session, i))
    }

    fn miss(&self, sha: &str, cursor: Option<Cursor>, call: CallContext<'_>) -> ProxyError {
        let why = match cursor.and_then(|c| self.sessions.get(c.session)) {
            Some(recorded) => format!(
                "the recorded session this session follows ({}) has no later call for step {} \
                 attempt {}",
                recorded.path.display(),
                call.step,
                call.attempt
            ),
            None => "no earlier call of this session matched a recorded session, so there is no \
                     step order to fall back on"
                .to_string(),
        };
        ProxyError::ReplayMiss(format!(
            "prompt sha256 {sha} matches none of the {} recorded prompts loaded from {}; {why}",
            self.loaded,
            self.source.display()
        ))
    }
}

/// The recorded `completion` of a call, as the backend answered it (the proxy's `closer`
/// is recomputed by the replayed turn; one HTTP attempt).
fn completion_of(call: &crate::trace::StepRecord) -> Option<BackendCompletion> {
    let c = call.completion.as_ref()?;
    Some(BackendCompletion {
        closer: None,
        attempts: 1,
        ..c.clone()
    })
}

impl Recorded for ReplayBackend {
    fn complete(
        &self,
        prompt: &str,
        call: CallContext<'_>,
    ) -> Result<BackendCompletion, ProxyError> {
        ReplayBackend::complete(self, prompt, call)
    }

    fn model_name(&self) -> Option<String> {
        ReplayBackend::model_name(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn line(kind: &str, data: Value) -> String {
        json!({"v": 1, "type": kind, "session": "aaaaaaaaaaaa", "time_ms": 0, "data": data})
            .to_string()
            + "\n"
    }

    fn step(step: usize, attempt: usize, prompt: &str, text: &str) -> String {
        line(
            "step",
            json!({
                "step": step, "attempt": attempt,
                "prompt": {"prefix_bytes": 0, "delta": prompt, "sha256": sha256_hex(prompt.as_bytes()), "bytes": prompt.len()},
                "completion": {"text": text, "finish_reason": "stop", "matched_stop": null, "usage": null, "model": "m", "attempts": 1},
            }),
        )
    }

    fn backend() -> (tempfile::TempDir, ReplayBackend) {
        let dir = tempfile::tempdir().unwrap();
        let text = line("session", json!({"mode": "proxy"}))
            + &step(0, 0, "P0", "a0")
            + &step(1, 0, "P1", "a1")
            + &step(1, 0, "P1b", "a1-requery")
            + &step(2, 0, "P2", "a2");
        std::fs::write(dir.path().join("aaaaaaaaaaaa.jsonl"), text).unwrap();
        let passthrough = line("session", json!({"mode": "passthrough"})) + &step(0, 0, "P0", "x");
        std::fs::write(dir.path().join("bbbbbbbbbbbb.jsonl"), passthrough).unwrap();
        let backend = ReplayBackend::load(dir.path()).unwrap();
        (dir, backend)
    }

    fn call(session: &SessionId, step: usize) -> CallContext<'_> {
        CallContext {
            session,
            step,
            attempt: 0,
            side_call: None,
        }
    }

    #[test]
    fn answers_by_prompt_then_by_session_and_step_order() {
        let (_dir, b) = backend();
        assert_eq!(b.len(), 4, "passthrough sessions are not loaded");
        assert_eq!(b.model_name().as_deref(), Some("m"));
        let live = SessionId::mint();
        assert_eq!(b.complete("P0", call(&live, 0)).unwrap().text, "a0");
        // A changed observation: the prompt is unknown, the step order answers.
        assert_eq!(b.complete("P1 changed", call(&live, 1)).unwrap().text, "a1");
        assert_eq!(
            b.complete("P1b changed", call(&live, 1)).unwrap().text,
            "a1-requery",
            "a requery of the same step gets the next recorded call"
        );
        assert_eq!(b.complete("P2", call(&live, 2)).unwrap().text, "a2");
        let err = b.complete("P3", call(&live, 3)).unwrap_err();
        assert_eq!(err.body().error.code, "replay_miss");
    }

    #[test]
    fn unknown_first_prompt_is_a_clear_miss() {
        let (_dir, b) = backend();
        let live = SessionId::mint();
        let err = b.complete("nothing like it", call(&live, 0)).unwrap_err();
        let message = err.to_string();
        let sha = sha256_hex(b"nothing like it");
        assert!(message.contains(&sha), "{message}");
        assert!(message.contains("4 recorded prompts"), "{message}");
        assert_eq!(err.status().as_u16(), 502);
    }

    #[test]
    fn an_empty_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = ReplayBackend::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("no recorded completions"), "{err}");
    }
}
