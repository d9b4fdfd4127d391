//! `asap-proxy prefix build`: reference trajectories → prefix files (JSONL, one [`Prefix`] a
//! line), cut to the first K steps, tool names in the neutral vocabulary, checked for gold-patch
//! leaks ([`super::leak`]).
//!
//! The leak check is on by default: without gold patches ([`BuildOptions::gold`]) the build
//! is refused unless [`BuildOptions::no_leak_check`] says so explicitly, and a task missing from
//! the gold file is rejected ("no gold patch: not checked") unless `no_leak_check` too. A
//! prefix whose thoughts, actions or observations contain a gold line is rejected unless
//! [`BuildOptions::allow_leaks`]. One prefix per task: a later input's prefix of a task already
//! written is rejected as a duplicate. [`Report::render`] documents the printed table.
//!
//! Inputs, recognised from their content (not their name):
//!
//! Task text: the problem statement when the first user message tags it (`<pr_description>`,
//! `<issue_description>`, `<issue>`, `<problem_statement>`), so a prefix recorded with one
//! scaffold's template still matches another's requests; else the whole message.
//!
//! - **SWE-agent** `.traj` (a JSON object with `trajectory`, or a retry run's `attempts`): one
//!   step per `trajectory` entry (`thought`, `action`, `observation`). The call is taken from
//!   the `tool_calls` of the matching assistant message in `history` (same `action` string);
//!   without one, the `action` string is parsed (`submit`; `str_replace_editor <command> <path>
//!   [--file_text …] [--old_str …] [--new_str …] [--insert_line N] [--view_range A B]`, shell
//!   quoted; anything else is a `bash` command). Instance id: `replay_config.problem_statement.id`,
//!   else the file stem. Task text: the problem statement (`replay_config.problem_statement.text`,
//!   else the `<pr_description>`/`<issue>` part of the first non-demo user message, else that
//!   whole message).
//! - **OpenHands SDK** event logs: a conversation directory (`events/event-*.json`) or a JSON
//!   array / JSONL of events with `kind`. One step per executed `ActionEvent` (`tool_name`,
//!   `tool_call.arguments`, else the `action` fields; `thought`), its observation the
//!   `ObservationEvent` (or `AgentErrorEvent`, `UserRejectObservation`) with the same
//!   `tool_call_id`. Task: the first user `MessageEvent`. Instance id: the file stem (directory
//!   name).
//! - **OpenHands V0** trajectories: a JSON array of events (`action`/`observation`, `args`,
//!   `content`, `cause`, `tool_call_metadata`), or evaluation output records (`instance_id`,
//!   `history`; JSONL: one trajectory a line). One step per agent action with a tool call
//!   (arguments from `tool_call_metadata.model_response`, else rebuilt from `args` for `run`,
//!   `run_ipython`, `read`, `edit`, `think`, `finish`, `browse`); its observation the event whose
//!   `cause` is the action's `id`. Task: the first user `message` action.
//! - **mini-swe-agent** trajectory files (`<instance>.traj.json`, a JSON object with
//!   `messages` and a `trajectory_format` of mini's, or `info.mini_version`; written by 1.x's
//!   `save_traj`, format `mini-swe-agent-1`, and 2.x's `DefaultAgent.save`, format
//!   `mini-swe-agent-1.1`). One step per assistant message with an action, tool `bash` with
//!   `command`; the completion command (`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT …`,
//!   early 1.x `echo MINI_SWE_AGENT_FINAL_OUTPUT`) is a `submit`. Text mode: the command
//!   mini ran (`extra.actions`, 2.x), else the one command block read back as the
//!   `mini_text` dialect reads it (```` ```bash ````, ```` ```mswea_bash_command ````,
//!   `<mswea_bash_command>`, `<bash_code>`; a 1.x reply with no block or several was rejected
//!   by mini and is skipped); the thought is the text before the block, without its
//!   `THOUGHT:` label. Tool-call mode (2.x): one step per call (the message's text as the
//!   thought of the first), its observation the `tool` message with the call's id. The
//!   observation is the next `user`/`tool` message, its `<returncode>`/`<output>` (or
//!   `<output_head>`/`<output_tail>`, `<exception>`) text template or `mini.yaml`'s JSON
//!   decoded into the output (a non-zero return code as `[exit status N]`), other text kept.
//!   Task: the first user message between the literal lines around `{{task}}` in the saved
//!   `info.config.agent.instance_template`, else the tagged statement, else the whole
//!   message. Instance id: `instance_id` (the SWE-bench batch runner's), else
//!   `info.instance_id`, else the file stem without `.traj`. Model:
//!   `info.config.model.model_name`; date: the first message's timestamp.
//! - **asap-proxy traces** (JSONL from [`crate::trace`], read as its typed records by
//!   [`crate::trace::read::TraceReader`], the unversioned first layout included;
//!   docs/trace-format.md, "Reading"): one step per `step` record with a `parse.action`
//!   (already neutral) whose `decision` is not `nudge` or `error`, up to a `terminate`; the
//!   thought is `parse.thought`; the observation is the last `<observation>` block of the
//!   prompt delta of the next record with a higher `step`. Task: the session record's
//!   `task_text`; a trace without it (the unversioned first layout, version 1 before it was
//!   recorded) falls back to the first prompt's text between `# Task` and `# Tools` (system
//!   text included unless the statement is tagged). Instance id: the session's `instance_id`,
//!   else its `task`, else the file stem. Date: the session record's time.
//!
//! Tool names go through the scaffold's profile ([`ResolvedProfile::from_scaffold`]: swe-agent,
//! openhands-sdk, openhands-codeact for V0, mini-swe-agent, or `--profile`), then a fixed
//! table for names the profile does not cover: `execute_bash`/`terminal` → `bash`, `file_editor` →
//! `str_replace_editor`, `finish` → `submit`; others are kept. OpenHands metadata parameters
//! (`security_risk`, `summary`) are dropped; `submit` keeps no arguments.

