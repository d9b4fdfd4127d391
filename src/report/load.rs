//! Trace files → [`Trajectory`] values.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

use super::behaviour::MULTIPLE_TOOL_CALLS;
use super::protocol::{self, SessionProtocol};
use super::{Attempt, Trajectory};
use crate::conversation::{tool_output_text, Conversation};
use crate::openai::chat::{ChatCompletionRequest, ChatMessage};
use crate::policy;
use crate::profile::Action;
use crate::profile::{Profiles, ResolvedProfile, ScaffoldReply, ToolRole};
use crate::session::CallId;
use crate::trace::delta::RequestState;
use crate::trace::read::{Body, ReadError, Record, TraceFilesError, TraceReader};
use crate::trace::{RunSource, StepDecision, StepRecord};

/// Errors reading trace files.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

impl From<TraceFilesError> for LoadError {
    fn from(e: TraceFilesError) -> Self {
        Self::Io {
            path: e.path,
            source: e.source,
        }
    }
}

/// One file's trajectory (`None`: no `session` record) and the lines skipped in it.
pub type Loaded = (Option<Trajectory>, FileNotes);

/// What was read from one trace file besides its trajectory: lines the reader skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileNotes {
    /// Lines that are not valid records (1-based), not counting a torn last line.
    pub invalid_lines: Vec<usize>,
    /// The file holds side calls and no `step` record (a client's title request): a
    /// session record but no trajectory, so the trajectory is `None`.
    pub side_calls_only: bool,
    /// The session is a subagent's (session record `subagent`): left out, the trajectory
    /// is `None`.
    pub subagent: bool,
    /// The last line was cut short (a write interrupted by a crash) and skipped.
    pub torn_tail: bool,
}

/// The trajectory recorded in one session file; `None` for a file with no `session` record.
/// See [`trajectory_with_notes`].
///
/// Errors: the file cannot be read, or a delta does not apply.
pub fn trajectory(path: &Path) -> Result<Option<Trajectory>, LoadError> {
    trajectory_with_notes(path).map(|(t, _)| t)
}

