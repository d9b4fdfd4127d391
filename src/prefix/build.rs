//! `asap-proxy prefix build`: reference trajectories → prefix files (JSONL, one [`Prefix`] a
//! line), cut to the first K steps, tool names in the neutral vocabulary, checked for gold-patch
//! leaks ([`super::leak`]).
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
//! - **asap-proxy traces** (JSONL from [`crate::trace`]): one step per `step` record with a
//!   `parse.action` and no `nudge` (already neutral), up to a `termination`; the thought is
//!   `parse.thought`; the observation is the last `<observation>` block of the prompt delta of
//!   the next record with a higher `step`. Task: the first prompt's text between `# Task` and
//!   `# Tools` (system text included unless the statement is tagged). Instance id: the session's `instance_id` if recorded,
//!   else the file stem.
//!
//! Tool names go through the scaffold's profile ([`ToolSet::from_scaffold`]: swe-agent,
//! openhands-sdk, openhands-codeact for V0, or `--profile`), then a fixed table for names the
//! profile does not cover: `execute_bash`/`terminal` → `bash`, `file_editor` →
//! `str_replace_editor`, `finish` → `submit`; others are kept. OpenHands metadata parameters
//! (`security_risk`, `summary`) are dropped; `submit` keeps no arguments.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::leak::{find_leaks, GoldPatches};
use super::{Prefix, PrefixAction, PrefixError, PrefixStep, Source};
use crate::conversation::Action;
use crate::openai::chat::Tool;
use crate::profile::{Profile, ProfileError, Profiles, ToolSet, EDITOR_TAG, SHELL_TAG, SUBMIT_TAG};

/// Parameters that are scaffold metadata, never part of a neutral action.
pub const METADATA_PARAMETERS: [&str; 2] = ["security_risk", "summary"];

/// The input formats `prefix build` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    SweAgent,
    OpenHandsSdk,
    OpenHandsV0,
    Trace,
}

