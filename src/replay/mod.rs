//! `asap-proxy replay LOG... [--check]`: re-render and re-parse every recorded step with the
//! current code; the regression tool for template and parser changes.
//!
//! Per trace file, with the format, profile (forced, as `--profile NAME` would) and prefix K
//! of its `session` record:
//! - a `step` record's request is rebuilt from the deltas ([`TraceReader`]) and run through
//!   [`crate::pipeline::prepare`] with a per-file [`SessionIndex`] fed as the pipeline feeds
//!   it (turns answered without a tool call are remembered under the recorded session id);
//! - the observations the proxy elided to fit the context window are elided again with the
//!   recorded cut (`context.elided_before_step`, [`crate::context::with_elided`]), as
//!   [`crate::pipeline::run_turn`] does after its context check;
//! - an attempt after a `nudge` record runs the pipeline's own attempt machine
//!   ([`crate::pipeline::Attempts::push_nudge`] for the recorded kind, then
//!   [`crate::pipeline::Attempts::render`]);
//! - a `side_call` record is rendered with [`crate::side_call::prompt`];
//! - the rendered prompt's SHA-256 is compared with the recorded `prompt.sha256` (on a
//!   difference: the first differing byte and an escaped context of both sides);
//! - the recorded `completion.text` is parsed again ([`crate::pipeline::parse_completion`]) and the
//!   action (as JSON) and failure class compared with the recorded `parse`. Records without a
//!   completion (a failed backend call, Terminus' confirmation turn) are compared on the
//!   prompt only, and passthrough sessions too (their completion is a chat reply, not a
//!   continuation).
//!
//! Files are replayed in parallel (one std thread per available core) and reported in file
//! order. Output (stdout): one line per differing step (every step with `--verbose`), notes
//! (a prefix chosen now that is not the recorded one; a file skipped as not a trace: no
//! `session` record, empty; lines skipped as not records: a torn last line, a line torn by a
//! crash before a restart), then `files N  steps N  prompt differences N  parse differences
//! N  unreadable N`. Exit status: 2 when any input was unreadable (a file that cannot be
//! read, a record of a newer schema, a record whose delta does not apply or that cannot be
//! replayed), else 1 under `--check` when anything differed, else 0.

mod args;
mod backend;
mod diff;
mod step;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};

use crate::config::{ProfileChoice, PromptConfig, DEFAULT_PREFIX_K};
use crate::error::CliError;
use crate::prefix::PrefixStore;
use crate::profile::Profiles;
use crate::render::{Renderer, FORMATS};
use crate::session::{SessionId, SessionIndex, DEFAULT_INDEX_CAPACITY};
use crate::trace::read::{Body, Record, TraceReader};
use crate::trace::SessionMode;
pub use backend::ReplayBackend;
use step::FileReplay;

pub use args::ReplayArgs;

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
    /// Files and records that could not be read or replayed.
    unreadable: usize,
}

