//! Content dialects: scaffolds that send no `tools` and parse the reply's `content` themselves
//! (issue 6). The model still writes the neutral actions; a dialect reads the scaffold's past
//! replies back into actions (for the history) and writes a new action in the scaffold's
//! format.
//!
//! - `mini_text`: mini-swe-agent's text mode: a thought, then exactly one fenced block with
//!   the info string `mswea_bash_command` (`bash` is read too, for v1). Finishing is the
//!   command `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`.
//! - `terminus_json`: Terminus-2's JSON: `{"analysis", "plan", "commands": [{"keystrokes",
//!   "duration"}], "task_complete"}`. A shell action becomes keystrokes ending in a newline
//!   with a duration of 1 s; finishing is `task_complete: true` with no commands, and the
//!   confirmation Terminus then asks for is answered the same way.
//! - `terminus_xml`: the same fields as Terminus-2's XML variant: `<response><analysis>…
//!   </analysis><plan>…</plan><commands><keystrokes duration="1.0">…</keystrokes></commands>
//!   <task_complete>…</task_complete></response>`. Keystrokes are written raw, as Terminus'
//!   plain XML parser reads them (no entity escaping).
//! - `openhands_function`: OpenHands CodeAct without native tool calling: the tools are
//!   described in the system prompt (`---- BEGIN FUNCTION #1: NAME ----` blocks, read by
//!   [`tools_from_prompt`]) and a reply is one `<function=NAME>` block with one
//!   `<parameter=NAME>value</parameter>` per argument (profile defaults such as
//!   `security_risk` included) and nothing after `</function>`.
//!
//! A reply without an action is sent as the plain thought, so the scaffold's own
//! format-error path runs, as with tool calls.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::conversation::Action;
use crate::openai::chat::Tool;
use crate::profile::{ScaffoldReply, ToolSet, SHELL_TAG};

/// mini-swe-agent's completion command.
pub const MINI_SUBMIT: &str = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT";

/// Seconds Terminus-2 waits after a command the proxy sends.
pub const TERMINUS_DURATION_S: f64 = 1.0;

/// A scaffold's content format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    MiniText,
    TerminusJson,
    TerminusXml,
    /// OpenHands CodeAct without native tool calling: `<function=NAME>` blocks.
    OpenhandsFunction,
}

fn shell(command: &str) -> Action {
    Action::Call {
        tag: SHELL_TAG.to_string(),
        arguments: Map::from_iter([("command".to_string(), Value::from(command))]),
    }
}

impl Dialect {
    /// The reply content for a thought and an action (none: the plain thought).
    pub fn write(self, thought: &str, action: Option<&Action>, tools: &ToolSet) -> String {
        let thought = thought.trim();
        if let (Self::OpenhandsFunction, Some(a)) = (self, action) {
            return write_function(thought, a, tools);
        }
        let command = |a: &Action| match a {
            Action::Call { arguments, .. } => arguments
                .get("command")
                .and_then(Value::as_str)
                .map(str::to_string),
            Action::Submit { .. } => None,
        };
        match (self, action) {
            (_, None) => thought.to_string(),
            (Self::OpenhandsFunction, Some(_)) => unreachable_written(thought),
            (Self::MiniText, Some(a)) => {
                let cmd = match a {
                    Action::Submit { .. } => MINI_SUBMIT.to_string(),
                    other => command(other).unwrap_or_default(),
                };
                // mini reads the block up to the first line starting with ```: a command
                // with such a line cannot be written, so it goes back as a format error.
                if cmd.starts_with("```") || cmd.contains("\n```") {
                    return thought.to_string();
                }
                // Fences quoted in the thought would be a second block for mini.
                let thought = thought.replace("```", "~~~");
                format!("{thought}\n\n```mswea_bash_command\n{cmd}\n```")
                    .trim_start()
                    .to_string()
            }
            (Self::TerminusXml, Some(a)) => {
                let (commands, done) = match a {
                    Action::Submit { .. } => (String::new(), true),
                    other => {
                        let mut keys = command(other).unwrap_or_default();
                        if keys.contains("</keystrokes") {
                            // Raw keystrokes cannot hold their own closing tag.
                            return thought.to_string();
                        }
                        if !keys.ends_with('\n') {
                            keys.push('\n');
                        }
                        (
                            format!(
                                "<keystrokes duration=\"{TERMINUS_DURATION_S:.1}\">{keys}</keystrokes>\n"
                            ),
                            false,
                        )
                    }
                };
                let plan = if done { "The task is complete." } else { "Run the next command." };
                format!(
                    "<response>\n<analysis>{thought}</analysis>\n<plan>{plan}</plan>\n<commands>\n{commands}</commands>\n<task_complete>{done}</task_complete>\n</response>"
                )
            }
            (Self::TerminusJson, Some(Action::Submit { .. })) => json!({
                "analysis": thought, "plan": "The task is complete.", "commands": [], "task_complete": true
            })
            .to_string(),
            (Self::TerminusJson, Some(a)) => {
                let mut keys = command(a).unwrap_or_default();
                if !keys.ends_with('\n') {
                    keys.push('\n');
                }
                json!({
                    "analysis": thought,
                    "plan": "Run the next command.",
                    "commands": [{"keystrokes": keys, "duration": TERMINUS_DURATION_S}],
                    "task_complete": false
                })
                .to_string()
            }
        }
    }

