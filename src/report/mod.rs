//! `asap-proxy report`: the paper's metrics over trace logs (ASAP §4: Pass@k with the unbiased
//! estimator, Intersection@n, and the behaviour breakdown per trajectory).
//!
//! Input is a list of [`Trajectory`] values (one per session), built from trace files by
//! [`load`]; everything else here is pure and works on those values.

mod args;
pub mod behaviour;
mod csv;
pub mod failure;
pub mod html;
pub mod load;
pub mod metrics;
pub mod network;
pub mod output;
pub mod pair;
pub mod plots;
pub mod protocol;
pub mod ranks;
pub mod results;
mod rows;
mod shell;
pub mod summary;
pub mod testcmd;
pub mod uncertainty;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::error::CliError;
use crate::profile::Action;
use crate::session::NudgeKind;

pub use args::{trace_paths_and_results, ReportArgs, ReportFormat};
pub use behaviour::{Aggregate, Behaviour, Rate, Unit};
pub use metrics::{
    intersection, mean_pass_at_k, pass_at_k, stability, stability_class, Intersection, Stability,
    TaskCount,
};
pub use pair::{compare, PairReport, PairRow};
pub use results::{Outcome, Results};
pub use summary::{number_runs, LabelSummary, Report, TrajectoryRow};

/// One session's trajectory as the report sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Trajectory {
    /// The session id (the trace file's stem).
    pub session: String,
    /// Model or checkpoint label (`--label` of `serve`, else the request's `model`).
    pub label: String,
    /// Task key: the `instance_id` when known, else `task-<12 hex of sha256(task text)>`.
    pub instance_id: String,
    /// Run index given by the client (`X-ASAP-Run` header); `None` when the proxy only knew
    /// the order of sessions (the report then numbers runs by start time).
    pub run: Option<usize>,
    /// Unix milliseconds of the session's first record (orders runs without an index).
    pub start_ms: u64,
    pub profile: String,
    pub format: String,
    /// Prefix id and K, when a prefix was rendered.
    pub prefix: Option<(String, usize)>,
    /// The first user message of the session (the task statement), for telling files the
    /// task names (existing files) from files the trajectory made.
    pub task_text: String,
    /// The protocol the session ran under (session record; see [`protocol`]).
    pub protocol: protocol::SessionProtocol,
    /// One entry per completion call of the model (an attempt), in order (side calls
    /// excluded).
    pub attempts: Vec<Attempt>,
    /// Why the proxy ended the trajectory (`Termination`'s snake_case `reason`), if it did.
    pub termination: Option<String>,
    /// The last error returned to the client (backend failure, bad request), if the
    /// trajectory's last step failed.
    pub error: Option<String>,
}

/// `report --steps`: adds to each trajectory of the JSON document (matched by session) its
/// `profile`, `termination`, `error` and `steps`, one per completion call and one per further
/// tool call of a reply (`continued`): `step`, `attempt`, `action` (neutral form, or null),
/// `parse_error` (class, or null), `nudge` (kind, or null), `terminated`, `is_edit`,
/// `is_submit`, `continued`.
pub fn add_steps(json: &mut serde_json::Value, trajectories: &[Trajectory]) {
    let Some(rows) = json
        .get_mut("trajectories")
        .and_then(serde_json::Value::as_array_mut)
    else {
        return;
    };
    for row in rows {
        let Some(t) = row
            .get("session")
            .and_then(serde_json::Value::as_str)
            .and_then(|s| trajectories.iter().find(|t| t.session == s))
        else {
            continue;
        };
        let steps: Vec<serde_json::Value> = t
            .attempts
            .iter()
            .map(|turn| {
                serde_json::json!({
                    "step": turn.step,
                    "attempt": turn.attempt,
                    "action": turn.action,
                    "parse_error": turn.parse_error,
                    "nudge": turn.nudge,
                    "terminated": turn.terminated,
                    "is_edit": turn.is_edit,
                    "is_submit": turn.is_submit,
                    "continued": turn.continued,
                })
            })
            .collect();
        if let serde_json::Value::Object(m) = row {
            m.insert("profile".into(), t.profile.clone().into());
            m.insert("termination".into(), serde_json::json!(t.termination));
            m.insert("error".into(), serde_json::json!(t.error));
            m.insert("steps".into(), steps.into());
        }
    }
}

