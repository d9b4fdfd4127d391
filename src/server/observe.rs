//! Request metrics: the middleware that counts and times every request, and `GET /metrics`
//! (the server's [`crate::metrics::Metrics`] in the Prometheus text format; docs/metrics.md).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper::body::{Body as HttpBody, Frame, SizeHint};

use super::AppState;
use crate::backend::RequestClock;
use crate::metrics::{FinishedRequest, Metrics, CONTENT_TYPE};

/// `endpoint` label of a request that matched no route.
pub const UNMATCHED: &str = "unmatched";

/// Middleware (outermost but for the HTTP trace layer, so 401s and 429s are counted too):
/// counts the request in flight and, when its response body ends or is dropped (for SSE, at
/// the end of the stream), records it with its route, the profile that served it, its status,
/// its duration and the proxy's overhead from the request's [`RequestClock`].
pub async fn track(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let endpoint = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| UNMATCHED.to_string(), |p| p.as_str().to_string());
    state.metrics.request_started();
    let response = next.run(request).await;
    let finish = Finish {
        metrics: state.metrics.clone(),
        endpoint,
        status: response.status().as_u16(),
        clock: response.extensions().get::<Arc<RequestClock>>().cloned(),
        started,
    };
    response.map(|body| {
        Body::new(Observed {
            inner: body,
            finish: Some(finish),
        })
    })
}

/// `GET /metrics`: no API key needed, like `/health` (labels carry no secrets and no
/// session data).
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    state.metrics.set_steps_in_flight(state.in_flight.count());
    if let Ok(cache) = crate::openai::split::MessageCache::global().lock() {
        let stats = cache.stats();
        state.metrics.set_message_cache(
            stats.hits,
            stats.misses,
            (stats.bytes, stats.capacity),
            stats.admit_one_in,
        );
    }
    state
        .metrics
        .set_render_cache(&state.renderer.render_cache_stats());
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        state.metrics.render(),
    )
        .into_response()
}

/// Records the request when dropped: at the end of the response body, or when hyper drops
/// the body (sent whole, or the client went away).
struct Finish {
    metrics: Metrics,
    endpoint: String,
    status: u16,
    clock: Option<Arc<RequestClock>>,
    started: Instant,
}

impl Drop for Finish {
    fn drop(&mut self) {
        self.metrics.request_finished(&FinishedRequest {
            endpoint: &self.endpoint,
            profile: self.clock.as_ref().and_then(|c| c.profile()),
            status: self.status,
            duration: self.started.elapsed().as_secs_f64(),
            overhead: self.clock.as_ref().map(|c| c.overhead_ms() / 1e3),
        });
    }
}

/// A response body that carries a [`Finish`]; frames, size and end pass through unchanged (a
/// JSON body keeps its `Content-Length`).
struct Observed {
    inner: Body,
    /// Taken (so recorded) at the end of the body; dropped with the body otherwise.
    finish: Option<Finish>,
}

impl HttpBody for Observed {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let poll = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = poll {
            self.finish.take();
        }
        poll
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
