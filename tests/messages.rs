//! `POST /v1/messages` (Anthropic Messages API) over real HTTP: a Claude Code-shaped tool loop
//! whose session rides on the `tool_use` ids, the streamed event sequence, errors in the API's
//! shape, `count_tokens`, and `report` over the trace.

use serde_json::{json, Value};

use crate::util::backend::Scripted;
use crate::util::cli::run;
use crate::util::proxy::{serve, serve_with, Proxy};
use crate::util::read_trace;

const MESSAGES: &str = "/v1/messages";

/// Claude Code's shell and edit tools, as it declares them (abridged descriptions).
fn tools() -> Value {
    json!([
        {"name": "Bash", "description": "Executes a given bash command.",
         "input_schema": {"type": "object", "properties": {
             "command": {"type": "string", "description": "The command to execute"},
             "timeout": {"type": "number"},
             "description": {"type": "string"}},
           "required": ["command"], "additionalProperties": false}},
        {"name": "Edit", "description": "Performs exact string replacements in files.",
         "input_schema": {"type": "object", "properties": {
             "file_path": {"type": "string"}, "old_string": {"type": "string"},
             "new_string": {"type": "string"}, "replace_all": {"type": "boolean"}},
           "required": ["file_path", "old_string", "new_string"], "additionalProperties": false}},
        {"name": "Write", "description": "Writes a file to the local filesystem.",
         "input_schema": {"type": "object", "properties": {
             "file_path": {"type": "string"}, "content": {"type": "string"}},
           "required": ["file_path", "content"], "additionalProperties": false}},
        {"name": "Read", "description": "Reads a file from the local filesystem.",
         "input_schema": {"type": "object", "properties": {
             "file_path": {"type": "string"}, "offset": {"type": "number"}, "limit": {"type": "number"}},
           "required": ["file_path"], "additionalProperties": false}},
        // Its options are named like command-line flags: hidden from the model, not refused.
        {"name": "Grep", "description": "A search tool built on ripgrep.",
         "input_schema": {"type": "object", "properties": {
             "pattern": {"type": "string"}, "path": {"type": "string"},
             "-A": {"type": "number"}, "-B": {"type": "number"}, "-C": {"type": "number"},
             "-i": {"type": "boolean"}, "-n": {"type": "boolean"}, "-o": {"type": "boolean"}},
           "required": ["pattern"], "additionalProperties": false}},
        {"name": "TodoWrite", "description": "Update the todo list.",
         "input_schema": {"type": "object", "properties": {"todos": {"type": "array"}},
           "required": ["todos"]}}
    ])
}

fn first_body() -> Value {
    json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "system": [
            {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "You are an interactive CLI tool that helps users with software engineering tasks."}
        ],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>This is a reminder.</system-reminder>"},
            {"type": "text", "text": "Fix the failing test in calc.py: add() subtracts.", "cache_control": {"type": "ephemeral"}}
        ]}],
        "tools": tools(),
        "metadata": {"user_id": "user_abc_account__session_123"},
        "temperature": 1
    })
}

/// A base model continuing the document: look, fix with Claude Code's Edit, submit.
fn script() -> Vec<Scripted> {
    vec![
        Scripted::text("I will look at the code first.\n<bash>cat calc.py</bash>\n"),
        Scripted::text(
            "add() uses a minus sign. Fix it.\n<Edit>\n<file_path>calc.py</file_path>\n\
             <old_string>a - b</old_string>\n<new_string>a + b</new_string>\n</Edit>\n",
        ),
        Scripted::text("The fix is in place.\n<submit/>\n"),
    ]
}

