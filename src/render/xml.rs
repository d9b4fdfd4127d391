//! Actions and tool examples written as the XML tags the model reads and writes.
//!
//! The inverse of [`crate::parse`]: `parse(write(action)) == action` for every action whose
//! values the parser can represent (tested in `tests/render.rs`). A value containing a newline
//! is written on its own lines (`<p>\nvalue\n</p>`), which the parser strips exactly once.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::openai::chat::RAW_ARGUMENTS;
use crate::profile::Action;
use crate::profile::{ParamSpec, ResolvedProfile, ToolRole, ToolSpec, SUBMIT_TAG};

/// Writes a neutral action as XML.
pub fn action(action: &Action, tools: &ResolvedProfile) -> String {
    match action {
        Action::Submit { .. } => format!("<{SUBMIT_TAG}/>"),
        Action::Call { tag, arguments } => {
            // Arguments that were not a JSON object in the history: show the model the raw
            // text it (or another model) wrote, not an invented `_raw` parameter.
            if let (1, Some(raw)) = (arguments.len(), arguments.get(RAW_ARGUMENTS)) {
                return element(tag, &value_text(raw));
            }
            let spec = tools.get(tag);
            if let Some(command) = spec.and_then(|s| tools.shell_command(s, arguments)) {
                return element(tag, command);
            }
            // One buffer for the whole call (this runs for every step of every request).
            let children = ordered(arguments, spec);
            if children.is_empty() {
                return format!("<{tag}/>");
            }
            let mut out = String::with_capacity(
                2 * tag.len()
                    + 8
                    + children
                        .iter()
                        .map(|(name, value)| {
                            2 * name.len() + 8 + value.as_str().map_or(16, str::len)
                        })
                        .sum::<usize>(),
            );
            out.push('<');
            out.push_str(tag);
            out.push('>');
            for (name, value) in children {
                out.push('\n');
                push_element(&mut out, name, &value_text(value));
            }
            out.push_str("\n</");
            out.push_str(tag);
            out.push('>');
            out
        }
    }
}

/// An example call of a tool for its documentation: required visible parameters with
/// placeholder values (the first enum value, `1` for integers, the name in capitals for text).
pub fn usage(spec: &ToolSpec) -> String {
    match &spec.role {
        ToolRole::Shell { .. } => format!("<{}>ls -la</{}>", spec.tag, spec.tag),
        ToolRole::Submit => format!("<{}/>", spec.tag),
        _ => {
            let children: Vec<String> = spec
                .visible_params()
                .filter(|p| p.required)
                .map(|p| element(&p.name, &placeholder(p)))
                .collect();
            if children.is_empty() {
                format!("<{}/>", spec.tag)
            } else {
                format!("<{}>\n{}\n</{}>", spec.tag, children.join("\n"), spec.tag)
            }
        }
    }
}

pub(crate) fn placeholder(p: &ParamSpec) -> String {
    if let Some(first) = p.enum_values().into_iter().next() {
        return first;
    }
    match p.type_label().as_str() {
        "integer" | "number" => "1".to_string(),
        "boolean" => "false".to_string(),
        "array of integer" => "[1, 10]".to_string(),
        t if t.starts_with("array") => "[]".to_string(),
        "object" => "{}".to_string(),
        _ => p.name.to_uppercase(),
    }
}

fn element(name: &str, text: &str) -> String {
    let mut out = String::with_capacity(2 * name.len() + text.len() + 7);
    push_element(&mut out, name, text);
    out
}

/// `<name>text</name>`, with the text on its own lines when it spans several.
fn push_element(out: &mut String, name: &str, text: &str) {
    let newline = if text.contains('\n') { "\n" } else { "" };
    out.push('<');
    out.push_str(name);
    out.push('>');
    out.push_str(newline);
    out.push_str(text);
    out.push_str(newline);
    out.push_str("</");
    out.push_str(name);
    out.push('>');
}

fn value_text(value: &Value) -> Cow<'_, str> {
    match value {
        Value::String(s) => Cow::Borrowed(s),
        Value::Array(items) if items.iter().all(|v| v.is_number()) => format!(
            "[{}]",
            items
                .iter()
                .map(Value::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )
        .into(),
        other => other.to_string().into(),
    }
}

/// Arguments in the tool's schema order, unknown ones after in their given order.
pub(crate) fn ordered<'a>(
    arguments: &'a Map<String, Value>,
    spec: Option<&ToolSpec>,
) -> Vec<(&'a str, &'a Value)> {
    let mut out: Vec<(&str, &Value)> = Vec::with_capacity(arguments.len());
    if let Some(spec) = spec {
        for p in &spec.params {
            if let Some((k, v)) = arguments.get_key_value(&p.name) {
                out.push((k.as_str(), v));
            }
        }
    }
    for (k, v) in arguments {
        if spec.is_none_or(|s| s.param(k).is_none()) {
            out.push((k.as_str(), v));
        }
    }
    out
}
