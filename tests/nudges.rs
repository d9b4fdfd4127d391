//! The paper's nudge rules and termination over HTTP, across stateless requests: the state
//! travels in the minted tool-call ids (issue 4).

use serde_json::{json, Value};

use crate::util::backend::{FakeBackend, Scripted};
use crate::util::chunks;
use crate::util::proxy::{serve, serve_with, Proxy};
use crate::util::push_message;
use crate::util::MINI_SUBMIT_WITH_PATCH;
use crate::util::{
    arguments as args, continue_with as push_result, read_trace, request, tool_call as call,
};

/// The fields of a minted id: session, step, nudges.
fn id_parts(resp: &Value) -> (String, String, String) {
    let id = call(resp)["id"].as_str().unwrap();
    let parts: Vec<&str> = id.trim_start_matches("call_asap_").split('_').collect();
    (parts[0].into(), parts[1].into(), parts[2].into())
}

fn assert_append_only(prompts: &[String]) {
    for (i, pair) in prompts.windows(2).enumerate() {
        let stem = pair[0].strip_suffix("## Thinking\n").unwrap();
        assert!(
            pair[1].starts_with(stem),
            "prompt {} does not extend prompt {i}",
            i + 1
        );
    }
}

#[tokio::test]
async fn submit_before_edit_is_nudged_once_then_the_second_one_ends_the_run() {
    let (backend, proxy) = serve(vec![
        Scripted::text("Looks fine.\n<submit/>\n"),
        Scripted::text("Let me look first.\n<bash>ls</bash>\n"),
        Scripted::text("Done now.\n<submit/>\n"),
    ])
    .await;
    let mut body = request("swe-agent-1");
    let (_, r1) = proxy.post(&body).await;
    assert_eq!(backend.calls(), 2, "nudged inside the same request");
    assert_eq!(call(&r1)["function"]["name"], "bash");
    assert_eq!(r1["choices"][0]["message"]["content"], "Let me look first.");
    assert_eq!(id_parts(&r1).2, "s0", "nudge used before history step 0");
    let prompts = backend.prompts();
    let tail = prompts[1]
        .strip_prefix(prompts[0].strip_suffix("## Thinking\n").unwrap())
        .unwrap();
    let hint = "You submitted, but no file has been changed yet";
    assert!(
        tail.starts_with("## Thinking\n\n### Action\n\n<submit/>\n\n<observation>\n")
            && tail.contains(hint),
        "{tail}"
    );

    push_result(&mut body, &r1, "a.py");
    let (_, r2) = proxy.post(&body).await;
    assert_eq!(
        call(&r2)["function"]["name"],
        "submit",
        "the second violation ends the run"
    );
    assert_eq!(id_parts(&r2).2, "s0");
    let prompts = backend.prompts();
    assert_append_only(&prompts);

    let records = proxy.steps();
    assert_eq!(records.len(), 3);
    assert_eq!(records[0]["attempt"], 0);
    assert_eq!(records[0]["nudge"]["kind"], "submit_before_edit");
    assert_eq!(records[0]["nudge"]["rejected"]["kind"], "submit");
    assert!(records[0]["nudge"]["hint"]
        .as_str()
        .unwrap()
        .starts_with(hint));
    assert!(records[0]["response"].is_null());
    assert_eq!(records[1]["attempt"], 1);
    assert_eq!(records[1]["nudge"], Value::Null);
    assert_eq!(
        records[2]["termination"]["reason"],
        "submit_before_edit_again"
    );
    assert_eq!(
        records[2]["nudges_used"],
        json!([["submit_before_edit", 0]])
    );
}

