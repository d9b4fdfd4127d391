//! One trajectory step by step: every completion call of a trace file (`step` and
//! `side_call` records) with its thought, parsed action or parse failure, the observation the
//! scaffold sent back, nudges, termination, timings, finish reasons and the exact prompt,
//! rebuilt from the deltas by [`TraceReader`].
//!
//! Observations and the per-turn flags (edit, test run, failed test) come from the report's
//! [`Attempt`]s (`report::load`), so the page and `asap-proxy report` agree.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::profile::Action;
use crate::report::failure::shows_test_failure;
use crate::report::load::{self, is_turn};
use crate::report::testcmd::is_test_command;
use crate::report::Attempt;
use crate::trace::read::{Body, ReadError, Record, TraceReader};
use crate::trace::{PromptRecord, ResponseRecord, StepDecision, StepRecord};

/// Prompts up to this size are put on the page whole (in a collapsed `<details>`); longer
/// ones show only the part new in that call, with a link to the whole text. Keeps a
/// 100-step session with 200 KiB prompts from becoming a 20 MB page.
pub const INLINE_PROMPT_BYTES: usize = 64 * 1024;

/// A parsed action, for display.
#[derive(Debug, Clone, Serialize)]
pub struct ActionView {
    /// Tool tag in the neutral vocabulary (`bash`, `str_replace_editor`, …) or `submit`.
    pub tool: String,
    /// Arguments in order: name and value (strings as they are, other values as JSON).
    pub arguments: Vec<(String, String)>,
}

/// The reply sent to the scaffold: its tool call (scaffold tool name and arguments) and/or
/// content.
#[derive(Debug, Clone, Serialize)]
pub struct SentView {
    pub tool_call: Option<ActionView>,
    pub content: Option<String>,
}

/// What the parser rejected.
#[derive(Debug, Clone, Serialize)]
pub struct FailureView {
    /// The class: `no_action`, `unknown_tool`, `unclosed_tag`, `missing_parameter`, `invalid_parameter`.
    pub class: String,
    /// The parser's explanation.
    pub detail: String,
}

/// A nudge that rejected the call's output.
#[derive(Debug, Clone, Serialize)]
pub struct NudgeView {
    /// `submit_before_edit` or `repeated_action`.
    pub kind: String,
    /// The hint shown to the model as the rejected action's observation.
    pub hint: String,
}

/// A rule that ended the trajectory with this call.
#[derive(Debug, Clone, Serialize)]
pub struct TerminationView {
    /// `submit_before_edit_again`, `repeated_action_again`, `step_cap`, `unparsable`,
    /// `degenerate_loop`; traces written before issue 17 may also hold `same_action_thrice`
    /// and `alternation` (rules since replaced by `degenerate_loop`).
    pub reason: String,
    /// One-line explanation.
    pub description: String,
    /// `submit` or `error`.
    pub on_terminate: String,
}

/// The prompt of one call.
#[derive(Debug, Clone, Serialize)]
pub struct PromptView {
    /// Length of the full prompt, bytes.
    pub bytes: usize,
    /// Hex SHA-256 of the full prompt, as recorded.
    pub sha256: String,
    /// The whole prompt, when at most [`INLINE_PROMPT_BYTES`].
    pub full: Option<String>,
    /// The part new in this call (the trace's delta; at most its last
    /// [`INLINE_PROMPT_BYTES`]) and the byte it starts at, when the whole prompt is too long
    /// to inline.
    pub new_part: Option<String>,
    /// Byte offset of `new_part` in the full prompt.
    pub new_from: usize,
}

