//! Errors that reach clients: one enum for the HTTP boundary, mapped to an OpenAI error body.
//!
//! The body follows the OpenAI API error object (`{"error": {"message", "type", "param",
//! "code"}}`) so that the `openai` SDK and LiteLLM raise their usual exception classes
//! (`BadRequestError`, `ContextWindowExceededError`, `APIError`). Each error is logged once, in
//! [`IntoResponse`], with a level chosen by its status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

/// Everything a request can fail with, as seen by the client.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The request body is not a chat completion request we can serve (HTTP 400).
    /// `param` is the JSON path of the offending field when known, e.g. `messages[2].role`.
    #[error("{message}")]
    InvalidRequest {
        message: String,
        param: Option<String>,
    },
    /// The request body is larger than the limit in bytes (HTTP 413).
    #[error("request body larger than {0} bytes")]
    PayloadTooLarge(usize),
    /// The prompt plus `max_tokens` does not fit the backend's context window (HTTP 400,
    /// code `context_length_exceeded`, the code the OpenAI API uses for this case).
    #[error("{0}")]
    ContextLengthExceeded(String),
    /// The completion backend could not be reached or kept failing after the bounded retries
    /// (HTTP 502).
    #[error("completion backend unavailable: {0}")]
    BackendUnavailable(String),
    /// The completion backend answered with an error we cannot recover from (HTTP 502), or
    /// with a body that is not an OpenAI completions response.
    #[error("completion backend error: {0}")]
    Backend(String),
    /// The replay backend (`--backend replay:DIR`) has no recorded completion for a prompt:
    /// its SHA-256 matches no recorded call, and no earlier call of the session matched a
    /// recorded session to continue in step order (HTTP 502, code `replay_miss`). The message
    /// names the prompt's SHA-256 and how many prompts were loaded.
    #[error("replay backend has no recorded completion: {0}")]
    ReplayMiss(String),
    /// The completion backend did not answer within the configured timeout (HTTP 504).
    #[error("completion backend timed out after {0} s")]
    BackendTimeout(u64),
    /// The whole request (every backend call of the step, nudge retries and backoff included)
    /// did not finish within `--request-timeout`, in seconds (HTTP 504, code
    /// `request_timeout`).
    #[error("request did not finish within the request timeout of {0} s (--request-timeout)")]
    RequestTimeout(u64),
    /// Too many requests: the proxy's `--max-concurrency` is reached, or the backend answered
    /// 429 and kept doing so through the bounded retries (HTTP 429, type `rate_limit_error`,
    /// code `rate_limit_exceeded`). The response carries `Retry-After: retry_after_s`, which
    /// the `openai` SDK and LiteLLM honour before retrying.
    #[error("{message}")]
    RateLimited { message: String, retry_after_s: u64 },
    /// `--api-key` is set and the request has no `Authorization: Bearer` header with one of
    /// the keys (HTTP 401, code `invalid_api_key`). The message never echoes what was sent.
    #[error("missing or invalid API key: send `Authorization: Bearer <key>` with a key this proxy was started with (--api-key)")]
    Unauthorized,
    /// The proxy is shutting down and its `--shutdown-timeout` passed before this request's
    /// backend call finished (HTTP 503, code `shutting_down`; clients retry on another
    /// replica or after the restart).
    #[error("the proxy is shutting down; the request was cut off at the shutdown deadline")]
    ShuttingDown,
    /// The client closed the connection before the answer was ready: the backend call was
    /// cancelled (status 499, the nginx convention; no client is left to read it).
    #[error("client disconnected; the backend call was cancelled")]
    ClientDisconnected,
    /// A termination rule ended the trajectory and `--on-terminate error` is set (HTTP 400,
    /// code `trajectory_terminated`).
    #[error("trajectory terminated: {0}")]
    Terminated(String),
    /// A bug or an environment fault inside the proxy (HTTP 500), e.g. a template error.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ProxyError {
    /// Shorthand for a 400 with no parameter path.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidRequest {
            message: message.into(),
            param: None,
        }
    }

    /// Seconds a client should wait before retrying (the `Retry-After` header), for the
    /// errors that have one.
    pub fn retry_after_s(&self) -> Option<u64> {
        match self {
            Self::RateLimited { retry_after_s, .. } => Some(*retry_after_s),
            _ => None,
        }
    }

    /// HTTP status for this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidRequest { .. } | Self::ContextLengthExceeded(_) | Self::Terminated(_) => {
                StatusCode::BAD_REQUEST
            }
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            Self::ClientDisconnected => {
                StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST)
            }
            Self::BackendUnavailable(_) | Self::Backend(_) | Self::ReplayMiss(_) => {
                StatusCode::BAD_GATEWAY
            }
            Self::BackendTimeout(_) | Self::RequestTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The OpenAI error object for this error (also used as an SSE error event).
    pub fn body(&self) -> ErrorBody {
        let (kind, code, param) = match self {
            Self::InvalidRequest { param, .. } => {
                ("invalid_request_error", "invalid_request", param.clone())
            }
            Self::PayloadTooLarge(_) => ("invalid_request_error", "payload_too_large", None),
            Self::Terminated(_) => ("invalid_request_error", "trajectory_terminated", None),
            Self::ContextLengthExceeded(_) => {
                ("invalid_request_error", "context_length_exceeded", None)
            }
            Self::BackendUnavailable(_) => ("server_error", "backend_unavailable", None),
            Self::Backend(_) => ("server_error", "backend_error", None),
            Self::ReplayMiss(_) => ("server_error", "replay_miss", None),
            Self::BackendTimeout(_) => ("server_error", "backend_timeout", None),
            Self::RequestTimeout(_) => ("server_error", "request_timeout", None),
            Self::RateLimited { .. } => ("rate_limit_error", "rate_limit_exceeded", None),
            Self::Unauthorized => ("invalid_request_error", "invalid_api_key", None),
            Self::ShuttingDown => ("server_error", "shutting_down", None),
            Self::ClientDisconnected => ("invalid_request_error", "client_disconnected", None),
            Self::Internal(_) => ("server_error", "internal_error", None),
        };
        ErrorBody {
            error: ErrorObject {
                message: self.to_string(),
                r#type: kind,
                param,
                code,
            },
        }
    }
}