    /// A past reply of the scaffold's history: its thought and action, if it had one.
    pub fn read(self, content: &str, tools: &ToolSet) -> (String, Option<Action>) {
        match self {
            Self::OpenhandsFunction => read_function(content, tools),
            Self::MiniText => read_mini(content),
            Self::TerminusJson => read_terminus(content),
            Self::TerminusXml => read_terminus_xml(content),
        }
    }

    /// The reply Terminus-2's confirmation question gets after a `task_complete: true`.
    pub fn confirmation(self) -> Option<String> {
        match self {
            Self::TerminusJson | Self::TerminusXml => Some(self.write(
                "I checked the work; the task is complete.",
                Some(&Action::Submit { message: None }),
                &ToolSet::empty(),
            )),
            Self::MiniText | Self::OpenhandsFunction => None,
        }
    }
}

/// Written above (`write_function`); kept for an exhaustive match.
fn unreachable_written(thought: &str) -> String {
    thought.to_string()
}

fn write_function(thought: &str, action: &Action, tools: &ToolSet) -> String {
    let ScaffoldReply::ToolCall { name, arguments } = tools.to_scaffold(action, thought) else {
        return thought.to_string();
    };
    let mut out = String::new();
    if !thought.is_empty() {
        out.push_str(thought);
        out.push_str("\n\n");
    }
    out.push_str(&format!("<function={name}>\n"));
    for (key, value) in &arguments {
        let text = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        if text.contains("</parameter") || text.contains("</function") {
            // OpenHands reads a value up to the first closing tag: not writable.
            return thought.to_string();
        }
        out.push_str(&format!("<parameter={key}>{text}</parameter>\n"));
    }
    out.push_str("</function>");
    out
}

fn read_function(content: &str, tools: &ToolSet) -> (String, Option<Action>) {
    let start = if content.starts_with("<function=") {
        Some(0)
    } else {
        content.find("\n<function=").map(|i| i + 1)
    };
    let Some(start) = start else {
        return (content.trim().to_string(), None);
    };
    let thought = content[..start].trim().to_string();
    let head = &content[start + "<function=".len()..];
    let Some(name_end) = head.find('>') else {
        return (thought, None);
    };
    let name = head[..name_end].trim();
    let body_all = &head[name_end + 1..];
    let body = body_all
        .find("</function")
        .map_or(body_all, |e| &body_all[..e]);
    let mut arguments = Map::new();
    let mut rest = body;
    while let Some(p) = rest.find("<parameter=") {
        let after = &rest[p + "<parameter=".len()..];
        let Some(key_end) = after.find('>') else {
            break;
        };
        let key = after[..key_end].trim().to_string();
        let value_all = &after[key_end + 1..];
        let end = value_all.find("</parameter>").unwrap_or(value_all.len());
        let raw = value_all[..end]
            .strip_prefix('\n')
            .unwrap_or(&value_all[..end]);
        let raw = raw.strip_suffix('\n').unwrap_or(raw);
        let value = serde_json::from_str::<Value>(raw)
            .ok()
            .filter(|v| !v.is_string() && !v.is_object())
            .unwrap_or_else(|| Value::String(raw.to_string()));
        arguments.insert(key, value);
        rest = &value_all[(end + "</parameter>".len()).min(value_all.len())..];
    }
    (thought, Some(tools.from_scaffold(name, &arguments)))
}

