//! Trace log: one JSONL file per session, `{log_dir}/{session}.jsonl`; the full contract is
//! `docs/trace-format.md` (schema version [`SCHEMA_VERSION`]).
//!
//! Every line is one [`Envelope`]: `{"v": 1 (or 2), "type": …, "session": …, "time_ms": …, "data":
//! {…}}`. Types, in the order they appear:
//! - `session` ([`SessionRecord`]): first line of a file: task, run index, label, profile,
//!   format, prefix and its source, termination rules, backend, config digest.
//! - `step` ([`StepRecord`]): one completion call: the request as a delta, the prompt as a
//!   delta, the raw completion, the parse, the decision, the response, timings.
//! - `nudge` ([`NudgeRecord`]): follows the `step` whose output a nudge rejected.
//! - `terminate` ([`TerminateRecord`]): follows the `step` with which a rule ended the
//!   trajectory.
//! - `side_call` ([`StepRecord`] with `kind`): a summary or question request served as prose.
//!
//! Durability: every record is serialised whole and appended with one `write` on an
//! `O_APPEND` descriptor, so concurrent writers never interleave lines and a `kill -9` loses
//! at most the records in flight; a reader skips a torn last line ([`read`]). API keys are
//! never written.
//!
//! Size: prompts and requests are stored as deltas (see [`delta`]), so a 100-step log grows
//! linearly with the trajectory, not quadratically.

pub mod delta;
mod lenient;
pub mod read;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::backend::BackendCompletion;
use crate::openai::chat::TaskSource;
use crate::openai::response::FinishReason;
use crate::parse::{ParseFailure, Parsed};
use crate::policy::{Limits, LoopRule, Termination};
use crate::profile::Action;
use crate::respond::Reply;
use crate::session::{NudgeKind, SessionId};
use crate::util::{sha256_hex, unix_ms};

/// The newest version of the record layout this build writes and reads; bumped on any
/// incompatible change. Each record is written with the lowest version whose readers read it
/// right (docs/trace-format.md "Version policy"): for a `step` or `side_call` record, 3 when
/// its request has a content reference to a part of a list content, else 2 when it has one
/// with text around its range ([`delta::RequestDelta::schema_version`]); else 1.
pub const SCHEMA_VERSION: u32 = 3;

/// Sessions whose delta state the writer keeps by default, the least recently written one
/// evicted first. A state is a few KiB (the prompt's tail after its last full block and
/// digests), so this bounds it to about 6-8 MB: 4 times the default `--max-concurrency`,
/// so the sessions still running keep theirs. Small on purpose: the soak (docs/reliability.md
/// section 8) fills it within its 2-minute warm-up, after which memory stays flat. The next
/// record of an evicted session is a delta against its file's records, read back once
/// ([`delta::rebase`]), as after a restart.
pub const CACHED_SESSIONS: usize = 2048;

/// Bytes of a record's prompt and request deltas ([`StepRecord::delta_bytes`]) up to which
/// [`TraceWriter::commit`] may write it on the calling task: about 20 µs of serialising and
/// one page-cache append, under tokio's guidance of 10-100 µs between yields. A running
/// turn's record is a few KiB; one that stores its prompt whole (a session's first) is larger
/// than this from about 20 turns on.
pub const INLINE_RECORD_BYTES: usize = 32 * 1024;

/// The line format shared by all records.
#[derive(Debug, Serialize)]
pub struct Envelope<'a, T: Serialize> {
    /// The record's schema version: at most [`SCHEMA_VERSION`].
    pub v: u32,
    /// `session`, `step`, `nudge`, `terminate` or `side_call`.
    pub r#type: &'static str,
    /// Session id (also the file's stem).
    pub session: &'a str,
    /// Unix time of the write, milliseconds.
    pub time_ms: u64,
    pub data: &'a T,
}

/// Where a session's run index came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunSource {
    /// The client's `X-ASAP-Run` header (or `metadata.run`).
    Header,
    /// Order of sessions for the same task and label within this proxy process; `report`
    /// renumbers these by start time across all files.
    Order,
}

impl RunSource {
    fn order() -> Self {
        Self::Order
    }
}

/// First record of a session file. Read back with defaults for what older traces lack
/// (`docs/trace-format.md`, "Reading").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// `instance_id` of the task: the request's explicit id (`X-ASAP-Task`,
    /// `metadata.instance_id`), else the id of the task whose text the first user message
    /// holds (fingerprint over the prefixes' tasks and `serve --tasks`).
    #[serde(default)]
    pub instance_id: Option<String>,
    /// Task key used for grouping: `instance_id`, else `task-` and 12 hex digits of the
    /// SHA-256 of `task_text`.
    #[serde(default)]
    pub task: String,
    /// The first user message of the session's first request (empty in traces before it
    /// was recorded).
    #[serde(default)]
    pub task_text: String,
    /// Run index of this session for (task, label), 0-based.
    #[serde(default)]
    pub run: usize,
    /// A subagent's session (its parent agent handed it a task): `report` leaves it out.
    /// Absent when false, and in traces before it was recorded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub subagent: bool,
    #[serde(default = "RunSource::order")]
    pub run_source: RunSource,
    /// Model or checkpoint label: `serve --label`, else the request's `model`.
    #[serde(default)]
    pub label: String,
    /// The request's `model` field.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub profile: String,
    #[serde(default)]
    pub format: String,
    /// `proxy` or `passthrough` (`None`: not recorded).
    #[serde(default)]
    pub mode: Option<SessionMode>,
    /// Passthrough only: the tool calls of a reply kept, `first` or `all` (`--tool-calls`);
    /// absent in proxy mode and in traces before it was recorded (passthrough then kept the
    /// first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<String>,
    /// The reference prefix rendered (id, how it matched, K), if any.
    #[serde(default, deserialize_with = "lenient::lenient")]
    pub prefix: Option<PrefixInfo>,
    /// The prefix set loaded (`--prefixes`): its digest and size; `None` in traces before it
    /// was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_set: Option<PrefixSetId>,
    /// Configured K (`--prefix-k`; `None`: not recorded).
    #[serde(default)]
    pub prefix_k: Option<usize>,
    /// What kind of prefix the session's prompts start from: a same-task prefix (the paper's
    /// setting), the built-in demonstration (a fallback), or none. Always written; `None`:
    /// a trace from before issue 17.
    #[serde(default, deserialize_with = "lenient::lenient")]
    pub prefix_source: Option<PrefixSource>,
    /// The termination rules the session ran under (issue 17: every rule beyond the paper's
    /// is named, switchable and recorded). Always written; `None`: a trace from before
    /// issue 17.
    #[serde(default, deserialize_with = "lenient::lenient")]
    pub rules: Option<Rules>,
    /// Backend URL without credentials.
    #[serde(default)]
    pub backend: String,
    /// SHA-256 of the settings that shape prompts and decisions (see `docs/trace-format.md`;
    /// `None`: not recorded).
    #[serde(default)]
    pub config_sha256: Option<String>,
    #[serde(default)]
    pub proxy_version: Option<String>,
    /// The git commit the proxy was built from (12 hex digits; `build.rs`); absent when the
    /// build had no git checkout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_build: Option<String>,
}

/// `mode` of the session record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionMode {
    /// The proxy's adaptation (render, parse, policy).
    Proxy,
    /// Requests forwarded unchanged (`--mode passthrough`).
    Passthrough,
    /// Read only: a mode this build does not know.
    #[serde(other)]
    Unknown,
}

impl SessionMode {
    /// The mode named `name` (`proxy`, `passthrough`).
    pub fn from_name(name: &str) -> Self {
        match name {
            "proxy" => Self::Proxy,
            "passthrough" => Self::Passthrough,
            _ => Self::Unknown,
        }
    }

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Proxy => "proxy",
            Self::Passthrough => "passthrough",
            Self::Unknown => "unknown",
        }
    }
}

/// `prefix_source` of the session record.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum PrefixSource {
    /// A reference prefix of this task, matched by `header`, `metadata` or `fingerprint`
    /// (ASAP's prefix: the first K steps of a reference trajectory for the same task).
    Task,
    /// The profile's built-in demonstration on a made-up task (matched by `default`): what a
    /// task without a prefix of its own gets; not the paper's setting.
    Demonstration,
    /// No prefix rendered: none matched, or `--prefix-k 0`.
    #[default]
    None,
}

