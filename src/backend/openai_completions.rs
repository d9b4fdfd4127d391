//! `POST {base}/completions` client with timeouts and bounded retries.
//!
//! Faults and what the client of the proxy gets (docs/reliability.md, item 1): connect errors,
//! dropped connections and 5xx are retried `retries` times with exponential backoff from
//! 250 ms, then answered 502 (`backend_unavailable`); a 429 is retried the same way after the
//! backend's `Retry-After` (when it asks for at most [`MAX_HONOURED_RETRY_AFTER`]), then passed
//! on as 429 `rate_limit_error` with its `Retry-After`; a per-call timeout is 504
//! (`backend_timeout`); a body that is not JSON or not an OpenAI completions object is 502
//! (`backend_error`); other 4xx are 502 `backend_error`. A backend's context-overflow answer,
//! whatever its status (llama-server 500 or 400, vLLM and SGLang 400, TGI 422), is 400
//! `context_length_exceeded` at once, without retries, in OpenAI's wording ([`Overflow`]).
//! Every call also obeys the request's [`CallBudget`]: its deadline (504 `request_timeout`)
//! and the shutdown cut-off (503).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, OnceCell};
use tokio::time::Instant;

use super::{BackendCompletion, GenerationParams};
use crate::config::Secret;
use crate::error::ProxyError;
use crate::openai::completions::{CompletionRequest, CompletionResponse, PromptTokensDetails};

/// First retry delay; doubled on each further retry.
const BACKOFF_START: Duration = Duration::from_millis(250);

/// Longest backend `Retry-After` the proxy waits out itself before retrying a 429; a longer
/// one is passed on to the client at once (holding the request that long helps nobody).
pub const MAX_HONOURED_RETRY_AFTER: Duration = Duration::from_secs(30);

/// Timeout of the small discovery calls (`/models`, `/props`, `/info`, `/tokenize`).
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// What one request allows the backend calls made on its behalf: a deadline
/// (`--request-timeout`) and the server's shutdown cut-off. The HTTP layer sets it for the
/// task that runs a step ([`CallBudget::scope`]); every call of [`OpenAiCompletions`] in that
/// task reads it, so the pipeline needs no extra parameter. Outside a scope there is no limit.
#[derive(Debug, Clone, Default)]
pub struct CallBudget {
    /// When the request must be answered, and the configured timeout in seconds (for the
    /// error message). Calls past it fail with [`ProxyError::RequestTimeout`].
    pub deadline: Option<(Instant, u64)>,
    /// Becomes `true` at the shutdown deadline: calls in flight then fail at once with
    /// [`ProxyError::ShuttingDown`], so their steps still write a trace record.
    pub abort: Option<watch::Receiver<bool>>,
    /// Closes when the client goes away (the HTTP layer drops the sender with the request's
    /// future): calls in flight then fail at once with [`ProxyError::ClientDisconnected`]
    /// and the backend sees its connection closed (vLLM and SGLang stop generating).
    pub client: Option<watch::Receiver<()>>,
}

tokio::task_local! {
    static BUDGET: CallBudget;
}

impl CallBudget {
    /// Runs `f` with this budget applying to every backend call inside it. Not an `async fn`:
    /// one would hold `f` beside the scoped future made of it, twice its size for a turn's
    /// whole life (a spawned turn was 28 KB; BENCHMARKS.md, issue 23, twenty-first session).
    pub fn scope<F: Future>(self, f: F) -> impl Future<Output = F::Output> {
        BUDGET.scope(self, f)
    }

    /// The budget of the current task (none outside a scope).
    fn current() -> Self {
        BUDGET.try_with(Clone::clone).unwrap_or_default()
    }

    /// Time left before the deadline; `None`: no deadline.
    fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|(at, _)| at.saturating_duration_since(Instant::now()))
    }

    /// `limit`, shortened to the time left. `Err(RequestTimeout)` when none is left;
    /// `Ok((timeout, true))` when the deadline, not `limit`, bounds the call.
    fn bound(&self, limit: Duration) -> Result<(Duration, bool), ProxyError> {
        match (self.remaining(), self.deadline) {
            (Some(left), Some((_, seconds))) if left.is_zero() => {
                Err(ProxyError::RequestTimeout(seconds))
            }
            (Some(left), _) if left < limit => Ok((left, true)),
            _ => Ok((limit, false)),
        }
    }

    /// Runs `f` unless the shutdown cut-off (`Err(ShuttingDown)`) or the client's departure
    /// (`Err(ClientDisconnected)`) comes first.
    async fn race<F: Future>(&self, f: F) -> Result<F::Output, ProxyError> {
        let abort = self.abort.clone();
        let cut_off = async move {
            let fired = match abort {
                Some(mut abort) => abort.wait_for(|a| *a).await.is_ok(),
                None => false,
            };
            if !fired {
                // No cut-off, or the server is gone without one: never fire.
                std::future::pending::<()>().await;
            }
        };
        let client = self.client.clone();
        let gone = async move {
            match client {
                // `changed` fails once the sender is dropped: the client went away.
                Some(mut client) => while client.changed().await.is_ok() {},
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            out = f => Ok(out),
            () = cut_off => Err(ProxyError::ShuttingDown),
            () = gone => Err(ProxyError::ClientDisconnected),
        }
    }
}

/// How one HTTP attempt ended.
enum Attempt {
    /// 2xx: the body.
    Done(String),
    /// Worth another try (connect error, dropped connection, 5xx, 429), with the backend's
    /// `Retry-After` when it sent one.
    Retry(ProxyError, Option<Duration>),
    /// The attempt's timeout passed.
    TimedOut,
    /// Not worth another try.
    Fail(ProxyError),
}

/// Client for one OpenAI-compatible completions backend.
#[derive(Debug)]
pub struct OpenAiCompletions {
    client: reqwest::Client,
    base: String,
    /// `{base}/completions`, parsed once (a parse per call was 2 % of a short turn's
    /// instructions); `None` when it does not parse, and the call words the error.
    completions_url: Option<reqwest::Url>,
    model: Option<String>,
    /// Sent as `Authorization: Bearer`; never logged (its `Debug` is redacted and error
    /// messages are scrubbed of it).
    api_key: Option<Secret>,
    timeout_s: u64,
    retries: u32,
    discovered: OnceCell<String>,
    /// The context length the backend reports (`None`: it reports none); set once a
    /// discovery request got an answer.
    context_length: OnceCell<Option<u32>>,
    /// `--context-length`, when set: words a context-overflow answer that names no length.
    configured_context: Option<u32>,
    /// Cleared when `POST /tokenize` turns out not to exist.
    tokenize_works: std::sync::atomic::AtomicBool,
    /// Where retries and failed calls are counted.
    metrics: Option<crate::metrics::Metrics>,
}

