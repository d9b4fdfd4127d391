//! `asap-proxy view`'s command-line arguments.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

/// `asap-proxy view`.
#[derive(Debug, Clone, Args)]
pub struct ViewArgs {
    /// Trace directories or files (searched recursively for `*.jsonl` and `*.jsonl.zst`; read again on every
    /// page load). A directory given after `--results` is taken as a trace directory too.
    pub dirs: Vec<PathBuf>,
    /// Address to listen on; the pages are at `http://ADDR/ui`.
    #[arg(long, env = "ASAP_VIEW_LISTEN", default_value = "127.0.0.1:8200")]
    pub listen: SocketAddr,
    /// Resolution results, as for `report` (SWE-bench harness report JSON, or JSONL/CSV rows
    /// of `instance_id, run, resolved`): adds resolved/unresolved to each session; repeatable.
    #[arg(long, num_args = 1..)]
    pub results: Vec<String>,
}
