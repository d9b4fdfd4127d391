//! mini-swe-agent trajectory files (`<instance>.traj.json`, 1.x and 2.x, text and tool-call
//! modes).

use super::*;

use crate::conversation::tool_output_text;
use crate::profile::{read_mini, MiniBlock, MiniFormat, ToolOutput, MINI_SUBMIT};

// ---------------------------------------------------------------------------------------------
// mini-swe-agent

/// Whether a JSON document is a saved mini-swe-agent trajectory: `messages` and a
/// `trajectory_format` of mini's (`mini-swe-agent-1`, `mini-swe-agent-1.1`, …), or
/// `info.mini_version`.
pub(super) fn is_mini_swe_agent(doc: &Value) -> bool {
    doc.get("messages").is_some_and(Value::is_array)
        && (str_of(doc, "trajectory_format").is_some_and(|f| f.starts_with("mini-swe-agent"))
            || doc
                .get("info")
                .and_then(|i| i.get("mini_version"))
                .is_some())
}

pub(super) fn read_mini_swe_agent(doc: &Value, stem: &str) -> Trajectory {
    let messages: &[Value] = doc
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let info = doc.get("info");
    let content = |m: &Value| m.get("content").map(text_of).unwrap_or_default();
    let role = |m: &Value| str_of(m, "role").unwrap_or_default().to_string();
    let system = messages
        .iter()
        .find(|m| role(m) == "system")
        .map(content)
        .unwrap_or_default();
    let first_user = messages
        .iter()
        .find(|m| role(m) == "user")
        .map(content)
        .unwrap_or_default();
    let config = info.and_then(|i| i.get("config"));
    let template = config
        .and_then(|c| c.get("agent"))
        .and_then(|a| str_of(a, "instance_template"));
    let task_text = template
        .and_then(|t| task_from_template(&first_user, t))
        .or_else(|| tagged_statement(&first_user))
        .unwrap_or_else(|| first_user.clone());
    let instance_id = str_of(doc, "instance_id")
        .or_else(|| info.and_then(|i| str_of(i, "instance_id")))
        .filter(|id| !id.is_empty())
        .map_or_else(
            || stem.strip_suffix(".traj").unwrap_or(stem).to_string(),
            str::to_string,
        );
    let model = config
        .and_then(|c| c.get("model"))
        .and_then(|m| str_of(m, "model_name"))
        .map(str::to_string);
    let date = messages
        .iter()
        .find_map(|m| {
            m.get("timestamp")
                .or_else(|| m.get("extra").and_then(|e| e.get("timestamp")))
                .and_then(Value::as_f64)
        })
        .filter(|t| *t > 0.0)
        .map(|t| date_of_unix_ms((t * 1000.0) as u64));
    let format = MiniFormat::from_prompt(&system, &first_user);

    let mut steps = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        if role(m) != "assistant" {
            continue;
        }
        let rest = &messages[i + 1..];
        // Tool-calling mode (2.x): one step per call, its observation the `tool` message
        // with the call's id.
        let calls: Vec<&Value> = m
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(|c| c.iter().collect())
            .unwrap_or_default();
        if !calls.is_empty() {
            let thought = content(m);
            for (n, call) in calls.iter().enumerate() {
                let function = call.get("function");
                let name = function.and_then(|f| str_of(f, "name")).unwrap_or("bash");
                let arguments = arguments_of(function.and_then(|f| f.get("arguments")));
                let id = str_of(call, "id");
                let answer = rest
                    .iter()
                    .take_while(|r| role(r) != "assistant")
                    .find(|r| id.is_some() && str_of(r, "tool_call_id") == id)
                    .or_else(|| {
                        rest.iter()
                            .take_while(|r| role(r) != "assistant")
                            .filter(|r| matches!(role(r).as_str(), "tool" | "user"))
                            .nth(n)
                    });
                let command =
                    str_of(&Value::Object(arguments.clone()), "command").map(str::to_string);
                let (tool, arguments) = match command {
                    Some(c) if name == "bash" && is_mini_submit(&c) => {
                        (SUBMIT_TAG.to_string(), Map::new())
                    }
                    _ => (name.to_string(), arguments),
                };
                steps.push(RawStep {
                    thought: if n == 0 {
                        thought.clone()
                    } else {
                        String::new()
                    },
                    tool,
                    arguments,
                    observation: answer
                        .map(|r| observation_text(&content(r)))
                        .unwrap_or_default(),
                });
            }
            continue;
        }
        // Text mode: the thought is the text before the command block; the command is the
        // one mini ran (`extra.actions`, 2.x), else the block read back from the reply (1.x,
        // which keeps replies it rejected: none or several blocks).
        let text = content(m);
        let (thought, parsed) = read_mini(&text, &format);
        let ran = m
            .get("extra")
            .and_then(|e| e.get("actions"))
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(|a| str_of(a, "command"));
        let command = match (ran, parsed) {
            (Some(c), _) => c.to_string(),
            (None, Some(_)) if command_blocks(&text, &format) != 1 => continue,
            (None, Some(Action::Call { arguments, .. })) => {
                str_of(&Value::Object((*arguments).clone()), "command")
                    .unwrap_or_default()
                    .to_string()
            }
            (None, Some(Action::Submit { .. })) => MINI_SUBMIT.to_string(),
            (None, None) => continue,
        };
        let (tool, arguments) = if is_mini_submit(&command) {
            (SUBMIT_TAG.to_string(), Map::new())
        } else {
            (
                SHELL_TAG.to_string(),
                Map::from_iter([("command".to_string(), Value::String(command))]),
            )
        };
        let observation = rest
            .iter()
            .take_while(|r| role(r) != "assistant")
            .find(|r| matches!(role(r).as_str(), "user" | "tool"))
            .map(|r| observation_text(&content(r)))
            .unwrap_or_default();
        steps.push(RawStep {
            thought: strip_thought_label(&thought),
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
        steps,
    }
}

/// mini's completion commands: `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` (and what follows,
/// e.g. `&& git diff`), early 1.x `echo MINI_SWE_AGENT_FINAL_OUTPUT`.
fn is_mini_submit(command: &str) -> bool {
    let c = command.trim_start();
    [MINI_SUBMIT, "echo MINI_SWE_AGENT_FINAL_OUTPUT"]
        .iter()
        .any(|s| c.starts_with(s))
}

/// The `THOUGHT:` label mini's prompts ask replies to start with is format, not thought.
fn strip_thought_label(thought: &str) -> String {
    let t = thought.trim();
    t.strip_prefix("THOUGHT:").unwrap_or(t).trim().to_string()
}

/// Command blocks in a text-mode reply: fence openers with a shell info string and
/// `<mswea_bash_command>`/`<bash_code>` elements (mini runs a reply only with exactly one).
fn command_blocks(text: &str, format: &MiniFormat) -> usize {
    let configured = match &format.block {
        MiniBlock::Fence(l) | MiniBlock::Tag(l) => l.as_str(),
    };
    let fences = text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("```"))
        .filter(|info| {
            let info = info.trim();
            ["bash", "mswea_bash_command", configured].contains(&info)
        })
        .count();
    let tags: usize = ["mswea_bash_command", "bash_code"]
        .iter()
        .chain((!["mswea_bash_command", "bash_code"].contains(&configured)).then_some(&configured))
        .map(|t| text.matches(&format!("<{t}>")).count())
        .sum();
    fences + tags
}

