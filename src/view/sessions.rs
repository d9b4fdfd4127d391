//! The session list: one [`SessionSummary`] per trace file, built from the report's
//! [`Trajectory`] and [`Behaviour`] (the same definitions as `asap-proxy report`), cached per
//! file by modification time and size so a reload only reads files that changed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;

use crate::report::load::{self, LoadError};
use crate::report::{number_runs, Behaviour, Outcome, Results, Trajectory};
use crate::trace::read::TraceReader;
use crate::trace::{RunSource, SessionRecord};

/// How a trajectory ended, for display: a short text and a CSS class (`ok`, `bad`, `warn`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ending {
    /// `submitted`, `terminated: <reason>`, `error`, `stopped without submission`.
    pub text: String,
    /// `ok`, `bad` or `warn`.
    pub class: &'static str,
}

/// One session as the list shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SessionSummary {
    /// Session id (the trace file's stem).
    pub session: String,
    /// The trace file.
    pub path: String,
    /// Task key (`instance_id`, else `task-<hash>`).
    pub task: String,
    /// The first user message of the session (the task as the scaffold wrote it).
    pub task_text: String,
    /// `serve --label`, else the request's model.
    pub label: String,
    /// The request's `model` field.
    pub model: Option<String>,
    /// Run index as `report` numbers it (the client's `X-ASAP-Run`, else by start time).
    pub run: usize,
    /// `header` or `order` (see `docs/trace-format.md`).
    pub run_source: String,
    /// Scaffold profile that served the session.
    pub profile: String,
    /// Interaction format (`markdown_xml`, `xml`, `markdown`, `json`).
    pub format: String,
    /// `id (K=k)` of the reference prefix rendered, if any.
    pub prefix: Option<String>,
    /// Unix milliseconds of the session record.
    pub start_ms: u64,
    /// `start_ms` as `YYYY-MM-DD HH:MM:SS` UTC.
    pub started: String,
    /// Distinct steps (actions asked for) among the model's turns.
    pub steps: usize,
    /// The report's behaviour flags and counts for this trajectory.
    pub behaviour: Behaviour,
    /// Submitted, terminated (reason), error, or stopped without submission.
    pub ending: Ending,
    /// With `--results`: resolved or not (`None`: no results given, or none for this run).
    pub resolved: Option<bool>,
    /// With `--results`: whether a result exists for this run.
    pub has_result: bool,
    /// Lines the reader skipped (invalid, torn last line).
    pub notes: Vec<String>,
}

/// The list page's data.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SessionList {
    /// Newest first.
    pub sessions: Vec<SessionSummary>,
    /// Files skipped, with why.
    pub skipped: Vec<String>,
    /// The directories read.
    pub dirs: Vec<String>,
    /// Whether `--results` were given.
    pub has_results: bool,
}

/// What a file's last read produced (kept until the file changes).
#[derive(Debug, Clone)]
enum Loaded {
    /// The trajectory (without turns, for run numbering) and its summary.
    Session(Box<(Trajectory, SessionSummary)>),
    /// Not a trace (no session record) or unreadable: why.
    Skipped(String),
}

/// Per-file cache: path → (modified, length, what was read).
#[derive(Debug, Default)]
pub(super) struct Cache {
    files: HashMap<PathBuf, (Option<SystemTime>, u64, Loaded)>,
}

impl Cache {
    /// The list of sessions in `files`; only files changed since the last call are read.
    /// `results` fills [`SessionSummary::resolved`].
    pub(super) fn list(&mut self, files: &[PathBuf], results: Option<&Results>) -> SessionList {
        let mut next = HashMap::with_capacity(files.len());
        for path in files {
            let (modified, len) = std::fs::metadata(path)
                .map(|m| (m.modified().ok(), m.len()))
                .unwrap_or((None, 0));
            let loaded = match self.files.remove(path) {
                Some((m, l, loaded)) if m == modified && l == len && modified.is_some() => loaded,
                _ => read(path),
            };
            next.insert(path.clone(), (modified, len, loaded));
        }
        self.files = next;
        let mut list = SessionList {
            has_results: results.is_some(),
            ..SessionList::default()
        };
        let mut trajectories = Vec::new();
        for path in files {
            match self.files.get(path).map(|(_, _, l)| l) {
                Some(Loaded::Session(both)) => {
                    trajectories.push(both.0.clone());
                    list.sessions.push(both.1.clone());
                }
                Some(Loaded::Skipped(why)) => list.skipped.push(why.clone()),
                None => {}
            }
        }
        for ((summary, trajectory), run) in list
            .sessions
            .iter_mut()
            .zip(&trajectories)
            .zip(number_runs(&trajectories))
        {
            summary.run = run;
            if let Some(results) = results {
                let outcome: Option<Outcome> =
                    results.lookup(&trajectory.label, &trajectory.instance_id, run);
                summary.has_result = outcome.is_some();
                summary.resolved = Some(outcome.is_some_and(|o| o.resolved));
            }
        }
        list.sessions.sort_by(|a, b| {
            (b.start_ms, &b.session, &b.path).cmp(&(a.start_ms, &a.session, &a.path))
        });
        list
    }
}