impl PrefixSource {
    /// The snake_case name (`task`, `demonstration`, `none`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Task => "task",
            Self::Demonstration => "demonstration",
            Self::None => "none",
        }
    }

    /// The source of a rendered prefix (`None`: nothing rendered).
    pub fn of(prefix: Option<&PrefixInfo>) -> Self {
        match prefix {
            Option::None => Self::None,
            Some(p) if p.k == 0 => Self::None,
            Some(p) if p.matched_by == MatchedBy::Default => Self::Demonstration,
            Some(_) => Self::Task,
        }
    }
}

/// `rules` of the session record: the termination rules in force, e.g. `{"nudges": true,
/// "max_steps": 100, "loop_rule": "degenerate", "loop_window": 10, "max_unparsable": 5}`
/// (`max_unparsable` 0: that rule is off). See [`crate::policy`] for each rule's source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Rules {
    /// The paper's two nudges (`--nudges`).
    pub nudges: bool,
    /// The paper's step cap (`--max-steps`).
    pub max_steps: usize,
    /// The paper's degenerate-loop rule, `degenerate` or `off` (`--loop-rule`).
    pub loop_rule: LoopRule,
    /// Actions the loop rule looks at (`--loop-window`).
    pub loop_window: usize,
    /// Our unparsable-streak rule (`--max-unparsable`); 0: off.
    pub max_unparsable: usize,
}

impl Rules {
    /// One line: `nudges on, step cap 100, loop degenerate/10, unparsable streak 5`.
    pub fn describe(&self) -> String {
        let loop_rule = match self.loop_rule {
            LoopRule::Off => "off".to_string(),
            rule => format!("{}/{}", rule.name(), self.loop_window),
        };
        let streak = match self.max_unparsable {
            0 => "off".to_string(),
            n => n.to_string(),
        };
        format!(
            "nudges {}, step cap {}, loop {loop_rule}, unparsable streak {streak}",
            if self.nudges { "on" } else { "off" },
            self.max_steps
        )
    }
}

impl From<Limits> for Rules {
    fn from(limits: Limits) -> Self {
        Self {
            nudges: limits.nudges,
            max_steps: limits.max_steps,
            loop_rule: limits.loop_rule,
            loop_window: limits.loop_window,
            max_unparsable: limits.max_unparsable,
        }
    }
}

/// The prompt of a step, as a delta against the previous step's (see [`delta`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PromptRecord {
    /// Bytes of the previous step's full prompt this prompt starts with (0: stored whole).
    pub prefix_bytes: usize,
    /// The rest of the prompt.
    pub delta: PromptText,
    /// Hex SHA-256 of the full prompt (empty: not recorded, not checked).
    pub sha256: String,
    /// Length of the full prompt, bytes.
    pub bytes: usize,
}

/// The text of a [`PromptRecord::delta`]: owned when read back (and for a delta, a copy of
/// the prompt's new part); while a begun record that stores its prompt whole waits for its
/// completion call, the prompt the turn sent, shared rather than copied (285 KiB at 100
/// turns), or the escaped frames its backend body sent when there were any (the render
/// cache's, or those a turn escaped once for the body and the record when the cache does not
/// hold the prompt: then the text is not kept). Serialized as a JSON string either way.
#[derive(Debug, Clone)]
pub enum PromptText {
    Owned(String),
    Shared(Arc<String>),
    Escaped(EscapedPrompt),
}

/// A prompt held JSON-escaped ([`crate::util::JsonFrames`], without quotes): written into its
/// record as it is. The text itself is unescaped only when asked for
/// ([`PromptText::as_str`]: a record rebased on a file from before a restart, one written the
/// plain way), and then kept.
#[derive(Debug, Clone)]
pub struct EscapedPrompt {
    frames: Arc<crate::util::JsonFrames>,
    /// Bytes of the text unescaped.
    bytes: usize,
    text: std::sync::OnceLock<String>,
}

impl EscapedPrompt {
    /// `frames`, the escaped form of a text of `bytes` bytes.
    pub fn new(frames: Arc<crate::util::JsonFrames>, bytes: usize) -> Self {
        Self {
            frames,
            bytes,
            text: std::sync::OnceLock::new(),
        }
    }

    /// The escaped frames, in order.
    pub fn frames(&self) -> &[bytes::Bytes] {
        self.frames.frames()
    }

    fn text(&self) -> &str {
        self.text.get_or_init(|| {
            let escaped = self.frames.frames().concat();
            crate::util::json_unescaped(&escaped)
        })
    }
}

impl PromptText {
    /// The text (an escaped one is unescaped, once).
    pub fn as_str(&self) -> &str {
        match self {
            Self::Owned(text) => text,
            Self::Shared(prompt) => prompt,
            Self::Escaped(escaped) => escaped.text(),
        }
    }

    /// Bytes of the text (without unescaping an escaped one).
    pub fn len(&self) -> usize {
        match self {
            Self::Owned(text) => text.len(),
            Self::Shared(prompt) => prompt.len(),
            Self::Escaped(escaped) => escaped.bytes,
        }
    }

    /// Whether the text is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for PromptText {
    fn default() -> Self {
        Self::Owned(String::new())
    }
}

impl std::ops::Deref for PromptText {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Display for PromptText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq for PromptText {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl From<String> for PromptText {
    fn from(text: String) -> Self {
        Self::Owned(text)
    }
}

impl Serialize for PromptText {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for PromptText {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::Owned)
    }
}

/// What the parser made of the completion.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ParseRecord {
    pub thought: String,
    /// An action of another shape (an older trace's) reads as `None`.
    #[serde(deserialize_with = "lenient::lenient")]
    pub action: Option<Action>,
    /// A failure of another shape (an older trace's) reads as `None`.
    #[serde(deserialize_with = "lenient::lenient")]
    pub error: Option<ParseFailure>,
    /// Bytes of the completion after the action that were dropped.
    pub dropped_bytes: usize,
    pub notes: Vec<String>,
    /// The further actions of the reply, after `action`, in order: passthrough with
    /// `--tool-calls all`, when the model called several tools at once (each a step of the
    /// trajectory: `step + 1`, `step + 2`, …). Absent when empty, and in older traces.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub more_actions: Vec<Action>,
}

/// A rejected output: the nudge, the action it rejected, the hint shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NudgeRecord {
    #[serde(default)]
    pub step: usize,
    #[serde(default)]
    pub attempt: usize,
    pub kind: NudgeKind,
    #[serde(default, deserialize_with = "lenient::lenient")]
    pub rejected: Option<Action>,
    #[serde(default)]
    pub hint: String,
}

/// A rule ended the trajectory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TerminateRecord {
    #[serde(default)]
    pub step: usize,
    #[serde(default)]
    pub attempt: usize,
    /// `reason` (snake_case) and the rule's parameter, e.g. `{"reason": "step_cap",
    /// "max_steps": 100}`.
    #[serde(flatten)]
    pub termination: Termination,
    /// One-line explanation.
    #[serde(default)]
    pub description: String,
    /// `submit` (the finish action was sent) or `error` (HTTP 400 `trajectory_terminated`);
    /// always written, `None` only when read from a record without a known one.
    #[serde(default, deserialize_with = "lenient::lenient")]
    pub on_terminate: Option<crate::config::OnTerminate>,
}

/// What was sent to the client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseRecord {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default, deserialize_with = "lenient::lenient")]
    pub tool_call: Option<ToolCallRecord>,
    /// The further tool calls sent (passthrough with `--tool-calls all`); absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_tool_calls: Vec<ToolCallRecord>,
    #[serde(default = "unknown_finish")]
    pub finish_reason: FinishReason,
}

fn unknown_match() -> MatchedBy {
    MatchedBy::Unknown
}

fn unknown_finish() -> FinishReason {
    FinishReason::Unknown
}

/// `response.tool_call`: the tool call sent, as the client got it
/// ([`crate::openai::response::ToolCallOut`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolCallRecord {
    pub id: String,
    /// `function`.
    pub r#type: String,
    pub function: FunctionRecord,
}

/// `response.tool_call.function`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FunctionRecord {
    pub name: String,
    /// A JSON string, `"{}"` for none.
    pub arguments: String,
}

impl From<&crate::openai::response::ToolCallOut> for ToolCallRecord {
    fn from(call: &crate::openai::response::ToolCallOut) -> Self {
        Self {
            id: call.id.clone(),
            r#type: call.r#type.to_string(),
            function: FunctionRecord {
                name: call.function.name.clone(),
                arguments: call.function.arguments.clone(),
            },
        }
    }
}

/// Milliseconds spent per stage.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Timings {
    pub render_ms: f64,
    pub backend_ms: f64,
    pub parse_ms: f64,
    /// From the start of the request's processing to this record.
    pub total_ms: f64,
}

