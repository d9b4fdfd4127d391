//! Settings of `serve` and `render`, each declared once, and the validated [`Config`].
//!
//! Each settings group ([`ServeArgs`], [`PromptArgs`]) is one struct that is both the clap
//! arguments (flags and their `ASAP_*` environment variables) and the TOML file's shape: every
//! field is an `Option` (or a list, empty when unset), so "not given" is visible. The layers
//! merge once, generically ([`Layer::over`]: flag/env over file), and [`Config::resolve`]
//! fills what is still unset from the defaults table below and validates.
//!
//! Precedence: flags > environment (`ASAP_*`, via clap) > TOML file > defaults.
//!
//! The TOML file uses the long flag names with `_` (`log_dir = "logs"`); unknown keys are an
//! error that names the key, so a typo never silently falls back to a default.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use clap::Args;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::logging::LogFormat;
use crate::policy::{Limits, LoopRule};
use crate::render::Format;

// The defaults table: what a setting takes when neither a flag, its `ASAP_*` variable nor the
// file sets it (README.md and docs/*.md quote these; the `[default: …]` of each flag's help
// says the same). Enum settings default to their `#[default]` variant: `format` to
// [`Format::default`] (markdown-xml), `mode` to [`Mode::Proxy`], `on_terminate` to
// [`OnTerminate::Submit`], `log_format` to text; the termination rules (`max_steps` 100,
// `max_unparsable` 5, `loop_rule` degenerate, `loop_window` 10, `nudges` on) to
// [`Limits::default`], which owns them.

/// Default listen address: loopback only (docs/deploy.md).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8100";
/// Default backend: llama-server on its default port.
pub const DEFAULT_BACKEND: &str = "http://127.0.0.1:8080/v1";
/// Default cap on generated tokens per step.
pub const DEFAULT_MAX_TOKENS: u32 = 1024;
/// Default backend timeout, seconds.
pub const DEFAULT_BACKEND_TIMEOUT_S: u64 = 300;
/// Default number of retries after connect errors, 5xx and 429.
pub const DEFAULT_BACKEND_RETRIES: u32 = 3;
/// Default largest request body, bytes (32 MiB): long trajectories with big observations
/// reach several MB; far beyond that is a client bug or abuse.
pub const DEFAULT_MAX_BODY_BYTES: usize = 32 * 1024 * 1024;
/// Default budget for a whole request, seconds: two full backend timeouts, and the `openai`
/// SDK's own default client timeout.
pub const DEFAULT_REQUEST_TIMEOUT_S: u64 = 600;
/// Default number of chat/responses requests served at once (hundreds of concurrent
/// sessions per node, docs/deploy.md).
pub const DEFAULT_MAX_CONCURRENCY: usize = 512;
/// Default cap on messages per request (a 100-step trajectory has a few hundred).
pub const DEFAULT_MAX_MESSAGES: usize = 10_000;
/// Default cap on tools per request (OpenAI itself accepts 128).
pub const DEFAULT_MAX_TOOLS: usize = 256;
/// Default time given to in-flight requests after SIGTERM/SIGINT, seconds.
pub const DEFAULT_SHUTDOWN_TIMEOUT_S: u64 = 30;
/// Default directory of the JSONL trace logs.
pub const DEFAULT_LOG_DIR: &str = "asap-logs";
/// Default prefix directory, used when it exists and no `prefixes` are given.
pub const DEFAULT_PREFIXES_DIR: &str = "prefixes";
/// Default K: the paper's choice (K=3; longer prefixes began to leak gold patches).
pub const DEFAULT_PREFIX_K: usize = 3;

/// A settings group laid over a lower-precedence one (flags/env over the file): a value set
/// in `self` wins; an unset one (`None`, an empty list) takes `lower`'s.
pub trait Layer {
    /// `self` where set, else `lower`.
    fn over(self, lower: Self) -> Self;
}

impl<T> Layer for Option<T> {
    fn over(self, lower: Self) -> Self {
        self.or(lower)
    }
}

impl<T> Layer for Vec<T> {
    fn over(self, lower: Self) -> Self {
        if self.is_empty() {
            lower
        } else {
            self
        }
    }
}

/// Declares a settings group: the struct as written (its clap and serde attributes pass
/// through) and its [`Layer`] impl, field by field, so a field is named in one place only.
macro_rules! settings {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$field_meta:meta])* pub $field:ident: $ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $( $(#[$field_meta])* pub $field: $ty, )*
        }

        impl Layer for $name {
            fn over(self, lower: Self) -> Self {
                Self { $( $field: Layer::over(self.$field, lower.$field), )* }
            }
        }
    };
}

