//! The trajectory viewer (issue 10): a trace recorded by driving the proxy against the fake
//! backend, then `/ui` on that proxy, the `view` binary, and the committed fixture
//! (`tests/fixtures/view/`, also what `tests/browser/run.sh` loads in headless Chromium).
//!
//! Refresh the fixture after a trace-format change:
//! `ASAP_UPDATE_VIEW_FIXTURE=1 cargo test --test integration view::`.

use std::path::{Path, PathBuf};

use serde_json::json;

use asap_proxy::view::Viewer;

use crate::util::backend::{FakeBackend, Scripted};
use crate::util::cli::{command, run, Served};
use crate::util::proxy::{serve, serve_with, Proxy};
use crate::util::MINI_SUBMIT_WITH_PATCH;
use crate::util::{continue_with, fixture_path, request};

/// Model-controlled text that must never reach the page as markup.
const SCRIPT_IN_THOUGHT: &str = "<script>alert('thought')</script>";
const IMG_IN_OBSERVATION: &str = "<img src=x onerror=alert(1)>";

/// What the "model" writes, one completion call each.
fn script() -> Vec<Scripted> {
    vec![
        // step 0: submit before any edit → nudged, generated again in the same request
        Scripted::text("Looks fine already.\n<submit/>\n"),
        Scripted::text(&format!(
            "Let me look first. {SCRIPT_IN_THOUGHT}\n<bash>ls</bash>\n"
        )),
        // step 1: a test run that fails
        Scripted::text("Run the tests.\n<bash>python -m pytest -q</bash>\n"),
        // step 2: no action at all, then (requeried) an edit
        Scripted::text("I am not sure what to do next, maybe the price."),
        Scripted::text(
            "Fix the total.\n<str_replace_editor>\n<command>str_replace</command>\n\
             <path>/testbed/inventory.py</path>\n<old_str>l.quantity</old_str>\n\
             <new_str>l.quantity * l.unit_price</new_str>\n</str_replace_editor>\n",
        ),
        // step 3: the tests pass; step 4: submit
        Scripted::text("Check again.\n<bash>python -m pytest -q</bash>\n"),
        Scripted::text("Done.\n<submit/>\n"),
    ]
}

/// Tool outputs the scaffold sends back, one per accepted tool call.
fn outputs() -> Vec<String> {
    vec![
        format!("inventory.py\ntest_inventory.py\n{IMG_IN_OBSERVATION}"),
        "F.\nFAILED test_inventory.py::test_total - assert 3 == 1.5\n1 failed, 1 passed".into(),
        "The file /testbed/inventory.py has been edited.".into(),
        "..\n2 passed in 0.01s".into(),
    ]
}

/// Plays SWE-agent against `proxy` until its submit; returns the number of requests.
async fn drive(proxy: &Proxy) -> usize {
    let mut body = request("swe-agent-1");
    body["metadata"] = json!({"instance_id": "inventory__total-1", "run": 0});
    let outputs = outputs();
    let mut outputs = outputs.iter();
    for request in 1..=10 {
        let (status, resp) = proxy.post(&body).await;
        assert_eq!(status, 200, "{resp}");
        let message = &resp["choices"][0]["message"];
        match message["tool_calls"][0]["function"]["name"].as_str() {
            Some("submit") => return request,
            Some(_) => continue_with(&mut body, &resp, outputs.next().unwrap()),
            None => {
                let messages = body["messages"].as_array_mut().unwrap();
                messages.push(message.clone());
                messages.push(
                    json!({"role": "user", "content": "Your last output did not use any tool calls!"}),
                );
            }
        }
    }
    panic!("no submit after 10 requests");
}