impl InputFormat {
    /// Value of `source.scaffold`.
    pub fn scaffold(self) -> &'static str {
        match self {
            Self::SweAgent => "swe-agent",
            Self::OpenHandsSdk => "openhands-sdk",
            Self::OpenHandsV0 => "openhands-v0",
            Self::Trace => "asap-proxy",
        }
    }

    /// The profile whose tool names the trajectory uses (none: already neutral).
    pub fn profile(self) -> Option<&'static str> {
        match self {
            Self::SweAgent => Some("swe-agent"),
            Self::OpenHandsSdk => Some("openhands-sdk"),
            Self::OpenHandsV0 => Some("openhands-codeact"),
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
    /// SWE-bench style gold patches for the leak check.
    pub gold: Option<PathBuf>,
    /// Write leaking prefixes too, with `leaks` filled.
    pub allow_leaks: bool,
    /// Profile that maps tool names, instead of the one of each input format.
    pub profile: Option<String>,
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportLine {
    pub instance_id: String,
    pub steps: usize,
    /// Gold lines found; `None` when not checked (no `--gold`, or no gold patch for the task).
    pub leaks: Option<Vec<String>>,
    pub kept: bool,
    /// Why a prefix without leaks was rejected, or why it was not checked.
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

    /// The table: `instance_id  steps  leaks  kept|rejected` per task, then a total line.
    pub fn render(&self) -> String {
        let width = self
            .lines
            .iter()
            .map(|l| l.instance_id.chars().count())
            .chain(std::iter::once("instance_id".len()))
            .max()
            .unwrap_or(0);
        let mut out = format!("{:<width$}  steps  leaks  status\n", "instance_id");
        for l in &self.lines {
            let leaks = l
                .leaks
                .as_ref()
                .map_or_else(|| "-".to_string(), |v| v.len().to_string());
            let status = if l.kept { "kept" } else { "rejected" };
            let _ = writeln!(
                out,
                "{:<width$}  {:>5}  {:>5}  {status}",
                l.instance_id, l.steps, leaks
            );
        }
        let leaking = self
            .lines
            .iter()
            .filter(|l| l.leaks.as_ref().is_some_and(|v| !v.is_empty()))
            .count();
        let _ = writeln!(
            out,
            "total: {} prefixes, {} kept, {} rejected, {} with leaks",
            self.lines.len(),
            self.kept(),
            self.rejected(),
            leaking
        );
        out
    }

    /// The leaked gold lines and notes, per task (for standard error).
    pub fn details(&self) -> String {
        let mut out = String::new();
        for l in &self.lines {
            if let Some(note) = &l.note {
                let _ = writeln!(out, "{}: {note}", l.instance_id);
            }
            for line in l.leaks.iter().flatten() {
                let _ = writeln!(out, "{}: leaks gold line: {line}", l.instance_id);
            }
        }
        out
    }
}

/// Runs `prefix build`: reads every input, cuts to K, checks leaks, writes the kept prefixes
/// to `out` (JSONL) and returns the report.
pub fn build(opts: &BuildOptions) -> Result<Report, BuildError> {
    if opts.k == 0 {
        return Err(BuildError::Usage("--k must be at least 1".to_string()));
    }
    if opts.from.is_empty() {
        return Err(BuildError::Usage("no --from input given".to_string()));
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
    for mut prefix in prefixes {
        let (leaks, mut note) = match &gold {
            None => (None, None),
            Some(g) => match g.get(&prefix.instance_id) {
                Some(patch) => (Some(find_leaks(&prefix, patch)), None),
                None => (None, Some("no gold patch: not checked".to_string())),
            },
        };
        let leaking = leaks.as_ref().is_some_and(|l| !l.is_empty());
        let mut kept = !leaking || opts.allow_leaks;
        if prefix.steps.is_empty() {
            kept = false;
            note = Some("no steps".to_string());
        }
        if kept {
            prefix.leaks = leaks.clone().unwrap_or_default();
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
            leaks,
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
    std::fs::write(&opts.out, out).map_err(write)?;
    Ok(report)
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
    let text = std::fs::read_to_string(path).map_err(|source| PrefixError::Read {
        path: path.to_path_buf(),
        source,
    })?;
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
        return Ok((InputFormat::Trace, vec![read_trace(&docs, &stem)]));
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
            "unknown trajectory format (expected a SWE-agent .traj, OpenHands SDK events, OpenHands V0 events or an asap-proxy trace)",
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
        let steps = if format == InputFormat::Trace {
            raw.into_iter().map(neutral_step).collect()
        } else {
            map_steps(raw, profile)
        };
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
    let tools = profile.map(|p| ToolSet::build(p, &tools_of(&raw)));
    raw.into_iter()
        .map(|s| {
            let action = match &tools {
                Some(set) => set.from_scaffold(&s.tool, &s.arguments),
                None => Action::Call {
                    tag: s.tool.clone(),
                    arguments: s.arguments.clone(),
                },
            };
            let (tag, mut arguments) = match action {
                Action::Submit { .. } => (SUBMIT_TAG.to_string(), Map::new()),
                Action::Call { tag, arguments } => (neutral_name(&tag).to_string(), arguments),
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
    stem(path)
}

fn numbered(stem: &str, i: usize, many: bool) -> String {
    if many {
        format!("{stem}-{}", i + 1)
    } else {
        stem.to_string()
    }
}

/// JSONL values; a torn (unparsable) last line is skipped, another bad line is an error.
fn jsonl(text: &str) -> Result<Vec<Value>, String> {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .collect();
    let mut out = Vec::new();
    for (n, (i, line)) in lines.iter().enumerate() {
        match serde_json::from_str(line) {
            Ok(v) => out.push(v),
            Err(_) if n + 1 == lines.len() && n > 0 => {}
            Err(e) => return Err(format!("line {}: {e}", i + 1)),
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
    let days = (ms / 86_400_000) as i64;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
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

// ---------------------------------------------------------------------------------------------
// SWE-agent

fn read_swe_agent(doc: &Value, stem: &str) -> Trajectory {
    let data = if doc.get("trajectory").is_some_and(Value::is_array) {
        doc
    } else {
        doc.get("attempts")
            .and_then(Value::as_array)
            .and_then(|a| a.last())
            .unwrap_or(doc)
    };
    let replay = data
        .get("replay_config")
        .or_else(|| doc.get("replay_config"))
        .and_then(|r| match r {
            Value::String(s) => serde_json::from_str::<Value>(s).ok(),
            Value::Object(_) => Some(r.clone()),
            _ => None,
        })
        .unwrap_or(Value::Null);
    let statement = replay.get("problem_statement");
    let history: Vec<&Value> = data
        .get("history")
        .and_then(Value::as_array)
        .map(|h| {
            h.iter()
                .filter(|m| !m.get("is_demo").and_then(Value::as_bool).unwrap_or(false))
                .collect()
        })
        .unwrap_or_default();
    let first_user = history
        .iter()
        .find(|m| str_of(m, "role") == Some("user"))
        .and_then(|m| m.get("content"))
        .map(text_of)
        .unwrap_or_default();
    let task_text = statement
        .and_then(|s| str_of(s, "text"))
        .filter(|t| !t.trim().is_empty())
        .map(str::to_string)
        .or_else(|| tagged_statement(&first_user))
        .unwrap_or(first_user);
    let instance_id = statement
        .and_then(|s| str_of(s, "id"))
        .filter(|id| !id.is_empty())
        .map_or_else(|| stem.to_string(), str::to_string);
    let model = replay
        .get("agent")
        .and_then(|a| a.get("model"))
        .and_then(|m| str_of(m, "name"))
        .map(str::to_string);
    let calls: Vec<&Value> = history
        .iter()
        .copied()
        .filter(|m| str_of(m, "role") == Some("assistant") && m.get("action").is_some())
        .collect();
    let mut next_call = 0;
    let mut steps = Vec::new();
    for step in data
        .get("trajectory")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let action = str_of(step, "action").unwrap_or_default();
        if action.trim().is_empty() {
            continue;
        }
        let call = calls[next_call.min(calls.len())..]
            .iter()
            .position(|m| str_of(m, "action").map(str::trim) == Some(action.trim()))
            .map(|i| {
                next_call += i + 1;
                calls[next_call - 1]
            })
            .and_then(|m| m.get("tool_calls"))
            .and_then(Value::as_array)
            .and_then(|c| c.first())
            .and_then(|c| c.get("function"));
        let (tool, arguments) = match call.and_then(|f| str_of(f, "name")) {
            Some(name) => (
                name.to_string(),
                arguments_of(call.and_then(|f| f.get("arguments"))),
            ),
            None => parse_swe_agent_action(action),
        };
        steps.push(RawStep {
            thought: str_of(step, "thought").unwrap_or_default().to_string(),
            tool,
            arguments,
            observation: str_of(step, "observation").unwrap_or_default().to_string(),
        });
    }
    Trajectory {
        instance_id,
        task_text,
        model,
        date: None,
        steps,
    }
}

/// A SWE-agent action string as tool and arguments: `submit`, a `str_replace_editor` command
/// line, or a shell command.
pub fn parse_swe_agent_action(action: &str) -> (String, Map<String, Value>) {
    let a = action.trim();
    let first = a.split_whitespace().next().unwrap_or_default();
    if first == "submit" && a.split_whitespace().count() == 1 {
        return (SUBMIT_TAG.to_string(), Map::new());
    }
    if first == EDITOR_TAG {
        if let Some(args) = parse_editor_command(a) {
            return (EDITOR_TAG.to_string(), args);
        }
    }
    (
        SHELL_TAG.to_string(),
        Map::from_iter([("command".to_string(), Value::String(a.to_string()))]),
    )
}

const EDITOR_FLAGS: [&str; 5] = [
    "file_text",
    "old_str",
    "new_str",
    "insert_line",
    "view_range",
];

fn parse_editor_command(line: &str) -> Option<Map<String, Value>> {
    let tokens = shell_split(line)?;
    let mut it = tokens.into_iter().skip(1);
    let mut args = Map::new();
    let command = it.next()?.0;
    args.insert("command".into(), Value::String(command));
    if let Some((path, _)) = it.next() {
        args.insert("path".into(), Value::String(path));
    }
    let mut current: Option<(String, Vec<String>)> = None;
    let mut flags: Vec<(String, Vec<String>)> = Vec::new();
    for (token, quoted) in it {
        let flag = (!quoted)
            .then(|| token.strip_prefix("--"))
            .flatten()
            .filter(|f| EDITOR_FLAGS.contains(f));
        match (flag, current.as_mut()) {
            (Some(f), _) => {
                flags.extend(current.take());
                current = Some((f.to_string(), Vec::new()));
            }
            (None, Some((_, values))) => values.push(token),
            (None, None) => return None,
        }
    }
    flags.extend(current);
    for (flag, values) in flags {
        let value = match flag.as_str() {
            "insert_line" => Value::from(values.first()?.parse::<i64>().ok()?),
            "view_range" => Value::Array(
                values
                    .iter()
                    .map(|v| v.parse::<i64>().ok().map(Value::from))
                    .collect::<Option<Vec<_>>>()?,
            ),
            _ => Value::String(values.join(" ")),
        };
        args.insert(flag, value);
    }
    Some(args)
}

/// POSIX-shell words (single quotes, double quotes, backslashes); each with whether any part
/// of it was quoted. `None` on an unclosed quote.
fn shell_split(line: &str) -> Option<Vec<(String, bool)>> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                quoted = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        ch => word.push(ch),
                    }
                }
            }
            '"' => {
                in_word = true;
                quoted = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => match chars.peek() {
                            Some(&n @ ('"' | '\\' | '$' | '`')) => {
                                word.push(n);
                                chars.next();
                            }
                            Some('\n') => {
                                chars.next();
                            }
                            _ => word.push('\\'),
                        },
                        ch => word.push(ch),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some('\n') | None => {}
                    Some(n) => word.push(n),
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    out.push((std::mem::take(&mut word), quoted));
                    in_word = false;
                    quoted = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        out.push((word, quoted));
    }
    Some(out)
}

// ---------------------------------------------------------------------------------------------
// OpenHands

fn classify_events(items: &[Value]) -> Option<InputFormat> {
    if items.iter().any(|e| str_of(e, "kind").is_some()) {
        return Some(InputFormat::OpenHandsSdk);
    }
    if items
        .iter()
        .any(|e| str_of(e, "action").is_some() || str_of(e, "observation").is_some())
    {
        return Some(InputFormat::OpenHandsV0);
    }
    None
}

fn read_sdk_dir(path: &Path, stem: &str) -> Result<(InputFormat, Vec<Trajectory>), BuildError> {
    let events_dir = if path.join("events").is_dir() {
        path.join("events")
    } else {
        path.to_path_buf()
    };
    let read_err = |source| PrefixError::Read {
        path: events_dir.clone(),
        source,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&events_dir)
        .map_err(read_err)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut events = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).map_err(|source| PrefixError::Read {
            path: file.clone(),
            source,
        })?;
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Array(items)) => events.extend(items),
            Ok(v) => events.push(v),
            Err(e) => {
                return Err(PrefixError::Parse {
                    path: file.display().to_string(),
                    message: e.to_string(),
                }
                .into())
            }
        }
    }
    let mut trajectory = read_sdk(&events, stem);
    // The conversation's saved state names the model.
    if let Ok(text) = std::fs::read_to_string(path.join("base_state.json")) {
        if let Ok(state) = serde_json::from_str::<Value>(&text) {
            trajectory.model = state
                .get("agent")
                .and_then(|a| a.get("llm"))
                .and_then(|l| str_of(l, "model"))
                .map(str::to_string);
        }
    }
    Ok((InputFormat::OpenHandsSdk, vec![trajectory]))
}

fn read_sdk(events: &[Value], stem: &str) -> Trajectory {
    let task_text = events
        .iter()
        .find(|e| str_of(e, "kind") == Some("MessageEvent") && str_of(e, "source") == Some("user"))
        .and_then(|e| e.get("llm_message"))
        .and_then(|m| m.get("content"))
        .map(|c| statement_or_whole(text_of(c)))
        .unwrap_or_default();
    let observation = |call_id: &str| -> String {
        events
            .iter()
            .find(|e| {
                str_of(e, "tool_call_id") == Some(call_id)
                    && str_of(e, "kind") != Some("ActionEvent")
            })
            .map(|e| match str_of(e, "kind") {
                Some("AgentErrorEvent") => str_of(e, "error").unwrap_or_default().to_string(),
                Some("UserRejectObservation") => {
                    format!(
                        "Action rejected: {}",
                        str_of(e, "rejection_reason").unwrap_or_default()
                    )
                }
                _ => e
                    .get("observation")
                    .and_then(|o| o.get("content"))
                    .map(text_of)
                    .unwrap_or_default(),
            })
            .unwrap_or_default()
    };
    let steps = events
        .iter()
        .filter(|e| {
            str_of(e, "kind") == Some("ActionEvent")
                && e.get("action").is_some_and(|a| !a.is_null())
        })
        .map(|e| {
            let arguments = match e.get("tool_call").and_then(|c| c.get("arguments")) {
                Some(a) => arguments_of(Some(a)),
                None => e
                    .get("action")
                    .and_then(Value::as_object)
                    .map(|a| {
                        a.iter()
                            .filter(|(k, v)| k.as_str() != "kind" && !v.is_null())
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect()
                    })
                    .unwrap_or_default(),
            };
            RawStep {
                thought: e.get("thought").map(text_of).unwrap_or_default(),
                tool: str_of(e, "tool_name").unwrap_or_default().to_string(),
                arguments,
                observation: observation(str_of(e, "tool_call_id").unwrap_or_default()),
            }
        })
        .collect();
    Trajectory {
        instance_id: stem.to_string(),
        task_text,
        model: None,
        date: date_of(events.first().and_then(|e| str_of(e, "timestamp"))),
        steps,
    }
}

/// V0 action types that are tool calls (when `tool_call_metadata` is absent).
const V0_TOOL_ACTIONS: [&str; 8] = [
    "run",
    "run_ipython",
    "read",
    "edit",
    "think",
    "finish",
    "browse",
    "browse_interactive",
];

fn read_v0(events: &[Value], stem: &str, record: Option<&Value>) -> Trajectory {
    let task_text = events
        .iter()
        .find(|e| str_of(e, "source") == Some("user") && str_of(e, "action") == Some("message"))
        .map(|e| {
            e.get("args")
                .and_then(|a| str_of(a, "content"))
                .or_else(|| str_of(e, "message"))
                .unwrap_or_default()
                .to_string()
        })
        .or_else(|| {
            record
                .and_then(|r| str_of(r, "instruction"))
                .map(str::to_string)
        })
        .map(|t| statement_or_whole(t.to_string()))
        .unwrap_or_default();
    let steps = events
        .iter()
        .filter(|e| {
            str_of(e, "source") == Some("agent")
                && str_of(e, "action").is_some_and(|a| {
                    (e.get("tool_call_metadata").is_some_and(|m| !m.is_null()) && a != "message")
                        || V0_TOOL_ACTIONS.contains(&a)
                })
        })
        .map(|e| v0_step(e, events))
        .collect();
    let instance_id = record
        .and_then(|r| str_of(r, "instance_id"))
        .map_or_else(|| stem.to_string(), str::to_string);
    let model = record
        .and_then(|r| r.get("metadata"))
        .and_then(|m| m.get("llm_config"))
        .and_then(|l| str_of(l, "model"))
        .map(str::to_string);
    Trajectory {
        instance_id,
        task_text,
        model,
        date: date_of(events.first().and_then(|e| str_of(e, "timestamp"))),
        steps,
    }
}

fn v0_step(e: &Value, events: &[Value]) -> RawStep {
    let args = e.get("args").cloned().unwrap_or(Value::Null);
    let kind = str_of(e, "action").unwrap_or_default();
    let meta = e.get("tool_call_metadata").filter(|m| !m.is_null());
    let from_call = meta.and_then(|m| {
        let id = str_of(m, "tool_call_id")?;
        let name = str_of(m, "function_name")?;
        let calls = m
            .get("model_response")?
            .get("choices")?
            .as_array()?
            .iter()
            .filter_map(|c| c.get("message")?.get("tool_calls")?.as_array())
            .flatten();
        let function = calls
            .into_iter()
            .find(|c| str_of(c, "id") == Some(id))?
            .get("function")?;
        Some((name.to_string(), arguments_of(function.get("arguments"))))
    });
    let (tool, arguments) = from_call.unwrap_or_else(|| {
        let name = meta
            .and_then(|m| str_of(m, "function_name"))
            .map(str::to_string);
        v0_legacy_call(kind, &args, name)
    });
    let mut thought = str_of(&args, "thought").unwrap_or_default().to_string();
    if kind == "think" {
        // The think tool's text is its argument; the thought repeats it.
        thought.clear();
    }
    let id = e.get("id");
    let observation = events
        .iter()
        .find(|o| o.get("observation").is_some() && id.is_some() && o.get("cause") == id)
        .map(|o| o.get("content").map(text_of).unwrap_or_default())
        .unwrap_or_default();
    RawStep {
        thought,
        tool,
        arguments,
        observation,
    }
}

/// Arguments rebuilt from a V0 action's `args` when the model's call is not recorded.
fn v0_legacy_call(kind: &str, args: &Value, name: Option<String>) -> (String, Map<String, Value>) {
    let pick = |keys: &[&str]| -> Map<String, Value> {
        keys.iter()
            .filter_map(|k| {
                let v = args.get(*k)?;
                let empty = v.is_null() || v.as_str().is_some_and(str::is_empty);
                (!empty).then(|| (k.to_string(), v.clone()))
            })
            .collect()
    };
    let (default_name, arguments) = match kind {
        "run" => ("execute_bash", pick(&["command"])),
        "run_ipython" => ("execute_ipython_cell", pick(&["code"])),
        "read" => {
            let mut a = Map::from_iter([("command".to_string(), Value::from("view"))]);
            a.extend(pick(&["path", "view_range"]));
            ("str_replace_editor", a)
        }
        "edit" if str_of(args, "command").is_some_and(|c| !c.is_empty()) => (
            "str_replace_editor",
            pick(&[
                "command",
                "path",
                "file_text",
                "old_str",
                "new_str",
                "insert_line",
            ]),
        ),
        "edit" => ("edit_file", pick(&["path", "content", "start", "end"])),
        "think" => ("think", pick(&["thought"])),
        "finish" => {
            let mut a = Map::new();
            if let Some(m) = str_of(args, "final_thought") {
                a.insert("message".into(), Value::from(m));
            }
            ("finish", a)
        }
        "browse" => ("browser", pick(&["url"])),
        "browse_interactive" => ("browser", pick(&["browser_actions"])),
        other => (other, Map::new()),
    };
    (name.unwrap_or_else(|| default_name.to_string()), arguments)
}

// ---------------------------------------------------------------------------------------------
// asap-proxy traces

fn is_trace_record(v: &Value) -> bool {
    matches!(str_of(v, "type"), Some("session" | "step")) && v.get("data").is_some()
}

fn read_trace(records: &[Value], stem: &str) -> Trajectory {
    let session = records
        .iter()
        .find(|r| str_of(r, "type") == Some("session"))
        .and_then(|r| r.get("data"));
    let steps: Vec<&Value> = records
        .iter()
        .filter(|r| str_of(r, "type") == Some("step"))
        .filter_map(|r| r.get("data"))
        .collect();
    let delta = |r: &Value| -> String {
        r.get("prompt")
            .and_then(|p| str_of(p, "delta"))
            .unwrap_or_default()
            .to_string()
    };
    // The session record keeps the first user message (`task_text`); older traces only have
    // the rendered `# Task` section, which mixes in the system text.
    let task_text = session
        .and_then(|s| str_of(s, "task_text"))
        .filter(|t| !t.trim().is_empty())
        .map(|t| statement_or_whole(t.to_string()))
        .or_else(|| {
            steps
                .first()
                .map(|r| statement_or_whole(task_section(&delta(r))))
        })
        .unwrap_or_default();
    let model = steps
        .iter()
        .find_map(|r| r.get("completion").and_then(|c| str_of(c, "model")))
        .map(str::to_string);
    let date = session
        .and_then(|s| s.get("time_ms"))
        .and_then(Value::as_u64)
        .map(date_of_unix_ms);
    let instance_id = session
        .and_then(|s| str_of(s, "instance_id").or_else(|| str_of(s, "task")))
        .map_or_else(|| stem.to_string(), str::to_string);
    let index = |r: &Value| r.get("step").and_then(Value::as_u64).unwrap_or(0);
    let mut out = Vec::new();
    for (i, r) in steps.iter().enumerate() {
        if r.get("termination").is_some_and(|t| !t.is_null()) {
            break;
        }
        if r.get("nudge").is_some_and(|n| !n.is_null()) {
            continue;
        }
        let Some(action) = r
            .get("parse")
            .and_then(|p| p.get("action"))
            .filter(|a| a.is_object())
        else {
            continue;
        };
        let (tool, arguments) = match str_of(action, "kind") {
            Some("submit") => (SUBMIT_TAG.to_string(), Map::new()),
            _ => (
                str_of(action, "tag").unwrap_or_default().to_string(),
                action
                    .get("arguments")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default(),
            ),
        };
        let observation = steps[i + 1..]
            .iter()
            .find(|n| index(n) > index(r))
            .and_then(|n| last_observation(&delta(n)))
            .unwrap_or_default();
        out.push(RawStep {
            thought: r
                .get("parse")
                .and_then(|p| str_of(p, "thought"))
                .unwrap_or_default()
                .to_string(),
            tool,
            arguments,
            observation,
        });
    }
    Trajectory {
        instance_id,
        task_text,
        model,
        date,
        steps: out,
    }
}

/// The rendered document's text between `# Task` and `# Tools`.
fn task_section(prompt: &str) -> String {
    let Some(start) = prompt
        .strip_prefix("# Task\n")
        .map(|_| "# Task\n".len())
        .or_else(|| prompt.find("\n# Task\n").map(|i| i + "\n# Task\n".len()))
    else {
        return String::new();
    };
    let rest = &prompt[start..];
    let end = rest.find("\n# Tools\n").unwrap_or(rest.len());
    rest[..end].trim().to_string()
}

/// The last `<observation>` block of a rendered prompt, with the rendering's escapes undone.
fn last_observation(prompt: &str) -> Option<String> {
    let close = prompt.rfind("\n</observation>")?;
    let open_tag = "<observation>\n";
    let open = prompt[..close].rfind(open_tag)? + open_tag.len();
    let text = prompt.get(open..close)?;
    Some(unescape_observation(text))
}

fn unescape_observation(text: &str) -> String {
    text.split('\n')
        .map(|line| {
            let trimmed = line.trim_start_matches([' ', '\t']);
            match trimmed.strip_prefix('\\') {
                Some(rest) if rest.starts_with("## Thinking") => {
                    format!("{}{rest}", &line[..line.len() - trimmed.len()])
                }
                _ => line.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        .replace("&lt;/observation", "</observation")
        .replace("&lt;observation", "<observation")
        .replace("&lt;submit", "<submit")
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
