//! Handlers: thin adapters between HTTP and the pipeline. Chat Completions and Responses
//! share one core ([`answer`]): decode, admit, run the turn on its own task, and encode the
//! outcome in the request's API ([`Api`]) as JSON or as SSE.

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
use serde_json::{json, Value};

use super::limits::{self, Admission};
use super::AppState;
use crate::anthropic::MessagesRequest;
use crate::backend::RequestClock;
use crate::error::ProxyError;
use crate::openai::chat::{AsapHeaders, ChatCompletionRequest};
use crate::openai::responses::ResponsesRequest;
use crate::pipeline::{run_turn, RequestMeta, Scope, StartSignal, TurnOutcome};
use crate::respond::{
    completion_id, completion_object, ChunkBuilder, MessageBuilder, Reply, ResponseBuilder,
};
use crate::util::now_s;

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    clock: Option<Extension<Arc<RequestClock>>>,
    admission: Option<Extension<Admission>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ProxyError> {
    let body = super::read_body(body, state.server.max_body_bytes)?;
    let request = ChatCompletionRequest::from_bytes(body)?;
    let api = Api::Chat(ChunkBuilder {
        id: completion_id(),
        model: model_of(&request),
        created: now_s(),
        include_usage: request.include_usage(),
    });
    answer(state, request, api, clock, admission, &headers).await
}

/// `POST /v1/responses`: the request in its chat form through the same turn as chat
/// completions, answered as a response object or as Responses SSE events.
pub async fn responses(
    State(state): State<Arc<AppState>>,
    clock: Option<Extension<Arc<RequestClock>>>,
    admission: Option<Extension<Admission>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ProxyError> {
    let body = super::read_body(body, state.server.max_body_bytes)?;
    let decoded = ResponsesRequest::from_slice(&body)?;
    let mut request = decoded.chat;
    request.raw_body = decoded.chat_body.into();
    let mut builder = ResponseBuilder::new(model_of(&request), now_s(), decoded.echo);
    builder.custom_tools = decoded.custom_tools;
    builder.compaction = decoded.compaction;
    let api = Api::Responses(builder);
    answer(state, request, api, clock, admission, &headers).await
}

/// `POST /v1/messages` (Anthropic Messages API): the request in its chat form through the same
/// turn, answered as a message object or as Messages SSE events; every error in the API's
/// shape ([`crate::anthropic::error_body`]).
pub async fn messages(
    State(state): State<Arc<AppState>>,
    clock: Option<Extension<Arc<RequestClock>>>,
    admission: Option<Extension<Admission>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let answered = async {
        let body = super::read_body(body, state.server.max_body_bytes)?;
        let decoded = MessagesRequest::from_slice(&body)?;
        let mut request = decoded.chat;
        request.raw_body = decoded.chat_body.into();
        let api = Api::Messages(MessageBuilder::new(model_of(&request)));
        answer(state, request, api, clock, admission, &headers).await
    }
    .await;
    answered.unwrap_or_else(anthropic_error)
}

/// `POST /v1/messages/count_tokens`: `{"input_tokens": N}`, N the prompt the proxy would
/// render for the request counted as `--tokenizer` or the backend counts it (else the
/// estimate of 1 token per 2 bytes, see README "Context window").
pub async fn count_tokens(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let counted = async {
        let body = super::read_body(body, state.server.max_body_bytes)?;
        // Lone surrogates read as U+FFFD, as in the request the count stands for.
        let body = crate::openai::lenient::replace_lone_surrogates(&body);
        // `max_tokens` is not part of a count request: any value decodes.
        let mut value: Value = serde_json::from_slice(&body)
            .map_err(|e| ProxyError::invalid(format!("invalid request body: {e}")))?;
        if let Some(o) = value.as_object_mut() {
            o.entry("max_tokens").or_insert(json!(1));
            o.remove("stream");
        }
        let decoded = MessagesRequest::from_slice(value.to_string().as_bytes())?;
        let prepared = scope_of(&state).prepare(&decoded.chat, &RequestMeta::default())?;
        let counter = crate::context::TokenCounter {
            tokenizer: state.context.tokenizer.as_ref(),
            backend: &state.backend,
            model: decoded.chat.model.as_deref(),
            clock: None,
        };
        let (tokens, _) = crate::context::CountTokens::count(&counter, &prepared.prompt).await;
        Ok::<_, ProxyError>(Json(json!({"input_tokens": tokens})).into_response())
    }
    .await;
    counted.unwrap_or_else(anthropic_error)
}

/// The pipeline's view of the server's state.
fn scope_of(state: &AppState) -> Scope<'_> {
    Scope {
        mode: state.mode,
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
        tool_calls: state.tool_calls,
        context: &state.context,
    }
}

