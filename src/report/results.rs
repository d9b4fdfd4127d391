//! Reading `--results`: which runs resolved their task.
//!
//! Accepted files (format by content; see `docs/report.md`):
//! - the SWE-bench harness report JSON: an object with `resolved_ids`, `unresolved_ids`,
//!   `empty_patch_ids`, `error_ids` (lists of instance ids; other keys ignored);
//! - a per-instance report: an object `{"<instance_id>": {"resolved": bool, …}, …}`;
//! - JSONL rows `{"instance_id", "resolved", "run"?, "label"?, "empty_patch"?, "error"?}`;
//! - CSV with a header row naming the same columns.
//!
//! A harness report has no run index and no label. Each `--results` value is
//! `[LABEL[:RUN]=]FILE`; without `LABEL=`, a file named `<label>.<run id>.json` (the harness's
//! own naming, with `/` of the label written `__`) whose `<label>` is a label of the traces
//! gets that label, and the trailing digits of `<run id>` give the run. Harness files that
//! still have no run take 0, 1, 2, … in command-line order per label, skipping runs already
//! given. Rows (JSONL/CSV) take the label and run of `LABEL:RUN=` only where they have none;
//! a row without a run applies to every run, a row without a label to every label.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

/// How one run ended in the evaluation harness. `None`: the results do not say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// The task's tests passed.
    pub resolved: bool,
    /// The run produced no patch (`empty_patch_ids`, `patch_is_None`, `patch_exists: false`,
    /// an `empty_patch` column).
    pub empty_patch: Option<bool>,
    /// The patch applied (`resolved_ids`/`unresolved_ids` of a harness report,
    /// `patch_successfully_applied`, an `applied` column).
    pub applied: Option<bool>,
    /// The harness failed on the run (`error_ids`, an `error` column).
    pub error: Option<bool>,
}

impl Outcome {
    /// Empty patch: what the results say; a resolved run had a patch.
    pub fn empty(&self) -> Option<bool> {
        if self.resolved {
            Some(false)
        } else {
            self.empty_patch
        }
    }

    /// Applicable patch: a resolved run's patch applied; an empty patch or a harness error
    /// is not applicable; else what the results say of the patch applying; else unknown.
    pub fn applicable(&self) -> Option<bool> {
        if self.resolved {
            Some(true)
        } else if self.empty_patch == Some(true) {
            Some(false)
        } else if self.applied.is_some() {
            self.applied
        } else if self.error == Some(true) {
            Some(false)
        } else {
            None
        }
    }
}

/// Errors reading `--results`.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// One result entry: `label`/`run` `None` apply to every label/run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub label: Option<String>,
    pub instance_id: String,
    pub run: Option<usize>,
    pub outcome: Outcome,
}

/// All results, looked up by (label, instance id, run).
#[derive(Debug, Clone, Default)]
pub struct Results {
    map: HashMap<(Option<String>, String, Option<usize>), Outcome>,
}

impl Results {
    /// Builds the lookup; a later entry with the same key replaces an earlier one.
    pub fn from_entries(entries: impl IntoIterator<Item = Entry>) -> Self {
        let map = entries
            .into_iter()
            .map(|e| ((e.label, e.instance_id, e.run), e.outcome))
            .collect();
        Self { map }
    }

    /// The outcome of one run: the most specific entry, in the order (label, run),
    /// (label, any run), (any label, run), (any label, any run).
    pub fn lookup(&self, label: &str, instance_id: &str, run: usize) -> Option<Outcome> {
        let l = Some(label.to_string());
        [
            (l.clone(), Some(run)),
            (l, None),
            (None, Some(run)),
            (None, None),
        ]
        .into_iter()
        .find_map(|(label, run)| self.map.get(&(label, instance_id.to_string(), run)))
        .copied()
    }

    /// The run indexes that entries name for (`label` or any label, `instance_id`), sorted.
    pub fn runs(&self, label: &str, instance_id: &str) -> BTreeSet<usize> {
        self.map
            .keys()
            .filter(|(l, id, _)| id == instance_id && l.as_deref().is_none_or(|l| l == label))
            .filter_map(|(_, _, run)| *run)
            .collect()
    }

    /// Labels that entries name (entries without a label left out).
    pub fn labels(&self) -> BTreeSet<&str> {
        self.map
            .keys()
            .filter_map(|(l, _, _)| l.as_deref())
            .collect()
    }