impl OpenAiCompletions {
    /// `base` is the URL including `/v1`, without a trailing slash; `api_key` is sent as a
    /// Bearer token; `timeout_s` bounds each call (seconds); `retries` is the number of
    /// further attempts after a connect error, a dropped connection, a 5xx or a 429.
    ///
    /// Errors: [`ProxyError::Internal`] when the HTTP client cannot be built.
    pub fn new(
        base: String,
        model: Option<String>,
        api_key: Option<String>,
        timeout_s: u64,
        retries: u32,
    ) -> Result<Self, ProxyError> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(timeout_s))
            .build()
            .map_err(|e| ProxyError::Internal(format!("building HTTP client: {e}")))?;
        Ok(Self {
            client,
            completions_url: reqwest::Url::parse(&format!("{base}/completions")).ok(),
            base,
            model,
            api_key: api_key.filter(|k| !k.is_empty()).map(Secret::new),
            timeout_s,
            retries,
            discovered: OnceCell::new(),
            context_length: OnceCell::new(),
            configured_context: None,
            tokenize_works: std::sync::atomic::AtomicBool::new(true),
            metrics: None,
        })
    }

    /// The same client, counting its retries and failed calls in `metrics`
    /// (`asap_backend_retries_total`, `asap_backend_errors_total`).
    pub fn with_metrics(mut self, metrics: crate::metrics::Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The same client, naming `length` (`--context-length`) as the context length in a
    /// context-overflow answer that names none.
    pub fn with_context_length(mut self, length: Option<u32>) -> Self {
        self.configured_context = length;
        self
    }

    /// Counts a failed completion or chat call.
    fn observe<T>(&self, result: Result<T, ProxyError>) -> Result<T, ProxyError> {
        if let (Err(e), Some(metrics)) = (&result, &self.metrics) {
            metrics.backend_error(e);
        }
        result
    }

    /// The server root: `base` without its trailing `/v1`.
    fn root(&self) -> &str {
        self.base.strip_suffix("/v1").unwrap_or(&self.base)
    }

    async fn get_json(&self, url: &str) -> Result<Option<serde_json::Value>, ()> {
        let budget = CallBudget::current();
        let (timeout, _) = budget.bound(DISCOVERY_TIMEOUT).map_err(|_| ())?;
        let mut req = self.client.get(url).timeout(timeout);
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key.expose());
        }
        let call = async {
            let resp = req.send().await.map_err(|_| ())?;
            if !resp.status().is_success() {
                return Ok(None);
            }
            Ok(resp.json().await.ok())
        };
        budget.race(call).await.map_err(|_| ())?
    }

    /// The context length the backend reports, tokens: `max_model_len` of the first model in
    /// `GET {base}/models` (vLLM, SGLang), `n_ctx` in `GET {root}/props` (llama-server, per
    /// slot), `max_total_tokens` in `GET {root}/info` (TGI). Cached once the backend answered;
    /// `None` when it reports none or cannot be reached.
    pub async fn context_length(&self) -> Option<u32> {
        let as_u32 = |v: Option<&serde_json::Value>| {
            v.and_then(serde_json::Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n > 0)
        };
        self.context_length
            .get_or_try_init(|| async {
                let models = self.get_json(&format!("{}/models", self.base)).await?;
                if let Some(n) = as_u32(
                    models
                        .as_ref()
                        .and_then(|m| m.pointer("/data/0/max_model_len")),
                ) {
                    return Ok(Some(n));
                }
                let props = self.get_json(&format!("{}/props", self.root())).await?;
                let props = props.as_ref();
                if let Some(n) = as_u32(
                    props
                        .and_then(|p| p.pointer("/default_generation_settings/n_ctx"))
                        .or_else(|| props.and_then(|p| p.get("n_ctx"))),
                ) {
                    return Ok(Some(n));
                }
                let info = self.get_json(&format!("{}/info", self.root())).await?;
                Ok::<_, ()>(as_u32(
                    info.as_ref().and_then(|i| i.get("max_total_tokens")),
                ))
            })
            .await
            .ok()
            .copied()
            .flatten()
    }

    /// Tokens of `prompt` by the backend's `POST {root}/tokenize` (vLLM: `prompt` → `count`;
    /// llama-server: `content` → `tokens`; TGI: `inputs` → a list); `None` when the backend
    /// has no such endpoint (remembered) or the call fails.
    pub async fn tokenize(&self, prompt: &str, request_model: Option<&str>) -> Option<usize> {
        use std::sync::atomic::Ordering;
        if !self.tokenize_works.load(Ordering::Relaxed) {
            return None;
        }
        let model = match self.resolved_model().await {
            Some(m) => m,
            None => request_model.unwrap_or("default").to_string(),
        };
        let body = serde_json::json!({
            "model": model,
            "prompt": prompt,
            "content": prompt,
            "inputs": prompt,
            "add_special_tokens": true,
        });
        let budget = CallBudget::current();
        let (timeout, _) = budget.bound(DISCOVERY_TIMEOUT).ok()?;
        let mut req = self
            .client
            .post(format!("{}/tokenize", self.root()))
            .timeout(timeout)
            .json(&body);
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key.expose());
        }
        let resp = budget.race(req.send()).await.ok()?.ok()?;
        if matches!(resp.status().as_u16(), 404 | 405 | 501) {
            self.tokenize_works.store(false, Ordering::Relaxed);
            tracing::info!("backend has no /tokenize; prompt tokens are estimated");
            return None;
        }
        let value: serde_json::Value = resp.json().await.ok()?;
        value
            .get("count")
            .and_then(serde_json::Value::as_u64)
            .map(|n| n as usize)
            .or_else(|| value.get("tokens").and_then(|t| t.as_array()).map(Vec::len))
            .or_else(|| value.as_array().map(Vec::len))
    }

    /// Configured model, else the first model listed by `GET {base}/models` (cached once found).
    pub async fn resolved_model(&self) -> Option<String> {
        if let Some(m) = &self.model {
            return Some(m.clone());
        }
        self.discovered
            .get_or_try_init(|| async {
                let body = self
                    .get_json(&format!("{}/models", self.base))
                    .await?
                    .ok_or(())?;
                body.pointer("/data/0/id")
                    .and_then(|v| v.as_str())
                    .map(str::to_string)
                    .ok_or(())
            })
            .await
            .ok()
            .cloned()
    }

    /// See [`super::Backend::complete`].
    pub async fn complete(
        &self,
        prompt: super::Prompt<'_>,
        params: &GenerationParams,
        stop: &[&str],
        request_model: Option<&str>,
    ) -> Result<BackendCompletion, ProxyError> {
        let model = match self.resolved_model().await {
            Some(m) => m,
            None => request_model.unwrap_or("default").to_string(),
        };
        let body = Completion {
            request: CompletionRequest {
                model: model.clone(),
                // Not read: the body streams the prompt from `prompt` around this request's
                // JSON text.
                prompt: "",
                max_tokens: params.max_tokens,
                temperature: params.temperature,
                top_p: params.top_p,
                seed: params.seed,
                stop: stop.iter().map(|s| s.to_string()).collect(),
                stream: false,
                cache_prompt: true,
            },
            prompt,
        };
        let result = self
            .post("completions", &body, Some(params.max_tokens))
            .await;
        self.observe(result.and_then(|(text, attempts)| decode(&text, model, attempts)))
    }

    /// `POST {base}/chat/completions` with `body` as given (passthrough mode, recording
    /// reference trajectories with an instruction-tuned model). Returns the response JSON and
    /// the attempts made.
    pub async fn chat(
        &self,
        body: &serde_json::Value,
    ) -> Result<(serde_json::Value, u32), ProxyError> {
        let result = self.post("chat/completions", body, None).await;
        self.observe(result.and_then(|(text, attempts)| {
            let value = serde_json::from_str(&text).map_err(|e| {
                ProxyError::Backend(format!(
                    "response is not JSON ({e}): {}",
                    truncate(&text, 200)
                ))
            })?;
            Ok((value, attempts))
        }))
    }

    /// POSTs JSON to `{base}/{path}` with bounded retries on connect errors, dropped
    /// connections, 5xx and 429 (see the module doc); returns the body of the first success
    /// and the attempts made. Each attempt's timeout is the backend timeout, shortened to the
    /// request's deadline; the whole loop yields to the shutdown cut-off. `max_tokens` (of a
    /// completion call) words a context-overflow answer.
    async fn post<T: JsonBody + ?Sized>(
        &self,
        path: &str,
        body: &T,
        max_tokens: Option<u32>,
    ) -> Result<(String, u32), ProxyError> {
        let url = match &self.completions_url {
            Some(url) if path == "completions" => Ok(url.clone()),
            _ => Err(format!("{}/{path}", self.base)),
        };
        let budget = CallBudget::current();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (timeout, by_deadline) = budget.bound(Duration::from_secs(self.timeout_s))?;
            let mut req = match &url {
                Ok(url) => self.client.post(url.clone()),
                Err(url) => self.client.post(url),
            }
            .timeout(timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.body()?);
            if let Some(key) = &self.api_key {
                req = req.bearer_auth(key.expose());
            }
            let (retryable, retry_after) = match budget.race(self.attempt(req, max_tokens)).await? {
                Attempt::Done(text) => return Ok((text, attempt)),
                Attempt::Fail(e) => return Err(e),
                Attempt::TimedOut => {
                    return Err(match budget.deadline {
                        Some((_, seconds)) if by_deadline => ProxyError::RequestTimeout(seconds),
                        _ => ProxyError::BackendTimeout(self.timeout_s),
                    })
                }
                Attempt::Retry(e, retry_after) => (e, retry_after),
            };
            if attempt > self.retries {
                return Err(retryable);
            }
            let delay = match retry_after {
                Some(wait) if wait > MAX_HONOURED_RETRY_AFTER => return Err(retryable),
                Some(wait) => wait,
                None => BACKOFF_START * 2u32.saturating_pow(attempt - 1),
            };
            // No time for the wait and another try: the backend's own error says more than a
            // timeout would.
            if budget.remaining().is_some_and(|left| left <= delay) {
                return Err(retryable);
            }
            tracing::warn!(attempt, error = %retryable, delay_ms = delay.as_millis() as u64, "backend call failed, retrying");
            if let Some(metrics) = &self.metrics {
                metrics.backend_retry(&retryable);
            }
            budget.race(tokio::time::sleep(delay)).await?;
        }
    }

    /// One HTTP attempt, classified.
    async fn attempt(&self, req: reqwest::RequestBuilder, max_tokens: Option<u32>) -> Attempt {
        let resp = match req.send().await {
            Ok(resp) => resp,
            Err(e) if e.is_timeout() => return Attempt::TimedOut,
            Err(e) => {
                let message = format!("{}: {}", self.redacted_base(), error_chain(&e));
                return Attempt::Retry(ProxyError::BackendUnavailable(self.scrub(&message)), None);
            }
        };
        let status = resp.status();
        let retry_after = retry_after(resp.headers());
        let text = match resp.text().await {
            Ok(t) => t,
            Err(e) if e.is_timeout() => return Attempt::TimedOut,
            Err(e) => {
                let message = format!(
                    "connection dropped while reading the response (HTTP {status}): {}",
                    error_chain(&e)
                );
                return Attempt::Retry(ProxyError::BackendUnavailable(self.scrub(&message)), None);
            }
        };
        if status.is_success() {
            return Attempt::Done(text);
        }
        let message = self.scrub(&backend_message(&text));
        // Before the 5xx retries: llama-server answers an over-long prompt with 500 in some
        // builds, and the same prompt overflows again on every try.
        if status != reqwest::StatusCode::TOO_MANY_REQUESTS {
            if let Some(overflow) = Overflow::parse(&text, &message) {
                let known = self
                    .configured_context
                    .or_else(|| self.context_length.get().copied().flatten());
                return Attempt::Fail(ProxyError::ContextLengthExceeded(overflow.message(
                    max_tokens,
                    known,
                    &format!("HTTP {status}: {message}"),
                )));
            }
        }
        if status == reqwest::StatusCode::TOO_MANY_REQUESTS {
            let seconds = retry_after.map_or(1, |d| d.as_secs_f64().ceil().max(1.0) as u64);
            return Attempt::Retry(
                ProxyError::RateLimited {
                    message: format!("completion backend rate limit (HTTP 429): {message}"),
                    retry_after_s: seconds,
                },
                retry_after,
            );
        }
        if status.is_server_error() {
            return Attempt::Retry(
                ProxyError::BackendUnavailable(format!("HTTP {status}: {message}")),
                retry_after,
            );
        }
        if status == reqwest::StatusCode::NOT_FOUND {
            // Almost always a `--backend` without its API root (`http://host:8000` for
            // `http://host:8000/v1`).
            return Attempt::Fail(ProxyError::Backend(format!(
                "{}: HTTP {status}: {message} (--backend must be the API root that \
                 `/completions` is under, usually ending in `/v1`)",
                self.redacted_base()
            )));
        }
        Attempt::Fail(ProxyError::Backend(format!("HTTP {status}: {message}")))
    }

    /// `base` without user name or password.
    fn redacted_base(&self) -> String {
        match reqwest::Url::parse(&self.base) {
            Ok(mut u) => {
                let _ = u.set_username("");
                let _ = u.set_password(None);
                u.to_string().trim_end_matches('/').to_string()
            }
            Err(_) => "<backend>".to_string(),
        }
    }

    /// `text` with the backend API key and any password of the backend URL replaced by
    /// `***`, so a backend (or an HTTP library) that echoes them cannot put them into a
    /// client's error message, the trace or the log.
    fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        let password = reqwest::Url::parse(&self.base)
            .ok()
            .and_then(|u| u.password().map(str::to_string));
        for secret in self
            .api_key
            .iter()
            .map(|k| k.expose().to_string())
            .chain(password)
        {
            if !secret.is_empty() {
                out = out.replace(&secret, "***");
            }
        }
        out
    }
}

