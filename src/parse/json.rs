//! Parser of the JSON format: the completion continues a step line after the cue
//! `{"thought":"`; the thought string and the `"action"` object are read with serde_json.
//!
//! Classification: no `"action"` key → `no_action`; JSON cut short (end of input inside the
//! thought or the action) → `unclosed_tag`; malformed JSON → `no_action`; a tool name that
//! is not offered → `unknown_tool`; arguments that are not an object or do not fit their
//! schema → `invalid_parameter`; a required one missing → `missing_parameter`.

use serde_json::{Map, Value};

use super::{check_required, coerce, FailureClass, ParseFailure, Parsed};
use crate::profile::Action;
use crate::profile::{ResolvedProfile, ToolRole, SUBMIT_TAG};
use crate::render::JSON_CUE as CUE;

fn fail(thought: String, class: FailureClass, detail: String, dropped: usize) -> Parsed {
    Parsed {
        thought,
        outcome: Err(ParseFailure { class, detail }),
        dropped_bytes: dropped,
        notes: Vec::new(),
    }
}

/// Parses a JSON-format completion (the text after the cue).
pub fn parse(text: &str, tools: &ResolvedProfile) -> Parsed {
    let full = format!("{CUE}{text}");
    let string_start = CUE.len() - 1;
    let mut strings =
        serde_json::Deserializer::from_str(&full[string_start..]).into_iter::<String>();
    let thought = match strings.next() {
        Some(Ok(t)) => t,
        Some(Err(e)) if e.is_eof() => {
            return fail(
                text.trim().to_string(),
                FailureClass::UnclosedTag,
                "the thought string is never closed".into(),
                0,
            )
        }
        _ => {
            return fail(
                text.trim().to_string(),
                FailureClass::NoAction,
                "the step is not a JSON object".into(),
                0,
            )
        }
    };
    let after_thought = string_start + strings.byte_offset();
    let rest = &full[after_thought..];
    let key = rest
        .trim_start()
        .strip_prefix(',')
        .map(str::trim_start)
        .and_then(|r| r.strip_prefix("\"action\""))
        .map(str::trim_start)
        .and_then(|r| r.strip_prefix(':'));
    let Some(value_text) = key else {
        return fail(
            thought.trim().to_string(),
            FailureClass::NoAction,
            "no \"action\" after the thought".into(),
            rest.len(),
        );
    };
    let value_start = full.len() - value_text.len();
    let mut values = serde_json::Deserializer::from_str(value_text).into_iter::<Value>();
    let value = match values.next() {
        Some(Ok(v)) => v,
        Some(Err(e)) if e.is_eof() => {
            return fail(
                thought.trim().to_string(),
                FailureClass::UnclosedTag,
                "the action object is never closed".into(),
                0,
            )
        }
        Some(Err(e)) => {
            return fail(
                thought.trim().to_string(),
                FailureClass::NoAction,
                format!("the action is not valid JSON: {e}"),
                0,
            )
        }
        None => {
            return fail(
                thought.trim().to_string(),
                FailureClass::UnclosedTag,
                "the action is missing".into(),
                0,
            )
        }
    };
    let dropped = full.len() - (value_start + values.byte_offset());
    let thought = thought.trim().to_string();
    let Some(tool) = value.get("tool").and_then(Value::as_str) else {
        return fail(
            thought,
            FailureClass::NoAction,
            "the action has no \"tool\"".into(),
            dropped,
        );
    };
    let arguments = match value.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(o)) => o.clone(),
        Some(_) => {
            return fail(
                thought,
                FailureClass::InvalidParameter,
                "\"arguments\" must be an object".into(),
                dropped,
            )
        }
    };
    let Some(spec) = super::lookup(tools, tool) else {
        return fail(
            thought,
            FailureClass::UnknownTool,
            format!("`{tool}` is not a tool here"),
            dropped,
        );
    };
    if spec.role == ToolRole::Submit || spec.tag == SUBMIT_TAG {
        let message = arguments
            .values()
            .find_map(Value::as_str)
            .map(|m| m.trim().to_string())
            .filter(|m| !m.is_empty());
        return Parsed {
            thought,
            outcome: Ok(Action::Submit { message }),
            dropped_bytes: dropped,
            notes: Vec::new(),
        };
    }
    let mut notes = Vec::new();
    let mut coerced = Map::new();
    for (key, value) in arguments {
        let Some(param) = spec.param(&key) else {
            notes.push(format!("ignored unknown parameter `{key}` of `{tool}`"));
            continue;
        };
        let result = match &value {
            Value::String(s) => coerce(s, param),
            other => coerce(&other.to_string(), param).or_else(|_| Ok(other.clone())),
        };
        match result {
            Ok(v) => {
                coerced.insert(key, v);
            }
            Err(e) => {
                return fail(
                    thought,
                    FailureClass::InvalidParameter,
                    format!("`{tool}`: {e}"),
                    dropped,
                )
            }
        }
    }
    if let Err(detail) = check_required(spec, &coerced) {
        return fail(thought, FailureClass::MissingParameter, detail, dropped);
    }
    Parsed {
        thought,
        outcome: Ok(Action::Call {
            tag: spec.tag.clone(),
            arguments: coerced.into(),
        }),
        dropped_bytes: dropped,
        notes,
    }
}