impl Summary {
    /// Adds another file's counts.
    fn add(&mut self, other: Self) {
        self.files += other.files;
        self.steps += other.steps;
        self.prompt_differences += other.prompt_differences;
        self.parse_differences += other.parse_differences;
        self.unreadable += other.unreadable;
    }
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

/// What replaying one file found: its report lines and counts.
#[derive(Debug, Default)]
struct FileReport {
    lines: Vec<String>,
    summary: Summary,
}

/// Runs `asap-proxy replay`.
///
/// Errors ([`CliError`], by exit code): 2 for unreadable input or a bad option (template override,
/// prefix directory), 1 under `--check` when a step differs or when writing the report fails.
pub fn run(args: &ReplayArgs) -> Result<(), CliError> {
    let files = crate::trace::read::trace_files(&args.logs).map_err(CliError::input)?;
    let profiles = Profiles::builtin().map_err(CliError::internal)?;
    let renderer = Renderer::with_templates(args.templates.as_deref()).map_err(CliError::input)?;
    let mut prefix_dirs = args.prefixes.clone();
    if prefix_dirs.is_empty() && Path::new("prefixes").is_dir() {
        prefix_dirs.push(PathBuf::from("prefixes"));
    }
    let replayer = Replayer {
        profiles,
        renderer,
        prefix_dirs,
        stores: Mutex::new(HashMap::new()),
        verbose: args.verbose,
    };
    let mut out = std::io::stdout().lock();
    let mut summary = Summary::default();
    replayer.files(&files, |report| {
        for line in &report.lines {
            writeln!(out, "{line}").map_err(CliError::io("writing the report"))?;
        }
        summary.add(report.summary);
        Ok(())
    })?;
    writeln!(out, "{summary}").map_err(CliError::io("writing the report"))?;
    out.flush().map_err(CliError::io("writing the report"))?;
    if summary.unreadable > 0 {
        return Err(CliError::Usage(format!(
            "{} unreadable input(s)",
            summary.unreadable
        )));
    }
    let differences = summary.prompt_differences + summary.parse_differences;
    if args.check && differences > 0 {
        return Err(CliError::Failed(format!(
            "replay --check: {differences} difference(s) in recorded steps"
        )));
    }
    Ok(())
}

/// What stays the same across files (shared by the worker threads).
struct Replayer {
    profiles: Profiles,
    renderer: Renderer,
    prefix_dirs: Vec<PathBuf>,
    /// Prefix stores by K (sessions record theirs), loaded on first use; a failed load is
    /// kept as its message.
    stores: Mutex<HashMap<usize, Result<Arc<PrefixStore>, String>>>,
    verbose: bool,
}

impl Replayer {
    /// Replays `files` on up to `available_parallelism` threads and hands each file's report
    /// to `sink` in the order of `files`, as soon as it and every file before it are done.
    ///
    /// Errors: the first fatal error in file order (a prefix directory that cannot be
    /// loaded), or `sink`'s; the files not yet started are then left alone.
    fn files(
        &self,
        files: &[PathBuf],
        mut sink: impl FnMut(FileReport) -> Result<(), CliError>,
    ) -> Result<(), CliError> {
        let workers = std::thread::available_parallelism()
            .map_or(1, NonZeroUsize::get)
            .min(files.len())
            .max(1);
        let next = AtomicUsize::new(0);
        let (sender, receiver) = mpsc::channel::<(usize, Result<FileReport, CliError>)>();
        std::thread::scope(|scope| {
            for _ in 0..workers {
                let sender = sender.clone();
                let next = &next;
                scope.spawn(move || loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(path) = files.get(index) else { break };
                    // A closed channel: the run ended early.
                    if sender.send((index, self.file(path))).is_err() {
                        break;
                    }
                });
            }
            drop(sender);
            let mut done = BTreeMap::new();
            let mut due = 0;
            for (index, report) in receiver {
                done.insert(index, report);
                while let Some(report) = done.remove(&due) {
                    due += 1;
                    sink(report?)?;
                }
            }
            Ok(())
        })
    }

    /// The prefix store for K, loaded once.
    ///
    /// Errors: a prefix directory that cannot be loaded (exit 2).
    fn store(&self, k: usize) -> Result<Arc<PrefixStore>, CliError> {
        let mut stores = self.stores.lock().unwrap_or_else(PoisonError::into_inner);
        let store = stores.entry(k).or_insert_with(|| {
            PrefixStore::load(&self.prefix_dirs, k)
                .map(Arc::new)
                .map_err(|e| format!("loading prefixes: {e}"))
        });
        store.clone().map_err(CliError::Usage)
    }

