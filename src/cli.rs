//! Command-line structs only (clap derive). Every `serve` flag can also come from an
//! `ASAP_<FLAG>` environment variable or the TOML file given by `--config`; precedence is
//! flags > environment > file > defaults ([`crate::config`]).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{Mode, OnTerminate};
use crate::logging::LogFormat;
use crate::policy::LoopRule;
use crate::render::Format;
use crate::replay::ReplayArgs;
use crate::report::ReportArgs;
use crate::view::ViewArgs;

/// asap-proxy: drive pretrained base models from unmodified agent scaffolds.
#[derive(Debug, Parser)]
#[command(name = "asap-proxy", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process; boxing buys nothing
pub enum Command {
    /// Serve the OpenAI Chat Completions API in front of a base-model completion backend.
    Serve(ServeArgs),
    /// Print the continuation text a chat completion request becomes (no backend needed).
    Render(RenderArgs),
    /// Reference prefixes: build them from reference trajectories.
    Prefix(PrefixArgs),
    /// Re-render and re-parse recorded steps with the current code; report differences.
    Replay(ReplayArgs),
    /// Pass@k, Intersection@n and the behaviour breakdown over trace logs.
    Report(ReportArgs),
    /// Browse trace logs in a web browser: sessions with outcome and behaviour flags, and
    /// each trajectory step by step with the exact prompts.
    View(ViewArgs),
}

/// Flags shared by `serve` and `render`: how a request is turned into a prompt.
#[derive(Debug, Clone, Default, Args)]
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
    pub config: Option<PathBuf>,
    /// Directory of reference prefixes (`*.json`, `*.jsonl`); repeatable
    /// [default: ./prefixes when it exists].
    #[arg(long = "prefixes", env = "ASAP_PREFIXES", value_delimiter = ',')]
    pub prefixes: Vec<PathBuf>,
    /// Reference steps rendered before the live ones; 0 disables prefixes [default: 3].
    #[arg(long, env = "ASAP_PREFIX_K")]
    pub prefix_k: Option<usize>,
    /// Directory of template overrides: `<format>.jinja` files (`markdown_xml.jinja`,
    /// `xml.jinja`, `markdown.jinja`, `json.jinja`) used in place of the embedded ones
    /// [default: the embedded templates].
    #[arg(long, env = "ASAP_TEMPLATES")]
    pub templates: Option<PathBuf>,
}

/// `asap-proxy serve`.
#[derive(Debug, Clone, Default, Args)]
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
    #[arg(long, env = "ASAP_NUDGES", value_name = "on|off",
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
    #[command(flatten)]
    pub prompt: PromptArgs,
}

/// `asap-proxy render`.
#[derive(Debug, Clone, Args)]
pub struct RenderArgs {
    /// Chat completion request body (JSON file, or `-` for standard input).
    #[arg(long)]
    pub request: PathBuf,
    #[command(flatten)]
    pub prompt: PromptArgs,
}

/// `asap-proxy prefix`.
#[derive(Debug, Clone, Args)]
pub struct PrefixArgs {
    #[command(subcommand)]
    pub command: PrefixCommand,
}

/// `asap-proxy prefix` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum PrefixCommand {
    /// Build prefix files (JSONL) from reference trajectories: SWE-agent `.traj`, OpenHands SDK
    /// event logs (directory, JSON or JSONL), OpenHands V0 trajectory JSON, asap-proxy traces.
    ///
    /// Each trajectory becomes one prefix: its first K steps, tool names in the neutral
    /// vocabulary (bash, str_replace_editor, submit, others unchanged).
    ///
    /// Every prefix is checked for gold-patch leaks: --gold FILE is required unless
    /// --no-leak-check is given. A prefix whose task has no patch in the gold file is rejected
    /// ("no gold patch: not checked") unless --no-leak-check.
    ///
    /// Leak rule: a prefix leaks when an added line of its task's gold patch (a `+` line, not
    /// `+++`), trimmed, at least 10 characters long and not only punctuation and keywords
    /// (`}`, `return`, `pass`, `else:`, `return None` never count), appears
    /// whitespace-normalised (runs of whitespace collapsed to one space) in a step's thought,
    /// in a string of a step's action arguments, or in a step's observation. Leaking prefixes
    /// are rejected unless --allow-leaks.
    ///
    /// Standard output: a header, then one row per task with the columns
    /// `instance_id  steps  gold_lines  leaks  status  checked` (gold_lines: gold lines
    /// compared; leaks: how many of them were found; both `-` when not checked; status: kept
    /// or rejected; checked: "thoughts, actions, observations of N steps", "not checked" or
    /// "no gold patch: not checked"), then `total: N prefixes, N kept, N rejected, N with
    /// leaks, N not checked`. Standard error: each leaked line (`ID: step N
    /// thought|action|observation leaks gold line: LINE`) and notes (`ID: NOTE`).
    Build(PrefixBuildArgs),
}