mod mini_swe_agent;
mod openhands;
mod swe_agent;
mod trace;

use mini_swe_agent::*;
use openhands::*;
use swe_agent::*;
use trace::*;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::leak::{check, GoldPatches, Leak, LeakCheck};
use super::{Prefix, PrefixAction, PrefixError, PrefixStep, Source};
use crate::openai::chat::Tool;
use crate::profile::Action;
use crate::profile::{
    Profile, ProfileError, Profiles, ResolvedProfile, EDITOR_TAG, SHELL_TAG, SUBMIT_TAG,
};

/// The name `prefix build` appends to `--out` for the set's provenance ([`Provenance`]).
pub const PROVENANCE_SUFFIX: &str = ".provenance.json";

/// Parameters that are scaffold metadata, never part of a neutral action.
pub const METADATA_PARAMETERS: [&str; 2] = ["security_risk", "summary"];

/// The input formats `prefix build` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    SweAgent,
    OpenHandsSdk,
    OpenHandsV0,
    MiniSweAgent,
    Trace,
}

impl InputFormat {
    /// Value of `source.scaffold`.
    pub fn scaffold(self) -> &'static str {
        match self {
            Self::SweAgent => "swe-agent",
            Self::OpenHandsSdk => "openhands-sdk",
            Self::OpenHandsV0 => "openhands-v0",
            Self::MiniSweAgent => "mini-swe-agent",
            Self::Trace => "asap-proxy",
        }
    }

    /// The profile whose tool names the trajectory uses (none: already neutral).
    pub fn profile(self) -> Option<&'static str> {
        match self {
            Self::SweAgent => Some("swe-agent"),
            Self::OpenHandsSdk => Some("openhands-sdk"),
            Self::OpenHandsV0 => Some("openhands-codeact"),
            Self::MiniSweAgent => Some("mini-swe-agent"),
            Self::Trace => None,
        }
    }
}

/// `prefix build` failure.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Prefix(#[from] PrefixError),
    #[error(transparent)]
    Profile(#[from] ProfileError),
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Usage(String),
}

impl BuildError {
    /// Whether the caller got something wrong (exit code 2) rather than the run failing.
    pub fn is_usage(&self) -> bool {
        matches!(self, Self::Usage(_) | Self::Profile(_))
    }
}

/// What `prefix build` does.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Trajectory files or directories.
    pub from: Vec<PathBuf>,
    /// Steps kept per prefix.
    pub k: usize,
    /// Output JSONL file.
    pub out: PathBuf,
    /// SWE-bench style gold patches for the leak check. Required unless `no_leak_check`.
    pub gold: Option<PathBuf>,
    /// Write leaking prefixes too, with `leaks` filled.
    pub allow_leaks: bool,
    /// Write prefixes that cannot be checked: all of them without `gold`, those of tasks
    /// missing from `gold` with it (tasks that have a gold patch are still checked).
    pub no_leak_check: bool,
    /// Profile that maps tool names, instead of the one of each input format.
    pub profile: Option<String>,
}

/// Whether and how one prefix was checked for leaks.
#[derive(Debug, Clone, PartialEq)]
pub enum Checked {
    /// Compared with its task's gold patch.
    Gold(LeakCheck),
    /// No gold patches given (`no_leak_check`): written unchecked.
    Off,
    /// The gold file has no patch for the task: rejected, or written unchecked with
    /// `no_leak_check`.
    NoGoldPatch,
}

impl Checked {
    /// Gold lines found; `None` when not checked.
    pub fn leaks(&self) -> Option<&[Leak]> {
        match self {
            Self::Gold(c) => Some(&c.leaks),
            Self::Off | Self::NoGoldPatch => None,
        }
    }
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportLine {
    pub instance_id: String,
    pub steps: usize,
    pub checked: Checked,
    pub kept: bool,
    /// Why a prefix was rejected other than for leaks, or why it was not checked.
    pub note: Option<String>,
}

/// Per-task outcome of a build.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub lines: Vec<ReportLine>,
}