/// The trajectory recorded in one session file (`None` for a file with no `session`
/// record, with side calls and no `step` record: a client's title request, or a subagent's),
/// and the lines the reader skipped.
///
/// Turns are the records of model completions (`step` records with a `completion`; side
/// calls, the Terminus confirmation turn and failed backend calls are not turns). A turn's
/// observation is what the scaffold sent back for that step: the result of its tool call
/// (found by the proxy-minted call id, which names the step) in the first request that
/// carried it (a side call's too: a compaction request may be the last to hold a result), so scaffolds that later elide or condense old observations (SWE-agent's
/// `last_n_observations`, OpenHands condensers) are still read right; for turns without a
/// tool call id (content dialects), the step's result in the last request of the file, read
/// with the same conversation rules as the proxy.
///
/// Errors: the file cannot be read, or a delta does not apply.
pub fn trajectory_with_notes(path: &Path) -> Result<Loaded, LoadError> {
    let invalid = |e: ReadError| LoadError::Invalid {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let mut reader = TraceReader::open(path).map_err(|e| match e {
        ReadError::Io { path, source } => LoadError::Io { path, source },
        other => invalid(other),
    })?;
    let mut notes = FileNotes {
        invalid_lines: reader.invalid_lines().to_vec(),
        torn_tail: reader.torn_tail(),
        side_calls_only: false,
        subagent: false,
    };
    let Some(session) = reader.session().cloned() else {
        return Ok((None, notes));
    };
    if session.subagent {
        notes.subagent = true;
        return Ok((None, notes));
    }
    let mut trajectory = Trajectory {
        session: crate::trace::read::trace_stem(path).to_string(),
        label: match session.label.as_str() {
            "" => "unknown".into(),
            label => label.to_string(),
        },
        instance_id: session.task.clone(),
        run: (session.run_source == RunSource::Header).then_some(session.run),
        start_ms: reader.session_time_ms().unwrap_or(0),
        profile: session.profile.clone(),
        format: session.format.clone(),
        prefix: session.prefix.as_ref().map(|p| (p.id.clone(), p.k)),
        task_text: session.task_text.clone(),
        protocol: SessionProtocol {
            mode: session.mode.map(|m| m.as_str().to_string()),
            // Passthrough before `--tool-calls` kept the first call.
            tool_calls: (session.mode == Some(crate::trace::SessionMode::Passthrough))
                .then(|| session.tool_calls.clone().unwrap_or_else(|| "first".into())),
            prefix_k: session.prefix_k,
            // With K 0 no prefix is rendered: the set loaded does not shape the prompts.
            prefix_set: match session.prefix_k {
                Some(0) => Some(protocol::NO_PREFIX_SET.to_string()),
                _ => session.prefix_set.as_ref().map(protocol::prefix_set_name),
            },
            prefix_source: protocol::prefix_source(
                session.prefix_source,
                session.prefix.as_ref().map(|p| p.matched_by),
            ),
            rules: session.rules,
            backend_model: None,
            // Two builds of one version may parse or decide differently: the commit tells them
            // apart where the record has it.
            proxy_version: session
                .proxy_version
                .clone()
                .map(|v| match &session.proxy_build {
                    Some(build) => format!("{v} ({build})"),
                    None => v,
                }),
        },
        ..Trajectory::default()
    };
    let mut first_results = FirstResults::default();
    // Replies of several tool calls: the index of their turn and the ids they sent.
    let mut several: Vec<(usize, Vec<String>)> = Vec::new();
    let (mut steps, mut side_calls) = (0usize, 0usize);
    while let Some(record) = reader.next_record() {
        let record = record.map_err(invalid)?;
        match &record.body {
            Body::SideCall(call) => {
                // A compaction request may be the first to carry the last results.
                first_results.read(call, reader.request());
                side_calls += 1;
            }
            Body::Step(call) => {
                steps += 1;
                first_results.read(call, reader.request());
                trajectory.error = call.error.clone();
                if let Some(turn) = turn(&record) {
                    if trajectory.protocol.backend_model.is_none() {
                        trajectory.protocol.backend_model =
                            call.completion.as_ref().map(|c| c.model.clone());
                    }
                    // Several tool calls of one reply: each further one is an action of the
                    // next step, as the scaffold's history numbers them.
                    let more = call.parse.as_ref().map_or(&[][..], |p| &p.more_actions);
                    let continued = more.iter().enumerate().map(|(i, action)| Attempt {
                        step: turn.step + 1 + i,
                        attempt: turn.attempt,
                        is_submit: matches!(action, Action::Submit { .. }),
                        action: Some(action.clone()),
                        continued: true,
                        ..Attempt::default()
                    });
                    let continued: Vec<Attempt> = continued.collect();
                    if !continued.is_empty() {
                        let sent = call.response.as_ref().map(|r| {
                            r.tool_call
                                .iter()
                                .chain(&r.more_tool_calls)
                                .map(|c| c.id.clone())
                                .collect()
                        });
                        several.push((trajectory.attempts.len(), sent.unwrap_or_default()));
                    }
                    trajectory.attempts.push(turn);
                    trajectory.attempts.extend(continued);
                }
            }
            Body::Nudge(nudge) => {
                if let Some(last) = trajectory.attempts.last_mut() {
                    last.nudge = Some(nudge.kind);
                }
            }
            Body::Terminate(terminate) => {
                trajectory.termination = Some(terminate.termination.name().to_string());
                if let Some(last) = trajectory.attempts.last_mut() {
                    last.terminated = true;
                }
            }
            _ => {}
        }
    }
    if steps == 0 && side_calls > 0 {
        notes.side_calls_only = true;
        return Ok((None, notes));
    }
    drop_rejected_calls(&mut trajectory.attempts, &several, &first_results);
    classify(&mut trajectory, reader.request(), &first_results);
    Ok((Some(trajectory), notes))
}

/// Results of the proxy-minted tool calls as the scaffold first sent them, by step (the
/// step is part of the minted id, see [`CallId`]).
#[derive(Debug, Default)]
struct FirstResults {
    by_step: HashMap<usize, String>,
    /// Every proxy-minted id a tool result answered.
    answered: std::collections::HashSet<String>,
}

impl FirstResults {
    /// Reads the tool messages that `record`'s request delta sent (the messages from
    /// `messages_from` on of the rebuilt `request`); a step's first result is kept.
    fn read(&mut self, call: &StepRecord, request: &RequestState) {
        let Some(from) = call.request.as_ref().map(|r| r.messages_from) else {
            return;
        };
        let messages = request.messages();
        for message in messages.get(from..).unwrap_or_default() {
            if message.get("role").and_then(Value::as_str) != Some("tool") {
                continue;
            }
            let id = message.get("tool_call_id").and_then(Value::as_str);
            let Some(step) = id.and_then(CallId::parse).map(|id| id.step) else {
                continue;
            };
            self.answered.insert(id.unwrap_or_default().to_string());
            if self.by_step.contains_key(&step) {
                continue;
            }
            if let Ok(decoded) = serde_json::from_value::<ChatMessage>(message.clone()) {
                self.by_step.insert(step, decoded.content.to_string());
            }
        }
    }
}

/// The built-in profiles, parsed once per process.
fn builtin_profiles() -> Option<&'static Profiles> {
    static PROFILES: OnceLock<Option<Profiles>> = OnceLock::new();
    PROFILES.get_or_init(|| Profiles::builtin().ok()).as_ref()
}