/// `asap-proxy prefix build`.
#[derive(Debug, Clone, Args)]
pub struct PrefixBuildArgs {
    /// Reference trajectory files or OpenHands conversation directories (format detected from
    /// the content); repeatable.
    #[arg(long, required = true, num_args = 1..)]
    pub from: Vec<PathBuf>,
    /// Steps kept per prefix.
    #[arg(long, default_value_t = 3)]
    pub k: usize,
    /// Output prefix file (JSONL, one prefix per line).
    #[arg(long)]
    pub out: PathBuf,
    /// SWE-bench style gold patches (JSON array or JSONL with `instance_id` and `patch`):
    /// reject prefixes that contain a non-trivial added line of their task's patch (see the
    /// leak rule above). Required unless --no-leak-check.
    #[arg(long, value_name = "FILE")]
    pub gold: Option<PathBuf>,
    /// Write leaking prefixes too, with the leaked lines in their `leaks` field.
    #[arg(long)]
    pub allow_leaks: bool,
    /// Write prefixes that cannot be checked: every prefix without --gold, and with --gold
    /// those of tasks missing from the gold file (tasks with a gold patch are still checked).
    #[arg(long)]
    pub no_leak_check: bool,
    /// Profile whose tool names the trajectories use (default: by input format: swe-agent,
    /// openhands-sdk, openhands-codeact for OpenHands V0).
    #[arg(long)]
    pub profile: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::trace_paths_and_results;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_flags_parse() {
        let cli = Cli::try_parse_from([
            "asap-proxy",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--backend",
            "http://127.0.0.1:8000/v1",
            "--profile",
            "swe-agent",
            "--format",
            "markdown-xml",
            "--max-tokens",
            "64",
        ])
        .unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        assert_eq!(args.listen, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(args.max_tokens, Some(64));
        assert_eq!(args.prompt.profile.as_deref(), Some("swe-agent"));
        assert_eq!(args.prompt.format, Some(Format::MarkdownXml));
    }

    #[test]
    fn view_takes_directories_and_a_listen_address() {
        let cli = Cli::try_parse_from([
            "asap-proxy",
            "view",
            "logs-a",
            "logs-b",
            "--listen",
            "0.0.0.0:9",
        ])
        .unwrap();
        let Command::View(args) = cli.command else {
            panic!("not view")
        };
        assert_eq!(
            args.dirs,
            [PathBuf::from("logs-a"), PathBuf::from("logs-b")]
        );
        assert_eq!(args.listen, "0.0.0.0:9".parse().unwrap());
        let cli = Cli::try_parse_from(["asap-proxy", "view", "logs"]).unwrap();
        let Command::View(args) = cli.command else {
            panic!("not view")
        };
        assert_eq!(args.listen, "127.0.0.1:8200".parse().unwrap());
        // A directory is required, after `--results` too (checked when run: `--results`
        // takes several values, so a directory may come after it).
        let cli = Cli::try_parse_from(["asap-proxy", "view"]).unwrap();
        let Command::View(args) = cli.command else {
            panic!("not view")
        };
        assert!(trace_paths_and_results(&args.dirs, &args.results).is_err());
        let (dirs, files) = trace_paths_and_results(&[], &["r.json".into(), "src".into()]).unwrap();
        assert_eq!(
            (dirs, files),
            (vec![PathBuf::from("src")], vec!["r.json".into()])
        );
    }

    #[test]
    fn api_keys_repeat_or_split_on_commas() {
        let cli = Cli::try_parse_from([
            "asap-proxy",
            "serve",
            "--api-key",
            "k1,k2",
            "--api-key",
            "k3",
            "--max-concurrency",
            "0",
        ])
        .unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        assert_eq!(args.api_key, ["k1", "k2", "k3"]);
        assert_eq!(args.max_concurrency, Some(0));
    }
}
