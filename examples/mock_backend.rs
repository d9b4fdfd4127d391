//! A zero-latency completion backend for the load benchmark (see `BENCHMARKS.md`).
//!
//! `POST /v1/completions` answers every prompt with the same realistic base-model step (a
//! thought and one `<bash>` action, vLLM-shaped: `stop_reason` names the matched stop
//! string), after `--delay-ms`; a body with `"stream": true` gets the same text as SSE chunks
//! followed by `data: [DONE]`. `GET /v1/models` lists one model, `mock`. The body is read
//! whole but not parsed (only searched for `"stream":true`, which cannot occur inside a JSON
//! string), so the mock's own cost barely depends on the prompt size.
//!
//! `cargo run --release --example mock_backend -- --port 9000 --delay-ms 0`

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

#[path = "../benches/support/swe_agent.rs"]
mod swe_agent;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use clap::Parser;
use serde_json::json;

#[derive(Parser)]
struct Args {
    /// Port on 127.0.0.1 (0: any free port; the bound address is printed).
    #[arg(long, default_value_t = 9000)]
    port: u16,
    /// Delay before each answer, milliseconds (a model's generation time).
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
    /// Text of every completion [default: a thought and a `<bash>` action].
    #[arg(long)]
    text: Option<String>,
}

struct Mock {
    delay: Duration,
    /// The completion text as a JSON string literal.
    text_json: String,
    completion_tokens: usize,
    /// The SSE body of a streamed answer.
    sse: String,
}

fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let text = args
        .text
        .clone()
        .unwrap_or_else(|| swe_agent::COMPLETION.to_string());
    let mut sse = String::new();
    let chars: Vec<char> = text.chars().collect();
    let mut event = |choice: serde_json::Value| {
        let chunk = json!({"id": "cmpl-mock", "object": "text_completion", "created": 0,
                           "model": "mock", "choices": [choice]});
        sse.push_str(&format!("data: {chunk}\n\n"));
    };
    // About one token per 4 characters, as BPE tokenisers give on code and English.
    for piece in chars.chunks(4) {
        let piece: String = piece.iter().collect();
        event(json!({"index": 0, "text": piece, "logprobs": null, "finish_reason": null}));
    }
    event(
        json!({"index": 0, "text": "", "logprobs": null, "finish_reason": "stop",
                 "stop_reason": "\n<observation>"}),
    );
    sse.push_str("data: [DONE]\n\n");
    let mock = Arc::new(Mock {
        delay: Duration::from_millis(args.delay_ms),
        text_json: serde_json::Value::String(text.clone()).to_string(),
        completion_tokens: text.len().div_ceil(4),
        sse,
    });
    // One thread: the benchmark pins the mock to one core.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let app = Router::new()
            .route("/v1/completions", post(completions))
            .route("/v1/models", get(models))
            .route("/health", get(|| async { "ok" }))
            .layer(DefaultBodyLimit::max(256 * 1024 * 1024))
            .with_state(mock);
        let addr = SocketAddr::from(([127, 0, 0, 1], args.port));
        let listener = tokio::net::TcpListener::bind(addr).await?;
        eprintln!(
            "mock backend listening on http://{}/v1 (delay {} ms)",
            listener.local_addr()?,
            args.delay_ms
        );
        axum::serve(listener, app).await
    })
}

/// Whether the body asks for SSE. `"stream":true` (any spacing after the colon) can only be a
/// key and its value: inside a JSON string a `"` is always escaped.
fn wants_stream(body: &[u8]) -> bool {
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

async fn completions(State(mock): State<Arc<Mock>>, body: Bytes) -> Response {
    if !mock.delay.is_zero() {
        tokio::time::sleep(mock.delay).await;
    }
    if wants_stream(&body) {
        return (
            [(header::CONTENT_TYPE, "text/event-stream")],
            Body::from(mock.sse.clone()),
        )
            .into_response();
    }
    // About 4 bytes per token, as BPE tokenisers give on code and English.
    let prompt_tokens = body.len() / 4;
    let json = format!(
        concat!(
            r#"{{"id":"cmpl-mock","object":"text_completion","created":0,"model":"mock","#,
            r#""choices":[{{"index":0,"text":{},"logprobs":null,"finish_reason":"stop","#,
            r#""stop_reason":"\n<observation>"}}],"usage":{{"prompt_tokens":{},"#,
            r#""completion_tokens":{},"total_tokens":{}}}}}"#
        ),
        mock.text_json,
        prompt_tokens,
        mock.completion_tokens,
        prompt_tokens + mock.completion_tokens
    );
    ([(header::CONTENT_TYPE, "application/json")], json).into_response()
}

async fn models() -> impl IntoResponse {
    axum::Json(json!({
        "object": "list",
        "data": [{"id": "mock", "object": "model", "created": 0, "owned_by": "asap-proxy-bench"}]
    }))
}