/// Records the scripted session; returns the proxy (serving `/ui` too), the backend (with
/// the prompts it received) and the session id.
async fn recorded(
    tweak: impl FnOnce(&mut asap_proxy::config::ServeArgs),
) -> (Proxy, FakeBackend, String) {
    let (backend, proxy) = serve_with(script(), tweak).await;
    assert_eq!(drive(&proxy).await, 6);
    assert_eq!(backend.calls(), 7);
    let files = proxy.trace_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let id = files[0].file_stem().unwrap().to_string_lossy().into_owned();
    if std::env::var_os("ASAP_UPDATE_VIEW_FIXTURE").is_some() {
        let dir = fixture_path("view");
        std::fs::create_dir_all(&dir).unwrap();
        for old in std::fs::read_dir(&dir).unwrap() {
            std::fs::remove_file(old.unwrap().path()).unwrap();
        }
        std::fs::copy(&files[0], dir.join(format!("{id}.jsonl"))).unwrap();
    }
    (proxy, backend, id)
}

/// The page's text with the escapes minijinja writes undone (for assertions on content).
fn text(html: &str) -> String {
    html.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#x27;", "'")
        .replace("&#x2f;", "/")
        .replace("&amp;", "&")
}

async fn get(client: &reqwest::Client, url: &str) -> (u16, reqwest::header::HeaderMap, String) {
    let resp = client.get(url).send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, headers, resp.text().await.unwrap())
}

/// Everything the session page of the scripted session must show.
fn assert_session_page(html: &str, id: &str) {
    assert!(
        !html.contains("<script") && !html.contains("<img"),
        "model text reached the page as markup"
    );
    assert!(
        html.contains("&lt;script&gt;alert("),
        "thought shown escaped"
    );
    assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
    let page = text(html);
    assert!(page.contains(id));
    assert!(page.contains("inventory__total-1"));
    assert!(
        page.contains("Trajectory: 7 model calls"),
        "all calls listed"
    );
    for n in 0..7 {
        assert!(page.contains(&format!("id=\"call-{n}\"")), "call {n}");
        assert!(
            page.contains(&format!("/step/{n}/prompt")),
            "prompt link of call {n}"
        );
    }
    // thoughts, actions, parse failure, nudge, observations, flags, timings, finish reasons
    for expected in [
        "Looks fine already.",
        &format!("Let me look first. {SCRIPT_IN_THOUGHT}"),
        "Run the tests.",
        "Fix the total.",
        "Done.",
        "<span class=\"tool\">bash</span>",
        "<span class=\"tool\">str_replace_editor</span>",
        "<span class=\"tool\">submit</span>",
        "l.quantity * l.unit_price",
        "python -m pytest -q",
        "Parse failure: no_action",
        "Nudge: submit_before_edit",
        "You submitted, but no file has been changed yet",
        "1 failed, 1 passed",
        "2 passed in 0.01s",
        IMG_IN_OBSERVATION,
        ">failed test<",
        ">edit<",
        ">submit<",
        "backend ",
        " ms",
        "sent: tool_calls → bash",
        "sent: stop",
        "backend finish: stop",
        "explicit submission",
        "nudge submit_before_edit ×1",
        "parsable 6/7",
        "Prompt the model saw",
        "# Task",
        "## Thinking",
    ] {
        assert!(page.contains(expected), "session page lacks {expected:?}");
    }
    // prompts are in collapsed <details>, never open by default
    assert!(!html.contains("<details open"));
}

