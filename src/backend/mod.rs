//! Completion backends. One closed enum for the set: the OpenAI completions API that vLLM,
//! SGLang, llama-server, TGI and Ollama serve, and recorded completions ([`Recorded`],
//! implemented by the replay backend in `crate::replay`: offline, deterministic re-runs).

mod openai_completions;

pub use openai_completions::{CallBudget, OpenAiCompletions, MAX_HONOURED_RETRY_AFTER};

use crate::error::ProxyError;
use crate::openai::completions::Usage;
use crate::session::SessionId;

/// When a request started and how long it waited on the backend: the proxy's own time is
/// the difference (the `x-asap-overhead-ms` response header). Also carries the profile that
/// served the request, once the pipeline knows it, to label the request's metrics.
#[derive(Debug)]
pub struct RequestClock {
    started: std::time::Instant,
    backend_ns: std::sync::atomic::AtomicU64,
    profile: std::sync::OnceLock<String>,
}

impl RequestClock {
    /// A clock started now.
    pub fn start() -> Self {
        Self {
            started: std::time::Instant::now(),
            backend_ns: std::sync::atomic::AtomicU64::new(0),
            profile: std::sync::OnceLock::new(),
        }
    }

    /// Records the profile that serves the request (the first one set stays).
    pub fn set_profile(&self, profile: &str) {
        let _ = self.profile.set(profile.to_string());
    }

    /// The profile that served the request, if it got that far.
    pub fn profile(&self) -> Option<&str> {
        self.profile.get().map(String::as_str)
    }

    /// Adds time spent waiting on the backend.
    pub fn add_backend(&self, waited: std::time::Duration) {
        let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.backend_ns
            .fetch_add(ns, std::sync::atomic::Ordering::Relaxed);
    }

    /// Milliseconds since the start, less the backend's time.
    pub fn overhead_ms(&self) -> f64 {
        let backend = self.backend_ns.load(std::sync::atomic::Ordering::Relaxed);
        let total = self.started.elapsed().as_nanos() as f64;
        ((total - backend as f64) / 1e6).max(0.0)
    }
}

/// The prompt of a completion call: the text, given up to the first request that sends it,
/// and a way to make it again, exactly, for a retry (rendering is a pure function of the
/// conversation). A turn waiting on the backend thus holds no copy of its prompt once the
/// request is sent (BENCHMARKS.md, RSS with 256 in-flight requests).
pub struct Prompt<'a> {
    /// The given text, with what is known of its escaped form; taken whole by the first
    /// request, so that nothing of it outlives the send.
    given: std::sync::Mutex<Option<TakenPrompt>>,
    again: &'a (dyn Fn() -> Result<std::sync::Arc<String>, ProxyError> + Sync),
}

impl<'a> Prompt<'a> {
    /// `text`, made again by `again` when needed a second time.
    pub fn new(
        text: std::sync::Arc<String>,
        again: &'a (dyn Fn() -> Result<std::sync::Arc<String>, ProxyError> + Sync),
    ) -> Self {
        Self {
            given: std::sync::Mutex::new(Some(TakenPrompt {
                text,
                json_len: None,
                escaped: None,
            })),
            again,
        }
    }

    /// The given text's length escaped as a JSON string's content
    /// ([`crate::util::json_escaped_len`]), when the caller knows it
    /// ([`crate::render::HeldPrompt`], or the length of the frames it escaped); the backend
    /// body's Content-Length then needs no pass over the prompt.
    pub fn with_json_len(mut self, json_len: Option<usize>) -> Self {
        if let Ok(Some(given)) = self.given.get_mut() {
            given.json_len = json_len;
        }
        self
    }

    /// The given text JSON-escaped, when the caller has it ([`crate::render::HeldPrompt`]'s
    /// frames, or those the pipeline escaped once for the body and the trace record): the
    /// backend body sends these frames instead of escaping the text. They must be the
    /// text's escaped form (debug-asserted where sent).
    pub fn with_escaped(
        mut self,
        escaped: Option<std::sync::Arc<crate::util::JsonFrames>>,
    ) -> Self {
        if let Ok(Some(given)) = self.given.get_mut() {
            given.escaped = escaped;
        }
        self
    }

    /// The text: the one given, the first time; made again after.
    ///
    /// Errors: those of making it again (a template failure).
    pub fn take(&self) -> Result<std::sync::Arc<String>, ProxyError> {
        self.take_parts().map(|taken| taken.text)
    }

    /// As [`Prompt::take`], with what is known of the text's escaped form (the given text's,
    /// [`Prompt::with_json_len`], [`Prompt::with_escaped`]; never a text made again's).
    pub fn take_parts(&self) -> Result<TakenPrompt, ProxyError> {
        let given = self.given.lock().ok().and_then(|mut given| given.take());
        match given {
            Some(given) => Ok(given),
            None => (self.again)().map(|text| TakenPrompt {
                text,
                json_len: None,
                escaped: None,
            }),
        }
    }
}

/// A prompt taken for a backend body ([`Prompt::take_parts`]).
pub struct TakenPrompt {
    pub text: std::sync::Arc<String>,
    /// [`crate::util::json_escaped_len`] of `text`, when known.
    pub json_len: Option<usize>,
    /// `text` JSON-escaped, when kept.
    pub escaped: Option<std::sync::Arc<crate::util::JsonFrames>>,
}

/// Who a completion call is for. HTTP backends ignore it; the replay backend uses it to
/// continue a recorded session in step order when a prompt's hash matches nothing.
#[derive(Debug, Clone, Copy)]
pub struct CallContext<'a> {
    /// The live session (the proxy's id, not a recorded one).
    pub session: &'a SessionId,
    /// Step index of the call (actions in the history).
    pub step: usize,
    /// Completion call within the request: 0, then 1 and 2 after nudges.
    pub attempt: usize,
    /// The side call's kind (`terminus_summary`, ...); `None` for a trajectory step.
    pub side_call: Option<&'a str>,
}