#[tokio::test]
async fn repeated_action_is_nudged_once_then_the_second_one_ends_the_run_streaming() {
    let (backend, proxy) = serve(vec![
        Scripted::text("List.\n<bash>ls</bash>\n"),
        Scripted::text("List again.\n<bash>ls </bash>\n"),
        Scripted::text("Where am I?\n<bash>pwd</bash>\n"),
        Scripted::text("Again.\n<bash>pwd</bash>\n"),
    ])
    .await;
    let mut body = request("openhands-sdk-1");
    let (_, r1) = proxy.post(&body).await;
    push_result(&mut body, &r1, "calc.py");
    body["stream"] = json!(true);
    let (_, data) = proxy.post_stream(&body).await;
    let chunks: Vec<Value> = chunks(&data);
    let head = chunks
        .iter()
        .find_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["id"].as_str())
        .unwrap();
    assert!(head.contains("_1_r1_"), "{head}");
    let arguments: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&arguments).unwrap()["command"],
        "pwd"
    );
    // Rebuild the non-streamed message to continue the conversation.
    let r2 = json!({"choices": [{"message": {"role": "assistant", "content": "Where am I?", "tool_calls": [
        {"id": head, "type": "function", "function": {"name": "terminal", "arguments": arguments}}]}}]});
    push_result(&mut body, &r2, "/workspace");
    body["stream"] = json!(false);
    let (_, r3) = proxy.post(&body).await;
    assert_eq!(call(&r3)["function"]["name"], "finish");
    assert!(args(&r3)["message"]
        .as_str()
        .unwrap()
        .contains("repeated the previous action again"));
    assert_append_only(&backend.prompts());
    let records = proxy.steps();
    assert_eq!(records[1]["nudge"]["kind"], "repeated_action");
    assert_eq!(
        records[1]["nudge"]["rejected"]["arguments"]["command"],
        "ls "
    );
    assert_eq!(records[3]["termination"]["reason"], "repeated_action_again");
}

#[tokio::test]
async fn termination_uses_each_scaffolds_finish_action_or_an_error() {
    // mini-swe-agent: its completion command.
    let (_backend, proxy) = serve(vec![
        Scripted::text("Done.\n<submit/>\n"),
        Scripted::text("Done!\n<submit/>\n"),
    ])
    .await;
    let (_, r) = proxy.post(&request("mini-swe-agent-1")).await;
    assert_eq!(args(&r), json!({"command": MINI_SUBMIT_WITH_PATCH}));
    // OpenHands CodeAct: finish with the reason.
    let (_backend, proxy) = serve(vec![
        Scripted::text("Done.\n<submit/>\n"),
        Scripted::text("Done!\n<submit/>\n"),
    ])
    .await;
    let (_, r) = proxy.post(&request("openhands-codeact-1")).await;
    assert_eq!(call(&r)["function"]["name"], "finish");
    assert!(args(&r)["message"]
        .as_str()
        .unwrap()
        .starts_with("asap-proxy ended the trajectory: submitted again"));
    // --on-terminate error.
    let (_backend, proxy) = serve_with(
        vec![
            Scripted::text("Done.\n<submit/>\n"),
            Scripted::text("Done!\n<submit/>\n"),
        ],
        |a| a.on_terminate = Some(asap_proxy::config::OnTerminate::Error),
    )
    .await;
    let (status, err) = proxy.post(&request("swe-agent-1")).await;
    assert_eq!(status, 400);
    assert_eq!(err["error"]["code"], "trajectory_terminated");
    let records = proxy.steps();
    assert_eq!(
        records[1]["termination"]["reason"],
        "submit_before_edit_again"
    );
}

#[tokio::test]
async fn step_cap_and_unparsable_streak_end_the_run() {
    let (_backend, proxy) = serve_with(
        vec![
            Scripted::text("One.\n<bash>echo 1</bash>\n"),
            Scripted::text("Two.\n<bash>echo 2</bash>\n"),
            Scripted::text("Three.\n<bash>echo 3</bash>\n"),
        ],
        |a| a.max_steps = Some(1),
    )
    .await;
    let mut body = request("swe-agent-1");
    let (_, r1) = proxy.post(&body).await;
    push_result(&mut body, &r1, "1");
    let (_, r2) = proxy.post(&body).await;
    assert_eq!(call(&r2)["function"]["name"], "submit");
    let termination = &proxy.steps()[1]["termination"];
    assert_eq!(termination["reason"], "step_cap");
    assert_eq!(termination["max_steps"], 1);
    assert_eq!(termination["step"], 1);
    assert_eq!(termination["on_terminate"], "submit");
    // A scaffold that goes on after the finish action (README, "Termination"): the session
    // keeps no ended mark, so the next request is judged as before (the cap again), its
    // record follows in the same file, and the report's trajectory holds both steps.
    push_result(&mut body, &r2, "submitted");
    let (status, r3) = proxy.post(&body).await;
    assert_eq!(status, 200, "{r3}");
    assert_eq!(call(&r3)["function"]["name"], "submit");
    let steps = proxy.steps();
    assert_eq!(steps[2]["termination"]["reason"], "step_cap");
    assert_eq!(steps[2]["termination"]["step"], 2);
    let trajectory = asap_proxy::report::load::trajectory(&proxy.trace_files()[0])
        .unwrap()
        .unwrap();
    assert_eq!(trajectory.termination.as_deref(), Some("step_cap"));
    let terminated: Vec<(usize, bool)> = trajectory
        .attempts
        .iter()
        .map(|a| (a.step, a.terminated))
        .collect();
    assert_eq!(terminated, [(0, false), (1, true), (2, true)]);

    let (_backend, proxy) = serve_with(
        (0..3)
            .map(|i| Scripted::text(&format!("No idea {i}.")))
            .collect(),
        |a| a.max_unparsable = Some(3),
    )
    .await;
    let mut body = request("swe-agent-1");
    for i in 0..3 {
        let (_, r) = proxy.post(&body).await;
        if i < 2 {
            assert!(r["choices"][0]["message"].get("tool_calls").is_none());
            let messages = body["messages"].as_array_mut().unwrap();
            messages.push(r["choices"][0]["message"].clone());
            messages.push(
                json!({"role": "user", "content": "Your last output did not use any tool calls!"}),
            );
        } else {
            assert_eq!(call(&r)["function"]["name"], "submit");
        }
    }
    let termination = &proxy.steps()[2]["termination"];
    assert_eq!(termination["reason"], "unparsable");
    assert_eq!(termination["consecutive"], 3);
}