/// Whether the scaffold takes `action` as its finish action: `<submit/>`, or an action it
/// reads back as one, such as mini-swe-agent's `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`
/// written as a shell command (the same mapping the proxy applies to the history).
fn reads_as_submit(action: &Action, tools: &ResolvedProfile) -> bool {
    if matches!(action, Action::Submit { .. }) {
        return true;
    }
    if let Some(dialect) = tools.dialect {
        let content = dialect.write("", Some(action), tools);
        return matches!(dialect.read(&content, tools).1, Some(Action::Submit { .. }));
    }
    match tools.to_scaffold(action, "") {
        ScaffoldReply::ToolCall { name, arguments } => {
            matches!(
                tools.from_scaffold(&name, &std::sync::Arc::new(arguments)),
                Action::Submit { .. }
            )
        }
        ScaffoldReply::Content(_) => false,
    }
}

/// Whether `record` is one of the trajectory's turns: a `step` record with a model
/// completion (see [`trajectory_with_notes`]). The turns of a [`Trajectory`] are these
/// records, in file order.
pub fn is_turn(record: &Record) -> bool {
    matches!(&record.body, Body::Step(call) if call.completion.is_some())
}

/// A turn from a `step` record, without the parts that need the profile.
fn turn(record: &Record) -> Option<Attempt> {
    if !is_turn(record) {
        return None;
    }
    let call = record.call()?;
    let parse = call.parse.as_ref();
    let action: Option<Action> = parse.and_then(|p| p.action.clone());
    Some(Attempt {
        step: call.step,
        attempt: call.attempt,
        parse_error: parse
            .and_then(|p| p.error.as_ref())
            .map(|e| e.class.as_str().to_string()),
        is_submit: matches!(action, Some(Action::Submit { .. })),
        terminated: call.decision == StepDecision::Terminate,
        action,
        ..Attempt::default()
    })
}

