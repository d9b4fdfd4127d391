//! Chat completion responses: the non-streaming object and the SSE chunk, per the OpenAI API
//! reference (`chat.completion`, `chat.completion.chunk`).

use serde::{Deserialize, Serialize};

use super::completions::Usage;

/// Why a choice ended (`finish_reason`, OpenAI API reference). The proxy decides it itself,
/// never copying the backend's (see `crate::respond`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The turn's answer is complete (content, or a content-dialect action).
    Stop,
    /// Generation hit the token limit before an action was complete.
    Length,
    /// The answer is a tool call.
    ToolCalls,
    /// Passed on from a passthrough backend.
    ContentFilter,
    /// Read only (traces): a reason this build does not know.
    #[serde(other)]
    Unknown,
}

impl FinishReason {
    /// The wire name (`stop`, `length`, `tool_calls`, `content_filter`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::ToolCalls => "tool_calls",
            Self::ContentFilter => "content_filter",
            Self::Unknown => "unknown",
        }
    }
}

/// `chat.completion` object.
#[derive(Debug, Clone, Serialize)]
pub struct ChatCompletion {
    pub id: String,
    pub object: &'static str,
    /// Unix time, seconds.
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
}

/// The single choice of a completion.
#[derive(Debug, Clone, Serialize)]
pub struct ChatChoice {
    pub index: u32,
    pub message: AssistantMessage,
    pub finish_reason: FinishReason,
    pub logprobs: Option<()>,
}

/// The assistant message sent back.
#[derive(Debug, Clone, Serialize)]
pub struct AssistantMessage {
    pub role: &'static str,
    /// The thought without markup; `null` when empty and a tool call is present.
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallOut>,
}

/// A tool call in a response. `arguments` is a JSON string, `"{}"` for none.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ToolCallOut {
    pub id: String,
    pub r#type: &'static str,
    pub function: FunctionOut,
}

/// `function` of an outgoing tool call.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FunctionOut {
    pub name: String,
    pub arguments: String,
}

/// `chat.completion.chunk` object.
#[derive(Debug, Clone, Serialize)]
pub struct ChatCompletionChunk {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChunkChoice>,
    /// With `stream_options.include_usage`: `null` on every chunk but the last, which has
    /// `choices: []` and the usage. Omitted entirely otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

/// The single choice of a chunk.
#[derive(Debug, Clone, Serialize)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: Delta,
    pub finish_reason: Option<FinishReason>,
    pub logprobs: Option<()>,
}

/// Incremental message fields.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// Incremental tool call: `id`, `type` and `function.name` only in the first delta of a call,
/// argument fragments after; `index` on every delta.
#[derive(Debug, Clone, Serialize)]
pub struct ToolCallDelta {
    pub index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub r#type: Option<&'static str>,
    pub function: FunctionDelta,
}

/// Incremental `function` of a tool call.
#[derive(Debug, Clone, Serialize)]
pub struct FunctionDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub arguments: String,
}
