//! Gold-patch leak check for reference prefixes (`prefix build --gold FILE`).
//!
//! The rule: a prefix **leaks** when a non-trivial added line of its task's gold patch appears
//! in the thought, the action arguments or the observation of one of its steps.
//!
//! - **Added line**: a line of the unified diff that starts with `+` but not with `+++` (the
//!   file header); the leading `+` is removed and the rest trimmed of surrounding whitespace.
//! - **Non-trivial**: the trimmed line is at least [`MIN_LINE_CHARS`] (10) characters long and
//!   is not made only of punctuation and [`TRIVIAL_WORDS`] (keywords such as `return`, `pass`,
//!   `else`, `None`, `self`): `}`, `return`, `pass`, `else:`, `)`, `*/`, `return None` and
//!   `} else {` never count. These are the lines **compared** ([`LeakCheck::compared`]).
//! - **Appears**: whitespace-normalised (every run of whitespace collapsed to one space, ends
//!   trimmed), the line is a substring of one whitespace-normalised text of a prefix step: its
//!   thought, a string value anywhere in its action's arguments (each value on its own), or its
//!   observation. Matching is case-sensitive. Thoughts count because a reference model often
//!   spells out the fix it is about to make before the step that makes it.
//!
//! The gold file is SWE-bench style: a JSON array (or one object) or JSONL, each record with
//! `instance_id` and `patch` (a unified diff). Whether a prefix whose task has no record is
//! written is `prefix build`'s decision ([`super::build`]): it is rejected unless
//! `--no-leak-check`.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use super::{normalise, Prefix, PrefixError};

/// Minimum length, in characters after trimming, of a gold line that can leak.
pub const MIN_LINE_CHARS: usize = 10;

/// Words that alone (with punctuation) make a line trivial.
pub const TRIVIAL_WORDS: &[&str] = &[
    "return",
    "pass",
    "else",
    "elif",
    "if",
    "try",
    "except",
    "finally",
    "raise",
    "break",
    "continue",
    "None",
    "True",
    "False",
    "self",
    "def",
    "class",
    "end",
    "fi",
    "done",
    "then",
    "do",
    "esac",
    "null",
    "nil",
    "true",
    "false",
    "this",
    "yield",
    "await",
    "async",
    "catch",
    "throw",
    "default",
    "case",
    "switch",
    "for",
    "while",
    "in",
    "not",
    "and",
    "or",
    "is",
    "import",
    "from",
    "as",
    "with",
    "let",
    "const",
    "var",
    "fn",
    "func",
    "function",
    "public",
    "private",
    "protected",
    "static",
    "void",
    "new",
    "begin",
    "endif",
    "elsif",
    "unless",
];

/// Gold patches by instance id.
#[derive(Debug, Default, Clone)]
pub struct GoldPatches {
    patches: HashMap<String, String>,
}

impl GoldPatches {
    /// Reads a SWE-bench style file: JSON array, one JSON object, or JSONL.
    pub fn load(path: &Path) -> Result<Self, PrefixError> {
        let text = std::fs::read_to_string(path).map_err(|source| PrefixError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&path.display().to_string(), &text)
    }

    /// Parses the text of a gold file (`name` is used in errors).
    pub fn parse(name: &str, text: &str) -> Result<Self, PrefixError> {
        let err = |message: String| PrefixError::Parse {
            path: name.to_string(),
            message,
        };
        let records: Vec<Value> = match serde_json::from_str::<Value>(text) {
            Ok(Value::Array(items)) => items,
            Ok(one @ Value::Object(_)) => vec![one],
            Ok(_) => return Err(err("expected an array or objects".to_string())),
            Err(_) => text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
                .map(|(i, l)| {
                    serde_json::from_str(l).map_err(|e| err(format!("line {}: {e}", i + 1)))
                })
                .collect::<Result<_, _>>()?,
        };
        let mut patches = HashMap::new();
        for (i, record) in records.iter().enumerate() {
            let id = record.get("instance_id").and_then(Value::as_str);
            let patch = record.get("patch").and_then(Value::as_str);
            match (id, patch) {
                (Some(id), Some(patch)) => {
                    patches.insert(id.to_string(), patch.to_string());
                }
                _ => {
                    return Err(err(format!(
                        "record {}: needs string fields `instance_id` and `patch`",
                        i + 1
                    )))
                }
            }
        }
        Ok(Self { patches })
    }