impl Report {
    /// Prefixes written.
    pub fn kept(&self) -> usize {
        self.lines.iter().filter(|l| l.kept).count()
    }

    /// Prefixes not written.
    pub fn rejected(&self) -> usize {
        self.lines.len() - self.kept()
    }

    /// The table, one row per task, columns separated by at least two spaces:
    ///
    /// ```text
    /// instance_id          steps  gold_lines  leaks  status    checked
    /// slugify__slugify-7       5           3      3  rejected  thoughts, actions, observations of 5 steps
    /// leftpad__leftpad-12      4           5      0  kept      thoughts, actions, observations of 4 steps
    /// tally__tally-5           4           -      -  rejected  no gold patch: not checked
    /// total: 3 prefixes, 1 kept, 2 rejected, 1 with leaks, 1 not checked
    /// ```
    ///
    /// `gold_lines`: the non-trivial added lines of the task's gold patch that were compared;
    /// `leaks`: how many of them were found (the lines themselves are in [`Self::details`]);
    /// both `-` when not checked. `status`: `kept` (written) or `rejected`. `checked`: the
    /// parts of every step searched, or why nothing was: `not checked` for every row without
    /// gold patches (`--no-leak-check`), `no gold patch: not checked` for a task missing from
    /// the gold file. Every column but the last is one word, so rows split on whitespace.
    pub fn render(&self) -> String {
        let width = self
            .lines
            .iter()
            .map(|l| l.instance_id.chars().count())
            .chain(std::iter::once("instance_id".len()))
            .max()
            .unwrap_or(0);
        let mut out = format!(
            "{:<width$}  steps  gold_lines  leaks  status    checked\n",
            "instance_id"
        );
        for l in &self.lines {
            let (gold, leaks, checked) = match &l.checked {
                Checked::Gold(c) => (
                    c.compared.to_string(),
                    c.leaks.len().to_string(),
                    format!("thoughts, actions, observations of {} steps", c.steps),
                ),
                Checked::Off => ("-".into(), "-".into(), "not checked".into()),
                Checked::NoGoldPatch => {
                    ("-".into(), "-".into(), "no gold patch: not checked".into())
                }
            };
            let status = if l.kept { "kept" } else { "rejected" };
            let _ = writeln!(
                out,
                "{:<width$}  {:>5}  {gold:>10}  {leaks:>5}  {status:<8}  {checked}",
                l.instance_id, l.steps
            );
        }
        let leaking = self
            .lines
            .iter()
            .filter(|l| l.checked.leaks().is_some_and(|v| !v.is_empty()))
            .count();
        let unchecked = self
            .lines
            .iter()
            .filter(|l| l.checked.leaks().is_none())
            .count();
        let _ = writeln!(
            out,
            "total: {} prefixes, {} kept, {} rejected, {leaking} with leaks, {unchecked} not checked",
            self.lines.len(),
            self.kept(),
            self.rejected(),
        );
        out
    }

    /// Per task, for standard error: its note (`id: note`), then each leaked gold line with
    /// the first place it was found (`id: step N thought|action|observation leaks gold line:
    /// LINE`).
    pub fn details(&self) -> String {
        let mut out = String::new();
        for l in &self.lines {
            if let Some(note) = &l.note {
                let _ = writeln!(out, "{}: {note}", l.instance_id);
            }
            for leak in l.checked.leaks().into_iter().flatten() {
                let _ = writeln!(
                    out,
                    "{}: step {} {} leaks gold line: {}",
                    l.instance_id,
                    leak.step,
                    leak.part.name(),
                    leak.line
                );
            }
        }
        out
    }
}