/// The `Retry-After` header as a duration: delta-seconds (what OpenAI, vLLM routers and most
/// gateways send) or `retry-after-ms`; HTTP dates are not read (`None`).
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|n| n.is_finite() && *n >= 0.0)
    };
    value("retry-after-ms")
        .map(|ms| Duration::from_secs_f64(ms / 1e3))
        .or_else(|| value("retry-after").map(Duration::from_secs_f64))
}

fn decode(text: &str, model: String, attempts: u32) -> Result<BackendCompletion, ProxyError> {
    let response: CompletionResponse = serde_json::from_str(text).map_err(|e| {
        ProxyError::Backend(format!(
            "response is not an OpenAI completions object ({e}): {}",
            truncate(text, 200)
        ))
    })?;
    let Some(choice) = response.choices.first() else {
        return Err(ProxyError::Backend("response has no choices".into()));
    };
    let matched_stop = choice
        .matched_stop()
        .or_else(|| response.stopping_word.clone().filter(|s| !s.is_empty()));
    Ok(BackendCompletion {
        text: choice.text.clone(),
        finish_reason: choice.finish_reason.clone(),
        matched_stop,
        closer: None,
        usage: response.usage.map(|mut usage| {
            // llama-server reports the cache in `timings.cache_n`; older builds have no
            // `prompt_tokens_details`.
            if usage.cached_tokens().is_none() {
                if let Some(cached) = response.timings.and_then(|t| t.cache_n) {
                    usage.prompt_tokens_details = Some(PromptTokensDetails {
                        cached_tokens: Some(cached),
                    });
                }
            }
            usage
        }),
        model,
        attempts,
    })
}