/// `{"error": {...}}`, the OpenAI API error envelope.
#[derive(Debug, Serialize)]
pub struct ErrorBody {
    pub error: ErrorObject,
}

/// The OpenAI API error object.
#[derive(Debug, Serialize)]
pub struct ErrorObject {
    pub message: String,
    pub r#type: &'static str,
    pub param: Option<String>,
    pub code: &'static str,
}

impl IntoResponse for ProxyError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(status = status.as_u16(), error = %self, "request failed");
        } else {
            tracing::info!(status = status.as_u16(), error = %self, "request rejected");
        }
        let mut response = (status, Json(self.body())).into_response();
        if let Some(seconds) = self.retry_after_s() {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(seconds),
            );
        }
        if matches!(self, Self::Unauthorized) {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

/// OpenAI's message for a prompt of `prompt_tokens` that leaves no room for `max_tokens` in
/// `context_length` ("This model's maximum context length is N tokens. However, you requested
/// M tokens …"): the wording LiteLLM maps to `ContextWindowExceededError`. Used for the proxy's own
/// check (`crate::context`) and for a backend's overflow answer (`crate::backend`).
pub fn too_long_message(context_length: u32, prompt_tokens: usize, max_tokens: u32) -> String {
    format!(
        "This model's maximum context length is {context_length} tokens. However, you \
         requested {} tokens ({prompt_tokens} in the messages, {max_tokens} in the \
         completion). Please reduce the length of the messages or completion.",
        prompt_tokens + max_tokens as usize
    )
}

/// The boxed source of a [`CliError`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a subcommand failed: `main` prints it with its source chain ([`CliError::report`]) and
/// exits with [`CliError::exit_code`].
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad arguments or configuration, unreadable input, labels compared under different
    /// protocols (exit 2).
    #[error("{0}")]
    Usage(String),
    /// Bad arguments, configuration or input, as another error reports it, kept whole
    /// (exit 2).
    #[error(transparent)]
    Input(BoxError),
    /// Input that cannot be read: printed as `{context}: {source}` (exit 2).
    #[error("{context}")]
    Unreadable {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// A run that failed (exit 1), e.g. `replay --check` that found differences.
    #[error("{0}")]
    Failed(String),
    /// A failure as another error reports it, kept whole (exit 1).
    #[error(transparent)]
    Internal(BoxError),
    /// Writing output or serving failed: printed as `{context}: {source}` (exit 1).
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl CliError {
    /// The process exit code: 2 for usage, configuration and input errors, 1 for failures.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) | Self::Input(_) | Self::Unreadable { .. } => 2,
            Self::Failed(_) | Self::Internal(_) | Self::Io { .. } => 1,
        }
    }

    /// Bad input, as `error` reports it (exit 2).
    pub fn input(error: impl Into<BoxError>) -> Self {
        Self::Input(error.into())
    }

    /// A failure, as `error` reports it (exit 1).
    pub fn internal(error: impl Into<BoxError>) -> Self {
        Self::Internal(error.into())
    }

    /// Input that cannot be read while `context` (for `map_err`; exit 2).
    pub fn unreadable(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        move |source| Self::Unreadable {
            context: context.into(),
            source,
        }
    }

    /// An I/O failure while `context` (for `map_err`; exit 1).
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        move |source| Self::Io {
            context: context.into(),
            source,
        }
    }

    /// The message and its chain of sources, joined by `: `; a source whose text the message
    /// already ends with (errors that print their source themselves) is not repeated.
    pub fn report(&self) -> String {
        let mut message = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(error) = source {
            let text = error.to_string();
            if !message.ends_with(&text) {
                message = format!("{message}: {text}");
            }
            source = error.source();
        }
        message
    }
}
