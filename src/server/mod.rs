//! HTTP layer (axum): routes, shared state, graceful shutdown. Knows no templates: handlers
//! decode, call [`crate::pipeline::run_step`], and encode JSON or SSE.

mod handlers;
mod responses;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;
use tower_http::trace::TraceLayer;

use crate::backend::{Backend, OpenAiCompletions, ReplayBackend, RequestClock};
use crate::config::{Config, ProfileChoice, PromptConfig, REPLAY_BACKEND};
use crate::context::{ContextSettings, LocalTokenizer};
use crate::error::ProxyError;
use crate::pipeline::{Mode, OnTerminate};
use crate::policy::Limits;
use crate::prefix::PrefixStore;
use crate::profile::Profiles;
use crate::render::Renderer;
use crate::session::{SessionIndex, DEFAULT_INDEX_CAPACITY};
use crate::trace::{TraceSettings, TraceWriter};

/// Largest accepted request body: long trajectories with big observations reach several MB.
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// Everything handlers share.
#[derive(Debug)]
pub struct AppState {
    pub profiles: Profiles,
    pub renderer: Renderer,
    pub prompt_config: PromptConfig,
    pub backend: Backend,
    pub trace: TraceWriter,
    pub sessions: SessionIndex,
    pub prefixes: PrefixStore,
    pub max_tokens: u32,
    pub limits: Limits,
    pub on_terminate: OnTerminate,
    pub mode: Mode,
    pub context: ContextSettings,
}

impl AppState {
    /// Builds the state from a validated config: loads profiles and templates, checks the
    /// configured profile exists.
    pub fn from_config(config: &Config) -> Result<Self, ProxyError> {
        let profiles = Profiles::builtin().map_err(|e| ProxyError::Internal(e.to_string()))?;
        if let ProfileChoice::Named(name) = &config.prompt.profile {
            profiles
                .get(name)
                .map_err(|e| ProxyError::invalid(e.to_string()))?;
        }
        let renderer = Renderer::with_templates(config.templates.as_deref())
            .map_err(|e| ProxyError::invalid(e.to_string()))?;
        let prefixes = PrefixStore::load(&config.prompt.prefixes, config.prompt.prefix_k)
            .map_err(|e| ProxyError::invalid(format!("loading prefixes: {e}")))?;
        tracing::info!(
            prefixes = prefixes.len(),
            k = config.prompt.prefix_k,
            "prefixes loaded"
        );
        let backend = match config.backend.strip_prefix(REPLAY_BACKEND) {
            Some(path) => {
                if config.mode == Mode::Passthrough {
                    return Err(ProxyError::invalid(
                        "--mode passthrough needs a chat backend, not replay:",
                    ));
                }
                Backend::Replay(ReplayBackend::load(Path::new(path))?)
            }
            None => Backend::OpenAiCompletions(OpenAiCompletions::new(
                config.backend.clone(),
                config.backend_model.clone(),
                config.backend_api_key.clone(),
                config.backend_timeout_s,
                config.backend_retries,
            )?),
        };
        Ok(Self {
            profiles,
            renderer,
            prompt_config: config.prompt.clone(),
            backend,
            trace: TraceWriter::new(TraceSettings {
                dir: config.log_dir.clone(),
                format: config.prompt.format.name().to_string(),
                backend: redact_url(&config.backend),
                label: config.label.clone(),
                mode: match config.mode {
                    Mode::Proxy => "proxy",
                    Mode::Passthrough => "passthrough",
                },
                prefix_k: config.prompt.prefix_k,
                config_sha256: config.digest(),
            }),
            sessions: SessionIndex::new(DEFAULT_INDEX_CAPACITY),
            prefixes,
            max_tokens: config.max_tokens,
            limits: config.limits,
            on_terminate: config.on_terminate,
            mode: config.mode,
            context: ContextSettings {
                length: config.context_length,
                tokenizer: config
                    .tokenizer
                    .as_deref()
                    .map(LocalTokenizer::load)
                    .transpose()
                    .map_err(ProxyError::invalid)?,
            },
        })
    }
}

/// The request body, or the OpenAI-shaped error for one too large (413) or unreadable (400).
pub(crate) fn read_body(
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<axum::body::Bytes, ProxyError> {
    body.map_err(|e| match e.status() {
        axum::http::StatusCode::PAYLOAD_TOO_LARGE => ProxyError::PayloadTooLarge(MAX_BODY_BYTES),
        _ => ProxyError::invalid(format!("reading request body: {e}")),
    })
}

/// The URL without user name or password, for logs (`replay:` paths as given).
fn redact_url(url: &str) -> String {
    if url.starts_with(REPLAY_BACKEND) {
        return url.to_string();
    }
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string().trim_end_matches('/').to_string()
        }
        Err(_) => "<unparsable url>".to_string(),
    }
}

/// Name of the response header with the proxy's own time for the request.
pub const OVERHEAD_HEADER: &str = "x-asap-overhead-ms";

/// Starts the request's [`RequestClock`] (handlers pass it on to the pipeline, which adds
/// the backend's time) and sets `x-asap-overhead-ms` on the response: milliseconds spent in
/// the proxy, backend waits excluded, three decimals. For SSE the header covers the time to
/// the first byte; the whole request's figure comes as a final `: x-asap-overhead-ms …`
/// comment line before `[DONE]`.
async fn overhead_header(
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let clock = Arc::new(RequestClock::start());
    request.extensions_mut().insert(clock.clone());
    let mut response = next.run(request).await;
    if let Ok(value) = axum::http::HeaderValue::from_str(&format!("{:.3}", clock.overhead_ms())) {
        response.headers_mut().insert(OVERHEAD_HEADER, value);
    }
    response
}

/// The router, for the server and for in-process tests.
pub fn app(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(handlers::chat_completions))
        .route("/chat/completions", post(handlers::chat_completions))
        .route("/v1/responses", post(responses::create))
        .route("/responses", post(responses::create))
        .route("/v1/models", get(handlers::models))
        .route("/health", get(handlers::health))
        .layer(axum::middleware::from_fn(overhead_header))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Binds `addr`, logs the bound address (useful with port 0), and serves until Ctrl-C or
/// SIGTERM; in-flight requests finish first. Signal handlers are installed before the address
/// is announced, so a supervisor that signals right after start-up never kills us mid-way.
pub async fn serve(state: Arc<AppState>, addr: SocketAddr) -> std::io::Result<()> {
    let shutdown = shutdown_signal()?;
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tracing::info!(%local, "asap-proxy listening");
    eprintln!("asap-proxy listening on http://{local}/v1");
    axum::serve(listener, app(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Registers Ctrl-C and SIGTERM now; the returned future resolves on the first of them.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    #[cfg(unix)]
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    Ok(async move {
        #[cfg(unix)]
        tokio::select! {
            _ = terminate.recv() => {},
            _ = interrupt.recv() => {},
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down");
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn credentials_never_reach_the_trace() {
        assert_eq!(
            super::redact_url("http://user:secret@host:8000/v1"),
            "http://host:8000/v1"
        );
    }
}
