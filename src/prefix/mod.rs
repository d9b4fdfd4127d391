//! Reference-trajectory prefixes (ASAP, "prefix"): the first K steps of a reference run of the
//! same task, rendered before the live steps, identical for every evaluated model.
//!
//! Prefix files are JSON (one prefix, or an array) or JSONL (one prefix per line) in the
//! neutral action model, so one prefix serves every format and profile:
//!
//! ```json
//! {"instance_id": "astropy__astropy-12907",
//!  "task_text": "text that identifies the task (e.g. the problem statement)",
//!  "source": {"model": "…", "date": "2026-11-30", "scaffold": "swe-agent"},
//!  "steps": [{"thought": "…", "action": {"tool": "bash", "arguments": {"command": "ls"}},
//!             "observation": "…"}],
//!  "leaks": []}
//! ```
//!
//! `tool` is a neutral tag (`bash`, `str_replace_editor`, `submit`, or another tool's name);
//! `leaks` lists gold-patch lines found by `prefix build --allow-leaks` (empty when clean, or
//! when written unchecked with `--no-leak-check`).
//!
//! Matching a request to its prefix ([`PrefixStore::select`]), first hit wins: an explicit task
//! id (`X-ASAP-Task` header, or `metadata.instance_id` in the body); the task text found in the
//! first user message (whitespace-normalised, through an index of fixed-length windows, so the
//! cost does not grow with the number of prefixes; the longest matching text wins; texts
//! shorter than [`MIN_FINGERPRINT`] are only matched by id); the profile's default
//! demonstration; none.

pub mod build;
pub mod leak;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::conversation::Step;
use crate::openai::chat::TaskSource;
use crate::profile::Action;
use crate::profile::SUBMIT_TAG;
use crate::trace::{MatchedBy, PrefixSetId};

/// Built-in demonstrations, selected by a profile's `default_prefix`.
pub const BUILTIN: [(&str, &str); 1] = [(
    "shell-demo",
    include_str!("../../prefixes/defaults/shell-demo.json"),
)];

/// Characters of normalised task text that form one fingerprint window.
pub const WINDOW: usize = 64;

/// Shortest task text (normalised characters) matched by fingerprint: shorter texts could
/// match a scaffold's own template text, so they are only matched by explicit id.
pub const MIN_FINGERPRINT: usize = 24;

/// One reference prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prefix {
    pub instance_id: String,
    /// Text identifying the task, found in the first user message of its requests.
    #[serde(default)]
    pub task_text: String,
    #[serde(default)]
    pub source: Source,
    pub steps: Vec<PrefixStep>,
    /// Gold-patch lines this prefix was found to contain (kept with `--allow-leaks`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leaks: Vec<String>,
    /// Only for demonstrations: the made-up task the steps belong to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demo_task: Option<String>,
    /// Only for task prefixes: a demonstration (its `instance_id`, e.g. `shell-demo`) rendered
    /// as the example trajectory before this prefix, cut to the same K. Without it a task
    /// prefix is rendered alone (the paper's setting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub example: Option<String>,
}

/// Where a prefix came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaffold: Option<String>,
}

/// One step of a prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefixStep {
    #[serde(default)]
    pub thought: String,
    pub action: PrefixAction,
    #[serde(default)]
    pub observation: String,
}

/// A neutral action: tag and arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefixAction {
    pub tool: String,
    #[serde(default)]
    pub arguments: Map<String, Value>,
}

impl PrefixStep {
    /// The step in the conversation model.
    pub fn to_step(&self) -> Step {
        let action = if self.action.tool == SUBMIT_TAG {
            Action::Submit { message: None }
        } else {
            Action::Call {
                tag: self.action.tool.clone(),
                arguments: self.action.arguments.clone().into(),
            }
        };
        Step {
            thought: self.thought.as_str().into(),
            action: Some(action),
            observation: Some(self.observation.as_str().into()),
            ..Step::default()
        }
    }