/// One completion call.
#[derive(Debug, Clone, Serialize)]
pub struct StepView {
    /// 0-based position among the file's calls (the `n` of the prompt route).
    pub index: usize,
    /// 0-based step (actions in the history before this call).
    pub step: u64,
    /// 0, then 1 and 2 after nudges.
    pub attempt: u64,
    /// `None` for a step; the kind for a side call (`terminus_summary`, …).
    pub side_call: Option<String>,
    /// `accept`, `nudge`, `terminate`, `error`, `aborted`.
    pub decision: String,
    /// The text before the action (the parser's `thought`).
    pub thought: String,
    /// The parsed action, or why none could be parsed.
    pub action: Option<ActionView>,
    pub failure: Option<FailureView>,
    /// What the scaffold sent back for this action (from the next request), when accepted.
    pub observation: Option<String>,
    pub nudge: Option<NudgeView>,
    pub termination: Option<TerminationView>,
    /// The error returned to the client.
    pub error: Option<String>,
    /// The generated text as the backend returned it.
    pub completion: Option<String>,
    /// The backend's `finish_reason`, and the matched stop string quoted (Rust string
    /// syntax, so newlines show as `\n`).
    pub backend_finish: Option<String>,
    pub matched_stop: Option<String>,
    /// The `finish_reason` sent to the scaffold, and the tool it was asked to call.
    pub sent_finish: Option<String>,
    pub sent_tool: Option<String>,
    /// The reply actually sent to the scaffold, when it is not the parsed action: a
    /// terminated step sends the finish action (or an error) instead of the model's.
    pub sent: Option<SentView>,
    /// `prompt_tokens` and `completion_tokens` reported by the backend.
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// Milliseconds: `render_ms`, `backend_ms`, `parse_ms`, `total_ms`.
    pub timings: Vec<(String, f64)>,
    /// Bytes of the completion after the action that were dropped, when more than
    /// whitespace; and the parser's notes.
    pub dropped: Option<u64>,
    pub notes: Vec<String>,
    /// Observations elided to fit the context window.
    pub elided: Option<String>,
    /// The report's per-turn flags: `edit`, `test`, `failed test`, `submit`.
    pub flags: Vec<&'static str>,
    pub prompt: Option<PromptView>,
    /// The reply's further tool calls (passthrough `--tool-calls all`), each an action of the
    /// next step, as the report counts them (none when the scaffold did not run them).
    pub more: Vec<MoreCallView>,
}

/// A further tool call of a reply: its step, action, observation and the report's flags.
#[derive(Debug, Clone, Serialize)]
pub struct MoreCallView {
    pub step: u64,
    pub action: Option<ActionView>,
    pub observation: Option<String>,
    pub flags: Vec<&'static str>,
}

/// Every call of a trace file, in order, and what went wrong reading it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Steps {
    pub steps: Vec<StepView>,
    /// A record the reader could not rebuild (the steps after it are not shown).
    pub error: Option<String>,
}