settings! {
    /// Settings shared by `serve` and `render`: how a request is turned into a prompt. Both the
    /// flags (with their `ASAP_*` variables) and the file's keys of the group.
    #[derive(Debug, Clone, Default, Args, Deserialize)]
    #[serde(default)]
    pub struct PromptArgs {
        /// Scaffold profile: `auto` (detect from tool names and the prompt) or a profile name:
        /// swe-agent, openhands-sdk, openhands-sdk-text, openhands-codeact,
        /// openhands-codeact-text, mini-swe-agent, mini-swe-agent-text, terminus-2,
        /// terminus-2-xml, browsecomp-plus, generic.
        #[arg(long, env = "ASAP_PROFILE")]
        pub profile: Option<String>,
        /// Interaction format of the continuation document.
        #[arg(long, env = "ASAP_FORMAT", value_enum)]
        pub format: Option<Format>,
        /// TOML configuration file (keys as the long flags, with `_` for `-`).
        #[arg(long, env = "ASAP_CONFIG")]
        #[serde(skip)]
        pub config: Option<PathBuf>,
        /// Directory of reference prefixes (`*.json`, `*.jsonl`), or one prefix file (a set written by `prefix build`); repeatable
        /// [default: ./prefixes when it exists].
        #[arg(long = "prefixes", env = "ASAP_PREFIXES", value_delimiter = ',')]
        pub prefixes: Vec<PathBuf>,
        /// Task files (SWE-bench JSON/JSONL with `instance_id` and `problem_statement`, e.g. the
        /// dataset a batch runs): a request that names no task is that task when its first
        /// user message holds the problem statement, so its trace has the `instance_id` even
        /// without a prefix of the task; repeatable.
        #[arg(long = "tasks", env = "ASAP_TASKS", value_delimiter = ',')]
        pub tasks: Vec<PathBuf>,
        /// Reference steps rendered before the live ones; 0 disables prefixes [default: 3].
        #[arg(long, env = "ASAP_PREFIX_K")]
        pub prefix_k: Option<usize>,
        /// Directory of template overrides: `<format>.jinja` files (`markdown_xml.jinja`,
        /// `xml.jinja`, `markdown.jinja`, `json.jinja`) used in place of the embedded ones
        /// [default: the embedded templates].
        #[arg(long, env = "ASAP_TEMPLATES")]
        pub templates: Option<PathBuf>,
    }
}

