//! Handlers: thin adapters between HTTP and the pipeline.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures_util::stream::{self, Stream, StreamExt};
use serde_json::json;

use super::limits::{self, Admission};
use super::AppState;
use crate::backend::RequestClock;
use crate::config::Mode;
use crate::error::ProxyError;
use crate::openai::chat::{ChatCompletionRequest, StartSignal};
use crate::passthrough::run_passthrough;
use crate::pipeline::{run_step, StepContext, StepOutcome};
use crate::respond::{completion_id, completion_object, ChunkBuilder};
use crate::util::now_s;

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    clock: Option<Extension<Arc<RequestClock>>>,
    admission: Option<Extension<Admission>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ProxyError> {
    let admission = admission.map_or_else(|| Admission::unlimited(&state), |Extension(a)| a);
    let body = super::read_body(body, state.server.max_body_bytes)?;
    let mut request = ChatCompletionRequest::from_bytes(body)?;
    limits::check_request(&state, &request)?;
    set_headers(&mut request, &headers);
    request.clock = clock.map(|Extension(c)| c);
    let model = request.model.clone().unwrap_or_else(|| "base-model".into());
    let id = completion_id();
    let created = now_s();
    if !request.is_stream() {
        let outcome = step(state, request, admission).await?;
        return Ok(Json(completion_object(&outcome.reply, &id, &model, created)).into_response());
    }
    let chunks = ChunkBuilder {
        id,
        model,
        created,
        include_usage: request.include_usage(),
    };
    let clock = request.clock.clone();
    let step = started_step(state, request, admission).await?;
    Ok(Sse::new(sse_stream(step, chunks, clock))
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// A step that has not ended yet.
pub(super) type RunningStep = Pin<Box<dyn Future<Output = Result<StepOutcome, ProxyError>> + Send>>;

/// How long a streamed request's first backend call may run before the stream begins: a
/// backend rejects a prompt longer than its context window as soon as it has tokenized it
/// (milliseconds), so that answer still becomes the HTTP 400 LiteLLM maps.
pub const STREAM_START_GRACE: std::time::Duration = std::time::Duration::from_millis(150);

/// Runs a streamed request's step until its first backend call has run for
/// [`STREAM_START_GRACE`], so that what fails before the model is asked (a prompt that cannot
/// fit the context window: 400 `context_length_exceeded`, which LiteLLM maps to its
/// context-window error only from an HTTP status; an unknown profile) or is refused by the
/// backend at once (its own context-overflow answer) is answered with its HTTP status, as for
/// a request that does not stream. Then the stream begins and the step goes on inside it.
pub(super) async fn started_step(
    state: Arc<AppState>,
    mut request: ChatCompletionRequest,
    admission: Admission,
) -> Result<RunningStep, ProxyError> {
    let (signal, started) = StartSignal::new();
    request.started = Some(signal);
    let mut running: RunningStep = Box::pin(step(state, request, admission));
    tokio::select! {
        biased;
        outcome = &mut running => {
            let outcome = outcome?;
            Ok(Box::pin(std::future::ready(Ok(outcome))))
        }
        _ = async {
            if started.await.is_ok() {
                tokio::time::sleep(STREAM_START_GRACE).await;
            }
        } => Ok(running),
    }
}

/// Copies the headers the pipeline reads (`X-ASAP-Task`, `X-ASAP-Run`) into the request.
pub(super) fn set_headers(request: &mut ChatCompletionRequest, headers: &HeaderMap) {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    request.task_header = header("x-asap-task");
    request.run_header = header("x-asap-run");
}

/// Runs the step on its own task, so that its trace record is written even when the client
/// disconnects; a disconnect cancels the backend call in flight (the record says `aborted`).
/// The task holds the
/// request's admission (its `--max-concurrency` permit) and counts as in flight until it
/// ends; its backend calls run under the request's deadline and the shutdown cut-off
/// ([`crate::backend::CallBudget`]), so a timeout or a cut-off is still traced.
///
/// Errors: the step's own, or [`ProxyError::RequestTimeout`] when the step has not returned
/// [`limits::BACKSTOP_GRACE`] after the deadline (the step goes on and traces itself).
pub(super) async fn step(
    state: Arc<AppState>,
    request: ChatCompletionRequest,
    admission: Admission,
) -> Result<StepOutcome, ProxyError> {
    let in_flight = state.in_flight.enter();
    let mut budget = limits::budget(&state, &admission);
    // Held by this future: when the client goes away, axum drops it, the receiver closes and
    // the step's backend call is cancelled (the step still writes its trace record).
    let (_client, client_gone) = tokio::sync::watch::channel(());
    budget.client = Some(client_gone);
    let backstop = admission.deadline;
    let task = tokio::spawn(budget.scope(async move {
        let _held = (admission, in_flight);
        let ctx = StepContext {
            profiles: &state.profiles,
            renderer: &state.renderer,
            prompt_config: &state.prompt_config,
            backend: &state.backend,
            trace: &state.trace,
            sessions: &state.sessions,
            prefixes: &state.prefixes,
            max_tokens: state.max_tokens,
            limits: state.limits,
            on_terminate: state.on_terminate,
            context: &state.context,
        };
        match state.mode {
            Mode::Proxy => run_step(&ctx, request).await,
            Mode::Passthrough => run_passthrough(&ctx, &request).await,
        }
    }));
    let joined = match backstop {
        None => task.await,
        Some((at, seconds)) => tokio::time::timeout_at(at + limits::BACKSTOP_GRACE, task)
            .await
            .map_err(|_| ProxyError::RequestTimeout(seconds))?,
    };
    joined.map_err(|e| ProxyError::Internal(format!("step task failed: {e}")))?
}

/// SSE: the role chunk once the step's backend call has run for the start grace ([`started_step`]), the rest
/// once the action is complete, `[DONE]` last. A failure becomes one `{"error": …}` event before `[DONE]`.
fn sse_stream(
    step: RunningStep,
    chunks: ChunkBuilder,
    clock: Option<Arc<RequestClock>>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let first = event(&chunks.role());
    let rest = stream::once(async move {
        let mut events: Vec<Event> = match step.await {
            Ok(outcome) => chunks.rest(&outcome.reply).iter().map(event).collect(),
            Err(e) => {
                tracing::error!(error = %e, "streamed request failed");
                vec![event(&e.body())]
            }
        };
        events.extend(overhead_comment(clock.as_deref()));
        stream::iter(events)
    })
    .flatten();
    stream::once(async move { first })
        .chain(rest)
        .chain(stream::once(async { Event::default().data("[DONE]") }))
        .map(Ok)
}

/// The `: x-asap-overhead-ms <ms>` comment that ends a stream (clients ignore comments).
pub(super) fn overhead_comment(clock: Option<&RequestClock>) -> Option<Event> {
    clock.map(|c| {
        Event::default().comment(format!("{} {:.3}", super::OVERHEAD_HEADER, c.overhead_ms()))
    })
}

fn event<T: serde::Serialize>(value: &T) -> Event {
    match serde_json::to_string(value) {
        Ok(s) => Event::default().data(s),
        Err(e) => Event::default()
            .data(json!({"error": {"message": e.to_string(), "type": "server_error"}}).to_string()),
    }
}

/// `GET /v1/models`: the backend's model (configured or discovered).
pub async fn models(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let id = state
        .backend
        .model_name()
        .await
        .unwrap_or_else(|| "base-model".to_string());
    Json(json!({
        "object": "list",
        "data": [{"id": id, "object": "model", "created": 0, "owned_by": "asap-proxy"}]
    }))
}

/// `GET /health`: the proxy is up (does not probe the backend).
pub async fn health() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}
