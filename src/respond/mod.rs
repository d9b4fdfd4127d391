//! The parsed step → the scaffold's dialect: one `tool_calls` entry, or content.
//!
//! The proxy decides `finish_reason` itself, never copying the backend's: `tool_calls` when a
//! call is sent, `length` when no action could be parsed because generation hit the token
//! limit, `stop` otherwise (an unparsable turn, or a content-style submit). Unparsable output
//! is HTTP 200 with the thought as content and no tool call, so the scaffold's own
//! format-error path runs (SWE-agent, OpenHands and mini-swe-agent all have one).

mod messages;
mod responses;

pub use messages::MessageBuilder;
pub use responses::{output_items, ResponseBuilder};

use serde_json::Value;

use crate::backend::BackendCompletion;
use crate::openai::completions::Usage;
use crate::openai::response::{
    AssistantMessage, ChatChoice, ChatCompletion, ChatCompletionChunk, ChunkChoice, Delta,
    FinishReason, FunctionDelta, FunctionOut, ToolCallDelta, ToolCallOut,
};
use crate::parse::{ParseFailure, Parsed};
use crate::policy::Termination;
use crate::profile::Action;
use crate::profile::{ResolvedProfile, ScaffoldReply};
use crate::session::{CallId, NudgeState, SessionId};

/// Bytes of `arguments` per streamed fragment.
const ARGUMENT_FRAGMENT: usize = 256;

/// One step's answer, independent of JSON or SSE.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// Thought (or final answer) without markup; `None` when empty beside a tool call.
    pub content: Option<String>,
    pub tool_call: Option<ToolCallOut>,
    /// The further tool calls of the reply, in order (passthrough with `--tool-calls all`;
    /// empty elsewhere: the proxy sends one action a turn).
    pub more_tool_calls: Vec<ToolCallOut>,
    pub finish_reason: FinishReason,
    pub usage: Usage,
    /// The neutral action, when one was parsed.
    pub action: Option<Action>,
    pub parse_error: Option<ParseFailure>,
}

/// Builds the reply for a parsed completion. Mints the tool-call id. With
/// `tool_choice: "none"` (`allow_tool_call` false) an action is not sent: the thought comes
/// back as content with `finish_reason: FinishReason::Stop`, as the OpenAI API specifies for `none`.
pub fn reply(
    parsed: &Parsed,
    completion: &BackendCompletion,
    tools: &ResolvedProfile,
    call_id: &CallId,
    allow_tool_call: bool,
) -> Reply {
    let usage = completion.usage.unwrap_or_default();
    let thought = parsed.thought.clone();
    if let Some(dialect) = tools.dialect {
        let action = parsed.outcome.as_ref().ok();
        return Reply {
            content: Some(dialect.write(&thought, action, tools)),
            tool_call: None,
            more_tool_calls: Vec::new(),
            finish_reason: if completion.hit_length() && action.is_none() {
                FinishReason::Length
            } else {
                FinishReason::Stop
            },
            usage,
            action: action.cloned(),
            parse_error: parsed.outcome.as_ref().err().cloned(),
        };
    }
    if !allow_tool_call {
        return Reply {
            content: Some(thought),
            tool_call: None,
            more_tool_calls: Vec::new(),
            finish_reason: if completion.hit_length() && parsed.outcome.is_err() {
                FinishReason::Length
            } else {
                FinishReason::Stop
            },
            usage,
            action: parsed.outcome.as_ref().ok().cloned(),
            parse_error: parsed.outcome.as_ref().err().cloned(),
        };
    }
    match &parsed.outcome {
        Ok(action) => match tools.to_scaffold(action, &thought) {
            ScaffoldReply::ToolCall { name, arguments } => Reply {
                content: Some(thought).filter(|t| !t.is_empty()),
                tool_call: Some(ToolCallOut {
                    id: call_id.mint(),
                    r#type: "function",
                    function: FunctionOut {
                        name,
                        arguments: Value::Object(arguments).to_string(),
                    },
                }),
                more_tool_calls: Vec::new(),
                finish_reason: FinishReason::ToolCalls,
                usage,
                action: Some(action.clone()),
                parse_error: None,
            },
            ScaffoldReply::Content(text) => Reply {
                content: Some(text),
                tool_call: None,
                more_tool_calls: Vec::new(),
                finish_reason: FinishReason::Stop,
                usage,
                action: Some(action.clone()),
                parse_error: None,
            },
        },
        Err(failure) => Reply {
            content: Some(thought),
            tool_call: None,
            more_tool_calls: Vec::new(),
            finish_reason: if completion.hit_length() {
                FinishReason::Length
            } else {
                FinishReason::Stop
            },
            usage,
            action: None,
            parse_error: Some(failure.clone()),
        },
    }
}

