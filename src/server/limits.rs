//! Guards of the HTTP layer (docs/reliability.md, items 3 to 5): API-key authentication, the
//! concurrency limit, per-request deadlines, message/tool/name checks, and the count of steps
//! in flight that graceful shutdown waits for.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio::time::Instant;

use super::AppState;
use crate::backend::CallBudget;
use crate::config::Secret;
use crate::error::ProxyError;
use crate::openai::chat::ChatCompletionRequest;

/// The only paths that need no API key: liveness probes and Prometheus scrapers carry none.
pub const UNAUTHENTICATED_PATHS: [&str; 2] = ["/health", "/metrics"];

/// `Retry-After` of a 429 for the concurrency limit, seconds.
pub const CONCURRENCY_RETRY_AFTER_S: u64 = 1;

/// How long after its deadline a request is answered 504 even when its step has not
/// returned yet (the step's own backend calls end at the deadline and write the trace
/// record; this only covers a step stuck elsewhere).
pub const BACKSTOP_GRACE: Duration = Duration::from_secs(5);

/// SHA-256 digests of the accepted API keys. Comparing digests makes the check
/// independent of the keys' lengths and contents; each comparison is constant-time.
#[derive(Debug, Clone, Default)]
pub struct ApiKeys {
    digests: Vec<[u8; 32]>,
}

impl ApiKeys {
    /// The digests of `keys` (empty: authentication off).
    pub fn new(keys: &[Secret]) -> Self {
        Self {
            digests: keys.iter().map(|k| digest(k.expose())).collect(),
        }
    }

    /// Whether keys are configured at all.
    pub fn enabled(&self) -> bool {
        !self.digests.is_empty()
    }

    /// Whether `token` is one of the keys. Every key is compared, each in constant time, so
    /// the time taken says nothing about which key or how much of it matched.
    pub fn accepts(&self, token: &str) -> bool {
        let presented = digest(token);
        self.digests.iter().fold(false, |found, key| {
            found | constant_time_eq(key, &presented)
        })
    }
}

fn digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive), else of
/// an `x-api-key` header (the Anthropic API's, which its SDK and Claude Code send).
fn bearer(request: &Request) -> Option<&str> {
    let anthropic = || {
        request
            .headers()
            .get("x-api-key")?
            .to_str()
            .ok()
            .map(str::trim)
            .filter(|t| !t.is_empty())
    };
    bearer_only(request).or_else(anthropic)
}

fn bearer_only(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
        .filter(|t| !t.is_empty())
}

/// A middleware's refusal in the shape of the request's API: the Messages API's on
/// `/v1/messages…`, else OpenAI's.
fn rejection(request: &Request, e: ProxyError) -> Response {
    if request.uri().path().starts_with("/v1/messages") {
        super::handlers::anthropic_error(e)
    } else {
        e.into_response()
    }
}

/// Middleware: with `--api-key` set, every path but [`UNAUTHENTICATED_PATHS`] needs
/// `Authorization: Bearer <key>` (or `x-api-key: <key>`) with one of the keys; otherwise 401
/// `invalid_api_key` (on `/v1/messages`, the Messages API's `authentication_error`). The
/// presented token is never logged or echoed.
pub async fn authenticate(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    if !state.api_keys.enabled() || UNAUTHENTICATED_PATHS.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    match bearer(&request) {
        Some(token) if state.api_keys.accepts(token) => next.run(request).await,
        _ => rejection(&request, ProxyError::Unauthorized),
    }
}

/// What an admitted chat/responses request carries through its step: its share of
/// `--max-concurrency` (released when the step has finished and the response is sent, or the
/// client is gone) and its deadline.
#[derive(Debug, Clone, Default)]
pub struct Admission {
    /// Held, never read: dropping the last clone frees the slot.
    _permit: Option<Arc<OwnedSemaphorePermit>>,
    /// When the request must be answered, and `--request-timeout` in seconds.
    pub deadline: Option<(Instant, u64)>,
}

impl Admission {
    /// An admission without a permit, its deadline counted from now (requests that reach a
    /// handler without the middleware, e.g. a router built differently).
    pub fn unlimited(state: &AppState) -> Self {
        Self {
            _permit: None,
            deadline: state.deadline_from_now(),
        }
    }
}

