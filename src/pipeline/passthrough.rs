//! Passthrough mode (`serve --mode passthrough`): chat requests go unchanged to an
//! instruction-tuned model's `/v1/chat/completions`, and every step is written in the same
//! trace format as the base-model path, so reference trajectories for prefixes can be
//! recorded with any instruct model and cut with `asap-proxy prefix build`.
//!
//! What changes on the way: `stream` is sent as `false` (the proxy streams the reply itself
//! with the same spec-exact chunks as in proxy mode), and the tool-call ids of the reply are
//! replaced by minted ones, so the session is recovered from the history as usual. With
//! `--tool-calls first` (the default, for reference runs: a prefix is one action a step) only
//! the first tool call of a reply is kept and the trace notes any dropped ones; with
//! `--tool-calls all` (recording a post-trained model on its own scaffold) every call goes to
//! the scaffold, in order, the n-th minted for step `step + n` (the history makes each call a
//! step), and the trace keeps the further ones as `parse.more_actions` and
//! `response.more_tool_calls`. The trace records the conversation rendered as the base model
//! would see it, the reply's content as the completion text, and its tool calls mapped to
//! neutral actions.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::finish::{finish, Ending, TurnRecord};
use super::{Asked, Prepared, RequestMeta, Scope, TurnOutcome};
use crate::backend::BackendCompletion;
use crate::config::ToolCalls;
use crate::error::ProxyError;
use crate::openai::chat::{ChatCompletionRequest, RAW_ARGUMENTS};
use crate::openai::completions::Usage;
use crate::openai::response::{FinishReason, FunctionOut, ToolCallOut};
use crate::parse::{FailureClass, ParseFailure, Parsed};
use crate::respond::Reply;
use crate::session::CallId;
use crate::trace::{RequestInput, Timings};

/// Runs one passthrough turn and writes its trace record.
pub(super) async fn run(
    scope: &Scope<'_>,
    request: &ChatCompletionRequest,
    meta: &RequestMeta,
    input: &Arc<RequestInput>,
    prepared: Prepared,
    started: Instant,
) -> Result<TurnOutcome, ProxyError> {
    let session = prepared.session.session.clone();
    let step = prepared.session.step_base + prepared.conversation.action_count();
    let asked = Asked::of(scope, request);
    let mut record = TurnRecord::Whole(asked.record(input, &prepared, step, 0));
    let ending = Ending {
        session: &session,
        step,
        remember: Some((&prepared, &prepared.session.nudges)),
    };
    let mut body: Value = match serde_json::from_slice(&request.raw_body) {
        Ok(body) => body,
        Err(e) => {
            let error = ProxyError::invalid(format!("invalid request body: {e}"));
            return finish(
                scope,
                ending,
                record,
                Timings::default(),
                started,
                Err(error),
            )
            .await;
        }
    };
    if let Some(o) = body.as_object_mut() {
        o.insert("stream".into(), Value::Bool(false));
        o.remove("stream_options");
    }
    let render_ms = started.elapsed().as_secs_f64() * 1e3;
    let backend_started = Instant::now();
    meta.backend_call_starts();
    let result = scope.backend.chat(&body).await;
    meta.waited_on_backend(backend_started);
    let timings = Timings {
        render_ms,
        backend_ms: backend_started.elapsed().as_secs_f64() * 1e3,
        ..Timings::default()
    };
    let (response, attempts) = match result {
        Ok(r) => r,
        Err(e) => return finish(scope, ending, record, timings, started, Err(e)).await,
    };
    let choice = &response["choices"][0];
    let message = &choice["message"];
    let content = message["content"].as_str().unwrap_or_default().to_string();
    let calls = message["tool_calls"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut notes = Vec::new();
    let kept = match scope.tool_calls {
        ToolCalls::First => 1,
        ToolCalls::All => calls.len(),
    };
    if calls.len() > kept {
        notes.push(format!("kept the first of {} tool calls", calls.len()));
    }
    let usage: Option<Usage> = serde_json::from_value(response["usage"].clone()).ok();
    let completion = BackendCompletion {
        text: content.clone(),
        finish_reason: choice["finish_reason"].as_str().map(str::to_string),
        matched_stop: None,
        closer: None,
        usage,
        model: response["model"].as_str().unwrap_or_default().to_string(),
        attempts,
    };
    // (name, JSON arguments string) of each call kept, and its neutral action.
    let kept: Vec<(String, String)> = calls.iter().take(kept).map(name_and_arguments).collect();
    let action = |(name, arguments): &(String, String)| {
        let args = match serde_json::from_str::<Value>(arguments) {
            Ok(Value::Object(o)) => o,
            _ => serde_json::Map::from_iter([(
                RAW_ARGUMENTS.to_string(),
                Value::String(arguments.clone()),
            )]),
        };
        prepared
            .tools
            .from_scaffold(name, &std::sync::Arc::new(args))
    };
    let outcome = match kept.first() {
        Some(call) => Ok(action(call)),
        None => Err(ParseFailure {
            class: FailureClass::NoAction,
            detail: "the instruct model answered without a tool call".into(),
        }),
    };
    let more_actions: Vec<_> = kept.iter().skip(1).map(action).collect();
    let parsed = Parsed {
        thought: content.trim().to_string(),
        outcome,
        dropped_bytes: 0,
        notes,
    };
    let out = |i: usize, (name, arguments): (String, String)| ToolCallOut {
        id: CallId {
            session: session.clone(),
            step: step + i,
            nudges: prepared.session.nudges.clone(),
        }
        .mint(),
        r#type: "function",
        function: FunctionOut { name, arguments },
    };
    let mut outs = kept.into_iter().enumerate().map(|(i, c)| out(i, c));
    let tool_call = outs.next();
    let reply = Reply {
        content: Some(content).filter(|c| !c.is_empty() || tool_call.is_none()),
        tool_call,
        more_tool_calls: outs.collect(),
        finish_reason: match choice["finish_reason"].as_str() {
            Some("tool_calls") => FinishReason::ToolCalls,
            Some("length") => FinishReason::Length,
            _ if !calls.is_empty() => FinishReason::ToolCalls,
            _ => FinishReason::Stop,
        },
        usage: usage.unwrap_or_default(),
        action: parsed.outcome.as_ref().ok().cloned(),
        parse_error: parsed.outcome.as_ref().err().cloned(),
    };
    record.set_completion(&completion, &parsed, &reply);
    if let Some(parse) = record.parse.as_mut() {
        parse.more_actions = more_actions;
    }
    finish(scope, ending, record, timings, started, Ok(reply)).await
}

/// A chat tool call's function name and arguments as a JSON string (`"{}"` for none; an
/// object given unencoded is encoded).
fn name_and_arguments(call: &Value) -> (String, String) {
    let name = call["function"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let arguments = match &call["function"]["arguments"] {
        Value::String(s) => s.clone(),
        Value::Null => "{}".to_string(),
        other => other.to_string(),
    };
    (name, arguments)
}
