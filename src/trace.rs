//! Trace log: one JSONL file per session, `{log_dir}/{session}.jsonl`.
//!
//! Each line is an envelope `{"type": "session" | "step", "data": {…}}`. The `session` record
//! comes first (written when the file is created); then one `step` record per completion
//! call. Every record is serialised whole and appended with one `write` on an `O_APPEND` file
//! descriptor, so concurrent writers never interleave lines; a reader must skip a torn last
//! line (a crash mid-write). API keys are never written.
//!
//! Prompts are stored as deltas: `prompt.prefix_bytes` bytes of the previous step's prompt
//! (which ended with `## Thinking\n`, excluded) followed by `prompt.delta`; so
//! `prompt(n) = prompt(n-1)[..prefix_bytes] + delta`. `prefix_bytes` is 0 on the first step
//! (the delta is the whole prompt). `prompt.sha256` is the hex SHA-256 of the full prompt.
//! Times are milliseconds (floating point) or Unix milliseconds (`time_ms`).

use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::backend::BackendCompletion;
use crate::conversation::Action;
use crate::openai::response::ToolCallOut;
use crate::parse::{ParseFailure, Parsed};
use crate::pipeline::{PrefixInfo, Prepared};
use crate::policy::Termination;
use crate::respond::Reply;
use crate::session::{NudgeKind, SessionId};

/// Writes trace records; cheap to share.
#[derive(Debug, Clone)]
pub struct TraceWriter {
    dir: PathBuf,
    format: String,
    backend: String,
}

#[derive(Serialize)]
struct Envelope<'a, T: Serialize> {
    r#type: &'static str,
    data: &'a T,
}

/// First record of a session file.
#[derive(Debug, Serialize)]
pub struct SessionRecord {
    pub session: String,
    pub profile: String,
    pub format: String,
    pub backend: String,
    /// The reference prefix rendered (id, how it matched, K), if any.
    pub prefix: Option<PrefixInfo>,
    /// The first user message of the session's first request (what identifies the task;
    /// `prefix build` uses it as the prefix's `task_text`).
    pub task_text: String,
    /// The explicit task id of the request (`X-ASAP-Task`, `metadata.instance_id`), if any.
    pub instance_id: Option<String>,
    pub proxy_version: &'static str,
    pub time_ms: u64,
}

/// The prompt of a step, as a delta against the previous step's.
#[derive(Debug, Serialize)]
pub struct PromptRecord {
    pub prefix_bytes: usize,
    pub delta: String,
    pub sha256: String,
    pub bytes: usize,
}

/// What the parser made of the completion.
#[derive(Debug, Serialize)]
pub struct ParseRecord {
    pub thought: String,
    pub action: Option<Action>,
    pub error: Option<ParseFailure>,
    pub dropped_bytes: usize,
    pub notes: Vec<String>,
}

/// A rejected output: the nudge, the action it rejected, the hint shown.
#[derive(Debug, Serialize)]
pub struct NudgeRecord {
    pub kind: NudgeKind,
    pub rejected: Option<Action>,
    pub hint: String,
}

/// What was sent to the client.
#[derive(Debug, Serialize)]
pub struct ResponseRecord {
    pub content: Option<String>,
    pub tool_call: Option<ToolCallOut>,
    pub finish_reason: &'static str,
}

/// Milliseconds spent per stage.
#[derive(Debug, Default, Serialize)]
pub struct Timings {
    pub render_ms: f64,
    pub backend_ms: f64,
    pub parse_ms: f64,
    pub total_ms: f64,
}

