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

    /// HTTP status for this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidRequest { .. } | Self::ContextLengthExceeded(_) | Self::Terminated(_) => {
                StatusCode::BAD_REQUEST
            }
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BackendUnavailable(_) | Self::Backend(_) | Self::ReplayMiss(_) => {
                StatusCode::BAD_GATEWAY
            }
            Self::BackendTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
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
        (status, Json(self.body())).into_response()
    }
}
