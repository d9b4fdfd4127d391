//! Chat messages → the scaffold-neutral trajectory: a task and a list of steps
//! (thought, action, observation), per docs/architecture.md "The pipeline".
//!
//! Rules, in message order:
//! - `system`/`developer` messages before the first assistant message form the system text;
//!   `user` (and stray `tool`) messages before it form the task text.
//! - Each assistant message is one step per tool call (the first carries the message text as
//!   the thought), or one step without action when it has no tool call (an unparsable turn).
//! - A `tool`/`function` message is the observation of the step whose call id it names, else
//!   of the latest step; a profile's `tool_output` decodes a wrapped command output first
//!   ([`tool_output_text`]), so live observations read like the prefix's plain ones.
//! - A `user` or `system` message after the first assistant message (e.g. a scaffold's
//!   format-error reply) is the observation of the latest step if that step has none yet
//!   (the scaffold kept the failed turn, as SWE-agent does); otherwise it is a *feedback step*:
//!   no thought, no action, the message as observation (the scaffold dropped the failed turn,
//!   as mini-swe-agent does). Either way the prompt only grows at its end (append-only).
//! - A profile may limit the task to its first N user messages (`task_user_messages`): later
//!   ones before any assistant message are feedback steps too (mini-swe-agent's format error
//!   on the very first turn).
//! - Observation text (tool output and feedback) has its line ends normalised
//!   ([`normalize_line_ends`]): `\r\n` and a lone `\r` become `\n`, so terminal output
//!   (SWE-ReX, a pty) renders the same on every turn however the scaffold relays it.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::Value;

use crate::openai::chat::{ChatMessage, Role};
use crate::profile::{Action, Dialect, MiniFormat, ResolvedProfile, ToolOutput};
use crate::session::NudgeKind;

/// One step of a trajectory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    /// Shared with the decoded message it was read from when that message's content needed
    /// no trimming (most do not): a turn in flight holds its history's thoughts once.
    pub thought: Arc<str>,
    pub action: Option<Action>,
    pub observation: Option<Observation>,
    /// Tool-call id of the action in the scaffold's history, if any.
    pub call_id: Option<String>,
    /// Index of the assistant message this step came from (parallel calls share one).
    pub turn: usize,
    /// Set on a step the scaffold never saw: an action the proxy rejected with this nudge,
    /// and the hint as its observation (re-rendered from the ids on every later turn).
    pub nudge: Option<NudgeKind>,
}

/// An observation's text, and its digest when it was read whole from a decoded message
/// (that message's, kept with it: [`ChatMessage::content_digest`]). The render cache keys
/// each step by the digests of its texts ([`Observation::digest`]), and a history's
/// observations are most of its bytes: a running session's turn would otherwise hash its
/// whole history again (issue 23). Immutable; equal when the texts are.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    text: Arc<str>,
    digest: Option<u128>,
}

impl Observation {
    /// `message`'s own text, with the digest kept with it.
    fn of_message(message: &ChatMessage) -> Self {
        Self {
            text: message.content.clone(),
            digest: Some(message.content_digest.of(&message.content)),
        }
    }

    /// [`crate::util::text_digest`] of the text.
    pub fn digest(&self) -> u128 {
        self.digest
            .unwrap_or_else(|| crate::util::text_digest(&self.text))
    }

    /// The text, shared.
    pub fn shared(&self) -> &Arc<str> {
        &self.text
    }
}

impl std::ops::Deref for Observation {
    type Target = str;
    fn deref(&self) -> &str {
        &self.text
    }
}

