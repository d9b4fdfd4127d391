//! HTTP layer (axum): routes, shared state, limits, authentication, graceful shutdown. Knows
//! no templates: handlers decode, call [`crate::pipeline::run_turn`], and encode JSON or SSE.

pub mod conn;
mod handlers;
pub mod limits;
pub mod observe;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tower_http::trace::TraceLayer;

use crate::backend::{Backend, OpenAiCompletions, RequestClock};
use crate::config::{Config, ProfileChoice, PromptConfig, ServerLimits, REPLAY_BACKEND};
use crate::config::{Mode, OnTerminate};
use crate::context::{ContextSettings, LocalTokenizer};
use crate::error::ProxyError;
use crate::metrics::Metrics;
use crate::policy::Limits;
use crate::prefix::PrefixStore;
use crate::profile::Profiles;
use crate::render::Renderer;
use crate::replay::ReplayBackend;
use crate::session::{SessionIndex, DEFAULT_INDEX_CAPACITY};
use crate::trace::{TraceSettings, TraceWriter};

/// After the shutdown deadline: how long cut-off steps get to write their trace records, and
/// then connections to close, before the process exits anyway.
pub const CUT_OFF_GRACE: Duration = Duration::from_secs(2);

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
    /// Passthrough: the tool calls of a reply kept (`--tool-calls`).
    pub tool_calls: crate::config::ToolCalls,
    pub mode: Mode,
    pub context: ContextSettings,
    /// Body size, timeouts, concurrency and count limits (`--max-body-bytes`, ...).
    pub server: ServerLimits,
    /// `--api-key` (digests only; empty: no authentication).
    pub api_keys: limits::ApiKeys,
    /// Permits of `--max-concurrency`; `None`: no limit.
    pub concurrency: Option<Arc<Semaphore>>,
    /// Steps in flight, for graceful shutdown.
    pub in_flight: Arc<limits::InFlight>,
    /// Set to `true` at the shutdown deadline: backend calls in flight end with 503.
    pub abort: watch::Sender<bool>,
    /// This server's metrics (`GET /metrics`), shared with the backend client and the trace
    /// writer.
    pub metrics: Metrics,
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
        let metrics = Metrics::new();
        let renderer = Renderer::with_templates(config.templates.as_deref())
            .map_err(|e| ProxyError::invalid(e.to_string()))?
            .with_render_cache(
                config
                    .render_cache_mib
                    .unwrap_or(crate::render::RENDER_CACHE_MIB)
                    .saturating_mul(1 << 20),
            );
        let mut prefixes = PrefixStore::load(&config.prompt.prefixes, config.prompt.prefix_k)
            .map_err(|e| ProxyError::invalid(format!("loading prefixes: {e}")))?;
        for file in &config.prompt.tasks {
            let added = prefixes
                .add_tasks(file)
                .map_err(|e| ProxyError::invalid(format!("loading tasks: {e}")))?;
            tracing::info!(file = %file.display(), tasks = added.tasks, "tasks known by problem statement");
            if added.tasks == 0 {
                tracing::warn!(file = %file.display(), "the task file holds no task");
            }
            if !added.too_short.is_empty() {
                tracing::warn!(
                    file = %file.display(),
                    ids = ?added.too_short,
                    min_chars = crate::prefix::MIN_FINGERPRINT,
                    "problem statements too short to be recognised: send X-ASAP-Task for these tasks"
                );
            }
            if !added.duplicates.is_empty() {
                tracing::warn!(
                    file = %file.display(),
                    ids = ?added.duplicates,
                    "instance ids given more than once: only their first problem statement is used"
                );
            }
        }
        tracing::info!(
            log_dir = %config.log_dir.display(),
            compression = config.trace_compression.as_str(),
            "trace files"
        );
        tracing::info!(
            task_prefixes = prefixes.len(),
            k = config.prompt.prefix_k,
            prefix_set = %prefixes.id().sha256,
            "reference prefixes loaded (tasks without one get their profile's built-in demonstration)"
        );
        if config.mode == Mode::Proxy && config.prompt.prefix_k > 0 && prefixes.is_empty() {
            // The paper's prefix is a same-task reference trajectory; the demonstration is a
            // fallback on a made-up task, so a run like this is not the paper's setting.
            tracing::warn!(
                prefix_dirs = ?config.prompt.prefixes,
                k = config.prompt.prefix_k,
                "no same-task prefixes loaded (no --prefixes directory, or no task prefix files in it): \
                 every request will be rendered with its profile's built-in demonstration (or \
                 none, for a profile without one) instead of a prefix of its own task (session \
                 records say prefix_source \"demonstration\" or \"none\"); \
                 pass --prefixes DIR with reference prefixes for the paper's setting"
            );
        }
        if config.mode == Mode::Proxy {
            let rules = &config.limits;
            tracing::info!(
                nudges = rules.nudges,
                max_steps = rules.max_steps,
                loop_rule = rules.loop_rule.name(),
                loop_window = rules.loop_window,
                max_unparsable = rules.max_unparsable,
                "termination rules: the paper's nudges (--nudges), step cap (--max-steps) and \
                 degenerate loop (--loop-rule, --loop-window); ours: unparsable streak \
                 (--max-unparsable, 0 off)"
            );
        }
        let backend = match config.backend.strip_prefix(REPLAY_BACKEND) {
            Some(path) => {
                if config.mode == Mode::Passthrough {
                    return Err(ProxyError::invalid(
                        "--mode passthrough needs a chat backend, not replay:",
                    ));
                }
                Backend::Replay(Box::new(ReplayBackend::load(Path::new(path))?))
            }
            None => Backend::OpenAiCompletions(
                OpenAiCompletions::new(
                    config.backend.clone(),
                    config.backend_model.clone(),
                    config
                        .backend_api_key
                        .as_ref()
                        .map(|k| k.expose().to_string()),
                    config.backend_timeout_s,
                    config.backend_retries,
                )?
                .with_context_length(config.context_length)
                .with_metrics(metrics.clone()),
            ),
        };
        crate::openai::split::MessageCache::configure_global(
            config
                .message_cache_mib
                .unwrap_or(crate::openai::split::MESSAGE_CACHE_MIB)
                .saturating_mul(1 << 20),
        );
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
                tool_calls: (config.mode == Mode::Passthrough).then_some(match config.tool_calls {
                    crate::config::ToolCalls::First => "first",
                    crate::config::ToolCalls::All => "all",
                }),
                prefix_k: config.prompt.prefix_k,
                prefix_set: Some(prefixes.id()),
                limits: config.limits,
                config_sha256: config.digest(),
                compression: config.trace_compression,
            })
            .with_metrics(metrics.clone()),
            sessions: SessionIndex::new(DEFAULT_INDEX_CAPACITY),
            prefixes,
            max_tokens: config.max_tokens,
            limits: config.limits,
            on_terminate: config.on_terminate,
            tool_calls: config.tool_calls,
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
            server: config.server,
            api_keys: limits::ApiKeys::new(&config.api_keys),
            concurrency: config
                .server
                .max_concurrency
                .map(|n| Arc::new(Semaphore::new(n.min(Semaphore::MAX_PERMITS)))),
            in_flight: Arc::default(),
            abort: watch::channel(false).0,
            metrics,
        })
    }

    /// The deadline of a request that starts now (`--request-timeout`), with the timeout in
    /// seconds; `None` without a timeout.
    pub fn deadline_from_now(&self) -> Option<(tokio::time::Instant, u64)> {
        self.server
            .request_timeout_s
            .map(|s| (tokio::time::Instant::now() + Duration::from_secs(s), s))
    }
}