/// A backend request body, made anew for each attempt and handed over as a one-shot body:
/// reqwest keeps a copy of a reusable body for redirects until the response arrives, which
/// would hold every waiting request's prompt twice (BENCHMARKS.md, RSS). Content-Length is
/// set either way (exact size hint).
trait JsonBody {
    fn body(&self) -> Result<reqwest::Body, ProxyError>;
}

/// A completions request whose body streams the prompt (its `request.prompt` is not read).
struct Completion<'a> {
    request: CompletionRequest<'a>,
    prompt: super::Prompt<'a>,
}

impl JsonBody for Completion<'_> {
    fn body(&self) -> Result<reqwest::Body, ProxyError> {
        let (head, tail) = self.request.json_around_prompt().map_err(encoding_failed)?;
        let taken = self.prompt.take_parts()?;
        Ok(reqwest::Body::wrap(PromptBody::new(head, taken, tail)))
    }
}

impl JsonBody for serde_json::Value {
    fn body(&self) -> Result<reqwest::Body, ProxyError> {
        let json = serde_json::to_vec(self).map_err(encoding_failed)?;
        Ok(reqwest::Body::wrap(http_body_util::Full::new(
            bytes::Bytes::from(json),
        )))
    }
}

fn encoding_failed(e: serde_json::Error) -> ProxyError {
    ProxyError::Internal(format!("encoding the backend request: {e}"))
}

/// Bytes of the prompt escaped per frame of a [`PromptBody`].
const PROMPT_FRAME_BYTES: usize = 64 * 1024;

/// A completions body that sends its prompt's escaped frames when the caller has them (the
/// render cache's, shared, not copied; or those a turn escaped once for this body and its
/// trace record, the text itself let go), or else escapes the text into frames of
/// [`PROMPT_FRAME_BYTES`] as the connection takes them, instead of holding the whole prompt
/// escaped beside the text (a second copy of the history per request until it is sent, 58 MB
/// of the peak with 256 100-turn requests sent at once to a backend that reads them slowly;
/// BENCHMARKS.md "Issue 23"). The frames
/// together are byte for byte [`CompletionRequest::to_json`], and the exact length is known
/// before the first frame (Content-Length, not chunked: llama-server, vLLM, SGLang and TGI all
/// take it).
struct PromptBody {
    head: Option<bytes::Bytes>,
    prompt: PromptSource,
    tail: Option<bytes::Bytes>,
    /// Bytes not yet handed to the connection.
    remaining: u64,
}

/// Where a [`PromptBody`]'s prompt frames come from.
enum PromptSource {
    /// The text, escaped frame by frame; `sent`: bytes of it sent, `None` before the opening
    /// quote.
    Text {
        prompt: Arc<String>,
        sent: Option<usize>,
    },
    /// Frames escaped before (the quotes are in the head and the tail); `next`: the next one
    /// to send.
    Escaped {
        frames: Arc<crate::util::JsonFrames>,
        next: usize,
    },
}