/// What the policy decided about a step's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepDecision {
    /// Sent to the scaffold.
    #[default]
    Accept,
    /// Rejected with a nudge and generated again (a `nudge` record follows).
    Nudge,
    /// Ended the trajectory (a `terminate` record follows).
    Terminate,
    /// The step failed; `error` says why.
    Error,
    /// The client disconnected; the backend call was cancelled and nothing was sent.
    Aborted,
    /// Read only: a decision this build does not know.
    #[serde(other)]
    Unknown,
}

impl StepDecision {
    /// The trace's `decision` value (also the `decision` label of `asap_steps_total`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accept => "accept",
            Self::Nudge => "nudge",
            Self::Terminate => "terminate",
            Self::Error => "error",
            Self::Aborted => "aborted",
            Self::Unknown => "unknown",
        }
    }
}

/// The request a record belongs to, as received (for the request delta and the session
/// record; never serialised itself).
#[derive(Debug, Clone, Default)]
pub struct RequestInput {
    /// The body as received (JSON; lone surrogate escapes already replaced, see
    /// [`crate::openai::lenient`]). It must be JSON the decoder read: the request delta
    /// stores its messages' text compacted without checking it again
    /// ([`delta::StoredMessage::Built`]).
    pub body: bytes::Bytes,
    /// `X-ASAP-Task` header.
    pub task_header: Option<String>,
    /// `X-ASAP-Run` header.
    pub run_header: Option<String>,
    /// `model` of the body.
    pub model: Option<String>,
    /// First user message.
    pub task_text: String,
    /// Task id: explicit (header or metadata), else the task identified by its text
    /// (`pipeline::Prepared::task`).
    pub instance_id: Option<String>,
    /// Run index given by the client (header or `metadata.run`).
    pub run: Option<usize>,
    /// A subagent sent it ([`crate::openai::chat::ChatCompletionRequest::is_subagent`]).
    pub subagent: bool,
    /// Where the parts of `body` are, when the decoder split it (else the request delta
    /// parses the body itself).
    pub split: Option<std::sync::Arc<crate::openai::split::BodySplit>>,
    /// With `split`: each message's `content` as decoded (a string content exactly; shared,
    /// not copied), one per element of the split; empty otherwise.
    pub contents: Vec<std::sync::Arc<str>>,
}

/// One completion call (`step`), or a side call (`side_call`, with `kind`). Read back with
/// defaults for what older traces lack; the `#[serde(skip)]` fields are the writer's.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StepRecord {
    /// 0-based step index: actions in the history (a requery of a failed turn keeps it).
    pub step: usize,
    /// Completion call within the request: 0, then 1 and 2 after nudges.
    pub attempt: usize,
    /// Side calls only: `terminus_summary`, …
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<crate::side_call::SideCallKind>,
    pub profile: String,
    /// The client asked for SSE.
    pub stream: bool,
    pub decision: StepDecision,
    /// Top-level request fields the proxy did not interpret.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ignored_fields: Vec<String>,
    /// The request as a delta against the previous record's; absent on records of a request
    /// already stored (attempts after a nudge).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<delta::RequestDelta>,
    /// Filled by the writer from [`StepRecord::full_prompt`].
    pub prompt: Option<PromptRecord>,
    /// The backend's answer; its `finish_reason` is the backend's, not the one sent.
    pub completion: Option<BackendCompletion>,
    pub parse: Option<ParseRecord>,
    pub response: Option<ResponseRecord>,
    /// Nudges used in the session before this completion, in order: kind and place.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "lenient::lenient"
    )]
    pub nudges_used: Vec<(NudgeKind, usize)>,
    /// The error returned to the client, when the completion call (or the turn) failed.
    pub error: Option<String>,
    /// The context-window check, when the backend's context length is known: the length,
    /// the prompt's tokens and how they were counted, observations elided.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::lenient"
    )]
    pub context: Option<crate::context::ContextRecord>,
    pub timings: Timings,

    /// The full prompt sent (stored as a delta by the writer).
    #[serde(skip)]
    pub full_prompt: Arc<String>,
    /// The request (stored as a delta by the writer).
    #[serde(skip)]
    pub input: Option<Arc<RequestInput>>,
    /// The reference prefix rendered, for the session record.
    #[serde(skip)]
    pub prefix: Option<PrefixInfo>,
    /// Set on a nudge: written as a `nudge` record after this one.
    #[serde(skip)]
    pub nudge: Option<NudgeRecord>,
    /// Set on a termination: written as a `terminate` record after this one.
    #[serde(skip)]
    pub termination: Option<TerminateRecord>,
    /// The writer knew nothing of the session when it took this record's deltas (the first
    /// record of a process, or after its memory of the session was evicted; for a step, also
    /// when only side calls were written since): an existing file's records are read to store
    /// it as a delta against them ([`delta::rebase`]).
    #[serde(skip)]
    pub chain_unknown: bool,
}

/// How a request's prefix was found (the trace's `prefix.matched_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchedBy {
    /// The task the `X-ASAP-Task` header names.
    Header,
    /// The task `metadata.instance_id` names.
    Metadata,
    /// The task text's fingerprint.
    Fingerprint,
    /// The profile's `default_prefix` (the demonstration).
    Default,
    /// The demonstration a task prefix names as its example.
    Example,
    /// Read only (traces): a way this build does not know.
    #[serde(other)]
    Unknown,
}

impl From<TaskSource> for MatchedBy {
    fn from(source: TaskSource) -> Self {
        match source {
            TaskSource::Header => Self::Header,
            TaskSource::Metadata => Self::Metadata,
        }
    }
}

impl MatchedBy {
    /// The trace's name (`header`, `metadata`, `fingerprint`, `default`, `example`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Header => "header",
            Self::Metadata => "metadata",
            Self::Fingerprint => "fingerprint",
            Self::Default => "default",
            Self::Example => "example",
            Self::Unknown => "unknown",
        }
    }
}

/// What identifies a loaded prefix set: the SHA-256 of its prefixes' content and how many
/// there are. The paper gives every evaluated model the same prefixes; two runs with the
/// same digest rendered the same reference steps for the same tasks, whatever files they
/// came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixSetId {
    /// Hex SHA-256 over every task prefix and demonstration, ordered by `instance_id`, each
    /// as its JSON (all of it: task text, source, steps, leaks, example), one per line, task
    /// prefixes first.
    pub sha256: String,
    /// Task prefixes (demonstrations not counted).
    pub prefixes: usize,
}

/// Which prefix a request got (for the trace's session record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixInfo {
    /// `instance_id` of the prefix (`shell-demo` for the built-in demonstration).
    pub id: String,
    /// `header`, `metadata`, `fingerprint` or `default`.
    #[serde(default = "unknown_match")]
    pub matched_by: MatchedBy,
    /// Steps rendered.
    #[serde(default)]
    pub k: usize,
    /// The demonstration rendered with a task prefix that names one (`example`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub example: Option<String>,
}

impl StepRecord {
    /// Bytes of the prompt delta, the request delta's new messages and `rest`, and the
    /// completion text: what the record's size grows with.
    pub fn delta_bytes(&self) -> usize {
        let prompt = self.prompt.as_ref().map_or(0, |p| p.delta.len());
        let request = self.request.as_ref().map_or(0, |r| {
            r.messages.iter().map(|m| m.get().len()).sum::<usize>()
                + r.rest.as_ref().map_or(0, |rest| rest.get().len())
        });
        prompt + request + self.completion.as_ref().map_or(0, |c| c.text.len())
    }