/// 30 turns, both nudges fired, every prompt (turns and re-generations) extends the last.
#[tokio::test]
async fn thirty_turn_session_with_both_nudges_stays_append_only() {
    let mut script = Vec::new();
    for i in 0..30 {
        match i {
            5 => {
                script.push(Scripted::text("Same again.\n<bash>echo 4</bash>\n"));
                script.push(Scripted::text("Different.\n<bash>echo 5</bash>\n"));
            }
            12 => {
                script.push(Scripted::text("Finished?\n<submit/>\n"));
                script.push(Scripted::text("Not yet.\n<bash>echo 12</bash>\n"));
            }
            _ => script.push(Scripted::text(&format!(
                "Step {i}.\n<bash>echo {i}</bash>\n"
            ))),
        }
    }
    let (backend, proxy) = serve(script).await;
    let mut body = request("swe-agent-1");
    let mut last = Value::Null;
    for i in 0..30 {
        let (status, r) = proxy.post(&body).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(args(&r)["command"], format!("echo {i}"), "turn {i}");
        push_result(&mut body, &r, &format!("{i}\n"));
        last = r;
    }
    assert_eq!(backend.calls(), 32);
    assert_eq!(id_parts(&last).2, "r5s12");
    assert_eq!(id_parts(&last).1, "29");
    let prompts = backend.prompts();
    assert_append_only(&prompts);
    let last_prompt = prompts.last().unwrap();
    assert_eq!(
        last_prompt
            .matches("<observation>\nThis action is the same as the previous one")
            .count(),
        1
    );
    assert_eq!(
        last_prompt
            .matches("<submit/>\n\n<observation>\nYou submitted")
            .count(),
        1
    );
    assert_eq!(proxy.steps().len(), 32);
}