fn read(path: &Path) -> Loaded {
    let shown = path.display();
    match load::trajectory_with_notes(path) {
        Ok((Some(trajectory), notes)) => {
            let record = session_record(path);
            let mut summary = summarize(path, &trajectory, record.as_ref());
            if !notes.invalid_lines.is_empty() {
                summary
                    .notes
                    .push(format!("invalid lines skipped: {:?}", notes.invalid_lines));
            }
            if notes.torn_tail {
                summary
                    .notes
                    .push("torn last line (a cut-short write) skipped".into());
            }
            let light = Trajectory {
                attempts: Vec::new(),
                ..trajectory
            };
            Loaded::Session(Box::new((light, summary)))
        }
        Ok((None, notes)) if notes.subagent => Loaded::Skipped(format!(
            "{shown}: a subagent's session (left out, as report leaves it out)"
        )),
        Ok((None, notes)) if notes.side_calls_only => Loaded::Skipped(format!(
            "{shown}: side calls only (a client's title request), no trajectory"
        )),
        Ok((None, _)) => Loaded::Skipped(format!("{shown}: no session record (not a trace?)")),
        Err(LoadError::Io { source, .. }) => Loaded::Skipped(format!("{shown}: {source}")),
        Err(LoadError::Invalid { message, .. }) => Loaded::Skipped(format!("{shown}: {message}")),
    }
}

/// The file's `session` record, read from its first line only (the writer puts it there),
/// with the trace reader.
pub(super) fn session_record(path: &Path) -> Option<SessionRecord> {
    let first = crate::trace::read::first_line(path)?;
    let reader = TraceReader::from_bytes(path, &first).ok()?;
    reader.session().cloned()
}

/// The summary of one trajectory; `record` is its session record (`None`: unreadable).
pub(super) fn summarize(
    path: &Path,
    trajectory: &Trajectory,
    record: Option<&SessionRecord>,
) -> SessionSummary {
    let behaviour = Behaviour::of(trajectory, None);
    let mut steps: Vec<usize> = trajectory.attempts.iter().map(|t| t.step).collect();
    steps.sort_unstable();
    steps.dedup();
    SessionSummary {
        session: trajectory.session.clone(),
        path: path.display().to_string(),
        task: trajectory.instance_id.clone(),
        task_text: record.map(|r| r.task_text.clone()).unwrap_or_default(),
        label: trajectory.label.clone(),
        model: record.and_then(|r| r.model.clone()),
        run: trajectory.run.unwrap_or(0),
        run_source: record
            .map(|r| match r.run_source {
                RunSource::Header => "header",
                RunSource::Order => "order",
            })
            .unwrap_or_default()
            .to_string(),
        profile: trajectory.profile.clone(),
        format: trajectory.format.clone(),
        prefix: trajectory
            .prefix
            .as_ref()
            .map(|(id, k)| format!("{id} (K={k})")),
        start_ms: trajectory.start_ms,
        started: crate::util::utc(trajectory.start_ms),
        steps: steps.len(),
        ending: ending(&behaviour),
        behaviour,
        resolved: None,
        has_result: false,
        notes: Vec::new(),
    }
}

/// The ending shown for a behaviour: the report's ending, with the proxy's termination
/// reason when it ended the run.
fn ending(b: &Behaviour) -> Ending {
    use crate::report::behaviour::Ending as E;
    let class = match b.ending {
        E::Submitted => "ok",
        E::StepCap | E::StoppedWithoutSubmission => "warn",
        _ => "bad",
    };
    let text = match (&b.termination, b.ending) {
        (_, E::Submitted) => "submitted".to_string(),
        (_, E::StoppedWithoutSubmission) => "stopped without submission".to_string(),
        (_, E::Error) => "error".to_string(),
        (Some(reason), _) => format!("terminated: {reason}"),
        (None, ending) => ending.as_str().replace('_', " "),
    };
    Ending { text, class }
}
