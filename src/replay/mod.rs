//! `asap-proxy replay LOG... [--check]`: re-render and re-parse every recorded step with the
//! current code; the regression tool for template and parser changes.
//!
//! Per trace file, with the format, profile (forced, as `--profile NAME` would) and prefix K
//! of its `session` record:
//! - a `step` record's request is rebuilt from the deltas ([`TraceReader`]) and run through
//!   [`crate::pipeline::prepare`] with a per-file [`SessionIndex`] fed as the pipeline feeds
//!   it (turns answered without a tool call are remembered under the recorded session id);
//! - an attempt after a `nudge` record appends [`crate::policy::nudged_step`] for the
//!   recorded kind and renders again, as [`crate::pipeline::run_step`] does;
//! - a `side_call` record is rendered with [`crate::side_call::prompt`];
//! - the rendered prompt's SHA-256 is compared with the recorded `prompt.sha256` (on a
//!   difference: the first differing byte and an escaped context of both sides);
//! - the recorded `completion.text` is parsed again ([`crate::parse::parse_for`]) and the
//!   action (as JSON) and failure class compared with the recorded `parse`. Records without a
//!   completion (a failed backend call, Terminus' confirmation turn) are compared on the
//!   prompt only, and passthrough sessions too (their completion is a chat reply, not a
//!   continuation).
//!
//! Output (stdout): one line per differing step (every step with `--verbose`), a note where the
//! prefix chosen now is not the recorded one, then `files N  steps N  prompt differences N
//! parse differences N  unreadable N`. Exit status: 2 when any input was unreadable (a file,
//! a line, a record whose delta does not apply), else 1 under `--check` when anything
//! differed, else 0.

mod diff;
mod step;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::cli::ReplayArgs;
use crate::config::{ProfileChoice, PromptConfig, DEFAULT_PREFIX_K};
use crate::prefix::PrefixStore;
use crate::profile::Profiles;
use crate::render::{Renderer, FORMATS};
use crate::session::{NudgeKind, SessionId, SessionIndex, DEFAULT_INDEX_CAPACITY};
use crate::trace::read::{Record, TraceReader};
use step::FileReplay;

/// Counts for the summary line.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Summary {
    /// Trace files read (or tried).
    files: usize,
    /// `step` and `side_call` records checked.
    steps: usize,
    /// Records whose re-rendered prompt has another SHA-256 (or could not be rendered).
    prompt_differences: usize,
    /// Records whose completion parses to another action or failure class.
    parse_differences: usize,
    /// Files, lines and records that could not be read.
    unreadable: usize,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "files {}  steps {}  prompt differences {}  parse differences {}  unreadable {}",
            self.files,
            self.steps,
            self.prompt_differences,
            self.parse_differences,
            self.unreadable
        )
    }
}

/// Runs `asap-proxy replay`.
///
/// Errors: `(exit code, message)`: 2 for unreadable input or a bad option (template override,
/// prefix directory), 1 under `--check` when a step differs or when writing the report fails.
pub fn run(args: &ReplayArgs) -> Result<(), (u8, String)> {
    let files = crate::report::load::trace_files(&args.logs).map_err(|e| (2, e.to_string()))?;
    let profiles = Profiles::builtin().map_err(|e| (1, e.to_string()))?;
    let renderer =
        Renderer::with_templates(args.templates.as_deref()).map_err(|e| (2, e.to_string()))?;
    let mut prefix_dirs = args.prefixes.clone();
    if prefix_dirs.is_empty() && Path::new("prefixes").is_dir() {
        prefix_dirs.push(PathBuf::from("prefixes"));
    }
    let mut replayer = Replayer {
        profiles,
        renderer,
        prefix_dirs,
        stores: HashMap::new(),
        verbose: args.verbose,
        summary: Summary::default(),
    };
    let mut out = std::io::stdout().lock();
    let io = |e: std::io::Error| (1, format!("writing the report: {e}"));
    for file in &files {
        for line in replayer.file(file)? {
            writeln!(out, "{line}").map_err(io)?;
        }
    }
    let summary = replayer.summary;
    writeln!(out, "{summary}").map_err(io)?;
    out.flush().map_err(io)?;
    if summary.unreadable > 0 {
        return Err((2, format!("{} unreadable input(s)", summary.unreadable)));
    }
    let differences = summary.prompt_differences + summary.parse_differences;
    if args.check && differences > 0 {
        return Err((
            1,
            format!("replay --check: {differences} difference(s) in recorded steps"),
        ));
    }
    Ok(())
}

/// What stays the same across files.
struct Replayer {
    profiles: Profiles,
    renderer: Renderer,
    prefix_dirs: Vec<PathBuf>,
    /// Prefix stores by K (sessions record theirs).
    stores: HashMap<usize, PrefixStore>,
    verbose: bool,
    summary: Summary,
}