    /// The prefix step of a conversation step (the inverse of [`PrefixStep::to_step`]).
    pub fn from_step(step: &Step) -> Option<Self> {
        let action = match step.action.as_ref()? {
            Action::Submit { .. } => PrefixAction {
                tool: SUBMIT_TAG.to_string(),
                arguments: Map::new(),
            },
            Action::Call { tag, arguments } => PrefixAction {
                tool: tag.clone(),
                arguments: (**arguments).clone(),
            },
        };
        Some(Self {
            thought: step.thought.to_string(),
            action,
            observation: step.observation.as_deref().unwrap_or_default().to_string(),
        })
    }
}

/// The prefix chosen for a request, cut to K steps.
#[derive(Debug, Clone, PartialEq)]
pub struct Selected {
    /// `instance_id` of the prefix.
    pub id: String,
    /// How it was matched: `header`, `metadata`, `fingerprint` or `default`.
    pub matched_by: MatchedBy,
    /// The steps, at most K.
    pub steps: Vec<Step>,
    /// For a demonstration: its made-up task (rendered as an example, not as this task's steps).
    pub demo_task: Option<String>,
    /// For a task prefix that names one (`example`): that demonstration, also cut to K.
    pub example: Option<Box<Selected>>,
}

/// Prefix loading failure.
#[derive(Debug, thiserror::Error)]
pub enum PrefixError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("prefix {instance_id}: its example {example:?} is not a demonstration (a prefix with a demo_task) in the built-in ones or --prefixes")]
    UnknownExample {
        instance_id: String,
        example: String,
    },
}

/// What [`PrefixStore::add_tasks`] took from a task file.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TasksAdded {
    /// Tasks read (each id once).
    pub tasks: usize,
    /// Ids whose statement is under [`MIN_FINGERPRINT`] normalised chars: never identified
    /// (such a text could be a scaffold's own template).
    pub too_short: Vec<String>,
    /// Ids seen again later in the file: the later statements are ignored.
    pub duplicates: Vec<String>,
}

/// All prefixes, indexed.
#[derive(Debug, Default)]
pub struct PrefixStore {
    by_id: HashMap<String, Prefix>,
    /// Every task text that identifies a task, normalised once, with the task's id: the
    /// prefixes' `task_text`s and the problem statements of `serve --tasks` (so a session of a
    /// task without a prefix still gets its `instance_id`; a task may have both).
    texts: Vec<(String, String)>,
    /// The first [`WINDOW`] normalised chars of a text → its indices in `texts`.
    windows: HashMap<String, Vec<usize>>,
    /// Texts shorter than a window, matched by containment (few in practice): indices.
    short: Vec<usize>,
    defaults: HashMap<String, Prefix>,
    k: usize,
}

/// Whitespace runs collapsed to one space, trimmed.
pub fn normalise(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Parses a prefix file: a JSON object, a JSON array of objects, or JSONL.
pub fn parse_file(name: &str, text: &str) -> Result<Vec<Prefix>, PrefixError> {
    let err = |message: String| PrefixError::Parse {
        path: name.to_string(),
        message,
    };
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        return serde_json::from_str(text).map_err(|e| err(e.to_string()));
    }
    if let Ok(one) = serde_json::from_str::<Prefix>(text) {
        return Ok(vec![one]);
    }
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| err(format!("line {}: {e}", i + 1))))
        .collect()
}

impl PrefixStore {
    /// The built-in demonstrations plus every `*.json`/`*.jsonl` file in `dirs`; steps are cut
    /// to `k` (0 disables prefixes). A file's prefix with a `demo_task` is a demonstration and
    /// replaces the built-in one with its `instance_id`. Errors: unreadable or malformed files,
    /// and a task prefix whose `example` names no demonstration.
    pub fn load(dirs: &[PathBuf], k: usize) -> Result<Self, PrefixError> {
        let mut store = Self {
            k,
            ..Self::default()
        };
        for (name, text) in BUILTIN {
            for p in parse_file(&format!("builtin {name}"), text)? {
                store.defaults.insert(name.to_string(), p);
            }
        }
        for dir in dirs {
            for path in prefix_files(dir)? {
                let text = std::fs::read_to_string(&path).map_err(|source| PrefixError::Read {
                    path: path.clone(),
                    source,
                })?;
                for p in parse_file(&path.display().to_string(), &text)? {
                    // A demonstration (it has a `demo_task`) replaces the built-in one of the
                    // same id: the example a profile's `default_prefix` names can be edited
                    // without a rebuild.
                    if p.demo_task.is_some() {
                        store.defaults.insert(p.instance_id.clone(), p);
                    } else {
                        store.insert(p);
                    }
                }
            }
        }
        // A misspelt `example` would silently drop the demonstration from every prompt.
        let mut ids: Vec<&String> = store.by_id.keys().collect();
        ids.sort();
        for id in ids {
            if let Some(example) = &store.by_id[id].example {
                if !store.defaults.contains_key(example) {
                    return Err(PrefixError::UnknownExample {
                        instance_id: id.clone(),
                        example: example.clone(),
                    });
                }
            }
        }
        Ok(store)
    }