#[tokio::test]
async fn ui_on_the_proxy_lists_the_session_and_shows_every_step() {
    let (proxy, backend, id) = recorded(|_| {}).await;
    let client = reqwest::Client::new();
    let base = format!("http://{}", proxy.addr);

    let (status, headers, html) = get(&client, &format!("{base}/ui")).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    assert!(headers["content-security-policy"]
        .to_str()
        .unwrap()
        .starts_with("default-src 'none'"));
    let list = text(&html);
    assert!(
        list.contains(&format!("/ui/session/{id}\">{id}</a>")),
        "{list}"
    );
    for expected in [
        "inventory__total-1",
        "base-model",
        "swe-agent",
        ">submitted<",
        ">6/7<",
        "failed</span>",
        "Sessions <span class=\"muted\">(1)</span>",
    ] {
        assert!(list.contains(expected), "list lacks {expected:?}");
    }

    let (status, headers, html) = get(&client, &format!("{base}/ui/session/{id}")).await;
    assert_eq!(status, 200, "{html}");
    assert_eq!(headers["cache-control"], "no-store");
    assert_session_page(&html, &id);

    // the exact prompt of every call, byte for byte
    let prompts = backend.prompts();
    for (n, sent) in prompts.iter().enumerate() {
        let (status, headers, body) =
            get(&client, &format!("{base}/ui/session/{id}/step/{n}/prompt")).await;
        assert_eq!(status, 200);
        assert_eq!(headers["content-type"], "text/plain; charset=utf-8");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert_eq!(&body, sent, "prompt of call {n}");
    }
    // and inline, escaped, in the page
    let page = text(&html);
    assert!(page.contains(prompts[6].as_str()), "last prompt inline");
    // the session record's rules and prefix source (issue 17)
    for expected in [
        "<dt>prefix_source</dt><dd class=\"mono\">",
        "<dt>rules</dt><dd class=\"mono\">nudges: true, max_steps: 100, loop_rule: degenerate, loop_window: 10, max_unparsable: 5</dd>",
    ] {
        assert!(page.contains(expected), "session page lacks {expected:?}");
    }

    let (status, _, _) = get(&client, &format!("{base}/ui/session/{id}/step/7/prompt")).await;
    assert_eq!(status, 404);
    let (status, _, body) = get(&client, &format!("{base}/ui/session/000000000000")).await;
    assert_eq!(status, 404);
    assert!(body.contains("no trace of session 000000000000"));
    let (status, headers, _) = get(&client, &format!("{base}/ui/session/%3Cscript%3E")).await;
    assert_eq!(status, 404);
    assert_eq!(headers["content-type"], "text/plain; charset=utf-8");
}

#[tokio::test]
async fn ui_needs_the_api_key_when_the_proxy_has_one() {
    let (_backend, proxy) = serve_with(vec![], |a| a.api_key = vec!["k-view".into()]).await;
    let client = reqwest::Client::new();
    let url = format!("http://{}/ui", proxy.addr);
    let (status, _, body) = get(&client, &url).await;
    assert_eq!(status, 401, "{body}");
    let resp = client.get(&url).bearer_auth("k-view").send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let html = resp.text().await.unwrap();
    assert!(html.contains("No sessions yet"), "an empty log dir: {html}");
}

/// A running `asap-proxy view` (killed on drop); `base` without the `/ui`.
fn viewing(dir: &Path) -> Served {
    let mut cmd = command();
    cmd.args(["view", "--listen", "127.0.0.1:0"]).arg(dir);
    let mut served = Served::spawn(cmd, "asap-proxy view: ");
    served.base = served.base.trim_end_matches("/ui").to_string();
    served
}

#[tokio::test]
async fn view_binary_serves_a_recorded_trace_dir() {
    let (proxy, _backend, id) = recorded(|_| {}).await;
    let viewing = viewing(proxy.log_dir.path());
    let client = reqwest::Client::new();
    // `/` redirects to the list
    let (status, _, list) = get(&client, &format!("{}/", viewing.base)).await;
    assert_eq!(status, 200);
    assert!(text(&list).contains(&format!("/ui/session/{id}\">{id}</a>")));
    let (status, _, html) = get(&client, &format!("{}/ui/session/{id}", viewing.base)).await;
    assert_eq!(status, 200);
    assert_session_page(&html, &id);
    // the API is not served by `view`
    let (status, _, _) = get(&client, &format!("{}/v1/models", viewing.base)).await;
    assert_eq!(status, 404);
}

#[test]
fn view_binary_rejects_a_missing_directory() {
    let out = run(&[&"view", &"/nonexistent/asap-logs"]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("no such file or directory"));
}