settings! {
    /// `asap-proxy serve`: its flags (with their `ASAP_*` variables), and the TOML file's keys
    /// (those of [`PromptArgs`] too; `config` is a flag only).
    #[derive(Debug, Clone, Default, Args, Deserialize)]
    #[serde(default)]
    pub struct ServeArgs {
        /// Address to listen on [default: 127.0.0.1:8100].
        #[arg(long, env = "ASAP_LISTEN")]
        pub listen: Option<SocketAddr>,
        /// Base URL of the completion backend, including `/v1`
        /// [default: http://127.0.0.1:8080/v1, llama-server's default port]; or `replay:DIR`
        /// (or `replay:FILE`): answer from the completions recorded in those trace logs, matched
        /// by prompt SHA-256, else by session and step order; no model server needed.
        #[arg(long, env = "ASAP_BACKEND")]
        pub backend: Option<String>,
        /// Model name sent to the backend [default: the first model of `GET {backend}/models`,
        /// else the request's `model`].
        #[arg(long, env = "ASAP_BACKEND_MODEL")]
        pub backend_model: Option<String>,
        /// Bearer token for the backend, if it needs one (never logged).
        #[arg(long, env = "ASAP_BACKEND_API_KEY", hide_env_values = true)]
        pub backend_api_key: Option<String>,
        /// API keys clients must send as `Authorization: Bearer <key>` on every endpoint except
        /// `/health` and `/metrics` (401 otherwise); repeatable or comma-separated. Never logged
        /// [default: none, no authentication].
        #[arg(
            long = "api-key",
            env = "ASAP_API_KEY",
            value_delimiter = ',',
            hide_env_values = true
        )]
        #[serde(deserialize_with = "one_or_many")]
        pub api_key: Vec<String>,
        /// Largest accepted request body in bytes; larger ones get 413 [default: 33554432,
        /// 32 MiB].
        #[arg(long, env = "ASAP_MAX_BODY_BYTES")]
        pub max_body_bytes: Option<usize>,
        /// Seconds one chat/responses request may take in all (every backend call, retry and
        /// nudge included); past it the request gets 504 `request_timeout` and the trace records
        /// the step; 0: no limit [default: 600].
        #[arg(long, env = "ASAP_REQUEST_TIMEOUT")]
        pub request_timeout: Option<u64>,
        /// Chat/responses requests served at once; one more gets 429 with `Retry-After: 1`
        /// (health and models are not counted); 0: no limit [default: 512].
        #[arg(long, env = "ASAP_MAX_CONCURRENCY")]
        pub max_concurrency: Option<usize>,
        /// Messages one request may carry; more get 400 [default: 10000].
        #[arg(long, env = "ASAP_MAX_MESSAGES")]
        pub max_messages: Option<usize>,
        /// Tools one request may offer; more get 400 [default: 256].
        #[arg(long, env = "ASAP_MAX_TOOLS")]
        pub max_tools: Option<usize>,
        /// Seconds to let in-flight requests finish after SIGTERM/SIGINT before cutting them off
        /// (their backend calls fail with 503 `shutting_down` and are traced); the process then
        /// exits 0 [default: 30].
        #[arg(long, env = "ASAP_SHUTDOWN_TIMEOUT")]
        pub shutdown_timeout: Option<u64>,
        /// Directory for the JSONL trace logs, one file per session [default: asap-logs].
        #[arg(long, env = "ASAP_LOG_DIR")]
        pub log_dir: Option<PathBuf>,
        /// Upper bound on generated tokens per step; a smaller request `max_tokens` wins
        /// [default: 1024].
        #[arg(long, env = "ASAP_MAX_TOKENS")]
        pub max_tokens: Option<u32>,
        /// Seconds to wait for one backend call [default: 300].
        #[arg(long, env = "ASAP_BACKEND_TIMEOUT")]
        pub backend_timeout: Option<u64>,
        /// Retries after a connect error or a 5xx from the backend, with exponential backoff
        /// from 250 ms [default: 3].
        #[arg(long, env = "ASAP_BACKEND_RETRIES")]
        pub backend_retries: Option<u32>,
        /// The backend's context length in tokens; prompts that would not fit with `max_tokens`
        /// get their oldest long observations elided [default: what the backend reports in
        /// `/v1/models`, `/props` or `/info`; none: no check].
        #[arg(long, env = "ASAP_CONTEXT_LENGTH")]
        pub context_length: Option<u32>,
        /// Hugging Face `tokenizer.json` of the served model, to count prompt tokens locally
        /// [default: the backend's `/tokenize`, else an estimate of 1 token per 2 bytes].
        #[arg(long, env = "ASAP_TOKENIZER")]
        pub tokenizer: Option<PathBuf>,
        /// `proxy`: adapt chat requests to the base model behind `--backend` (a completions API).
        /// `passthrough`: forward them to an instruction-tuned model's chat API at `--backend` and
        /// record the same trace (reference trajectories for prefixes) [default: proxy].
        #[arg(long, env = "ASAP_MODE", value_enum)]
        pub mode: Option<Mode>,
        /// Passthrough only: the tool calls of a reply the scaffold gets and the trace keeps.
        /// `first`: one action a step, as prefixes need (reference runs); `all`: every call, as
        /// the model made them (recording a post-trained model on its own scaffold)
        /// [default: first].
        #[arg(long, env = "ASAP_TOOL_CALLS", value_enum)]
        pub tool_calls: Option<ToolCalls>,
        /// Actions per trajectory before the proxy ends it [default: 100].
        #[arg(long, env = "ASAP_MAX_STEPS")]
        pub max_steps: Option<usize>,
        /// Consecutive unparsable outputs that end a trajectory; 0: never. Our rule, not the
        /// paper's: a model that never writes the format does not run to the step cap at full
        /// cost [default: 5].
        #[arg(long, env = "ASAP_MAX_UNPARSABLE")]
        pub max_unparsable: Option<usize>,
        /// The paper's degenerate-loop termination: `degenerate` ends a trajectory when an action
        /// comes a third time within `--loop-window` actions with the same result as before and
        /// no successful edit since; `off` never [default: degenerate].
        #[arg(long, env = "ASAP_LOOP_RULE", value_enum)]
        pub loop_rule: Option<LoopRule>,
        /// Recent actions, the current one included, in which the loop rule looks for repeats
        /// (at least 3) [default: 10].
        #[arg(long, env = "ASAP_LOOP_WINDOW")]
        pub loop_window: Option<usize>,
        /// The paper's failure recovery: `on` rejects a submit before any edit and an identical
        /// repeated action once each with a hint; `off` accepts them (the ablation without
        /// nudges; the loop rule and the other limits still end a trajectory) [default: on].
        #[arg(long, env = "ASAP_NUDGES", value_name = "on|off", hide_possible_values = true,
              value_parser = clap::builder::BoolishValueParser::new())]
        pub nudges: Option<bool>,
        /// When a rule ends a trajectory: answer with the profile's finish action (`submit`) or
        /// with an error (`error`) [default: submit].
        #[arg(long, env = "ASAP_ON_TERMINATE", value_enum)]
        pub on_terminate: Option<OnTerminate>,
        /// Model or checkpoint label recorded in every session of the trace (what `report`
        /// groups by) [default: each request's `model`].
        #[arg(long, env = "ASAP_LABEL")]
        pub label: Option<String>,
        /// Log lines on standard error: `text`, or `json` (one object per line, with `level` and
        /// `fields`, for log collectors) [default: text].
        #[arg(long, env = "ASAP_LOG_FORMAT", value_enum)]
        pub log_format: Option<LogFormat>,
        /// MiB of request-message JSON text whose decoded messages are kept for the next
        /// requests, found by the digest of that text (a history's earlier messages are decoded
        /// once, not on every turn); 0: none [default: 56].
        #[arg(long, env = "ASAP_MESSAGE_CACHE_MIB")]
        pub message_cache_mib: Option<usize>,
        /// MiB of rendered prompts kept for the next requests, so that a turn renders only its
        /// new steps (a session's next turn, a retry); 0: every prompt rendered whole
        /// [default: 64].
        #[arg(long, env = "ASAP_RENDER_CACHE_MIB")]
        pub render_cache_mib: Option<usize>,
        /// Trace files: `none` (`{session}.jsonl`) or `zstd` (`{session}.jsonl.zst`, one zstd
        /// frame per record; `report`, `replay`, `view` and the replay backend read both). A
        /// file keeps the form it was begun in [default: none].
        #[arg(long, env = "ASAP_TRACE_COMPRESSION", value_enum)]
        pub trace_compression: Option<TraceCompression>,
        #[command(flatten)]
        #[serde(skip)]
        pub prompt: PromptArgs,
    }
}

