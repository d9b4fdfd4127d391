//! The JSON format (the paper's "pure JSON" ablation): every line of the document is one JSON
//! object; a step is `{"thought":…,"action":{"tool":…,"arguments":{…}},"observation":…}`,
//! written compactly (no spaces), keys in that order, so prompts stay append-only.

use serde_json::{json, Map, Value};

use crate::profile::Action;
use crate::profile::{ResolvedProfile, ToolRole, ToolSpec, SUBMIT_TAG};

use super::xml::{ordered, placeholder};

/// The cue: the model continues the thought string of a new step line.
pub const CUE: &str = "{\"thought\":\"";

/// Stop sequences: a step is one line, and the observation is the environment's.
pub const STOP: [&str; 3] = ["\n", ",\"observation\"", ", \"observation\""];

/// The action object `{"tool":…,"arguments":{…}}` as compact JSON, arguments in schema order.
pub fn action(action: &Action, tools: &ResolvedProfile) -> String {
    action_value(action, tools).to_string()
}

fn action_value(action: &Action, tools: &ResolvedProfile) -> Value {
    match action {
        Action::Submit { .. } => json!({"tool": SUBMIT_TAG, "arguments": {}}),
        Action::Call { tag, arguments } => {
            let spec = tools.get(tag);
            let args: Map<String, Value> = ordered(arguments, spec)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect();
            json!({"tool": tag, "arguments": args})
        }
    }
}

/// An example action of a tool: required visible parameters with placeholder values.
pub fn usage(spec: &ToolSpec) -> String {
    let mut args = Map::new();
    match &spec.role {
        ToolRole::Shell { command_parameter } => {
            args.insert(command_parameter.clone(), Value::from("ls -la"));
        }
        ToolRole::Submit => {}
        _ => {
            for p in spec.visible_params().filter(|p| p.required) {
                let text = placeholder(p);
                let value = serde_json::from_str::<Value>(&text)
                    .ok()
                    .filter(|v| !v.is_string() && p.type_label() != "string")
                    .unwrap_or(Value::String(text));
                args.insert(p.name.clone(), value);
            }
        }
    }
    json!({"tool": spec.tag, "arguments": args}).to_string()
}