/// One completion call of the model within a trajectory.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Attempt {
    /// 0-based step (actions before it in the history).
    pub step: usize,
    /// Completion call within the request: 0, then 1 and 2 after nudges.
    pub attempt: usize,
    /// `None` when the completion parsed into an action; else the parse failure class
    /// (`no_action`, `unknown_tool`, `unclosed_tag`, `missing_parameter`,
    /// `invalid_parameter`).
    pub parse_error: Option<String>,
    /// The parsed action in neutral form, when parsing succeeded.
    pub action: Option<Action>,
    /// The shell command, when the action is a call of the profile's shell tool.
    pub shell_command: Option<String>,
    /// The action modifies a file (the policy's edit rule: an editor command that writes, or
    /// a shell command that writes files).
    pub is_edit: bool,
    /// The files the action writes ([`crate::policy::edit_targets`]); empty for an edit
    /// built without them (then it counts as one in-place write of an unknown file).
    pub edit_targets: Vec<crate::policy::WriteTarget>,
    /// The action is one the scaffold takes as its finish action: `<submit/>`, or a shell
    /// command it reads as one (mini-swe-agent's `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`).
    pub is_submit: bool,
    /// The output was rejected with this nudge (not sent to the scaffold).
    pub nudge: Option<NudgeKind>,
    /// The proxy ended the trajectory with this output.
    pub terminated: bool,
    /// What the scaffold sent back for this action (the tool result in the next request),
    /// when there was a next request.
    pub observation: Option<String>,
    /// A further tool call of the previous completion (passthrough `--tool-calls all`): an
    /// action the scaffold ran, at its own step, but not a turn of the model.
    pub continued: bool,
    /// In the trajectory's last reply, before a submission of the same reply: the scaffold
    /// ran it and then ended the run, so its result never came back (an edit there counts as
    /// successful; docs/report.md "Successful edit").
    pub ran_before_submit: bool,
}

