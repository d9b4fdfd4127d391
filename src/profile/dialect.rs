//! Content dialects: scaffolds that send no `tools` and parse the reply's `content` themselves
//! (issue 6). The model still writes the neutral actions; a dialect reads the scaffold's past
//! replies back into actions (for the history) and writes a new action in the scaffold's
//! format.
//!
//! - `mini_text`: mini-swe-agent's text mode: a thought, then exactly one command block in the
//!   form the scaffold's own prompt asks for ([`MiniFormat::from_prompt`]): a fenced block
//!   with the info string `mswea_bash_command` (2.x's text config), `bash` (1.x), or an XML
//!   element such as `<mswea_bash_command>…</mswea_bash_command>` (the XML configs).
//!   Finishing is the completion command the prompt names (`echo
//!   COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`; early 1.x: `echo MINI_SWE_AGENT_FINAL_OUTPUT`).
//!   Every one of these forms is read back from the history.
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

use crate::openai::chat::Tool;
use crate::profile::Action;
use crate::profile::{ResolvedProfile, ScaffoldReply, SHELL_TAG};

/// mini-swe-agent's completion command (1.x from 1.9 and 2.x).
pub const MINI_SUBMIT: &str = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT";

/// What follows mini-swe-agent's completion command when the proxy sends `<submit/>`: the
/// repository's changes as a patch. mini submits the output after the command's first line
/// (its SWE-bench batch mode writes it to `preds.json` as the prediction), so a bare `echo`
/// would submit an empty patch; this is SWE-agent's `submit` (stage everything, print the
/// staged diff). Outside a git repository it prints nothing, and the status is always 0 so
/// mini accepts the submission. Must match the `[submit] command` of
/// `profiles/mini-swe-agent.toml`'s `command_suffix` (a unit test checks it).
pub const MINI_SUBMIT_PATCH: &str =
    " && { git add -A && git diff --cached --binary; } 2>/dev/null || true";

/// Completion commands mini-swe-agent has used: read back as `<submit/>` whatever the
/// prompt names.
const MINI_SUBMITS: [&str; 2] = [MINI_SUBMIT, "echo MINI_SWE_AGENT_FINAL_OUTPUT"];

/// Command block forms mini-swe-agent's configs use: read back from the history in any
/// case.
const MINI_FENCES: [&str; 2] = ["mswea_bash_command", "bash"];
const MINI_TAGS: [&str; 2] = ["mswea_bash_command", "bash_code"];

/// How one mini-swe-agent run wants its command block, read from its prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MiniFormat {
    pub block: MiniBlock,
    /// The completion command, e.g. `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`.
    pub submit: String,
}

/// The command block of a mini-swe-agent reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MiniBlock {
    /// A fenced block opened by three backticks and `LANG` (mini's `action_regex`: three backticks,
    /// `LANG\s*\n(.*?)\n`, three backticks).
    Fence(String),
    /// `<TAG>…</TAG>` (`action_regex` `<TAG>(.*?)</TAG>`).
    Tag(String),
}

impl Default for MiniFormat {
    /// mini-swe-agent 2.x's `mini_textbased.yaml`.
    fn default() -> Self {
        Self {
            block: MiniBlock::Fence(MINI_FENCES[0].to_string()),
            submit: MINI_SUBMIT.to_string(),
        }
    }
}

impl MiniFormat {
    /// The block form and completion command a mini-swe-agent prompt asks for: in the
    /// system prompt, the first fence (```` ```bash ````) or closed element
    /// (`<mswea_bash_command>…</mswea_bash_command>`) whose name holds `bash` or `command`,
    /// else its first fence with any language; without one there, the first fenced block
    /// opener or element in the task message whose name holds `bash` or `command` (a task
    /// may quote other code). The completion command is the first
    /// `echo …FINAL_OUTPUT` in either. Anything not found keeps the default (2.x's text
    /// config).
    pub fn from_prompt(system: &str, task: &str) -> Self {
        let mut format = Self::default();
        let block = mini_block(system, false, true)
            .or_else(|| mini_block(system, false, false))
            .or_else(|| mini_block(task, true, true));
        if let Some(block) = block {
            format.block = block;
        }
        if let Some(submit) = mini_submit(system).or_else(|| mini_submit(task)) {
            format.submit = submit;
        }
        format
    }
}