impl Replayer {
    /// Replays one file; returns its report lines.
    ///
    /// Errors: a prefix directory that cannot be loaded (exit 2).
    fn file(&mut self, path: &Path) -> Result<Vec<String>, (u8, String)> {
        self.summary.files += 1;
        let mut lines = Vec::new();
        let mut reader = match TraceReader::open(path) {
            Ok(r) => r,
            Err(e) => {
                self.summary.unreadable += 1;
                lines.push(format!("{}: unreadable: {e}", path.display()));
                return Ok(lines);
            }
        };
        if !reader.invalid_lines().is_empty() {
            self.summary.unreadable += reader.invalid_lines().len();
            lines.push(format!(
                "{}: unreadable lines {:?} skipped",
                path.display(),
                reader.invalid_lines()
            ));
        }
        if reader.torn_tail() {
            // A write cut short by a crash: expected, skipped, not counted as unreadable.
            lines.push(format!("{}: note: torn last line skipped", path.display()));
        }
        let Some(session) = reader.session().cloned() else {
            self.summary.unreadable += 1;
            lines.push(format!("{}: no session record", path.display()));
            return Ok(lines);
        };
        let format_name = session.str("format").unwrap_or_default();
        let Some(format) = FORMATS.into_iter().find(|f| f.name() == format_name) else {
            self.summary.unreadable += 1;
            lines.push(format!(
                "{}: unknown format {format_name:?} in the session record",
                path.display()
            ));
            return Ok(lines);
        };
        let k = session
            .u64("prefix_k")
            .map_or(DEFAULT_PREFIX_K, |k| k as usize);
        if !self.stores.contains_key(&k) {
            let store = PrefixStore::load(&self.prefix_dirs, k)
                .map_err(|e| (2, format!("loading prefixes: {e}")))?;
            self.stores.insert(k, store);
        }
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let mut file = FileReplay {
            path,
            config: PromptConfig {
                profile: ProfileChoice::Named(session.str("profile").unwrap_or("generic").into()),
                format,
                prefixes: self.prefix_dirs.clone(),
                prefix_k: k,
            },
            passthrough: session.str("mode") == Some("passthrough"),
            // The file's stem is the session id the pipeline remembered turns under.
            session: SessionId::from_recorded(stem).unwrap_or_else(SessionId::mint),
            sessions: SessionIndex::new(DEFAULT_INDEX_CAPACITY),
            current: None,
            nudge: None,
            recorded_prefix: session
                .data
                .pointer("/prefix/id")
                .and_then(Value::as_str)
                .map(str::to_string),
            prefix_checked: false,
        };
        while let Some(record) = reader.next_record() {
            let record = match record {
                Ok(r) => r,
                Err(e) => {
                    self.summary.unreadable += 1;
                    lines.push(format!("unreadable: {e}"));
                    continue;
                }
            };
            let outcome = match record.kind.as_str() {
                "nudge" => {
                    file.nudge = match record.str("kind") {
                        Some("submit_before_edit") => Some(NudgeKind::SubmitBeforeEdit),
                        Some("repeated_action") => Some(NudgeKind::RepeatedAction),
                        _ => None,
                    };
                    continue;
                }
                "step" | "side_call" => self.step(&mut file, &reader, &record),
                _ => continue,
            };
            self.summary.steps += 1;
            let label = label(path, &record);
            match outcome {
                Err(message) => {
                    self.summary.unreadable += 1;
                    lines.push(format!("{label}: unreadable: {message}"));
                }
                Ok(check) => {
                    self.summary.prompt_differences += usize::from(check.prompt.is_some());
                    self.summary.parse_differences += usize::from(check.parse.is_some());
                    let differences: Vec<String> =
                        check.prompt.into_iter().chain(check.parse).collect();
                    if !differences.is_empty() {
                        lines.push(format!("{label}: {}", differences.join("; ")));
                    } else if self.verbose {
                        lines.push(format!("{label}: same ({})", check.same));
                    }
                    lines.extend(check.note);
                }
            }
        }
        Ok(lines)
    }
}

/// `file:line step S attempt A` (or `side_call KIND step S`).
fn label(path: &Path, record: &Record) -> String {
    let step = record.u64("step").unwrap_or(0);
    match record.kind.as_str() {
        "side_call" => format!(
            "{}:{} side_call {} step {step}",
            path.display(),
            record.line,
            record.str("kind").unwrap_or("?")
        ),
        _ => format!(
            "{}:{} step {step} attempt {}",
            path.display(),
            record.line,
            record.u64("attempt").unwrap_or(0)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_line_shape() {
        let s = Summary {
            files: 1,
            steps: 4,
            prompt_differences: 2,
            parse_differences: 0,
            unreadable: 0,
        };
        assert_eq!(
            s.to_string(),
            "files 1  steps 4  prompt differences 2  parse differences 0  unreadable 0"
        );
    }
}