/// Runs `prefix build`: reads every input, cuts to K, checks leaks, writes the kept prefixes
/// to `out` (JSONL) and returns the report.
///
/// Errors: [`BuildError::Usage`] (nothing read or written) for K = 0, no input, or neither
/// `gold` nor `no_leak_check`; unreadable inputs or gold file; an unwritable `out`.
pub fn build(opts: &BuildOptions) -> Result<Report, BuildError> {
    if opts.k == 0 {
        return Err(BuildError::Usage("--k must be at least 1".to_string()));
    }
    if opts.from.is_empty() {
        return Err(BuildError::Usage("no --from input given".to_string()));
    }
    // Unchecked prefixes must be a choice: a prefix that holds the fix silently inflates every
    // score measured with it.
    if opts.gold.is_none() && !opts.no_leak_check {
        return Err(BuildError::Usage(
            "no gold patches to check the prefixes against: pass --gold FILE (SWE-bench style \
             JSON/JSONL with instance_id and patch), or --no-leak-check to write them unchecked"
                .to_string(),
        ));
    }
    let profiles = Profiles::builtin()?;
    if let Some(name) = &opts.profile {
        profiles.get(name)?;
    }
    let gold = opts.gold.as_deref().map(GoldPatches::load).transpose()?;
    let mut prefixes = Vec::new();
    for path in &opts.from {
        prefixes.extend(read_path(path, opts.k, &profiles, opts.profile.as_deref())?);
    }
    let mut report = Report::default();
    let mut out = String::new();
    let mut written = std::collections::HashSet::new();
    for mut prefix in prefixes {
        let checked = match &gold {
            None => Checked::Off,
            Some(g) => match g.get(&prefix.instance_id) {
                Some(patch) => Checked::Gold(check(&prefix, patch)),
                None => Checked::NoGoldPatch,
            },
        };
        let (mut kept, mut note) = match &checked {
            Checked::Gold(c) => (c.leaks.is_empty() || opts.allow_leaks, None),
            Checked::Off => (true, None),
            Checked::NoGoldPatch => (
                opts.no_leak_check,
                Some("no gold patch: not checked".to_string()),
            ),
        };
        if prefix.steps.is_empty() {
            kept = false;
            note = Some("no steps".to_string());
        }
        // One prefix per task: the loader keeps one per `instance_id`, so a second would be
        // written but never served (and the set's size would not match its lines).
        if kept && written.contains(&prefix.instance_id) {
            kept = false;
            note = Some("duplicate: this task's prefix came from an earlier input".to_string());
        }
        if kept {
            written.insert(prefix.instance_id.clone());
            if let Checked::Gold(c) = &checked {
                prefix.leaks = c.lines();
            }
            let line = serde_json::to_string(&prefix).map_err(|e| BuildError::Write {
                path: opts.out.clone(),
                source: e.into(),
            })?;
            out.push_str(&line);
            out.push('\n');
        }
        report.lines.push(ReportLine {
            instance_id: prefix.instance_id,
            steps: prefix.steps.len(),
            checked,
            kept,
            note,
        });
    }
    let write = |source| BuildError::Write {
        path: opts.out.clone(),
        source,
    };
    if let Some(dir) = opts.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(write)?;
    }
    let provenance = Provenance::of(opts, &out, &report)?;
    std::fs::write(&opts.out, out).map_err(write)?;
    let path = provenance_path(&opts.out);
    let text = serde_json::to_string_pretty(&provenance).map_err(|e| BuildError::Write {
        path: path.clone(),
        source: e.into(),
    })?;
    std::fs::write(&path, text + "\n").map_err(|source| BuildError::Write { path, source })?;
    Ok(report)
}

/// Where `prefix build --out FILE` writes the set's provenance: `FILE.provenance.json` (the
/// prefix loader skips `*.provenance.json`).
pub fn provenance_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(PROVENANCE_SUFFIX);
    out.with_file_name(name)
}

/// The provenance of a built prefix set (issue 20: one prefix set per benchmark, shared by
/// every checkpoint): what `serve` will record for it, where it came from and how it was
/// checked. Written next to the prefixes as `<out>.provenance.json`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Provenance {
    /// The digest and size `serve` records in every session record (`prefix_set`) when its
    /// `--prefixes` directory holds this file alone ([`crate::prefix::PrefixStore::id`]).
    pub prefix_set: crate::trace::PrefixSetId,
    /// Steps kept per prefix (`--k`).
    pub k: usize,
    /// When the set was built: `YYYY-MM-DD HH:MM:SS UTC`.
    pub built: String,
    /// The reference models and scaffolds the prefixes came from (their `source`), each with
    /// the number of prefixes written.
    pub sources: Vec<SourceCount>,
    /// The inputs read (`--from`).
    pub inputs: Vec<PathBuf>,
    pub leak_check: LeakSummary,
    /// The proxy that built the set: version and, when known, the commit.
    pub proxy_version: String,
}

/// Prefixes written from one reference model and scaffold.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SourceCount {
    pub model: Option<String>,
    pub scaffold: Option<String>,
    pub prefixes: usize,
}

/// The leak check of a build, in counts (the per-task table is `prefix build`'s output).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LeakSummary {
    /// `--gold`, when given.
    pub gold: Option<PathBuf>,
    /// Prefixes compared with their task's gold patch.
    pub checked: usize,
    /// Prefixes written (kept).
    pub kept: usize,
    /// Prefixes not written (leaking, no gold patch, no steps).
    pub rejected: usize,
    /// Prefixes written although they contain gold lines (`--allow-leaks`).
    pub kept_with_leaks: usize,
    /// Prefixes written without a check (`--no-leak-check`).
    pub kept_unchecked: usize,
}