/// A secret (an API key): its `Debug` never shows the value, so it cannot reach logs through
/// a `{:?}` of the config or the state.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for the one place that must send or compare it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// API keys in the TOML file: one string or a list.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum FileKeys {
    /// `api_key = "k"`.
    One(String),
    /// `api_key = ["k1", "k2"]`.
    Many(Vec<String>),
}

/// `api_key` in the file, one string or a list, as the list the flag gives.
fn one_or_many<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    Ok(match FileKeys::deserialize(deserializer)? {
        FileKeys::One(key) => vec![key],
        FileKeys::Many(keys) => keys,
    })
}

/// Limits of the HTTP layer (docs/deploy.md, docs/reliability.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Largest accepted request body, bytes (`--max-body-bytes`; 413 beyond).
    pub max_body_bytes: usize,
    /// Budget for one chat/responses request, seconds (`--request-timeout`); `None`: none.
    pub request_timeout_s: Option<u64>,
    /// Chat/responses requests served at once (`--max-concurrency`); `None`: no limit.
    pub max_concurrency: Option<usize>,
    /// Messages per request (`--max-messages`; 400 beyond).
    pub max_messages: usize,
    /// Tools per request (`--max-tools`; 400 beyond).
    pub max_tools: usize,
    /// Seconds in-flight requests get after SIGTERM/SIGINT (`--shutdown-timeout`).
    pub shutdown_timeout_s: u64,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            request_timeout_s: Some(DEFAULT_REQUEST_TIMEOUT_S),
            max_concurrency: Some(DEFAULT_MAX_CONCURRENCY),
            max_messages: DEFAULT_MAX_MESSAGES,
            max_tools: DEFAULT_MAX_TOOLS,
            shutdown_timeout_s: DEFAULT_SHUTDOWN_TIMEOUT_S,
        }
    }
}

/// How trace files are written (`--trace-compression`; docs/trace-format.md "Compressed
/// files").
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum TraceCompression {
    /// `{session}.jsonl`: one JSON record per line.
    #[default]
    None,
    /// `{session}.jsonl.zst`: the same lines, each record one zstd frame (RFC 8878), so a
    /// file cut short by a crash loses at most its last record.
    Zstd,
}

impl TraceCompression {
    /// The flag's name (`none`, `zstd`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Zstd => "zstd",
        }
    }
}

/// What the proxy does when a rule ends a trajectory (`--on-terminate`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum OnTerminate {
    /// Answer with the profile's finish action (SWE-agent `submit`, OpenHands `finish`,
    /// mini-swe-agent's completion command, plain content for `generic`).
    #[default]
    Submit,
    /// Answer with an error (HTTP 400, code `trajectory_terminated`).
    Error,
}

impl OnTerminate {
    /// The flag's and the trace's name (`submit`, `error`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Submit => "submit",
            Self::Error => "error",
        }
    }
}

/// What `serve` does with a chat request (`--mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Adapt it to a base model behind a completions backend (the ASAP method).
    #[default]
    Proxy,
    /// Forward it to an instruction-tuned chat backend and record the trace (reference
    /// trajectories for prefixes).
    Passthrough,
}

