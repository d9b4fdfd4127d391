//! Side calls: requests that expect prose, not an action (issue 6): Terminus-2's hand-off
//! summary, questions and answers when its context fills, and OpenHands' condenser summaries.
//!
//! Detection: the last user message contains one of [`MARKERS`] (the fixed opening sentences
//! those scaffolds use), or the system text starts with one of [`SYSTEM_MARKERS`] (opencode's
//! title request, which opens no trajectory). Such a request is served as a plain continuation of a role-labelled
//! transcript (`System:`, `User:`, `Assistant:` blocks, ending with `Assistant:`), with no tools,
//! no parsing and no nudges; the trace record has `side_call` set and its step number is
//! that of the trajectory, so it is never counted as a step or an unparsable turn.

use std::sync::LazyLock;

use serde::{Deserialize, Serialize};

use crate::openai::chat::{ChatCompletionRequest, Role};
use crate::util::Markers;

/// Which side call a request is (the trace's `kind` of a `side_call` record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SideCallKind {
    /// Terminus-2's hand-off summary when its context fills.
    TerminusSummary,
    /// Terminus-2's questions of the agent that picks the work up.
    TerminusQuestions,
    /// Terminus-2's answers to those questions.
    TerminusAnswers,
    /// OpenHands' condenser summary.
    OpenhandsCondenser,
    /// A client's compaction of its context: the summary that replaces the history when it
    /// nears the context window (Claude Code, Codex, qwen-code, opencode). The reply is
    /// remembered, so the client's next request, which holds the summary and no minted id,
    /// continues the same session at the next step
    /// ([`crate::session::SessionIndex::find_summary`]).
    Compaction,
    /// A client's own helper request beside the agent's work, outside its trajectory:
    /// qwen-code's memory extraction and progress updates.
    Helper,
    /// A client's request for a title of the conversation (opencode's title generator). It is
    /// sent beside the agent's first turn and opens no trajectory: a trace file holding only
    /// side calls is not counted by `report`.
    Title,
    /// Read only: the first layout's name of a summary.
    Summary,
    /// Read only: the first layout's name of a question.
    Question,
    /// Read only: a kind this build does not know.
    #[serde(other)]
    Unknown,
}

impl SideCallKind {
    /// The trace's name (`terminus_summary`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TerminusSummary => "terminus_summary",
            Self::TerminusQuestions => "terminus_questions",
            Self::TerminusAnswers => "terminus_answers",
            Self::OpenhandsCondenser => "openhands_condenser",
            Self::Compaction => "compaction",
            Self::Helper => "helper",
            Self::Title => "title",
            Self::Summary => "summary",
            Self::Question => "question",
            Self::Unknown => "unknown",
        }
    }
}

/// (kind, marker) pairs, matched against the last user message.
pub const MARKERS: [(SideCallKind, &str); 9] = [
    // qwen-code 0.24 sends its compression prompt first as the last user message under its
    // usual system prompt (and then, retrying, as the system prompt: SYSTEM_MARKERS).
    (
        SideCallKind::Compaction,
        "You are the component that summarizes a conversation when its context window is about to overflow.",
    ),
    // Codex 0.171's compaction prompt, and the proxy's own for its remote compaction.
    (
        SideCallKind::Compaction,
        "You are performing a CONTEXT CHECKPOINT COMPACTION.",
    ),
    (
        SideCallKind::Compaction,
        crate::openai::responses::COMPACTION_REQUEST,
    ),
    // Claude Code 2.1's compaction prompts (automatic, `/compact`, and a partial one).
    (
        SideCallKind::Compaction,
        "Your task is to create a detailed summary of the conversation so far",
    ),
    (
        SideCallKind::Compaction,
        "Your task is to create a detailed summary of this conversation.",
    ),
    (
        SideCallKind::TerminusSummary,
        "You are about to hand off your work to another AI agent.",
    ),
    (
        SideCallKind::TerminusQuestions,
        "You are picking up work from a previous AI agent on this task:",
    ),
    (
        SideCallKind::TerminusAnswers,
        "The next agent has a few questions for you",
    ),
    (
        SideCallKind::OpenhandsCondenser,
        "You are maintaining a context-aware state summary",
    ),
];