impl PromptBody {
    /// The body of `head`, the prompt (from its kept frames if any, else escaped here; its
    /// escaped length counted here unless known) as a JSON string, and `tail`.
    fn new(mut head: Vec<u8>, prompt: super::TakenPrompt, mut tail: Vec<u8>) -> Self {
        let super::TakenPrompt {
            text,
            json_len,
            escaped,
        } = prompt;
        debug_assert!(
            json_len.is_none_or(|n| n == crate::util::json_escaped_len(text.as_bytes())),
            "a wrong escaped length would send a wrong Content-Length"
        );
        let (prompt, prompt_json) = match escaped {
            Some(frames) => {
                debug_assert!(
                    {
                        let mut whole = Vec::new();
                        crate::util::push_json_escaped(&mut whole, text.as_bytes());
                        frames.frames().concat() == whole
                    },
                    "kept frames must be the prompt escaped"
                );
                // The quotes go with the head and the tail, so the frames are sent as kept.
                head.push(b'"');
                tail.insert(0, b'"');
                let len = frames.len();
                (PromptSource::Escaped { frames, next: 0 }, len)
            }
            None => {
                let len =
                    json_len.unwrap_or_else(|| crate::util::json_escaped_len(text.as_bytes())) + 2;
                (
                    PromptSource::Text {
                        prompt: text,
                        sent: None,
                    },
                    len,
                )
            }
        };
        let remaining = (head.len() + prompt_json + tail.len()) as u64;
        Self {
            head: Some(head.into()),
            prompt,
            tail: Some(tail.into()),
            remaining,
        }
    }

    /// The next frame's bytes, `None` at the end.
    fn next_frame(&mut self) -> Option<bytes::Bytes> {
        if let Some(head) = self.head.take() {
            return Some(head);
        }
        match &mut self.prompt {
            PromptSource::Escaped { frames, next } => {
                while let Some(frame) = frames.frames().get(*next) {
                    *next += 1;
                    if !frame.is_empty() {
                        return Some(frame.clone());
                    }
                }
                self.tail.take()
            }
            PromptSource::Text { prompt, sent } => {
                let bytes = prompt.as_bytes();
                let from = match *sent {
                    Some(from) if from >= bytes.len() => return self.tail.take(),
                    Some(from) => from,
                    None => 0,
                };
                let to = (from + PROMPT_FRAME_BYTES).min(bytes.len());
                let mut frame = Vec::with_capacity((to - from) * 9 / 8 + 2);
                if sent.is_none() {
                    frame.push(b'"');
                }
                crate::util::push_json_escaped(&mut frame, &bytes[from..to]);
                if to == bytes.len() {
                    frame.push(b'"');
                }
                *sent = Some(to);
                Some(frame.into())
            }
        }
    }
}

impl hyper::body::Body for PromptBody {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
        let frame = self.next_frame();
        if let Some(frame) = &frame {
            self.remaining -= frame.len() as u64;
        }
        if self.remaining == 0 {
            // Sent: the connection may keep the body until the response, not its prompt.
            self.prompt = PromptSource::Text {
                prompt: Arc::default(),
                sent: Some(0),
            };
        }
        std::task::Poll::Ready(frame.map(|f| Ok(hyper::body::Frame::data(f))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.remaining)
    }
}

/// The `error.message` of an OpenAI-style error body, or the body itself (shortened).
fn backend_message(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("message"))
                .or_else(|| v.get("error"))
                .and_then(|m| m.as_str().map(str::to_string))
        })
        .unwrap_or_else(|| truncate(text, 500).to_string())
}

/// Context-overflow messages of vLLM, SGLang, llama-server, TGI and Ollama (lower-case
/// needles; the message is lower-cased first).
const OVERFLOW_NEEDLES: &[&str] = &[
    // OpenAI, vLLM ("This model's maximum context length is N tokens. However, …"), SGLang
    // ("… exceeds the model's maximum context length of N tokens").
    "maximum context length",
    // SGLang: "The input (M tokens) is longer than the model's context length (N tokens)."
    "longer than the model's context length",
    // vLLM V1: "The decoder prompt (length M) is longer than the maximum model length of N."
    "longer than the maximum model length",
    // SGLang: "Input length (M tokens) exceeds the maximum allowed length (N tokens)."
    "exceeds the maximum allowed length",
    // llama-server: "request (M tokens) exceeds the available context size (N tokens), try
    // increasing it", "the request exceeds the available context size. try increasing the
    // context size or enable context shift", "Context size has been exceeded."
    "exceeds the available context size",
    "context size has been exceeded",
    "exceed_context_size",
    // TGI: "Input validation error: `inputs` tokens + `max_new_tokens` must be <= N. Given:
    // M `inputs` tokens and K `max_new_tokens`", "`inputs` must have less than N tokens".
    "`inputs` tokens + `max_new_tokens` must be",
    "`inputs` must have less than",
    // Ollama (native API with `truncate: false`): "the input length exceeds the context length".
    "input length exceeds the context length",
    // Generic wordings of OpenAI-compatible servers.
    "context_length_exceeded",
    "context length exceeded",
    "context window exceeded",
];

/// Where a message states the context length: the number right after one of these.
const CONTEXT_LENGTH_AFTER: &[&str] = &[
    "maximum context length is",
    "maximum context length of",
    "available context size",
    "model's context length",
    "maximum model length of",
    "maximum allowed length",
    "must be <=",
    "must have less than",
];

/// Where a message states the prompt's tokens.
const PROMPT_TOKENS_AFTER: &[&str] = &[
    "request (",
    "your request has",
    "your prompt contains at least",
    "the input (",
    "input length (",
    "prompt (length",
    "tokens (",
    "tokens: ",
    "given:",
];

/// Where a message states prompt and completion tokens together.
const REQUESTED_AFTER: &[&str] = &["for a total of at least", "requested a total of"];

/// Whether `message` is a backend's context-overflow answer.
fn is_context_error(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    OVERFLOW_NEEDLES.iter().any(|needle| m.contains(needle))
}

/// The integer that follows the first `needle` in `m` (after spaces and `(`, `:`, `=`), and
/// the text after it.
fn number_after<'a>(m: &'a str, needle: &str) -> Option<(u64, &'a str)> {
    let at = m.find(needle)? + needle.len();
    let rest = m[at..].trim_start_matches([' ', '(', ':', '=']);
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let n = rest[..digits].parse().ok()?;
    Some((n, &rest[digits..]))
}

/// The first number after any of `needles`, in their order.
fn first_after(m: &str, needles: &[&str]) -> Option<u64> {
    needles
        .iter()
        .find_map(|needle| number_after(m, needle).map(|(n, _)| n))
}

/// What a backend's context-overflow answer says: the numbers each backend puts in it, as
/// far as it does (see [`OVERFLOW_NEEDLES`] for the forms).
#[derive(Debug, Default, PartialEq, Eq)]
struct Overflow {
    /// The backend's context length, tokens (llama-server's `n_ctx`).
    context_length: Option<u32>,
    /// Tokens of the prompt (llama-server's `n_prompt_tokens`).
    prompt_tokens: Option<usize>,
    /// Prompt and completion tokens together, when the backend says only that.
    requested: Option<usize>,
}