/// The committed fixture (recorded by `recorded` above) stays readable: every call and its
/// prompt, with the behaviour the report computes.
#[test]
fn committed_fixture_shows_all_steps() {
    let dir = fixture_path("view");
    let viewer = Viewer::new(vec![dir.clone()], None);
    let list = viewer.sessions();
    assert_eq!(list.sessions.len(), 1, "{:?}", list.skipped);
    let s = &list.sessions[0];
    assert_eq!(s.task, "inventory__total-1");
    assert_eq!(s.ending.text, "submitted");
    assert_eq!(s.steps, 5);
    assert_eq!(s.behaviour.turns, 7);
    assert_eq!(s.behaviour.edits, 1);
    assert_eq!(s.behaviour.test_runs, 2);
    // One edit after the failing test: a first fix, not a re-edit (that needs an edit before
    // the failure too).
    assert!(s.behaviour.failed_test && s.behaviour.autonomous_edit);
    assert!(!s.behaviour.re_edit_after_failed_test);
    let page = viewer.session(&s.session).unwrap();
    assert!(page.steps.error.is_none());
    assert_eq!(page.steps.steps.len(), 7);
    // Recorded before the session record had `prefix_source` and `rules`: still readable,
    // those rows are left out.
    let keys: Vec<&str> = page.record.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "backend",
            "mode",
            "prefix_k",
            "config_sha256",
            "proxy_version"
        ]
    );
    let decisions: Vec<&str> = page
        .steps
        .steps
        .iter()
        .map(|c| c.decision.as_str())
        .collect();
    assert_eq!(
        decisions,
        ["nudge", "accept", "accept", "accept", "accept", "accept", "accept"]
    );
    assert_eq!(
        page.steps.steps[3]
            .failure
            .as_ref()
            .map(|f| f.class.as_str()),
        Some("no_action")
    );
    for (n, call) in page.steps.steps.iter().enumerate() {
        let prompt = viewer.prompt(&s.session, n).unwrap();
        assert_eq!(
            call.prompt.as_ref().unwrap().full.as_deref(),
            Some(prompt.as_str())
        );
    }
    let html = viewer.session_html(&s.session).unwrap();
    assert_session_page(&html, &s.session);
}