/// Tools described in OpenHands' text-mode system prompt: `---- BEGIN FUNCTION #N: NAME ----`
/// blocks with `Description:` and parameter lines `(k) NAME (TYPE, required|optional): DESC`
/// (an `Allowed values: [`a`, `b`]` line makes an enum).
pub fn tools_from_prompt(text: &str) -> Vec<Tool> {
    let mut tools = Vec::new();
    for block in text.split("---- BEGIN FUNCTION #").skip(1) {
        let Some((header, rest)) = block.split_once('\n') else {
            continue;
        };
        let Some(name) = header
            .split(':')
            .nth(1)
            .map(|n| n.trim().trim_end_matches('-').trim())
        else {
            continue;
        };
        let body = rest.split("---- END FUNCTION").next().unwrap_or_default();
        let description = body
            .split("Description:")
            .nth(1)
            .and_then(|d| d.split("\nParameters:").next())
            .unwrap_or_default()
            .trim()
            .to_string();
        let mut properties = Map::new();
        let mut required = Vec::new();
        let mut last: Option<String> = None;
        for line in body.lines() {
            let t = line.trim();
            if let Some(values) = t.strip_prefix("Allowed values:") {
                if let Some(p) = last.as_ref().and_then(|l| properties.get_mut(l)) {
                    let list: Vec<Value> = values
                        .trim()
                        .trim_start_matches('[')
                        .trim_end_matches(']')
                        .split(',')
                        .map(|v| {
                            Value::from(v.trim().trim_matches('`').trim_matches('\'').to_string())
                        })
                        .collect();
                    p["enum"] = Value::Array(list);
                }
                continue;
            }
            let Some(rest) = t
                .strip_prefix('(')
                .and_then(|r| r.split_once(')'))
                .map(|(_, r)| r.trim())
            else {
                continue;
            };
            let Some((pname, spec)) = rest.split_once(' ') else {
                continue;
            };
            let Some(spec) = spec.strip_prefix('(') else {
                continue;
            };
            let Some((kinds, desc)) = spec.split_once("):") else {
                continue;
            };
            let mut kinds = kinds.split(',').map(str::trim);
            let ty = kinds.next().unwrap_or("string");
            if kinds.next() == Some("required") {
                required.push(Value::from(pname));
            }
            properties.insert(
                pname.to_string(),
                json!({"type": ty, "description": desc.trim()}),
            );
            last = Some(pname.to_string());
        }
        let tool = json!({"type": "function", "function": {
            "name": name, "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required}
        }});
        if let Ok(t) = serde_json::from_value::<Tool>(tool) {
            tools.push(t);
        }
    }
    tools
}

