//! `POST /v1/responses`: the Responses request in its chat form through the same step as
//! chat completions, answered as a response object or as Responses SSE events.

use std::convert::Infallible;
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

use super::handlers::{started_step, step, RunningStep};
use super::limits::{self, Admission};
use super::AppState;
use crate::backend::RequestClock;
use crate::error::ProxyError;
use crate::openai::responses::{ResponseBuilder, ResponsesRequest};
use crate::util::now_s;

/// `POST /v1/responses`.
pub async fn create(
    State(state): State<Arc<AppState>>,
    clock: Option<Extension<Arc<RequestClock>>>,
    admission: Option<Extension<Admission>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ProxyError> {
    let admission = admission.map_or_else(|| Admission::unlimited(&state), |Extension(a)| a);
    let body = super::read_body(body, state.server.max_body_bytes)?;
    let decoded = ResponsesRequest::from_slice(&body)?;
    let mut request = decoded.chat;
    limits::check_request(&state, &request)?;
    request.raw_body = decoded.chat_body.into();
    super::handlers::set_headers(&mut request, &headers);
    request.clock = clock.map(|Extension(c)| c);
    let model = request.model.clone().unwrap_or_else(|| "base-model".into());
    let builder = ResponseBuilder::new(model, now_s(), decoded.echo);
    if !request.is_stream() {
        let outcome = step(state, request, admission).await?;
        return Ok(Json(builder.response(&outcome.reply)).into_response());
    }
    let clock = request.clock.clone();
    let step = started_step(state, request, admission).await?;
    Ok(Sse::new(sse_stream(step, builder, clock))
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// SSE: `response.created` and `response.in_progress` at once, the item events and
/// `response.completed` once the step is done. A failure becomes one `error` event.
fn sse_stream(
    step: RunningStep,
    builder: ResponseBuilder,
    clock: Option<Arc<RequestClock>>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let first: Vec<Event> = builder
        .start_events()
        .iter()
        .map(|(kind, body)| event(kind, body))
        .collect();
    let rest = stream::once(async move {
        let mut events: Vec<Event> = match step.await {
            Ok(outcome) => builder
                .rest_events(&outcome.reply)
                .iter()
                .map(|(kind, body)| event(kind, body))
                .collect(),
            Err(e) => {
                tracing::error!(error = %e, "streamed response failed");
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
                vec![event("error", &body)]
            }
        };
        events.extend(super::handlers::overhead_comment(clock.as_deref()));
        stream::iter(events)
    })
    .flatten();
    stream::iter(first).chain(rest).map(Ok)
}

fn event(kind: &str, body: &Value) -> Event {
    Event::default().event(kind).data(body.to_string())
}
