//! `asap-proxy replay`'s command-line arguments.

use std::path::PathBuf;

use clap::Args;

/// `asap-proxy replay`.
#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// Trace files or directories (searched recursively for `*.jsonl` and `*.jsonl.zst`).
    #[arg(required = true)]
    pub logs: Vec<PathBuf>,
    /// Exit with status 1 when any step's prompt hash or parsed action differs.
    #[arg(long)]
    pub check: bool,
    /// Print every step, not only the ones that differ.
    #[arg(long)]
    pub verbose: bool,
    /// Directory of task prefixes, as for `serve`; repeatable [default: ./prefixes when it
    /// exists]. The built-in demonstration is always available; K is the one each session
    /// recorded.
    #[arg(long = "prefixes", value_delimiter = ',')]
    pub prefixes: Vec<PathBuf>,
    /// Directory of template overrides (`<format>.jinja`), as for `serve`: replay what a
    /// template change would do to the recorded prompts.
    #[arg(long)]
    pub templates: Option<PathBuf>,
}