fn read_mini(content: &str) -> (String, Option<Action>) {
    let mut offset = 0;
    while offset < content.len() {
        let line_end = content[offset..]
            .find('\n')
            .map_or(content.len(), |i| offset + i);
        let line = content[offset..line_end].trim_start();
        if let Some((ch, len, info)) = crate::parse::scan::fence_marker(line) {
            if matches!(info.trim(), "mswea_bash_command" | "bash") {
                let body_start = (line_end + 1).min(content.len());
                let rest = &content[body_start..];
                let close = rest
                    .match_indices('\n')
                    .map(|(i, _)| i + 1)
                    .chain([0])
                    .find(|&i| {
                        let l = rest[i..].split('\n').next().unwrap_or_default().trim();
                        l.len() >= len && l.chars().all(|c| c == ch)
                    });
                let body =
                    close.map_or(rest, |c| rest[..c].strip_suffix('\n').unwrap_or(&rest[..c]));
                let thought = content[..offset].trim().to_string();
                let cmd = body.trim_end_matches('\n');
                let action = if cmd.trim_start().starts_with(MINI_SUBMIT) {
                    Action::Submit { message: None }
                } else {
                    shell(cmd)
                };
                return (thought, Some(action));
            }
        }
        offset = line_end + 1;
    }
    (content.trim().to_string(), None)
}

/// Text of the first `<tag…>…</tag>` element (attributes allowed).
fn element<'a>(content: &'a str, tag: &str) -> Option<&'a str> {
    let open = content.find(&format!("<{tag}"))?;
    let body = open + content[open..].find('>')? + 1;
    let close = body + content[body..].find(&format!("</{tag}>"))?;
    Some(&content[body..close])
}

fn read_terminus_xml(content: &str) -> (String, Option<Action>) {
    let Some(response) = element(content, "response") else {
        return (content.trim().to_string(), None);
    };
    let thought = element(response, "analysis")
        .unwrap_or_default()
        .trim()
        .to_string();
    if element(response, "task_complete").is_some_and(|t| t.trim() == "true") {
        return (thought, Some(Action::Submit { message: None }));
    }
    let mut keys = String::new();
    let mut rest = element(response, "commands").unwrap_or_default();
    while let Some(k) = element(rest, "keystrokes") {
        keys.push_str(k);
        let after = rest
            .find("</keystrokes>")
            .map_or(rest.len(), |i| i + "</keystrokes>".len());
        rest = &rest[after..];
    }
    let command = keys.strip_suffix('\n').unwrap_or(&keys);
    if command.trim().is_empty() {
        (thought, None)
    } else {
        (thought, Some(shell(command)))
    }
}

fn read_terminus(content: &str) -> (String, Option<Action>) {
    let Some(start) = content.find('{') else {
        return (content.trim().to_string(), None);
    };
    let mut values = serde_json::Deserializer::from_str(&content[start..]).into_iter::<Value>();
    let Some(Ok(value)) = values.next() else {
        return (content.trim().to_string(), None);
    };
    let thought = value
        .get("analysis")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if value.get("task_complete").and_then(Value::as_bool) == Some(true) {
        return (thought, Some(Action::Submit { message: None }));
    }
    let keys: String = value
        .get("commands")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c.get("keystrokes").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    let command = keys.strip_suffix('\n').unwrap_or(&keys);
    if command.trim().is_empty() {
        (thought, None)
    } else {
        (thought, Some(shell(command)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_read_is_the_same_action() {
        for d in [
            Dialect::MiniText,
            Dialect::TerminusJson,
            Dialect::TerminusXml,
        ] {
            for a in [
                shell("ls -la && echo '```'"),
                Action::Submit { message: None },
            ] {
                let content = d.write("Because.", Some(&a), &ToolSet::empty());
                assert_eq!(
                    d.read(&content, &ToolSet::empty()),
                    ("Because.".to_string(), Some(a.clone())),
                    "{d:?} {content}"
                );
            }
            assert_eq!(
                d.read("just text", &ToolSet::empty()),
                ("just text".to_string(), None)
            );
        }
    }

    #[test]
    fn terminus_reply_follows_its_rules() {
        let v: Value = serde_json::from_str(&Dialect::TerminusJson.write(
            "t",
            Some(&shell("make")),
            &ToolSet::empty(),
        ))
        .unwrap();
        assert_eq!(v["commands"][0]["keystrokes"], "make\n");
        assert!(v["analysis"].is_string() && v["plan"].is_string());
        assert_eq!(v["task_complete"], false);
    }
}
