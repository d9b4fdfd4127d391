//! A fake completion backend: a real axum server on 127.0.0.1:0 that answers
//! `POST /v1/completions` from a script of realistic base-model continuations (as vLLM,
//! llama-server or SGLang would report them), records every request body, and counts calls.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Scripted {
    /// vLLM style: text without the stop string, `stop_reason` names it.
    Vllm {
        text: String,
        finish_reason: &'static str,
    },
    /// llama-server style: `stopping_word` at top level.
    LlamaServer { text: String },
    /// SGLang style: `matched_stop` in the choice.
    Sglang { text: String },
    /// A backend that ignored `stop` and wrote on (invented observation and later steps).
    IgnoresStop { text: String },
    /// An HTTP error with an OpenAI-style body.
    Error { status: u16, message: String },
    /// Sleep, then answer like `Vllm` with finish_reason "stop".
    Slow { delay: Duration, text: String },
    /// A chat model's reply (`/v1/chat/completions`, passthrough mode): content and at most
    /// one tool call `(name, arguments JSON)` with the model's own id.
    Chat {
        content: String,
        tool_call: Option<(String, String)>,
    },
    /// HTTP 429 with an OpenAI-style body and, when given, a `Retry-After` header.
    RateLimited { retry_after: Option<String> },
    /// Any status with this body as `application/json` (invalid JSON, a wrong shape).
    Raw { status: u16, body: String },
    /// Status 200, headers and the start of a body, then the connection is dropped.
    Hangup,
}

impl Scripted {
    /// Shorthand for the common case.
    pub fn text(text: &str) -> Self {
        Self::Vllm {
            text: text.to_string(),
            finish_reason: "stop",
        }
    }
}

#[derive(Default)]
struct Inner {
    script: VecDeque<Scripted>,
    requests: Vec<Value>,
    calls: usize,
    /// Reported as `max_model_len` by `GET /v1/models` (absent when `None`, as llama-server's
    /// OpenAI endpoint omits it).
    max_model_len: Option<u64>,
    /// Whether `POST /tokenize` exists (it counts one token per 4 bytes, rounded up).
    tokenize: bool,
    /// `/tokenize` calls served.
    tokenize_calls: usize,
    /// The `Authorization` header of every request (completions, chat, models, tokenize).
    authorizations: Vec<Option<String>>,
    /// `Slow` calls abandoned by the proxy before they were answered.
    cancelled: usize,
}

/// Handle to a running fake backend.
#[derive(Clone)]
pub struct FakeBackend {
    pub addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
}

impl FakeBackend {
    /// Starts a backend that serves `script` in order (then 500s).
    pub async fn start(script: Vec<Scripted>) -> Self {
        let inner = Arc::new(Mutex::new(Inner {
            script: script.into(),
            ..Inner::default()
        }));
        let app = Router::new()
            .route("/v1/completions", post(complete))
            .route("/v1/chat/completions", post(complete))
            .route("/v1/models", get(models))
            .route("/tokenize", post(tokenize))
            .layer(axum::extract::DefaultBodyLimit::disable())
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { addr, inner }
    }

    /// Base URL as users pass it to `--backend`.
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Request bodies received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.inner.lock().unwrap().requests.clone()
    }

    /// Prompts received so far.
    pub fn prompts(&self) -> Vec<String> {
        self.requests()
            .iter()
            .map(|r| r["prompt"].as_str().unwrap().to_string())
            .collect()
    }

    /// Sets the context length reported by `/v1/models` and whether `/tokenize` exists.
    pub fn set_context(&self, max_model_len: u64, tokenize: bool) {
        let mut guard = self.inner.lock().unwrap();
        guard.max_model_len = Some(max_model_len);
        guard.tokenize = tokenize;
    }

    /// `Slow` calls whose connection the proxy closed before the answer.
    pub fn cancelled(&self) -> usize {
        self.inner.lock().unwrap().cancelled
    }

    /// `/tokenize` calls served.
    pub fn tokenize_calls(&self) -> usize {
        self.inner.lock().unwrap().tokenize_calls
    }

    /// The `Authorization` headers received so far, in order (`None`: absent).
    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.inner.lock().unwrap().authorizations.clone()
    }

    /// Number of completion calls served (errors included).
    pub fn calls(&self) -> usize {
        self.inner.lock().unwrap().calls
    }
}

fn record_auth(inner: &Mutex<Inner>, headers: &HeaderMap) {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    inner.lock().unwrap().authorizations.push(auth);
}

async fn models(State(inner): State<Arc<Mutex<Inner>>>, headers: HeaderMap) -> Json<Value> {
    record_auth(&inner, &headers);
    let mut model = json!({"id": "fake-base", "object": "model"});
    if let Some(n) = inner.lock().unwrap().max_model_len {
        model["max_model_len"] = json!(n);
    }
    Json(json!({"object": "list", "data": [model]}))
}