/// Runs `asap-proxy report`: reads the traces (with a progress bar on a terminal), reads
/// `--results`, computes the [`Report`], prints it to standard output in `--format`, and
/// writes `--html` and `--plots`. Warnings (unreadable trace records skipped, and the report's own
/// [`Report::warnings`]) go to standard error.
///
/// Errors ([`CliError`], by exit code): 2 for bad arguments or unreadable inputs (no trace
/// files, a results file that cannot be read or parsed, an unknown `--pair` label, an empty,
/// unreadable or malformed `--tasks` file) and for labels compared under different protocols
/// without `--allow-protocol-mismatch`, and a `--viewer-url` that is not http(s); 1 for
/// failures writing the output, the page or the plots.
pub fn run(args: &ReportArgs) -> Result<(), CliError> {
    // Before any input is read: a bad combination of flags is told at once.
    if args.steps && args.format != ReportFormat::Json {
        return Err(CliError::Usage("--steps needs --format json".into()));
    }
    let (dirs, result_files) =
        trace_paths_and_results(&args.dirs, &args.results).map_err(CliError::Usage)?;
    html::check_viewer_url(&args.viewer_url).map_err(CliError::Usage)?;
    if args.k.contains(&0) {
        return Err(CliError::Usage(
            "--k: Pass@k needs k of 1 or more (leave --k out for every k up to the runs)".into(),
        ));
    }
    let files = crate::trace::read::trace_files(&dirs).map_err(CliError::input)?;
    let (trajectories, skipped, left_out) = load_all(&files)?;
    let mut stderr = std::io::stderr();
    for line in &skipped {
        let _ = writeln!(stderr, "warning: {line}");
    }
    if trajectories.is_empty() {
        for line in &left_out {
            let _ = writeln!(stderr, "warning: {line}");
        }
        return Err(CliError::Usage(format!(
            "no trajectories in {} trace file(s) under the given paths",
            files.len()
        )));
    }
    let results = if result_files.is_empty() {
        None
    } else {
        Some(results::load(&result_files, &labels_of(&trajectories)).map_err(CliError::input)?)
    };
    let tasks = args.tasks.as_deref().map(read_task_set).transpose()?;
    if let Some(unknown) = args
        .order
        .iter()
        .find(|l| !trajectories.iter().any(|t| &t.label == *l))
    {
        return Err(CliError::Usage(format!(
            "--order names {unknown:?}, which no trajectory has (labels: {})",
            labels_of(&trajectories).join(", ")
        )));
    }
    let rank_groups = args
        .rank_groups
        .as_deref()
        .map(read_rank_groups)
        .transpose()?
        .unwrap_or_default();
    let options = summary::Options {
        ks: args.k.clone(),
        tasks,
        step_limit: args.step_limit,
        order: args.order.clone(),
        rank_groups,
    };
    let mut report = Report::build_with(&trajectories, results.as_ref(), &options);
    // What the rules leave out is part of what the numbers mean: in the report, not only on
    // standard error.
    report.warnings.extend(left_out);
    for (label, _, _) in &options.rank_groups {
        if report.label(label).is_none() {
            report.warnings.push(format!(
                "--rank-groups names {label:?}, which no trajectory has: left out"
            ));
        }
    }
    if let Some(path) = &args.reference {
        let (scores, decimals) = read_reference(path)?;
        for unknown in report.with_reference(&path.display().to_string(), &scores, decimals) {
            report.warnings.push(format!(
                "--reference names {unknown:?}, which no trajectory has: not shown"
            ));
        }
    }
    // Only the pairs are compared: the other labels' protocols do not matter.
    let mut pair_differences: Vec<String> = Vec::new();
    for pair in args.pair.chunks(2) {
        if let [a, b] = pair {
            let mut compared = compare(&report, a, b).map_err(CliError::Usage)?;
            let differences = protocol::differences(
                (
                    a,
                    &report
                        .label(a)
                        .map(|l| l.protocol.clone())
                        .unwrap_or_default(),
                ),
                (
                    b,
                    &report
                        .label(b)
                        .map(|l| l.protocol.clone())
                        .unwrap_or_default(),
                ),
            );
            // Base through the proxy against post-trained through passthrough: the
            // protocols differ by design; the report says so instead of refusing.
            if compared.base_vs_post {
                compared.protocol_notes = differences;
            } else {
                pair_differences.extend(differences);
            }
            report.pairs.push(compared);
        }
    }
    if !report.pairs.is_empty() {
        report.protocol_differences = pair_differences;
    }
    for line in &report.warnings {
        let _ = writeln!(stderr, "warning: {line}");
    }
    if !report.protocol_differences.is_empty() {
        let lines = report.protocol_differences.join("\n  ");
        if !args.allow_protocol_mismatch {
            return Err(CliError::Usage(format!(
                "the labels compared ran under different protocols:\n  {lines}\n\
                     compare them anyway with --allow-protocol-mismatch (the differences are \
                     then printed above the tables)"
            )));
        }
        let _ = writeln!(
            stderr,
            "warning: comparing labels with different protocols:\n  {lines}"
        );
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.steps {
        let mut json = output::to_json(&report);
        add_steps(&mut json, &trajectories);
        serde_json::to_writer_pretty(&mut out, &json)
            .map_err(std::io::Error::other)
            .and_then(|()| writeln!(out))
            .and_then(|()| out.flush())
            .map_err(CliError::io("writing the report"))?;
    } else {
        output::write(&report, args.format, &mut out)
            .and_then(|()| out.flush())
            .map_err(CliError::io("writing the report"))?;
    }
    if let Some(path) = &args.html {
        let page = html::render(&output::to_json(&report), &args.viewer_url)
            .map_err(CliError::internal)?;
        std::fs::write(path, page)
            .map_err(CliError::io(format!("writing --html {}", path.display())))?;
        let _ = writeln!(stderr, "wrote {}", path.display());
    }
    if let Some(dir) = &args.plots {
        let written = plots::write(&report, dir).map_err(CliError::internal)?;
        if !report.has_results {
            let _ = writeln!(stderr, "note: no --results, so no pass_at_k.svg");
        }
        for path in written {
            let _ = writeln!(stderr, "wrote {}", path.display());
        }
    }
    Ok(())
}

/// Reads `--tasks FILE`: instance ids one a line; blank lines, `#` comments (whole lines or
/// after an id) and a UTF-8 byte-order mark skipped.
///
/// Errors: the file cannot be read, holds no id, or a line holds more than one word (exit 2).
/// `--reference FILE`: `label,score` lines (comma or tab; `#` comments and blank lines
/// skipped; the first other line is a header when its score field holds no digit; a score may
/// end in `%`; a label may be in double quotes). Errors (exit 2): a malformed line, a label
/// given twice, no score at all.
fn read_reference(path: &std::path::Path) -> Result<(Vec<(String, f64)>, usize), CliError> {
    let text = std::fs::read_to_string(path).map_err(CliError::unreadable(format!(
        "reading --reference {}",
        path.display()
    )))?;
    let mut rows: Vec<(String, f64)> = Vec::new();
    let mut decimals = 0;
    let mut first = true;
    for (i, line) in text.trim_start_matches('\u{feff}').lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let is_first = std::mem::replace(&mut first, false);
        let bad = |why: &str| {
            CliError::Usage(format!(
                "--reference {} line {}: {line:?} {why}",
                path.display(),
                i + 1
            ))
        };
        let (label, score) = line
            .split_once([',', '\t'])
            .ok_or_else(|| bad("is not `label,score`"))?;
        let score = score.trim();
        let number = score.strip_suffix('%').unwrap_or(score).trim();
        let value = number.parse::<f64>().ok().filter(|v| v.is_finite());
        // A header names its column (`score`, `pass@1`, `SWE-bench %`): not a number and not
        // starting like one, so a malformed first number (`40.5x`) is an error, not a header.
        let starts_like_a_number =
            score.starts_with(|c: char| c.is_ascii_digit() || "+-.".contains(c));
        if is_first && value.is_none() && !starts_like_a_number {
            continue;
        }
        let value =
            value.ok_or_else(|| bad("is not `label,score` with a finite number as the score"))?;
        decimals = decimals.max(decimals_of(number));
        let label = label.trim();
        let label = label
            .strip_prefix('"')
            .and_then(|l| l.strip_suffix('"'))
            .unwrap_or(label);
        if rows.iter().any(|(l, _)| l == label) {
            return Err(bad("gives a label a second score"));
        }
        rows.push((label.to_string(), value));
    }
    if rows.is_empty() {
        return Err(CliError::Usage(format!(
            "--reference {}: no `label,score` line",
            path.display()
        )));
    }
    Ok((rows, decimals))
}