/// One completion call.
#[derive(Debug, Serialize)]
pub struct StepRecord {
    pub session: String,
    /// 0-based step index: actions in the history (a requery of a failed turn keeps it).
    pub step: usize,
    /// Completion call within the request: 0, then 1 and 2 after nudges.
    pub attempt: usize,
    pub time_ms: u64,
    pub profile: String,
    pub stream: bool,
    /// Top-level request fields the proxy did not interpret.
    pub ignored_fields: Vec<String>,
    pub prompt: PromptRecord,
    /// The backend's answer; its `finish_reason` is the backend's, not the one sent.
    pub completion: Option<BackendCompletion>,
    pub parse: Option<ParseRecord>,
    pub response: Option<ResponseRecord>,
    /// Set when this completion was rejected and generated again (no response was sent).
    pub nudge: Option<NudgeRecord>,
    /// Set on a side call (a summary or question request served as plain prose): its kind.
    pub side_call: Option<&'static str>,
    /// Set when a rule ended the trajectory with this completion.
    pub termination: Option<Termination>,
    /// The reference prefix rendered (id, how it matched, K), if any.
    pub prefix: Option<PrefixInfo>,
    /// First user message and explicit task id, for the session record only.
    #[serde(skip)]
    pub task: (String, Option<String>),
    /// Nudges used in the session before this completion, in order: kind and place.
    pub nudges_used: Vec<(NudgeKind, usize)>,
    /// The error returned to the client, when the step failed.
    pub error: Option<String>,
    pub timings: Timings,
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl StepRecord {
    /// A record for a prepared step; `previous_prompt` is the prior step's prompt without the
    /// trailing cue.
    pub fn new(
        session: &SessionId,
        step: usize,
        attempt: usize,
        prepared: &Prepared,
        previous_prompt: Option<&str>,
    ) -> Self {
        let prompt = &prepared.prompt;
        let prefix_bytes = previous_prompt
            .filter(|p| prompt.starts_with(p))
            .map_or(0, str::len);
        Self {
            session: session.to_string(),
            step,
            attempt,
            time_ms: unix_ms(),
            profile: prepared.tools.profile.clone(),
            stream: false,
            ignored_fields: Vec::new(),
            prompt: PromptRecord {
                prefix_bytes,
                delta: prompt[prefix_bytes..].to_string(),
                sha256: format!("{:x}", Sha256::digest(prompt.as_bytes())),
                bytes: prompt.len(),
            },
            completion: None,
            parse: None,
            response: None,
            nudge: None,
            side_call: None,
            termination: None,
            nudges_used: prepared.session.nudges.0.clone(),
            prefix: prepared.prefix.clone(),
            task: (String::new(), None),
            error: None,
            timings: Timings::default(),
        }
    }

    /// Fills the completion and parse parts.
    pub fn set_parse(&mut self, completion: &BackendCompletion, parsed: &Parsed) {
        self.completion = Some(completion.clone());
        self.parse = Some(ParseRecord {
            thought: parsed.thought.clone(),
            action: parsed.outcome.as_ref().ok().cloned(),
            error: parsed.outcome.as_ref().err().cloned(),
            dropped_bytes: parsed.dropped_bytes,
            notes: parsed.notes.clone(),
        });
    }

    /// Fills the response part only (a reply made without calling the model).
    pub fn set_response(&mut self, reply: &Reply) {
        self.response = Some(ResponseRecord {
            content: reply.content.clone(),
            tool_call: reply.tool_call.clone(),
            finish_reason: reply.finish_reason,
        });
    }

    /// Fills the completion, parse and response parts.
    pub fn set_completion(
        &mut self,
        completion: &BackendCompletion,
        parsed: &Parsed,
        reply: &Reply,
    ) {
        self.set_parse(completion, parsed);
        self.response = Some(ResponseRecord {
            content: reply.content.clone(),
            tool_call: reply.tool_call.clone(),
            finish_reason: reply.finish_reason,
        });
    }
}

impl TraceWriter {
    /// Writer into `dir` (created on first write).
    pub fn new(dir: PathBuf, format: String, backend: String) -> Self {
        Self {
            dir,
            format,
            backend,
        }
    }

    /// The file of a session.
    pub fn path(&self, session: &SessionId) -> PathBuf {
        self.dir.join(format!("{session}.jsonl"))
    }

    /// Appends a step record (and the session record first, for a new file). Failures are
    /// logged, never returned: a full disk must not fail the scaffold's request.
    pub async fn write_step(&self, session: &SessionId, record: StepRecord) {
        let writer = self.clone();
        let session = session.clone();
        let result =
            tokio::task::spawn_blocking(move || writer.write_blocking(&session, &record)).await;
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(error = %e, dir = %self.dir.display(), "writing trace record failed")
            }
            Err(e) => tracing::error!(error = %e, "trace writer task failed"),
        }
    }

    fn write_blocking(&self, session: &SessionId, record: &StepRecord) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let path = self.path(session);
        let mut buf = Vec::new();
        let fresh = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .is_ok();
        if fresh {
            let header = SessionRecord {
                session: session.to_string(),
                profile: record.profile.clone(),
                format: self.format.clone(),
                backend: self.backend.clone(),
                prefix: record.prefix.clone(),
                task_text: record.task.0.clone(),
                instance_id: record.task.1.clone(),
                proxy_version: env!("CARGO_PKG_VERSION"),
                time_ms: unix_ms(),
            };
            serde_json::to_writer(
                &mut buf,
                &Envelope {
                    r#type: "session",
                    data: &header,
                },
            )?;
            buf.push(b'\n');
        }
        serde_json::to_writer(
            &mut buf,
            &Envelope {
                r#type: "step",
                data: record,
            },
        )?;
        buf.push(b'\n');
        let mut file = std::fs::OpenOptions::new().append(true).open(&path)?;
        file.write_all(&buf)
    }
}