/// The request body, or the OpenAI-shaped error for one larger than `limit` bytes (413) or
/// unreadable (400).
pub(crate) fn read_body(
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
    limit: usize,
) -> Result<axum::body::Bytes, ProxyError> {
    body.map_err(|e| match e.status() {
        axum::http::StatusCode::PAYLOAD_TOO_LARGE => ProxyError::PayloadTooLarge(limit),
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
    // For the request metrics ([`observe::track`]), read when the body ends.
    response.extensions_mut().insert(clock);
    response
}

/// The router, for the server and for in-process tests. Every route but `/health` and
/// `/metrics` needs an API key when `--api-key` is set (the trajectory viewer under `/ui`
/// too: it shows prompts); the chat and responses routes are admitted under
/// `--max-concurrency` and get their `--request-timeout` deadline; bodies are capped at
/// `--max-body-bytes`; every request is counted and timed ([`observe`]). `/ui` is the
/// trajectory viewer ([`crate::view`]) over this proxy's `--log-dir`, outside the
/// concurrency limit.
pub fn app(state: Arc<AppState>) -> Router {
    let limited = Router::new()
        .route("/v1/chat/completions", post(handlers::chat_completions))
        .route("/chat/completions", post(handlers::chat_completions))
        .route("/v1/responses", post(handlers::responses))
        .route("/responses", post(handlers::responses))
        .route("/v1/messages", post(handlers::messages))
        .route("/v1/messages/count_tokens", post(handlers::count_tokens))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            limits::admit,
        ));
    let viewer = Arc::new(crate::view::Viewer::new(
        vec![state.trace.dir().to_path_buf()],
        None,
    ));
    Router::new()
        .merge(limited)
        .merge(crate::view::router(viewer))
        .route("/v1/models", get(handlers::models))
        .route("/health", get(handlers::health))
        .route("/metrics", get(observe::metrics))
        .fallback(handlers::no_route)
        .method_not_allowed_fallback(handlers::wrong_method)
        .layer(axum::middleware::from_fn(overhead_header))
        .layer(DefaultBodyLimit::max(state.server.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            limits::authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            observe::track,
        ))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Binds `addr`, logs the bound address (useful with port 0), and serves until SIGTERM or
/// SIGINT (Ctrl-C). Then, graceful shutdown: the listener closes at once (new connections are
/// refused), idle connections close, in-flight requests and their steps (also those whose
/// client left) get `--shutdown-timeout` to finish, so their answers are sent and their trace
/// records written. At the deadline, or at a second signal, the backend calls still in flight
/// are cut off: their steps fail with 503 `shutting_down` (an SSE stream ends with that error
/// event and `[DONE]`) and write their trace records; after at most 2 × [`CUT_OFF_GRACE`]
/// more this returns `Ok` (exit status 0) whatever is left.
///
/// Signal handlers are installed before the address is announced, so a supervisor that
/// signals right after start-up never kills us mid-way.
pub async fn serve(state: Arc<AppState>, addr: SocketAddr) -> std::io::Result<()> {
    let mut signals = Signals::install()?;
    let _upkeep = state.metrics.spawn_upkeep();
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tracing::info!(%local, "asap-proxy listening");
    // The line scripts wait for; with JSON logs the log line above says it (`fields.local`).
    if !crate::logging::is_json() {
        let _ = writeln!(
            std::io::stderr(),
            "asap-proxy listening on http://{local}/v1"
        );
    }
    let (stop, stopped) = watch::channel(false);
    let graceful = async move {
        let mut stopped = stopped;
        let _ = stopped.wait_for(|s| *s).await;
    };
    let server = conn::serve(listener, app(state.clone()), graceful);
    tokio::pin!(server);
    tokio::select! {
        () = &mut server => return Ok(()),
        () = signals.recv() => {}
    }
    let timeout_s = state.server.shutdown_timeout_s;
    tracing::info!(
        in_flight = state.in_flight.count(),
        timeout_s,
        "shutting down: no new connections, waiting for in-flight requests"
    );
    let _ = stop.send(true);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout_s);
    let drained = tokio::select! {
        () = async {
            (&mut server).await;
            state.in_flight.wait_idle().await;
        } => Some(()),
        () = tokio::time::sleep_until(deadline) => None,
        () = signals.recv() => None,
    };
    if drained.is_some() {
        tracing::info!("shutdown complete");
        return Ok(());
    }
    tracing::warn!(
        in_flight = state.in_flight.count(),
        "shutdown deadline passed: cutting off the requests still in flight"
    );
    let _ = state.abort.send(true);
    if tokio::time::timeout(CUT_OFF_GRACE, state.in_flight.wait_idle())
        .await
        .is_err()
    {
        tracing::warn!(
            in_flight = state.in_flight.count(),
            "steps still running after the cut-off; exiting without them"
        );
    }
    let _ = tokio::time::timeout(CUT_OFF_GRACE, &mut server).await;
    tracing::info!("shutdown complete");
    Ok(())
}

/// SIGTERM and SIGINT (Ctrl-C elsewhere), registered at once and received any number of
/// times.
struct Signals {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Self {
                terminate: signal(SignalKind::terminate())?,
                interrupt: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// The next signal.
    async fn recv(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.terminate.recv() => {},
            _ = self.interrupt.recv() => {},
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("signal received");
    }
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