impl Provenance {
    /// The provenance of the prefixes in `written` (JSONL, as `build` writes them).
    fn of(opts: &BuildOptions, written: &str, report: &Report) -> Result<Self, BuildError> {
        let prefixes = super::parse_file(&opts.out.display().to_string(), written)?;
        let mut store = super::PrefixStore::load(&[], opts.k)?;
        let mut sources: Vec<SourceCount> = Vec::new();
        for prefix in prefixes {
            let (model, scaffold) = (prefix.source.model.clone(), prefix.source.scaffold.clone());
            match sources
                .iter_mut()
                .find(|s| s.model == model && s.scaffold == scaffold)
            {
                Some(s) => s.prefixes += 1,
                None => sources.push(SourceCount {
                    model,
                    scaffold,
                    prefixes: 1,
                }),
            }
            store.insert(prefix);
        }
        let kept = report.lines.iter().filter(|l| l.kept);
        Ok(Self {
            prefix_set: store.id(),
            k: opts.k,
            built: format!("{} UTC", crate::util::utc(crate::util::unix_ms())),
            sources,
            inputs: opts.from.clone(),
            leak_check: LeakSummary {
                gold: opts.gold.clone(),
                checked: report
                    .lines
                    .iter()
                    .filter(|l| matches!(l.checked, Checked::Gold(_)))
                    .count(),
                kept: report.kept(),
                rejected: report.rejected(),
                kept_with_leaks: kept
                    .clone()
                    .filter(|l| matches!(&l.checked, Checked::Gold(c) if !c.leaks.is_empty()))
                    .count(),
                kept_unchecked: kept
                    .filter(|l| !matches!(l.checked, Checked::Gold(_)))
                    .count(),
            },
            proxy_version: match option_env!("ASAP_BUILD_COMMIT").filter(|c| !c.is_empty()) {
                Some(commit) => format!("{} ({commit})", env!("CARGO_PKG_VERSION")),
                None => env!("CARGO_PKG_VERSION").to_string(),
            },
        })
    }
}

/// Reads one input (file or directory) into prefixes of at most `k` steps (all steps when `k`
/// is 0). `profile` overrides the profile of the input format for the tool-name mapping.
pub fn read_path(
    path: &Path,
    k: usize,
    profiles: &Profiles,
    profile: Option<&str>,
) -> Result<Vec<Prefix>, BuildError> {
    let (format, trajectories) = read_trajectories(path)?;
    let profile = match profile.or(format.profile()) {
        Some(name) if format != InputFormat::Trace => Some(profiles.get(name)?),
        _ => None,
    };
    Ok(trajectories
        .into_iter()
        .map(|t| t.into_prefix(format, k, profile))
        .collect())
}

/// Detects the format of an input and reads its trajectories (tool names as recorded).
pub fn read_trajectories(path: &Path) -> Result<(InputFormat, Vec<Trajectory>), BuildError> {
    let name = path.display().to_string();
    let bad = |message: &str| {
        BuildError::Prefix(PrefixError::Parse {
            path: name.clone(),
            message: message.to_string(),
        })
    };
    let stem = file_stem(path);
    if path.is_dir() {
        return read_sdk_dir(path, &stem);
    }
    let read_error = |source| PrefixError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut bytes = std::fs::read(path).map_err(read_error)?;
    if bytes.starts_with(&crate::trace::read::ZSTD_MAGIC) {
        bytes = crate::trace::read::zstd_text(&bytes);
    }
    let text = String::from_utf8(bytes)
        .map_err(|e| read_error(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    let docs: Vec<Value> = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Array(items)) => {
            return match classify_events(&items) {
                Some(InputFormat::OpenHandsSdk) => {
                    Ok((InputFormat::OpenHandsSdk, vec![read_sdk(&items, &stem)]))
                }
                Some(InputFormat::OpenHandsV0) => {
                    Ok((InputFormat::OpenHandsV0, vec![read_v0(&items, &stem, None)]))
                }
                _ => Err(bad("a JSON array that is neither OpenHands SDK events (`kind`) nor OpenHands V0 events (`action`/`observation`)")),
            };
        }
        Ok(doc) => vec![doc],
        Err(_) => jsonl(&text).map_err(|m| bad(&m))?,
    };
    let Some(first) = docs.first() else {
        return Err(bad("empty file"));
    };
    if is_trace_record(first) {
        return Ok((
            InputFormat::Trace,
            vec![read_trace(path, text.as_bytes(), &stem)?],
        ));
    }
    if is_mini_swe_agent(first) {
        let many = docs.len() > 1;
        return Ok((
            InputFormat::MiniSweAgent,
            docs.iter()
                .enumerate()
                .map(|(i, d)| read_mini_swe_agent(d, &numbered(&stem, i, many)))
                .collect(),
        ));
    }
    if first.get("trajectory").is_some() || first.get("attempts").is_some() {
        let many = docs.len() > 1;
        return Ok((
            InputFormat::SweAgent,
            docs.iter()
                .enumerate()
                .map(|(i, d)| read_swe_agent(d, &numbered(&stem, i, many)))
                .collect(),
        ));
    }
    if first.get("history").is_some_and(Value::is_array) {
        let many = docs.len() > 1;
        return Ok((
            InputFormat::OpenHandsV0,
            docs.iter()
                .enumerate()
                .map(|(i, d)| {
                    let events = d
                        .get("history")
                        .and_then(Value::as_array)
                        .map_or(&[][..], Vec::as_slice);
                    read_v0(events, &numbered(&stem, i, many), Some(d))
                })
                .collect(),
        ));
    }
    if let Some(events) = first.get("events").and_then(Value::as_array) {
        return Ok((InputFormat::OpenHandsSdk, vec![read_sdk(events, &stem)]));
    }
    match classify_events(&docs) {
        Some(InputFormat::OpenHandsSdk) => {
            Ok((InputFormat::OpenHandsSdk, vec![read_sdk(&docs, &stem)]))
        }
        Some(InputFormat::OpenHandsV0) => {
            Ok((InputFormat::OpenHandsV0, vec![read_v0(&docs, &stem, None)]))
        }
        _ => Err(bad(
            "unknown trajectory format (expected a SWE-agent .traj, a mini-swe-agent .traj.json, OpenHands SDK events, OpenHands V0 events or an asap-proxy trace)",
        )),
    }
}