/// Appends the assistant message `answer` and one `tool_result` per `tool_use` block.
fn continue_with(body: &mut Value, answer: &Value, output: &str) {
    let results: Vec<Value> = answer["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .map(|b| json!({"type": "tool_result", "tool_use_id": b["id"], "content": output}))
        .collect();
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": answer["content"]}));
    messages.push(json!({"role": "user", "content": results}));
}

async fn post(proxy: &Proxy, body: &Value) -> (u16, Value) {
    proxy.post_to(MESSAGES, body).await
}

#[tokio::test]
async fn a_claude_code_shaped_session_runs_on_tool_use_ids() {
    let (backend, proxy) = serve(script()).await;
    let mut body = first_body();
    let (status, first) = post(&proxy, &body).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["type"], "message");
    assert_eq!(first["role"], "assistant");
    assert!(first["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(first["stop_reason"], "tool_use");
    assert_eq!(first["content"][0]["type"], "text");
    assert_eq!(
        first["content"][0]["text"],
        "I will look at the code first."
    );
    let call = &first["content"][1];
    assert_eq!(call["type"], "tool_use");
    assert_eq!(call["name"], "Bash");
    assert_eq!(call["input"], json!({"command": "cat calc.py"}));
    assert!(call["id"].as_str().unwrap().starts_with("call_asap_"));
    assert!(first["usage"]["output_tokens"].is_u64());

    continue_with(&mut body, &first, "def add(a, b):\n    return a - b\n");
    let (status, second) = post(&proxy, &body).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["content"][1]["name"], "Edit");
    assert_eq!(
        second["content"][1]["input"],
        json!({"file_path": "calc.py", "old_string": "a - b", "new_string": "a + b"})
    );
    continue_with(
        &mut body,
        &second,
        "The file calc.py has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n     1\tdef add(a, b):\n     2\t    return a + b",
    );
    let (status, last) = post(&proxy, &body).await;
    assert_eq!(status, 200, "{last}");
    // No finish tool among Claude Code's: the submission is a text answer ending the turn.
    assert_eq!(last["stop_reason"], "end_turn");
    assert_eq!(last["content"].as_array().unwrap().len(), 1);
    assert_eq!(last["content"][0]["type"], "text");

    // One session, its steps in order; the prompt rendered the observation and the system
    // text as the task's instructions.
    let files = proxy.trace_files();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(read_trace(&files[0])[0]["data"]["profile"], "claude-code");
    let steps: Vec<Value> = read_trace(&files[0])
        .into_iter()
        .filter(|r| r["type"] == "step")
        .map(|r| r["data"].clone())
        .collect();
    let numbers: Vec<u64> = steps.iter().map(|s| s["step"].as_u64().unwrap()).collect();
    assert_eq!(numbers, [0, 1, 2]);
    let prompts = backend.requests();
    let prompt = prompts[1]["prompt"].as_str().unwrap();
    assert!(prompt.contains("return a - b"), "{prompt}");
    assert!(
        prompt.contains("Fix the failing test in calc.py"),
        "{prompt}"
    );

    // report reads it as any scaffold's: Edit is an edit of the repository's calc.py, then the
    // submission.
    let out = run(&[&"report", &proxy.log_dir.path(), &"--format", &"json"]);
    assert!(out.success(), "{}", out.stderr);
    let b = &out.json()["trajectories"][0]["behaviour"];
    assert_eq!(b["turns"], 3, "{b}");
    assert_eq!(b["edits"], 1, "{b}");
    assert_eq!(b["autonomous_edit"], true, "{b}");
    assert_eq!(b["explicit_submission"], true, "{b}");
}

#[tokio::test]
async fn streaming_follows_the_documented_event_order() {
    let (_backend, proxy) = serve(script()).await;
    let mut body = first_body();
    body["stream"] = json!(true);
    let resp = proxy.send(MESSAGES, &body).await;
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let events = crate::util::sse_events(&resp.text().await.unwrap());
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for (name, data) in &events {
        assert_eq!(data["type"], *name, "each event's data names it");
    }
    assert_eq!(events[0].1["message"]["content"], json!([]));
    assert_eq!(events[5].1["content_block"]["type"], "tool_use");
    assert_eq!(events[5].1["content_block"]["input"], json!({}));
    assert_eq!(events[6].1["delta"]["type"], "input_json_delta");
    let input: Value =
        serde_json::from_str(events[6].1["delta"]["partial_json"].as_str().unwrap()).unwrap();
    assert_eq!(input, json!({"command": "cat calc.py"}));
    assert_eq!(events[8].1["delta"]["stop_reason"], "tool_use");
}

#[tokio::test]
async fn errors_take_the_messages_api_shape() {
    let (_backend, proxy) = serve(script()).await;
    let mut body = first_body();
    body.as_object_mut().unwrap().remove("max_tokens");
    let (status, error) = post(&proxy, &body).await;
    assert_eq!(status, 400);
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tokens"),
        "{error}"
    );
    let resp = proxy
        .client
        .post(proxy.url_of(MESSAGES))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let error: Value = resp.json().await.unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");

    // What the API refuses, the proxy refuses with the field named: no model, a temperature
    // beyond the API's 0 to 1, a tool_choice naming a tool the request does not offer.
    for (change, field) in [
        (json!({"model": null}), "model"),
        (json!({"temperature": 1.5}), "temperature"),
        (json!({"top_p": -0.1}), "top_p"),
        (
            json!({"tool_choice": {"type": "tool", "name": "Deploy"}}),
            "tool_choice.name",
        ),
    ] {
        let mut body = first_body();
        for (k, v) in change.as_object().unwrap() {
            body[k] = v.clone();
        }
        if body["model"].is_null() {
            body.as_object_mut().unwrap().remove("model");
        }
        let (status, error) = post(&proxy, &body).await;
        assert_eq!(status, 400, "{change}: {error}");
        assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(&format!("{field}:")), "{message}");
    }
    // A path or method the proxy does not serve gets the API's shape too.
    for (method, path, status, kind) in [
        (reqwest::Method::GET, MESSAGES, 405, "invalid_request_error"),
        (
            reqwest::Method::POST,
            "/v1/messages/batches",
            404,
            "not_found_error",
        ),
    ] {
        let resp = proxy
            .client
            .request(method.clone(), proxy.url_of(path))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), status, "{method} {path}");
        if status == 405 {
            assert_eq!(resp.headers()["allow"], "POST");
        }
        let error: Value = resp.json().await.unwrap();
        assert_eq!(error["type"], "error", "{error}");
        assert_eq!(error["error"]["type"], kind, "{error}");
    }
    let resp = proxy
        .client
        .get(proxy.url_of("/v1/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let error: Value = resp.json().await.unwrap();
    assert_eq!(error["error"]["message"], "Invalid URL (GET /v1/nope)");
    assert_eq!(error["error"]["type"], "invalid_request_error");

    // A prompt too long for the context window, worded as the API words it.
    let (_backend, small) = serve_with(script(), |a| a.context_length = Some(64)).await;
    let (status, error) = post(&small, &first_body()).await;
    assert_eq!(status, 400, "{error}");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("prompt is too long: "), "{message}");
    assert!(message.ends_with(" maximum"), "{message}");
}

