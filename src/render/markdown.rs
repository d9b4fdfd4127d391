//! The pure Markdown format (the paper's ablation): headings and fenced code blocks only.
//!
//! An action is a fenced block whose info string names the tool. The shell's block holds the
//! command; other tools list their parameters as `name: value` lines, or `name: |` followed by
//! the value's lines each indented by two spaces (for values with newlines, leading or
//! trailing blanks, or no text). The fence is one backtick longer than the longest backtick
//! run inside (at least three), so no content can close it early (CommonMark).

use serde_json::{Map, Value};

use crate::profile::Action;
use crate::profile::{ResolvedProfile, ToolRole, ToolSpec, SUBMIT_TAG};

use super::xml::{ordered, placeholder};

/// A fence long enough for `body`.
pub fn fence_for(body: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in body.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat((longest + 1).max(3))
}

/// `body` in a fenced block with `info` as its info string.
pub fn fenced(info: &str, body: &str) -> String {
    let fence = fence_for(body);
    if body.is_empty() {
        format!("{fence}{info}\n{fence}")
    } else {
        format!("{fence}{info}\n{body}\n{fence}")
    }
}

/// One parameter line (or block).
pub fn param_line(name: &str, value: &str) -> String {
    let simple =
        !value.is_empty() && !value.contains('\n') && value.trim() == value && value != "|";
    if simple {
        return format!("{name}: {value}");
    }
    let mut out = format!("{name}: |");
    for line in value.split('\n') {
        out.push_str("\n  ");
        out.push_str(line);
    }
    out
}

fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// An action as a fenced block.
pub fn action(action: &Action, tools: &ResolvedProfile) -> String {
    match action {
        Action::Submit { .. } => fenced(SUBMIT_TAG, ""),
        Action::Call { tag, arguments } => {
            let spec = tools.get(tag);
            if let Some(command) = spec.and_then(|s| tools.shell_command(s, arguments)) {
                return fenced(tag, command);
            }
            fenced(tag, &params_body(arguments, spec))
        }
    }
}

fn params_body(arguments: &Map<String, Value>, spec: Option<&ToolSpec>) -> String {
    ordered(arguments, spec)
        .into_iter()
        .map(|(k, v)| param_line(k, &value_text(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// An example call of a tool: required visible parameters with placeholder values.
pub fn usage(spec: &ToolSpec) -> String {
    match &spec.role {
        ToolRole::Shell { .. } => fenced(&spec.tag, "ls -la"),
        ToolRole::Submit => fenced(&spec.tag, ""),
        _ => {
            let lines: Vec<String> = spec
                .visible_params()
                .filter(|p| p.required)
                .map(|p| param_line(&p.name, &placeholder(p)))
                .collect();
            fenced(&spec.tag, &lines.join("\n"))
        }
    }
}
