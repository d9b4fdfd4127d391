//! The command line: the subcommands, composed from the argument structs their modules declare
//! (clap derive). Every `serve` flag can also come from an `ASAP_<FLAG>` environment variable
//! or the TOML file given by `--config`; precedence is flags > environment > file > defaults
//! ([`crate::config`], where the `serve` and `render` settings are declared).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{PromptArgs, ServeArgs};
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
    /// event logs (directory, JSON or JSONL), OpenHands V0 trajectory JSON, mini-swe-agent
    /// `.traj.json` (1.x and 2.x), asap-proxy traces. Writes the set's provenance next to the
    /// output (`<out>.provenance.json`).
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
    use crate::render::Format;
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