/// Sampling parameters of a turn's completion calls, taken from the chat request.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationParams {
    /// Tokens to generate at most.
    pub max_tokens: u32,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub seed: Option<i64>,
}

/// What a backend generated for one prompt. Also the `completion` object of a trace step.
/// Read back from traces with defaults for what older ones lack.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BackendCompletion {
    /// Generated text, without the matched stop string (backends drop it).
    pub text: String,
    /// The backend's own `finish_reason` (`stop`, `length`, ...), for the trace only: the
    /// proxy decides the `finish_reason` it sends.
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// The stop string the backend reports as matched (vLLM `stop_reason`, SGLang
    /// `matched_stop`, llama-server `stopping_word`).
    #[serde(default)]
    pub matched_stop: Option<String>,
    /// The action's closing tag the proxy put back before parsing
    /// ([`crate::parse::with_closing_stop`]): the parser read `text` (less a cut-off stop
    /// fragment) + this. Kept apart from `matched_stop`, so `replay` recomputes it from the
    /// backend's own answer exactly as the live turn did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closer: Option<String>,
    /// Token counts the backend reported.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// Model name the backend was asked for.
    #[serde(default)]
    pub model: String,
    /// HTTP attempts made (1 + retries used).
    #[serde(default = "one")]
    pub attempts: u32,
}

fn one() -> u32 {
    1
}

impl BackendCompletion {
    /// A completion of `text` that ended on a stop sequence the backend did not report, in
    /// one HTTP try (what tests, benches and the fuzzer feed the parser and the policy).
    pub fn stopped(text: &str, model: &str) -> Self {
        Self {
            text: text.to_string(),
            finish_reason: Some("stop".into()),
            matched_stop: None,
            closer: None,
            usage: None,
            model: model.to_string(),
            attempts: 1,
        }
    }

    /// Whether generation was cut by the token limit.
    pub fn hit_length(&self) -> bool {
        self.finish_reason.as_deref() == Some("length")
    }
}

/// Completions answered from a record instead of a model (`--backend replay:DIR`, implemented
/// by `crate::replay::ReplayBackend`): declared here so that the backend does not depend on
/// the trace readers.
pub trait Recorded: std::fmt::Debug + Send + Sync {
    /// The recorded completion for `prompt`, called as `call` says.
    ///
    /// Errors: [`ProxyError::ReplayMiss`] when nothing recorded matches.
    fn complete(
        &self,
        prompt: &str,
        call: CallContext<'_>,
    ) -> Result<BackendCompletion, ProxyError>;

    /// The model the recorded calls were made with, if one was.
    fn model_name(&self) -> Option<String>;
}

/// The configured backend.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per server; boxing would only add a pointer hop
pub enum Backend {
    OpenAiCompletions(OpenAiCompletions),
    /// `--backend replay:DIR`: recorded completions.
    Replay(Box<dyn Recorded>),
}

impl Backend {
    /// One completion call (an attempt, or a side call): the continuation of `prompt`,
    /// stopping at `stop` (the format's stop sequences, which follow one complete action).
    /// `call` says which session, step and attempt the call belongs to.
    ///
    /// Errors: [`ProxyError::ContextLengthExceeded`] when the backend says the prompt does not
    /// fit, [`ProxyError::BackendUnavailable`] after the retries, [`ProxyError::BackendTimeout`],
    /// [`ProxyError::Backend`] for any other failure; [`ProxyError::RateLimited`] when the
    /// backend kept answering 429; [`ProxyError::RequestTimeout`] and
    /// [`ProxyError::ShuttingDown`] from the task's [`CallBudget`];
    /// [`ProxyError::ReplayMiss`] when the replay backend has nothing recorded for the prompt.
    pub async fn complete(
        &self,
        prompt: Prompt<'_>,
        params: &GenerationParams,
        stop: &[&str],
        request_model: Option<&str>,
        call: CallContext<'_>,
    ) -> Result<BackendCompletion, ProxyError> {
        match self {
            Self::OpenAiCompletions(b) => b.complete(prompt, params, stop, request_model).await,
            Self::Replay(b) => b.complete(&prompt.take()?, call),
        }
    }

    /// Forwards a chat completion request unchanged (passthrough mode).
    pub async fn chat(
        &self,
        body: &serde_json::Value,
    ) -> Result<(serde_json::Value, u32), ProxyError> {
        match self {
            Self::OpenAiCompletions(b) => b.chat(body).await,
            Self::Replay(_) => Err(ProxyError::Backend(
                "the replay backend serves recorded completion calls only; passthrough mode \
                 needs an instruction-tuned chat backend"
                    .into(),
            )),
        }
    }

    /// The backend's context length in tokens, when it reports one (see
    /// [`OpenAiCompletions::context_length`]); `None` for the replay backend.
    pub async fn context_length(&self) -> Option<u32> {
        match self {
            Self::OpenAiCompletions(b) => b.context_length().await,
            Self::Replay(_) => None,
        }
    }

    /// Tokens of `prompt` as the backend counts them, when it can.
    pub async fn tokenize(&self, prompt: &str, request_model: Option<&str>) -> Option<usize> {
        match self {
            Self::OpenAiCompletions(b) => b.tokenize(prompt, request_model).await,
            Self::Replay(_) => None,
        }
    }

    /// The model name served, for `GET /v1/models`.
    pub async fn model_name(&self) -> Option<String> {
        match self {
            Self::OpenAiCompletions(b) => b.resolved_model().await,
            Self::Replay(b) => b.model_name(),
        }
    }
}
