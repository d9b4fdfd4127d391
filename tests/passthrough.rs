//! Passthrough mode: chat requests forwarded unchanged to an instruct model, the same trace
//! written, ids minted so the session carries over (issue 5).

use serde_json::{json, Value};

use crate::util::backend::{FakeBackend, Scripted};
use crate::util::chunks;
use crate::util::cli::run;
use crate::util::proxy::{serve_with, Proxy};
use crate::util::{continue_with, read_trace, request};

fn chat(content: &str, name: &str, args: Value) -> Scripted {
    Scripted::Chat {
        content: content.into(),
        tool_call: Some((name.into(), args.to_string())),
    }
}

/// Records a three-step SWE-agent session through passthrough; returns the proxy (its trace
/// directory), the backend and the final request body.
pub async fn record_reference_session() -> (Proxy, FakeBackend) {
    let (backend, proxy) = serve_with(vec![
        chat("First I list the repository.", "bash", json!({"command": "ls /testbed"})),
        chat("Now I read the module.", "str_replace_editor", json!({"command": "view", "path": "/testbed/inventory.py"})),
        chat("Find where total is defined.", "bash", json!({"command": "grep -n 'def total' /testbed/inventory.py"})),
        chat("Fix it.", "str_replace_editor", json!({"command": "str_replace", "path": "/testbed/inventory.py", "old_str": "l.qty", "new_str": "l.qty * l.unit_price"})),
    ], |a| {
        a.mode = Some(asap_proxy::config::Mode::Passthrough)
    }).await;
    let mut body = request("swe-agent-1");
    let outputs = [
        "inventory.py\ntests",
        "     1\tclass Line:",
        "12:    def total(self):",
        "edited",
    ];
    for (turn, output) in outputs.iter().enumerate() {
        if turn == 1 {
            body["stream"] = json!(true);
            let (status, data) = proxy.post_stream(&body).await;
            assert_eq!(status, 200);
            let chunks: Vec<Value> = chunks(&data);
            let head = chunks
                .iter()
                .find_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["id"].as_str())
                .unwrap()
                .to_string();
            let arguments: String = chunks
                .iter()
                .filter_map(|c| {
                    c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
                })
                .collect();
            body["stream"] = json!(false);
            let messages = body["messages"].as_array_mut().unwrap();
            messages.push(json!({"role": "assistant", "content": "Now I read the module.", "tool_calls": [{"id": head, "type": "function", "function": {"name": "str_replace_editor", "arguments": arguments}}]}));
            messages.push(json!({"role": "tool", "tool_call_id": head, "content": output}));
            continue;
        }
        let (status, r) = proxy.post(&body).await;
        assert_eq!(status, 200, "{r}");
        let message = r["choices"][0]["message"].clone();
        let id = message["tool_calls"][0]["id"].as_str().unwrap().to_string();
        assert!(id.starts_with("call_asap_"), "ids are minted: {id}");
        let messages = body["messages"].as_array_mut().unwrap();
        messages.push(message);
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
    }
    // The instruct backend got the scaffold's own chat requests, not a rendered prompt.
    let requests = backend.requests();
    assert_eq!(requests.len(), 4);
    assert!(requests
        .iter()
        .all(|r| r.get("prompt").is_none() && r["tools"].is_array()));
    assert_eq!(
        requests[1]["stream"], false,
        "the proxy streams the reply itself"
    );
    assert_eq!(requests[0]["messages"], request("swe-agent-1")["messages"]);
    (proxy, backend)
}