impl PartialEq for Observation {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl From<Arc<str>> for Observation {
    fn from(text: Arc<str>) -> Self {
        Self { text, digest: None }
    }
}

impl From<&str> for Observation {
    fn from(text: &str) -> Self {
        Arc::<str>::from(text).into()
    }
}

impl From<String> for Observation {
    fn from(text: String) -> Self {
        Arc::<str>::from(text).into()
    }
}

/// A whole conversation in neutral form.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conversation {
    /// System text (scaffold instructions), may be empty.
    pub system: String,
    /// The task: user text before the first assistant message.
    pub task: String,
    /// Reference steps of this task (a prefix), rendered before the live steps; the scaffold
    /// never ran them, so no rule counts them.
    pub prefix: Vec<Step>,
    /// A demonstration on a made-up task (a profile's default prefix), rendered as an example.
    pub example: Option<Example>,
    pub steps: Vec<Step>,
    /// The steps of this trajectory that the history no longer holds, when the client
    /// compacted its context (their count and whether one of them edited a file); `None`
    /// when the history starts at the trajectory's first step.
    pub compacted: Option<Compacted>,
    /// The request is a subagent's (its parent agent handed it a task: a session of its own,
    /// [`crate::openai::chat::ChatCompletionRequest::is_subagent`]): no submit-before-edit
    /// nudge, as a subagent may be asked only to look.
    pub subagent: bool,
}

/// What the rules need of the steps a client compacted away.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Compacted {
    /// Actions before the history's first step.
    pub steps: usize,
    /// Whether one of them was an edit (for the submit-before-edit nudge).
    pub edited: bool,
}

/// A worked example on another task: its task text and steps.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Example {
    pub task: String,
    pub steps: Vec<Step>,
}

impl Conversation {
    /// Builds the neutral conversation from a request's messages.
    pub fn from_messages(
        messages: &[std::sync::Arc<ChatMessage>],
        tools: &ResolvedProfile,
    ) -> Self {
        let mut conv = Conversation::default();
        // Room for every step at once (at most one per tool call or reply, and per other
        // message that is not a tool result): a long history's steps are kept while its
        // completion call waits, and a vector grown by doubling holds up to twice their room.
        conv.steps.reserve_exact(
            messages
                .iter()
                .map(|m| match m.role {
                    Role::Assistant => m.tool_calls.len().max(1),
                    Role::Tool | Role::Function => 0,
                    _ => 1,
                })
                .sum(),
        );
        let mut system = Vec::new();
        let mut task = Vec::new();
        let mut task_users = 0;
        for message in messages {
            let text = &*message.content;
            let task_full = tools.task_user_messages.is_some_and(|n| task_users >= n);
            match message.role {
                Role::Assistant => conv.push_assistant(message, tools),
                Role::Tool | Role::Function if !conv.steps.is_empty() => {
                    let index = message
                        .tool_call_id
                        .as_deref()
                        .and_then(|id| {
                            conv.steps
                                .iter()
                                .rposition(|s| s.call_id.as_deref() == Some(id))
                        })
                        .unwrap_or(conv.steps.len() - 1);
                    let text = tool_output_text(text, tools.tool_output);
                    append_observation(&mut conv.steps[index], message, &text);
                }
                _ if !conv.steps.is_empty() => {
                    let last = conv.steps.len() - 1;
                    if conv.steps[last].observation.is_none() {
                        append_observation(&mut conv.steps[last], message, text);
                    } else {
                        conv.push_feedback(message);
                    }
                }
                Role::User if task_full => conv.push_feedback(message),
                Role::System | Role::Developer => push_nonempty(&mut system, text),
                Role::User | Role::Tool | Role::Function => {
                    task_users += usize::from(message.role == Role::User);
                    push_nonempty(&mut task, text);
                }
            }
        }
        conv.system = system.join("\n\n");
        conv.task = task.join("\n\n");
        conv
    }

    /// A step with only an observation: scaffold feedback on a turn it did not keep.
    fn push_feedback(&mut self, message: &ChatMessage) {
        let turn = self.steps.last().map_or(0, |s| s.turn + 1);
        self.steps.push(Step {
            observation: Some(observation_text(message, &message.content)),
            turn,
            ..Step::default()
        });
    }