#[tokio::test]
async fn count_tokens_counts_the_prompt_the_proxy_would_render() {
    let (backend, proxy) = serve(script()).await;
    let mut body = first_body();
    body.as_object_mut().unwrap().remove("max_tokens");
    let (status, counted) = proxy.post_to("/v1/messages/count_tokens", &body).await;
    assert_eq!(status, 200, "{counted}");
    let tokens = counted["input_tokens"].as_u64().unwrap();
    assert!(tokens > 50, "{counted}");
    assert!(
        backend.requests().iter().all(|r| r.get("prompt").is_none()),
        "counting asks the model nothing"
    );
    assert!(proxy.trace_files().is_empty(), "and writes no trace");
    // A lone surrogate reads as U+FFFD, as `/v1/messages` reads it: the same count (found
    // by a review helper; it was a 400 here only).
    let text = serde_json::to_string(&body).unwrap();
    let marked = |word: &str| text.replace("add() subtracts.", &format!("add() subtracts {word}."));
    assert_ne!(marked("x"), text);
    let count = |raw: String| {
        let url = proxy.url_of("/v1/messages/count_tokens");
        let client = proxy.client.clone();
        async move {
            let resp = client
                .post(url)
                .header("content-type", "application/json")
                .body(raw)
                .send()
                .await
                .unwrap();
            (resp.status().as_u16(), resp.json::<Value>().await.unwrap())
        }
    };
    let (status, lone) = count(marked(r"caf\udce9")).await;
    assert_eq!(status, 200, "{lone}");
    let (status, replaced) = count(marked(r"caf\ufffd")).await;
    assert_eq!(status, 200, "{replaced}");
    assert_eq!(lone, replaced);
}

#[tokio::test]
async fn the_api_key_may_come_as_x_api_key_and_a_refusal_is_in_the_apis_shape() {
    let (_backend, proxy) = serve_with(script(), |a| a.api_key = vec!["k-msg".into()]).await;
    let send = |key: Option<&'static str>| {
        let mut request = proxy
            .client
            .post(proxy.url_of(MESSAGES))
            .json(&first_body());
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        request.send()
    };
    let refused = send(None).await.unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    let error: Value = refused.json().await.unwrap();
    assert_eq!(error["type"], "error", "{error}");
    assert_eq!(error["error"]["type"], "authentication_error");
    assert_eq!(send(Some("wrong")).await.unwrap().status().as_u16(), 401);
    let ok = send(Some("k-msg")).await.unwrap();
    assert_eq!(ok.status().as_u16(), 200);
    // The chat route keeps OpenAI's shape.
    let (status, error) = proxy.post(&crate::util::request("swe-agent-1")).await;
    assert_eq!(status, 401);
    assert_eq!(error["error"]["code"], "invalid_api_key", "{error}");
}

