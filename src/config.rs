//! Validated configuration: flags > environment (`ASAP_*`, via clap) > TOML file > defaults.
//!
//! The TOML file uses the long flag names with `_` (`log_dir = "logs"`); unknown keys are an
//! error that names the key, so a typo never silently falls back to a default.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::cli::{PromptArgs, ServeArgs};
use crate::pipeline::{Mode, OnTerminate};
use crate::policy::Limits;
use crate::render::Format;

/// Default listen address: loopback only (DESIGN.md "Commands").
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8100";
/// Default backend: llama-server on its default port.
pub const DEFAULT_BACKEND: &str = "http://127.0.0.1:8080/v1";
/// Default cap on generated tokens per step.
pub const DEFAULT_MAX_TOKENS: u32 = 1024;
/// Default backend timeout, seconds.
pub const DEFAULT_BACKEND_TIMEOUT_S: u64 = 300;
/// Default number of retries after connect errors and 5xx.
pub const DEFAULT_BACKEND_RETRIES: u32 = 3;

/// The TOML file's shape.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<SocketAddr>,
    pub backend: Option<String>,
    pub backend_model: Option<String>,
    pub backend_api_key: Option<String>,
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
    pub loop_window: Option<usize>,
    pub on_terminate: Option<OnTerminate>,
    pub label: Option<String>,
    pub templates: Option<PathBuf>,
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
    pub backend_api_key: Option<String>,
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
            loop_window: args
                .loop_window
                .or(file.loop_window)
                .unwrap_or(defaults.loop_window),
        };
        for (field, value, min) in [
            ("max_steps", limits.max_steps, 1),
            ("max_unparsable", limits.max_unparsable, 1),
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
                .or(file.backend_api_key.clone()),
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
            prompt: PromptConfig::resolve(&args.prompt, &file),
        })
    }
}

impl Config {
    /// Hex SHA-256 of the settings that shape prompts and decisions (profile, format, prefix
    /// directories and K, max_tokens, termination limits, on_terminate, mode, and the template
    /// override directory when one is set), so sessions run under different settings can be
    /// told apart in traces.
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
        crate::trace::sha256_hex(canonical.as_bytes())
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
    fn backend_must_be_http() {
        let args = ServeArgs {
            backend: Some("127.0.0.1:8000".into()),
            ..ServeArgs::default()
        };
        assert!(Config::resolve(&args).is_err());
    }
}