/// Passthrough: which tool calls of the instruct model's reply go to the scaffold and into
/// the trace (`--tool-calls`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum ToolCalls {
    /// The first; the trace's step notes how many were dropped.
    #[default]
    First,
    /// Every one, in order (each a step of the trajectory, as the scaffold runs them).
    All,
}

/// Which profile serves requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileChoice {
    /// Detect from each request's tool names.
    Auto,
    /// Always this profile.
    Named(String),
}

/// How requests become prompts (shared by `serve` and `render`).
#[derive(Debug, Clone)]
pub struct PromptConfig {
    pub profile: ProfileChoice,
    pub format: Format,
    /// Directories (or files) of reference prefixes.
    pub prefixes: Vec<PathBuf>,
    /// Task files that identify tasks by problem statement (`--tasks`).
    pub tasks: Vec<PathBuf>,
    /// Steps of a prefix to render; 0 disables prefixes.
    pub prefix_k: usize,
}

/// Everything `serve` needs, validated.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// Backend base URL without a trailing slash, e.g. `http://127.0.0.1:8080/v1`.
    pub backend: String,
    pub backend_model: Option<String>,
    /// `--backend-api-key`: sent to the backend as a Bearer token.
    pub backend_api_key: Option<Secret>,
    /// `--api-key`: keys clients must present (empty: no authentication).
    pub api_keys: Vec<Secret>,
    /// Body size, time, concurrency and count limits of the HTTP layer.
    pub server: ServerLimits,
    pub log_dir: PathBuf,
    pub max_tokens: u32,
    pub backend_timeout_s: u64,
    pub backend_retries: u32,
    /// `--context-length`: overrides what the backend reports.
    pub context_length: Option<u32>,
    /// `--tokenizer`: a `tokenizer.json` to count prompt tokens with.
    pub tokenizer: Option<PathBuf>,
    pub prompt: PromptConfig,
    /// Termination thresholds (ASAP failure recovery).
    pub limits: Limits,
    pub on_terminate: OnTerminate,
    pub mode: Mode,
    /// Passthrough: the tool calls of a reply kept (`--tool-calls`).
    pub tool_calls: ToolCalls,
    /// Model or checkpoint label written into every session record (`--label`); `None`:
    /// each session's request `model`.
    pub label: Option<String>,
    /// Template override directory (`--templates`); `None`: the embedded templates.
    pub templates: Option<PathBuf>,
    /// Log lines as text or JSON (`--log-format`).
    pub log_format: LogFormat,
    /// Trace files plain or zstd-compressed (`--trace-compression`).
    pub trace_compression: TraceCompression,
    /// MiB of decoded messages the message cache holds (`--message-cache-mib`; `None`: the
    /// cache's default).
    pub message_cache_mib: Option<usize>,
    /// MiB of rendered prompts the render cache holds (`--render-cache-mib`; `None`: the
    /// cache's default, [`crate::render::RENDER_CACHE_MIB`]).
    pub render_cache_mib: Option<usize>,
}

/// Prefix of `--backend` that selects the replay backend: `replay:DIR` or `replay:FILE`.
pub const REPLAY_BACKEND: &str = "replay:";

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    #[error("invalid {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

/// Reads the TOML file, if one is given: its settings of both groups (unset where the file
/// has no key). Unknown keys fail as with `#[serde(deny_unknown_fields)]`, naming the key.
pub fn read_file(path: Option<&Path>) -> Result<ServeArgs, ConfigError> {
    let Some(path) = path else {
        return Ok(ServeArgs::default());
    };
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    // One table, read once per group (each keeps toml's line and column in its errors).
    let parse = |source| ConfigError::Parse {
        path: path.to_path_buf(),
        source: Box::new(source),
    };
    toml::from_str::<KnownKeys>(&text).map_err(parse)?;
    let mut file: ServeArgs = toml::from_str(&text).map_err(parse)?;
    file.prompt = toml::from_str(&text).map_err(parse)?;
    Ok(file)
}

/// The file's keys: those of [`ServeArgs`], then those of [`PromptArgs`].
fn file_keys() -> &'static [&'static str] {
    static KEYS: OnceLock<Vec<&'static str>> = OnceLock::new();
    KEYS.get_or_init(|| [keys_of::<ServeArgs>(), keys_of::<PromptArgs>()].concat())
}

/// The keys a derived `Deserialize` struct reads (renames and `#[serde(skip)]` applied): the
/// field list it hands to `deserialize_struct`, caught by a deserializer that reads nothing.
fn keys_of<T: DeserializeOwned>() -> &'static [&'static str] {
    struct Probe<'a>(&'a mut &'static [&'static str]);
    impl<'de> Deserializer<'de> for Probe<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("fields read"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Probe(&mut fields));
    fields
}