/// Reads every call of `path`.
///
/// Errors: the file cannot be read at all.
pub fn read(path: &Path) -> Result<Steps, ReadError> {
    // The report's reading of the same file: observations and flags per turn. A file whose
    // deltas do not apply still shows the calls before the bad record (without them).
    let turns = load::trajectory(path)
        .ok()
        .flatten()
        .map(|t| t.attempts)
        .unwrap_or_default();
    let mut turns = turns.into_iter().peekable();
    let mut reader = TraceReader::open(path)?;
    let mut out = Steps::default();
    while let Some(record) = reader.next_record() {
        let record = match record {
            Ok(record) => record,
            Err(e) => {
                out.error = Some(e.to_string());
                break;
            }
        };
        match &record.body {
            Body::Step(_) | Body::SideCall(_) => {
                let turn = if is_turn(&record) { turns.next() } else { None };
                let index = out.steps.len();
                let mut view = step_view(index, &record, reader.prompt(), turn.as_ref());
                // The report's attempts for the reply's further calls follow its own.
                while let Some(more) = turns.next_if(|t| t.continued) {
                    view.more.push(MoreCallView {
                        step: more.step as u64,
                        action: more.action.as_ref().map(action_view),
                        observation: more.observation.clone(),
                        flags: flags(&more),
                    });
                }
                out.steps.push(view);
            }
            Body::Nudge(nudge) => {
                if let Some(last) = out.steps.last_mut() {
                    last.nudge = Some(NudgeView {
                        kind: nudge.kind.as_str().to_string(),
                        hint: nudge.hint.clone(),
                    });
                }
            }
            Body::Terminate(terminate) => {
                if let Some(last) = out.steps.last_mut() {
                    last.termination = Some(TerminationView {
                        reason: terminate.termination.name().to_string(),
                        description: terminate.description.clone(),
                        on_terminate: terminate
                            .on_terminate
                            .map_or("unknown", |o| o.as_str())
                            .to_string(),
                    });
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The full prompt of call `n` (0-based, as [`StepView::index`]); `None` past the last call.
///
/// Errors: the file cannot be read, or a record before it cannot be rebuilt.
pub fn prompt(path: &Path, n: usize) -> Result<Option<String>, ReadError> {
    let mut reader = TraceReader::open(path)?;
    let mut seen = 0;
    while let Some(record) = reader.next_record() {
        let record = record?;
        if record.call().is_some() {
            if seen == n {
                return Ok(Some(reader.prompt().to_string()));
            }
            seen += 1;
        }
    }
    Ok(None)
}

fn step_view(index: usize, record: &Record, prompt: &str, turn: Option<&Attempt>) -> StepView {
    let Some(call) = record.call() else {
        return StepView::empty(index);
    };
    let parse = call.parse.as_ref();
    let completion = call.completion.as_ref();
    let response = call.response.as_ref();
    let usage = completion.and_then(|c| c.usage);
    let t = &call.timings;
    let timings = [
        ("render_ms", t.render_ms),
        ("backend_ms", t.backend_ms),
        ("parse_ms", t.parse_ms),
        ("total_ms", t.total_ms),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let elided = call
        .context
        .as_ref()
        .filter(|c| c.elided_observations > 0)
        .map(|c| {
            format!(
                "{} observations before step {} elided ({} bytes) to fit {} tokens",
                c.elided_observations, c.elided_before_step, c.elided_bytes, c.context_length
            )
        });
    StepView {
        index,
        step: call.step as u64,
        attempt: call.attempt as u64,
        side_call: matches!(record.body, Body::SideCall(_))
            .then(|| call.kind.map_or("side_call", |k| k.as_str()).to_string()),
        decision: call.decision.as_str().to_string(),
        thought: parse.map(|p| p.thought.clone()).unwrap_or_default(),
        action: parse.and_then(|p| p.action.as_ref()).map(action_view),
        failure: parse.and_then(|p| p.error.as_ref()).map(|e| FailureView {
            class: e.class.as_str().into(),
            detail: e.detail.clone(),
        }),
        observation: turn.and_then(|t| t.observation.clone()),
        nudge: None,
        termination: None,
        error: call.error.clone(),
        completion: completion.map(|c| c.text.clone()),
        backend_finish: completion.and_then(|c| c.finish_reason.clone()),
        matched_stop: completion
            .and_then(|c| c.matched_stop.as_ref())
            .map(|s| format!("{s:?}")),
        sent_finish: response.map(|r| r.finish_reason.as_str().to_string()),
        sent_tool: response
            .and_then(|r| r.tool_call.as_ref())
            .map(|c| c.function.name.clone()),
        sent: (call.decision == StepDecision::Terminate)
            .then(|| response.map(sent_view))
            .flatten(),
        prompt_tokens: usage.map(|u| u.prompt_tokens),
        completion_tokens: usage.map(|u| u.completion_tokens),
        timings,
        dropped: dropped(call),
        notes: parse.map(|p| p.notes.clone()).unwrap_or_default(),
        elided,
        flags: turn.map(flags).unwrap_or_default(),
        prompt: call.prompt.as_ref().map(|p| prompt_view(p, prompt)),
        more: Vec::new(),
    }
}

impl StepView {
    /// A view of a record that is no completion call (not reached: only calls are shown).
    fn empty(index: usize) -> Self {
        Self {
            index,
            step: 0,
            attempt: 0,
            side_call: None,
            decision: String::new(),
            thought: String::new(),
            action: None,
            failure: None,
            observation: None,
            nudge: None,
            termination: None,
            error: None,
            completion: None,
            backend_finish: None,
            matched_stop: None,
            sent_finish: None,
            sent_tool: None,
            sent: None,
            prompt_tokens: None,
            completion_tokens: None,
            timings: Vec::new(),
            dropped: None,
            notes: Vec::new(),
            elided: None,
            flags: Vec::new(),
            prompt: None,
            more: Vec::new(),
        }
    }
}

/// `parse.dropped_bytes` when the dropped text (the end of the completion) is more than
/// whitespace: the newline after an action is not worth a line on the page.
fn dropped(call: &StepRecord) -> Option<u64> {
    let n = call
        .parse
        .as_ref()
        .map(|p| p.dropped_bytes)
        .filter(|n| *n > 0)?;
    let text = &call.completion.as_ref()?.text;
    let tail = text
        .len()
        .checked_sub(n)
        .and_then(|start| text.get(start..));
    match tail {
        Some(tail) if tail.trim().is_empty() => None,
        _ => Some(n as u64),
    }
}

/// The trace's `response` (content and/or `tool_call` with its JSON `arguments` string).
fn sent_view(response: &ResponseRecord) -> SentView {
    let tool_call = response.tool_call.as_ref().map(|c| &c.function).map(|f| {
        let arguments = f.arguments.as_str();
        let arguments = match serde_json::from_str::<Value>(arguments) {
            Ok(Value::Object(map)) => map
                .into_iter()
                .map(|(k, v)| {
                    let shown = match v {
                        Value::String(s) => s,
                        other => serde_json::to_string_pretty(&other).unwrap_or_default(),
                    };
                    (k, shown)
                })
                .collect(),
            _ => vec![("arguments".to_string(), arguments.to_string())],
        };
        ActionView {
            tool: f.name.clone(),
            arguments,
        }
    });
    let content = response
        .content
        .as_deref()
        .filter(|c| !c.trim().is_empty())
        .map(str::to_string);
    SentView { tool_call, content }
}

fn action_view(action: &Action) -> ActionView {
    match action {
        Action::Call { tag, arguments } => ActionView {
            tool: tag.clone(),
            arguments: arguments
                .iter()
                .map(|(k, v)| {
                    let shown = match v {
                        Value::String(s) => s.clone(),
                        other => serde_json::to_string_pretty(other).unwrap_or_default(),
                    };
                    (k.clone(), shown)
                })
                .collect(),
        },
        Action::Submit { message } => ActionView {
            tool: "submit".into(),
            arguments: message
                .iter()
                .map(|m| ("message".to_string(), m.clone()))
                .collect(),
        },
    }
}

/// The report's reading of an accepted turn as short flags (none for a turn the scaffold
/// never executed: unparsable, nudged, or replaced by the termination).
fn flags(turn: &Attempt) -> Vec<&'static str> {
    let mut flags = Vec::new();
    if turn.parse_error.is_some() || turn.nudge.is_some() || turn.terminated {
        return flags;
    }
    if turn.is_edit {
        flags.push("edit");
    }
    if turn.shell_command.as_deref().is_some_and(is_test_command) {
        flags.push("test");
        if turn.observation.as_deref().is_some_and(shows_test_failure) {
            flags.push("failed test");
        }
    }
    if turn.is_submit {
        flags.push("submit");
    }
    flags
}

fn prompt_view(record: &PromptRecord, full: &str) -> PromptView {
    let inline = full.len() <= INLINE_PROMPT_BYTES;
    // The new part, at most the last INLINE_PROMPT_BYTES of it (a first prompt is all new).
    let mut from = record
        .prefix_bytes
        .max(full.len().saturating_sub(INLINE_PROMPT_BYTES))
        .min(full.len());
    while !full.is_char_boundary(from) {
        from += 1;
    }
    PromptView {
        bytes: full.len(),
        sha256: record.sha256.clone(),
        full: inline.then(|| full.to_string()),
        new_part: (!inline).then(|| full.get(from..).unwrap_or_default().to_string()),
        new_from: from,
    }
}
