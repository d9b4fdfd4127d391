//! Inputs real scaffolds, terminals and backends produce (issue 18): pretty-printed request
//! bodies (indentation, CRLF, tabs) still give one-line trace records; tool output with lone
//! surrogate escapes, control characters, very long lines and CRLF line ends; a backend
//! reporting the matched stop as a token id.

use serde_json::{json, Value};

use crate::util::backend::Scripted;
use crate::util::proxy::{serve, Proxy};
use crate::util::{continue_with, read_trace, request};

use crate::util::cli::run;

/// Runs the real `replay --check` on one session's logs: exit 0, `steps` steps, no prompt or
/// parse difference, nothing unreadable.
fn replay_is_clean(logs: &std::path::Path, steps: usize) {
    let out = run(&[&"replay", &"--check", &logs]);
    let stdout = &out.stdout;
    assert_eq!(out.code, Some(0), "{stdout}\n{}", out.stderr);
    assert!(
        stdout.ends_with(&format!(
            "files 1  steps {steps}  prompt differences 0  parse differences 0  unreadable 0\n"
        )),
        "{stdout}"
    );
}

/// `body` pretty-printed with tab indentation and CRLF line ends.
fn pretty_crlf(body: &Value) -> String {
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"\t");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
    serde::Serialize::serialize(body, &mut ser).unwrap();
    // Pretty output has no raw line break inside strings.
    String::from_utf8(out).unwrap().replace('\n', "\r\n") + "\r\n"
}