/// An error as the Messages API answers it: its status, `{"type": "error", "error": {…}}`.
pub(super) fn anthropic_error(e: ProxyError) -> Response {
    let status = e.status();
    let body = crate::anthropic::error_body(&e);
    // Logged and headed (Retry-After, WWW-Authenticate) as every error; only the body differs.
    let mut response = e.into_response();
    *response.body_mut() = axum::body::Body::from(body.to_string());
    *response.status_mut() = status;
    response
}

fn model_of(request: &ChatCompletionRequest) -> String {
    request.model.clone().unwrap_or_else(|| "base-model".into())
}

/// The API a request came in, and what its answer is built with.
enum Api {
    Chat(ChunkBuilder),
    Responses(ResponseBuilder),
    Messages(MessageBuilder),
}

impl Api {
    /// The whole answer, for a request that does not stream.
    fn object(&self, reply: &Reply) -> Response {
        match self {
            Self::Chat(c) => {
                Json(completion_object(reply, &c.id, &c.model, c.created)).into_response()
            }
            Self::Responses(b) => Json(b.response(reply)).into_response(),
            Self::Messages(b) => Json(b.message(reply)).into_response(),
        }
    }

    /// Events sent as soon as the stream begins.
    fn start_events(&self) -> Vec<Event> {
        match self {
            Self::Chat(c) => vec![data_event(&c.role())],
            Self::Responses(b) => b
                .start_events()
                .iter()
                .map(|(kind, body)| named_event(kind, body))
                .collect(),
            Self::Messages(b) => b
                .start_events()
                .iter()
                .map(|(kind, body)| named_event(kind, body))
                .collect(),
        }
    }

    /// Events once the turn is done: the reply's, or one error event.
    fn end_events(&self, outcome: Result<&Reply, &ProxyError>) -> Vec<Event> {
        match (self, outcome) {
            (Self::Chat(c), Ok(reply)) => c.rest(reply).iter().map(data_event).collect(),
            (Self::Chat(_), Err(e)) => vec![data_event(&e.body())],
            (Self::Responses(b), Ok(reply)) => b
                .rest_events(reply)
                .iter()
                .map(|(kind, body)| named_event(kind, body))
                .collect(),
            (Self::Responses(_), Err(e)) => {
                let error = serde_json::to_value(e.body())
                    .ok()
                    .and_then(|b| b.get("error").cloned())
                    .unwrap_or_else(|| json!({"message": e.to_string()}));
                let body = json!({
                    "type": "error",
                    "sequence_number": 2,
                    "code": error.get("code").cloned().unwrap_or(Value::Null),
                    "message": error.get("message").cloned().unwrap_or(Value::Null),
                    "param": error.get("param").cloned().unwrap_or(Value::Null),
                    "error": error,
                });
                vec![named_event("error", &body)]
            }
            (Self::Messages(b), Ok(reply)) => b
                .rest_events(reply)
                .iter()
                .map(|(kind, body)| named_event(kind, body))
                .collect(),
            (Self::Messages(_), Err(e)) => {
                vec![named_event("error", &crate::anthropic::error_body(e))]
            }
        }
    }