/// Decimals a number was written with: digits after the point, plus the places a negative
/// exponent shifts them (`1.5e-3` → 4); at most 6.
fn decimals_of(number: &str) -> usize {
    let (mantissa, exponent) = number
        .split_once(['e', 'E'])
        .map_or((number, 0), |(m, e)| (m, e.parse::<i64>().unwrap_or(0)));
    let after = mantissa.split_once('.').map_or(0, |(_, f)| f.len()) as i64;
    (after - exponent).clamp(0, 6) as usize
}

/// `--rank-groups FILE`: `label,model,group` lines (comma or tab; `#` comments and blank lines
/// skipped; a first line `label,model,group` is the header). Errors (exit 2): a line without
/// three non-empty fields, a label given twice.
fn read_rank_groups(path: &std::path::Path) -> Result<Vec<(String, String, String)>, CliError> {
    let text = std::fs::read_to_string(path).map_err(CliError::unreadable(format!(
        "reading --rank-groups {}",
        path.display()
    )))?;
    let mut rows: Vec<(String, String, String)> = Vec::new();
    for (i, line) in text.trim_start_matches('\u{feff}').lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split([',', '\t']).map(str::trim).collect();
        if rows.is_empty()
            && fields
                .iter()
                .map(|f| f.to_ascii_lowercase())
                .eq(["label", "model", "group"])
        {
            continue;
        }
        let bad = |why: &str| {
            CliError::Usage(format!(
                "--rank-groups {} line {}: {line:?} {why}",
                path.display(),
                i + 1
            ))
        };
        let [label, model, group] = fields[..] else {
            return Err(bad("is not `label,model,group`"));
        };
        if label.is_empty() || model.is_empty() || group.is_empty() {
            return Err(bad("has an empty field"));
        }
        if rows.iter().any(|(l, _, _)| l == label) {
            return Err(bad("gives a label a second time"));
        }
        rows.push((label.into(), model.into(), group.into()));
    }
    Ok(rows)
}