/// vLLM's `/tokenize`: `{"count", "max_model_len", "tokens"}`; 404 when switched off.
async fn tokenize(
    State(inner): State<Arc<Mutex<Inner>>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    record_auth(&inner, &headers);
    let mut guard = inner.lock().unwrap();
    if !guard.tokenize {
        return (StatusCode::NOT_FOUND, "Not Found").into_response();
    }
    guard.tokenize_calls += 1;
    let count = body["prompt"]
        .as_str()
        .unwrap_or_default()
        .len()
        .div_ceil(4);
    Json(json!({"count": count, "max_model_len": guard.max_model_len, "tokens": []}))
        .into_response()
}

fn usage(prompt: &str, text: &str) -> Value {
    let p = prompt.split_whitespace().count();
    let c = text.split_whitespace().count();
    json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c})
}

async fn complete(
    State(inner): State<Arc<Mutex<Inner>>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    record_auth(&inner, &headers);
    let next = {
        let mut guard = inner.lock().unwrap();
        guard.calls += 1;
        guard.requests.push(body.clone());
        guard.script.pop_front()
    };
    let prompt = body["prompt"].as_str().unwrap_or_default().to_string();
    let ok = |choice: Value, extra: Value| {
        let text = choice["text"].as_str().unwrap_or_default().to_string();
        let mut out = json!({
            "id": "cmpl-fake", "object": "text_completion", "created": 1, "model": "fake-base",
            "choices": [choice], "usage": usage(&prompt, &text)
        });
        if let (Some(o), Value::Object(e)) = (out.as_object_mut(), extra) {
            o.extend(e);
        }
        Json(out).into_response()
    };
    match next {
        None => (StatusCode::INTERNAL_SERVER_ERROR, "script exhausted").into_response(),
        Some(Scripted::Vllm {
            text,
            finish_reason,
        }) => {
            let stop_reason = if finish_reason == "stop" {
                json!("\n<observation>")
            } else {
                Value::Null
            };
            ok(
                json!({"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": null, "stop_reason": stop_reason}),
                json!({}),
            )
        }
        Some(Scripted::LlamaServer { text }) => ok(
            json!({"index": 0, "text": text, "finish_reason": "stop", "logprobs": null}),
            json!({"stopping_word": "\n<observation>", "stop_type": "word"}),
        ),
        Some(Scripted::Sglang { text }) => ok(
            json!({"index": 0, "text": text, "finish_reason": "stop", "logprobs": null, "matched_stop": "\n## Thinking"}),
            json!({}),
        ),
        Some(Scripted::IgnoresStop { text }) => ok(
            json!({"index": 0, "text": text, "finish_reason": "length", "logprobs": null}),
            json!({}),
        ),
        Some(Scripted::Error { status, message }) => {
            let kind = if status >= 500 {
                "server_error"
            } else {
                "invalid_request_error"
            };
            (
                StatusCode::from_u16(status).unwrap(),
                Json(json!({"error": {"message": message, "type": kind, "code": status}})),
            )
                .into_response()
        }
        Some(Scripted::Chat { content, tool_call }) => {
            let calls: Vec<Value> = tool_call
                .iter()
                .map(|(name, args)| json!({"id": "call_instruct_1", "type": "function", "function": {"name": name, "arguments": args}}))
                .collect();
            let finish = if calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            };
            let mut message = json!({"role": "assistant", "content": content});
            if !calls.is_empty() {
                message["tool_calls"] = Value::Array(calls);
            }
            Json(json!({
                "id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": "instruct-model",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage(&prompt, &content)
            }))
            .into_response()
        }
        Some(Scripted::RateLimited { retry_after }) => {
            let mut resp = (
                StatusCode::TOO_MANY_REQUESTS,
                Json(json!({"error": {"message": "Rate limit reached, slow down", "type": "rate_limit_error", "code": "rate_limit_exceeded"}})),
            )
                .into_response();
            if let Some(value) = retry_after {
                resp.headers_mut()
                    .insert("retry-after", value.parse().unwrap());
            }
            resp
        }
        Some(Scripted::Raw { status, body }) => (
            StatusCode::from_u16(status).unwrap(),
            [("content-type", "application/json")],
            body,
        )
            .into_response(),
        Some(Scripted::Hangup) => {
            use futures_util::StreamExt;
            // The status line, headers and a first chunk go out; then the connection drops.
            let start = futures_util::stream::once(async {
                Ok::<_, std::io::Error>("{\"id\": \"cmpl-fake\", \"choi")
            });
            let death = futures_util::stream::once(async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Err(std::io::Error::other("backend process died"))
            });
            Response::new(axum::body::Body::from_stream(start.chain(death)))
        }
        Some(Scripted::Slow { delay, text }) => {
            // Counts a call whose client (the proxy) went away before the answer.
            struct Watch(Arc<Mutex<Inner>>, bool);
            impl Drop for Watch {
                fn drop(&mut self) {
                    if !self.1 {
                        if let Ok(mut inner) = self.0.lock() {
                            inner.cancelled += 1;
                        }
                    }
                }
            }
            let mut watch = Watch(inner.clone(), false);
            tokio::time::sleep(delay).await;
            watch.1 = true;
            ok(
                json!({"index": 0, "text": text, "finish_reason": "stop", "logprobs": null, "stop_reason": "\n<observation>"}),
                json!({}),
            )
        }
    }
}