impl Overflow {
    /// The overflow an error answer reports (`body` as sent, `message` its error message),
    /// or `None` when it is some other error: llama-server's `exceed_context_size_error`
    /// type, or a message with one of [`OVERFLOW_NEEDLES`].
    fn parse(body: &str, message: &str) -> Option<Self> {
        let json: Option<serde_json::Value> = serde_json::from_str(body).ok();
        let error = json.as_ref().and_then(|v| v.get("error"));
        let field = |name: &str| {
            error
                .and_then(|e| e.get(name))
                .and_then(serde_json::Value::as_u64)
        };
        let typed = error
            .and_then(|e| e.get("type"))
            .and_then(serde_json::Value::as_str)
            == Some("exceed_context_size_error");
        if !typed && !is_context_error(message) {
            return None;
        }
        let m = message.to_ascii_lowercase();
        // vLLM: "you requested 5000 tokens (4000 in the messages, 1000 in the completion)";
        // its newer "you requested 1000 output tokens and …" names the completion only.
        let requested = first_after(&m, REQUESTED_AFTER).or_else(|| {
            number_after(&m, "you requested")
                .filter(|(_, rest)| rest.starts_with(" tokens"))
                .map(|(n, _)| n)
        });
        Some(Self {
            context_length: field("n_ctx")
                .or_else(|| first_after(&m, CONTEXT_LENGTH_AFTER))
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n > 0),
            prompt_tokens: field("n_prompt_tokens")
                .or_else(|| first_after(&m, PROMPT_TOKENS_AFTER))
                .map(|n| n as usize),
            requested: requested.map(|n| n as usize),
        })
    }

    /// The client's message, in OpenAI's wording ("This model's maximum context length is N
    /// tokens. However, you requested M tokens …", what LiteLLM maps to
    /// `ContextWindowExceededError`), then the backend's own (`detail`). `max_tokens`: the
    /// call's; `known_context`: the context length the backend reported before.
    fn message(&self, max_tokens: Option<u32>, known_context: Option<u32>, detail: &str) -> String {
        const REDUCE: &str = "Please reduce the length of the messages or completion.";
        let head = match (
            self.context_length.or(known_context),
            self.prompt_tokens,
            max_tokens,
            self.requested,
        ) {
            (Some(n), Some(prompt), Some(max_tokens), _) => {
                crate::error::too_long_message(n, prompt, max_tokens)
            }
            (Some(n), _, _, Some(total)) => format!(
                "This model's maximum context length is {n} tokens. However, you requested \
                 {total} tokens. {REDUCE}"
            ),
            (Some(n), Some(prompt), None, None) => format!(
                "This model's maximum context length is {n} tokens. However, your messages \
                 resulted in {prompt} tokens. Please reduce the length of the messages."
            ),
            (Some(n), None, _, None) => format!(
                "This model's maximum context length is {n} tokens. However, you requested \
                 more. {REDUCE}"
            ),
            (None, Some(prompt), Some(max_tokens), _) => format!(
                "This model's maximum context length is exceeded: you requested {} tokens \
                 ({prompt} in the messages, {max_tokens} in the completion). {REDUCE}",
                prompt + max_tokens as usize
            ),
            (None, ..) => {
                format!("This model's maximum context length is exceeded by this request. {REDUCE}")
            }
        };
        format!("{head} (completion backend: {})", truncate(detail, 300))
    }
}