    /// Replays one file.
    ///
    /// A file without a `session` record (not a trace, or empty) is skipped with a note, and
    /// so are lines that are not records (a torn last line, a line torn by a crash before a
    /// restart); a file that cannot be read, and a record that cannot be replayed, count as
    /// unreadable.
    ///
    /// Errors: a prefix directory that cannot be loaded (exit 2).
    fn file(&self, path: &Path) -> Result<FileReport, CliError> {
        let mut report = FileReport::default();
        let (lines, summary) = (&mut report.lines, &mut report.summary);
        summary.files += 1;
        let mut reader = match TraceReader::open(path) {
            Ok(r) => r,
            Err(e) => {
                summary.unreadable += 1;
                lines.push(format!("{}: unreadable: {e}", path.display()));
                return Ok(report);
            }
        };
        let Some(session) = reader.session().cloned() else {
            lines.push(format!(
                "{}: note: not a trace (no session record), skipped",
                path.display()
            ));
            return Ok(report);
        };
        if !reader.invalid_lines().is_empty() {
            // Lines torn by a crash before a restart (the proxy then ends the line and goes
            // on); the records around them stand on their own.
            lines.push(format!(
                "{}: note: lines {:?} are not records (torn by a crash?), skipped",
                path.display(),
                reader.invalid_lines()
            ));
        }
        if reader.torn_tail() {
            // A write cut short by a crash: expected, skipped, not counted as unreadable.
            lines.push(format!("{}: note: torn last line skipped", path.display()));
        }
        let format_name = session.format.as_str();
        let Some(format) = FORMATS.into_iter().find(|f| f.name() == format_name) else {
            summary.unreadable += 1;
            lines.push(format!(
                "{}: unknown format {format_name:?} in the session record",
                path.display()
            ));
            return Ok(report);
        };
        let k = session.prefix_k.unwrap_or(DEFAULT_PREFIX_K);
        let stem = crate::trace::read::trace_stem(path);
        let mut file = FileReplay {
            path,
            config: PromptConfig {
                profile: ProfileChoice::Named(match session.profile.as_str() {
                    "" => "generic".into(),
                    profile => profile.into(),
                }),
                format,
                prefixes: self.prefix_dirs.clone(),
                // Replay re-renders prompts; task identification does not change them.
                tasks: Vec::new(),
                prefix_k: k,
            },
            store: self.store(k)?,
            passthrough: session.mode == Some(SessionMode::Passthrough),
            // The file's stem is the session id the pipeline remembered turns under.
            session: SessionId::from_recorded(stem).unwrap_or_else(SessionId::mint),
            sessions: SessionIndex::new(DEFAULT_INDEX_CAPACITY),
            current: None,
            nudged: Vec::new(),
            recorded_prefix: session.prefix.as_ref().map(|p| p.id.clone()),
            prefix_checked: false,
        };
        while let Some(record) = reader.next_record() {
            let record = match record {
                Ok(r) => r,
                Err(e) => {
                    summary.unreadable += 1;
                    lines.push(format!("unreadable: {e}"));
                    continue;
                }
            };
            let outcome = match &record.body {
                Body::Nudge(nudge) => {
                    file.nudged.push((
                        nudge.step as u64,
                        nudge.attempt as u64,
                        file.current.take(),
                        nudge.kind,
                    ));
                    continue;
                }
                Body::Step(_) | Body::SideCall(_) => self.step(&mut file, &reader, &record),
                _ => continue,
            };
            summary.steps += 1;
            let label = label(path, &record);
            match outcome {
                Err(message) => {
                    summary.unreadable += 1;
                    lines.push(format!("{label}: unreadable: {message}"));
                }
                Ok(check) => {
                    summary.prompt_differences += usize::from(check.prompt.is_some());
                    summary.parse_differences += usize::from(check.parse.is_some());
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
        Ok(report)
    }
}

/// `file:line step S attempt A` (or `side_call KIND step S`).
fn label(path: &Path, record: &Record) -> String {
    let call = record.call();
    let step = call.map_or(0, |c| c.step);
    match &record.body {
        Body::SideCall(call) => format!(
            "{}:{} side_call {} step {step}",
            path.display(),
            record.line,
            call.kind.map_or("?", |k| k.as_str())
        ),
        _ => format!(
            "{}:{} step {step} attempt {}",
            path.display(),
            record.line,
            call.map_or(0, |c| c.attempt)
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