fn mini_name_ok(name: &str) -> bool {
    name.contains("bash") || name.contains("command")
}

/// The first command block `text` shows. `opener`: only a fence opening its own line counts
/// (not one named in a sentence); `shell_name`: only a fence or element whose name holds
/// `bash` or `command`.
fn mini_block(text: &str, opener: bool, shell_name: bool) -> Option<MiniBlock> {
    let fence = text.match_indices("```").find_map(|(i, _)| {
        let at_line_start = text[..i]
            .rsplit('\n')
            .next()
            .is_some_and(|l| l.trim().is_empty());
        let info: String = text[i + 3..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
            .collect();
        let rest = &text[i + 3 + info.len()..];
        let ends_line = rest.split('\n').next().is_some_and(|l| l.trim().is_empty());
        // In the system prompt a fence named in a sentence counts too ("exactly one
        // ```bash block"); in the task only a block opener.
        let placed = if opener {
            at_line_start && ends_line
        } else {
            rest.chars()
                .next()
                .is_none_or(|c| c.is_whitespace() || c == '.' || c == ',')
        };
        (!info.is_empty() && placed && (!shell_name || mini_name_ok(&info)))
            .then_some((i, MiniBlock::Fence(info)))
    });
    let tag = text.match_indices('<').find_map(|(i, _)| {
        let name: String = text[i + 1..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let closed = text[i + 1..].get(name.len()..)?.starts_with('>')
            && text[i..].contains(&format!("</{name}>"));
        (!name.is_empty() && closed && mini_name_ok(&name)).then_some((i, MiniBlock::Tag(name)))
    });
    match (fence, tag) {
        (Some(f), Some(t)) => Some(if f.0 < t.0 { f.1 } else { t.1 }),
        (f, t) => f.or(t).map(|x| x.1),
    }
}

fn mini_submit(text: &str) -> Option<String> {
    text.match_indices("echo ").find_map(|(i, _)| {
        let word: String = text[i + 5..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || *c == '_')
            .collect();
        word.ends_with("FINAL_OUTPUT")
            .then(|| format!("echo {word}"))
    })
}

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
        arguments: Map::from_iter([("command".to_string(), Value::from(command))]).into(),
    }
}