fn truncate(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every turn in flight holds its scoped future: it must not hold the turn twice.
    #[test]
    fn a_budget_scope_holds_its_future_once() {
        let big = [7u8; 4096];
        let turn = async move {
            tokio::task::yield_now().await;
            big.len()
        };
        let turn_bytes = std::mem::size_of_val(&turn);
        let scoped = CallBudget::default().scope(turn);
        let scoped_bytes = std::mem::size_of_val(&scoped);
        assert!(
            scoped_bytes < turn_bytes + 256,
            "{scoped_bytes} bytes for a {turn_bytes}-byte future"
        );
    }

    fn completions_request(prompt: &str) -> CompletionRequest<'_> {
        CompletionRequest {
            model: "m".into(),
            prompt,
            max_tokens: 64,
            temperature: Some(0.0),
            top_p: None,
            seed: Some(7),
            stop: vec!["\n<obs".into()],
            stream: false,
            cache_prompt: true,
        }
    }

    /// A prompt with escapes and two-byte characters everywhere, frame boundaries included.
    fn long_prompt(bytes: usize) -> String {
        let mut prompt = String::new();
        while prompt.len() < bytes {
            prompt.push_str("é \"quoted\"\tline\\\n\u{1b}[0m");
        }
        prompt
    }

    #[test]
    fn a_streamed_body_is_the_json_body_in_frames_of_a_known_length() {
        for prompt in [
            String::new(),
            "a\"b".into(),
            long_prompt(3 * PROMPT_FRAME_BYTES + 5),
        ] {
            let request = completions_request(&prompt);
            let (head, tail) = request.json_around_prompt().unwrap();
            // The escaped length counted here, or given (by the render cache).
            let given =
                (prompt.len() % 2 == 1).then(|| crate::util::json_escaped_len(prompt.as_bytes()));
            let taken = super::super::TakenPrompt {
                text: Arc::new(prompt.clone()),
                json_len: given,
                escaped: None,
            };
            let mut body = PromptBody::new(head.clone(), taken, tail.clone());
            let total = body.remaining;
            let mut sent = Vec::new();
            let mut frames = 0;
            while let Some(frame) = body.next_frame() {
                sent.extend_from_slice(&frame);
                frames += 1;
            }
            assert_eq!(sent, request.to_json().unwrap());
            assert_eq!(total, sent.len() as u64);
            // Head, the prompt in frames of at most PROMPT_FRAME_BYTES, tail.
            assert_eq!(frames, 2 + prompt.len().div_ceil(PROMPT_FRAME_BYTES).max(1));

            // From kept frames (grown turn by turn, the cue their end): the same bytes.
            let cut = prompt.len() / 3;
            let end = prompt.len().saturating_sub(2);
            let kept = crate::util::JsonFrames::of(&prompt.as_bytes()[..cut], b"<cue>")
                .extended(&prompt.as_bytes()[cut..end], &prompt.as_bytes()[end..]);
            let taken = super::super::TakenPrompt {
                text: Arc::new(prompt.clone()),
                json_len: Some(kept.len()),
                escaped: Some(Arc::new(kept)),
            };
            let mut body = PromptBody::new(head, taken, tail);
            let total = body.remaining;
            let mut sent = Vec::new();
            while let Some(frame) = body.next_frame() {
                assert!(!frame.is_empty());
                sent.extend_from_slice(&frame);
            }
            assert_eq!(sent, request.to_json().unwrap());
            assert_eq!(total, sent.len() as u64);
        }
    }

    /// The prompt is given up when the last byte is handed to the connection, not when the
    /// connection drops the body (hyper may keep it until the response).
    #[tokio::test]
    async fn a_sent_body_gives_up_its_prompt() {
        use http_body_util::BodyExt;
        let prompt = Arc::new(long_prompt(2 * PROMPT_FRAME_BYTES + 3));
        let request = completions_request(&prompt);
        let (head, tail) = request.json_around_prompt().unwrap();
        let taken = super::super::TakenPrompt {
            text: prompt.clone(),
            json_len: None,
            escaped: None,
        };
        let mut body = PromptBody::new(head.clone(), taken, tail.clone());
        let sent = send_holding(&mut body, || Arc::strong_count(&prompt)).await;
        assert_eq!(sent, request.to_json().unwrap());
        assert_eq!(Arc::strong_count(&prompt), 1);
        assert!(body.frame().await.is_none());

        // Kept frames too, given to the call as the pipeline gives them: given up at the last
        // byte, by the body and by the call's prompt.
        let kept = Arc::new(crate::util::JsonFrames::of(prompt.as_bytes(), b""));
        let again = unreachable_again;
        let given = super::super::Prompt::new(prompt.clone(), &again)
            .with_json_len(Some(kept.len()))
            .with_escaped(Some(kept.clone()));
        let mut body = PromptBody::new(head, given.take_parts().unwrap(), tail);
        let sent = send_holding(&mut body, || Arc::strong_count(&kept)).await;
        assert_eq!(sent, request.to_json().unwrap());
        assert_eq!(Arc::strong_count(&kept), 1);
    }

    /// The bytes of `body`, frame by frame, checking that the body holds the prompt (a
    /// reference `count` counts, besides the test's own) until its last byte.
    async fn send_holding(body: &mut PromptBody, count: impl Fn() -> usize) -> Vec<u8> {
        use http_body_util::BodyExt;
        let mut sent = Vec::new();
        while !hyper::body::Body::is_end_stream(body) {
            assert_eq!(count(), 2);
            let frame = body.frame().await.unwrap().unwrap();
            sent.extend_from_slice(frame.data_ref().unwrap());
        }
        sent
    }

    /// A prompt that must not be made again (the call is not retried).
    fn unreachable_again() -> Result<Arc<String>, ProxyError> {
        Err(ProxyError::Internal("made again".into()))
    }

    /// Over real HTTP: the backend gets the body with its Content-Length (not chunked), and
    /// the body is the JSON of the request.
    #[tokio::test]
    async fn the_backend_gets_a_content_length_and_the_whole_body() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = vec![0u8; 64 * 1024];
            let (head, length) = loop {
                let n = socket.read(&mut buf).await.unwrap();
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request).to_string();
                if let Some(end) = text.find("\r\n\r\n") {
                    let head = text[..end].to_ascii_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .expect("a content-length header")
                        .parse()
                        .unwrap();
                    break (head, (end + 4, length));
                }
            };
            while request.len() < length.0 + length.1 {
                let n = socket.read(&mut buf).await.unwrap();
                request.extend_from_slice(&buf[..n]);
            }
            let reply = r#"{"choices":[{"text":"ok","finish_reason":"stop"}]}"#;
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{reply}",
                reply.len()
            );
            socket.write_all(response.as_bytes()).await.unwrap();
            (head, request[length.0..].to_vec())
        });
        let backend = OpenAiCompletions::new(base, Some("m".into()), None, 30, 0).unwrap();
        let prompt = Arc::new(long_prompt(200 * 1024));
        let params = GenerationParams {
            max_tokens: 64,
            temperature: Some(0.0),
            top_p: None,
            seed: Some(7),
        };
        let completion = backend
            .complete(
                crate::backend::Prompt::new(prompt.clone(), &|| unreachable_again()),
                &params,
                &["\n<obs"],
                None,
            )
            .await
            .unwrap();
        assert_eq!(completion.text, "ok");
        let (head, body) = server.await.unwrap();
        assert!(!head.contains("chunked"), "{head}");
        assert_eq!(body, completions_request(&prompt).to_json().unwrap());
    }

    #[test]
    fn cached_prompt_tokens_from_usage_or_llama_server_timings() {
        let cached = |body: &str| {
            decode(body, "m".into(), 1)
                .unwrap()
                .usage
                .unwrap()
                .cached_tokens()
        };
        let choice = r#""choices":[{"text":"x","finish_reason":"stop"}]"#;
        let usage = r#""usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11"#;
        assert_eq!(cached(&format!("{{{choice},{usage}}}}}")), None);
        assert_eq!(
            cached(&format!(
                "{{{choice},{usage},\"prompt_tokens_details\":{{\"cached_tokens\":7}}}}}}"
            )),
            Some(7)
        );
        // vLLM without prompt-token details enabled: `null`, not an error.
        assert_eq!(
            cached(&format!(
                "{{{choice},{usage},\"prompt_tokens_details\":{{\"cached_tokens\":null}}}}}}"
            )),
            None
        );
        assert_eq!(
            cached(&format!(
                "{{{choice},{usage}}},\"timings\":{{\"cache_n\":9,\"prompt_n\":1}}}}"
            )),
            Some(9)
        );
    }

    /// Each backend's overflow answer (status, body), and what the proxy reads from it:
    /// context length, prompt tokens, tokens requested in all.
    const OVERFLOWS: &[(u16, &str, Overflow)] = &[
        // llama-server, builds since 2025-09 (400, or 500 in some), with token counts.
        (
            400,
            r#"{"error":{"code":400,"message":"request (4390 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":4390,"n_ctx":4096}}"#,
            Overflow {
                context_length: Some(4096),
                prompt_tokens: Some(4390),
                requested: None,
            },
        ),
        (
            500,
            r#"{"error":{"code":500,"message":"the request exceeds the available context size. try increasing the context size or enable context shift","type":"exceed_context_size_error","n_prompt_tokens":1407,"n_ctx":256}}"#,
            Overflow {
                context_length: Some(256),
                prompt_tokens: Some(1407),
                requested: None,
            },
        ),
        // llama-server, older builds and some paths: no numbers.
        (
            500,
            r#"{"error":{"code":500,"message":"Context size has been exceeded.","type":"server_error"}}"#,
            Overflow {
                context_length: None,
                prompt_tokens: None,
                requested: None,
            },
        ),
        // vLLM, OpenAI's own wording.
        (
            400,
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
            Overflow {
                context_length: Some(4096),
                prompt_tokens: Some(4000),
                requested: Some(5000),
            },
        ),
        // vLLM, newer wording.
        (
            400,
            r#"{"error":{"message":"This model's maximum context length is 4096 tokens. However, you requested 1000 output tokens and your prompt contains at least 4000 input tokens, for a total of at least 5000 tokens. Please reduce the length of the input prompt or the number of requested output tokens.","type":"BadRequestError","param":"input_tokens","code":400}}"#,
            Overflow {
                context_length: Some(4096),
                prompt_tokens: Some(4000),
                requested: Some(5000),
            },
        ),
        // vLLM V1 engine's input check.
        (
            400,
            r#"{"object":"error","message":"The decoder prompt (length 5000) is longer than the maximum model length of 4096. Make sure that `max_model_len` is no smaller than the number of text tokens.","type":"BadRequestError","param":null,"code":400}"#,
            Overflow {
                context_length: Some(4096),
                prompt_tokens: Some(5000),
                requested: None,
            },
        ),
        // SGLang.
        (
            400,
            r#"{"object":"error","message":"The input (5000 tokens) is longer than the model's context length (4096 tokens).","type":"BadRequestError","param":null,"code":400}"#,
            Overflow {
                context_length: Some(4096),
                prompt_tokens: Some(5000),
                requested: None,
            },
        ),
        (
            400,
            r#"{"object":"error","message":"Requested token count exceeds the model's maximum context length of 4096 tokens. You requested a total of 5100 tokens: 5000 tokens from the input messages and 100 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.","type":"BadRequestError","param":null,"code":400}"#,
            Overflow {
                context_length: Some(4096),
                prompt_tokens: Some(5000),
                requested: Some(5100),
            },
        ),
        (
            400,
            r#"{"object":"error","message":"Input length (5000 tokens) exceeds the maximum allowed length (4096 tokens). Use a shorter input or enable --allow-auto-truncate.","type":"BadRequestError","param":null,"code":400}"#,
            Overflow {
                context_length: Some(4096),
                prompt_tokens: Some(5000),
                requested: None,
            },
        ),
        // TGI (422).
        (
            422,
            r#"{"error":"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 `inputs` tokens and 1000 `max_new_tokens`","error_type":"validation"}"#,
            Overflow {
                context_length: Some(4096),
                prompt_tokens: Some(4000),
                requested: None,
            },
        ),
        (
            422,
            r#"{"error":"Input validation error: `inputs` must have less than 4096 tokens. Given: 5000","error_type":"validation"}"#,
            Overflow {
                context_length: Some(4096),
                prompt_tokens: Some(5000),
                requested: None,
            },
        ),
    ];

    #[test]
    fn context_errors_of_each_backend() {
        for (status, body, expected) in OVERFLOWS {
            let message = backend_message(body);
            let overflow = Overflow::parse(body, &message).unwrap_or_else(|| panic!("{body}"));
            assert_eq!(&overflow, expected, "{status} {body}");
            // Every form becomes OpenAI's wording, which LiteLLM matches.
            let worded = overflow.message(Some(1000), None, &message);
            assert!(
                worded.starts_with("This model's maximum context length is "),
                "{worded}"
            );
            assert!(worded.ends_with(&format!("(completion backend: {message})")));
        }
        for other in [
            "model not found",
            "temperature must be <= 2",
            "max_tokens must be at least 1",
        ] {
            assert!(Overflow::parse("{}", other).is_none(), "{other}");
        }
    }

    #[test]
    fn overflow_messages_name_what_is_known() {
        let overflow = |c, p, r| Overflow {
            context_length: c,
            prompt_tokens: p,
            requested: r,
        };
        let head = |o: Overflow, max_tokens, known| {
            let m = o.message(max_tokens, known, "x");
            m.strip_suffix(" (completion backend: x)")
                .unwrap()
                .to_string()
        };
        // The proxy's own wording when context, prompt and max_tokens are known.
        assert_eq!(
            head(overflow(Some(4096), Some(4390), None), Some(256), None),
            crate::error::too_long_message(4096, 4390, 256)
        );
        // The context length the backend reported earlier fills in.
        assert_eq!(
            head(overflow(None, Some(4390), None), Some(256), Some(4096)),
            crate::error::too_long_message(4096, 4390, 256)
        );
        assert_eq!(
            head(overflow(Some(4096), None, Some(5000)), Some(1000), None),
            "This model's maximum context length is 4096 tokens. However, you requested 5000 \
             tokens. Please reduce the length of the messages or completion."
        );
        assert_eq!(
            head(overflow(Some(4096), Some(5000), None), None, None),
            "This model's maximum context length is 4096 tokens. However, your messages \
             resulted in 5000 tokens. Please reduce the length of the messages."
        );
        assert_eq!(
            head(overflow(None, None, None), Some(10), None),
            "This model's maximum context length is exceeded by this request. Please reduce \
             the length of the messages or completion."
        );
    }

    #[test]
    fn retry_after_forms() {
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", "1500".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        let mut h = reqwest::header::HeaderMap::new();
        h.insert(
            "retry-after",
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn secrets_are_scrubbed_from_messages() {
        let b = OpenAiCompletions::new(
            "http://user:pw-123@h:1/v1".into(),
            None,
            Some("sk-backend".into()),
            1,
            0,
        )
        .unwrap();
        assert_eq!(
            b.scrub("bad key sk-backend for http://user:pw-123@h"),
            "bad key *** for http://user:***@h"
        );
        assert_eq!(b.redacted_base(), "http://h:1/v1");
        assert!(!format!("{b:?}").contains("sk-backend"));
    }

    #[test]
    fn error_message_extraction() {
        assert_eq!(
            backend_message(r#"{"error":{"message":"boom","code":400}}"#),
            "boom"
        );
        assert_eq!(
            backend_message(r#"{"object":"error","message":"bad"}"#),
            "bad"
        );
        assert_eq!(backend_message("plain"), "plain");
    }
}
