//! OpenHands trajectories: SDK event logs (directory, JSON list, JSONL) and V0 trajectory JSON.

use super::*;

// ---------------------------------------------------------------------------------------------
// OpenHands

pub(super) fn classify_events(items: &[Value]) -> Option<InputFormat> {
    if items.iter().any(|e| str_of(e, "kind").is_some()) {
        return Some(InputFormat::OpenHandsSdk);
    }
    if items
        .iter()
        .any(|e| str_of(e, "action").is_some() || str_of(e, "observation").is_some())
    {
        return Some(InputFormat::OpenHandsV0);
    }
    None
}

pub(super) fn read_sdk_dir(
    path: &Path,
    stem: &str,
) -> Result<(InputFormat, Vec<Trajectory>), BuildError> {
    let events_dir = if path.join("events").is_dir() {
        path.join("events")
    } else {
        path.to_path_buf()
    };
    let read_err = |source| PrefixError::Read {
        path: events_dir.clone(),
        source,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&events_dir)
        .map_err(read_err)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut events = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).map_err(|source| PrefixError::Read {
            path: file.clone(),
            source,
        })?;
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Array(items)) => events.extend(items),
            Ok(v) => events.push(v),
            Err(e) => {
                return Err(PrefixError::Parse {
                    path: file.display().to_string(),
                    message: e.to_string(),
                }
                .into())
            }
        }
    }
    let mut trajectory = read_sdk(&events, stem);
    // The conversation's saved state names the model.
    if let Ok(text) = std::fs::read_to_string(path.join("base_state.json")) {
        if let Ok(state) = serde_json::from_str::<Value>(&text) {
            trajectory.model = state
                .get("agent")
                .and_then(|a| a.get("llm"))
                .and_then(|l| str_of(l, "model"))
                .map(str::to_string);
        }
    }
    Ok((InputFormat::OpenHandsSdk, vec![trajectory]))
}

pub(super) fn read_sdk(events: &[Value], stem: &str) -> Trajectory {
    let task_text = events
        .iter()
        .find(|e| str_of(e, "kind") == Some("MessageEvent") && str_of(e, "source") == Some("user"))
        .and_then(|e| e.get("llm_message"))
        .and_then(|m| m.get("content"))
        .map(|c| statement_or_whole(text_of(c)))
        .unwrap_or_default();
    let observation = |call_id: &str| -> String {
        events
            .iter()
            .find(|e| {
                str_of(e, "tool_call_id") == Some(call_id)
                    && str_of(e, "kind") != Some("ActionEvent")
            })
            .map(|e| match str_of(e, "kind") {
                Some("AgentErrorEvent") => str_of(e, "error").unwrap_or_default().to_string(),
                Some("UserRejectObservation") => {
                    format!(
                        "Action rejected: {}",
                        str_of(e, "rejection_reason").unwrap_or_default()
                    )
                }
                _ => e
                    .get("observation")
                    .and_then(|o| o.get("content"))
                    .map(text_of)
                    .unwrap_or_default(),
            })
            .unwrap_or_default()
    };
    let steps = events
        .iter()
        .filter(|e| {
            str_of(e, "kind") == Some("ActionEvent")
                && e.get("action").is_some_and(|a| !a.is_null())
        })
        .map(|e| {
            let arguments = match e.get("tool_call").and_then(|c| c.get("arguments")) {
                Some(a) => arguments_of(Some(a)),
                None => e
                    .get("action")
                    .and_then(Value::as_object)
                    .map(|a| {
                        a.iter()
                            .filter(|(k, v)| k.as_str() != "kind" && !v.is_null())
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect()
                    })
                    .unwrap_or_default(),
            };
            RawStep {
                thought: e.get("thought").map(text_of).unwrap_or_default(),
                tool: str_of(e, "tool_name").unwrap_or_default().to_string(),
                arguments,
                observation: observation(str_of(e, "tool_call_id").unwrap_or_default()),
            }
        })
        .collect();
    Trajectory {
        instance_id: stem.to_string(),
        task_text,
        model: None,
        date: date_of(events.first().and_then(|e| str_of(e, "timestamp"))),
        steps,
    }
}

/// V0 action types that are tool calls (when `tool_call_metadata` is absent).
const V0_TOOL_ACTIONS: [&str; 8] = [
    "run",
    "run_ipython",
    "read",
    "edit",
    "think",
    "finish",
    "browse",
    "browse_interactive",
];

