//! Agent mode: a fake model that works through tasks, for batch runs where many tasks and runs
//! interleave (the evaluation workflow's tests). It serves both APIs: the base model's
//! `POST /v1/completions` (continuation text, as the proxy asks) and an instruct model's
//! `POST /v1/chat/completions` (tool calls, as `serve --mode passthrough` forwards).
//!
//! A script names tasks by a string found in the request (the prompt, or the chat messages as
//! JSON) and gives each task one or more *variants*: ordered steps, each with a `marker`. The
//! answer is chosen from what the request already shows, so no per-connection state is
//! needed and any number of conversations can run at once:
//! - the task: the first whose `match` occurs in the request;
//! - the variant: the first whose first step's marker occurs in the request; none (a new
//!   conversation): the task's next variant, round-robin per task;
//! - the step: the variant's first step whose marker does not occur yet; all do: the last.
//!
//! Markers are plain (letters, digits, space and `_-./:=`) so they read the same in a prompt
//! and in JSON-escaped tool-call arguments. A request that matches no task gets HTTP 500.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::script::{append_record, chat, continuation};

/// An agent script (JSON): `{"tasks": [{"match", "variants": [[step, ...], ...]}]}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentScript {
    pub tasks: Vec<TaskScript>,
}

/// One task's behaviour.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskScript {
    /// A string of the task's text that identifies it in a request.
    #[serde(rename = "match")]
    pub matches: String,
    /// Ways through the task; a new conversation takes the next one.
    pub variants: Vec<Vec<Step>>,
}

/// One step: what the model writes for it in each API.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// A plain string the step's action leaves in every later request of its conversation.
    pub marker: String,
    /// Continuation text for `/v1/completions` (cut at the request's stop strings).
    #[serde(default)]
    pub text: Option<String>,
    /// The chat answer for `/v1/chat/completions`.
    #[serde(default)]
    pub chat: Option<ChatStep>,
}

/// A chat model's answer: content and at most one tool call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatStep {
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub tool_call: Option<ToolCall>,
}

/// A tool call: name and arguments (a JSON object).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    pub name: String,
    pub arguments: Value,
}

impl AgentScript {
    /// Parses and checks a script: every task has a variant, every variant a step, every
    /// marker is plain and non-empty.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let script: Self = serde_json::from_str(text).map_err(|e| e.to_string())?;
        for task in &script.tasks {
            if task.matches.is_empty() || task.variants.iter().any(Vec::is_empty) {
                return Err(format!(
                    "task {:?}: needs a non-empty match and steps in every variant",
                    task.matches
                ));
            }
            if task.variants.is_empty() {
                return Err(format!("task {:?}: no variants", task.matches));
            }
            for step in task.variants.iter().flatten() {
                let plain = |c: char| c.is_ascii_alphanumeric() || " _-./:=".contains(c);
                if step.marker.is_empty() || !step.marker.chars().all(plain) {
                    return Err(format!(
                        "task {:?}: marker {:?} must be non-empty and plain (letters, digits, space, _-./:=)",
                        task.matches, step.marker
                    ));
                }
            }
        }
        Ok(script)
    }

    /// The step to answer with for a request whose text is `seen`, and the variant counters
    /// to advance (task index → conversations started). `None`: no task matches.
    fn choose(&self, seen: &str, started: &mut HashMap<usize, usize>) -> Option<&Step> {
        let (index, task) = self
            .tasks
            .iter()
            .enumerate()
            .find(|(_, t)| seen.contains(&t.matches))?;
        let variant = match task.variants.iter().find(|v| seen.contains(&v[0].marker)) {
            Some(v) => v,
            None => {
                let n = started.entry(index).or_default();
                let v = &task.variants[*n % task.variants.len()];
                *n += 1;
                v
            }
        };
        variant
            .iter()
            .find(|s| !seen.contains(&s.marker))
            .or(variant.last())
    }
}

struct Inner {
    script: AgentScript,
    started: HashMap<usize, usize>,
    record: Option<PathBuf>,
    calls: usize,
}

type Shared = Arc<Mutex<Inner>>;