/// One reference trajectory, tool names as the scaffold recorded them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trajectory {
    pub instance_id: String,
    pub task_text: String,
    pub model: Option<String>,
    pub date: Option<String>,
    pub steps: Vec<RawStep>,
}

/// One step as recorded: the scaffold's tool name and arguments.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawStep {
    pub thought: String,
    pub tool: String,
    pub arguments: Map<String, Value>,
    pub observation: String,
}

impl Trajectory {
    /// The prefix of the first `k` steps (all when `k` is 0), tool names mapped through
    /// `profile` and the fixed table (not for traces, which are neutral already).
    pub fn into_prefix(self, format: InputFormat, k: usize, profile: Option<&Profile>) -> Prefix {
        let take = if k == 0 { usize::MAX } else { k };
        let raw: Vec<RawStep> = self.steps.into_iter().take(take).collect();
        let mut steps: Vec<PrefixStep> = if format == InputFormat::Trace {
            raw.into_iter().map(neutral_step).collect()
        } else {
            map_steps(raw, profile)
        };
        // A prefix shows how a task starts, never how it ends: cut before a submit.
        if let Some(end) = steps.iter().position(|s| s.action.tool == SUBMIT_TAG) {
            steps.truncate(end);
        }
        Prefix {
            instance_id: self.instance_id,
            task_text: self.task_text.trim().to_string(),
            source: Source {
                model: self.model,
                date: self.date,
                scaffold: Some(format.scaffold().to_string()),
            },
            steps,
            leaks: Vec::new(),
            demo_task: None,
            example: None,
        }
    }
}

fn neutral_step(s: RawStep) -> PrefixStep {
    let arguments = if s.tool == SUBMIT_TAG {
        Map::new()
    } else {
        s.arguments
    };
    PrefixStep {
        thought: s.thought.trim().to_string(),
        action: PrefixAction {
            tool: s.tool,
            arguments,
        },
        observation: s.observation,
    }
}

/// The fixed name table for tools a profile does not cover.
pub fn neutral_name(name: &str) -> &str {
    match name {
        "execute_bash" | "terminal" | "bash" => SHELL_TAG,
        "file_editor" | "str_replace_editor" => EDITOR_TAG,
        "finish" | "submit" => SUBMIT_TAG,
        other => other,
    }
}

fn map_steps(raw: Vec<RawStep>, profile: Option<&Profile>) -> Vec<PrefixStep> {
    let tools = profile.map(|p| ResolvedProfile::build(p, &tools_of(&raw)));
    raw.into_iter()
        .map(|s| {
            let action = match &tools {
                Some(set) => set.from_scaffold(&s.tool, &std::sync::Arc::new(s.arguments.clone())),
                None => Action::Call {
                    tag: s.tool.clone(),
                    arguments: s.arguments.clone().into(),
                },
            };
            let (tag, mut arguments) = match action {
                Action::Submit { .. } => (SUBMIT_TAG.to_string(), Map::new()),
                Action::Call { tag, arguments } => {
                    (neutral_name(&tag).to_string(), (*arguments).clone())
                }
            };
            if tag == SUBMIT_TAG {
                arguments.clear();
            }
            for key in METADATA_PARAMETERS {
                arguments.remove(key);
            }
            neutral_step(RawStep {
                thought: s.thought,
                tool: tag,
                arguments,
                observation: s.observation,
            })
        })
        .collect()
}

