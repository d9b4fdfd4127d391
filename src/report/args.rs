//! `asap-proxy report`'s command-line arguments, and the trace-path rule `view` shares.

use std::path::PathBuf;

use clap::Args;

/// Output format of `report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ReportFormat {
    /// Markdown tables.
    #[default]
    Md,
    /// Comma-separated rows, one table after another with a blank line between.
    Csv,
    /// One JSON document.
    Json,
}

/// Trace paths and results files of `report` and `view`: `--results` takes several values,
/// so `--results r.json logs/` would read the directory as a results file; an existing
/// directory among the results is taken as a trace path instead (results are files).
///
/// Errors: no trace path at all.
pub fn trace_paths_and_results(
    dirs: &[PathBuf],
    results: &[String],
) -> Result<(Vec<PathBuf>, Vec<String>), String> {
    let mut dirs = dirs.to_vec();
    let mut files = Vec::new();
    for r in results {
        if std::path::Path::new(r).is_dir() {
            dirs.push(PathBuf::from(r));
        } else {
            files.push(r.clone());
        }
    }
    if dirs.is_empty() {
        return Err(
            "no trace directory or file given (DIR...); note that a trace file given \
                    after --results is read as a results file: put trace paths first"
                .into(),
        );
    }
    Ok((dirs, files))
}

/// `asap-proxy report`.
#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// Trace directories or files (searched recursively for `*.jsonl` and `*.jsonl.zst`). A directory given
    /// after `--results` is taken as a trace directory too.
    pub dirs: Vec<PathBuf>,
    /// Resolution results: SWE-bench harness report JSON (`resolved_ids`, `unresolved_ids`,
    /// `empty_patch_ids`, `error_ids`), or JSONL/CSV rows of `instance_id, run, resolved`
    /// (optional `label`); repeatable.
    #[arg(long, num_args = 1..)]
    pub results: Vec<String>,
    /// k values for Pass@k (each reported where k ≤ every task's n). Default: every k from 1
    /// to the label's fewest runs of a task.
    #[arg(long, value_delimiter = ',', value_name = "K,...")]
    pub k: Vec<usize>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: ReportFormat,
    /// Write SVG plots (Pass@k curves, behaviour bars) into this directory.
    #[arg(long)]
    pub plots: Option<PathBuf>,
    /// With `--format json`: each trajectory also lists its completion calls (`steps`: step,
    /// attempt, parsed action or parse-failure class, nudge, termination, edit and submit
    /// flags), with its profile and the proxy's termination reason and last error.
    #[arg(long)]
    pub steps: bool,
    /// Paired comparison of two labels, aligned by task and run index; repeatable (each base
    /// model against its post-trained version, or several checkpoints against one).
    #[arg(long, num_args = 2, value_names = ["A", "B"], action = clap::ArgAction::Append)]
    pub pair: Vec<String>,
    /// The task set every label is scored over: instance ids, one a line (blank lines and
    /// `#` comments skipped). Default: every instance id seen in the trajectories and results.
    /// A task a label lacks counts as resolved in none of its runs (with a warning).
    #[arg(long, value_name = "FILE")]
    pub tasks: Option<PathBuf>,
    /// The scaffold's own step limit (model calls per run, e.g. mini-swe-agent's
    /// `step_limit`): a run that stopped without submitting after this many requests ended at
    /// the step cap, not "stopped without submitting".
    #[arg(long, value_name = "N")]
    pub step_limit: Option<usize>,
    /// Compare labels whose protocols differ (format, prefix K, prefix set, prefix coverage, rules,
    /// proxy version); the differences are printed above the tables. Without it, such a
    /// comparison is an error (exit 2).
    #[arg(long)]
    pub allow_protocol_mismatch: bool,
    /// The order of the labels in every table, plot and file (a sweep's stages, oldest
    /// first); labels not named follow in natural order. Default: natural order, numbers
    /// compared as numbers (`stage2-end` before `stage10-mid`). A name no trajectory has is an
    /// error (exit 2).
    #[arg(long, value_delimiter = ',', value_name = "LABEL,...")]
    pub order: Vec<String>,
    /// A conventional benchmark's score per label (`label,score` lines; a header line and `#`
    /// comments skipped), shown beside ASAP's Pass@1 and both changes from label to label:
    /// where a benchmark flattens, does ASAP still move? Unreadable or malformed: exit 2.
    #[arg(long, value_name = "FILE")]
    pub reference: Option<PathBuf>,
    /// For the rank agreement: `label,model,group` lines (a group is a scaffold or benchmark;
    /// a header line and `#` comments skipped), for labels not named `model@group`.
    /// Malformed, or a label given twice: exit 2.
    #[arg(long, value_name = "FILE")]
    pub rank_groups: Option<PathBuf>,
    /// Also write the report as one self-contained HTML page (tables, SVG plots of every
    /// metric across the labels with its 95 % interval, the trajectories linked to the
    /// viewer; no script, nothing fetched), built from the same numbers as `--format json`.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// With `--html`: the trajectory viewer the page links each session to
    /// (`URL/ui/session/SESSION`; `asap-proxy view`'s default address).
    #[arg(long, value_name = "URL", default_value = super::html::DEFAULT_VIEWER_URL)]
    pub viewer_url: String,
}