    /// What the server's metrics count of this record ([`crate::metrics::Metrics::record_step`]).
    pub fn counts(&self) -> crate::metrics::StepCounts<'_> {
        crate::metrics::StepCounts {
            profile: &self.profile,
            decision: self.decision.as_str(),
            render_ms: self.timings.render_ms,
            backend_ms: self.timings.backend_ms,
            parse_ms: self.timings.parse_ms,
            parse_failure: self
                .parse
                .as_ref()
                .and_then(|p| p.error.as_ref())
                .map(|f| f.class.as_str()),
            nudge: self.nudge.as_ref().map(|n| n.kind),
            termination: self.termination.as_ref().map(|t| &t.termination),
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
            more_actions: Vec::new(),
        });
    }

    /// Fills the response part only (a reply made without calling the model).
    pub fn set_response(&mut self, reply: &Reply) {
        self.response = Some(ResponseRecord {
            content: reply.content.clone(),
            tool_call: reply.tool_call.as_ref().map(ToolCallRecord::from),
            more_tool_calls: reply
                .more_tool_calls
                .iter()
                .map(ToolCallRecord::from)
                .collect(),
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
        self.set_response(reply);
    }

    /// Marks the step failed with `error` (aborted when the client went away).
    pub fn set_error(&mut self, error: &crate::error::ProxyError) {
        self.error = Some(error.to_string());
        self.decision = match error {
            crate::error::ProxyError::ClientDisconnected => StepDecision::Aborted,
            _ => StepDecision::Error,
        };
    }
}

/// Settings recorded in every session record.
#[derive(Debug, Clone, Default)]
pub struct TraceSettings {
    pub dir: PathBuf,
    pub format: String,
    /// Backend URL without credentials.
    pub backend: String,
    /// `serve --label`.
    pub label: Option<String>,
    pub mode: &'static str,
    /// Passthrough: `first` or `all` (recorded as [`SessionRecord::tool_calls`]); `None` in
    /// proxy mode.
    pub tool_calls: Option<&'static str>,
    pub prefix_k: usize,
    /// The prefix set loaded (recorded as [`SessionRecord::prefix_set`]).
    pub prefix_set: Option<PrefixSetId>,
    /// The termination rules in force (recorded as [`SessionRecord::rules`]).
    pub limits: Limits,
    /// See [`SessionRecord::config_sha256`].
    pub config_sha256: String,
    /// New files plain or zstd-compressed (an existing file keeps its form).
    pub compression: crate::config::TraceCompression,
}

/// What the writer remembers of a session between records (for deltas).
#[derive(Debug, Default)]
struct SessionCache {
    delta: delta::DeltaState,
    /// The full prompt of the last `step` record begun (digests and tail only).
    prompt: delta::PromptState,
    /// Records begun: each record's deltas are taken against the one begun before it, so
    /// records are written in the order they were begun.
    begun: u64,
    /// Records written (or given up) so far; the next to write is number `written`.
    written: u64,
    /// Records complete but waiting for an earlier one of the session (only when one
    /// session has several requests in flight at once).
    parked: BTreeMap<u64, StepRecord>,
    /// This state has written to the session's file (else the file may predate it).
    wrote: bool,
    /// The file this state last wrote to: the next record is appended to it without the
    /// directory, existence and form checks a first write makes (four system calls of a
    /// running turn's nine for its record), while it still exists.
    file: Option<PathBuf>,
}

impl SessionCache {
    /// Forgets what the session's file holds, after a write that failed (the file may hold
    /// none or part of the record) or a record whose deltas rest on records of a file deleted
    /// while it was in flight (written into a new file without its prompt and request): the
    /// next record begun is read against the file, as a restart's first is, so later records
    /// rebuild.
    fn forget_file(&mut self) {
        self.delta = delta::DeltaState::default();
        self.prompt = delta::PromptState::default();
        self.wrote = false;
        self.file = None;
    }
}

/// The writer's per-session states, bounded: least recently written evicted first.
#[derive(Debug, Default)]
struct SessionCaches {
    /// Session id → (state, tick of its last use).
    map: HashMap<String, (Arc<Mutex<SessionCache>>, u64)>,
    tick: u64,
    capacity: usize,
}

impl SessionCaches {
    /// The state of `session`, made (and the least recently used one evicted) when new.
    fn get(&mut self, session: &str) -> Arc<Mutex<SessionCache>> {
        self.tick += 1;
        let tick = self.tick;
        if let Some((cache, used)) = self.map.get_mut(session) {
            *used = tick;
            return cache.clone();
        }
        if self.map.len() >= self.capacity {
            // A scan, only when a new session arrives at a full cache: microseconds. A state
            // with a record begun and not yet written is in use (held by its `Pending`) and
            // stays: its records' deltas rest on it.
            let oldest = self
                .map
                .iter()
                .filter(|(_, (cache, _))| Arc::strong_count(cache) == 1)
                .min_by_key(|(_, (_, used))| *used)
                .map(|(id, _)| id.clone());
            if let Some(id) = oldest {
                self.map.remove(&id);
            }
        }
        let cache = Arc::<Mutex<SessionCache>>::default();
        self.map.insert(session.to_string(), (cache.clone(), tick));
        cache
    }
}

/// Writes trace records; cheap to share.
#[derive(Debug, Clone)]
pub struct TraceWriter {
    settings: Arc<TraceSettings>,
    sessions: Arc<Mutex<SessionCaches>>,
    /// Next run index per (task, label) (run source `order`).
    runs: Arc<Mutex<HashMap<(String, String), usize>>>,
    /// Where every step record is also counted ([`crate::metrics::Metrics::record_step`]).
    metrics: Option<crate::metrics::Metrics>,
}

impl TraceWriter {
    /// Writer into `settings.dir` (created on first write).
    pub fn new(settings: TraceSettings) -> Self {
        Self::with_cache_capacity(settings, CACHED_SESSIONS)
    }

    /// Writer that keeps the delta state of at most `capacity` sessions (at least 1; see
    /// [`CACHED_SESSIONS`]).
    pub fn with_cache_capacity(settings: TraceSettings, capacity: usize) -> Self {
        Self {
            settings: Arc::new(settings),
            sessions: Arc::new(Mutex::new(SessionCaches {
                capacity: capacity.max(1),
                ..SessionCaches::default()
            })),
            runs: Arc::default(),
            metrics: None,
        }
    }

    /// The same writer, also counting every step record it writes in `metrics`: the trace
    /// and the metrics then see exactly the same completion calls.
    pub fn with_metrics(mut self, metrics: crate::metrics::Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Sessions whose delta state is kept now.
    pub fn cached_sessions(&self) -> usize {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .map
            .len()
    }

    /// The log directory (`--log-dir`).
    pub fn dir(&self) -> &std::path::Path {
        &self.settings.dir
    }

    /// The file of a session: the one that exists (`{session}.jsonl` or
    /// `{session}.jsonl.zst`: a file keeps the form it was begun in), else the form
    /// [`TraceSettings::compression`] names.
    pub fn path(&self, session: &SessionId) -> PathBuf {
        let plain = self.settings.dir.join(format!("{session}.jsonl"));
        let zstd = self.settings.dir.join(format!("{session}.jsonl.zst"));
        let (wanted, other) = match self.settings.compression {
            crate::config::TraceCompression::None => (plain, zstd),
            crate::config::TraceCompression::Zstd => (zstd, plain),
        };
        if !wanted.exists() && other.exists() {
            other
        } else {
            wanted
        }
    }

    /// Appends a step record (the session record first, for a new file; a `nudge` or
    /// `terminate` record after it when set): [`TraceWriter::begin`] and
    /// [`TraceWriter::commit`] in one. Failures are logged, never returned: a full disk must
    /// not fail the scaffold's request.
    pub async fn write_record(&self, session: &SessionId, mut record: StepRecord) {
        let writer = self.clone();
        let session = session.clone();
        let prompt = std::mem::take(&mut record.full_prompt);
        let result = tokio::task::spawn_blocking(move || {
            let pending = writer.begin(&session, record, &prompt);
            writer.commit_blocking(pending)
        })
        .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "trace writer task failed");
        }
    }

    fn cache(&self, session: &SessionId) -> Arc<Mutex<SessionCache>> {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(session.as_str())
    }

    fn next_run(&self, task: &str, label: &str) -> usize {
        let mut runs = self
            .runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let next = runs
            .entry((task.to_string(), label.to_string()))
            .or_insert(0);
        *next += 1;
        *next - 1
    }

    fn session_record(&self, record: &StepRecord) -> SessionRecord {
        let input = record.input.as_deref().cloned().unwrap_or_default();
        let instance_id = input.instance_id.clone().or_else(|| {
            record
                .prefix
                .as_ref()
                .filter(|p| p.matched_by == MatchedBy::Fingerprint)
                .map(|p| p.id.clone())
        });
        let task = instance_id
            .clone()
            .unwrap_or_else(|| format!("task-{}", &sha256_hex(input.task_text.as_bytes())[..12]));
        let label = self
            .settings
            .label
            .clone()
            .or_else(|| input.model.clone())
            .unwrap_or_else(|| "unknown".into());
        let (run, run_source) = match input.run {
            Some(run) => (run, RunSource::Header),
            None => (self.next_run(&task, &label), RunSource::Order),
        };
        SessionRecord {
            instance_id,
            task,
            task_text: input.task_text,
            run,
            subagent: input.subagent,
            run_source,
            label,
            model: input.model,
            profile: record.profile.clone(),
            format: self.settings.format.clone(),
            mode: Some(SessionMode::from_name(self.settings.mode)),
            tool_calls: self.settings.tool_calls.map(str::to_string),
            prefix: record.prefix.clone(),
            prefix_set: self.settings.prefix_set.clone(),
            prefix_k: Some(self.settings.prefix_k),
            prefix_source: Some(if self.settings.prefix_k == 0 {
                PrefixSource::None
            } else {
                PrefixSource::of(record.prefix.as_ref())
            }),
            rules: Some(self.settings.limits.into()),
            backend: self.settings.backend.clone(),
            config_sha256: Some(self.settings.config_sha256.clone()),
            proxy_version: Some(env!("CARGO_PKG_VERSION").to_string()),
            proxy_build: Some(env!("ASAP_BUILD_COMMIT"))
                .filter(|c| !c.is_empty())
                .map(str::to_string),
        }
    }

    /// Takes the parts of `record` that depend on the session's earlier records, its prompt
    /// (`prompt`, the full prompt sent) and request as deltas, and moves the session's delta
    /// state past it. CPU only, no I/O: the pipeline calls it while the backend generates, so
    /// that the request's body need not be kept while it waits, and the record is finished
    /// and written with [`TraceWriter::commit`] afterwards.
    ///
    /// Records of a session are written in the order they were begun. A [`Pending`] dropped
    /// without a commit is written anyway, as `aborted`, so later records never wait on it.
    pub fn begin(&self, session: &SessionId, record: StepRecord, prompt: &Arc<String>) -> Pending {
        self.begin_from(session, record, prompt, None, None)
    }

    /// [`TraceWriter::begin`] for a prompt the render cache holds, with its `lineage`: the
    /// bytes it shares with the session's last stored prompt are not read again to find the
    /// prompt's delta; and with the prompt JSON-escaped (`escaped`, as its backend body sent
    /// it), which a record that stores the prompt whole holds and writes as it is
    /// ([`delta::prompt_record`]).
    pub fn begin_from(
        &self,
        session: &SessionId,
        mut record: StepRecord,
        prompt: &Arc<String>,
        lineage: Option<crate::render::PromptLineage>,
        escaped: Option<&Arc<crate::util::JsonFrames>>,
    ) -> Pending {
        let cache = self.cache(session);
        let seq = {
            let mut state = cache
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // Nothing in flight and the file gone (deleted under a running proxy): start
            // the chain afresh, as the new file will.
            if state.delta.is_known()
                && state.begun == state.written
                && !state
                    .file
                    .as_ref()
                    .map_or_else(|| self.path(session).exists(), |file| file.exists())
            {
                let keep = (state.begun, state.written);
                *state = SessionCache::default();
                (state.begun, state.written) = keep;
            }
            let side_call = record.kind.is_some();
            // A step is also read against the file when no step prompt is known yet: after
            // a restart whose first record was a side call (outside the prompt chain), its
            // prompt would else be stored whole.
            record.chain_unknown =
                !state.delta.is_known() || (!side_call && !state.prompt.is_known());
            let stored = delta::prompt_record(
                prompt,
                (!side_call).then_some(&mut state.prompt),
                lineage,
                escaped,
            );
            record.request = record.input.as_deref().and_then(|input| {
                state
                    .delta
                    .request_delta(input, prompt, stored.prefix_bytes)
            });
            if side_call {
                state.delta.forget_places();
            }
            state.delta.mark_known();
            record.prompt = Some(stored);
            state.begun += 1;
            state.begun - 1
        };
        // What the session record may still need of the request, without its body.
        record.input = record.input.map(|input| Arc::new(input.without_body()));
        record.full_prompt = Arc::default();
        Pending {
            writer: self.clone(),
            session: session.clone(),
            cache,
            seq,
            record,
            committed: false,
        }
    }

    /// Writes a begun record (and any later records of its session that waited for it).
    /// Failures are logged, never returned.
    ///
    /// A record of at most [`INLINE_RECORD_BYTES`] of deltas, next in its session's order
    /// with none waiting behind it, to a file this process has written before, is appended on
    /// the calling task: one append of a few KiB to the page cache, where handing it to a
    /// blocking thread and back cost a 20-turn running turn a tenth of its CPU and 0.05 ms of
    /// latency (two thread wake-ups, four context switches; BENCHMARKS.md, nineteenth
    /// session). Any other record (a session's first in this process, which may read the file
    /// back, or a prompt stored whole) is written on a blocking task, as are all records when
    /// the session's state is busy.
    pub async fn commit(&self, mut pending: Pending) {
        let cache = Arc::clone(&pending.cache);
        if !pending.record.chain_unknown && pending.record.delta_bytes() <= INLINE_RECORD_BYTES {
            if let Ok(mut state) = cache.try_lock() {
                if state.wrote
                    && state.file.is_some()
                    && state.written == pending.seq
                    && state.parked.is_empty()
                {
                    pending.committed = true;
                    let record = std::mem::take(&mut pending.record);
                    self.write_parked(&pending.session, &mut state, pending.seq, record);
                    return;
                }
            }
        }
        let writer = self.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || writer.commit_blocking(pending)).await {
            tracing::error!(error = %e, "trace writer task failed");
        }
    }

    fn commit_blocking(&self, mut pending: Pending) {
        pending.committed = true;
        let record = std::mem::take(&mut pending.record);
        self.write_in_order(&pending.session, &pending.cache, pending.seq, record);
    }

    /// Parks `record` (number `seq` of its session) and writes every parked record whose
    /// turn has come.
    fn write_in_order(
        &self,
        session: &SessionId,
        cache: &Mutex<SessionCache>,
        seq: u64,
        record: StepRecord,
    ) {
        let mut state = cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.write_parked(session, &mut state, seq, record);
    }

    /// [`TraceWriter::write_in_order`] with the session's state locked.
    fn write_parked(
        &self,
        session: &SessionId,
        state: &mut SessionCache,
        seq: u64,
        record: StepRecord,
    ) {
        state.parked.insert(seq, record);
        loop {
            let next = state.written;
            let Some(mut record) = state.parked.remove(&next) else {
                break;
            };
            if let Some(metrics) = &self.metrics {
                metrics.record_step(&record.counts());
            }
            if let Err(e) = self.write_blocking(session, state, &mut record) {
                tracing::error!(error = %e, %session, step = record.step, attempt = record.attempt, dir = %self.settings.dir.display(), "writing trace record failed");
                state.forget_file();
            }
            state.written += 1;
        }
    }

    fn write_blocking(
        &self,
        session: &SessionId,
        state: &mut SessionCache,
        record: &mut StepRecord,
    ) -> std::io::Result<()> {
        let append = |path: &std::path::Path| std::fs::OpenOptions::new().append(true).open(path);
        // The file this state wrote, unless it was deleted since: appended to as it is.
        let known = state
            .file
            .take()
            .filter(|_| state.wrote)
            .and_then(|path| append(&path).ok().map(|file| (path, file)));
        let (path, fresh, file) = match known {
            Some((path, file)) => (path, false, Some(file)),
            None => {
                std::fs::create_dir_all(&self.settings.dir)?;
                let path = self.path(session);
                let fresh = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .is_ok();
                (path, fresh, None)
            }
        };
        let zstd = is_zstd(&path);
        if !fresh && !state.wrote && zstd {
            // A file from before a restart: a frame cut short by a crash would make every
            // frame after it unreadable, so it goes (its record was never complete).
            zstd_whole_frames(&path)?;
        }
        let mut rebased;
        let record = if !fresh && record.chain_unknown {
            // A file this process's deltas do not know: extend its records rather than
            // store the prompt and request whole (read once per session and process).
            match read::TraceReader::open(&path)
                .ok()
                .and_then(read::TraceReader::into_chain)
            {
                Some(chain) => {
                    rebased = record.clone();
                    if let Some(prompt) = rebased.prompt.as_mut() {
                        // Stored whole: the delta is the full prompt.
                        let full = prompt.delta.clone();
                        let step = record.kind.is_none();
                        delta::rebase(prompt, &mut rebased.request, &full, &chain, step);
                    }
                    &mut rebased
                }
                None => record,
            }
        } else {
            record
        };
        let mut file = match file {
            Some(file) => file,
            None => append(&path)?,
        };
        let mut out = Line {
            file: &mut file,
            session,
            zstd,
        };
        if fresh {
            let header = self.session_record(record);
            out.write("session", 1, &header)?;
        } else if !state.wrote && !zstd {
            // A file from before a restart (or dropped from the cache): end a torn last line
            // so the next record starts on its own line.
            if !ends_with_newline(&path)? {
                out.file.write_all(b"\n")?;
            }
        }
        if fresh && !record.chain_unknown {
            // The file went while this record was in flight: its prompt and request deltas
            // rest on records the new file does not hold, so they are left out (a reader
            // could not rebuild them, and would refuse the file); the rest of the record is
            // kept, and the next record is read against the new file.
            tracing::warn!(%session, step = record.step, "trace file deleted while a record was in flight; its prompt and request are not recorded");
            record.prompt = None;
            record.request = None;
        }
        state.wrote = true;
        state.file = Some(path);
        let kind = if record.kind.is_some() {
            "side_call"
        } else {
            "step"
        };
        let v = record
            .request
            .as_ref()
            .map_or(1, delta::RequestDelta::schema_version);
        out.write_record(kind, v, record)?;
        if let Some(nudge) = &record.nudge {
            out.write("nudge", 1, nudge)?;
        }
        if let Some(termination) = &record.termination {
            out.write("terminate", 1, termination)?;
        }
        if fresh && !record.chain_unknown {
            state.forget_file();
        }
        Ok(())
    }
}