/// (kind, marker, at start) triples, matched against the system text: side requests whose
/// instructions are the system prompt. `at start`: the system text must open with it (a
/// title generator's prompt is short and could be quoted in another); else anywhere.
pub const SYSTEM_MARKERS: [(SideCallKind, &str, bool); 5] = [
    (SideCallKind::Title, "You are a title generator.", true),
    // qwen-code 0.24's helpers (its memory extraction follows a run's end).
    (
        SideCallKind::Helper,
        "You are now acting as the managed memory extraction subagent",
        false,
    ),
    (
        SideCallKind::Helper,
        "You are an assistant that rewrites raw coding-agent output into concise, user-friendly progress updates.",
        false,
    ),
    // qwen-code 0.24's chat compression.
    (
        SideCallKind::Compaction,
        "You are the component that summarizes a conversation when its context window is about to overflow.",
        false,
    ),
    // opencode 1.18's compaction agent.
    (
        SideCallKind::Compaction,
        "You are a context summarization agent.",
        false,
    ),
];

/// Stop sequences of a side call: the next turn of the transcript (or a step heading a base
/// model may borrow from the trajectory format).
pub const STOP: [&str; 3] = ["\nUser:", "\nSystem:", "\n## Thinking"];

/// The kind of side call a request is, if any.
pub fn detect(request: &ChatCompletionRequest) -> Option<SideCallKind> {
    static IN_SYSTEM: LazyLock<Markers> =
        LazyLock::new(|| Markers::new(SYSTEM_MARKERS.iter().map(|(_, m, _)| m)));
    static IN_USER: LazyLock<Markers> =
        LazyLock::new(|| Markers::new(MARKERS.iter().map(|(_, m)| m)));
    let system = request.system_text();
    let in_system = SYSTEM_MARKERS
        .iter()
        .enumerate()
        .find(|(i, (_, marker, at_start))| {
            if *at_start {
                system.starts_with(marker)
            } else {
                IN_SYSTEM.in_text(*i, &system)
            }
        });
    if let Some((_, (kind, _, _))) = in_system {
        return Some(*kind);
    }
    let last_user = request
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)?;
    IN_USER.first_in(&last_user.content).map(|i| MARKERS[i].0)
}

/// The transcript the base model continues.
pub fn prompt(request: &ChatCompletionRequest) -> String {
    let mut out = String::new();
    for m in &request.messages {
        let role = match m.role {
            Role::System | Role::Developer => "System",
            Role::User => "User",
            Role::Assistant => "Assistant",
            Role::Tool | Role::Function => "Tool",
        };
        if m.content.trim().is_empty() {
            continue;
        }
        out.push_str(role);
        out.push_str(":\n");
        out.push_str(m.content.trim_end());
        out.push_str("\n\n");
    }
    out.push_str("Assistant:\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn markers_in_the_last_user_message_only() {
        let req = |last: &str| {
            let body = json!({"messages": [
                {"role": "user", "content": "You are about to hand off your work to another AI agent. (quoted in the task)"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": last}
            ]});
            ChatCompletionRequest::from_slice(body.to_string().as_bytes()).unwrap()
        };
        assert_eq!(detect(&req("New Terminal Output:\n$ ")), None);
        assert_eq!(
            detect(&req("You are about to hand off your work to another AI agent.\nPlease provide a comprehensive summary")),
            Some(SideCallKind::TerminusSummary)
        );
        // opencode's title request: its instructions are the system prompt; a system prompt
        // that only mentions titles later is no title request.
        let titled = |system: &str| {
            let body = json!({"messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": "Generate a title for this conversation:\n"},
                {"role": "user", "content": "\"add() in calc.py subtracts. Fix it.\""}
            ]});
            detect(&ChatCompletionRequest::from_slice(body.to_string().as_bytes()).unwrap())
        };
        assert_eq!(
            titled("You are a title generator. You output ONLY a thread title."),
            Some(SideCallKind::Title)
        );
        assert_eq!(titled("You are opencode. You are a title generator."), None);
        // Compaction: Codex's and Claude Code's prompt as the last user message; opencode's
        // and qwen-code's as the system prompt, wherever in it.
        assert_eq!(
            detect(&req(
                "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary"
            )),
            Some(SideCallKind::Compaction)
        );
        assert_eq!(
            detect(&req("Your task is to create a detailed summary of the conversation so far, paying close attention")),
            Some(SideCallKind::Compaction)
        );
        assert_eq!(
            titled("Header.\nYou are a context summarization agent. You are given a conversation"),
            Some(SideCallKind::Compaction)
        );
        // qwen-code's first try: its compression prompt as the last user message.
        assert_eq!(
            detect(&req("You are the component that summarizes a conversation when its context window is about to overflow. The summary you produce")),
            Some(SideCallKind::Compaction)
        );
        let p = prompt(&req(
            "The next agent has a few questions for you, please answer",
        ));
        assert!(
            p.starts_with("User:\n") && p.ends_with("\n\nAssistant:\n"),
            "{p}"
        );
    }
}