    /// Steps that carry an action the scaffold ran (nudged steps excluded): the step index
    /// of the next action, stable across requeries of a failed turn.
    pub fn action_count(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| s.action.is_some() && s.nudge.is_none())
            .count()
    }

    /// Actions the scaffold ran, in order (nudged steps excluded).
    pub fn actions(&self) -> impl Iterator<Item = &Action> {
        self.steps
            .iter()
            .filter(|s| s.nudge.is_none())
            .filter_map(|s| s.action.as_ref())
    }

    /// Number of trailing steps without an action: feedback steps and failed turns the
    /// scaffold kept. Each was produced by a request whose prompt rendered the steps before it.
    pub fn trailing_actionless(&self) -> usize {
        self.steps
            .iter()
            .rev()
            .take_while(|s| s.action.is_none())
            .count()
    }

    fn push_assistant(&mut self, message: &ChatMessage, tools: &ResolvedProfile) {
        let turn = self.steps.last().map_or(0, |s| s.turn + 1);
        if let (Some(dialect), true) = (tools.dialect, message.tool_calls.is_empty()) {
            let (thought, action) = read_reply(dialect, message, tools);
            self.steps.push(Step {
                thought,
                action,
                turn,
                ..Step::default()
            });
            return;
        }
        let trimmed = message.content.trim();
        let mut thought: Arc<str> = if trimmed.len() == message.content.len() {
            message.content.clone()
        } else {
            trimmed.into()
        };
        if message.tool_calls.is_empty() {
            self.steps.push(Step {
                thought,
                turn,
                ..Step::default()
            });
            return;
        }
        for (i, call) in message.tool_calls.iter().enumerate() {
            self.steps.push(Step {
                // Parallel calls of one message: the thought goes with the first.
                thought: if i == 0 {
                    std::mem::take(&mut thought)
                } else {
                    Arc::default()
                },
                action: Some(tools.from_scaffold(&call.function.name, &call.function.arguments)),
                observation: None,
                call_id: call.id.clone(),
                turn,
                nudge: None,
            });
        }
    }
}

fn push_nonempty(parts: &mut Vec<String>, text: &str) {
    if !text.trim().is_empty() {
        parts.push(text.trim_end().to_string());
    }
}

/// A tool message's content as the observation text: decoded per the profile's `tool_output`
/// (see [`ToolOutput`]), else unchanged.
pub fn tool_output_text(content: &str, shape: ToolOutput) -> Cow<'_, str> {
    if shape != ToolOutput::ReturncodeJson || !content.trim_start().starts_with('{') {
        return Cow::Borrowed(content);
    }
    let Ok(Value::Object(object)) = serde_json::from_str::<Value>(content) else {
        return Cow::Borrowed(content);
    };
    let Some(returncode) = object.get("returncode").and_then(Value::as_i64) else {
        return Cow::Borrowed(content);
    };
    let field = |name: &str| object.get(name).and_then(Value::as_str);
    let mut text = match (field("output"), field("output_head"), field("output_tail")) {
        (Some(output), _, _) => output.to_string(),
        (None, Some(head), Some(tail)) => {
            let elided = object
                .get("elided_chars")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            format!("{head}\n[… {elided} characters elided …]\n{tail}")
        }
        _ => return Cow::Borrowed(content),
    };
    if let Some(info) = field("exception_info").filter(|i| !i.is_empty()) {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(info);
    }
    let end = text.trim_end_matches('\n').len();
    text.truncate(end);
    if returncode != 0 {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&format!("[exit status {returncode}]"));
    }
    Cow::Owned(text)
}

/// `text` with `\r\n` and every lone `\r` replaced by `\n` (Python's universal newlines:
/// a progress bar's carriage returns become separate lines rather than hidden overwrites
/// the model cannot interpret); borrowed when it has no `\r`. Deterministic, so an
/// observation renders identically on every later turn (prefix-cache stable).
pub fn normalize_line_ends(text: &str) -> Cow<'_, str> {
    // The SIMD search: this runs over every observation of the history on every turn.
    if memchr::memchr(b'\r', text.as_bytes()).is_none() {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.replace("\r\n", "\n").replace('\r', "\n"))
}

/// `text` (read from `message`) as an observation: line ends normalised; the message's own
/// text, shared rather than copied and with the digest kept with it, when that is all it is
/// (a history's observations are most of its bytes, and the conversation lives as long as
/// the turn's completion call).
fn observation_text(message: &ChatMessage, text: &str) -> Observation {
    match normalize_line_ends(text) {
        Cow::Borrowed(text) if std::ptr::eq(text, &*message.content) => {
            Observation::of_message(message)
        }
        text => text.into_owned().into(),
    }
}

fn append_observation(step: &mut Step, message: &ChatMessage, text: &str) {
    step.observation = Some(match step.observation.take() {
        Some(obs) => format!("{}\n\n{}", &*obs, normalize_line_ends(text)).into(),
        None => observation_text(message, text),
    });
}