    /// The gold patch of a task.
    pub fn get(&self, instance_id: &str) -> Option<&str> {
        self.patches.get(instance_id).map(String::as_str)
    }

    /// Number of tasks with a gold patch.
    pub fn len(&self) -> usize {
        self.patches.len()
    }

    /// Whether no task has a gold patch.
    pub fn is_empty(&self) -> bool {
        self.patches.is_empty()
    }
}

/// The added lines of a unified diff that can leak (trimmed, in patch order, no duplicates).
pub fn leak_candidates(patch: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in patch.lines() {
        let Some(added) = line.strip_prefix('+') else {
            continue;
        };
        if added.starts_with("++") {
            continue;
        }
        let trimmed = added.trim();
        if !is_trivial(trimmed) && !out.iter().any(|o| o == trimmed) {
            out.push(trimmed.to_string());
        }
    }
    out
}

/// Whether a trimmed line is too short or only punctuation and [`TRIVIAL_WORDS`].
pub fn is_trivial(line: &str) -> bool {
    if line.chars().count() < MIN_LINE_CHARS {
        return true;
    }
    line.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .all(|w| TRIVIAL_WORDS.contains(&w))
}

/// Which text of a step a gold line was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Thought,
    Action,
    Observation,
}

impl Part {
    /// `thought`, `action` or `observation`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Thought => "thought",
            Self::Action => "action",
            Self::Observation => "observation",
        }
    }
}

/// One leaked gold line and the first place it was found (steps in order, and within a step
/// thought, action, observation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leak {
    /// The gold line, trimmed as in the patch (not normalised).
    pub line: String,
    /// The step it was found in, counted from 1.
    pub step: usize,
    pub part: Part,
}

/// What one prefix was compared with and what was found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeakCheck {
    /// Gold lines compared: the non-trivial added lines of the patch ([`leak_candidates`]).
    pub compared: usize,
    /// Steps whose thought, action arguments and observation were searched (all of them).
    pub steps: usize,
    /// The compared lines found, in patch order.
    pub leaks: Vec<Leak>,
}

impl LeakCheck {
    /// The leaked gold lines, in patch order (the prefix's `leaks` field).
    pub fn lines(&self) -> Vec<String> {
        self.leaks.iter().map(|l| l.line.clone()).collect()
    }
}

/// Checks every step of `prefix` (thought, action arguments, observation) for the
/// non-trivial added lines of `patch`.
pub fn check(prefix: &Prefix, patch: &str) -> LeakCheck {
    let mut texts: Vec<(usize, Part, String)> = Vec::new();
    for (i, step) in prefix.steps.iter().enumerate() {
        texts.push((i + 1, Part::Thought, normalise(&step.thought)));
        let mut args = Vec::new();
        for value in step.action.arguments.values() {
            collect_strings(value, &mut args);
        }
        texts.extend(args.into_iter().map(|a| (i + 1, Part::Action, a)));
        texts.push((i + 1, Part::Observation, normalise(&step.observation)));
    }
    let candidates = leak_candidates(patch);
    let leaks = candidates
        .iter()
        .filter_map(|line| {
            let needle = normalise(line);
            texts
                .iter()
                .find(|(_, _, t)| t.contains(&needle))
                .map(|(step, part, _)| Leak {
                    line: line.clone(),
                    step: *step,
                    part: *part,
                })
        })
        .collect();
    LeakCheck {
        compared: candidates.len(),
        steps: prefix.steps.len(),
        leaks,
    }
}

/// The gold lines of `patch` found in the prefix (see [`check`]), trimmed, in patch order.
pub fn find_leaks(prefix: &Prefix, patch: &str) -> Vec<String> {
    check(prefix, patch).lines()
}