#[tokio::test]
async fn passthrough_forwards_and_traces_one_session() {
    let (proxy, _backend) = record_reference_session().await;
    let files = proxy.trace_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let records = read_trace(&files[0]);
    assert_eq!(records.len(), 5);
    let steps: Vec<&Value> = records[1..].iter().map(|r| &r["data"]).collect();
    assert_eq!(
        steps[0]["parse"]["action"],
        json!({"kind": "call", "tag": "bash", "arguments": {"command": "ls /testbed"}})
    );
    assert_eq!(steps[1]["parse"]["action"]["tag"], "str_replace_editor");
    assert_eq!(steps[0]["parse"]["thought"], "First I list the repository.");
    assert!(steps[1]["prompt"]["delta"]
        .as_str()
        .unwrap()
        .contains("<observation>\ninventory.py\ntests\n</observation>"));
    assert_eq!(
        steps
            .iter()
            .map(|s| s["step"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
}

/// The whole loop of the paper's prefixes: record with an instruct model in passthrough mode,
/// cut a K=3 prefix from the trace with `prefix build`, and a base-model session of the same
/// task picks it up by fingerprint, its three steps rendered before the live ones.
#[tokio::test]
async fn passthrough_trace_becomes_a_prefix_that_a_base_model_session_uses() {
    let (recorder, _chat) = record_reference_session().await;
    let trace = recorder.trace_files().remove(0);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("prefixes.jsonl");
    // The recorded task is made up and has no gold patch; the leak check itself is covered
    // in prefix_build.
    let built = run(&[
        &"prefix",
        &"build",
        &"--k",
        &"3",
        &"--no-leak-check",
        &"--from",
        &trace,
        &"--out",
        &out,
    ]);
    assert!(built.success(), "{}", built.stderr);
    let built = std::fs::read_to_string(&out).unwrap();
    assert_eq!(built.lines().count(), 1, "{built}");

    let (backend, proxy) = serve_with(
        vec![
            Scripted::text("Base model step.\n<bash>cat /testbed/inventory.py</bash>\n"),
            Scripted::text("Next.\n<bash>pwd</bash>\n"),
        ],
        |a| {
            a.prompt.prefixes = vec![dir.path().to_path_buf()];
        },
    )
    .await;
    let mut body = request("swe-agent-1");
    let (_, r1) = proxy.post(&body).await;
    continue_with(&mut body, &r1, "live observation");
    proxy.post(&body).await;
    let prompt = &backend.prompts()[1];
    let trajectory = prompt.split("\n# Trajectory\n").nth(1).unwrap();
    let at = |needle: &str| {
        trajectory
            .find(needle)
            .unwrap_or_else(|| panic!("{needle} missing in {trajectory}"))
    };
    let first = at("First I list the repository.\n\n### Action\n\n<bash>ls /testbed</bash>\n\n<observation>\ninventory.py\ntests\n</observation>");
    let second =
        at("Now I read the module.\n\n### Action\n\n<str_replace_editor>\n<command>view</command>");
    let third = at("Find where total is defined.");
    let live = at("Base model step.");
    assert!(first < second && second < third && third < live);
    assert!(
        !trajectory.contains("Fix it."),
        "K=3: the fourth (editing) step is not in the prefix"
    );
    let session = &proxy.first_trace()[0]["data"];
    assert_eq!(session["prefix"]["matched_by"], "fingerprint");
    assert_eq!(session["prefix"]["k"], 3);
}

/// A chat reply with two tool calls at once, as post-trained models make them.
fn two_calls() -> Scripted {
    let body = json!({
        "id": "chatcmpl-x", "object": "chat.completion", "created": 0, "model": "instruct-model",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Look, then fix.",
            "tool_calls": [
                {"id": "own_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls /testbed\"}"}},
                {"id": "own_2", "type": "function", "function": {"name": "str_replace_editor", "arguments": "{\"command\": \"str_replace\", \"path\": \"/testbed/inventory.py\", \"old_str\": \"l.qty\", \"new_str\": \"l.qty * l.unit_price\"}"}}
            ]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    });
    Scripted::Raw {
        status: 200,
        body: body.to_string(),
    }
}

/// A passthrough proxy with `--tool-calls all` in front of the scripted chat backend.
async fn serve_all_calls(script: Vec<Scripted>) -> (FakeBackend, Proxy) {
    serve_with(script, |a| {
        a.mode = Some(asap_proxy::config::Mode::Passthrough);
        a.tool_calls = Some(asap_proxy::config::ToolCalls::All);
    })
    .await
}

/// `--tool-calls all`: every call of the reply reaches the scaffold, each minted for its own
/// step; the trace keeps the further ones, and `report` counts each as an action (the edit,
/// its observation) but the reply as one turn. `first` (the default) keeps one and notes it.
#[tokio::test]
async fn passthrough_keeps_every_tool_call_with_tool_calls_all() {
    let (_backend, proxy) =
        serve_all_calls(vec![two_calls(), chat("Done.", "submit", json!({}))]).await;
    let mut body = request("swe-agent-1");
    let (status, r) = proxy.post(&body).await;
    assert_eq!(status, 200, "{r}");
    let message = r["choices"][0]["message"].clone();
    let calls = message["tool_calls"].as_array().unwrap().clone();
    assert_eq!(calls.len(), 2, "{message}");
    let steps: Vec<usize> = calls
        .iter()
        .map(|c| {
            asap_proxy::session::CallId::parse(c["id"].as_str().unwrap())
                .unwrap()
                .step
        })
        .collect();
    assert_eq!(steps, vec![0, 1], "each call is minted for its own step");
    assert_eq!(calls[1]["function"]["name"], "str_replace_editor");
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(message);
    for (call, output) in calls.iter().zip([
        "inventory.py\ntests",
        "The file /testbed/inventory.py has been edited.",
    ]) {
        messages.push(json!({"role": "tool", "tool_call_id": call["id"], "content": output}));
    }
    let (status, r) = proxy.post(&body).await;
    assert_eq!(status, 200, "{r}");
    let records = read_trace(&proxy.trace_files()[0]);
    let steps: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "step")
        .map(|r| &r["data"])
        .collect();
    assert_eq!(steps.len(), 2);
    assert_eq!(
        steps[0]["parse"]["more_actions"][0]["tag"],
        "str_replace_editor"
    );
    assert_eq!(
        steps[0]["response"]["more_tool_calls"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        steps[1]["step"], 2,
        "the next reply is the history's third action"
    );
    assert!(steps[1]["parse"].get("more_actions").is_none());

    // The viewer shows the further call on the reply's card, with its own observation.
    let steps = asap_proxy::view::steps::read(&proxy.trace_files()[0]).unwrap();
    assert_eq!(steps.steps.len(), 2);
    let more = &steps.steps[0].more;
    assert_eq!(more.len(), 1);
    assert_eq!(more[0].step, 1);
    assert_eq!(more[0].action.as_ref().unwrap().tool, "str_replace_editor");
    assert_eq!(
        more[0].observation.as_deref(),
        Some("The file /testbed/inventory.py has been edited.")
    );
    assert_eq!(more[0].flags, ["edit"]);
    assert_eq!(
        steps.steps[0].observation.as_deref(),
        Some("inventory.py\ntests")
    );
    assert!(steps.steps[1].more.is_empty());

    let report = run(&[&"report", &proxy.log_dir.path(), &"--format", &"json"]);
    assert!(report.success(), "{}", report.stderr);
    let t = &report.json()["trajectories"][0]["behaviour"];
    assert_eq!(t["turns"], 2, "two replies: {t}");
    assert_eq!(t["edits"], 1, "the second call is an edit: {t}");
    assert_eq!(
        t["autonomous_edit"], true,
        "its observation says edited: {t}"
    );
    assert_eq!(t["explicit_submission"], true, "{t}");

    // The default keeps the first call only, and the trace says so.
    let (_backend, first) = serve_with(vec![two_calls()], |a| {
        a.mode = Some(asap_proxy::config::Mode::Passthrough)
    })
    .await;
    let (status, r) = first.post(&request("swe-agent-1")).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        r["choices"][0]["message"]["tool_calls"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let records = read_trace(&first.trace_files()[0]);
    let step = &records.iter().find(|r| r["type"] == "step").unwrap()["data"];
    assert_eq!(step["parse"]["notes"][0], "kept the first of 2 tool calls");
    assert!(step["parse"].get("more_actions").is_none());
}

/// The documented base-versus-post-trained workflow end to end: the base model through the
/// proxy, the post-trained model through passthrough with `--tool-calls all`, then
/// `report --pair base post`. The protocols differ by design: no `--allow-protocol-mismatch`
/// is needed, the report says the comparison is not scaffold-controlled and names the
/// differences; each B − A has its paired interval and p-value.
#[tokio::test]
async fn base_against_post_trained_is_reported_as_not_scaffold_controlled() {
    let runs = [("t1", 0), ("t2", 0)];
    let base = crate::denominators::record("base", &runs, |_| {}).await;
    let (_backend, post) = serve_with(
        vec![
            two_calls(),
            chat("Done.", "submit", json!({})),
            chat("Nothing to change.", "submit", json!({})),
        ],
        |a| {
            a.mode = Some(asap_proxy::config::Mode::Passthrough);
            a.tool_calls = Some(asap_proxy::config::ToolCalls::All);
            a.label = Some("post".into());
        },
    )
    .await;
    let headers = |task: &'static str| [("x-asap-task", task), ("x-asap-run", "0")];
    // t1: two calls at once (ls, an edit), their results, then submit. t2: submit at once.
    let mut body = request("swe-agent-1");
    let r = post.post_with_headers(&body, &headers("t1")).await;
    let message = r["choices"][0]["message"].clone();
    let calls = message["tool_calls"].as_array().unwrap().clone();
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(message);
    for (call, output) in calls
        .iter()
        .zip(["inventory.py", "The file has been edited."])
    {
        messages.push(json!({"role": "tool", "tool_call_id": call["id"], "content": output}));
    }
    post.post_with_headers(&body, &headers("t1")).await;
    post.post_with_headers(&request("swe-agent-1"), &headers("t2"))
        .await;
    assert_eq!(post.trace_files().len(), 2);
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results.jsonl");
    std::fs::write(
        &results,
        "{\"label\": \"base\", \"instance_id\": \"t1\", \"run\": 0, \"resolved\": false}\n\
         {\"label\": \"base\", \"instance_id\": \"t2\", \"run\": 0, \"resolved\": false}\n\
         {\"label\": \"post\", \"instance_id\": \"t1\", \"run\": 0, \"resolved\": true}\n\
         {\"label\": \"post\", \"instance_id\": \"t2\", \"run\": 0, \"resolved\": false}\n",
    )
    .unwrap();
    let (lb, lp) = (base.log_dir.path(), post.log_dir.path());
    // `report` over both labels with their results, the pair, and `more` arguments.
    let report = |more: &[&dyn AsRef<std::ffi::OsStr>]| {
        let base: [&dyn AsRef<std::ffi::OsStr>; 8] = [
            &"report",
            &lb,
            &lp,
            &"--results",
            &results,
            &"--pair",
            &"base",
            &"post",
        ];
        run(&[&base[..], more].concat())
    };
    let md = report(&[]);
    assert!(md.success(), "{}", md.stderr);
    let md = md.stdout;
    assert!(md.contains("**Not scaffold-controlled:"), "{md}");
    assert!(
        md.contains("- mode: base proxy; post passthrough\n"),
        "{md}"
    );
    assert!(md.contains("- tool calls: base –; post all\n"), "{md}");
    assert!(
        md.contains("| tool calls (passthrough) | – | all |"),
        "{md}"
    );
    // A chat model is shown no prefix and runs under no rule: the protocol says so.
    assert!(md.contains("| prefix K | 0 | none (passthrough) |"), "{md}");
    assert!(
        md.contains("- prefix K: base 0; post none (passthrough)\n"),
        "{md}"
    );
    assert!(!md.contains("## Protocol differences"), "{md}");
    // The page and the CSV say it too.
    let page = dir.path().join("pair.html");
    let csv = report(&[&"--format", &"csv", &"--html", &page]);
    assert!(csv.success(), "{}", csv.stderr);
    let page = std::fs::read_to_string(&page).unwrap();
    assert!(page.contains("<strong>Not scaffold-controlled:"), "{page}");
    assert!(
        csv.stdout
            .contains("\npair_statement,\"Not scaffold-controlled:"),
        "{}",
        csv.stdout
    );
    assert!(csv
        .stdout
        .contains("\npair_protocol_note,mode: base proxy; post passthrough\n"));
    // Explicit submission: base never (it only listed files), post in both pairs: +100 points
    // in every bootstrap draw; the sign flips give ±1 when both tasks flip alike, 0 otherwise,
    // so p is about ½.
    // A second --pair: both comparisons, in the order given; `pair` is the first.
    let json = report(&[&"--pair", &"base", &"base", &"--format", &"json"]).json();
    assert_eq!(json["pairs"].as_array().unwrap().len(), 2);
    assert_eq!(json["pairs"][1]["scaffold_controlled"], true);
    assert_eq!(json["pair"], json["pairs"][0]);
    // base → post is no step of a sweep: no change between them (the pair compares them).
    assert_eq!(json["changes"], json!([]), "{}", json["changes"]);
    let pair = &json["pair"];
    assert_eq!(pair["scaffold_controlled"], false);
    assert_eq!(pair["pairs"], 2);
    let row = |key: &str| {
        pair["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == key)
            .unwrap()
            .clone()
    };
    let submit = row("explicit_submission");
    assert_eq!(
        (submit["a"].clone(), submit["b"].clone()),
        (json!(0.0), json!(1.0))
    );
    assert_eq!(submit["change"]["interval"], json!({"lo": 1.0, "hi": 1.0}));
    let p = submit["change"]["p_value"].as_f64().unwrap();
    assert!((0.4..0.6).contains(&p), "{p}");
    assert_eq!(
        row("autonomous_edit")["b"],
        json!(0.5),
        "the second call's edit counts"
    );
    // Pass@1 over the pairs: 0 → ½; a draw of t1 twice gives +1, of t2 twice 0.
    assert_eq!(pair["pass_at_1"], json!([0.0, 0.5]));
    assert_eq!(
        pair["pass_at_1_change"]["interval"],
        json!({"lo": 0.0, "hi": 1.0})
    );
}

/// SWE-agent takes one tool call a turn: it answers a reply of several with the reply as
/// plain content and an error, and asks again. The session goes on (the content finds it), and
/// `report` counts the rejected reply as a parsable turn that is not a valid tool call and
/// whose calls never ran: no edit from it.
#[tokio::test]
async fn a_reply_of_several_calls_the_scaffold_rejects_counts_no_action() {
    let (_backend, proxy) = serve_all_calls(vec![
        two_calls(),
        chat("One at a time.", "bash", json!({"command": "ls /testbed"})),
        chat("Done.", "submit", json!({})),
    ])
    .await;
    let mut body = request("swe-agent-1");
    let (status, r) = proxy.post(&body).await;
    assert_eq!(status, 200, "{r}");
    let content = r["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": content}));
    messages.push(json!({"role": "user", "content": "Your last output included multiple tool calls!\nPlease make sure your output includes a thought and exactly _ONE_ function call."}));
    let (status, r) = proxy.post(&body).await;
    assert_eq!(status, 200, "{r}");
    let message = r["choices"][0]["message"].clone();
    let id = message["tool_calls"][0]["id"].clone();
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(message);
    messages.push(json!({"role": "tool", "tool_call_id": id, "content": "inventory.py"}));
    let (status, _) = proxy.post(&body).await;
    assert_eq!(status, 200);
    assert_eq!(proxy.trace_files().len(), 1, "one session");

    let out = run(&[
        &"report",
        &proxy.log_dir.path(),
        &"--format",
        &"json",
        &"--steps",
    ]);
    assert!(out.success(), "{}", out.stderr);
    let t = &out.json()["trajectories"][0];
    let b = &t["behaviour"];
    assert_eq!(b["turns"], 3, "{b}");
    assert_eq!(b["parsable_turns"], 3, "{b}");
    assert_eq!(
        b["valid_tool_calls"], 2,
        "the rejected reply is not valid: {b}"
    );
    assert_eq!(b["edits"], 0, "the rejected edit never ran: {b}");
    assert_eq!(b["explicit_submission"], true, "{b}");
    assert_eq!(t["steps"][0]["parse_error"], "multiple_tool_calls");
    assert_eq!(t["steps"].as_array().unwrap().len(), 3, "{}", t["steps"]);
}

/// The last reply edits and submits at once (mini-swe-agent ends the run on the submission, so
/// the edit's result never comes back): the edit ran, and counts as a successful one.
#[tokio::test]
async fn an_edit_in_the_reply_that_submits_counts_as_made() {
    let body = json!({
        "id": "chatcmpl-y", "object": "chat.completion", "created": 0, "model": "instruct-model",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Fix and submit.",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "str_replace_editor", "arguments": "{\"command\": \"str_replace\", \"path\": \"/testbed/inventory.py\", \"old_str\": \"l.qty\", \"new_str\": \"l.qty * l.unit_price\"}"}},
                {"id": "b", "type": "function", "function": {"name": "submit", "arguments": "{}"}}
            ]}}]
    });
    let (_backend, proxy) = serve_all_calls(vec![Scripted::Raw {
        status: 200,
        body: body.to_string(),
    }])
    .await;
    let (status, r) = proxy.post(&request("swe-agent-1")).await;
    assert_eq!(status, 200, "{r}");
    let out = run(&[&"report", &proxy.log_dir.path(), &"--format", &"json"]);
    assert!(out.success(), "{}", out.stderr);
    let b = &out.json()["trajectories"][0]["behaviour"];
    assert_eq!(b["edits"], 1, "{b}");
    assert_eq!(b["repo_edits"], 1, "{b}");
    assert_eq!(b["autonomous_edit"], true, "{b}");
    assert_eq!(b["explicit_submission"], true, "{b}");
}