/// A past reply of a text dialect read back ([`Dialect::read`]), kept with the decoded
/// message ([`ChatMessage::read`]): the message cache hands the same message to every later
/// request of the session, and reading mini's blocks or Terminus' JSON is a pass over the
/// reply (a fifth of a running mini session's instructions at 100 turns, callgrind). Kept
/// for the dialects whose reading depends only on the dialect and mini's block form; an
/// OpenHands function call's depends on the offered tools and is read each time.
fn read_reply(
    dialect: Dialect,
    message: &ChatMessage,
    tools: &ResolvedProfile,
) -> (Arc<str>, Option<Action>) {
    struct Read {
        dialect: Dialect,
        mini: Option<MiniFormat>,
        thought: Arc<str>,
        action: Option<Action>,
    }
    let mini = match dialect {
        Dialect::MiniText => Some(&tools.mini),
        Dialect::TerminusJson | Dialect::TerminusXml => None,
        Dialect::OpenhandsFunction => {
            let (thought, action) = dialect.read(&message.content, tools);
            return (thought.into(), action);
        }
    };
    let read = message.read.get_or(
        |r: &Read| r.dialect == dialect && r.mini.as_ref() == mini,
        || {
            let (thought, action) = dialect.read(&message.content, tools);
            Read {
                dialect,
                mini: mini.cloned(),
                thought: thought.into(),
                action,
            }
        },
    );
    (read.thought.clone(), read.action.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::chat::ChatCompletionRequest;
    use crate::profile::Profiles;
    use serde_json::json;
    use serde_json::Map;

    fn conv(body: Value) -> Conversation {
        let req = ChatCompletionRequest::from_slice(body.to_string().as_bytes()).unwrap();
        let profiles = Profiles::builtin().unwrap();
        let tools = ResolvedProfile::build(
            profiles.detect(&req.tools, &req.detection_text()),
            &req.tools,
        );
        Conversation::from_messages(&req.messages, &tools)
    }

    fn tools() -> Value {
        json!([
            {"type": "function", "function": {"name": "terminal", "parameters": {"type": "object", "properties": {"command": {"type": "string"}, "security_risk": {"type": "string"}}, "required": ["command"]}}},
            {"type": "function", "function": {"name": "file_editor", "parameters": {"type": "object", "properties": {"command": {"type": "string"}, "path": {"type": "string"}}}}},
            {"type": "function", "function": {"name": "finish", "parameters": {"type": "object", "properties": {"message": {"type": "string"}}}}}
        ])
    }

    /// A turn in flight holds its conversation while the backend generates: a thought that
    /// needs no trimming is its message's text, not a copy of it.
    #[test]
    fn a_thought_shares_its_messages_text_unless_trimmed() {
        let req = ChatCompletionRequest::from_slice(
            json!({"tools": tools(), "messages": [
                {"role": "user", "content": "fix it"},
                {"role": "assistant", "content": "Look first.", "tool_calls": [
                    {"id": "a", "function": {"name": "terminal", "arguments": "{\"command\": \"ls\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "a", "content": "x y"},
                {"role": "assistant", "content": "  Then read it.\n", "tool_calls": [
                    {"id": "b", "function": {"name": "terminal", "arguments": "{\"command\": \"cat x\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "b", "content": "z"}
            ]})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        let tools = ResolvedProfile::build(
            Profiles::builtin()
                .unwrap()
                .detect(&req.tools, &req.detection_text()),
            &req.tools,
        );
        let c = Conversation::from_messages(&req.messages, &tools);
        assert_eq!(&*c.steps[0].thought, "Look first.");
        assert!(Arc::ptr_eq(&c.steps[0].thought, &req.messages[1].content));
        assert_eq!(&*c.steps[1].thought, "Then read it.");
        assert!(!Arc::ptr_eq(&c.steps[1].thought, &req.messages[3].content));
    }

    #[test]
    fn tool_results_match_by_id_and_parallel_calls_become_steps() {
        let c = conv(json!({"tools": tools(), "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "fix it"},
            {"role": "user", "content": "runtime info"},
            {"role": "assistant", "content": "look", "tool_calls": [
                {"id": "a", "function": {"name": "terminal", "arguments": "{\"command\": \"ls\", \"security_risk\": \"LOW\"}"}},
                {"id": "b", "function": {"name": "file_editor", "arguments": {"command": "view", "path": "/x"}}}
            ]},
            {"role": "tool", "tool_call_id": "b", "content": "file x"},
            {"role": "tool", "tool_call_id": "a", "content": "x y"},
            {"role": "assistant", "content": "no idea"},
            {"role": "user", "content": "Your reply had no tool call."},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "function": {"name": "finish", "arguments": "{\"message\": \"done\"}"}}]}
        ]}));
        assert_eq!(c.system, "sys");
        assert_eq!(c.task, "fix it\n\nruntime info");
        assert_eq!(c.steps.len(), 4);
        assert_eq!(&*c.steps[0].thought, "look");
        assert_eq!(
            c.steps[0].action,
            Some(Action::Call {
                tag: "bash".into(),
                arguments: std::sync::Arc::new(Map::from_iter([("command".into(), json!("ls"))]))
            })
        );
        assert_eq!(c.steps[0].observation.as_deref(), Some("x y"));
        assert_eq!(&*c.steps[1].thought, "");
        assert_eq!(c.steps[1].observation.as_deref(), Some("file x"));
        assert_eq!(c.steps[2].action, None);
        assert_eq!(
            c.steps[2].observation.as_deref(),
            Some("Your reply had no tool call.")
        );
        assert_eq!(
            c.steps[3].action,
            Some(Action::Submit {
                message: Some("done".into())
            })
        );
    }

    #[test]
    fn observation_line_ends_are_normalised() {
        assert_eq!(normalize_line_ends("a\r\nb\rc\n\r\n"), "a\nb\nc\n\n");
        assert!(matches!(normalize_line_ends("a\nb"), Cow::Borrowed(_)));
        let c = conv(json!({"messages": [
            {"role": "user", "content": "fix it"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "function": {"name": "terminal", "arguments": "{\"command\": \"ls\"}"}}]},
            {"role": "tool", "tool_call_id": "a", "content": "x\r\ny\r\n"},
            {"role": "user", "content": "note\r\n"},
            {"role": "user", "content": "more\r"}
        ], "tools": tools()}));
        assert_eq!(c.steps[0].observation.as_deref(), Some("x\ny\n"));
        assert_eq!(c.steps[1].observation.as_deref(), Some("note\n"));
        assert_eq!(c.steps[2].observation.as_deref(), Some("more\n"));
    }

    /// An observation that is a message's text as sent is that text, shared (not a copy);
    /// one that was rewritten (line ends, several tool messages joined) is its own text.
    #[test]
    fn observations_share_the_message_text_they_repeat() {
        let body = json!({"messages": [
            {"role": "user", "content": "fix it"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "a", "function": {"name": "terminal", "arguments": "{\"command\": \"ls\"}"}},
                {"id": "b", "function": {"name": "terminal", "arguments": "{\"command\": \"pwd\"}"}}]},
            {"role": "tool", "tool_call_id": "a", "content": "x\ny\n"},
            {"role": "tool", "tool_call_id": "b", "content": "p\r\n"},
            {"role": "user", "content": "a note"},
            {"role": "user", "content": "another note"},
            {"role": "tool", "tool_call_id": "b", "content": "more"}
        ], "tools": tools()});
        let req = ChatCompletionRequest::from_slice(body.to_string().as_bytes()).unwrap();
        let profiles = Profiles::builtin().unwrap();
        let tools = ResolvedProfile::build(
            profiles.detect(&req.tools, &req.detection_text()),
            &req.tools,
        );
        let c = Conversation::from_messages(&req.messages, &tools);
        let shared = |step: usize, message: usize| {
            Arc::ptr_eq(
                c.steps[step].observation.as_ref().unwrap().shared(),
                &req.messages[message].content,
            )
        };
        assert!(shared(0, 2));
        // `p\r\n` with its line end normalised, then the later output of the same call.
        assert_eq!(c.steps[1].observation.as_deref(), Some("p\n\n\nmore"));
        assert!(!shared(1, 3));
        // The last step has an observation: each note is a feedback step, sharing its text.
        assert!(shared(2, 4) && shared(3, 5));
        // Every observation's digest is its text's, kept with the message or not.
        for step in &c.steps {
            let observation = step.observation.as_ref().unwrap();
            assert_eq!(observation.digest(), crate::util::text_digest(observation));
        }
        assert!(c.steps[0].observation.as_ref().unwrap().digest.is_some());
        assert!(c.steps[1].observation.as_ref().unwrap().digest.is_none());
    }

    #[test]
    fn a_text_dialect_reply_is_read_once_per_message_and_format() {
        let mut body: Value = serde_json::from_str(include_str!(
            "../tests/fixtures/requests/mini-swe-agent-v2-text-1.json"
        ))
        .unwrap();
        let messages = body["messages"].as_array_mut().unwrap();
        messages.truncate(2);
        messages
            .push(json!({"role": "assistant", "content": "Look first.\n\n```zsh\nls -la\n```"}));
        messages.push(json!({"role": "user",
            "content": "<returncode>0</returncode>\n<output>\na.py\n</output>"}));
        let req = ChatCompletionRequest::from_slice(body.to_string().as_bytes()).unwrap();
        let profiles = Profiles::builtin().unwrap();
        let mut tools = ResolvedProfile::build(
            profiles.detect(&req.tools, &req.detection_text()),
            &req.tools,
        );
        assert_eq!(tools.dialect, Some(Dialect::MiniText));
        // mini's own fences do not include `zsh`: the reply is a thought without an action.
        let first = Conversation::from_messages(&req.messages, &tools);
        assert_eq!(first.steps[0].action, None);
        assert_eq!(
            Conversation::from_messages(&req.messages, &tools),
            first,
            "read again from the memo"
        );
        // A run whose prompt asks for `zsh` blocks reads the same message anew.
        tools.mini = MiniFormat {
            block: crate::profile::MiniBlock::Fence("zsh".into()),
            ..MiniFormat::default()
        };
        let zsh = Conversation::from_messages(&req.messages, &tools);
        assert_eq!(&*zsh.steps[0].thought, "Look first.");
        assert!(
            matches!(&zsh.steps[0].action, Some(Action::Call { tag, .. }) if tag == "bash"),
            "{:?}",
            zsh.steps[0].action
        );
    }

    #[test]
    fn mini_json_tool_output_renders_as_plain_text() {
        let mini_tools = json!([{"type": "function", "function": {"name": "bash",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]);
        let call = |id: &str| {
            json!({"role": "assistant", "content": "t", "tool_calls": [
            {"id": id, "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}]})
        };
        let c = conv(json!({"tools": mini_tools, "messages": [
            {"role": "user", "content": "fix it"},
            call("a"),
            {"role": "tool", "tool_call_id": "a",
             "content": "{\n  \"returncode\": 1,\n  \"output\": \"FAILED\\n  line 2\\n\"\n}"},
            call("b"),
            {"role": "tool", "tool_call_id": "b", "content": "{\"returncode\": 0, \"output\": \"ok\\n\"}"},
            call("c"),
            {"role": "tool", "tool_call_id": "c", "content": "{\"returncode\": 0, \"output_head\": \"ab\",
              \"output_tail\": \"yz\", \"elided_chars\": 7, \"warning\": \"Output too long.\"}"},
            call("d"),
            {"role": "tool", "tool_call_id": "d", "content": "{\"not\": \"mini\"}"}
        ]}));
        assert_eq!(
            c.steps[0].observation.as_deref(),
            Some("FAILED\n  line 2\n[exit status 1]")
        );
        assert_eq!(c.steps[1].observation.as_deref(), Some("ok"));
        assert_eq!(
            c.steps[2].observation.as_deref(),
            Some("ab\n[… 7 characters elided …]\nyz")
        );
        assert_eq!(
            c.steps[3].observation.as_deref(),
            Some("{\"not\": \"mini\"}")
        );
        // Other profiles keep the content as sent.
        assert_eq!(
            tool_output_text("{\"returncode\": 0, \"output\": \"x\"}", ToolOutput::Text),
            "{\"returncode\": 0, \"output\": \"x\"}"
        );
    }
}