/// The reply that ends a trajectory: the profile's finish action (a `submit`/`finish` call,
/// mini-swe-agent's completion command, or content), whose message names the reason. The
/// model's thought is the content.
pub fn termination(
    parsed: &Parsed,
    completion: &BackendCompletion,
    tools: &ResolvedProfile,
    session: &SessionId,
    step: usize,
    nudges: &NudgeState,
    why: &Termination,
) -> Reply {
    let finish = Parsed {
        thought: parsed.thought.clone(),
        outcome: Ok(Action::Submit {
            message: Some(format!(
                "asap-proxy ended the trajectory: {}.",
                why.describe()
            )),
        }),
        dropped_bytes: 0,
        notes: Vec::new(),
    };
    let call_id = CallId {
        session: session.clone(),
        step,
        nudges: nudges.clone(),
    };
    reply(&finish, completion, tools, &call_id, true)
}

/// A fresh `chatcmpl-…` id.
pub fn completion_id() -> String {
    format!("chatcmpl-{}", uuid::Uuid::new_v4().simple())
}

/// The non-streaming `chat.completion` object.
pub fn completion_object(reply: &Reply, id: &str, model: &str, created: u64) -> ChatCompletion {
    ChatCompletion {
        id: id.to_string(),
        object: "chat.completion",
        created,
        model: model.to_string(),
        choices: vec![ChatChoice {
            index: 0,
            message: AssistantMessage {
                role: "assistant",
                content: reply.content.clone(),
                tool_calls: reply
                    .tool_call
                    .iter()
                    .chain(&reply.more_tool_calls)
                    .cloned()
                    .collect(),
            },
            finish_reason: reply.finish_reason,
            logprobs: None,
        }],
        usage: reply.usage,
    }
}

/// Builds SSE chunks of one response (same `id`, `model`, `created` on each).
#[derive(Debug, Clone)]
pub struct ChunkBuilder {
    pub id: String,
    pub model: String,
    pub created: u64,
    /// `stream_options.include_usage`: `usage: null` on each chunk and a final usage chunk.
    pub include_usage: bool,
}

impl ChunkBuilder {
    fn chunk(&self, delta: Delta, finish_reason: Option<FinishReason>) -> ChatCompletionChunk {
        ChatCompletionChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk",
            created: self.created,
            model: self.model.clone(),
            choices: vec![ChunkChoice {
                index: 0,
                delta,
                finish_reason,
                logprobs: None,
            }],
            usage: self.include_usage.then_some(None),
        }
    }

    /// The first chunk, sent before the backend answers: `delta: {"role": "assistant"}`.
    pub fn role(&self) -> ChatCompletionChunk {
        self.chunk(
            Delta {
                role: Some("assistant"),
                ..Delta::default()
            },
            None,
        )
    }

    /// The chunks after the role chunk: content, the tool call (id, type and name first, then
    /// argument fragments, `index` on each), the finish_reason chunk, then the usage chunk.
    pub fn rest(&self, reply: &Reply) -> Vec<ChatCompletionChunk> {
        let mut out = Vec::new();
        if let Some(content) = reply.content.as_ref().filter(|c| !c.is_empty()) {
            out.push(self.chunk(
                Delta {
                    content: Some(content.clone()),
                    ..Delta::default()
                },
                None,
            ));
        }
        for (index, call) in reply
            .tool_call
            .iter()
            .chain(&reply.more_tool_calls)
            .enumerate()
        {
            let tool_delta = |first: bool, arguments: String| ToolCallDelta {
                index: u32::try_from(index).unwrap_or(u32::MAX),
                id: first.then(|| call.id.clone()),
                r#type: first.then_some("function"),
                function: FunctionDelta {
                    name: first.then(|| call.function.name.clone()),
                    arguments,
                },
            };
            out.push(self.chunk(
                Delta {
                    tool_calls: Some(vec![tool_delta(true, String::new())]),
                    ..Delta::default()
                },
                None,
            ));
            for fragment in fragments(&call.function.arguments, ARGUMENT_FRAGMENT) {
                out.push(self.chunk(
                    Delta {
                        tool_calls: Some(vec![tool_delta(false, fragment.to_string())]),
                        ..Delta::default()
                    },
                    None,
                ));
            }
        }
        out.push(self.chunk(Delta::default(), Some(reply.finish_reason)));
        if self.include_usage {
            out.push(ChatCompletionChunk {
                id: self.id.clone(),
                object: "chat.completion.chunk",
                created: self.created,
                model: self.model.clone(),
                choices: Vec::new(),
                usage: Some(Some(reply.usage)),
            });
        }
        out
    }
}

/// Splits text into pieces of at most `max` bytes on char boundaries (a single char longer
/// than `max` is one piece).
fn fragments(text: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + max).min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        if end == start {
            // One char longer than `max`: send it whole rather than split it.
            end = start + text[start..].chars().next().map_or(1, char::len_utf8);
        }
        out.push(&text[start..end]);
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_respect_char_boundaries() {
        let s = "ééééé😀x";
        let parts = fragments(s, 3);
        assert_eq!(parts.concat(), s);
        assert!(parts.iter().all(|p| p.len() <= 4 && !p.is_empty()));
    }
}