/// Tool definitions for the names a trajectory uses, every argument seen as a parameter (so
/// the profile's hidden parameters are recognised).
fn tools_of(steps: &[RawStep]) -> Vec<Tool> {
    let mut props: Vec<(String, Map<String, Value>)> = Vec::new();
    for s in steps {
        let i = match props.iter().position(|(n, _)| n == &s.tool) {
            Some(i) => i,
            None => {
                props.push((s.tool.clone(), Map::new()));
                props.len() - 1
            }
        };
        for key in s.arguments.keys() {
            props[i].1.insert(key.clone(), Value::Object(Map::new()));
        }
    }
    props
        .into_iter()
        .filter_map(|(name, properties)| {
            serde_json::from_value(serde_json::json!({
                "type": "function",
                "function": {"name": name, "parameters": {"type": "object", "properties": properties}}
            }))
            .ok()
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Shared helpers

fn file_stem(path: &Path) -> String {
    let stem = |p: &Path| {
        p.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    if path.is_dir() && path.file_name().is_some_and(|n| n == "events") {
        if let Some(parent) = path.parent() {
            return stem(parent);
        }
    }
    if path.is_dir() {
        return path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
    }
    if crate::trace::read::is_trace_file(path) {
        return crate::trace::read::trace_stem(path).to_string();
    }
    stem(path)
}

fn numbered(stem: &str, i: usize, many: bool) -> String {
    if many {
        format!("{stem}-{}", i + 1)
    } else {
        stem.to_string()
    }
}

/// JSONL values; a torn (cut short) last record is skipped, another bad line is an error.
/// Values are read one after another whatever their line breaks, so a record that an older
/// writer spread over several lines (a pretty-printed request copied verbatim) still reads.
fn jsonl(text: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for value in serde_json::Deserializer::from_str(text).into_iter::<Value>() {
        match value {
            Ok(v) => out.push(v),
            Err(e) if e.is_eof() && !out.is_empty() => break,
            Err(e) => return Err(format!("line {}: {e}", e.line())),
        }
    }
    Ok(out)
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// Text of a message content: a string, or the text parts of a list (joined by `\n`).
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.clone()),
                Value::Object(_) => p.get("text").and_then(Value::as_str).map(str::to_string),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Object(_) => v.get("text").map(text_of).unwrap_or_default(),
        _ => String::new(),
    }
}

/// Tool-call arguments: an object, or a JSON string of one (other strings under `_raw`).
fn arguments_of(v: Option<&Value>) -> Map<String, Value> {
    match v {
        Some(Value::Object(m)) => m.clone(),
        Some(Value::String(s)) if s.trim().is_empty() => Map::new(),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(m)) => m,
            _ => Map::from_iter([("_raw".to_string(), Value::String(s.clone()))]),
        },
        _ => Map::new(),
    }
}

fn date_of(timestamp: Option<&str>) -> Option<String> {
    let t = timestamp?;
    let d = t.get(..10)?;
    let ok = d.chars().enumerate().all(|(i, c)| {
        if i == 4 || i == 7 {
            c == '-'
        } else {
            c.is_ascii_digit()
        }
    });
    ok.then(|| d.to_string())
}

/// `YYYY-MM-DD` (UTC) of a Unix time in milliseconds.
fn date_of_unix_ms(ms: u64) -> String {
    crate::util::utc(ms)[..10].to_string()
}

/// The tagged problem statement of a task message, else the whole message.
fn statement_or_whole(message: String) -> String {
    tagged_statement(&message).unwrap_or(message)
}

