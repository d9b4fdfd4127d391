//! Real HTTP on loopback: the proxy in-process in front of a fake base-model backend.

use std::time::Duration;

use serde_json::{json, Value};

use crate::util::backend::slow;
use crate::util::backend::{FakeBackend, Scripted};
use crate::util::chunks;
use crate::util::proxy::{serve, serve_with, Proxy};
use crate::util::push_message;
use crate::util::streamed;
use crate::util::{arguments, continue_with, read_trace, request, tool_call};

fn id_is_valid(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[tokio::test]
async fn swe_agent_tool_loop_over_http() {
    let (backend, proxy) = serve(vec![
        Scripted::text("Fix the price first.\n\n<bash>sed -i 's/l.qty/l.qty * l.unit_price/' /testbed/inventory.py</bash>\n\n"),
        Scripted::LlamaServer {
            text: "Open the module.\n\n<str_replace_editor>\n<command>view</command>\n<path>/testbed/inventory.py</path>\n<view_range>[1, 20]</view_range>\n</str_replace_editor>\n".into(),
        },
        Scripted::Sglang { text: "The fix is in.\n\n<submit/>\n".into() },
    ]).await;
    let mut body = request("swe-agent-1");

    let (status, r1) = proxy.post(&body).await;
    assert_eq!(status, 200, "{r1}");
    assert_eq!(r1["object"], "chat.completion");
    assert_eq!(r1["model"], "base-model");
    assert_eq!(r1["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        r1["choices"][0]["message"]["content"],
        "Fix the price first."
    );
    assert_eq!(tool_call(&r1)["type"], "function");
    assert_eq!(tool_call(&r1)["function"]["name"], "bash");
    assert_eq!(
        arguments(&r1),
        json!({"command": "sed -i 's/l.qty/l.qty * l.unit_price/' /testbed/inventory.py"})
    );
    assert!(r1["usage"]["prompt_tokens"].as_u64().unwrap() > 100);
    continue_with(&mut body, &r1, "OBSERVATION:\ninventory.py\ntests\n");

    let (_, r2) = proxy.post(&body).await;
    assert_eq!(tool_call(&r2)["function"]["name"], "str_replace_editor");
    assert_eq!(
        arguments(&r2),
        json!({"command": "view", "path": "/testbed/inventory.py", "view_range": [1, 20]})
    );
    continue_with(&mut body, &r2, "     1\tclass Line:\n");

    let (_, r3) = proxy.post(&body).await;
    assert_eq!(tool_call(&r3)["function"]["name"], "submit");
    assert_eq!(tool_call(&r3)["function"]["arguments"], "{}");

    let ids: Vec<&str> = [&r1, &r2, &r3]
        .iter()
        .map(|r| tool_call(r)["id"].as_str().unwrap())
        .collect();
    assert!(ids.iter().all(|id| id_is_valid(id)), "{ids:?}");
    assert_ne!(ids[0], ids[1]);
    assert_ne!(ids[1], ids[2]);
    let session = |id: &str| id.split('_').nth(2).unwrap().to_string();
    assert_eq!(
        session(ids[0]),
        session(ids[2]),
        "one trajectory keeps one session"
    );

    // Backend requests: our stop sequences, append-only prompts, the observation rendered.
    let requests = backend.requests();
    assert_eq!(backend.calls(), 3);
    assert_eq!(
        requests[0]["stop"],
        json!([
            "\n<observation>",
            "\n</observation>",
            "\n## Thinking",
            "</bash>",
            "</str_replace_editor>"
        ])
    );
    assert_eq!(
        requests[0]["model"], "fake-base",
        "model discovered from GET /v1/models"
    );
    assert_eq!(requests[0]["temperature"], 0.0);
    let prompts = backend.prompts();
    for pair in prompts.windows(2) {
        assert!(pair[1].starts_with(pair[0].strip_suffix("## Thinking\n").unwrap()));
    }
    assert!(prompts[1].contains("<observation>\nOBSERVATION:\ninventory.py\ntests\n</observation>"));
    assert!(prompts[2].ends_with("</observation>\n\n## Thinking\n"));

    // One trace file, a session record and three complete step records.
    let files = proxy.trace_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let records = read_trace(&files[0]);
    assert_eq!(records.len(), 4);
    assert_eq!(records[0]["type"], "session");
    assert_eq!(records[0]["data"]["profile"], "swe-agent");
    let steps: Vec<&Value> = records[1..].iter().map(|r| &r["data"]).collect();
    assert_eq!(
        steps
            .iter()
            .map(|s| s["step"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    assert_eq!(steps[0]["prompt"]["prefix_bytes"], 0);
    assert_eq!(steps[0]["prompt"]["delta"], prompts[0].as_str());
    assert!(steps[1]["prompt"]["prefix_bytes"].as_u64().unwrap() > 0);
    // The delta chain reconstructs each full prompt.
    let mut full = String::new();
    for (s, prompt) in steps.iter().zip(&prompts) {
        let prefix = s["prompt"]["prefix_bytes"].as_u64().unwrap() as usize;
        full = format!(
            "{}{}",
            &full[..prefix],
            s["prompt"]["delta"].as_str().unwrap()
        );
        assert_eq!(&full, prompt);
    }
    assert_eq!(
        steps[1]["completion"]["matched_stop"], "\n<observation>",
        "llama-server stopping_word"
    );
    assert_eq!(
        steps[2]["completion"]["matched_stop"], "\n## Thinking",
        "SGLang matched_stop"
    );
    assert_eq!(steps[2]["parse"]["action"]["kind"], "submit");
    assert_eq!(steps[0]["response"]["tool_call"]["id"], ids[0]);
    assert!(steps[0]["timings"]["backend_ms"].as_f64().unwrap() >= 0.0);
}

#[tokio::test]
async fn streaming_emits_spec_exact_chunks() {
    let text =
        "Let me look at it — ok 😀.\n\n<bash>grep -n \"total\" /testbed/inventory.py</bash>\n";
    let (_backend, proxy) = serve(vec![Scripted::text(text), Scripted::text(text)]).await;
    let mut body = request("swe-agent-1");
    let (_, plain) = proxy.post(&body).await;

    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let (status, data) = proxy.post_stream(&body).await;
    assert_eq!(status, 200);
    assert_eq!(data.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = chunks(&data);
    let ids: Vec<&str> = chunks.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert!(ids.iter().all(|i| *i == ids[0]));
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));

    // role, content, tool-call head, argument fragment(s), finish, usage.
    let delta = |i: usize| &chunks[i]["choices"][0]["delta"];
    assert_eq!(delta(0), &json!({"role": "assistant"}));
    assert_eq!(delta(1), &json!({"content": "Let me look at it — ok 😀."}));
    let head = &delta(2)["tool_calls"][0];
    assert_eq!(head["index"], 0);
    assert!(head["id"].as_str().unwrap().starts_with("call_asap_"));
    assert_eq!(head["type"], "function");
    assert_eq!(head["function"]["name"], "bash");
    assert_eq!(head["function"]["arguments"], "");
    let n = chunks.len();
    let mut arguments = String::new();
    for i in 3..n - 2 {
        let tc = &delta(i)["tool_calls"][0];
        assert_eq!(tc["index"], 0);
        assert!(
            tc.get("id").is_none()
                && tc.get("type").is_none()
                && tc["function"].get("name").is_none()
        );
        arguments.push_str(tc["function"]["arguments"].as_str().unwrap());
    }
    assert_eq!(
        arguments,
        tool_call(&plain)["function"]["arguments"].as_str().unwrap()
    );
    assert_eq!(chunks[n - 2]["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(delta(n - 2), &json!({}));
    assert!(chunks[..n - 1]
        .iter()
        .all(|c| c["usage"].is_null() && c.get("usage").is_some()));
    assert_eq!(chunks[n - 1]["choices"], json!([]));
    assert_eq!(chunks[n - 1]["usage"], plain["usage"]);
    for c in &chunks[..n - 1] {
        assert!(c["choices"][0]["delta"]
            .get("content")
            .is_none_or(|t| !t.as_str().unwrap().contains('<')));
    }
}

#[tokio::test]
async fn streaming_without_usage_option_has_no_usage_key() {
    let (_backend, proxy) = serve(vec![Scripted::text("Nothing to do here.")]).await;
    let body = streamed(request("swe-agent-1"));
    let (_, data) = proxy.post_stream(&body).await;
    let chunks: Vec<Value> = chunks(&data);
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));
    assert_eq!(chunks.len(), 3, "role, content, finish");
    assert_eq!(
        chunks[1]["choices"][0]["delta"]["content"],
        "Nothing to do here."
    );
    assert_eq!(chunks[2]["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn unparsable_output_is_content_without_tool_call() {
    let (_backend, proxy) = serve(vec![
        Scripted::text("The bug is in total(). I am not sure how to proceed."),
        Scripted::IgnoresStop {
            text: "Write it.\n\n<bash>\ncat <<'EOF' > x.py\nprint(".into(),
        },
    ])
    .await;
    let body = request("swe-agent-1");
    let (status, r) = proxy.post(&body).await;
    assert_eq!(status, 200);
    let message = &r["choices"][0]["message"];
    assert_eq!(
        message["content"],
        "The bug is in total(). I am not sure how to proceed."
    );
    assert!(message.get("tool_calls").is_none());
    assert_eq!(r["choices"][0]["finish_reason"], "stop");

    let (_, cut) = proxy.post(&body).await;
    assert_eq!(cut["choices"][0]["finish_reason"], "length");
    assert_eq!(cut["choices"][0]["message"]["content"], "Write it.");
    assert!(cut["choices"][0]["message"].get("tool_calls").is_none());

    let files = proxy.trace_files();
    assert_eq!(files.len(), 2, "two first turns are two sessions");
    let classes: Vec<String> = files
        .iter()
        .map(|f| {
            read_trace(f)[1]["data"]["parse"]["error"]["class"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let mut sorted = classes.clone();
    sorted.sort();
    assert_eq!(sorted, vec!["no_action", "unclosed_tag"]);
}

#[tokio::test]
async fn openhands_sdk_gets_its_own_tool_names_and_metadata() {
    let (backend, proxy) = serve(vec![
        Scripted::text(
            "Fix it.\n\n<bash>sed -i 's/a - b/a + b/' /workspace/project/calc.py</bash>\n",
        ),
        Scripted::text("add returns the sum now.\n\n<submit/>\n"),
    ])
    .await;
    let mut body = request("openhands-sdk-1");
    let (_, r1) = proxy.post(&body).await;
    assert_eq!(tool_call(&r1)["function"]["name"], "terminal");
    assert_eq!(
        arguments(&r1),
        json!({"command": "sed -i 's/a - b/a + b/' /workspace/project/calc.py", "security_risk": "LOW"})
    );
    continue_with(&mut body, &r1, "def add(a, b):\n    return a - b\n");
    // openhands-sdk sends content as a list of parts, also on tool messages.
    let last = body["messages"].as_array_mut().unwrap().last_mut().unwrap();
    last["content"] = json!([{"type": "text", "text": "def add(a, b):\n    return a - b\n"}]);
    let (_, r2) = proxy.post(&body).await;
    assert_eq!(tool_call(&r2)["function"]["name"], "finish");
    assert_eq!(
        arguments(&r2),
        json!({"message": "add returns the sum now."})
    );
    let prompt = &backend.prompts()[1];
    assert!(
        prompt.contains("<bash>sed -i 's/a - b/a + b/' /workspace/project/calc.py</bash>"),
        "neutral vocabulary in history"
    );
    let tools_and_steps = prompt.split("\n# Tools\n").nth(1).unwrap();
    assert!(
        !tools_and_steps.contains("security_risk"),
        "hidden metadata never reaches the model"
    );
}

#[tokio::test]
async fn mini_swe_agent_submits_with_its_sentinel_command() {
    let (_backend, proxy) = serve(vec![
        Scripted::text("Fix.\n<bash>sed -i 's/-/ /' slug.py</bash>\n"),
        Scripted::text("Done.\n\n<submit/>\n"),
    ])
    .await;
    let mut body = request("mini-swe-agent-1");
    let (_, edit) = proxy.post(&body).await;
    continue_with(&mut body, &edit, "<returncode>0</returncode>");
    let (_, r) = proxy.post(&body).await;
    assert_eq!(tool_call(&r)["function"]["name"], "bash");
    // The sentinel, then the repository's patch: mini submits what follows the sentinel's
    // line (its SWE-bench batch mode takes it as the prediction).
    assert_eq!(
        arguments(&r),
        json!({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && { git add -A && git diff --cached --binary; } 2>/dev/null || true"})
    );
}

#[tokio::test]
async fn generic_tools_and_content_submit() {
    let (_backend, proxy) = serve(vec![
        Scripted::text(
            "Search first.\n\n<search>\n<query>1931 fishing treaty</query>\n</search>\n",
        ),
        Scripted::text("Explanation: found it.\nExact Answer: Vell\n\n<submit/>\n"),
    ])
    .await;
    let body = request("browsecomp-plus-1");
    let (_, r1) = proxy.post(&body).await;
    assert_eq!(tool_call(&r1)["function"]["name"], "search");
    assert_eq!(arguments(&r1), json!({"query": "1931 fishing treaty"}));
    let (_, r2) = proxy.post(&body).await;
    assert_eq!(r2["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        r2["choices"][0]["message"]["content"],
        "Explanation: found it.\nExact Answer: Vell"
    );
}

#[tokio::test]
async fn malformed_bodies_get_openai_errors() {
    let (backend, proxy) = serve(vec![]).await;
    for (body, param) in [
        (json!({"model": "m", "messages": "hi"}), Some("messages")),
        (json!({"model": "m"}), None),
        (
            json!({"messages": [{"role": "wizard", "content": "x"}]}),
            Some("messages[0].role"),
        ),
        (
            json!({"messages": [{"role": "user", "content": 5}]}),
            Some("messages[0].content"),
        ),
        (json!({"messages": []}), Some("messages")),
    ] {
        let (status, err) = proxy.post(&body).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(err["error"]["type"], "invalid_request_error");
        assert!(err["error"]["message"].as_str().unwrap().len() > 10);
        assert_eq!(err["error"]["param"].as_str(), param, "{err}");
        assert!(err["error"]["code"].is_string());
    }
    let resp = proxy
        .client
        .post(proxy.url())
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let err: Value = resp.json().await.unwrap();
    assert!(err["error"]["message"]
        .as_str()
        .unwrap()
        .contains("invalid request body"));
    assert_eq!(backend.calls(), 0);
}

#[tokio::test]
async fn retries_5xx_then_succeeds() {
    let (backend, proxy) = serve(vec![
        Scripted::Error {
            status: 503,
            message: "loading model".into(),
        },
        Scripted::Error {
            status: 500,
            message: "oops".into(),
        },
        Scripted::text("Look.\n\n<bash>ls</bash>\n"),
    ])
    .await;
    let (status, r) = proxy.post(&request("swe-agent-1")).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(backend.calls(), 3);
    let record = &proxy.first_trace()[1]["data"];
    assert_eq!(record["completion"]["attempts"], 3);
    // The turn gave its prompt up once sent: each retry renders it again, identically.
    let requests = backend.requests();
    assert!(requests.iter().all(|r| *r == requests[0]), "{requests:?}");
}

/// A retried call after a nudge sends the nudged prompt again (rendered anew from the
/// conversation with the nudged step, as the first attempt's was).
#[tokio::test]
async fn a_retry_after_a_nudge_sends_the_nudged_prompt_again() {
    let (backend, proxy) = serve(vec![
        Scripted::text("Looks fine.\n<submit/>\n"),
        Scripted::Error {
            status: 503,
            message: "loading model".into(),
        },
        Scripted::text("Look.\n\n<bash>ls</bash>\n"),
    ])
    .await;
    let (status, r) = proxy.post(&request("swe-agent-1")).await;
    assert_eq!(status, 200, "{r}");
    let prompts = backend.prompts();
    assert_eq!(prompts.len(), 3);
    assert!(prompts[1].contains("no file has been changed yet"));
    assert_eq!(prompts[1], prompts[2]);
    assert_eq!(backend.requests()[1], backend.requests()[2]);
}

#[tokio::test]
async fn gives_up_after_bounded_retries_with_502() {
    let backend = FakeBackend::start(vec![]).await; // every call: 500 "script exhausted"
    let proxy = Proxy::start(&backend.url()).await;
    let (status, err) = proxy.post(&request("swe-agent-1")).await;
    assert_eq!(status, 502);
    assert_eq!(err["error"]["type"], "server_error");
    assert_eq!(backend.calls(), 3, "1 try + 2 retries");
    // The failed step is still logged.
    let records = proxy.first_trace();
    assert!(records[1]["data"]["error"]
        .as_str()
        .unwrap()
        .contains("500"));
}

#[tokio::test]
async fn unreachable_backend_is_502_and_streaming_gets_error_event() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    let proxy = Proxy::start_with(&dead, |a| a.backend_retries = Some(1)).await;
    let mut body = request("swe-agent-1");
    let (status, err) = proxy.post(&body).await;
    assert_eq!(status, 502);
    assert_eq!(err["error"]["code"], "backend_unavailable");
    body["stream"] = json!(true);
    let (status, data) = proxy.post_stream(&body).await;
    assert_eq!(status, 200);
    let error: Value = serde_json::from_str(&data[data.len() - 2]).unwrap();
    assert_eq!(error["error"]["code"], "backend_unavailable");
    assert_eq!(data.last().unwrap(), "[DONE]");
}

#[tokio::test]
async fn context_overflow_is_a_400_context_length_exceeded() {
    let backend = FakeBackend::start(vec![Scripted::Error {
        status: 400,
        message: "the request exceeds the available context size, try increasing it".into(),
    }])
    .await;
    let proxy = Proxy::start(&backend.url()).await;
    let (status, err) = proxy.post(&request("swe-agent-1")).await;
    assert_eq!(status, 400);
    assert_eq!(err["error"]["code"], "context_length_exceeded");
    assert_eq!(backend.calls(), 1, "a 4xx is not retried");
}

#[tokio::test]
async fn backend_timeout_is_504() {
    let (_backend, proxy) = serve_with(vec![slow(Duration::from_secs(3), "x")], |a| {
        a.backend_timeout = Some(1)
    })
    .await;
    let (status, err) = proxy.post(&request("swe-agent-1")).await;
    assert_eq!(status, 504);
    assert_eq!(err["error"]["code"], "backend_timeout");
}

#[tokio::test]
async fn request_sampling_and_token_cap_reach_the_backend() {
    let (backend, proxy) = serve_with(vec![Scripted::text("ok"), Scripted::text("ok")], |a| {
        a.max_tokens = Some(300);
        a.backend_model = Some("my-base".into());
    })
    .await;
    let mut body = request("swe-agent-1");
    body["temperature"] = json!(0.7);
    body["top_p"] = json!(0.9);
    body["seed"] = json!(7);
    body["max_tokens"] = json!(100);
    proxy.post(&body).await;
    body["max_tokens"] = json!(5000);
    proxy.post(&body).await;
    let r = backend.requests();
    assert_eq!(
        (
            r[0]["temperature"].clone(),
            r[0]["top_p"].clone(),
            r[0]["seed"].clone()
        ),
        (json!(0.7), json!(0.9), json!(7))
    );
    assert_eq!(r[0]["max_tokens"], 100);
    assert_eq!(r[1]["max_tokens"], 300, "--max-tokens caps the request");
    assert_eq!(r[0]["model"], "my-base");
    assert_eq!(r[0]["stream"], false);
}

#[tokio::test]
async fn models_and_health() {
    let (_backend, proxy) = serve(vec![]).await;
    let health: Value = proxy.get_json("/health").await;
    assert_eq!(health["status"], "ok");
    let models: Value = proxy.get_json("/v1/models").await;
    assert_eq!(models["data"][0]["id"], "fake-base");
}

#[tokio::test]
async fn lenient_history_shapes_are_accepted() {
    let (_backend, proxy) = serve(vec![Scripted::text("Next.\n\n<bash>pwd</bash>\n")]).await;
    let mut body = request("swe-agent-1");
    body["reasoning_effort"] = json!("high");
    body["metadata"] = json!({"run": 1});
    body["parallel_tool_calls"] = json!(true);
    body["logprobs"] = json!(false);
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "tool_calls": [
        {"id": "toolu_01XYZ", "type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}},
        {"id": "0", "type": "function", "function": {"name": "submit", "arguments": ""}},
        {"id": "abc123xyz", "type": "function", "function": {"name": "submit"}}
    ], "provider_specific_fields": {"x": 1}}));
    messages.push(json!({"role": "tool", "tool_call_id": "toolu_01XYZ", "content": [{"type": "text", "text": "a b", "cache_control": {"type": "ephemeral"}}], "name": "bash"}));
    messages.push(json!({"role": "tool", "tool_call_id": "0", "content": null}));
    messages.push(json!({"role": "user", "content": ""}));
    messages.push(json!({"role": "user", "content": "again"}));
    let (status, r) = proxy.post(&body).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(arguments(&r), json!({"command": "pwd"}));
    let records = proxy.first_trace();
    assert_eq!(
        records[1]["data"]["ignored_fields"],
        json!([
            "logprobs",
            "metadata",
            "parallel_tool_calls",
            "reasoning_effort"
        ])
    );
}

#[tokio::test]
async fn large_histories_are_accepted() {
    let (backend, proxy) = serve(vec![Scripted::text("Next.\n\n<bash>pwd</bash>\n")]).await;
    let mut body = request("swe-agent-1");
    let big = "x".repeat(5 * 1024 * 1024);
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": "cat", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"cat big\"}"}}]}));
    messages.push(json!({"role": "tool", "tool_call_id": "a", "content": big}));
    let (status, r) = proxy.post(&body).await;
    assert_eq!(status, 200, "{r}");
    assert!(backend.prompts()[0].len() > 5 * 1024 * 1024);
}

#[tokio::test]
async fn tool_choice_none_gets_a_message_and_forced_choices_are_logged() {
    let (_backend, proxy) = serve(vec![
        Scripted::text("Summary: nothing changed yet.\n\n<bash>ls</bash>\n"),
        Scripted::text("Look.\n\n<bash>ls</bash>\n"),
    ])
    .await;
    let mut body = request("swe-agent-1");
    body["tool_choice"] = json!("none");
    let (_, r) = proxy.post(&body).await;
    assert!(
        r["choices"][0]["message"].get("tool_calls").is_none(),
        "{r}"
    );
    assert_eq!(
        r["choices"][0]["message"]["content"],
        "Summary: nothing changed yet."
    );
    assert_eq!(r["choices"][0]["finish_reason"], "stop");
    body["tool_choice"] = json!({"type": "function", "function": {"name": "bash"}});
    let (_, r) = proxy.post(&body).await;
    assert_eq!(tool_call(&r)["function"]["name"], "bash");
    let logged: Vec<Value> = proxy
        .trace_files()
        .iter()
        .map(|f| read_trace(f)[1]["data"]["ignored_fields"].clone())
        .collect();
    assert!(logged.contains(&json!(["tool_choice"])), "{logged:?}");
    assert!(logged.contains(&Value::Null), "nothing ignored: {logged:?}");
}

/// A turn without a tool call carries no id: the session continues through the content index,
/// in one trace file whose deltas rebuild every prompt.
#[tokio::test]
async fn format_error_turns_stay_in_their_session() {
    let (backend, proxy) = serve(vec![
        Scripted::text("Hmm, not sure."),
        Scripted::text("Still thinking."),
        Scripted::text("Ok.\n<bash>ls</bash>\n"),
        Scripted::text("Next.\n<bash>pwd</bash>\n"),
    ])
    .await;
    let mut body = request("swe-agent-1");
    for _ in 0..2 {
        let (_, r) = proxy.post(&body).await;
        let messages = body["messages"].as_array_mut().unwrap();
        messages.push(r["choices"][0]["message"].clone());
        messages.push(
            json!({"role": "user", "content": "Your last output did not use any tool calls!"}),
        );
    }
    let (_, r3) = proxy.post(&body).await;
    continue_with(&mut body, &r3, "a.py");
    proxy.post(&body).await;
    let files = proxy.trace_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let records = read_trace(&files[0]);
    assert_eq!(records.len(), 5);
    let prompts = backend.prompts();
    let mut full = String::new();
    for (r, prompt) in records[1..].iter().zip(&prompts) {
        let p = &r["data"]["prompt"];
        let prefix = p["prefix_bytes"].as_u64().unwrap() as usize;
        full = format!("{}{}", &full[..prefix], p["delta"].as_str().unwrap());
        assert_eq!(&full, prompt);
    }
    // A history with a foreign id starts a new session whose file stands alone.
    let mut foreign = request("swe-agent-1");
    let messages = foreign["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": "x", "tool_calls": [{"id": "call_A", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}]}));
    messages.push(json!({"role": "tool", "tool_call_id": "call_A", "content": "a.py"}));
    let backend2 = FakeBackend::start(vec![Scripted::text("Next.\n<bash>pwd</bash>\n")]).await;
    let proxy2 = Proxy::start(&backend2.url()).await;
    proxy2.post(&foreign).await;
    let record = &proxy2.first_trace()[1]["data"];
    assert_eq!(record["prompt"]["prefix_bytes"], 0);
    assert_eq!(
        record["prompt"]["delta"].as_str().unwrap(),
        backend2.prompts()[0]
    );
}

/// mini-swe-agent drops a reply without a tool call and appends its format error as a user
/// message (also before any assistant turn): the session and the append-only prompt survive.
#[tokio::test]
async fn dropped_failed_turns_keep_session_and_prefix() {
    let (backend, proxy) = serve(vec![
        Scripted::text("I will think about it."),
        Scripted::text("Look.\n<bash>ls</bash>\n"),
        Scripted::text("Hmm."),
        Scripted::text("Fix.\n<bash>sed -i 's/ /-/' slug.py</bash>\n"),
    ])
    .await;
    let mut body = request("mini-swe-agent-1");
    let error = json!({"role": "user", "content": "No tool calls found in the response."});
    let (_, r1) = proxy.post(&body).await;
    assert!(r1["choices"][0]["message"].get("tool_calls").is_none());
    push_message(&mut body, error.clone());
    let (_, r2) = proxy.post(&body).await;
    continue_with(
        &mut body,
        &r2,
        "<returncode>0</returncode>\n<output>\na.py\n</output>",
    );
    proxy.post(&body).await;
    push_message(&mut body, error.clone());
    let (_, r4) = proxy.post(&body).await;
    assert_eq!(
        arguments(&r4),
        json!({"command": "sed -i 's/ /-/' slug.py"})
    );

    let prompts = backend.prompts();
    for pair in prompts.windows(2) {
        assert!(pair[1].starts_with(pair[0].strip_suffix("## Thinking\n").unwrap()));
    }
    // A feedback step is its observation alone: no empty "## Thinking" section to imitate.
    assert!(prompts[1].ends_with("# Trajectory\n\n<observation>\nNo tool calls found in the response.\n</observation>\n\n## Thinking\n"));
    let task = prompts[1].split("# Tools").next().unwrap();
    assert!(
        !task.contains("No tool calls found"),
        "feedback is not part of the task"
    );
    let files = proxy.trace_files();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(read_trace(&files[0]).len(), 5);
}

/// openhands-sdk keeps an empty reply and answers it with a corrective user message: blank
/// content cannot identify the session, the prompt it answered can.
#[tokio::test]
async fn empty_replies_kept_by_the_scaffold_stay_in_their_session() {
    let (_backend, proxy) = serve(vec![
        Scripted::text(""),
        Scripted::text("  "),
        Scripted::text("Plan.\n<task_tracker>\n<command>view</command>\n</task_tracker>\n"),
    ])
    .await;
    let mut body = request("openhands-sdk-1");
    for _ in 0..2 {
        let (_, r) = proxy.post(&body).await;
        assert_eq!(r["choices"][0]["message"]["content"], "");
        let messages = body["messages"].as_array_mut().unwrap();
        messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": ""}]}));
        messages.push(json!({"role": "user", "content": [{"type": "text", "text": "Your last response was empty."}]}));
    }
    let (_, r) = proxy.post(&body).await;
    assert_eq!(tool_call(&r)["function"]["name"], "task_tracker");
    assert_eq!(proxy.trace_files().len(), 1);
}

/// `x-asap-overhead-ms`: the proxy's own time, backend waits excluded, on every response;
/// streams end with the whole request's figure as an SSE comment.
#[tokio::test]
async fn every_response_reports_the_proxy_overhead_without_the_backend_time() {
    let (_backend, proxy) = serve(vec![
        slow(
            std::time::Duration::from_millis(400),
            "Look.\n<bash>ls</bash>\n",
        ),
        Scripted::text("Look.\n<bash>ls</bash>\n"),
    ])
    .await;
    let body = request("swe-agent-1");
    let overhead = |resp: &reqwest::Response| -> f64 {
        resp.headers()["x-asap-overhead-ms"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    let started = std::time::Instant::now();
    let resp = proxy.send_chat(&body).await;
    let total_ms = started.elapsed().as_secs_f64() * 1e3;
    assert_eq!(resp.status(), 200);
    let ms = overhead(&resp);
    assert!(
        total_ms >= 400.0 && (0.0..200.0).contains(&ms),
        "{ms} of {total_ms}"
    );

    let mut streaming = body.clone();
    streaming["stream"] = json!(true);
    let resp = proxy.send_chat(&streaming).await;
    assert!(overhead(&resp) >= 0.0);
    let text = resp.text().await.unwrap();
    let comment = text
        .lines()
        .find_map(|l| l.strip_prefix(": x-asap-overhead-ms "))
        .expect("overhead comment");
    assert!(comment.parse::<f64>().unwrap() >= 0.0);
    assert!(text.find(": x-asap-overhead-ms").unwrap() < text.find("data: [DONE]").unwrap());

    let resp = proxy
        .client
        .post(proxy.url())
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert!(overhead(&resp) >= 0.0, "errors carry it too");
}

/// Issue 18 item 4: a backend that leaves part of the closing tag at the end of the text and
/// reports no matched stop. Stopped (`finish_reason: "stop"`): the fragment is dropped and
/// the command rebuilt as if `</bash>` had matched. Cut by the token limit (`length`): the
/// model did not finish its command; no tool call, never run.
#[tokio::test]
async fn a_partial_closing_tag_never_reaches_a_command_over_http() {
    let text = "I run the failing test.\n\n### Action\n\n<bash>python -m pytest tests/test_x.py::test_total</ba";
    let raw = |finish: &str| Scripted::Raw {
        status: 200,
        body: json!({
            "id": "cmpl-fake", "object": "text_completion", "created": 1, "model": "fake-base",
            "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": null}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
        })
        .to_string(),
    };
    let (_backend, proxy) = serve(vec![raw("stop")]).await;
    let (status, resp) = proxy.post(&request("swe-agent-1")).await;
    assert_eq!(status, 200, "{resp}");
    assert_eq!(resp["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(tool_call(&resp)["function"]["name"], "bash");
    assert_eq!(
        arguments(&resp),
        json!({"command": "python -m pytest tests/test_x.py::test_total"})
    );
    let records = proxy.first_trace();
    let step = &records[1]["data"];
    assert_eq!(step["completion"]["text"], text, "the raw text is traced");
    // The backend said nothing of a stop; the closer the proxy put back is its own field, so
    // `replay` recomputes it from the backend's answer as the live turn did.
    assert_eq!(step["completion"]["matched_stop"], Value::Null);
    assert_eq!(step["completion"]["closer"], "</bash>");

    let (_backend, proxy) = serve(vec![raw("length")]).await;
    let (status, resp) = proxy.post(&request("swe-agent-1")).await;
    assert_eq!(status, 200, "{resp}");
    assert!(
        resp["choices"][0]["message"]["tool_calls"].is_null(),
        "{resp}"
    );
    assert_eq!(resp["choices"][0]["finish_reason"], "length");
    assert!(
        !resp.to_string().contains("test_total</"),
        "no fragment anywhere in the reply: {resp}"
    );
    let records = proxy.first_trace();
    let step = &records[1]["data"];
    assert_eq!(step["parse"]["error"]["class"], "unclosed_tag", "{step}");
}

/// Issue 18 item 6: an unknown scaffold's shell (`run_command {cmd}`) is the model's
/// `<bash>`: documented and stopped as such, and the call goes back under its own name and
/// parameter.
#[tokio::test]
async fn a_generic_shell_is_bash_for_the_model_and_run_command_for_the_scaffold() {
    let (backend, proxy) = serve(vec![Scripted::text(
        "I list the files.\n\n### Action\n\n<bash>ls -la</bash>\n",
    )])
    .await;
    let body = json!({
        "model": "base-model",
        "messages": [{"role": "user", "content": "How many files are there?"}],
        "tools": [
            {"type": "function", "function": {"name": "run_command", "description": "Run a shell command.",
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}},
            {"type": "function", "function": {"name": "read_notes", "description": "Read notes.",
                "parameters": {"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]}}}
        ]
    });
    let (status, resp) = proxy.post(&body).await;
    assert_eq!(status, 200, "{resp}");
    assert_eq!(tool_call(&resp)["function"]["name"], "run_command");
    assert_eq!(arguments(&resp), json!({"cmd": "ls -la"}));
    let request = &backend.requests()[0];
    let prompt = request["prompt"].as_str().unwrap();
    assert!(
        prompt.contains("## <bash>\n") && prompt.contains("<bash>ls -la</bash>"),
        "{prompt}"
    );
    assert!(
        !prompt.contains("<run_command>") && !prompt.contains("<cmd>"),
        "{prompt}"
    );
    assert!(
        request["stop"]
            .as_array()
            .unwrap()
            .contains(&json!("</bash>")),
        "{request}"
    );
}