/// A reply of several tool calls (passthrough `--tool-calls all`) that the scaffold did not
/// run: another turn followed and no result of any of its calls came back (SWE-agent takes one
/// call a turn and asks again, with the reply as plain content). Its further calls are
/// dropped and its turn gets the class [`MULTIPLE_TOOL_CALLS`]: parsable, not valid, not
/// accepted. The last reply of a trajectory counts as run (nothing says otherwise).
/// `several`: the index of each such reply's turn and the ids it sent (by id, not by step: after
/// a rejection the next reply has the same step).
fn drop_rejected_calls(
    attempts: &mut Vec<Attempt>,
    several: &[(usize, Vec<String>)],
    first: &FirstResults,
) {
    // From the last, so the indexes of the earlier ones stay right.
    for (i, ids) in several.iter().rev() {
        let end = i + 1 + attempts[i + 1..].iter().take_while(|t| t.continued).count();
        let followed = end < attempts.len();
        if followed && !ids.iter().any(|id| first.answered.contains(id)) {
            attempts[*i].parse_error = Some(MULTIPLE_TOOL_CALLS.to_string());
            attempts.drain(i + 1..end);
        }
    }
}

/// The calls of the trajectory's last reply that come before a submission of the same reply
/// (passthrough `--tool-calls all`; mini-swe-agent ends the run on the submission, so their
/// results never come back): [`Attempt::ran_before_submit`].
fn mark_ran_before_submit(attempts: &mut [Attempt]) {
    let Some(start) = attempts.iter().rposition(|t| !t.continued) else {
        return;
    };
    let reply = &mut attempts[start..];
    if let Some(submit) = reply.iter().rposition(|t| t.is_submit) {
        for t in &mut reply[..submit] {
            t.ran_before_submit = t.observation.is_none() && t.parse_error.is_none();
        }
    }
}

/// Fills what needs the profile's tools: shell commands, edits, submissions, observations.
fn classify(trajectory: &mut Trajectory, request: &RequestState, first: &FirstResults) {
    let Some(profiles) = builtin_profiles() else {
        return;
    };
    let Ok(profile) = profiles.get(&trajectory.profile) else {
        return;
    };
    let decoded = request
        .is_known()
        .then(|| serde_json::to_vec(&request.body()).ok())
        .flatten()
        .and_then(|body| ChatCompletionRequest::from_slice(&body).ok());
    let mut tools =
        ResolvedProfile::build(profile, decoded.as_ref().map_or(&[][..], |r| &*r.tools));
    if let (Some(crate::profile::Dialect::MiniText), Some(r)) = (tools.dialect, &decoded) {
        // The block form the scaffold asked for, as the proxy read it (src/pipeline.rs).
        tools.mini = crate::profile::MiniFormat::from_prompt(&r.system_text(), r.first_user_text());
    }
    let observations: Vec<Option<String>> = decoded
        .map(|r| Conversation::from_messages(&r.messages, &tools))
        .map(|c| {
            c.steps
                .into_iter()
                .filter(|s| s.action.is_some())
                .map(|s| s.observation.map(|o| o.to_string()))
                .collect()
        })
        .unwrap_or_default();
    for turn in &mut trajectory.attempts {
        let Some(action) = &turn.action else {
            continue;
        };
        turn.is_edit = policy::is_edit(action, &tools);
        turn.edit_targets = policy::edit_targets(action, &tools);
        turn.is_submit = reads_as_submit(action, &tools);
        if let Action::Call { tag, arguments } = action {
            if let Some(ToolRole::Shell { command_parameter }) = tools.get(tag).map(|t| &t.role) {
                turn.shell_command = arguments
                    .get(command_parameter)
                    .and_then(Value::as_str)
                    .map(str::to_string);
            }
        }
        let accepted = turn.nudge.is_none() && !turn.terminated;
        if accepted {
            // Decoded as the proxy decodes it (mini-swe-agent's `{"returncode", "output"}`
            // JSON → its output and `[exit status N]`), so the rules read the same text.
            turn.observation = first
                .by_step
                .get(&turn.step)
                .map(|raw| tool_output_text(raw, tools.tool_output).into_owned())
                .or_else(|| observations.get(turn.step).cloned().flatten());
        }
    }
    mark_ran_before_submit(&mut trajectory.attempts);
}