    /// Instance ids that have an entry without a label or with one of `labels`.
    pub fn instance_ids_for(&self, labels: &BTreeSet<&str>) -> BTreeSet<&str> {
        self.map
            .keys()
            .filter(|(l, _, _)| l.as_deref().is_none_or(|l| labels.contains(l)))
            .map(|(_, id, _)| id.as_str())
            .collect()
    }

    /// Whether some entry has no label (it applies to every label).
    pub fn has_unlabelled(&self) -> bool {
        self.map.keys().any(|(l, _, _)| l.is_none())
    }

    /// Instance ids that have any entry.
    pub fn instance_ids(&self) -> BTreeSet<&str> {
        self.map.keys().map(|(_, id, _)| id.as_str()).collect()
    }
}

/// One `--results` value: `[LABEL[:RUN]=]FILE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub label: Option<String>,
    pub run: Option<usize>,
    pub path: PathBuf,
}

impl Spec {
    /// Parses `[LABEL[:RUN]=]FILE`. A value naming an existing file is a plain path; else
    /// the text before the first `=` is `LABEL` or `LABEL:RUN` (`RUN` being the digits after
    /// the last `:`; a label that itself ends in `:digits` must then be written `LABEL:RUN`).
    pub fn parse(value: &str) -> Self {
        let plain = || Spec {
            label: None,
            run: None,
            path: PathBuf::from(value),
        };
        if Path::new(value).is_file() {
            return plain();
        }
        let Some((head, path)) = value.split_once('=') else {
            return plain();
        };
        let (label, run) = match head.rsplit_once(':') {
            Some((l, r)) if !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()) => {
                (l, r.parse().ok())
            }
            _ => (head, None),
        };
        Spec {
            label: (!label.is_empty()).then(|| label.to_string()),
            run,
            path: PathBuf::from(path),
        }
    }

    /// Fills label and run from a harness file name `<label>.<run id>.json`, when `<label>`
    /// is one of `labels` (a `/` in a label may be written `__`).
    fn infer_from_name(&mut self, labels: &[String]) {
        if self.label.is_some() {
            return;
        }
        let Some(stem) = self.path.file_name().and_then(|n| n.to_str()) else {
            return;
        };
        let stem = stem.strip_suffix(".json").unwrap_or(stem);
        let mut best: Option<(&String, Option<usize>, usize)> = None;
        for label in labels {
            for key in [label.clone(), label.replace('/', "__")] {
                let run = if stem == key {
                    None
                } else if let Some(run_id) = stem.strip_prefix(&format!("{key}.")) {
                    trailing_number(run_id)
                } else {
                    continue;
                };
                if best.is_none_or(|(_, _, len)| key.len() > len) {
                    best = Some((label, run, key.len()));
                }
            }
        }
        if let Some((label, run, _)) = best {
            self.label = Some(label.clone());
            if self.run.is_none() {
                self.run = run;
            }
        }
    }
}

fn trailing_number(text: &str) -> Option<usize> {
    let digits = text.len() - text.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    text[text.len() - digits..].parse().ok()
}

/// Reads every `--results` value (`[LABEL[:RUN]=]FILE`), given the labels of the traces
/// (for harness file names).
///
/// Errors: a file that cannot be read or is in none of the accepted formats.
pub fn load(values: &[String], labels: &[String]) -> Result<Results, ResultsError> {
    let mut files = Vec::new();
    for value in values {
        let mut spec = Spec::parse(value);
        let text = std::fs::read_to_string(&spec.path).map_err(|source| ResultsError::Io {
            path: spec.path.clone(),
            source,
        })?;
        let parsed = parse(&text, &spec.path)?;
        if matches!(parsed, Parsed::Report(_)) {
            spec.infer_from_name(labels);
        }
        files.push((spec, parsed));
    }
    // Harness reports without a run: 0, 1, 2, … per label scope, skipping given runs.
    let mut taken: HashMap<Option<String>, BTreeSet<usize>> = HashMap::new();
    for (spec, parsed) in &files {
        if let (Parsed::Report(_), Some(run)) = (parsed, spec.run) {
            taken.entry(spec.label.clone()).or_default().insert(run);
        }
    }
    let mut entries = Vec::new();
    for (mut spec, parsed) in files {
        match parsed {
            Parsed::Report(outcomes) => {
                if spec.run.is_none() {
                    let used = taken.entry(spec.label.clone()).or_default();
                    let run = (0..).find(|r| !used.contains(r)).unwrap_or(0);
                    used.insert(run);
                    spec.run = Some(run);
                }
                entries.extend(outcomes.into_iter().map(|(instance_id, outcome)| Entry {
                    label: spec.label.clone(),
                    instance_id,
                    run: spec.run,
                    outcome,
                }));
            }
            Parsed::Rows(rows) => entries.extend(rows.into_iter().map(|mut e| {
                e.label = e.label.or_else(|| spec.label.clone());
                e.run = e.run.or(spec.run);
                e
            })),
        }
    }
    Ok(Results::from_entries(entries))
}