/// A TOML table of settings keys only: deserializing it fails at the first other key, with
/// the error a struct with `#[serde(deny_unknown_fields)]` gives (the key, where it is, and
/// the keys expected).
struct KnownKeys;

impl<'de> Deserialize<'de> for KnownKeys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_struct("ServeArgs", file_keys(), KnownKeys)
    }
}

impl<'de> Visitor<'de> for KnownKeys {
    type Value = KnownKeys;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a table of settings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
        while map.next_key_seed(KnownKey)?.is_some() {
            map.next_value::<IgnoredAny>()?;
        }
        Ok(KnownKeys)
    }
}

/// One key of [`KnownKeys`].
struct KnownKey;

impl<'de> DeserializeSeed<'de> for KnownKey {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_identifier(self)
    }
}

impl<'de> Visitor<'de> for KnownKey {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a setting name")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<(), E> {
        if file_keys().contains(&key) {
            Ok(())
        } else {
            Err(E::unknown_field(key, file_keys()))
        }
    }
}

impl PromptConfig {
    /// The prompt settings, flags/env already laid over the file ([`Layer::over`]), with the
    /// defaults filled in.
    pub fn resolve(settings: &PromptArgs) -> Self {
        let profile = settings
            .profile
            .clone()
            .filter(|p| p != "auto")
            .map_or(ProfileChoice::Auto, ProfileChoice::Named);
        let mut prefixes = settings.prefixes.clone();
        if prefixes.is_empty() && Path::new(DEFAULT_PREFIXES_DIR).is_dir() {
            prefixes.push(PathBuf::from(DEFAULT_PREFIXES_DIR));
        }
        Self {
            profile,
            format: settings.format.unwrap_or_default(),
            prefixes,
            tasks: settings.tasks.clone(),
            prefix_k: settings.prefix_k.unwrap_or(DEFAULT_PREFIX_K),
        }
    }
}

impl Config {
    /// Merges flags/env over the file over defaults, and validates.
    pub fn resolve(args: &ServeArgs) -> Result<Self, ConfigError> {
        let file = read_file(args.prompt.config.as_deref())?;
        let s = args.clone().over(file);
        let listen = match s.listen {
            Some(a) => a,
            None => DEFAULT_LISTEN.parse().map_err(|e| ConfigError::Invalid {
                field: "listen",
                reason: format!("{e}"),
            })?,
        };
        let backend = s
            .backend
            .clone()
            .unwrap_or_else(|| DEFAULT_BACKEND.to_string());
        let backend = if backend.starts_with(REPLAY_BACKEND) {
            backend
        } else {
            backend.trim_end_matches('/').to_string()
        };
        if backend == REPLAY_BACKEND {
            return Err(ConfigError::Invalid {
                field: "backend",
                reason: "replay: needs a trace directory or file (replay:DIR)".into(),
            });
        }
        if !(backend.starts_with("http://")
            || backend.starts_with("https://")
            || backend.starts_with(REPLAY_BACKEND))
        {
            return Err(ConfigError::Invalid {
                field: "backend",
                reason: format!(
                    "{backend:?} is not an http(s) URL (e.g. http://127.0.0.1:8000/v1) or replay:DIR"
                ),
            });
        }
        let max_tokens = s.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
        if max_tokens == 0 {
            return Err(ConfigError::Invalid {
                field: "max_tokens",
                reason: "must be at least 1".into(),
            });
        }
        let defaults = Limits::default();
        let limits = Limits {
            max_steps: s.max_steps.unwrap_or(defaults.max_steps),
            max_unparsable: s.max_unparsable.unwrap_or(defaults.max_unparsable),
            loop_rule: s.loop_rule.unwrap_or(defaults.loop_rule),
            loop_window: s.loop_window.unwrap_or(defaults.loop_window),
            nudges: s.nudges.unwrap_or(defaults.nudges),
        };
        // `max_unparsable` 0 turns that rule off; a loop window under 3 could never hold
        // three occurrences.
        for (field, value, min) in [
            ("max_steps", limits.max_steps, 1),
            ("loop_window", limits.loop_window, 3),
        ] {
            if value < min {
                return Err(ConfigError::Invalid {
                    field,
                    reason: format!("must be at least {min}"),
                });
            }
        }
        let api_keys = api_keys(&s.api_key)?;
        let server = server_limits(&s)?;
        Ok(Self {
            limits,
            on_terminate: s.on_terminate.unwrap_or_default(),
            mode: s.mode.unwrap_or_default(),
            tool_calls: s.tool_calls.unwrap_or_default(),
            label: s.label.filter(|l| !l.trim().is_empty()),
            listen,
            backend,
            backend_model: s.backend_model,
            backend_api_key: s.backend_api_key.filter(|k| !k.is_empty()).map(Secret::new),
            api_keys,
            server,
            log_dir: s.log_dir.unwrap_or_else(|| PathBuf::from(DEFAULT_LOG_DIR)),
            max_tokens,
            backend_timeout_s: s.backend_timeout.unwrap_or(DEFAULT_BACKEND_TIMEOUT_S),
            context_length: s.context_length.filter(|n| *n > 0),
            tokenizer: s.tokenizer,
            backend_retries: s.backend_retries.unwrap_or(DEFAULT_BACKEND_RETRIES),
            templates: s.prompt.templates.clone(),
            log_format: s.log_format.unwrap_or_default(),
            trace_compression: s.trace_compression.unwrap_or_default(),
            message_cache_mib: s.message_cache_mib,
            render_cache_mib: s.render_cache_mib,
            prompt: PromptConfig::resolve(&s.prompt),
        })
    }
}