/// A prompt longer than the inline limit is not put on the page whole: the page shows the
/// part new in that call and links the whole text.
#[tokio::test]
async fn long_prompts_are_linked_not_inlined() {
    let (backend, proxy) = serve(vec![
        Scripted::text("Look.\n<bash>cat big.log</bash>\n"),
        Scripted::text("Seen.\n<bash>echo ok</bash>\n"),
    ])
    .await;
    let mut body = request("swe-agent-1");
    let (_, resp) = proxy.post(&body).await;
    let big = "log line 0123456789\n".repeat(5000); // 100 kB observation
    continue_with(&mut body, &resp, &big);
    let (_, resp) = proxy.post(&body).await;
    assert_eq!(
        resp["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "bash"
    );
    let files = proxy.trace_files();
    let id = files[0].file_stem().unwrap().to_string_lossy().into_owned();
    let viewer = Viewer::new(vec![PathBuf::from(proxy.log_dir.path())], None);
    let page = viewer.session(&id).unwrap();
    let last = page.steps.steps[1].prompt.as_ref().unwrap();
    assert!(last.bytes > asap_proxy::view::steps::INLINE_PROMPT_BYTES);
    assert!(last.full.is_none());
    let shown = last.new_part.as_deref().unwrap();
    assert!(shown.len() <= asap_proxy::view::steps::INLINE_PROMPT_BYTES);
    assert!(shown.ends_with("## Thinking\n"));
    assert_eq!(viewer.prompt(&id, 1).unwrap(), backend.prompts()[1]);
    let html = viewer.session_html(&id).unwrap();
    assert!(!text(&html).contains(backend.prompts()[1].as_str()));
    assert!(html.len() < 300_000, "{}", html.len());
}

/// A trajectory the proxy ended: the list says why, the session page shows the termination;
/// with results the list shows resolution.
#[tokio::test]
async fn terminated_sessions_and_results_are_shown() {
    let (_backend, proxy) = serve(vec![
        Scripted::text("Done.\n<submit/>\n"),
        Scripted::text("Done!\n<submit/>\n"),
    ])
    .await;
    let mut body = request("swe-agent-1");
    body["metadata"] = json!({"instance_id": "inventory__total-1", "run": 0});
    let (status, resp) = proxy.post(&body).await;
    assert_eq!(status, 200, "{resp}");
    let files = proxy.trace_files();
    let id = files[0].file_stem().unwrap().to_string_lossy().into_owned();
    let results = asap_proxy::report::Results::from_entries([asap_proxy::report::results::Entry {
        label: None,
        instance_id: "inventory__total-1".into(),
        run: Some(0),
        outcome: asap_proxy::report::Outcome {
            resolved: true,
            ..Default::default()
        },
    }]);
    let viewer = Viewer::new(vec![proxy.log_dir.path().to_path_buf()], Some(results));
    let list = viewer.sessions();
    let s = &list.sessions[0];
    assert_eq!(s.ending.text, "terminated: submit_before_edit_again");
    assert_eq!(s.resolved, Some(true));
    let list_html = text(&viewer.list_html().unwrap());
    assert!(list_html.contains(">terminated: submit_before_edit_again<"));
    assert!(list_html.contains(">resolved<"));
    let page = text(&viewer.session_html(&id).unwrap());
    assert!(
        page.contains("Terminated: submit_before_edit_again"),
        "{page}"
    );
    assert!(page.contains("(on_terminate: submit)"));
    assert!(page.contains("Nudge: submit_before_edit"));
}

/// mini-swe-agent (tool mode) sends each observation as `{"returncode", "output"}` JSON: the
/// page shows it decoded as the proxy decodes it for the model (the output, a non-zero
/// return code as `[exit status N]`), not the raw JSON.
#[tokio::test]
async fn mini_observations_are_shown_decoded() {
    let (_backend, proxy) = serve(vec![
        Scripted::text("Look.\n<bash>ls</bash>\n"),
        Scripted::text("Test.\n<bash>python -m pytest -q</bash>\n"),
        Scripted::text("Look again.\n<bash>cat slug.py</bash>\n"),
    ])
    .await;
    let mut body = request("mini-swe-agent-1");
    for output in [
        json!({"returncode": 0, "output": "slug.py\ntest_slug.py\n"}),
        json!({"returncode": 1, "output": "1 failed\n"}),
    ] {
        let (status, resp) = proxy.post(&body).await;
        assert_eq!(status, 200, "{resp}");
        continue_with(&mut body, &resp, &output.to_string());
    }
    let (status, _) = proxy.post(&body).await;
    assert_eq!(status, 200);
    let id = proxy.first_session_id();
    let viewer = Viewer::new(vec![proxy.log_dir.path().to_path_buf()], None);
    let steps = viewer.session(&id).unwrap().steps;
    assert_eq!(
        steps.steps[0].observation.as_deref(),
        Some("slug.py\ntest_slug.py")
    );
    assert_eq!(
        steps.steps[1].observation.as_deref(),
        Some("1 failed\n[exit status 1]")
    );
    let page = text(&viewer.session_html(&id).unwrap());
    assert!(!page.contains("returncode"), "{page}");
}

/// A terminated step's card shows the model's rejected action, marked as replaced, and the
/// finish action actually sent.
#[tokio::test]
async fn terminated_card_shows_the_model_action_and_what_was_sent() {
    let (_backend, proxy) = serve(vec![
        Scripted::text("Done.\n<submit/>\n"),
        Scripted::text("Done!\n<submit/>\n"),
    ])
    .await;
    let body = request("mini-swe-agent-1");
    let (status, resp) = proxy.post(&body).await;
    assert_eq!(status, 200, "{resp}");
    let id = proxy.first_session_id();
    let viewer = Viewer::new(vec![proxy.log_dir.path().to_path_buf()], None);
    let steps = viewer.session(&id).unwrap().steps;
    let last = steps.steps.last().unwrap();
    assert_eq!(last.decision, "terminate");
    assert_eq!(last.action.as_ref().unwrap().tool, "submit");
    let sent = last.sent.as_ref().expect("what was sent instead");
    let call = sent.tool_call.as_ref().unwrap();
    assert_eq!(call.tool, "bash");
    assert_eq!(
        call.arguments,
        [("command".to_string(), MINI_SUBMIT_WITH_PATCH.to_string())]
    );
    assert!(steps.steps[0].sent.is_none(), "a nudged step sent nothing");
    let page = text(&viewer.session_html(&id).unwrap());
    assert!(page.contains("replaced: not sent"), "{page}");
    assert!(page.contains("Sent instead"), "{page}");
    assert!(
        page.contains("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
        "{page}"
    );
}