/// Posts raw body text; returns status and JSON.
async fn post_raw(proxy: &Proxy, body: String) -> (u16, Value) {
    let resp = proxy
        .client
        .post(proxy.url())
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

#[tokio::test]
async fn a_pretty_printed_crlf_body_gives_one_line_records_that_report_and_replay_read() {
    let (_backend, proxy) = serve(vec![
        Scripted::text("Look around.\n<bash>ls</bash>\n"),
        Scripted::text("Read it.\n<bash>cat a.py</bash>\n"),
    ])
    .await;
    let mut body = request("swe-agent-1");
    body["metadata"] = json!({"note": "nested\tvalue", "list": [1, 2.50, {"k": "v"}]});
    let (status, first) = post_raw(&proxy, pretty_crlf(&body)).await;
    assert_eq!(status, 200, "{first}");
    continue_with(&mut body, &first, "a.py\r\nb.py\r\n");
    let (status, second) = post_raw(&proxy, pretty_crlf(&body)).await;
    assert_eq!(status, 200, "{second}");

    let files = proxy.trace_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for line in &lines {
        let record: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not one JSON record per line ({e}): {line:?}"));
        assert!(record["type"].is_string(), "{line}");
    }
    let records = read_trace(&files[0]);
    assert_eq!(records.len(), 3, "session and two steps: {text}");
    assert!(!text.contains('\r'), "no raw CR in the file");

    // The request rebuilt from the deltas is the one sent.
    let mut state = asap_proxy::trace::delta::RequestState::default();
    let mut prompt = String::new();
    for record in &records[1..] {
        let data = &record["data"];
        let keep = data["prompt"]["prefix_bytes"].as_u64().unwrap() as usize;
        prompt.truncate(keep);
        prompt.push_str(data["prompt"]["delta"].as_str().unwrap());
        state.apply(&data["request"], &prompt).unwrap();
    }
    assert_eq!(state.body(), body);

    let trajectory = asap_proxy::report::load::trajectory(&files[0])
        .unwrap()
        .unwrap();
    assert_eq!(trajectory.attempts.len(), 2);

    replay_is_clean(proxy.log_dir.path(), 2);
}

#[tokio::test]
async fn a_token_id_stop_reason_is_recorded_as_a_decimal_string() {
    let (_backend, proxy) = serve(vec![Scripted::Raw {
        status: 200,
        body: json!({
            "id": "cmpl-1", "object": "text_completion", "model": "m",
            "choices": [{"index": 0, "text": "Look.\n<bash>ls</bash>\n", "finish_reason": "stop", "stop_reason": 151643}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        })
        .to_string(),
    }]).await;
    let (status, resp) = proxy.post(&request("swe-agent-1")).await;
    assert_eq!(status, 200, "{resp}");
    let records = proxy.first_trace();
    assert_eq!(records[1]["data"]["completion"]["matched_stop"], "151643");
}

/// A SWE-agent body whose first tool result is `raw` (JSON string content, escapes as the
/// client wrote them), after one turn of `proxy`.
async fn body_with_raw_output(proxy: &Proxy, raw: &str) -> String {
    let mut body = request("swe-agent-1");
    let (status, first) = proxy.post(&body).await;
    assert_eq!(status, 200, "{first}");
    continue_with(&mut body, &first, "@@OUTPUT@@");
    body.to_string().replace("@@OUTPUT@@", raw)
}

#[tokio::test]
async fn terminal_output_with_lone_surrogates_and_control_characters_is_accepted() {
    let long_line = "x".repeat(200 * 1024);
    let cases: Vec<(String, String)> = vec![
        (
            r"caf\udce9 latin-1 byte".into(),
            "caf\u{fffd} latin-1 byte".into(),
        ),
        (r"cut emoji \ud83d".into(), "cut emoji \u{fffd}".into()),
        (
            r"\udce9\ud83d\ude00 pair".into(),
            "\u{fffd}\u{1f600} pair".into(),
        ),
        (
            r"nul\u0000 esc\u001b[31mred\u001b[0m bell\u0007".into(),
            "nul\u{0} esc\u{1b}[31mred\u{1b}[0m bell\u{7}".into(),
        ),
        (format!("{long_line} end"), format!("{long_line} end")),
    ];
    for (raw, expected) in cases {
        let (backend, proxy) = serve(vec![
            Scripted::text("Look.\n<bash>ls</bash>\n"),
            Scripted::text("Next.\n<bash>cat a.py</bash>\n"),
        ])
        .await;
        let body = body_with_raw_output(&proxy, &raw).await;
        let (status, resp) = post_raw(&proxy, body).await;
        let shown = &raw[..raw.len().min(60)];
        assert_eq!(status, 200, "{shown}: {resp}");
        let prompts = backend.prompts();
        assert!(prompts[1].contains(&expected), "{shown}");
        // The trace holds the request as answered: the rebuilt request has U+FFFD where
        // the lone surrogates were, and replay renders the same prompts from it.
        let records = proxy.first_trace();
        assert_eq!(records.len(), 3, "{shown}");
        let mut reader =
            asap_proxy::trace::read::TraceReader::open(&proxy.trace_files()[0]).unwrap();
        while let Some(record) = reader.next_record() {
            record.unwrap();
        }
        let messages = reader.request().messages();
        let output = messages.last().unwrap()["content"].as_str().unwrap();
        assert!(output.contains(&expected), "{shown}");
        replay_is_clean(proxy.log_dir.path(), 2);
    }
}

#[tokio::test]
async fn crlf_terminal_output_renders_with_lf_and_prompts_stay_append_only() {
    let (backend, proxy) = serve(vec![
        Scripted::text("Look.\n<bash>ls</bash>\n"),
        Scripted::text("Read.\n<bash>cat a.py</bash>\n"),
        Scripted::text("Again.\n<bash>ls -la</bash>\n"),
    ])
    .await;
    let mut body = request("swe-agent-1");
    let (_, first) = proxy.post(&body).await;
    continue_with(
        &mut body,
        &first,
        "a.py\r\nb.py\r\nprogress 10%\rprogress 100%\r\n",
    );
    let (status, second) = proxy.post(&body).await;
    assert_eq!(status, 200, "{second}");
    continue_with(&mut body, &second, "print('hi')\r\n");
    let (status, third) = proxy.post(&body).await;
    assert_eq!(status, 200, "{third}");
    let prompts = backend.prompts();
    assert_eq!(prompts.len(), 3);
    assert!(
        prompts[1].contains("a.py\nb.py\nprogress 10%\nprogress 100%"),
        "{}",
        prompts[1]
    );
    assert!(prompts[2].contains("print('hi')"));
    for prompt in &prompts {
        assert!(!prompt.contains('\r'), "{prompt:?}");
    }
    for pair in prompts.windows(2) {
        let stem = pair[0].strip_suffix("## Thinking\n").unwrap();
        assert!(pair[1].starts_with(stem), "append-only");
    }
}

#[tokio::test]
async fn a_responses_request_with_a_lone_surrogate_is_accepted_too() {
    let (backend, proxy) = serve(vec![Scripted::text(
        "Search.\n\n<search>\n<query>x</query>\n</search>\n",
    )])
    .await;
    let body = json!({
        "model": "base-model",
        "input": [{"role": "user", "content": "@@TASK@@"}],
        "tools": [{"type": "function", "name": "search", "description": "Search.",
                   "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                                  "required": ["query"]}}]
    })
    .to_string()
    .replace("@@TASK@@", r"find caf\udce9 and \ud83d");
    let resp = proxy
        .client
        .post(format!("http://{}/v1/responses", proxy.addr))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(backend.prompts()[0].contains("find caf\u{fffd} and \u{fffd}"));
}

/// Turns whose completion ends in a cut-off stop string, with no stop reported (llama-server's
/// OpenAI endpoint), replay with no difference: the trace keeps the backend's own answer and
/// the closer the proxy put back apart, so `replay --check` recomputes the same text.
#[tokio::test]
async fn cut_off_stop_strings_replay_with_no_difference() {
    let raw = |text: &str| Scripted::Raw {
        status: 200,
        body: json!({
            "id": "cmpl-fake", "object": "text_completion", "created": 1, "model": "fake-base",
            "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": null}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
        })
        .to_string(),
    };
    let texts = [
        "Run.\n\n### Action\n\n<bash>ls -la\n</observ",
        "Run.\n\n### Action\n\n<bash>ls -a\n<obs",
        "Run.\n\n### Action\n\n<bash>ls -l\n## Think",
        "Run.\n\n### Action\n\n<bash>pwd</sub",
    ];
    let (_backend, proxy) = serve(texts.iter().map(|t| raw(t)).collect()).await;
    let mut body = request("swe-agent-1");
    let mut commands = Vec::new();
    for _ in texts {
        let (status, resp) = proxy.post(&body).await;
        assert_eq!(status, 200, "{resp}");
        let call = &resp["choices"][0]["message"]["tool_calls"][0]["function"];
        let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        commands.push(args["command"].as_str().unwrap().to_string());
        continue_with(&mut body, &resp, "ok");
    }
    assert_eq!(commands, ["ls -la", "ls -a", "ls -l", "pwd"]);
    replay_is_clean(proxy.log_dir.path(), 4);
}
