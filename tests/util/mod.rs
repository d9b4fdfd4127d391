//! Test helpers: the fake base-model backend (`fake-backend/`, a real HTTP server on loopback),
//! fixtures, and starting the proxy in-process or as the real binary.

pub mod backend;
pub mod cli;
pub mod proxy;
pub mod turns;

use std::path::PathBuf;

use serde_json::{json, Value};

/// What the proxy sends mini-swe-agent for `<submit/>`: the sentinel, then the patch.
pub const MINI_SUBMIT_WITH_PATCH: &str =
    "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && { git add -A && git diff --cached --binary; } 2>/dev/null || true";

/// `tests/fixtures/<rel>`.
pub fn fixture_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// The recorded request `tests/fixtures/requests/<name>.json` (`swe-agent-1`,
/// `mini-swe-agent-1`, `openhands-sdk-1`, …).
pub fn request(name: &str) -> Value {
    fixture_json(&format!("requests/{name}.json"))
}

/// A JSON fixture.
pub fn fixture_json(rel: &str) -> Value {
    let text = std::fs::read_to_string(fixture_path(rel)).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Reads a JSONL trace file into its records, as written.
pub fn read_records(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A trace's records with each `nudge` / `terminate` record merged into the record before it
/// (as `data.nudge` / `data.termination`) and side calls marked with `data.side_call` = kind:
/// one entry per completion call, after the session record.
pub fn read_trace(path: &std::path::Path) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for record in read_records(path) {
        // Version 3 exactly when a content reference names a part of a list content, else
        // 2 exactly when one keeps text around its range.
        let refs = record["data"]["request"]["content_refs"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let parts = refs.iter().any(|r| r.get("part").is_some());
        let partial = refs
            .iter()
            .any(|r| r.get("before").is_some() || r.get("after").is_some());
        let v = if parts {
            3
        } else if partial {
            2
        } else {
            1
        };
        assert_eq!(record["v"], v, "schema version");
        match record["type"].as_str().unwrap() {
            "nudge" => out.last_mut().unwrap()["data"]["nudge"] = record["data"].clone(),
            "terminate" => out.last_mut().unwrap()["data"]["termination"] = record["data"].clone(),
            "side_call" => {
                let mut record = record;
                record["data"]["side_call"] = record["data"]["kind"].clone();
                out.push(record);
            }
            _ => out.push(record),
        }
    }
    out
}

/// The first tool call of a chat completion.
pub fn tool_call(resp: &Value) -> &Value {
    &resp["choices"][0]["message"]["tool_calls"][0]
}

/// The parsed arguments of that tool call.
pub fn arguments(resp: &Value) -> Value {
    serde_json::from_str(tool_call(resp)["function"]["arguments"].as_str().unwrap()).unwrap()
}

/// `body` as a streaming request (`"stream": true`).
pub fn streamed(mut body: Value) -> Value {
    body["stream"] = json!(true);
    body
}

/// The JSON chunks of a streamed answer's `data:` payloads, before the final `[DONE]`.
pub fn chunks(data: &[String]) -> Vec<Value> {
    data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// Appends `message` to `body["messages"]`.
pub fn push_message(body: &mut Value, message: Value) {
    body["messages"].as_array_mut().unwrap().push(message);
}

/// Appends the assistant message of `resp` and a tool result to `body`.
pub fn continue_with(body: &mut Value, resp: &Value, output: &str) {
    let message = resp["choices"][0]["message"].clone();
    let id = message["tool_calls"][0]["id"].clone();
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(message);
    messages.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
}

/// Sends `request`; its JSON answer, whatever the status.
pub async fn json_of(request: reqwest::RequestBuilder) -> Value {
    request.send().await.unwrap().json().await.unwrap()
}

/// Posts `body` to `url` with extra headers; asserts a 200 and returns the JSON answer.
pub async fn post_with_headers(url: &str, body: &Value, headers: &[(&str, &str)]) -> Value {
    let mut request = reqwest::Client::new().post(url).json(body);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let resp = request.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

/// Writes `text` to `dir/name`; the path as a string.
pub fn write_file(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// `(event name, data)` of each server-sent event of `text` (`event:` and `data:` lines).
pub fn sse_events(text: &str) -> Vec<(String, Value)> {
    let mut events = Vec::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let mut name = String::new();
        let mut data = String::new();
        for line in block.lines() {
            if let Some(n) = line.strip_prefix("event:") {
                name = n.trim().to_string();
            } else if let Some(d) = line.strip_prefix("data:") {
                data.push_str(d.trim_start());
            }
        }
        if !data.is_empty() {
            events.push((name, serde_json::from_str(&data).unwrap()));
        }
    }
    events
}