pub(super) fn read_v0(events: &[Value], stem: &str, record: Option<&Value>) -> Trajectory {
    let task_text = events
        .iter()
        .find(|e| str_of(e, "source") == Some("user") && str_of(e, "action") == Some("message"))
        .map(|e| {
            e.get("args")
                .and_then(|a| str_of(a, "content"))
                .or_else(|| str_of(e, "message"))
                .unwrap_or_default()
                .to_string()
        })
        .or_else(|| {
            record
                .and_then(|r| str_of(r, "instruction"))
                .map(str::to_string)
        })
        .map(|t| statement_or_whole(t.to_string()))
        .unwrap_or_default();
    let steps = events
        .iter()
        .filter(|e| {
            str_of(e, "source") == Some("agent")
                && str_of(e, "action").is_some_and(|a| {
                    (e.get("tool_call_metadata").is_some_and(|m| !m.is_null()) && a != "message")
                        || V0_TOOL_ACTIONS.contains(&a)
                })
        })
        .map(|e| v0_step(e, events))
        .collect();
    let instance_id = record
        .and_then(|r| str_of(r, "instance_id"))
        .map_or_else(|| stem.to_string(), str::to_string);
    let model = record
        .and_then(|r| r.get("metadata"))
        .and_then(|m| m.get("llm_config"))
        .and_then(|l| str_of(l, "model"))
        .map(str::to_string);
    Trajectory {
        instance_id,
        task_text,
        model,
        date: date_of(events.first().and_then(|e| str_of(e, "timestamp"))),
        steps,
    }
}

pub(super) fn v0_step(e: &Value, events: &[Value]) -> RawStep {
    let args = e.get("args").cloned().unwrap_or(Value::Null);
    let kind = str_of(e, "action").unwrap_or_default();
    let meta = e.get("tool_call_metadata").filter(|m| !m.is_null());
    let from_call = meta.and_then(|m| {
        let id = str_of(m, "tool_call_id")?;
        let name = str_of(m, "function_name")?;
        let calls = m
            .get("model_response")?
            .get("choices")?
            .as_array()?
            .iter()
            .filter_map(|c| c.get("message")?.get("tool_calls")?.as_array())
            .flatten();
        let function = calls
            .into_iter()
            .find(|c| str_of(c, "id") == Some(id))?
            .get("function")?;
        Some((name.to_string(), arguments_of(function.get("arguments"))))
    });
    let (tool, arguments) = from_call.unwrap_or_else(|| {
        let name = meta
            .and_then(|m| str_of(m, "function_name"))
            .map(str::to_string);
        v0_legacy_call(kind, &args, name)
    });
    let mut thought = str_of(&args, "thought").unwrap_or_default().to_string();
    if kind == "think" {
        // The think tool's text is its argument; the thought repeats it.
        thought.clear();
    }
    let id = e.get("id");
    let observation = events
        .iter()
        .find(|o| o.get("observation").is_some() && id.is_some() && o.get("cause") == id)
        .map(|o| o.get("content").map(text_of).unwrap_or_default())
        .unwrap_or_default();
    RawStep {
        thought,
        tool,
        arguments,
        observation,
    }
}

/// Arguments rebuilt from a V0 action's `args` when the model's call is not recorded.
pub(super) fn v0_legacy_call(
    kind: &str,
    args: &Value,
    name: Option<String>,
) -> (String, Map<String, Value>) {
    let pick = |keys: &[&str]| -> Map<String, Value> {
        keys.iter()
            .filter_map(|k| {
                let v = args.get(*k)?;
                let empty = v.is_null() || v.as_str().is_some_and(str::is_empty);
                (!empty).then(|| (k.to_string(), v.clone()))
            })
            .collect()
    };
    let (default_name, arguments) = match kind {
        "run" => ("execute_bash", pick(&["command"])),
        "run_ipython" => ("execute_ipython_cell", pick(&["code"])),
        "read" => {
            let mut a = Map::from_iter([("command".to_string(), Value::from("view"))]);
            a.extend(pick(&["path", "view_range"]));
            ("str_replace_editor", a)
        }
        "edit" if str_of(args, "command").is_some_and(|c| !c.is_empty()) => (
            "str_replace_editor",
            pick(&[
                "command",
                "path",
                "file_text",
                "old_str",
                "new_str",
                "insert_line",
            ]),
        ),
        "edit" => ("edit_file", pick(&["path", "content", "start", "end"])),
        "think" => ("think", pick(&["thought"])),
        "finish" => {
            let mut a = Map::new();
            if let Some(m) = str_of(args, "final_thought") {
                a.insert("message".into(), Value::from(m));
            }
            ("finish", a)
        }
        "browse" => ("browser", pick(&["url"])),
        "browse_interactive" => ("browser", pick(&["browser_actions"])),
        other => (other, Map::new()),
    };
    (name.unwrap_or_else(|| default_name.to_string()), arguments)
}