/// Middleware for the chat and responses routes: takes a permit of `--max-concurrency`
/// without waiting (429 `rate_limit_error` with `Retry-After: 1` when none is free) and
/// starts the request's deadline.
pub async fn admit(
    State(state): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let permit = match &state.concurrency {
        None => None,
        Some(semaphore) => match semaphore.clone().try_acquire_owned() {
            Ok(permit) => Some(Arc::new(permit)),
            Err(_) => {
                let limit = state.server.max_concurrency.unwrap_or_default();
                let error = ProxyError::RateLimited {
                    message: format!(
                        "the proxy is serving its limit of {limit} concurrent requests \
                         (--max-concurrency); retry after {CONCURRENCY_RETRY_AFTER_S} s"
                    ),
                    retry_after_s: CONCURRENCY_RETRY_AFTER_S,
                };
                return rejection(&request, error);
            }
        },
    };
    request.extensions_mut().insert(Admission {
        _permit: permit,
        deadline: state.deadline_from_now(),
    });
    next.run(request).await
}

/// The per-request checks that need no backend: message count (`--max-messages`), tool
/// count (`--max-tools`), and tool and parameter names ([`crate::profile::check_tools`]).
///
/// Errors: a 400 naming the limit or the tool, with `param` set.
pub fn check_request(state: &AppState, request: &ChatCompletionRequest) -> Result<(), ProxyError> {
    let limits = &state.server;
    if request.messages.len() > limits.max_messages {
        return Err(ProxyError::InvalidRequest {
            message: format!(
                "too many messages: {} (this proxy accepts at most {}, --max-messages)",
                request.messages.len(),
                limits.max_messages
            ),
            param: Some("messages".into()),
        });
    }
    if request.tools.len() > limits.max_tools {
        return Err(ProxyError::InvalidRequest {
            message: format!(
                "too many tools: {} (this proxy accepts at most {}, --max-tools)",
                request.tools.len(),
                limits.max_tools
            ),
            param: Some("tools".into()),
        });
    }
    if checked_before(&request.tools) {
        return Ok(());
    }
    crate::profile::check_tools(&request.tools).map_err(|e| ProxyError::InvalidRequest {
        message: e.message,
        param: Some(e.param),
    })?;
    remember_checked(&request.tools);
    Ok(())
}

/// Tool sets that passed [`crate::profile::check_tools`], held (so an address found here is
/// the same content): the body decoder hands out one shared value for a tools array it has
/// decoded before, so a session's later turns skip the check. At most [`CHECKED_KEPT`].
static CHECKED: std::sync::Mutex<Vec<std::sync::Arc<[crate::openai::chat::Tool]>>> =
    std::sync::Mutex::new(Vec::new());

const CHECKED_KEPT: usize = 64;

fn checked_before(tools: &std::sync::Arc<[crate::openai::chat::Tool]>) -> bool {
    tools.is_empty()
        || CHECKED
            .lock()
            .is_ok_and(|checked| checked.iter().any(|t| std::sync::Arc::ptr_eq(t, tools)))
}

fn remember_checked(tools: &std::sync::Arc<[crate::openai::chat::Tool]>) {
    if let Ok(mut checked) = CHECKED.lock() {
        if checked.len() >= CHECKED_KEPT {
            checked.remove(0);
        }
        checked.push(tools.clone());
    }
}

/// The budget a step's backend calls run under: the admission's deadline and the server's
/// shutdown cut-off.
pub fn budget(state: &AppState, admission: &Admission) -> CallBudget {
    CallBudget {
        deadline: admission.deadline,
        abort: Some(state.abort.subscribe()),
        client: None,
    }
}

/// Steps in flight (spawned step tasks, which outlive a client that disconnects). Graceful
/// shutdown waits for none to be left, so their trace records are written before exit.
#[derive(Debug, Default)]
pub struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

/// One step in flight; dropping it ends it.
#[derive(Debug)]
pub struct InFlightGuard(Arc<InFlight>);

impl InFlight {
    /// Counts one more step until the guard is dropped.
    pub fn enter(self: &Arc<Self>) -> InFlightGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(self.clone())
    }

    /// Steps in flight now.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Resolves once no step is in flight.
    pub async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_exactly() {
        let keys = ApiKeys::new(&[Secret::new("k-one"), Secret::new("k-two")]);
        assert!(keys.enabled());
        assert!(keys.accepts("k-one") && keys.accepts("k-two"));
        for wrong in ["", "k-on", "k-one ", "K-ONE", "k-onee"] {
            assert!(!keys.accepts(wrong), "{wrong}");
        }
        assert!(!ApiKeys::default().enabled());
    }

    #[tokio::test]
    async fn in_flight_waits_for_the_last_guard() {
        let tracker = Arc::new(InFlight::default());
        tracker.wait_idle().await;
        let guard = tracker.enter();
        let waiter = tokio::spawn({
            let tracker = tracker.clone();
            async move { tracker.wait_idle().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        drop(guard);
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .unwrap()
            .unwrap();
    }
}