    /// The event that closes the stream: Chat Completions' `[DONE]`; Responses has none.
    fn done(&self) -> Option<Event> {
        matches!(self, Self::Chat(_)).then(|| Event::default().data("[DONE]"))
    }
}

/// The core both APIs share: admits the request, runs its turn, answers in `api`.
async fn answer(
    state: Arc<AppState>,
    request: ChatCompletionRequest,
    api: Api,
    clock: Option<Extension<Arc<RequestClock>>>,
    admission: Option<Extension<Admission>>,
    headers: &HeaderMap,
) -> Result<Response, ProxyError> {
    let admission = admission.map_or_else(|| Admission::unlimited(&state), |Extension(a)| a);
    limits::check_request(&state, &request)?;
    let meta = RequestMeta {
        headers: asap_headers(headers),
        clock: clock.map(|Extension(c)| c),
        started: None,
    };
    if !request.is_stream() {
        let outcome = turn(state, request, meta, admission).await?;
        return Ok(api.object(&outcome.reply));
    }
    let clock = meta.clock.clone();
    let running = started_turn(state, request, meta, admission).await?;
    Ok(Sse::new(sse_stream(running, api, clock))
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// A turn that has not ended yet.
type RunningTurn = Pin<Box<dyn Future<Output = Result<TurnOutcome, ProxyError>> + Send>>;

/// How long a streamed request's first backend call may run before the stream begins: a
/// backend rejects a prompt longer than its context window as soon as it has tokenized it
/// (milliseconds), so that answer still becomes the HTTP 400 LiteLLM maps.
pub const STREAM_START_GRACE: std::time::Duration = std::time::Duration::from_millis(150);

/// Runs a streamed request's turn until its first backend call has run for
/// [`STREAM_START_GRACE`], so that what fails before the model is asked (a prompt that cannot
/// fit the context window: 400 `context_length_exceeded`, which LiteLLM maps to its
/// context-window error only from an HTTP status; an unknown profile) or is refused by the
/// backend at once (its own context-overflow answer) is answered with its HTTP status, as for
/// a request that does not stream. Then the stream begins and the turn goes on inside it.
async fn started_turn(
    state: Arc<AppState>,
    request: ChatCompletionRequest,
    mut meta: RequestMeta,
    admission: Admission,
) -> Result<RunningTurn, ProxyError> {
    let (signal, started) = StartSignal::new();
    meta.started = Some(signal);
    let mut running: RunningTurn = Box::pin(turn(state, request, meta, admission));
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

/// The headers the pipeline reads (`X-ASAP-Task`, `X-ASAP-Run`).
fn asap_headers(headers: &HeaderMap) -> AsapHeaders {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    AsapHeaders {
        task: header("x-asap-task"),
        run: header("x-asap-run"),
    }
}

/// Runs the turn on its own task, so that its trace record is written even when the client
/// disconnects; a disconnect cancels the backend call in flight (the record says `aborted`).
/// The task holds the request's admission (its `--max-concurrency` permit) and counts as in
/// flight until it ends; its backend calls run under the request's deadline and the
/// shutdown cut-off ([`crate::backend::CallBudget`]), so a timeout or a cut-off is still
/// traced.
///
/// Errors: the turn's own, or [`ProxyError::RequestTimeout`] when the turn has not returned
/// [`limits::BACKSTOP_GRACE`] after the deadline (the turn goes on and traces itself).
async fn turn(
    state: Arc<AppState>,
    request: ChatCompletionRequest,
    meta: RequestMeta,
    admission: Admission,
) -> Result<TurnOutcome, ProxyError> {
    let in_flight = state.in_flight.enter();
    let mut budget = limits::budget(&state, &admission);
    // Held by this future: when the client goes away, axum drops it, the receiver closes and
    // the turn's backend call is cancelled (the turn still writes its trace record).
    let (_client, client_gone) = tokio::sync::watch::channel(());
    budget.client = Some(client_gone);
    let backstop = admission.deadline;
    // Boxed here: tokio boxes only futures over 16 KiB and moves smaller ones by value through
    // its spawn path, a copy of the turn's ~10 KB each (BENCHMARKS.md, issue 23, twenty-first
    // session).
    let task = tokio::spawn(Box::pin(budget.scope(async move {
        let _held = (admission, in_flight);
        run_turn(&scope_of(&state), request, &meta).await
    })));
    let joined = match backstop {
        None => task.await,
        Some((at, seconds)) => tokio::time::timeout_at(at + limits::BACKSTOP_GRACE, task)
            .await
            .map_err(|_| ProxyError::RequestTimeout(seconds))?,
    };
    joined.map_err(|e| ProxyError::Internal(format!("turn task failed: {e}")))?
}

/// SSE: the start events once the turn's backend call has run for the start grace
/// ([`started_turn`]), the rest once the action is complete, then the overhead comment and
/// the API's closing event. A failure becomes one error event.
fn sse_stream(
    running: RunningTurn,
    api: Api,
    clock: Option<Arc<RequestClock>>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let first = api.start_events();
    let rest = stream::once(async move {
        let outcome = running.await;
        if let Err(e) = &outcome {
            tracing::error!(error = %e, "streamed request failed");
        }
        let mut events = api.end_events(outcome.as_ref().map(|o| &o.reply));
        events.extend(overhead_comment(clock.as_deref()));
        events.extend(api.done());
        stream::iter(events)
    })
    .flatten();
    stream::iter(first).chain(rest).map(Ok)
}

/// The `: x-asap-overhead-ms <ms>` comment that ends a stream (clients ignore comments).
fn overhead_comment(clock: Option<&RequestClock>) -> Option<Event> {
    clock.map(|c| {
        Event::default().comment(format!("{} {:.3}", super::OVERHEAD_HEADER, c.overhead_ms()))
    })
}

/// A Chat Completions event: `data: <json>`.
fn data_event<T: serde::Serialize>(value: &T) -> Event {
    match serde_json::to_string(value) {
        Ok(s) => Event::default().data(s),
        Err(e) => Event::default()
            .data(json!({"error": {"message": e.to_string(), "type": "server_error"}}).to_string()),
    }
}

/// A Responses event: `event: <kind>` and `data: <json>`.
fn named_event(kind: &str, body: &Value) -> Event {
    Event::default().event(kind).data(body.to_string())
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

/// A path no route serves (404) or a route's path with another method (405), answered in the
/// shape of the API the path belongs to: the Messages API's `{"type": "error", "error":
/// {"type", "message"}}` under `/v1/messages`, OpenAI's `{"error": {"message", "type",
/// "param", "code"}}` elsewhere (OpenAI words an unknown path `Invalid URL (METHOD PATH)`).
pub(super) async fn no_route(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    route_error(axum::http::StatusCode::NOT_FOUND, &method, &uri)
}

/// See [`no_route`]; axum adds the `Allow` header.
pub(super) async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    route_error(axum::http::StatusCode::METHOD_NOT_ALLOWED, &method, &uri)
}

fn route_error(
    status: axum::http::StatusCode,
    method: &axum::http::Method,
    uri: &axum::http::Uri,
) -> Response {
    let path = uri.path();
    let not_found = status == axum::http::StatusCode::NOT_FOUND;
    let message = if not_found {
        format!("Invalid URL ({method} {path})")
    } else {
        format!("Method {method} is not allowed on {path}")
    };
    let body = if path.starts_with("/v1/messages") {
        let kind = if not_found {
            "not_found_error"
        } else {
            "invalid_request_error"
        };
        json!({"type": "error", "error": {"type": kind, "message": message}})
    } else {
        let code = if not_found {
            "unknown_url"
        } else {
            "method_not_allowed"
        };
        json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": code}})
    };
    (status, Json(body)).into_response()
}