impl Dialect {
    /// The reply content for a thought and an action (none: the thought as [`Dialect::plain`]
    /// text, so the scaffold's own format-error path runs).
    pub fn write(self, thought: &str, action: Option<&Action>, tools: &ResolvedProfile) -> String {
        let thought = thought.trim();
        if let (Self::OpenhandsFunction, Some(a)) = (self, action) {
            return write_function(thought, a, tools).unwrap_or_else(|| self.plain(thought, tools));
        }
        let command = |a: &Action| match a {
            Action::Call { arguments, .. } => arguments
                .get("command")
                .and_then(Value::as_str)
                .map(str::to_string),
            Action::Submit { .. } => None,
        };
        match (self, action) {
            (_, None) => self.plain(thought, tools),
            (Self::OpenhandsFunction, Some(_)) => unreachable_written(thought),
            (Self::MiniText, Some(a)) => {
                let cmd = match a {
                    Action::Submit { .. } => format!("{}{MINI_SUBMIT_PATCH}", tools.mini.submit),
                    // The completion command alone is the submit (see `to_scaffold`).
                    other => match command(other).unwrap_or_default() {
                        c if c.trim() == tools.mini.submit => {
                            format!("{}{MINI_SUBMIT_PATCH}", tools.mini.submit)
                        }
                        c => c,
                    },
                };
                let block = match &tools.mini.block {
                    MiniBlock::Fence(lang) => {
                        // mini reads the block up to the first line starting with ```: a
                        // command with such a line cannot be written, so it goes back as a
                        // format error.
                        if cmd.starts_with("```") || cmd.contains("\n```") {
                            return self.plain(thought, tools);
                        }
                        format!("```{lang}\n{cmd}\n```")
                    }
                    MiniBlock::Tag(tag) => {
                        if cmd.contains(&format!("</{tag}>")) {
                            return self.plain(thought, tools);
                        }
                        format!("<{tag}>{cmd}</{tag}>")
                    }
                };
                // Fences or tags quoted in the thought would be a second block for mini.
                let thought = self.plain(thought, tools);
                format!("{thought}\n\n{block}").trim_start().to_string()
            }
            (Self::TerminusXml, Some(a)) => {
                let (commands, done) = match a {
                    Action::Submit { .. } => (String::new(), true),
                    other => {
                        let mut keys = command(other).unwrap_or_default();
                        if keys.contains("</keystrokes") {
                            // Raw keystrokes cannot hold their own closing tag.
                            return self.plain(thought, tools);
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
                let thought = self.plain(thought, tools);
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

    /// A thought as text the scaffold cannot read an action from: the markup its parser acts
    /// on is defused, so an output the proxy could not parse (or an action it cannot write in
    /// the dialect) reaches the scaffold's format-error path and is never run. mini-swe-agent:
    /// code fences become `~~~`, its block tags lose their brackets; OpenHands text mode:
    /// `<function=`, `</function`, `<parameter=`, `</parameter` lose their `<`; Terminus XML:
    /// every `<` is escaped as `&lt;`; Terminus JSON: braces become parentheses (it takes the
    /// first JSON object of the reply).
    pub fn plain(self, thought: &str, tools: &ResolvedProfile) -> String {
        match self {
            Self::MiniText => {
                let mut text = thought.replace("```", "~~~");
                if let MiniBlock::Tag(tag) = &tools.mini.block {
                    text = text
                        .replace(&format!("<{tag}>"), tag)
                        .replace(&format!("</{tag}>"), tag);
                }
                text
            }
            Self::OpenhandsFunction => thought
                .replace("<function=", "function=")
                .replace("</function", "/function")
                .replace("<parameter=", "parameter=")
                .replace("</parameter", "/parameter"),
            Self::TerminusXml => thought.replace('<', "&lt;"),
            Self::TerminusJson => thought.replace('{', "(").replace('}', ")"),
        }
    }

    /// A past reply of the scaffold's history: its thought and action, if it had one.
    pub fn read(self, content: &str, tools: &ResolvedProfile) -> (String, Option<Action>) {
        match self {
            Self::OpenhandsFunction => read_function(content, tools),
            Self::MiniText => read_mini(content, &tools.mini),
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
                &ResolvedProfile::empty(),
            )),
            Self::MiniText | Self::OpenhandsFunction => None,
        }
    }
}

/// Written above (`write_function`); kept for an exhaustive match.
fn unreachable_written(thought: &str) -> String {
    thought.to_string()
}

/// The `<function=NAME>` block of an action, after the thought made plain; `None` when the
/// action cannot be written in it (the caller then sends the plain thought).
fn write_function(thought: &str, action: &Action, tools: &ResolvedProfile) -> Option<String> {
    let ScaffoldReply::ToolCall { name, arguments } = tools.to_scaffold(action, thought) else {
        return None;
    };
    let thought = Dialect::OpenhandsFunction.plain(thought, tools);
    let mut out = String::new();
    if !thought.is_empty() {
        out.push_str(&thought);
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
            return None;
        }
        out.push_str(&format!("<parameter={key}>{text}</parameter>\n"));
    }
    out.push_str("</function>");
    Some(out)
}

fn read_function(content: &str, tools: &ResolvedProfile) -> (String, Option<Action>) {
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
    (
        thought,
        Some(tools.from_scaffold(name, &std::sync::Arc::new(arguments))),
    )
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

/// A mini command read back: `<submit/>` for a completion command.
fn mini_action(cmd: &str, format: &MiniFormat) -> Action {
    let first = cmd.trim_start();
    if first.starts_with(format.submit.as_str())
        || MINI_SUBMITS.iter().any(|s| first.starts_with(s))
    {
        Action::Submit { message: None }
    } else {
        shell(cmd)
    }
}

/// A mini-swe-agent text-mode reply read back: the text before its first command block (of
/// any form mini's configs use, or `format`'s) and the command, `<submit/>` for a completion
/// command; without a block, the whole text and no action.
pub fn read_mini(content: &str, format: &MiniFormat) -> (String, Option<Action>) {
    let fence = read_mini_fence(content, format);
    let tag = read_mini_tag(content, format);
    match (fence, tag) {
        (Some(f), Some(t)) => {
            if f.0 <= t.0 {
                f.1
            } else {
                t.1
            }
        }
        (Some(f), None) => f.1,
        (None, Some(t)) => t.1,
        (None, None) => (content.trim().to_string(), None),
    }
}

/// The first `<TAG>…</TAG>` of a known or the configured name: (offset, thought, action).
fn read_mini_tag(content: &str, format: &MiniFormat) -> Option<(usize, (String, Option<Action>))> {
    let configured = match &format.block {
        MiniBlock::Tag(t) => Some(t.as_str()),
        MiniBlock::Fence(_) => None,
    };
    MINI_TAGS
        .iter()
        .copied()
        .chain(configured)
        .filter_map(|tag| {
            let open = format!("<{tag}>");
            let start = content.find(&open)?;
            let body = &content[start + open.len()..];
            let end = body.find(&format!("</{tag}>"))?;
            let thought = content[..start].trim().to_string();
            let cmd = body[..end].trim();
            Some((start, (thought, Some(mini_action(cmd, format)))))
        })
        .min_by_key(|(start, _)| *start)
}

fn read_mini_fence(
    content: &str,
    format: &MiniFormat,
) -> Option<(usize, (String, Option<Action>))> {
    let configured = match &format.block {
        MiniBlock::Fence(l) => Some(l.as_str()),
        MiniBlock::Tag(_) => None,
    };
    let mut offset = 0;
    while offset < content.len() {
        let line_end = content[offset..]
            .find('\n')
            .map_or(content.len(), |i| offset + i);
        let line = content[offset..line_end].trim_start();
        if let Some((ch, len, info)) = crate::util::fence_marker(line) {
            let info = info.trim();
            if MINI_FENCES.contains(&info) || Some(info) == configured {
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
                return Some((offset, (thought, Some(mini_action(cmd, format)))));
            }
        }
        offset = line_end + 1;
    }
    None
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
    fn tool_mode_submit_prints_the_same_patch_as_text_mode() {
        let profiles = crate::profile::Profiles::builtin().expect("built-in profiles");
        let mini = profiles.get("mini-swe-agent").expect("mini profile");
        assert_eq!(mini.submit.command.as_deref(), Some(MINI_SUBMIT));
        assert_eq!(
            mini.submit.command_suffix.as_deref(),
            Some(MINI_SUBMIT_PATCH)
        );
    }

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
                let content = d.write("Because.", Some(&a), &ResolvedProfile::empty());
                assert_eq!(
                    d.read(&content, &ResolvedProfile::empty()),
                    ("Because.".to_string(), Some(a.clone())),
                    "{d:?} {content}"
                );
            }
            assert_eq!(
                d.read("just text", &ResolvedProfile::empty()),
                ("just text".to_string(), None)
            );
        }
    }

    #[test]
    fn mini_format_comes_from_the_prompt() {
        let fence = |l: &str| MiniBlock::Fence(l.to_string());
        let v1 = "Your response must contain exactly ONE bash code block.\n<format_example>\nThoughts.\n\n```bash\nyour_command_here\n```\n</format_example>";
        let f = MiniFormat::from_prompt(v1, "6. Submit: `echo MINI_SWE_AGENT_FINAL_OUTPUT`.");
        assert_eq!(f.block, fence("bash"));
        assert_eq!(f.submit, "echo MINI_SWE_AGENT_FINAL_OUTPUT");
        let v2 = v1.replace("```bash", "```mswea_bash_command");
        assert_eq!(MiniFormat::from_prompt(&v2, ""), MiniFormat::default());
        let xml = "<format_example>\nTHOUGHT: here\n\n<mswea_bash_command>your_command_here</mswea_bash_command>\n</format_example>";
        let f = MiniFormat::from_prompt(xml, "```mswea_bash_command\nls\n```");
        assert_eq!(f.block, MiniBlock::Tag("mswea_bash_command".into()));
        // Nothing in the system prompt: the task's fence counts only when it names a shell.
        let f = MiniFormat::from_prompt("Be brief.", "```python\nx\n```\n```bash\nls\n```");
        assert_eq!(f.block, fence("bash"));
        assert_eq!(
            MiniFormat::from_prompt("", "```python\nx\n```").block,
            fence("mswea_bash_command")
        );
        // A shell's block wins over other code quoted earlier; any language when none names one.
        let quoted = "Example:\n```python\nx = 1\n```\nReply with one ```bash block.";
        assert_eq!(MiniFormat::from_prompt(quoted, "").block, fence("bash"));
        let sh = "Reply with one block:\n```sh\nls\n```";
        assert_eq!(
            MiniFormat::from_prompt(sh, "```bash\nls\n```").block,
            fence("sh")
        );
    }

    #[test]
    fn mini_writes_and_reads_every_form() {
        for (block, submit) in [
            (
                MiniBlock::Fence("bash".into()),
                "echo MINI_SWE_AGENT_FINAL_OUTPUT",
            ),
            (MiniBlock::Tag("mswea_bash_command".into()), MINI_SUBMIT),
            (MiniBlock::Tag("bash_code".into()), MINI_SUBMIT),
        ] {
            let mut tools = ResolvedProfile::empty();
            tools.mini = MiniFormat {
                block: block.clone(),
                submit: submit.into(),
            };
            for a in [
                shell("grep -n '<b>' x.html"),
                Action::Submit { message: None },
            ] {
                let content =
                    Dialect::MiniText.write("Because <mswea_bash_command>.", Some(&a), &tools);
                let (_, read) = Dialect::MiniText.read(&content, &tools);
                assert_eq!(read, Some(a.clone()), "{block:?} {content}");
                // Read back with the default format too: a history in any form is understood.
                let (_, read) = Dialect::MiniText.read(&content, &ResolvedProfile::empty());
                assert_eq!(read, Some(a), "{block:?} {content}");
            }
            let submit_text =
                Dialect::MiniText.write("", Some(&Action::Submit { message: None }), &tools);
            assert!(submit_text.contains(submit), "{submit_text}");
        }
        let mut tools = ResolvedProfile::empty();
        tools.mini.block = MiniBlock::Tag("mswea_bash_command".into());
        let a = shell("echo '</mswea_bash_command>'");
        assert_eq!(
            Dialect::MiniText.write("t", Some(&a), &tools),
            "t",
            "not writable: format error"
        );
    }

    #[test]
    fn terminus_reply_follows_its_rules() {
        let v: Value = serde_json::from_str(&Dialect::TerminusJson.write(
            "t",
            Some(&shell("make")),
            &ResolvedProfile::empty(),
        ))
        .unwrap();
        assert_eq!(v["commands"][0]["keystrokes"], "make\n");
        assert!(v["analysis"].is_string() && v["plan"].is_string());
        assert_eq!(v["task_complete"], false);
    }
}