    /// Puts a task text in the fingerprint index under `id`; `false` when it is too short to
    /// be matched (under [`MIN_FINGERPRINT`] normalised chars).
    fn index_text(&mut self, id: &str, task_text: &str) -> bool {
        let text = normalise(task_text);
        let n = text.chars().count();
        let at = self.texts.len();
        if n >= WINDOW {
            let key: String = text.chars().take(WINDOW).collect();
            self.windows.entry(key).or_default().push(at);
        } else if n >= MIN_FINGERPRINT {
            self.short.push(at);
        } else {
            return false;
        }
        self.texts.push((text, id.to_string()));
        true
    }

    /// Adds the tasks of a dataset file (`serve --tasks`): a JSON array or JSONL of objects
    /// with `instance_id` and `problem_statement` (SWE-bench's fields; other keys ignored; a
    /// UTF-8 byte-order mark is skipped). A task that also has a prefix is identified by either
    /// text. Errors: unreadable file, a line or element that is not such an object.
    pub fn add_tasks(&mut self, path: &Path) -> Result<TasksAdded, PrefixError> {
        #[derive(Deserialize)]
        struct Task {
            instance_id: String,
            problem_statement: String,
        }
        let text = std::fs::read_to_string(path).map_err(|source| PrefixError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let bad = |e: serde_json::Error| PrefixError::Parse {
            path: path.display().to_string(),
            message: format!(
                "a task file holds objects with instance_id and problem_statement: {e}"
            ),
        };
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        let tasks: Vec<Task> = if text.trim_start().starts_with('[') {
            serde_json::from_str(text).map_err(bad)?
        } else {
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .map(serde_json::from_str)
                .collect::<Result<_, _>>()
                .map_err(bad)?
        };
        let mut added = TasksAdded::default();
        let mut seen = std::collections::HashSet::new();
        for task in tasks {
            if !seen.insert(task.instance_id.clone()) {
                added.duplicates.push(task.instance_id);
                continue;
            }
            added.tasks += 1;
            if !self.index_text(&task.instance_id, &task.problem_statement) {
                added.too_short.push(task.instance_id);
            }
        }
        Ok(added)
    }

    /// The set's identity ([`PrefixSetId`]); K is recorded apart (`prefix_k`).
    pub fn id(&self) -> PrefixSetId {
        let mut text = String::new();
        for map in [&self.by_id, &self.defaults] {
            let mut ids: Vec<&String> = map.keys().collect();
            ids.sort();
            for id in ids {
                // A `Prefix` always serialises (strings, numbers and JSON values only).
                text.push_str(&serde_json::to_string(&map[id]).unwrap_or_default());
                text.push('\n');
            }
            text.push('\n');
        }
        PrefixSetId {
            sha256: crate::util::sha256_hex(text.as_bytes()),
            prefixes: self.by_id.len(),
        }
    }

    /// Adds one prefix to the index (a later one with the same id replaces it).
    pub fn insert(&mut self, prefix: Prefix) {
        self.index_text(&prefix.instance_id, &prefix.task_text);
        self.by_id.insert(prefix.instance_id.clone(), prefix);
    }

    /// Number of task prefixes (demonstrations not counted).
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether there are no task prefixes.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The prefix for a request: by explicit id, by the task text found in `first_user`, by
    /// the profile's `default_prefix`, or none. `None` also when K is 0.
    pub fn select(
        &self,
        explicit: Option<(&str, TaskSource)>,
        first_user: &str,
        default: Option<&str>,
    ) -> Option<Selected> {
        let identified = match explicit {
            Some(_) => None,
            None => self.identify(first_user),
        };
        self.select_identified(explicit, identified, default)
    }

    /// [`Self::select`] with the fingerprint already taken ([`Self::identify`] of the first
    /// user message), so a request normalises and scans its task text once.
    pub fn select_identified(
        &self,
        explicit: Option<(&str, TaskSource)>,
        identified: Option<&str>,
        default: Option<&str>,
    ) -> Option<Selected> {
        if self.k == 0 {
            return None;
        }
        let (prefix, matched_by) = explicit
            .and_then(|(id, how)| self.by_id.get(id).map(|p| (p, MatchedBy::from(how))))
            .or_else(|| {
                identified
                    .and_then(|id| self.by_id.get(id))
                    .map(|p| (p, MatchedBy::Fingerprint))
            })
            .or_else(|| {
                default
                    .and_then(|d| self.defaults.get(d))
                    .map(|p| (p, MatchedBy::Default))
            })?;
        let example = prefix
            .example
            .as_deref()
            .filter(|_| prefix.demo_task.is_none())
            .and_then(|name| self.defaults.get(name))
            .map(|demo| Box::new(self.cut(demo, MatchedBy::Example)));
        Some(Selected {
            example,
            ..self.cut(prefix, matched_by)
        })
    }

    fn cut(&self, prefix: &Prefix, matched_by: MatchedBy) -> Selected {
        Selected {
            id: prefix.instance_id.clone(),
            matched_by,
            steps: prefix
                .steps
                .iter()
                .take(self.k)
                .map(PrefixStep::to_step)
                .collect(),
            demo_task: prefix.demo_task.clone(),
            example: None,
        }
    }

    /// The task whose text the first user message holds, by fingerprint, among the prefixes'
    /// tasks and the known tasks ([`Self::add_tasks`]): its `instance_id`. Several match: the
    /// longest text. Works with K = 0 too (no prefix is rendered, the task is still known).
    pub fn identify(&self, first_user: &str) -> Option<&str> {
        // Nothing to match (no task prefixes loaded): skip normalising a long task text.
        if self.windows.is_empty() && self.short.is_empty() {
            return None;
        }
        let text = normalise(first_user);
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        if chars.len() >= WINDOW {
            for start in 0..=chars.len() - WINDOW {
                let from = chars[start].0;
                let to = chars.get(start + WINDOW).map_or(text.len(), |c| c.0);
                if let Some(at) = self.windows.get(&text[from..to]) {
                    // Several tasks may share a start: the longest text that matches wins.
                    let hit = at
                        .iter()
                        .map(|&i| &self.texts[i])
                        .filter(|(t, _)| text[from..].starts_with(t.as_str()))
                        .max_by_key(|(t, _)| t.len())
                        .map(|(_, id)| id.as_str());
                    if hit.is_some() {
                        return hit;
                    }
                }
            }
        }
        self.short
            .iter()
            .map(|&i| &self.texts[i])
            .filter(|(t, _)| text.contains(t.as_str()))
            .max_by_key(|(t, _)| t.len())
            .map(|(_, id)| id.as_str())
    }
}

/// The prefix files of `dir`: itself when it is a file (a set written by `prefix build`), else
/// its `*.json`/`*.jsonl` files but provenance files, sorted.
fn prefix_files(dir: &Path) -> Result<Vec<PathBuf>, PrefixError> {
    if dir.is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let read = |source| PrefixError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(read)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "json" || e == "jsonl"))
        // A built set's provenance (`prefix build`) sits next to its prefixes.
        .filter(|p| {
            !p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(build::PROVENANCE_SUFFIX))
        })
        .collect();
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn prefix(id: &str, task: &str, n: usize) -> Prefix {
        Prefix {
            instance_id: id.into(),
            task_text: task.into(),
            source: Source::default(),
            steps: (0..n)
                .map(|i| PrefixStep {
                    thought: format!("t{i}"),
                    action: PrefixAction {
                        tool: "bash".into(),
                        arguments: Map::from_iter([(
                            "command".to_string(),
                            Value::from(format!("c{i}")),
                        )]),
                    },
                    observation: format!("o{i}"),
                })
                .collect(),
            leaks: Vec::new(),
            demo_task: None,
            example: None,
        }
    }

    #[test]
    fn a_task_file_names_tasks_without_a_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("test.jsonl");
        let a = "The   function `total()` ignores unit_price of each line,\nso totals are wrong for every order with a price other than one.";
        let e = "Parsing a duration such as 5m returns 18000 seconds instead of 300 seconds.";
        let a_statement =
            "Consider this: the order totals are computed without the unit price of the lines.";
        std::fs::write(
            &file,
            format!(
                "\u{feff}{}\n{}\n{}\n",
                json!({"instance_id": "a__a-1", "problem_statement": a_statement}),
                json!({"instance_id": "e__e-5", "problem_statement": e, "repo": "e/e"}),
                json!({"instance_id": "e__e-5", "problem_statement": "A second statement of the same id, ignored."})
            ),
        )
        .unwrap();
        let mut s = store(3);
        let before = s.id();
        let added = s.add_tasks(&file).unwrap();
        assert_eq!(
            added,
            TasksAdded {
                tasks: 2,
                too_short: vec![],
                duplicates: vec!["e__e-5".to_string()]
            }
        );
        assert_eq!(s.id(), before, "known tasks are not part of the prefix set");
        let user = format!("<pr_description>\n{e}\n</pr_description>");
        assert_eq!(s.identify(&user), Some("e__e-5"));
        // Identified, but it has no prefix: the demonstration, as before.
        let selected = s.select(None, &user, Some("shell-demo")).unwrap();
        assert_eq!(selected.matched_by, MatchedBy::Default);
        // A task with a prefix is identified by the prefix's text and by the file's statement,
        // and either way gets its prefix.
        assert_eq!(s.identify(&format!("Fix this: {a}")), Some("a__a-1"));
        let by_statement = format!("<pr_description>\n{a_statement}\n</pr_description>");
        assert_eq!(s.identify(&by_statement), Some("a__a-1"));
        let selected = s.select(None, &by_statement, Some("shell-demo")).unwrap();
        assert_eq!(
            (selected.id.as_str(), selected.matched_by),
            ("a__a-1", MatchedBy::Fingerprint)
        );
        assert_eq!(
            s.identify("A second statement of the same id, ignored."),
            None
        );
        assert_eq!(s.identify("an unrelated task text that nobody knows"), None);
        std::fs::write(
            &file,
            "{\"instance_id\": \"s-1\", \"problem_statement\": \"Fix it.\"}\n",
        )
        .unwrap();
        assert_eq!(
            s.add_tasks(&file).unwrap().too_short,
            vec!["s-1".to_string()]
        );
        assert_eq!(
            s.identify("Fix it."),
            None,
            "too short to be told from a template"
        );
        std::fs::write(&file, "").unwrap();
        assert_eq!(s.add_tasks(&file).unwrap(), TasksAdded::default());
        std::fs::write(&file, "{\"id\": 1}\n").unwrap();
        assert!(s.add_tasks(&file).is_err());
    }

    fn store(k: usize) -> PrefixStore {
        let mut s = PrefixStore::load(&[], k).unwrap();
        s.insert(prefix("a__a-1", "The   function `total()` ignores unit_price of each line,\nso totals are wrong for every order with a price other than one.", 5));
        s.insert(prefix(
            "b__b-2",
            "Slugify keeps double dashes in titles.",
            5,
        ));
        s.insert(prefix("c__c-3", "Too short", 5));
        let shared =
            "The tokenizer drops the last token of a line when the line ends with a comment marker";
        s.insert(prefix(
            "d__d-1",
            &format!("{shared} and then it crashes."),
            5,
        ));
        s.insert(prefix(
            "d__d-2",
            &format!("{shared} and then it crashes. Also the lexer loses line numbers."),
            5,
        ));
        for i in 0..2500 {
            s.insert(prefix(&format!("x__x-{i}"), &format!("Unrelated issue number {i} about a parser that fails on empty input files and needs care."), 3));
        }
        s
    }

    #[test]
    fn matching_order_and_k() {
        let s = store(3);
        let user = "<pr_description>\nThe function `total()` ignores unit_price of each line, so totals are wrong for every order with a price other than one.\n</pr_description>";
        let hit = s.select(None, user, Some("shell-demo")).unwrap();
        assert_eq!(
            (hit.id.as_str(), hit.matched_by, hit.steps.len()),
            ("a__a-1", MatchedBy::Fingerprint, 3)
        );
        let hit = s
            .select(Some(("b__b-2", TaskSource::Header)), user, None)
            .unwrap();
        assert_eq!(
            (hit.id.as_str(), hit.matched_by),
            ("b__b-2", MatchedBy::Header)
        );
        let hit = s
            .select(
                None,
                "Please fix: Slugify keeps   double dashes in titles. Thanks",
                None,
            )
            .unwrap();
        assert_eq!(hit.id, "b__b-2");
        assert_eq!(
            s.select(None, "Too short, really", None),
            None,
            "short texts only by id"
        );
        let long = "<issue>The tokenizer drops the last token of a line when the line ends with a comment marker and then it crashes. Also the lexer loses line numbers.</issue>";
        assert_eq!(
            s.select(None, long, None).unwrap().id,
            "d__d-2",
            "the longest match wins"
        );
        let hit = s
            .select(
                Some(("unknown", TaskSource::Metadata)),
                "nothing known",
                Some("shell-demo"),
            )
            .unwrap();
        assert_eq!(
            (hit.id.as_str(), hit.matched_by),
            ("shell-demo", MatchedBy::Default)
        );
        assert!(hit.demo_task.is_some());
        assert_eq!(s.select(None, "nothing known", None), None);
        assert_eq!(
            store(0).select(
                Some(("a__a-1", TaskSource::Header)),
                user,
                Some("shell-demo")
            ),
            None
        );
        assert_eq!(s.len(), 2505);
    }

    #[test]
    fn files_in_every_shape() {
        let one = serde_json::to_string(&prefix("a", "t", 1)).unwrap();
        assert_eq!(parse_file("x", &one).unwrap().len(), 1);
        assert_eq!(parse_file("x", &format!("[{one},{one}]")).unwrap().len(), 2);
        assert_eq!(
            parse_file("x", &format!("{one}\n\n{one}\n")).unwrap().len(),
            2
        );
        let err = parse_file("f.jsonl", &format!("{one}\n{{\"bad\": 1}}\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("f.jsonl") && err.contains("line 2"), "{err}");
        let step = prefix("a", "t", 1).steps[0].to_step();
        assert_eq!(
            PrefixStep::from_step(&step).unwrap(),
            prefix("a", "t", 1).steps[0]
        );
    }

    #[test]
    fn a_demonstration_in_a_prefix_dir_replaces_the_builtin_one() {
        let dir = std::env::temp_dir().join(format!("asap-demo-override-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut demo = prefix("shell-demo", "", 2);
        demo.demo_task = Some("my own example task".into());
        std::fs::write(dir.join("demo.json"), serde_json::to_string(&demo).unwrap()).unwrap();
        let s = PrefixStore::load(std::slice::from_ref(&dir), 3).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let hit = s.select(None, "any task", Some("shell-demo")).unwrap();
        assert_eq!(hit.demo_task.as_deref(), Some("my own example task"));
        assert_eq!(hit.steps.len(), 2);
        assert!(s.is_empty(), "a demonstration is not a task prefix");
    }

    #[test]
    fn an_example_that_names_no_demonstration_is_an_error() {
        let dir = std::env::temp_dir().join(format!("asap-bad-example-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut task = prefix(
            "t__t-1",
            "a task text long enough to be matched by its fingerprint",
            1,
        );
        task.example = Some("no-such-demo".into());
        std::fs::write(dir.join("t.json"), serde_json::to_string(&task).unwrap()).unwrap();
        let err = PrefixStore::load(std::slice::from_ref(&dir), 3)
            .unwrap_err()
            .to_string();
        task.example = Some("shell-demo".into());
        std::fs::write(dir.join("t.json"), serde_json::to_string(&task).unwrap()).unwrap();
        let ok = PrefixStore::load(std::slice::from_ref(&dir), 3);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            err.contains("t__t-1") && err.contains("no-such-demo"),
            "{err}"
        );
        assert!(ok.is_ok(), "the built-in demonstration can be named");
    }
}