/// A step record begun ([`TraceWriter::begin`]): its prompt and request deltas taken, the
/// rest (completion, parse, response, timings) to fill in before [`TraceWriter::commit`].
/// Dereferences to the record. Dropped without a commit (a completion call cut short: its task was cancelled), it is written
/// as it stands, marked `aborted`.
#[derive(Debug)]
pub struct Pending {
    writer: TraceWriter,
    session: SessionId,
    cache: Arc<Mutex<SessionCache>>,
    seq: u64,
    record: StepRecord,
    committed: bool,
}

impl std::ops::Deref for Pending {
    type Target = StepRecord;
    fn deref(&self) -> &StepRecord {
        &self.record
    }
}

impl std::ops::DerefMut for Pending {
    fn deref_mut(&mut self) -> &mut StepRecord {
        &mut self.record
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        let mut record = std::mem::take(&mut self.record);
        if record.error.is_none() {
            record.decision = StepDecision::Aborted;
            record.error = Some("the step ended before its record was complete".into());
        }
        self.writer
            .write_in_order(&self.session, &self.cache, self.seq, record);
    }
}

/// zstd level of compressed trace files: level 1 is zstd's fastest standard level; a
/// session-opening record (a whole 100-turn prompt and request) shrinks about sevenfold.
pub const ZSTD_LEVEL: i32 = 1;