/// `--api-key` values (flag/env, else the file), blanks dropped; a key with whitespace or a
/// control character could never be sent in a header, so it is refused here.
fn api_keys(keys: &[String]) -> Result<Vec<Secret>, ConfigError> {
    keys.iter()
        .filter(|k| !k.trim().is_empty())
        .map(|k| {
            if k.chars().any(|c| c.is_whitespace() || c.is_control()) {
                // The message must not contain the key.
                Err(ConfigError::Invalid {
                    field: "api_key",
                    reason: "a key contains whitespace or a control character".into(),
                })
            } else {
                Ok(Secret::new(k.as_str()))
            }
        })
        .collect()
}

/// The HTTP layer's limits (flag/env, else the file, already merged in `s`), else the
/// defaults; 0 turns the request timeout and the concurrency limit off.
fn server_limits(s: &ServeArgs) -> Result<ServerLimits, ConfigError> {
    let defaults = ServerLimits::default();
    let limits = ServerLimits {
        max_body_bytes: s.max_body_bytes.unwrap_or(defaults.max_body_bytes),
        request_timeout_s: match s.request_timeout {
            Some(0) => None,
            Some(secs) => Some(secs),
            None => defaults.request_timeout_s,
        },
        max_concurrency: match s.max_concurrency {
            Some(0) => None,
            Some(n) => Some(n),
            None => defaults.max_concurrency,
        },
        max_messages: s.max_messages.unwrap_or(defaults.max_messages),
        max_tools: s.max_tools.unwrap_or(defaults.max_tools),
        shutdown_timeout_s: s.shutdown_timeout.unwrap_or(defaults.shutdown_timeout_s),
    };
    for (field, value) in [
        ("max_body_bytes", limits.max_body_bytes),
        ("max_messages", limits.max_messages),
        ("max_tools", limits.max_tools),
    ] {
        if value < 1 {
            return Err(ConfigError::Invalid {
                field,
                reason: "must be at least 1".into(),
            });
        }
    }
    Ok(limits)
}

impl Config {
    /// Hex SHA-256 of the settings that shape prompts and decisions (profile, format, prefix
    /// directories and K, max_tokens, the termination rules and their switches (all of
    /// [`Limits`]: nudges, step cap, loop rule and window, unparsable streak), on_terminate,
    /// mode, the template override directory when one is set, and `--tool-calls all` in
    /// passthrough mode), so sessions run under
    /// different settings can be told apart in traces.
    pub fn digest(&self) -> String {
        let mut canonical = format!(
            "profile={:?}\nformat={}\nprefixes={:?}\nprefix_k={}\nmax_tokens={}\nlimits={:?}\non_terminate={:?}\nmode={:?}\n",
            self.prompt.profile,
            self.prompt.format.name(),
            self.prompt.prefixes,
            self.prompt.prefix_k,
            self.max_tokens,
            self.limits,
            self.on_terminate,
            self.mode,
        );
        if let Some(dir) = &self.templates {
            canonical.push_str(&format!("templates={dir:?}\n"));
        }
        // Only where it changes anything, so proxy-mode digests stay as they were.
        if self.mode == Mode::Passthrough && self.tool_calls == ToolCalls::All {
            canonical.push_str("tool_calls=all\n");
        }
        crate::util::sha256_hex(canonical.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_file_override_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "backend = \"http://h:1/v1/\"\nmax_tokens = 7\nlog_dir = \"L\"\nprofile = \"swe-agent\"\n").unwrap();
        let mut args = ServeArgs::default();
        args.prompt.config = Some(path.clone());
        args.max_tokens = Some(9);
        let c = Config::resolve(&args).unwrap();
        assert_eq!(c.backend, "http://h:1/v1");
        assert_eq!(c.max_tokens, 9);
        assert_eq!(c.log_dir, PathBuf::from("L"));
        assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(c.prompt.profile, ProfileChoice::Named("swe-agent".into()));
        assert_eq!(c.log_format, LogFormat::Text);
        assert_eq!(c.trace_compression, TraceCompression::None);
        std::fs::write(&path, "trace_compression = \"zstd\"\n").unwrap();
        let c = Config::resolve(&args).unwrap();
        assert_eq!(c.trace_compression, TraceCompression::Zstd);
        assert_eq!(c.trace_compression.as_str(), "zstd");
    }

