//! SWE-agent `.traj` files (1.x with `history` tool calls, and older action strings).

use super::*;

// ---------------------------------------------------------------------------------------------
// SWE-agent

pub(super) fn read_swe_agent(doc: &Value, stem: &str) -> Trajectory {
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

pub(super) fn parse_editor_command(line: &str) -> Option<Map<String, Value>> {
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
pub(super) fn shell_split(line: &str) -> Option<Vec<(String, bool)>> {
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