fn read_task_set(path: &std::path::Path) -> Result<Vec<String>, CliError> {
    let text = std::fs::read_to_string(path).map_err(CliError::unreadable(format!(
        "reading --tasks {}",
        path.display()
    )))?;
    let mut ids = Vec::new();
    for (i, line) in text.trim_start_matches('\u{feff}').lines().enumerate() {
        let id = line.split('#').next().unwrap_or_default().trim();
        if id.contains(char::is_whitespace) {
            return Err(CliError::Usage(format!(
                "--tasks {} line {}: {id:?} is not one instance id (one id a line, no spaces)",
                path.display(),
                i + 1
            )));
        }
        if !id.is_empty() {
            ids.push(id.to_string());
        }
    }
    if ids.is_empty() {
        return Err(CliError::Usage(format!(
            "--tasks {}: no instance ids",
            path.display()
        )));
    }
    Ok(ids)
}

/// Trajectories of all files (in file order), what to warn about, with the file (files
/// skipped as invalid or as holding no session, and lines skipped in the files read), and
/// what the numbers leave out by rule (subagents' sessions, files of side calls only), which
/// the report itself lists among its warnings. A file that cannot be read at all is an error
/// (exit 2).
type Loaded = (Vec<Trajectory>, Vec<String>, Vec<String>);

fn load_all(files: &[PathBuf]) -> Result<Loaded, CliError> {
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::with_draw_target(Some(files.len() as u64), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} trace files {eta}") {
        bar.set_style(style);
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(16);
    let chunk = files.len().div_ceil(threads).max(1);
    type Part = Vec<(PathBuf, Result<load::Loaded, load::LoadError>)>;
    let parts: Vec<Part> = std::thread::scope(|scope| {
        let handles: Vec<_> = files
            .chunks(chunk)
            .map(|part| {
                let bar = bar.clone();
                scope.spawn(move || {
                    part.iter()
                        .map(|path| {
                            let loaded = load::trajectory_with_notes(path);
                            bar.inc(1);
                            (path.clone(), loaded)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    bar.finish_and_clear();
    let mut trajectories = Vec::new();
    let mut skipped = Vec::new();
    let (mut side_calls_only, mut subagents) = (0usize, 0usize);
    for (path, loaded) in parts.into_iter().flatten() {
        match loaded {
            Ok((None, notes)) if notes.side_calls_only => side_calls_only += 1,
            Ok((None, notes)) if notes.subagent => subagents += 1,
            Ok((None, _)) => {
                let path = path.display();
                skipped.push(format!("skipped {path}: no session record (not a trace?)"));
            }
            Ok((Some(trajectory), notes)) => {
                let path = path.display();
                if !notes.invalid_lines.is_empty() {
                    let lines = notes.invalid_lines;
                    skipped.push(format!("{path}: invalid lines {lines:?} skipped"));
                }
                if notes.torn_tail {
                    skipped.push(format!(
                        "{path}: torn last line (a cut-short write) skipped"
                    ));
                }
                trajectories.push(trajectory);
            }
            Err(e @ load::LoadError::Io { .. }) => return Err(CliError::input(e)),
            Err(load::LoadError::Invalid { message, .. }) => {
                skipped.push(format!("skipped {}: {message}", path.display()))
            }
        }
    }
    let mut left_out = Vec::new();
    if subagents > 0 {
        left_out.push(format!(
            "left out {subagents} subagent session(s): a subagent's work is its parent \
             agent's, whose trajectory is the one measured"
        ));
    }
    if side_calls_only > 0 {
        left_out.push(format!(
            "left out {side_calls_only} trace file(s) of side calls only (a client's title \
             requests): no trajectory"
        ));
    }
    Ok((trajectories, skipped, left_out))
}

/// The labels of the trajectories, sorted, once each.
fn labels_of(trajectories: &[Trajectory]) -> Vec<String> {
    let mut labels: Vec<String> = trajectories.iter().map(|t| t.label.clone()).collect();
    labels.sort();
    labels.dedup();
    labels
}