#[tokio::test]
async fn concurrent_rollouts_of_one_task_never_share_state() {
    let script: Vec<Scripted> = (0..40)
        .map(|i| Scripted::text(&format!("Try {i}.\n<bash>echo {i}</bash>\n")))
        .collect();
    let backend = FakeBackend::start(script).await;
    let proxy = std::sync::Arc::new(Proxy::start(&backend.url()).await);
    let mut handles = Vec::new();
    for _ in 0..8 {
        let proxy = proxy.clone();
        handles.push(tokio::spawn(async move {
            let mut body = request("swe-agent-1");
            let mut sessions = Vec::new();
            for turn in 0..3 {
                let (_, r) = proxy.post(&body).await;
                let (session, step, nudges) = id_parts(&r);
                assert_eq!(step, turn.to_string());
                assert_eq!(nudges, "0");
                sessions.push(session);
                push_result(&mut body, &r, "ok");
            }
            sessions
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        let sessions = h.await.unwrap();
        assert!(sessions.iter().all(|s| *s == sessions[0]), "{sessions:?}");
        all.push(sessions[0].clone());
    }
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 8);
    let files = proxy.trace_files();
    assert_eq!(files.len(), 8);
    assert!(files.iter().all(|f| read_trace(f).len() == 4));
}

#[tokio::test]
async fn a_restarted_proxy_continues_the_session_and_its_nudges() {
    let backend = FakeBackend::start(vec![
        Scripted::text("Done?\n<submit/>\n"),
        Scripted::text("Look.\n<bash>ls</bash>\n"),
        Scripted::text("Done.\n<submit/>\n"),
    ])
    .await;
    let first = Proxy::start(&backend.url()).await;
    let mut body = request("swe-agent-1");
    let (_, r1) = first.post(&body).await;
    drop(first);
    let second = Proxy::start(&backend.url()).await;
    push_result(&mut body, &r1, "a.py");
    let (_, r2) = second.post(&body).await;
    assert_eq!(id_parts(&r2).0, id_parts(&r1).0, "same session");
    assert_eq!(call(&r2)["function"]["name"], "submit");
    let records = second.steps();
    assert_eq!(
        records[0]["termination"]["reason"], "submit_before_edit_again",
        "the nudge state survived"
    );
    assert_append_only(&backend.prompts());
}

#[tokio::test]
async fn requeries_keep_session_and_step() {
    // SWE-agent: re-sends the rejected reply plus an error message.
    let backend = FakeBackend::start(vec![
        Scripted::text("Look.\n<bash>ls</bash>\n"),
        Scripted::text("Hmm."),
        Scripted::text("Read.\n<bash>cat a.py</bash>\n"),
    ])
    .await;
    let proxy = Proxy::start(&backend.url()).await;
    let mut body = request("swe-agent-1");
    let (_, r1) = proxy.post(&body).await;
    push_result(&mut body, &r1, "a.py");
    let (_, bad) = proxy.post(&body).await;
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(bad["choices"][0]["message"].clone());
    messages
        .push(json!({"role": "user", "content": "Your last output did not use any tool calls!"}));
    let (_, r3) = proxy.post(&body).await;
    assert_eq!(id_parts(&r3).0, id_parts(&r1).0);
    assert_eq!(id_parts(&r3).1, "1", "a requery retries step 1");
    let records = proxy.steps();
    assert_eq!(
        records
            .iter()
            .map(|r| r["step"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![0, 1, 1]
    );

    // mini-swe-agent: drops the reply and appends its format error.
    let (_backend, proxy) = serve(vec![
        Scripted::text("Look.\n<bash>ls</bash>\n"),
        Scripted::text("Hmm."),
        Scripted::text("Read.\n<bash>cat a.py</bash>\n"),
    ])
    .await;
    let mut body = request("mini-swe-agent-1");
    let (_, r1) = proxy.post(&body).await;
    push_result(&mut body, &r1, "a.py");
    proxy.post(&body).await;
    push_message(
        &mut body,
        json!({"role": "user", "content": "No tool calls found."}),
    );
    let (_, r3) = proxy.post(&body).await;
    assert_eq!(
        (id_parts(&r3).0, id_parts(&r3).1),
        (id_parts(&r1).0, "1".to_string())
    );

    // OpenHands: a canned user turn after an empty reply (kept in the history).
    let (_backend, proxy) = serve(vec![
        Scripted::text(""),
        Scripted::text("Look.\n<bash>ls</bash>\n"),
    ])
    .await;
    let mut body = request("openhands-sdk-1");
    proxy.post(&body).await;
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": ""}));
    messages.push(json!({"role": "user", "content": "Please continue; use a tool."}));
    let (_, r) = proxy.post(&body).await;
    assert_eq!(id_parts(&r).1, "0");
    assert_eq!(proxy.steps().len(), 2);
}

/// A nudge fired in a turn that was then answered without a tool call, and the scaffold
/// dropped that turn (mini-swe-agent): the nudge stays used and in place.
#[tokio::test]
async fn a_nudge_in_a_dropped_turn_is_not_lost() {
    let (backend, proxy) = serve(vec![
        Scripted::text("Look.\n<bash>ls a</bash>\n"),
        Scripted::text("Done.\n<submit/>\n"),
        Scripted::text("garbage text"),
        Scripted::text("<submit/>\n"),
    ])
    .await;
    let mut body = request("mini-swe-agent-1");
    let (_, r1) = proxy.post(&body).await;
    push_result(&mut body, &r1, "a");
    let (_, r2) = proxy.post(&body).await;
    assert!(r2["choices"][0]["message"].get("tool_calls").is_none());
    push_message(
        &mut body,
        json!({"role": "user", "content": "No tool calls found."}),
    );
    let (_, r3) = proxy.post(&body).await;
    assert_eq!(args(&r3)["command"], MINI_SUBMIT_WITH_PATCH);
    assert_append_only(&backend.prompts());
    let records = proxy.steps();
    assert_eq!(records.len(), 4);
    assert_eq!(records[1]["nudge"]["kind"], "submit_before_edit");
    assert_eq!(
        records[2]["nudges_used"],
        json!([["submit_before_edit", 1]]),
        "up to date within the request"
    );
    assert_eq!(
        records[3]["termination"]["reason"], "submit_before_edit_again",
        "not nudged twice"
    );
}