/// Claude Code compacts its context near the window: a request whose last user message asks
/// for a summary is a side call (prose, no tools), and the next request, which replaces the
/// history with that summary and carries no minted id, continues the same session at the
/// next step. The edit made before the compaction still counts (no submit-before-edit nudge),
/// and `report` reads one trajectory with its steps in order.
#[tokio::test]
async fn a_compacted_session_continues_where_it_was() {
    let summary = "The user asked to fix add() in calc.py, which subtracted. I read calc.py and replaced `a - b` with `a + b` using Edit; the file now adds. Next: answer the user.";
    let mut script = script();
    script.insert(2, Scripted::text(summary));
    let (backend, proxy) = serve(script).await;
    let mut body = first_body();
    let (_, first) = post(&proxy, &body).await;
    continue_with(&mut body, &first, "def add(a, b):\n    return a - b\n");
    let (_, second) = post(&proxy, &body).await;
    assert_eq!(second["content"][1]["name"], "Edit", "{second}");
    continue_with(
        &mut body,
        &second,
        "The file calc.py has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n     1\tdef add(a, b):\n     2\t    return a + b",
    );
    // The compaction request: the whole history, then Claude Code's summary prompt.
    let mut compact = body.clone();
    compact["messages"].as_array_mut().unwrap().push(json!({"role": "user", "content": [
        {"type": "text", "text": "Your task is to create a detailed summary of the conversation so far, paying close attention to the user's explicit requests and your previous actions."}]}));
    // Claude Code's last message was a tool result: the two user turns merge into one.
    let (status, written) = post(&proxy, &compact).await;
    assert_eq!(status, 200, "{written}");
    assert_eq!(written["stop_reason"], "end_turn");
    assert_eq!(written["content"][0]["text"], summary);
    assert!(backend.prompts()[2].ends_with("\n\nAssistant:\n"));

    // The continued session: the summary in place of the history.
    let mut continued = first_body();
    continued["messages"] = json!([{"role": "user", "content": [
        {"type": "text", "text": format!("This session is being continued from a previous conversation that ran out of context. The summary below covers the earlier portion of the conversation.\n\n{summary}")},
        {"type": "text", "text": "Continue the conversation from where it left off without asking the user any further questions."}]}]);
    let (status, last) = post(&proxy, &continued).await;
    assert_eq!(status, 200, "{last}");
    assert_eq!(
        last["stop_reason"], "end_turn",
        "submitted, not nudged: {last}"
    );
    assert_eq!(last["content"][0]["text"], "The fix is in place.");

    let files = proxy.trace_files();
    assert_eq!(files.len(), 1, "one session: {files:?}");
    let records = read_trace(&files[0]);
    let kinds: Vec<(String, Value)> = records
        .iter()
        .skip(1)
        .map(|r| {
            (
                r["type"].as_str().unwrap().to_string(),
                r["data"]["step"].clone(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("step".to_string(), json!(0)),
            ("step".to_string(), json!(1)),
            ("side_call".to_string(), json!(2)),
            ("step".to_string(), json!(2)),
        ]
    );
    assert_eq!(records[3]["data"]["side_call"], "compaction");
    let out = run(&[&"report", &proxy.log_dir.path(), &"--format", &"json"]);
    assert!(out.success(), "{}", out.stderr);
    let trajectories = out.json()["trajectories"].clone();
    assert_eq!(trajectories.as_array().unwrap().len(), 1);
    let behaviour = &trajectories[0]["behaviour"];
    assert_eq!(behaviour["turns"], 3, "{behaviour}");
    assert_eq!(behaviour["autonomous_edit"], true, "{behaviour}");
    assert_eq!(behaviour["explicit_submission"], true, "{behaviour}");
    assert_eq!(behaviour["ending"], "submitted", "{behaviour}");
}

/// A subagent's requests (Claude Code marks them `cc_is_subagent=true` in its system header)
/// are a session of their own, marked `subagent`: a subagent asked to look may answer without
/// an edit (no nudge), and `report` leaves the session out, saying so.
#[tokio::test]
async fn a_subagent_session_is_marked_and_left_out_of_the_report() {
    let (_backend, proxy) = serve(vec![Scripted::text(
        "add() subtracts instead of adding.\n<submit/>\n",
    )])
    .await;
    let mut body = first_body();
    body["system"] = json!([
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.46e; cc_entrypoint=sdk-cli; cc_is_subagent=true;"},
        {"type": "text", "text": "You are an agent for Claude Code, Anthropic's official CLI for Claude."}
    ]);
    body["messages"] =
        json!([{"role": "user", "content": "Look at calc.py and tell me what add does."}]);
    let (status, answer) = post(&proxy, &body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["stop_reason"], "end_turn", "not nudged: {answer}");
    assert_eq!(
        answer["content"][0]["text"],
        "add() subtracts instead of adding."
    );
    let files = proxy.trace_files();
    assert_eq!(read_trace(&files[0])[0]["data"]["subagent"], true);
    // Its only trace is the subagent's: nothing to report, and the report says why.
    let out = run(&[&"report", &proxy.log_dir.path(), &"--format", &"json"]);
    assert!(!out.success());
    assert!(
        out.stderr.contains("left out 1 subagent session(s)")
            && out.stderr.contains("no trajectories"),
        "{}",
        out.stderr
    );
}
