//! The answers every mode builds from: completion bodies in each server's shape, SSE, OpenAI
//! errors, raw bodies and dropped connections.

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// How a server reports which stop string ended the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// vLLM: `stop_reason` in the choice (null when no stop string matched).
    Vllm,
    /// llama-server: `stopping_word` and `stop_type` at the top level.
    LlamaServer,
    /// SGLang: `matched_stop` in the choice.
    Sglang,
    /// No stop information at all (OpenAI's own API).
    Plain,
}

/// The names a completion body carries.
#[derive(Debug, Clone)]
pub struct Names {
    pub id: &'static str,
    pub model: String,
    pub created: u64,
}

/// `usage` from token counts.
pub fn usage(prompt_tokens: usize, completion_tokens: usize) -> Value {
    json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
           "total_tokens": prompt_tokens + completion_tokens})
}

/// `usage` counting whitespace-separated words of the prompt and the text.
pub fn word_usage(prompt: &str, text: &str) -> Value {
    usage(
        prompt.split_whitespace().count(),
        text.split_whitespace().count(),
    )
}

/// A `text_completion` body in `shape`; `matched` is the stop string that ended the text.
pub fn completion(
    names: &Names,
    shape: Shape,
    text: &str,
    finish_reason: &str,
    matched: Option<&str>,
    usage: Value,
) -> Value {
    let mut choice =
        json!({"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": null});
    match shape {
        Shape::Vllm => choice["stop_reason"] = json!(matched),
        Shape::Sglang => choice["matched_stop"] = json!(matched),
        Shape::LlamaServer | Shape::Plain => {}
    }
    let mut out = json!({
        "id": names.id, "object": "text_completion", "created": names.created, "model": names.model,
        "choices": [choice], "usage": usage
    });
    if shape == Shape::LlamaServer {
        out["stopping_word"] = json!(matched.unwrap_or_default());
        out["stop_type"] = json!(if matched.is_some() { "word" } else { "limit" });
    }
    out
}

/// An SSE body: the text in pieces of `piece_chars` characters, a final chunk with
/// `finish_reason` and vLLM's `stop_reason`, a usage chunk when `usage` is given, `[DONE]`.
pub fn sse(
    names: &Names,
    text: &str,
    piece_chars: usize,
    finish_reason: &str,
    stop_reason: Option<&str>,
    usage: Option<Value>,
) -> String {
    let mut out = String::new();
    let mut event = |choices: Value, usage: Option<Value>| {
        let mut chunk = json!({"id": names.id, "object": "text_completion", "created": names.created,
                               "model": names.model, "choices": choices});
        if let Some(usage) = usage {
            chunk["usage"] = usage;
        }
        out.push_str(&format!("data: {chunk}\n\n"));
    };
    let chars: Vec<char> = text.chars().collect();
    for piece in chars.chunks(piece_chars.max(1)) {
        let piece: String = piece.iter().collect();
        event(
            json!([{"index": 0, "text": piece, "logprobs": null, "finish_reason": null}]),
            None,
        );
    }
    event(
        json!([{"index": 0, "text": "", "logprobs": null, "finish_reason": finish_reason,
                 "stop_reason": stop_reason}]),
        None,
    );
    if let Some(usage) = usage {
        event(json!([]), Some(usage));
    }
    out.push_str("data: [DONE]\n\n");
    out
}

/// An SSE body as a response.
pub fn sse_response(body: String) -> Response {
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        Body::from(body),
    )
        .into_response()
}

/// Whether a raw body asks for SSE. `"stream":true` (any spacing after the colon) can only be
/// a key and its value: inside a JSON string a `"` is always escaped. Lets the constant mode
/// answer without parsing the body.
pub fn wants_stream(body: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(body) else {
        return false;
    };
    let mut rest = text;
    while let Some(at) = rest.find("\"stream\"") {
        let after = rest[at + 8..].trim_start();
        if let Some(value) = after.strip_prefix(':') {
            if value.trim_start().starts_with("true") {
                return true;
            }
        }
        rest = &rest[at + 8..];
    }
    false
}

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// An HTTP error with an OpenAI-style body (`server_error` from 500 on).
pub fn error(code: u16, message: &str) -> Response {
    let kind = if code >= 500 {
        "server_error"
    } else {
        "invalid_request_error"
    };
    (
        status(code),
        Json(json!({"error": {"message": message, "type": kind, "code": code}})),
    )
        .into_response()
}

/// HTTP 429 with an OpenAI-style body and, when given, a `Retry-After` header.
pub fn rate_limited(message: &str, retry_after: Option<&str>) -> Response {
    let mut resp = (
        StatusCode::TOO_MANY_REQUESTS,
        Json(json!({"error": {"message": message, "type": "rate_limit_error", "code": "rate_limit_exceeded"}})),
    )
        .into_response();
    if let Some(value) = retry_after.and_then(|v| v.parse().ok()) {
        resp.headers_mut().insert(header::RETRY_AFTER, value);
    }
    resp
}

/// Any status with this body as `application/json` (invalid JSON, a wrong shape).
pub fn raw(code: u16, body: String) -> Response {
    (
        status(code),
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// Status 200, headers and `start`, then after `after` the connection is dropped.
pub fn hangup(start: &'static str, after: Duration, why: &'static str) -> Response {
    use futures_util::StreamExt;
    let start = futures_util::stream::once(async move { Ok::<_, std::io::Error>(start) });
    let death = futures_util::stream::once(async move {
        tokio::time::sleep(after).await;
        Err(std::io::Error::other(why))
    });
    Response::new(Body::from_stream(start.chain(death)))
}

/// Each backend's answer to a prompt longer than its context window: (status, body), as the
/// real server sends it.
pub fn overflow(backend: &str) -> Option<(u16, Value)> {
    Some(match backend {
        // llama-server since 2025-09: 400 (500 in some builds) with the token counts.
        "llama-server" => (
            400,
            json!({"error": {
            "code": 400,
            "message": "request (40000 tokens) exceeds the available context size (32768 tokens), try increasing it",
            "type": "exceed_context_size_error", "n_prompt_tokens": 40000, "n_ctx": 32768}}),
        ),
        // llama-server, older builds and some paths: 500, no numbers.
        "llama-server-500" => (
            500,
            json!({"error": {
            "code": 500, "message": "Context size has been exceeded.", "type": "server_error"}}),
        ),
        "vllm" => (
            400,
            json!({
            "object": "error",
            "message": "The decoder prompt (length 40000) is longer than the maximum model length of 32768. \
                        Make sure that `max_model_len` is no smaller than the number of text tokens.",
            "type": "BadRequestError", "param": null, "code": 400}),
        ),
        "sglang" => (
            400,
            json!({
            "object": "error",
            "message": "The input (40000 tokens) is longer than the model's context length (32768 tokens).",
            "type": "BadRequestError", "param": null, "code": 400}),
        ),
        "tgi" => (
            422,
            json!({
            "error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 32768. \
                      Given: 40000 `inputs` tokens and 1024 `max_new_tokens`",
            "error_type": "validation"}),
        ),
        _ => return None,
    })
}

/// The backends `overflow` knows.
pub const OVERFLOWS: [&str; 5] = ["llama-server", "llama-server-500", "sglang", "tgi", "vllm"];