fn collect_strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(normalise(s)),
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| collect_strings(v, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefix::{PrefixAction, PrefixStep, Source};
    use serde_json::{json, Map};

    const PATCH: &str = "diff --git a/inv.py b/inv.py\n--- a/inv.py\n+++ b/inv.py\n@@ -1,5 +1,7 @@\n def total(self):\n-    return sum(l.qty for l in self.lines)\n+    return sum(l.qty * l.unit_price for l in self.lines)\n+    }\n+    return\n+        pass\n+else:\n+)\n+*/\n+    return None\n+} else {\n+x = 1\n";

    const GOLD: &str = "return sum(l.qty * l.unit_price for l in self.lines)";

    fn prefix(args: Value, observation: &str) -> Prefix {
        with_thought("Let me look at `total`.", args, observation)
    }

    fn with_thought(thought: &str, args: Value, observation: &str) -> Prefix {
        let arguments: Map<String, Value> = serde_json::from_value(args).unwrap();
        Prefix {
            instance_id: "a__a-1".into(),
            task_text: String::new(),
            source: Source::default(),
            steps: vec![PrefixStep {
                thought: thought.into(),
                action: PrefixAction {
                    tool: "str_replace_editor".into(),
                    arguments,
                },
                observation: observation.into(),
            }],
            leaks: Vec::new(),
            demo_task: None,
            example: None,
        }
    }

    #[test]
    fn only_non_trivial_added_lines_are_candidates() {
        assert_eq!(leak_candidates(PATCH), vec![GOLD.to_string()]);
        for trivial in [
            "}",
            "return",
            "pass",
            "else:",
            ")",
            "*/",
            "return None",
            "} else {",
            "x = 1",
            "if not self:",
        ] {
            assert!(is_trivial(trivial), "{trivial}");
        }
        assert!(!is_trivial("total += price"));
        assert!(!is_trivial("return self.unit_price"));
    }

    #[test]
    fn found_in_arguments_and_observations_whitespace_normalised() {
        let leak = prefix(
            json!({"command": "str_replace", "path": "/testbed/inv.py",
                   "new_str": "    return sum(l.qty  *  l.unit_price\n        for l in self.lines)"}),
            "ok",
        );
        assert_eq!(find_leaks(&leak, PATCH), vec![GOLD.to_string()]);
        let in_obs = prefix(
            json!({"command": "view", "path": "/testbed/inv.py"}),
            "     7\t    return sum(l.qty * l.unit_price for l in self.lines)\n",
        );
        assert_eq!(check(&in_obs, PATCH).leaks[0].part, Part::Observation);
        let nested = prefix(json!({"edits": [{"text": GOLD}]}), "");
        assert_eq!(check(&nested, PATCH).leaks[0].part, Part::Action);
    }

    #[test]
    fn trivial_overlap_does_not_leak() {
        let clean = prefix(
            json!({"command": "view", "path": "/testbed/inv.py"}),
            "1\tdef total(self):\n2\t    return sum(l.qty for l in self.lines)\n3\t}\n4\treturn\n5\t    return None\n6\t} else {\n",
        );
        let checked = check(&clean, PATCH);
        assert!(checked.leaks.is_empty());
        assert_eq!((checked.compared, checked.steps), (1, 1));
    }

    #[test]
    fn found_in_thoughts_with_step_and_part() {
        let p = with_thought(
            "The fix:\n    return sum(l.qty  *  l.unit_price\n        for l in self.lines)",
            json!({"command": "view", "path": "/testbed/inv.py"}),
            "ok",
        );
        let checked = check(&p, PATCH);
        assert_eq!(
            checked.leaks,
            vec![Leak {
                line: GOLD.to_string(),
                step: 1,
                part: Part::Thought
            }]
        );
        // The first place wins: the thought comes before the action of the same step.
        let both = with_thought(GOLD, json!({"new_str": GOLD}), GOLD);
        assert_eq!(check(&both, PATCH).leaks[0].part, Part::Thought);
        let later = Prefix {
            steps: [prefix(json!({}), "").steps, p.steps].concat(),
            ..prefix(json!({}), "")
        };
        let checked = check(&later, PATCH);
        assert_eq!((checked.steps, checked.leaks[0].step), (2, 2));
        assert_eq!(checked.lines(), vec![GOLD.to_string()]);
    }

    #[test]
    fn gold_files_in_every_shape() {
        let one = r#"{"instance_id": "a__a-1", "patch": "+x\n"}"#;
        let two = r#"{"instance_id": "b__b-2", "patch": "+y\n", "repo": "b/b"}"#;
        let jsonl = GoldPatches::parse("g", &format!("{one}\n\n{two}\n")).unwrap();
        assert_eq!(jsonl.len(), 2);
        assert_eq!(jsonl.get("b__b-2"), Some("+y\n"));
        assert_eq!(
            GoldPatches::parse("g", &format!("[{one},{two}]"))
                .unwrap()
                .len(),
            2
        );
        assert_eq!(GoldPatches::parse("g", one).unwrap().len(), 1);
        let err = GoldPatches::parse("g.json", r#"[{"instance_id": "x"}]"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("g.json") && err.contains("patch"), "{err}");
    }
}