/// The agent-mode server: `/v1/completions`, `/v1/chat/completions`, `/v1/models`, `/health`.
/// `record`: a JSONL file every request body is appended to.
pub fn router(script: AgentScript, record: Option<PathBuf>) -> Router {
    let inner = Arc::new(Mutex::new(Inner {
        script,
        started: HashMap::new(),
        record,
        calls: 0,
    }));
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route(
            "/v1/models",
            get(|| async {
                Json(json!({"object": "list", "data": [
                    {"id": "fake-agent", "object": "model", "max_model_len": 32768}]}))
            }),
        )
        .route("/health", get(|| async { "ok" }))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(inner)
}

/// The step for `seen` and the call's number, after recording `body`; `None`: no task matches.
fn step_for(inner: &Shared, body: &Value, seen: &str) -> Option<(Step, usize)> {
    let mut guard = inner.lock().unwrap_or_else(|e| e.into_inner());
    guard.calls += 1;
    if let Some(path) = &guard.record {
        append_record(path, body);
    }
    let Inner {
        script, started, ..
    } = &mut *guard;
    let step = script.choose(seen, started).cloned();
    let calls = guard.calls;
    step.map(|s| (s, calls))
}

fn no_task() -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        "fake agent: no task of the script matches this request",
    )
        .into_response()
}

async fn completions(State(inner): State<Shared>, Json(body): Json<Value>) -> Response {
    let prompt = body["prompt"].as_str().unwrap_or_default().to_string();
    match step_for(&inner, &body, &prompt) {
        Some((step, _)) => match step.text {
            Some(text) => continuation(
                &body,
                text,
                "stop".to_string(),
                Some("<observation>".to_string()),
            ),
            None => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("fake agent: step {:?} has no completion text", step.marker),
            )
                .into_response(),
        },
        None => no_task(),
    }
}

async fn chat_completions(State(inner): State<Shared>, Json(body): Json<Value>) -> Response {
    let seen = body["messages"].to_string();
    match step_for(&inner, &body, &seen) {
        Some((step, calls)) => match step.chat {
            Some(c) => {
                let tool_call = c.tool_call.map(|t| (t.name, t.arguments.to_string()));
                chat("", &c.content, tool_call, &format!("call_agent_{calls}"))
            }
            None => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("fake agent: step {:?} has no chat answer", step.marker),
            )
                .into_response(),
        },
        None => no_task(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script() -> AgentScript {
        AgentScript::from_json(
            r#"{"tasks": [{"match": "TASK-A", "variants": [
                [{"marker": "cat a.py", "text": "x"}, {"marker": "sed -i", "text": "y"}],
                [{"marker": "ls -la", "text": "z"}]]}]}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn steps_follow_what_the_request_shows() {
        let s = script();
        let mut started = HashMap::new();
        let marker = |seen: &str, started: &mut HashMap<usize, usize>| {
            s.choose(seen, started).map(|st| st.marker.clone())
        };
        // New conversations take the variants in turn.
        assert_eq!(marker("TASK-A", &mut started).as_deref(), Some("cat a.py"));
        assert_eq!(marker("TASK-A", &mut started).as_deref(), Some("ls -la"));
        assert_eq!(marker("TASK-A", &mut started).as_deref(), Some("cat a.py"));
        // A conversation that ran the first step goes on with its variant, then repeats its last.
        let before = started.clone();
        assert_eq!(
            marker("TASK-A cat a.py", &mut started).as_deref(),
            Some("sed -i")
        );
        assert_eq!(
            marker("TASK-A cat a.py sed -i", &mut started).as_deref(),
            Some("sed -i")
        );
        assert_eq!(started, before, "a running conversation starts nothing");
        assert_eq!(marker("other", &mut started), None);
    }

    #[test]
    fn markers_must_be_plain() {
        let bad = r#"{"tasks": [{"match": "T", "variants": [[{"marker": "say \"hi\""}]]}]}"#;
        assert!(AgentScript::from_json(bad).is_err());
        let empty = r#"{"tasks": [{"match": "T", "variants": [[]]}]}"#;
        assert!(AgentScript::from_json(empty).is_err());
    }
}
