//! A step's [`Reply`] as an Anthropic Messages object and its stream events (the encode half of
//! `POST /v1/messages`; the request side is [`crate::anthropic`]).
//!
//! Content: the thought as a `text` block (when there is one), then one `tool_use` block per
//! tool call, its `id` the proxy-minted call id (so the session rides on it as on chat
//! tool-call ids) and its `input` the arguments object. `stop_reason`: `tool_use` with a tool
//! call, `max_tokens` when the backend hit the length limit, else `end_turn`. Streaming
//! follows the API's event order: `message_start`, `ping`, per block `content_block_start`,
//! `content_block_delta` (`text_delta`, or `input_json_delta` with the arguments in
//! fragments), `content_block_stop`, then `message_delta` (stop reason and usage) and
//! `message_stop` (Anthropic, "Streaming Messages").

use serde_json::{json, Value};

use super::Reply;
use crate::openai::response::{FinishReason, ToolCallOut};

/// Bytes of a text or arguments fragment in a stream delta.
const FRAGMENT: usize = 256;

/// Builds the message object and its stream events for one reply.
#[derive(Debug, Clone)]
pub struct MessageBuilder {
    /// `msg_…`.
    pub id: String,
    pub model: String,
}

impl MessageBuilder {
    /// A builder with a fresh `msg_…` id.
    pub fn new(model: String) -> Self {
        Self {
            id: format!("msg_{}", uuid::Uuid::new_v4().simple()),
            model,
        }
    }

    /// The message object (`content` empty and `stop_reason` null while streaming starts).
    fn object(&self, reply: Option<&Reply>) -> Value {
        let usage = reply.map_or(json!({"input_tokens": 0, "output_tokens": 0}), |r| {
            json!({"input_tokens": r.usage.prompt_tokens, "output_tokens": r.usage.completion_tokens})
        });
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": reply.map_or_else(Vec::new, content_blocks),
            "stop_reason": reply.map(stop_reason),
            "stop_sequence": null,
            "usage": usage,
        })
    }

    /// The whole message, for a request that does not stream.
    pub fn message(&self, reply: &Reply) -> Value {
        self.object(Some(reply))
    }

    /// The events sent before the backend answers: `message_start` and a `ping`.
    pub fn start_events(&self) -> Vec<(&'static str, Value)> {
        vec![
            (
                "message_start",
                json!({"type": "message_start", "message": self.object(None)}),
            ),
            ("ping", json!({"type": "ping"})),
        ]
    }

    /// The events of the reply: each block's start, deltas and stop, then `message_delta` and
    /// `message_stop`.
    pub fn rest_events(&self, reply: &Reply) -> Vec<(&'static str, Value)> {
        let mut events = Vec::new();
        for (index, block) in content_blocks(reply).into_iter().enumerate() {
            let (start, deltas) = match block["type"].as_str() {
                Some("tool_use") => {
                    let input = block["input"].to_string();
                    let start = json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}});
                    let deltas: Vec<Value> = fragments(&input)
                        .map(|f| json!({"type": "input_json_delta", "partial_json": f}))
                        .collect();
                    (start, deltas)
                }
                _ => {
                    let text = block["text"].as_str().unwrap_or_default().to_string();
                    let deltas: Vec<Value> = fragments(&text)
                        .map(|f| json!({"type": "text_delta", "text": f}))
                        .collect();
                    (json!({"type": "text", "text": ""}), deltas)
                }
            };
            events.push((
                "content_block_start",
                json!({"type": "content_block_start", "index": index, "content_block": start}),
            ));
            for delta in deltas {
                events.push((
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index, "delta": delta}),
                ));
            }
            events.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
        }
        events.push((
            "message_delta",
            json!({
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason(reply), "stop_sequence": null},
                "usage": {"input_tokens": reply.usage.prompt_tokens, "output_tokens": reply.usage.completion_tokens},
            }),
        ));
        events.push(("message_stop", json!({"type": "message_stop"})));
        events
    }
}

/// `tool_use` with a tool call, `max_tokens` at the length limit, else `end_turn`.
fn stop_reason(reply: &Reply) -> &'static str {
    match reply.finish_reason {
        _ if reply.tool_call.is_some() => "tool_use",
        FinishReason::Length => "max_tokens",
        _ => "end_turn",
    }
}

/// The reply's content blocks: its text, then its tool calls.
fn content_blocks(reply: &Reply) -> Vec<Value> {
    let mut blocks = Vec::new();
    if let Some(text) = reply.content.as_deref().filter(|t| !t.is_empty()) {
        blocks.push(json!({"type": "text", "text": text}));
    }
    for call in reply.tool_call.iter().chain(&reply.more_tool_calls) {
        blocks.push(tool_use(call));
    }
    blocks
}

/// A tool call as a `tool_use` block; arguments that are not a JSON object are given whole
/// as `{"input": "<text>"}` (the API's `input` is an object).
fn tool_use(call: &ToolCallOut) -> Value {
    let input = match serde_json::from_str::<Value>(&call.function.arguments) {
        Ok(Value::Object(o)) => Value::Object(o),
        _ => json!({"input": call.function.arguments}),
    };
    json!({"type": "tool_use", "id": call.id, "name": call.function.name, "input": input})
}

/// `text` in pieces of at most [`FRAGMENT`] bytes, cut on char boundaries (none for "").
fn fragments(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = rest.len().min(FRAGMENT);
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        let (piece, after) = rest.split_at(end);
        rest = after;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::response::FunctionOut;

    fn reply(content: Option<&str>, call: Option<(&str, &str)>, finish: FinishReason) -> Reply {
        Reply {
            content: content.map(str::to_string),
            tool_call: call.map(|(name, arguments)| ToolCallOut {
                id: "call_asap_x".into(),
                r#type: "function",
                function: FunctionOut {
                    name: name.into(),
                    arguments: arguments.into(),
                },
            }),
            more_tool_calls: Vec::new(),
            finish_reason: finish,
            usage: Default::default(),
            action: None,
            parse_error: None,
        }
    }

    #[test]
    fn a_tool_call_is_a_tool_use_block_and_streams_as_json_deltas() {
        let b = MessageBuilder::new("base".into());
        let r = reply(
            Some("Look first."),
            Some(("Bash", "{\"command\":\"ls\"}")),
            FinishReason::ToolCalls,
        );
        let m = b.message(&r);
        assert_eq!(m["stop_reason"], "tool_use");
        assert_eq!(
            m["content"],
            json!([{"type": "text", "text": "Look first."},
                   {"type": "tool_use", "id": "call_asap_x", "name": "Bash", "input": {"command": "ls"}}])
        );
        let kinds: Vec<&str> = b.rest_events(&r).iter().map(|(k, _)| *k).collect();
        assert_eq!(
            kinds,
            [
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let json: String = b
            .rest_events(&r)
            .iter()
            .filter_map(|(_, e)| e["delta"]["partial_json"].as_str().map(str::to_string))
            .collect();
        assert_eq!(json, "{\"command\":\"ls\"}");
    }

    #[test]
    fn text_only_ends_the_turn_and_long_text_is_cut_on_char_boundaries() {
        let b = MessageBuilder::new("base".into());
        let r = reply(Some("Done."), None, FinishReason::Stop);
        assert_eq!(b.message(&r)["stop_reason"], "end_turn");
        let r = reply(Some("x"), None, FinishReason::Length);
        assert_eq!(b.message(&r)["stop_reason"], "max_tokens");
        let text = "é".repeat(300);
        let pieces: Vec<&str> = fragments(&text).collect();
        assert!(pieces.len() > 1 && pieces.concat() == text);
    }
}
