//! Validated configuration: flags > environment (`ASAP_*`, via clap) > TOML file > defaults.
//!
//! The TOML file uses the long flag names with `_` (`log_dir = "logs"`); unknown keys are an
//! error that names the key, so a typo never silently falls back to a default.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::cli::{PromptArgs, ServeArgs};
use crate::logging::LogFormat;
use crate::policy::{Limits, LoopRule};
use crate::render::Format;

/// Default listen address: loopback only (DESIGN.md "Commands").
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
/// sessions per node, DESIGN.md "Scale").
pub const DEFAULT_MAX_CONCURRENCY: usize = 512;
/// Default cap on messages per request (a 100-step trajectory has a few hundred).
pub const DEFAULT_MAX_MESSAGES: usize = 10_000;
/// Default cap on tools per request (OpenAI itself accepts 128).
pub const DEFAULT_MAX_TOOLS: usize = 256;
/// Default time given to in-flight requests after SIGTERM/SIGINT, seconds.
pub const DEFAULT_SHUTDOWN_TIMEOUT_S: u64 = 30;

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

/// Limits of the HTTP layer (DESIGN.md "Scale"; docs/reliability.md).
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

/// The TOML file's shape.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<SocketAddr>,
    pub backend: Option<String>,
    pub backend_model: Option<String>,
    pub backend_api_key: Option<String>,
    pub api_key: Option<FileKeys>,
    pub max_body_bytes: Option<usize>,
    pub request_timeout: Option<u64>,
    pub max_concurrency: Option<usize>,
    pub max_messages: Option<usize>,
    pub max_tools: Option<usize>,
    pub shutdown_timeout: Option<u64>,
    pub log_dir: Option<PathBuf>,
    pub max_tokens: Option<u32>,
    pub backend_timeout: Option<u64>,
    pub backend_retries: Option<u32>,
    pub context_length: Option<u32>,
    pub tokenizer: Option<PathBuf>,
    pub profile: Option<String>,
    pub format: Option<Format>,
    pub mode: Option<Mode>,
    pub prefixes: Option<Vec<PathBuf>>,
    pub prefix_k: Option<usize>,
    pub max_steps: Option<usize>,
    pub max_unparsable: Option<usize>,
    pub loop_rule: Option<LoopRule>,
    pub loop_window: Option<usize>,
    pub nudges: Option<bool>,
    pub on_terminate: Option<OnTerminate>,
    pub label: Option<String>,
    pub templates: Option<PathBuf>,
    pub log_format: Option<LogFormat>,
}

/// What the proxy does when a rule ends a trajectory (`--on-terminate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum OnTerminate {
    /// Answer with the profile's finish action (SWE-agent `submit`, OpenHands `finish`,
    /// mini-swe-agent's completion command, plain content for `generic`).
    #[default]
    Submit,
    /// Answer with an error (HTTP 400, code `trajectory_terminated`).
    Error,
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

/// Which profile serves requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileChoice {
    /// Detect from each request's tool names.
    Auto,
    /// Always this profile.
    Named(String),
}

/// Default K: the paper's choice (K=3; longer prefixes began to leak gold patches).
pub const DEFAULT_PREFIX_K: usize = 3;

/// How requests become prompts (shared by `serve` and `render`).
#[derive(Debug, Clone)]
pub struct PromptConfig {
    pub profile: ProfileChoice,
    pub format: Format,
    /// Directories of reference prefixes.
    pub prefixes: Vec<PathBuf>,
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
    /// Model or checkpoint label written into every session record (`--label`); `None`:
    /// each session's request `model`.
    pub label: Option<String>,
    /// Template override directory (`--templates`); `None`: the embedded templates.
    pub templates: Option<PathBuf>,
    /// Log lines as text or JSON (`--log-format`).
    pub log_format: LogFormat,
}

/// Prefix of `--backend` that selects the replay backend: `replay:DIR` or `replay:FILE`.
pub const REPLAY_BACKEND: &str = "replay:";

/// The template override directory: flag/env, else the file's `templates`.
pub fn templates_dir(args: &PromptArgs, file: &FileConfig) -> Option<PathBuf> {
    args.templates.clone().or_else(|| file.templates.clone())
}

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

/// Reads the TOML file, if one is given.
pub fn read_file(path: Option<&Path>) -> Result<FileConfig, ConfigError> {
    let Some(path) = path else {
        return Ok(FileConfig::default());
    };
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|source| ConfigError::Parse {
        path: path.to_path_buf(),
        source: Box::new(source),
    })
}

impl PromptConfig {
    /// Merges prompt flags over the file.
    pub fn resolve(args: &PromptArgs, file: &FileConfig) -> Self {
        let profile = args
            .profile
            .clone()
            .or_else(|| file.profile.clone())
            .filter(|p| p != "auto")
            .map_or(ProfileChoice::Auto, ProfileChoice::Named);
        let mut prefixes = if args.prefixes.is_empty() {
            file.prefixes.clone().unwrap_or_default()
        } else {
            args.prefixes.clone()
        };
        if prefixes.is_empty() && Path::new("prefixes").is_dir() {
            prefixes.push(PathBuf::from("prefixes"));
        }
        Self {
            profile,
            format: args.format.or(file.format).unwrap_or_default(),
            prefixes,
            prefix_k: args.prefix_k.or(file.prefix_k).unwrap_or(DEFAULT_PREFIX_K),
        }
    }
}