    #[test]
    fn log_format_from_file_unless_flagged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "log_format = \"json\"\n").unwrap();
        let mut args = ServeArgs::default();
        args.prompt.config = Some(path.clone());
        assert_eq!(Config::resolve(&args).unwrap().log_format, LogFormat::Json);
        args.log_format = Some(LogFormat::Text);
        assert_eq!(Config::resolve(&args).unwrap().log_format, LogFormat::Text);
        std::fs::write(&path, "log_format = \"yaml\"\n").unwrap();
        args.log_format = None;
        assert!(Config::resolve(&args).is_err());
    }

    #[test]
    fn file_keys_are_both_groups_without_the_flag_only_ones() {
        let keys = file_keys();
        assert_eq!(keys.len(), 36);
        for key in [
            "listen",
            "api_key",
            "log_format",
            "trace_compression",
            "render_cache_mib",
            "tool_calls",
            "profile",
            "prefixes",
            "templates",
        ] {
            assert!(keys.contains(&key), "{key}");
        }
        assert!(!keys.contains(&"config") && !keys.contains(&"prompt"));
    }

    #[test]
    fn unknown_file_key_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "max_tokenz = 7\n").unwrap();
        let err = read_file(Some(&path)).unwrap_err().to_string();
        assert!(err.contains("max_tokenz"), "{err}");
    }

    #[test]
    fn server_limits_and_keys_merge_and_zero_disables() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "api_key = [\"a\", \"b\"]\nmax_tools = 3\nrequest_timeout = 0\nmax_concurrency = 4\n",
        )
        .unwrap();
        let mut args = ServeArgs::default();
        args.prompt.config = Some(path.clone());
        args.max_concurrency = Some(0);
        let c = Config::resolve(&args).unwrap();
        assert_eq!(c.api_keys, [Secret::new("a"), Secret::new("b")]);
        assert_eq!(c.server.max_tools, 3);
        assert_eq!(c.server.request_timeout_s, None);
        assert_eq!(c.server.max_concurrency, None);
        assert_eq!(c.server.max_body_bytes, DEFAULT_MAX_BODY_BYTES);
        assert!(!format!("{c:?}").contains("\"a\""));
        std::fs::write(&path, "api_key = \"single\"\n").unwrap();
        let c = Config::resolve(&args).unwrap();
        assert_eq!(c.api_keys, [Secret::new("single")]);
        args.api_key = vec!["bad key".into()];
        let err = Config::resolve(&args).unwrap_err().to_string();
        assert!(!err.contains("bad key"), "{err}");
    }

    #[test]
    fn termination_rules_merge_zero_turns_the_unparsable_rule_off_and_all_enter_the_digest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "loop_rule = \"off\"\nmax_unparsable = 0\nloop_window = 4\n",
        )
        .unwrap();
        let mut args = ServeArgs::default();
        let defaults = Config::resolve(&args).unwrap();
        assert_eq!(defaults.limits, Limits::default());
        assert_eq!(defaults.limits.loop_rule, LoopRule::Degenerate);
        args.prompt.config = Some(path.clone());
        let c = Config::resolve(&args).unwrap();
        assert_eq!(c.limits.loop_rule, LoopRule::Off);
        assert_eq!(c.limits.max_unparsable, 0, "0 is accepted: the rule is off");
        assert_eq!(c.limits.loop_window, 4);
        assert_ne!(c.digest(), defaults.digest());
        args.loop_rule = Some(LoopRule::Degenerate);
        let flagged = Config::resolve(&args).unwrap();
        assert_eq!(
            flagged.limits.loop_rule,
            LoopRule::Degenerate,
            "the flag wins"
        );
        assert_ne!(
            flagged.digest(),
            c.digest(),
            "the loop rule is in the digest"
        );
        std::fs::write(&path, "loop_window = 2\n").unwrap();
        assert!(
            Config::resolve(&args).is_err(),
            "a window under 3 never loops"
        );
        std::fs::write(&path, "loop_rule = \"alternation\"\n").unwrap();
        assert!(Config::resolve(&args).is_err());
    }

    #[test]
    fn backend_must_be_http() {
        let args = ServeArgs {
            backend: Some("127.0.0.1:8000".into()),
            ..ServeArgs::default()
        };
        assert!(Config::resolve(&args).is_err());
    }
}