/// Whether `path` is a compressed trace file (`.zst`).
pub fn is_zstd(path: &std::path::Path) -> bool {
    path.extension().is_some_and(|e| e == "zst")
}

/// Cuts a compressed trace file after the last zstd frame that decodes (a record being
/// written when the process died; damage before it stays, skipped by the readers). Reads the
/// file once, at the first write of a session by a process.
fn zstd_whole_frames(path: &std::path::Path) -> std::io::Result<()> {
    let bytes = std::fs::read(path)?;
    let whole = read::zstd_frames(&bytes).1;
    if whole < bytes.len() {
        tracing::warn!(path = %path.display(), cut = bytes.len() - whole, "trace file ended in a torn zstd frame; cut it off");
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)?
            .set_len(whole as u64)?;
    }
    Ok(())
}

/// Where a session's records go: a plain or a compressed file.
struct Line<'a> {
    file: &'a mut std::fs::File,
    session: &'a SessionId,
    zstd: bool,
}

impl Line<'_> {
    /// Serialises one envelope of schema version `v` and appends it with a single `write`
    /// (compressed: as one zstd frame).
    fn write<T: Serialize>(&mut self, kind: &'static str, v: u32, data: &T) -> std::io::Result<()> {
        let buf = self.serialize(kind, v, data)?;
        self.append(buf)
    }

    /// A step or side-call record, as [`Line::write`] writes it, but its long texts are
    /// copied into the line rather than serialised by serde_json: a long prompt text is
    /// escaped by [`crate::util::push_json_escaped`] (serde_json's byte-at-a-time escape loop
    /// was a tenth of a 100-turn request's instructions when it opens a session: 3.0 M of
    /// 31 M, callgrind; the word-at-a-time one 1.4 M), one held escaped
    /// ([`PromptText::Escaped`], any length) is copied as it is, and so are the request
    /// delta's messages when those it built are long ([`delta::StoredMessage::Built`], not
    /// checked as JSON again; [`SPLICED_MESSAGE_BYTES`] together: a session's first record).
    /// The prompt is serialised as a placeholder ([`prompt_placeholder`]), the messages as one
    /// placeholder element of their array, and both are spliced in ([`splice`]). A line that
    /// holds a placeholder elsewhere too (a client would have to send this process's random
    /// text) is serialised the plain way.
    fn write_record(
        &mut self,
        kind: &'static str,
        v: u32,
        record: &mut StepRecord,
    ) -> std::io::Result<()> {
        let splices_prompt = record.prompt.as_ref().is_some_and(|p| {
            matches!(p.delta, PromptText::Escaped(_)) || p.delta.len() >= SPLICED_BYTES
        });
        // Built messages of a few KiB (a running session's new turn) are checked and written
        // the plain way: the placeholder and the search cost more than the check.
        let built = |request: &delta::RequestDelta| -> usize {
            let built = request.messages.iter().filter_map(|m| match m {
                delta::StoredMessage::Built(text) => Some(text.len()),
                delta::StoredMessage::Checked(_) => None,
            });
            built.sum()
        };
        let splices_messages = record
            .request
            .as_ref()
            .is_some_and(|request| built(request) >= SPLICED_MESSAGE_BYTES);
        if !splices_prompt && !splices_messages {
            return self.write(kind, v, record);
        }
        let text = match record.prompt.as_mut() {
            Some(prompt) if splices_prompt => Some(std::mem::replace(
                &mut prompt.delta,
                PromptText::Owned(prompt_placeholder().to_string()),
            )),
            _ => None,
        };
        // The messages, all of them, as one placeheld element of their array.
        let messages = match record.request.as_mut() {
            Some(request) if splices_messages => {
                let token = format!("{}-m", prompt_placeholder());
                serde_json::value::to_raw_value(&token).ok().map(|token| {
                    let token = vec![delta::StoredMessage::Checked(token)];
                    std::mem::replace(&mut request.messages, token)
                })
            }
            _ => None,
        };
        let placeheld = self.serialize(kind, v, record);
        let spliced = placeheld.map(|buf| {
            let prompt = text.as_ref().map(|text| match text {
                // Escaped for the backend body: copied in as it is.
                PromptText::Escaped(escaped) => Splice::Escaped(escaped),
                text => Splice::Text(text),
            });
            splice(&buf, prompt_placeholder(), prompt, messages.as_deref())
        });
        if let (Some(prompt), Some(text)) = (record.prompt.as_mut(), text) {
            prompt.delta = text;
        }
        if let (Some(request), Some(messages)) = (record.request.as_mut(), messages) {
            request.messages = messages;
        }
        match spliced? {
            Some(buf) => self.append(buf),
            None => self.write(kind, v, record),
        }
    }

    /// One envelope of schema version `v`, serialised on one line with its line break.
    fn serialize<T: Serialize>(
        &self,
        kind: &'static str,
        v: u32,
        data: &T,
    ) -> std::io::Result<Vec<u8>> {
        let mut buf = serde_json::to_vec(&Envelope {
            v,
            r#type: kind,
            session: self.session.as_str(),
            time_ms: unix_ms(),
            data,
        })?;
        one_line(&mut buf);
        buf.push(b'\n');
        Ok(buf)
    }

    /// Appends a serialised line with a single `write` (compressed: as one zstd frame).
    fn append(&mut self, mut buf: Vec<u8>) -> std::io::Result<()> {
        if self.zstd {
            let mut compressor = zstd::bulk::Compressor::new(ZSTD_LEVEL)?;
            compressor.include_checksum(true)?;
            buf = compressor.compress(&buf)?;
        }
        self.file.write_all(&buf)
    }
}

/// Prompt texts from this many bytes are spliced into their record ([`Line::write_record`]);
/// a shorter one (a running session's new steps) is not worth the search for the
/// placeholder. A prompt held escaped ([`PromptText::Escaped`]) is spliced
/// whatever its length: written the plain way it would be unescaped first.
const SPLICED_BYTES: usize = 16 * 1024;