/// An observation message as the command's output: mini's `<returncode>…</returncode>
/// <output>…</output>` text templates (long outputs as `<output_head>`, `<elided_chars>`,
/// `<output_tail>`; `<exception>` first) and 2.x `mini.yaml`'s JSON one are decoded like the
/// proxy decodes live mini observations ([`tool_output_text`]); anything else is kept as it
/// is.
fn observation_text(content: &str) -> String {
    match returncode_xml(content) {
        Some(object) => {
            tool_output_text(&object.to_string(), ToolOutput::ReturncodeJson).into_owned()
        }
        None => tool_output_text(content, ToolOutput::ReturncodeJson).into_owned(),
    }
}

/// mini's text observation template as the fields of its JSON one.
fn returncode_xml(content: &str) -> Option<Value> {
    let c = content.trim_start();
    if !(c.starts_with("<returncode>") || c.starts_with("<exception>")) {
        return None;
    }
    let inner = |tag: &str, last: bool| -> Option<String> {
        let open = format!("<{tag}>");
        let close = format!("</{tag}>");
        let start = c.find(&open)? + open.len();
        let end = if last {
            c.rfind(&close)?
        } else {
            start + c[start..].find(&close)?
        };
        let body = c.get(start..end)?;
        Some(body.strip_prefix('\n').unwrap_or(body).to_string())
    };
    let returncode: i64 = inner("returncode", false)?.trim().parse().ok()?;
    let mut object = Map::new();
    object.insert("returncode".into(), returncode.into());
    if let Some(output) = c
        .contains("<output>")
        .then(|| inner("output", true))
        .flatten()
    {
        object.insert("output".into(), output.into());
    } else {
        let part = |tag| inner(tag, false).map(|s| s.strip_suffix('\n').unwrap_or(&s).to_string());
        object.insert("output_head".into(), part("output_head")?.into());
        object.insert("output_tail".into(), inner("output_tail", true)?.into());
        let elided: u64 = inner("elided_chars", false)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        object.insert("elided_chars".into(), elided.into());
    }
    if let Some(e) = inner("exception", false) {
        object.insert("exception_info".into(), e.into());
    }
    Some(Value::Object(object))
}

