//! The process's log output (`tracing` to standard error): human-readable text, or one JSON
//! object per line for log collectors (`serve --log-format json`). `RUST_LOG` filters as
//! usual (default `info`).

use std::sync::OnceLock;

/// How log lines are written (`--log-format`, `ASAP_LOG_FORMAT`, `log_format` in the TOML
/// file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// `2026-01-01T00:00:00Z  INFO asap_proxy::server: message key=value`.
    #[default]
    Text,
    /// `{"timestamp": …, "level": "INFO", "fields": {"message": …, …}, "target": …}`, one
    /// object per line (tracing-subscriber's JSON format).
    Json,
}

/// The format installed by [`init`]; `None` before.
static INSTALLED: OnceLock<LogFormat> = OnceLock::new();

/// Installs the global subscriber, once per process; later calls change nothing.
pub fn init(format: LogFormat) {
    if INSTALLED.set(format).is_err() {
        return;
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal: not in files, `docker logs` or `kubectl logs`.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    // `try_init`: a subscriber set by an embedding program stays.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Whether log lines are JSON: plain messages for people (the `listening on` line, fatal
/// errors) then go through the log instead, so every line of standard error is one object.
pub fn is_json() -> bool {
    INSTALLED.get() == Some(&LogFormat::Json)
}