/// A request delta's built messages from this many bytes together are spliced into their
/// record ([`Line::write_record`]): the placeholder and its search cost about what checking
/// 1.5 KB of JSON does, and a running turn's new messages (an action, and a result the
/// prompt holds, stored as a reference) are mostly shorter than this; a session's first
/// record, whose contents are references too, is longer from a few turns on.
const SPLICED_MESSAGE_BYTES: usize = 4 * 1024;

/// The text a record's prompt is serialised as before it is spliced in: random per process,
/// so no client can send it (a record that holds it twice is serialised the plain way).
fn prompt_placeholder() -> &'static str {
    use std::hash::BuildHasher;
    static PLACEHOLDER: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let state = std::collections::hash_map::RandomState::new();
        format!(
            "asap-prompt-{:016x}{:016x}",
            state.hash_one(1_u8),
            state.hash_one(2_u8)
        )
    });
    &PLACEHOLDER
}

/// A record's prompt as [`splice`] writes it: a text escaped there, or frames escaped
/// already.
enum Splice<'a> {
    Text(&'a PromptText),
    Escaped(&'a EscapedPrompt),
}

impl Splice<'_> {
    /// About how many bytes it writes.
    fn len(&self) -> usize {
        match self {
            Self::Text(text) => text.len() + text.len() / 16,
            Self::Escaped(escaped) => escaped.frames.len(),
        }
    }

    /// Appends it as a JSON string's content.
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Self::Text(text) => crate::util::push_json_escaped(out, text.as_str().as_bytes()),
            Self::Escaped(escaped) => {
                for frame in escaped.frames() {
                    out.extend_from_slice(frame);
                }
            }
        }
    }
}

/// `buf` with its placeholder strings replaced: `"placeholder"` by `prompt` as a JSON string
/// (the bytes serde_json writes), `"placeholder-m"` by the JSON texts of `messages` as they
/// are, separated by commas (the placeholder is the only element of the array written);
/// `None` unless each given occurs exactly once and nothing else does. `placeholder` needs
/// no escaping.
fn splice(
    buf: &[u8],
    placeholder: &str,
    prompt: Option<Splice<'_>>,
    messages: Option<&[delta::StoredMessage]>,
) -> Option<Vec<u8>> {
    let token = format!("\"{placeholder}");
    let len = prompt.as_ref().map_or(0, Splice::len)
        + messages.map_or(0, |m| m.iter().map(|m| m.get().len() + 1).sum());
    let mut out = Vec::with_capacity(buf.len() + len + 2);
    let (mut prompt, mut messages) = (prompt, messages);
    let mut copied = 0;
    for at in memchr::memmem::find_iter(buf, token.as_bytes()) {
        if at < copied {
            return None;
        }
        out.extend_from_slice(&buf[copied..at]);
        let after = &buf[at + token.len()..];
        if after.first() == Some(&b'"') {
            let prompt = prompt.take()?;
            out.push(b'"');
            prompt.write(&mut out);
            out.push(b'"');
            copied = at + token.len() + 1;
        } else if after.starts_with(b"-m\"") {
            for (i, message) in messages.take()?.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(message.get().as_bytes());
            }
            copied = at + token.len() + 3;
        } else {
            return None;
        }
    }
    if prompt.is_some() || messages.is_some() {
        return None;
    }
    out.extend_from_slice(&buf[copied..]);
    Some(out)
}

/// `buf` with the JSON string `"placeholder"` replaced by `text` as a JSON string (escaped by
/// [`crate::util::push_json_escaped`], the bytes serde_json writes); `None` unless the string
/// occurs exactly once. `placeholder` needs no escaping.
#[cfg(test)]
fn splice_json_string(buf: &[u8], placeholder: &str, text: &str) -> Option<Vec<u8>> {
    let text = PromptText::Owned(text.to_string());
    splice(buf, placeholder, Some(Splice::Text(&text)), None)
}

/// Makes a serialised record one line whatever it embeds: a raw line break is never part of a
/// JSON string, so any in `buf` is whitespace between tokens copied from a client's raw JSON
/// (the request delta compacts those already; this keeps the one-record-per-line guarantee
/// for anything embedded later). The texts [`Line::write_record`] splices in after it need
/// none: a prompt escaped as a JSON string, the request delta's messages compacted.
fn one_line(buf: &mut Vec<u8>) {
    if memchr::memchr2(b'\n', b'\r', buf).is_none() {
        return;
    }
    if let Ok(text) = std::str::from_utf8(buf) {
        if let std::borrow::Cow::Owned(compact) = delta::compact_json(text) {
            *buf = compact.into_bytes();
        }
    }
}

fn ends_with_newline(path: &std::path::Path) -> std::io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(true);
    }
    file.seek(SeekFrom::Start(len - 1))?;
    let mut last = [0u8; 1];
    file.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

impl RequestInput {
    /// This input without its body: what the session record needs once the request delta
    /// is taken.
    pub fn without_body(&self) -> Self {
        Self {
            body: bytes::Bytes::new(),
            split: None,
            contents: Vec::new(),
            ..self.clone()
        }
    }