/// A results file's content.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// Harness or per-instance report: outcomes by instance id (no run, no label).
    Report(Vec<(String, Outcome)>),
    /// JSONL or CSV rows.
    Rows(Vec<Entry>),
}

/// Parses a results file by content: a JSON object (harness or per-instance report), else
/// JSONL when the first non-empty line starts with `{`, else CSV.
///
/// Errors: none of these fit (`path` only names the file in the message).
pub fn parse(text: &str, path: &Path) -> Result<Parsed, ResultsError> {
    let invalid = |message: String| ResultsError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    if let Ok(Value::Object(object)) = serde_json::from_str::<Value>(text) {
        // One object with a string `instance_id` is a single JSONL row (a per-instance
        // report maps ids to objects).
        if !object.get("instance_id").is_some_and(Value::is_string) {
            return report(&object).map(Parsed::Report).map_err(invalid);
        }
        let line = serde_json::to_string(&object).unwrap_or_default();
        return super::rows::jsonl(&line).map(Parsed::Rows).map_err(invalid);
    }
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if first.trim_start().starts_with('{') {
        super::rows::jsonl(text).map(Parsed::Rows).map_err(invalid)
    } else {
        super::rows::csv(text).map(Parsed::Rows).map_err(invalid)
    }
}

const HARNESS_KEYS: [&str; 4] = [
    "resolved_ids",
    "unresolved_ids",
    "empty_patch_ids",
    "error_ids",
];

fn report(object: &serde_json::Map<String, Value>) -> Result<Vec<(String, Outcome)>, String> {
    let mut outcomes: std::collections::BTreeMap<String, Outcome> = Default::default();
    if HARNESS_KEYS.iter().any(|k| object.contains_key(*k)) {
        for key in HARNESS_KEYS {
            let Some(value) = object.get(key) else {
                continue;
            };
            let ids = value
                .as_array()
                .ok_or_else(|| format!("`{key}` is not a list"))?;
            for id in ids {
                let id = id
                    .as_str()
                    .ok_or_else(|| format!("`{key}` holds a non-string id"))?;
                let o = outcomes.entry(id.to_string()).or_default();
                // The harness lists every id it evaluated in these sets, so what it does not
                // say of an id is known: no empty patch unless listed as one.
                o.empty_patch.get_or_insert(false);
                match key {
                    "resolved_ids" => {
                        o.resolved = true;
                        o.applied = Some(true);
                    }
                    "unresolved_ids" => o.applied = Some(true),
                    "empty_patch_ids" => o.empty_patch = Some(true),
                    "error_ids" => o.error = Some(true),
                    _ => {}
                }
            }
        }
        return Ok(outcomes.into_iter().collect());
    }
    for (id, value) in object {
        let resolved = value
            .get("resolved")
            .and_then(Value::as_bool)
            .ok_or_else(|| {
                format!(
                    "not a harness report (no {}) nor a per-instance report \
                     (`{id}` has no boolean `resolved`)",
                    HARNESS_KEYS.join(", ")
                )
            })?;
        let flag = |k: &str| value.get(k).and_then(Value::as_bool);
        let empty = [
            flag("empty_patch"),
            flag("patch_is_None"),
            flag("patch_exists").map(|e| !e),
        ];
        outcomes.insert(
            id.clone(),
            Outcome {
                resolved,
                empty_patch: empty.iter().flatten().copied().reduce(|a, b| a || b),
                applied: flag("patch_successfully_applied"),
                error: flag("error"),
            },
        );
    }
    Ok(outcomes.into_iter().collect())
}