/// The task inside a first user message rendered from mini's `instance_template`: the text
/// between the template's nearest non-blank literal line before `{{task}}` and the one after
/// it (lines only: Jinja drops a template's last newline and `-` tags trim whitespace).
fn task_from_template(message: &str, template: &str) -> Option<String> {
    let (at, len) = template.match_indices("{{").find_map(|(i, _)| {
        let end = template[i..].find("}}")? + i + 2;
        (template[i + 2..end - 2].trim() == "task").then_some((i, end - i))
    })?;
    let before = &template[..at];
    let before = before
        .rfind(['}', '{'])
        .map_or(before, |j| &before[j + 1..]);
    let before = before.lines().map(str::trim).rfind(|l| !l.is_empty());
    let after = &template[at + len..];
    let after = after.find(['{', '}']).map_or(after, |j| &after[..j]);
    let after = after.lines().map(str::trim).find(|l| !l.is_empty());
    if before.is_none() && after.is_none() {
        return None;
    }
    let start = match before {
        Some(b) => message.find(b)? + b.len(),
        None => 0,
    };
    let rest = &message[start..];
    let end = match after {
        Some(a) => rest.find(a)?,
        None => rest.len(),
    };
    let task = rest[..end].trim();
    (!task.is_empty()).then(|| task.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_observations_decode_like_json_ones() {
        assert_eq!(
            observation_text("<returncode>0</returncode>\n<output>\na.py\n</output>"),
            "a.py"
        );
        assert_eq!(
            observation_text("<returncode>1</returncode>\n<output>\n</output>"),
            "[exit status 1]"
        );
        assert_eq!(
            observation_text(
                "<exception>timed out</exception>\n<returncode>-1</returncode>\n<output>\npartial</output>"
            ),
            "partial\ntimed out\n[exit status -1]"
        );
        let long = "<returncode>0</returncode>\n<warning>\nlong\n</warning><output_head>\nHEAD\n</output_head>\n<elided_chars>\n12 characters elided\n</elided_chars>\n<output_tail>\nTAIL\n</output_tail>";
        assert_eq!(
            observation_text(long),
            "HEAD\n[… 12 characters elided …]\nTAIL"
        );
        assert_eq!(
            observation_text("{\n  \"returncode\": 2,\n  \"output\": \"no\\n\"\n}"),
            "no\n[exit status 2]"
        );
        assert_eq!(observation_text("Observation: x"), "Observation: x");
    }

    #[test]
    fn task_between_the_template_literals() {
        let t = "<pr_description>\nConsider the following PR description:\n{{task}}\n</pr_description>\n\n<instructions>{{ x }}";
        let m = "<pr_description>\nConsider the following PR description:\nFix it.\nNow.\n</pr_description>\n\n<instructions>";
        assert_eq!(task_from_template(m, t).as_deref(), Some("Fix it.\nNow."));
        // Jinja drops the template's last newline.
        let t = "<pr_description>\n{{task}}\n</pr_description>\n";
        let m = "<pr_description>\nFix it.\n</pr_description>";
        assert_eq!(task_from_template(m, t).as_deref(), Some("Fix it."));
        let t = "Please solve this issue: {{ task }}\n\nYou can execute bash commands.";
        let m = "Please solve this issue: Fix it.\n\nYou can execute bash commands.";
        assert_eq!(task_from_template(m, t).as_deref(), Some("Fix it."));
        assert_eq!(task_from_template("other", t), None);
        assert_eq!(task_from_template("Fix", "{{task}}"), None);
    }

    #[test]
    fn completion_commands_and_blocks() {
        assert!(is_mini_submit(
            "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff"
        ));
        assert!(is_mini_submit("echo MINI_SWE_AGENT_FINAL_OUTPUT"));
        assert!(!is_mini_submit(
            "grep COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT x"
        ));
        let f = MiniFormat::default();
        assert_eq!(command_blocks("a\n```bash\nls\n```", &f), 1);
        assert_eq!(
            command_blocks("```bash\nls\n```\n```mswea_bash_command\npwd\n```", &f),
            2
        );
        assert_eq!(command_blocks("<bash_code>ls</bash_code>", &f), 1);
        assert_eq!(strip_thought_label("THOUGHT: look\n"), "look");
    }
}