    /// What the trace needs of a request and its headers (the body is shared, not copied).
    pub fn from_request(
        request: &crate::openai::chat::ChatCompletionRequest,
        headers: &crate::openai::chat::AsapHeaders,
    ) -> Self {
        Self {
            body: request.raw_body.clone(),
            task_header: headers.task.clone(),
            run_header: headers.run.clone(),
            model: request.model.clone(),
            task_text: request.task_text(),
            instance_id: request.explicit_task(headers).map(|(id, _)| id),
            run: request.explicit_run(headers),
            subagent: request.is_subagent(),
            split: request.split.clone(),
            contents: match &request.split {
                Some(split) if split.messages.len() == request.messages.len() => {
                    request.messages.iter().map(|m| m.content.clone()).collect()
                }
                _ => Vec::new(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::StepDecision;

    #[test]
    fn decision_names_are_the_serialised_ones() {
        // `as_str` is the metrics label; it must be the trace's own value.
        for d in [
            StepDecision::Accept,
            StepDecision::Nudge,
            StepDecision::Terminate,
            StepDecision::Error,
            StepDecision::Aborted,
        ] {
            assert_eq!(serde_json::to_value(d).unwrap(), d.as_str());
        }
    }

    #[test]
    fn a_record_embedding_raw_line_breaks_is_written_on_one_line() {
        let raw = serde_json::value::RawValue::from_string(
            "{\r\n\t\"a\": [1,\n 2],\r\n \"b\": \"x\\ny\"\r\n}".into(),
        )
        .unwrap();
        let mut buf = serde_json::to_vec(&serde_json::json!({"k": 1})).unwrap();
        buf.pop();
        buf.extend_from_slice(b",\"raw\":");
        buf.extend_from_slice(raw.get().as_bytes());
        buf.push(b'}');
        super::one_line(&mut buf);
        let text = String::from_utf8(buf).unwrap();
        assert_eq!(text, r#"{"k":1,"raw":{"a":[1,2],"b":"x\ny"}}"#);
    }

    /// A record with `prompt` as its prompt text, stored whole, and `request_text` in a
    /// field of its own.
    fn record_with(prompt: &str, request_text: &str) -> super::StepRecord {
        super::StepRecord {
            prompt: Some(super::PromptRecord {
                prefix_bytes: 0,
                delta: super::PromptText::Shared(std::sync::Arc::new(prompt.to_string())),
                sha256: "ab".into(),
                bytes: prompt.len(),
            }),
            error: Some(request_text.into()),
            ..super::StepRecord::default()
        }
    }

    /// Writes `record` with [`super::Line::write_record`] to a new file and returns the line.
    fn written(record: &mut super::StepRecord) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let mut file = std::fs::File::create(&path).unwrap();
        let session = crate::session::SessionId::from_recorded("0123456789ab").unwrap();
        let mut line = super::Line {
            file: &mut file,
            session: &session,
            zstd: false,
        };
        line.write_record("step", 1, record).unwrap();
        std::fs::read_to_string(&path).unwrap()
    }

    /// The line as serde_json writes it, but for the time, which `written` took.
    fn plain(record: &super::StepRecord, line: &str) -> String {
        let time = serde_json::from_str::<serde_json::Value>(line).unwrap()["time_ms"]
            .as_u64()
            .unwrap();
        let mut plain = serde_json::to_string(&serde_json::json!({
            "v": 1, "type": "step", "session": "0123456789ab", "time_ms": time,
            "data": serde_json::to_value(record).unwrap(),
        }))
        .unwrap();
        plain.push('\n');
        plain
    }

    proptest::proptest! {
        /// A long prompt spliced in is the line serde_json writes, byte for byte (escapes,
        /// control characters, non-ASCII), and the prompt is as it was after the write.
        #[test]
        fn a_spliced_prompt_is_the_line_serde_json_writes(
            text in "[a\"\\\n\t\u{1}\u{1f}\u{7f}é\u{2028}💡 ]{0,64}",
        ) {
            let prompt = text.repeat(super::SPLICED_BYTES / text.len().max(1) + 1);
            let mut record = record_with(&prompt, "request");
            let line = written(&mut record);
            proptest::prop_assert_eq!(&line, &plain(&record, &line));
            proptest::prop_assert_eq!(&*record.prompt.as_ref().unwrap().delta, prompt.as_str());
        }
    }

    /// `prompt` held as the escaped frames a backend body sent.
    fn escaped(prompt: &str) -> super::PromptText {
        let frames = crate::util::JsonFrames::of(prompt.as_bytes(), b"");
        super::PromptText::Escaped(super::EscapedPrompt::new(
            std::sync::Arc::new(frames),
            prompt.len(),
        ))
    }

    proptest::proptest! {
        /// A prompt held escaped, short or long, is written as the text it escapes would be,
        /// byte for byte, without being unescaped (the write copies the frames); asked for
        /// afterwards, its text is the prompt.
        #[test]
        fn a_prompt_held_escaped_is_written_as_its_text_would_be(
            text in "[a\"\\\n\t\u{1}\u{1f}\u{7f}é\u{2028}💡 ]{0,64}",
            repeats in proptest::sample::select(vec![1usize, 3, 40, 700]),
        ) {
            let prompt = text.repeat(repeats);
            let mut record = record_with(&prompt, "request");
            let expected = written(&mut record);
            record.prompt.as_mut().unwrap().delta = escaped(&prompt);
            let line = written(&mut record);
            let delta = &record.prompt.as_ref().unwrap().delta;
            let super::PromptText::Escaped(held) = delta else {
                panic!("the record's prompt is no longer the escaped one");
            };
            proptest::prop_assert!(held.text.get().is_none(), "unescaped to be written");
            proptest::prop_assert_eq!(delta.len(), prompt.len());
            // The lines differ in their times only.
            proptest::prop_assert_eq!(&line, &plain(&record, &line));
            proptest::prop_assert_eq!(&expected, &plain(&record, &expected));
            proptest::prop_assert_eq!(&**delta, prompt.as_str());
        }
    }

    /// A record whose request delta was built from `body` (its first record), with `prompt`.
    fn record_of_body(body: &str, prompt: &str) -> super::StepRecord {
        let input = super::RequestInput {
            body: bytes::Bytes::from(body.to_string()),
            ..super::RequestInput::default()
        };
        let request = super::delta::DeltaState::default().request_delta(&input, prompt, 0);
        super::StepRecord {
            request,
            ..record_with(prompt, "request")
        }
    }

    proptest::proptest! {
        /// Messages the request delta built are spliced into the line as they are, and the
        /// line is the one serde_json writes (which checks each as JSON), byte for byte,
        /// with a prompt spliced in too or not; the record holds them as before afterwards.
        #[test]
        fn built_messages_spliced_in_are_the_line_serde_json_writes(
            messages in proptest::collection::vec(
                (
                    "(\\|\"|[\n\t\u{1}]|é|💡|[a-z ]){0,80}",
                    crate::openai::split::tests::json_value(),
                ),
                1..6,
            ),
            pretty in proptest::bool::ANY,
            long_prompt in proptest::bool::ANY,
            long_messages in proptest::bool::ANY,
        ) {
            let messages: Vec<serde_json::Value> = messages
                .iter()
                .enumerate()
                .map(|(i, (content, other))| {
                    // A key with an escape: a message the delta checks through serde_json.
                    let key = if i == 2 { "e\"x" } else { "extra" };
                    let mut message = serde_json::json!({
                        "role": if i % 2 == 0 { "user" } else { "tool" },
                        "content": content,
                    });
                    message[key] = other.clone();
                    if long_messages && i == 0 {
                        message["pad"] = "x\"".repeat(super::SPLICED_MESSAGE_BYTES).into();
                    }
                    message
                })
                .collect();
            let body = serde_json::json!({"model": "m", "messages": messages});
            let body = if pretty {
                serde_json::to_string_pretty(&body).unwrap()
            } else {
                serde_json::to_string(&body).unwrap()
            };
            // The prompt holds every content, so the long ones are stored as references.
            let mut prompt: String = messages
                .iter()
                .map(|m| format!("<o>{}</o>", m["content"].as_str().unwrap()))
                .collect();
            if long_prompt {
                prompt.push_str(&"p\"".repeat(super::SPLICED_BYTES));
            }
            let mut record = record_of_body(&body, &prompt);
            let before = record.request.clone();
            let built = before.as_ref().unwrap().messages.iter();
            proptest::prop_assert!(
                built.filter(|m| matches!(m, super::delta::StoredMessage::Built(_))).count() > 0
            );
            let line = written(&mut record);
            proptest::prop_assert_eq!(&line, &plain(&record, &line));
            proptest::prop_assert_eq!(&record.request, &before);
            let read: serde_json::Value = serde_json::from_str(&line).unwrap();
            proptest::prop_assert_eq!(
                read["data"]["request"]["messages"].as_array().map(Vec::len),
                Some(messages.len())
            );
        }
    }

    #[test]
    fn a_record_that_holds_a_message_placeholder_elsewhere_is_written_the_plain_way() {
        let long = "a".repeat(super::SPLICED_MESSAGE_BYTES);
        let body = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"a","pad":"{long}"}},{{"role":"tool","content":"b"}}]}}"#
        );
        let body = body.as_str();
        let placeholder = super::prompt_placeholder();
        for text in [format!("{placeholder}-m"), placeholder.to_string()] {
            for prompt in ["short".to_string(), "x".repeat(super::SPLICED_BYTES)] {
                let mut record = record_of_body(body, &prompt);
                record.error = Some(text.clone());
                let line = written(&mut record);
                assert_eq!(line, plain(&record, &line));
                assert!(line.contains(&text), "the client's text is kept");
            }
        }
        // Each once: spliced; twice or missing: refused.
        let buf = format!(r#"["{placeholder}-m",{{"p":"{placeholder}"}}]"#);
        let prompt = super::PromptText::Owned("q\"".into());
        let built = |text: &str| super::delta::StoredMessage::Built(text.into());
        let messages = [built("{}"), built("[1]")];
        assert_eq!(
            super::splice(
                buf.as_bytes(),
                placeholder,
                Some(super::Splice::Text(&prompt)),
                Some(&messages)
            )
            .unwrap(),
            br#"[{},[1],{"p":"q\""}]"#
        );
        let twice = format!(r#"["{placeholder}-m","{placeholder}-m"]"#);
        let other = format!(r#"["{placeholder}-m","{placeholder}-n"]"#);
        let one = format!(r#"["{placeholder}-m"]"#);
        for buf in [&twice, &other] {
            assert!(super::splice(buf.as_bytes(), placeholder, None, Some(&messages)).is_none());
        }
        let text = Some(super::Splice::Text(&prompt));
        assert!(super::splice(one.as_bytes(), placeholder, text, Some(&messages)).is_none());
        assert!(super::splice(one.as_bytes(), placeholder, None, None).is_none());
    }

    #[test]
    fn a_record_that_holds_the_placeholder_elsewhere_is_written_the_plain_way() {
        let prompt = "x\"y".repeat(super::SPLICED_BYTES);
        let placeholder = super::prompt_placeholder();
        let mut record = record_with(&prompt, placeholder);
        let line = written(&mut record);
        assert_eq!(line, plain(&record, &line));
        assert!(line.contains(placeholder), "the client's text is kept");
        // A prompt held escaped too: unescaped for the plain way.
        record.prompt.as_mut().unwrap().delta = escaped(&prompt);
        let line = written(&mut record);
        assert_eq!(line, plain(&record, &line));
        assert_eq!(&*record.prompt.as_ref().unwrap().delta, prompt.as_str());
        // Once is spliced; twice is refused.
        let buf = format!(r#"{{"a":"{placeholder}","b":1}}"#);
        assert_eq!(
            super::splice_json_string(buf.as_bytes(), placeholder, "q\"").unwrap(),
            br#"{"a":"q\"","b":1}"#
        );
        let twice = format!(r#"["{placeholder}","{placeholder}"]"#);
        assert!(super::splice_json_string(twice.as_bytes(), placeholder, "q").is_none());
    }
}
