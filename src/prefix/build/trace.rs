//! asap-proxy's own trace logs (proxy and passthrough mode).

use super::*;

// ---------------------------------------------------------------------------------------------
// asap-proxy traces

pub(super) fn is_trace_record(v: &Value) -> bool {
    matches!(
        str_of(v, "type"),
        Some("session" | "step" | "side_call" | "nudge" | "terminate")
    ) && v.get("data").is_some()
}

pub(super) fn read_trace(records: &[Value], stem: &str) -> Trajectory {
    let session = records
        .iter()
        .find(|r| str_of(r, "type") == Some("session"))
        .and_then(|r| r.get("data"));
    let steps: Vec<&Value> = records
        .iter()
        .filter(|r| str_of(r, "type") == Some("step"))
        .filter_map(|r| r.get("data"))
        .filter(|r| r.get("prompt").is_some_and(Value::is_object))
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
        // Schema v1 has `decision`; the unversioned first layout had `nudge`/`termination`.
        let set = |key: &str| r.get(key).is_some_and(|v| !v.is_null());
        match str_of(r, "decision") {
            Some("terminate") => break,
            Some("nudge" | "error") => continue,
            _ if set("termination") => break,
            _ if set("nudge") => continue,
            _ => {}
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
pub(super) fn task_section(prompt: &str) -> String {
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
pub(super) fn last_observation(prompt: &str) -> Option<String> {
    let close = prompt.rfind("\n</observation>")?;
    let open_tag = "<observation>\n";
    let open = prompt[..close].rfind(open_tag)? + open_tag.len();
    let text = prompt.get(open..close)?;
    Some(unescape_observation(text))
}

pub(super) fn unescape_observation(text: &str) -> String {
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