/// The problem statement inside a templated task message, if it is tagged.
fn tagged_statement(message: &str) -> Option<String> {
    for tag in [
        "pr_description",
        "issue_description",
        "issue",
        "problem_statement",
    ] {
        let open = format!("<{tag}>");
        let close = format!("</{tag}>");
        if let Some(start) = message.find(&open) {
            let rest = &message[start + open.len()..];
            if let Some(end) = rest.find(&close) {
                let inner = rest[..end].trim();
                if !inner.is_empty() {
                    return Some(inner.to_string());
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn editor_action_strings() {
        let (tool, args) = parse_swe_agent_action("str_replace_editor view /testbed/x.py");
        assert_eq!(tool, "str_replace_editor");
        assert_eq!(
            Value::Object(args),
            json!({"command": "view", "path": "/testbed/x.py"})
        );
        let (_, args) =
            parse_swe_agent_action("str_replace_editor view /testbed/x.py  --view_range 10 20");
        assert_eq!(args["view_range"], json!([10, 20]));
        let (tool, args) = parse_swe_agent_action(
            "str_replace_editor str_replace /testbed/x.py   --old_str 'a = 1\nb = '\"'\"'x'\"'\"'' --new_str '--not-a-flag'",
        );
        assert_eq!(tool, "str_replace_editor");
        assert_eq!(args["old_str"], json!("a = 1\nb = 'x'"));
        assert_eq!(args["new_str"], json!("--not-a-flag"));
        let (_, args) =
            parse_swe_agent_action("str_replace_editor insert /t/a.py --insert_line 3 --new_str x");
        assert_eq!(args["insert_line"], json!(3));
        assert_eq!(parse_swe_agent_action("submit").0, "submit");
        let (tool, args) = parse_swe_agent_action("grep -rn 'total' /testbed | head");
        assert_eq!(tool, "bash");
        assert_eq!(args["command"], json!("grep -rn 'total' /testbed | head"));
        // An unclosed quote: the line ran in the shell as written.
        assert_eq!(
            parse_swe_agent_action("str_replace_editor view '/x").0,
            "bash"
        );
    }

    #[test]
    fn observation_blocks_and_escapes() {
        let prompt = "## Thinking\nlook\n\n<bash>ls</bash>\n\n<observation>\na &lt;/observation> b\n\\## Thinking x\n&lt;submit/>\n</observation>\n\n## Thinking\n";
        assert_eq!(
            last_observation(prompt).unwrap(),
            "a </observation> b\n## Thinking x\n<submit/>"
        );
        assert_eq!(last_observation("## Thinking\n"), None);
        assert_eq!(
            task_section("# Task\n\nsys\n\nDo it.\n\n# Tools\n\nWork"),
            "sys\n\nDo it."
        );
    }

    /// A trace's task is its session record's `task_text`; the rendered `# Task` section only
    /// when the session record has none. A newer schema version is an error.
    #[test]
    fn trace_task_from_the_session_record_else_the_prompt() {
        let trace = |session: &str| {
            format!(
                "{{\"v\":1,\"type\":\"session\",\"time_ms\":1709251200000,\"data\":{session}}}\n{}\n{}\n",
                r##"{"v":1,"type":"step","data":{"step":0,"prompt":{"prefix_bytes":0,"delta":"# Task\n\nsys\n\nOther words.\n\n# Tools\n\n## Thinking\n"},"parse":{"thought":"look","action":{"kind":"call","tag":"bash","arguments":{"command":"ls"}}}}}"##,
                r#"{"v":1,"type":"step","data":{"step":1,"prompt":{"prefix_bytes":0,"delta":"<observation>\na.py\n</observation>\n"},"parse":{"action":{"kind":"submit","message":null}}}}"#,
            )
        };
        let path = Path::new("t.jsonl");
        let read = |text: String| read_trace(path, text.as_bytes(), "stem");
        let got = read(trace(
            r#"{"task":"t-1","task_text":"Intro <issue>Fix it.</issue>"}"#,
        ))
        .unwrap();
        assert_eq!(
            (got.instance_id.as_str(), got.task_text.as_str()),
            ("t-1", "Fix it.")
        );
        assert_eq!(got.date.as_deref(), Some("2024-03-01"));
        assert_eq!(got.steps.len(), 2);
        assert_eq!(
            (
                got.steps[0].tool.as_str(),
                got.steps[0].observation.as_str()
            ),
            ("bash", "a.py")
        );
        let got = read(trace(r#"{"instance_id":"i-1","task":"t-1"}"#)).unwrap();
        assert_eq!(
            (got.instance_id.as_str(), got.task_text.as_str()),
            ("i-1", "sys\n\nOther words.")
        );
        let got = read(trace("{}")).unwrap();
        assert_eq!(got.instance_id, "stem");
        let newer = trace("{}").replacen(
            "\"v\":1",
            &format!("\"v\":{}", crate::trace::SCHEMA_VERSION + 1),
            1,
        );
        assert!(read(newer).is_err());
    }

    #[test]
    fn unix_dates() {
        assert_eq!(date_of_unix_ms(0), "1970-01-01");
        assert_eq!(date_of_unix_ms(1_709_251_200_000), "2024-03-01");
        assert_eq!(
            date_of(Some("2026-11-30T08:05:39.43")),
            Some("2026-11-30".into())
        );
        assert_eq!(date_of(Some("yesterday")), None);
    }

    #[test]
    fn names_map_through_profile_and_table() {
        let profiles = Profiles::builtin().unwrap();
        let raw = vec![
            RawStep {
                tool: "execute_bash".into(),
                arguments: serde_json::from_value(json!({"command": "ls", "security_risk": "LOW"}))
                    .unwrap(),
                ..RawStep::default()
            },
            RawStep {
                tool: "finish".into(),
                arguments: serde_json::from_value(json!({"message": "done"})).unwrap(),
                ..RawStep::default()
            },
            RawStep {
                tool: "task_tracker".into(),
                arguments: serde_json::from_value(json!({"command": "view", "summary": "s"}))
                    .unwrap(),
                ..RawStep::default()
            },
        ];
        for profile in ["openhands-sdk", "openhands-codeact", "generic"] {
            let steps = map_steps(raw.clone(), Some(profiles.get(profile).unwrap()));
            let got: Vec<(String, Value)> = steps
                .into_iter()
                .map(|s| (s.action.tool, Value::Object(s.action.arguments)))
                .collect();
            assert_eq!(
                got,
                vec![
                    ("bash".to_string(), json!({"command": "ls"})),
                    ("submit".to_string(), json!({})),
                    ("task_tracker".to_string(), json!({"command": "view"})),
                ],
                "{profile}"
            );
        }
    }
}