impl Config {
    /// Merges flags/env over the file over defaults, and validates.
    pub fn resolve(args: &ServeArgs) -> Result<Self, ConfigError> {
        let file = read_file(args.prompt.config.as_deref())?;
        let listen = match args.listen.or(file.listen) {
            Some(a) => a,
            None => DEFAULT_LISTEN.parse().map_err(|e| ConfigError::Invalid {
                field: "listen",
                reason: format!("{e}"),
            })?,
        };
        let backend = args
            .backend
            .clone()
            .or_else(|| file.backend.clone())
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
        let max_tokens = args
            .max_tokens
            .or(file.max_tokens)
            .unwrap_or(DEFAULT_MAX_TOKENS);
        if max_tokens == 0 {
            return Err(ConfigError::Invalid {
                field: "max_tokens",
                reason: "must be at least 1".into(),
            });
        }
        let defaults = Limits::default();
        let limits = Limits {
            max_steps: args
                .max_steps
                .or(file.max_steps)
                .unwrap_or(defaults.max_steps),
            max_unparsable: args
                .max_unparsable
                .or(file.max_unparsable)
                .unwrap_or(defaults.max_unparsable),
            loop_rule: args
                .loop_rule
                .or(file.loop_rule)
                .unwrap_or(defaults.loop_rule),
            loop_window: args
                .loop_window
                .or(file.loop_window)
                .unwrap_or(defaults.loop_window),
            nudges: args.nudges.or(file.nudges).unwrap_or(defaults.nudges),
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
        Ok(Self {
            limits,
            on_terminate: args.on_terminate.or(file.on_terminate).unwrap_or_default(),
            mode: args.mode.or(file.mode).unwrap_or_default(),
            label: args
                .label
                .clone()
                .or(file.label.clone())
                .filter(|l| !l.trim().is_empty()),
            listen,
            backend,
            backend_model: args.backend_model.clone().or(file.backend_model.clone()),
            backend_api_key: args
                .backend_api_key
                .clone()
                .or(file.backend_api_key.clone())
                .filter(|k| !k.is_empty())
                .map(Secret::new),
            api_keys: api_keys(args, &file)?,
            server: server_limits(args, &file)?,
            log_dir: args
                .log_dir
                .clone()
                .or(file.log_dir.clone())
                .unwrap_or_else(|| PathBuf::from("asap-logs")),
            max_tokens,
            backend_timeout_s: args
                .backend_timeout
                .or(file.backend_timeout)
                .unwrap_or(DEFAULT_BACKEND_TIMEOUT_S),
            context_length: args
                .context_length
                .or(file.context_length)
                .filter(|n| *n > 0),
            tokenizer: args.tokenizer.clone().or(file.tokenizer.clone()),
            backend_retries: args
                .backend_retries
                .or(file.backend_retries)
                .unwrap_or(DEFAULT_BACKEND_RETRIES),
            templates: templates_dir(&args.prompt, &file),
            log_format: args.log_format.or(file.log_format).unwrap_or_default(),
            prompt: PromptConfig::resolve(&args.prompt, &file),
        })
    }
}

/// `--api-key` values (flag/env, else the file), blanks dropped; a key with whitespace or a
/// control character could never be sent in a header, so it is refused here.
fn api_keys(args: &ServeArgs, file: &FileConfig) -> Result<Vec<Secret>, ConfigError> {
    let keys: Vec<String> = if args.api_key.is_empty() {
        match &file.api_key {
            Some(FileKeys::One(k)) => vec![k.clone()],
            Some(FileKeys::Many(ks)) => ks.clone(),
            None => Vec::new(),
        }
    } else {
        args.api_key.clone()
    };
    keys.into_iter()
        .filter(|k| !k.trim().is_empty())
        .map(|k| {
            if k.chars().any(|c| c.is_whitespace() || c.is_control()) {
                // The message must not contain the key.
                Err(ConfigError::Invalid {
                    field: "api_key",
                    reason: "a key contains whitespace or a control character".into(),
                })
            } else {
                Ok(Secret::new(k))
            }
        })
        .collect()
}

/// The HTTP layer's limits: flag/env, else the file, else the defaults; 0 turns the request
/// timeout and the concurrency limit off.
fn server_limits(args: &ServeArgs, file: &FileConfig) -> Result<ServerLimits, ConfigError> {
    let defaults = ServerLimits::default();
    let limits = ServerLimits {
        max_body_bytes: args
            .max_body_bytes
            .or(file.max_body_bytes)
            .unwrap_or(defaults.max_body_bytes),
        request_timeout_s: match args.request_timeout.or(file.request_timeout) {
            Some(0) => None,
            Some(s) => Some(s),
            None => defaults.request_timeout_s,
        },
        max_concurrency: match args.max_concurrency.or(file.max_concurrency) {
            Some(0) => None,
            Some(n) => Some(n),
            None => defaults.max_concurrency,
        },
        max_messages: args
            .max_messages
            .or(file.max_messages)
            .unwrap_or(defaults.max_messages),
        max_tools: args
            .max_tools
            .or(file.max_tools)
            .unwrap_or(defaults.max_tools),
        shutdown_timeout_s: args
            .shutdown_timeout
            .or(file.shutdown_timeout)
            .unwrap_or(defaults.shutdown_timeout_s),
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
    /// mode, and the template override directory when one is set), so sessions run under
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
