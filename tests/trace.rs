//! The trace contract (docs/trace-format.md): versioned envelopes, deltas that rebuild every
//! prompt and request, a log linear in the trajectory, the session record (task, run, label),
//! torn lines, and `kill -9` in the middle of a run.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use asap_proxy::trace::read::TraceReader;
use serde_json::{json, Value};

use crate::util::backend::{FakeBackend, Scripted};
use crate::util::cli::{run, Served};
use crate::util::proxy::{serve, serve_with, Proxy};
use crate::util::push_message;
use crate::util::{continue_with, read_records, request, tool_call};

/// Every record of a file through the reader, with the rebuilt prompt and request of each
/// `step`/`side_call` record: `(type, data, prompt, request body)`.
fn rebuilt(path: &Path) -> Vec<(String, Value, String, Value)> {
    let mut reader = TraceReader::open(path).unwrap();
    assert!(reader.invalid_lines().is_empty());
    let mut out = Vec::new();
    while let Some(record) = reader.next_record() {
        let record = record.unwrap();
        out.push((
            record.kind().to_string(),
            record.data(),
            reader.prompt().to_string(),
            reader.request().body(),
        ));
    }
    out
}

#[tokio::test]
async fn deltas_rebuild_every_prompt_and_request_and_the_session_record_names_task_run_label() {
    deltas_rebuild_every_prompt_and_request(None).await;
}

/// The same without the render cache: every prompt is one the cache does not hold, escaped
/// once for the backend body and the record (the first stored whole from those frames).
#[tokio::test]
async fn deltas_rebuild_every_prompt_and_request_without_the_render_cache() {
    deltas_rebuild_every_prompt_and_request(Some(0)).await;
}

async fn deltas_rebuild_every_prompt_and_request(render_cache_mib: Option<usize>) {
    let (backend, proxy) = serve_with(
        vec![
            Scripted::text("Look around first.\n<bash>ls /testbed</bash>\n"),
            // Submit before any edit: nudged, generated again in the same request.
            Scripted::text("Looks fine.\n<submit/>\n"),
            Scripted::text("Then edit.\n<bash>sed -i 's/a/b/' /testbed/inventory.py</bash>\n"),
            Scripted::text("Check it.\n<bash>python -m pytest -q /testbed/tests</bash>\n"),
            Scripted::text("All green.\n<submit/>\n"),
        ],
        |a| {
            a.label = Some("ckpt-100B".into());
            a.render_cache_mib = render_cache_mib;
        },
    )
    .await;
    let headers = [
        ("x-asap-task", "inventory__inventory-1"),
        ("x-asap-run", "5"),
    ];
    let mut body = request("swe-agent-1");
    let mut sent = Vec::new();
    let observations = [
        "inventory.py\ntests\nREADME.md\n".repeat(4),
        String::new(),
        "===== 3 passed in 0.02s =====\n".repeat(3),
    ];
    for observation in &observations {
        sent.push(body.clone());
        let resp = proxy.post_with_headers(&body, &headers).await;
        continue_with(&mut body, &resp, observation);
    }
    sent.push(body.clone());
    let last = proxy.post_with_headers(&body, &headers).await;
    assert_eq!(tool_call(&last)["function"]["name"], "submit");

    let files = proxy.trace_files();
    assert_eq!(files.len(), 1);
    let raw = read_records(&files[0]);
    assert!(raw
        .iter()
        .all(|r| r["v"] == 1 && r["time_ms"].as_u64().unwrap() > 0));
    let session_id = files[0].file_stem().unwrap().to_str().unwrap();
    assert!(raw.iter().all(|r| r["session"] == session_id));
    let kinds: Vec<&str> = raw.iter().map(|r| r["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["session", "step", "step", "nudge", "step", "step", "step"]
    );

    let session = &raw[0]["data"];
    assert_eq!(session["instance_id"], "inventory__inventory-1");
    assert_eq!(session["task"], "inventory__inventory-1");
    assert_eq!(session["run"], 5);
    assert_eq!(session["run_source"], "header");
    assert_eq!(session["label"], "ckpt-100B");
    assert_eq!(session["model"], "base-model");
    assert_eq!(session["profile"], "swe-agent");
    assert_eq!(session["format"], "markdown_xml");
    assert_eq!(session["mode"], "proxy");
    assert_eq!(session["prefix_k"], 3);
    assert_eq!(session["config_sha256"].as_str().unwrap().len(), 64);
    assert!(session["task_text"]
        .as_str()
        .unwrap()
        .contains("change request"));

    // Every prompt the backend saw is rebuilt from the deltas, and every request the client
    // sent from the request deltas; only the first prompt is stored whole.
    let prompts = backend.prompts();
    let steps: Vec<_> = rebuilt(&files[0])
        .into_iter()
        .filter(|(kind, ..)| kind == "step")
        .collect();
    assert_eq!(steps.len(), prompts.len());
    for (i, ((_, data, prompt, _), expected)) in steps.iter().zip(&prompts).enumerate() {
        assert_eq!(prompt, expected, "prompt of record {i}");
        assert_eq!(data["prompt"]["bytes"], expected.len());
        if i > 0 {
            assert!(data["prompt"]["prefix_bytes"].as_u64().unwrap() > 0, "{i}");
        }
    }
    // Records 1 and 2 are one request (the nudge's retry stores no request).
    let requests: Vec<&Value> = steps.iter().map(|(_, _, _, r)| r).collect();
    assert_eq!(requests[0], &sent[0]);
    assert_eq!(requests[1], &sent[1]);
    assert_eq!(requests[2], &sent[1]);
    assert!(steps[2].1.get("request").is_none());
    assert_eq!(requests[3], &sent[2]);
    assert_eq!(requests[4], &sent[3]);
    // Observations are stored once: the tool message's content is a reference into the
    // prompt delta.
    let delta = &steps[1].1["request"];
    assert!(delta["messages_from"].as_u64().unwrap() >= 2);
    assert_eq!(delta["content_refs"][0]["len"], observations[0].len());
    assert!(!raw[2]
        .to_string()
        .contains(&"README.md\\ninventory.py".repeat(2)));

    let nudge = &raw[3]["data"];
    assert_eq!(nudge["kind"], "submit_before_edit");
    assert_eq!(nudge["step"], 1);
    assert_eq!(nudge["attempt"], 0);
    assert_eq!(steps[1].1["decision"], "nudge");
    assert_eq!(steps[2].1["decision"], "accept");
    assert_eq!(steps[2].1["attempt"], 1);
}

#[tokio::test]
async fn runs_are_numbered_per_task_and_label_and_the_label_defaults_to_the_model() {
    let (_backend, proxy) = serve(
        (0..3)
            .map(|_| Scripted::text("Look.\n<bash>ls</bash>\n"))
            .collect(),
    )
    .await;
    let body = request("swe-agent-1");
    let mut other = body.clone();
    other["model"] = json!("ckpt-b");
    proxy.post_with_headers(&body, &[]).await;
    proxy.post_with_headers(&body, &[]).await;
    proxy.post_with_headers(&other, &[]).await;
    let mut sessions: Vec<Value> = proxy
        .trace_files()
        .iter()
        .map(|f| read_records(f)[0]["data"].clone())
        .collect();
    sessions.sort_by_key(|s| (s["label"].to_string(), s["run"].as_u64()));
    let got: Vec<(String, u64, String)> = sessions
        .iter()
        .map(|s| {
            (
                s["label"].as_str().unwrap().to_string(),
                s["run"].as_u64().unwrap(),
                s["run_source"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("base-model".to_string(), 0, "order".to_string()),
            ("base-model".to_string(), 1, "order".to_string()),
            ("ckpt-b".to_string(), 0, "order".to_string()),
        ]
    );
    // No explicit id and no prefix matched by fingerprint: the task key hashes the task text.
    let task = sessions[0]["task"].as_str().unwrap();
    assert!(task.starts_with("task-") && task.len() == 17, "{task}");
    assert_eq!(sessions[0]["instance_id"], Value::Null);
    assert_eq!(sessions[1]["task"], task);
}

/// Deterministic observation text of 0.5–4 KiB: listings, source and test output, the
/// shapes SWE-agent sessions are made of.
fn observation(i: usize) -> String {
    let lines = 12 + (i * 37) % 90;
    (0..lines)
        .map(|l| match i % 3 {
            0 => format!(
                "-rw-r--r-- 1 root root {:5} Nov 30 09:{:02} module_{i}_{l}.py",
                (l * 131 + i) % 9000,
                l % 60
            ),
            1 => format!("{l:4}     def helper_{i}_{l}(self, value):  return value * {l} + {i}"),
            _ => format!(
                "tests/test_mod_{i}.py::test_case_{l} {}",
                if l % 7 == 0 { "FAILED" } else { "PASSED" }
            ),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A completion: a few sentences of reasoning and one command.
fn completion(i: usize) -> String {
    let thought = format!(
        "The output of step {i} shows the module layout. I should look at the helper that \
         handles value {i} and check whether the boundary case is covered before editing. "
    )
    .repeat(1 + i % 3);
    format!(
        "{thought}\n<bash>grep -n 'helper_{i}' -r /testbed/src | head -{}</bash>\n",
        5 + i
    )
}

#[tokio::test]
async fn a_100_step_log_is_less_than_twice_its_completions_and_observations() {
    let steps = 100;
    let backend =
        FakeBackend::start((0..steps).map(|i| Scripted::text(&completion(i))).collect()).await;
    let proxy = Proxy::start_with(&backend.url(), |a| a.max_steps = Some(1000)).await;
    let mut body = request("swe-agent-1");
    let mut payload = 0;
    for i in 0..steps {
        let (status, resp) = proxy.post(&body).await;
        assert_eq!(status, 200);
        assert_eq!(tool_call(&resp)["function"]["name"], "bash", "step {i}");
        let obs = observation(i);
        payload += completion(i).len() + obs.len();
        continue_with(&mut body, &resp, &obs);
    }
    let file = &proxy.trace_files()[0];
    let size = std::fs::metadata(file).unwrap().len() as usize;
    let ratio = size as f64 / payload as f64;
    eprintln!("100-step log: {size} bytes for {payload} bytes of payload ({ratio:.2}x)");
    assert!(
        ratio < 2.0,
        "log {size} bytes for {payload} bytes of completions and observations ({ratio:.2}x)"
    );
    // And it still rebuilds the last prompt exactly.
    let last = rebuilt(file).pop().unwrap();
    assert_eq!(last.2, backend.prompts()[steps - 1]);
}

#[tokio::test]
async fn a_torn_last_line_is_skipped_and_a_restarted_proxy_starts_a_new_line() {
    let backend = FakeBackend::start(vec![
        Scripted::text("Look.\n<bash>ls</bash>\n"),
        Scripted::text("Again.\n<bash>ls -la</bash>\n"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().to_path_buf();
    let first = Proxy::start_with(&backend.url(), |a| a.log_dir = Some(log_dir.clone())).await;
    let mut body = request("swe-agent-1");
    let (_, resp) = first.post(&body).await;
    continue_with(&mut body, &resp, "inventory.py\n");
    let file = std::fs::read_dir(&log_dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    // A crash in the middle of a write.
    let mut bytes = std::fs::read(&file).unwrap();
    bytes.extend_from_slice(br#"{"v":1,"type":"step","session":"x","data":{"step":1,"#);
    std::fs::write(&file, &bytes).unwrap();
    let reader = TraceReader::open(&file).unwrap();
    assert!(reader.torn_tail());
    assert!(reader.invalid_lines().is_empty());

    // A new process continues the session in the same file, on a line of its own.
    let second = Proxy::start_with(&backend.url(), |a| a.log_dir = Some(log_dir.clone())).await;
    let (status, _) = second.post(&body).await;
    assert_eq!(status, 200);
    let mut reader = TraceReader::open(&file).unwrap();
    assert!(!reader.torn_tail());
    assert_eq!(
        reader.invalid_lines().len(),
        1,
        "the torn line, now mid-file"
    );
    let mut steps = 0;
    while let Some(record) = reader.next_record() {
        let record = record.unwrap();
        if record.kind() == "step" {
            steps += 1;
            assert_eq!(reader.prompt(), backend.prompts()[steps - 1]);
        }
    }
    assert_eq!(steps, 2);
}

#[tokio::test]
async fn kill_9_during_a_run_loses_only_the_records_in_flight() {
    let sessions = 12;
    let mut script: Vec<Scripted> = (0..sessions)
        .map(|i| Scripted::text(&format!("Look {i}.\n<bash>ls /testbed/{i}</bash>\n")))
        .collect();
    script.extend((0..sessions).map(|i| Scripted::Slow {
        delay: Duration::from_secs(30),
        text: format!("Slow {i}.\n<bash>cat /testbed/{i}</bash>\n"),
    }));
    let backend = FakeBackend::start(script).await;
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let mut served = Served::start(
        &[
            "--backend",
            &backend.url(),
            "--log-dir",
            logs.to_str().unwrap(),
        ],
        &[],
    );
    let url = format!("{}/chat/completions", served.base);
    // First turns complete (their records must survive) ...
    let mut bodies = Vec::new();
    for i in 0..sessions {
        let mut body = request("swe-agent-1");
        let run = i.to_string();
        let resp =
            crate::util::post_with_headers(&url, &body, &[("x-asap-run", run.as_str())]).await;
        continue_with(&mut body, &resp, &format!("output {i}\n"));
        bodies.push(body);
    }
    // ... second turns are in flight at the backend when the proxy is killed.
    let client = reqwest::Client::new();
    let in_flight: Vec<_> = bodies
        .into_iter()
        .map(|body| {
            let request = client.post(&url).json(&body);
            tokio::spawn(async move { request.send().await })
        })
        .collect();
    for _ in 0..100 {
        if backend.calls() == 2 * sessions {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(backend.calls(), 2 * sessions);
    served.child.kill().unwrap(); // SIGKILL
    served.child.wait().unwrap();
    for handle in in_flight {
        assert!(
            handle.await.unwrap().is_err(),
            "no answer from a killed proxy"
        );
    }

    let files: Vec<_> = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), sessions);
    let mut runs = Vec::new();
    for file in &files {
        let kinds: Vec<(String, Value)> = rebuilt(file)
            .into_iter()
            .map(|(kind, data, ..)| (kind, data))
            .collect();
        assert_eq!(kinds.len(), 2, "{file:?}: session + the completed step");
        assert_eq!(kinds[0].0, "session");
        assert_eq!(kinds[1].0, "step");
        assert_eq!(kinds[1].1["step"], 0);
        runs.push(kinds[0].1["run"].as_u64().unwrap());
    }
    runs.sort_unstable();
    assert_eq!(runs, (0..sessions as u64).collect::<Vec<_>>());

    // What survived is readable by the tools: replay finds nothing changed, report counts
    // every session.
    let replay = run(&[&"replay", &"--check", &logs]);
    assert!(replay.success(), "{}", replay.stdout);
    let report = run(&[&"report", &"--format", &"json", &logs]);
    assert!(report.success(), "{}", report.stderr);
    let json = report.json();
    assert!(
        json.to_string().contains(&format!("\"runs\":{sessions}")),
        "{json}"
    );
}

#[tokio::test]
async fn a_recorded_session_loads_as_a_report_trajectory() {
    use asap_proxy::profile::Action;
    use asap_proxy::report::load;
    use asap_proxy::session::NudgeKind;

    let backend = FakeBackend::start(vec![
        Scripted::text("Look around first.\n<bash>ls /testbed</bash>\n"),
        Scripted::text("Not sure what to write."),
        Scripted::text("Edit.\n<bash>sed -i 's/a/b/' /testbed/inventory.py</bash>\n"),
        Scripted::text("Again.\n<bash>sed -i 's/a/b/' /testbed/inventory.py</bash>\n"),
        Scripted::text("Test.\n<bash>python -m pytest -q</bash>\n"),
    ])
    .await;
    let proxy = Proxy::start(&backend.url()).await;
    let headers = [
        ("x-asap-task", "inventory__inventory-1"),
        ("x-asap-run", "2"),
    ];
    let mut body = request("swe-agent-1");
    let resp = proxy.post_with_headers(&body, &headers).await;
    continue_with(&mut body, &resp, "inventory.py\ntests\n");
    // An unparsable turn: content, no tool call; SWE-agent answers with a format error.
    let resp = proxy.post_with_headers(&body, &headers).await;
    push_message(&mut body, resp["choices"][0]["message"].clone());
    push_message(
        &mut body,
        json!({"role": "user", "content": "Your output could not be parsed."}),
    );
    let resp = proxy.post_with_headers(&body, &headers).await;
    continue_with(&mut body, &resp, "");
    // The repeated edit is nudged; the retry runs the tests.
    let resp = proxy.post_with_headers(&body, &headers).await;
    assert_eq!(
        crate::util::arguments(&resp)["command"],
        "python -m pytest -q"
    );
    continue_with(&mut body, &resp, "1 failed, 2 passed in 0.03s");

    let file = &proxy.trace_files()[0];
    let trajectory = load::trajectory(file).unwrap().unwrap();
    assert_eq!(trajectory.label, "base-model");
    assert_eq!(trajectory.instance_id, "inventory__inventory-1");
    assert_eq!(trajectory.run, Some(2));
    assert_eq!(trajectory.profile, "swe-agent");
    let turns = &trajectory.attempts;
    assert_eq!(turns.len(), 5);
    assert_eq!(
        turns
            .iter()
            .map(|t| (t.step, t.attempt))
            .collect::<Vec<_>>(),
        [(0, 0), (1, 0), (1, 0), (2, 0), (2, 1)]
    );
    assert_eq!(turns[0].shell_command.as_deref(), Some("ls /testbed"));
    assert_eq!(
        turns[0].observation.as_deref(),
        Some("inventory.py\ntests\n")
    );
    assert!(!turns[0].is_edit);
    assert_eq!(turns[1].parse_error.as_deref(), Some("no_action"));
    assert!(turns[2].is_edit);
    assert_eq!(turns[3].nudge, Some(NudgeKind::RepeatedAction));
    assert!(
        turns[3].observation.is_none(),
        "a rejected action has no observation"
    );
    assert!(matches!(turns[4].action, Some(Action::Call { .. })));
    assert_eq!(turns[4].nudge, None);
    // The last action's result is not in the trace: no request followed it.
    assert_eq!(turns[4].observation, None);
    assert_eq!(trajectory.termination, None);
    assert_eq!(trajectory.error, None);
}

#[tokio::test]
async fn a_scaffold_rewriting_old_outputs_still_gets_a_linear_log() {
    // SWE-agent's `last_n_observations`: each turn, the output five steps back is replaced by a
    // stub, so every prompt differs from the previous one in the middle.
    let steps = 60;
    let backend =
        FakeBackend::start((0..steps).map(|i| Scripted::text(&completion(i))).collect()).await;
    let proxy = Proxy::start_with(&backend.url(), |a| a.max_steps = Some(1000)).await;
    let mut body = request("swe-agent-1");
    let mut sizes = Vec::new();
    for i in 0..steps {
        let (status, resp) = proxy.post(&body).await;
        assert_eq!(status, 200);
        continue_with(&mut body, &resp, &observation(i));
        let messages = body["messages"].as_array_mut().unwrap();
        let tool_messages: Vec<usize> = (0..messages.len())
            .filter(|&m| messages[m]["role"] == "tool")
            .collect();
        if tool_messages.len() > 5 {
            let old = tool_messages[tool_messages.len() - 6];
            messages[old]["content"] = json!("Old environment output: (lines omitted)");
        }
        if i + 1 == steps / 2 || i + 1 == steps {
            let file = &proxy.trace_files()[0];
            sizes.push(std::fs::metadata(file).unwrap().len() as f64);
        }
    }
    // Linear: twice the steps, about twice the bytes (a quadratic log would quadruple).
    let growth = sizes[1] / sizes[0];
    eprintln!("log growth 30 → 60 steps: {growth:.2}x ({sizes:?})");
    assert!(growth < 2.6, "{sizes:?}");
    // Every prompt is still rebuilt exactly.
    let prompts = backend.prompts();
    let rebuilt_prompts: Vec<String> = rebuilt(&proxy.trace_files()[0])
        .into_iter()
        .filter(|(kind, ..)| kind == "step")
        .map(|(_, _, prompt, _)| prompt)
        .collect();
    assert_eq!(rebuilt_prompts, prompts);
}

/// A step record of a made-up session at `turn`: the prompt and the request grow by one
/// observation and one message per turn.
fn made_up_step(turn: usize) -> (asap_proxy::trace::StepRecord, String, Value) {
    use asap_proxy::trace::{RequestInput, StepRecord};
    let mut prompt = "# Task\n\nFix it.\n\n# Trajectory\n".to_string();
    for i in 0..=turn {
        prompt.push_str(&format!(
            "\n## Thinking\nStep {i}.\n\n<bash>ls {i}</bash>\n\n<observation>\n{}</observation>\n",
            format!("file_{i}.py\n").repeat(300)
        ));
    }
    let messages: Vec<Value> = (0..=turn)
        .map(|i| json!({"role": if i == 0 { "user" } else { "tool" }, "content": format!("message {i}")}))
        .collect();
    let body = json!({"model": "m", "messages": messages});
    let record = StepRecord {
        step: turn,
        profile: "generic".into(),
        full_prompt: std::sync::Arc::new(prompt.clone()),
        input: Some(std::sync::Arc::new(RequestInput {
            body: body.to_string().into(),
            task_text: "Fix it.".into(),
            ..RequestInput::default()
        })),
        ..StepRecord::default()
    };
    (record, prompt, body)
}

/// Begins [`made_up_step`] `turn` of session `id` ([`asap_proxy::trace::TraceWriter::begin`]),
/// its prompt and body pushed to `expected`.
fn begin_step(
    writer: &asap_proxy::trace::TraceWriter,
    id: &asap_proxy::session::SessionId,
    turn: usize,
    expected: &mut Vec<(String, Value)>,
) -> asap_proxy::trace::Pending {
    let (mut record, prompt, body) = made_up_step(turn);
    let full = std::mem::take(&mut record.full_prompt);
    expected.push((prompt, body));
    writer.begin(id, record, &full)
}

/// A writer into a new temporary directory (the first value keeps it) that has begun and
/// committed [`made_up_step`]s 0 to 2 of session `id`, and their prompts and bodies.
async fn three_steps_written(
    id: &str,
) -> (
    tempfile::TempDir,
    asap_proxy::trace::TraceWriter,
    asap_proxy::session::SessionId,
    Vec<(String, Value)>,
) {
    use asap_proxy::trace::{TraceSettings, TraceWriter};
    let dir = tempfile::tempdir().unwrap();
    let writer = TraceWriter::new(TraceSettings {
        dir: dir.path().to_path_buf(),
        ..TraceSettings::default()
    });
    let id = asap_proxy::session::SessionId::from_recorded(id).unwrap();
    let mut expected = Vec::new();
    for turn in 0..3 {
        let pending = begin_step(&writer, &id, turn, &mut expected);
        writer.commit(pending).await;
    }
    (dir, writer, id, expected)
}

/// Writes [`made_up_step`]s `turns` of session `id`, their prompts and bodies pushed to
/// `expected`.
async fn write_steps(
    writer: &asap_proxy::trace::TraceWriter,
    id: &asap_proxy::session::SessionId,
    turns: std::ops::Range<usize>,
    expected: &mut Vec<(String, Value)>,
) {
    for turn in turns {
        let (record, prompt, body) = made_up_step(turn);
        writer.write_record(id, record).await;
        expected.push((prompt, body));
    }
}

/// Reads `path` and checks each `step` record's rebuilt prompt and request against
/// `expected`, in order: the reader after the last record, and the steps read.
fn rebuilt_steps(path: &Path, expected: &[(String, Value)]) -> (TraceReader, usize) {
    let mut reader = TraceReader::open(path).unwrap();
    let mut n = 0;
    while let Some(record) = reader.next_record() {
        if record.unwrap().kind() == "step" {
            assert_eq!(reader.prompt(), expected[n].0, "prompt {n}");
            assert_eq!(reader.request().body(), expected[n].1, "request {n}");
            n += 1;
        }
    }
    (reader, n)
}

/// The writer keeps the delta state of a bounded number of sessions and evicts the least
/// recently written one (the soak run of docs/reliability.md item 8 found it kept the state
/// of every session served, up to 65,536, so RSS grew with every session). An evicted
/// session's next record is a delta against what its file holds (read back once); every
/// prompt and request still rebuilds.
#[tokio::test]
async fn the_writer_keeps_state_of_recent_sessions_only_and_evicted_ones_still_rebuild() {
    use asap_proxy::session::SessionId;
    use asap_proxy::trace::{TraceSettings, TraceWriter};
    let dir = tempfile::tempdir().unwrap();
    let settings = TraceSettings {
        dir: dir.path().to_path_buf(),
        ..TraceSettings::default()
    };
    let writer = TraceWriter::with_cache_capacity(settings, 2);
    let ids: Vec<SessionId> = ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"]
        .iter()
        .map(|s| SessionId::from_recorded(s).unwrap())
        .collect();
    let mut expected: Vec<Vec<(String, Value)>> = vec![Vec::new(); 3];
    // a0 b0 a1 c0 (evicts b, the least recently written) a2 b1 (stored whole; evicts c).
    for who in [0, 1, 0, 2, 0, 1] {
        let (record, prompt, body) = made_up_step(expected[who].len());
        writer.write_record(&ids[who], record).await;
        expected[who].push((prompt, body));
        assert!(writer.cached_sessions() <= 2);
    }
    assert_eq!(writer.cached_sessions(), 2);
    for (who, id) in ids.iter().enumerate() {
        let path = writer.path(id);
        let steps: Vec<Value> = read_records(&path)
            .into_iter()
            .filter(|r| r["type"] == "step")
            .map(|r| r["data"].clone())
            .collect();
        let prefix_bytes: Vec<u64> = steps
            .iter()
            .map(|s| s["prompt"]["prefix_bytes"].as_u64().unwrap())
            .collect();
        let messages_from: Vec<u64> = steps
            .iter()
            .map(|s| s["request"]["messages_from"].as_u64().unwrap())
            .collect();
        match who {
            0 => {
                assert!(
                    prefix_bytes[0] == 0 && prefix_bytes[1] > 0 && prefix_bytes[2] > 0,
                    "a kept: {prefix_bytes:?}"
                );
                assert_eq!(messages_from, [0, 1, 2]);
            }
            1 => {
                assert!(
                    prefix_bytes[0] == 0 && prefix_bytes[1] > 0,
                    "b was evicted: its second record extends its file's: {prefix_bytes:?}"
                );
                assert_eq!(messages_from, [0, 1]);
            }
            _ => assert_eq!(prefix_bytes, [0]),
        }
        assert_eq!(rebuilt_steps(&path, &expected[who]).1, expected[who].len());
    }
}

/// The pipeline takes a record's deltas while the backend generates
/// ([`TraceWriter::begin`]) and writes it afterwards ([`TraceWriter::commit`]). Two requests
/// of one session in flight at once may finish in either order; their records must still
/// land in the order their deltas were taken, and a record dropped without a commit (a step
/// cut short) is written as `aborted`, so the chain behind it stays readable.
#[tokio::test]
async fn begun_records_are_written_in_begin_order_and_a_dropped_one_as_aborted() {
    use asap_proxy::session::SessionId;
    use asap_proxy::trace::{TraceSettings, TraceWriter};
    let dir = tempfile::tempdir().unwrap();
    let writer = TraceWriter::new(TraceSettings {
        dir: dir.path().to_path_buf(),
        ..TraceSettings::default()
    });
    let id = SessionId::from_recorded("dddddddddddd").unwrap();
    let mut expected = Vec::new();
    let mut begin = |turn: usize| {
        let (mut record, prompt, body) = made_up_step(turn);
        let full = std::mem::take(&mut record.full_prompt);
        expected.push((prompt, body));
        writer.begin(&id, record, &full)
    };
    let first = begin(0);
    let second = begin(1);
    let third = begin(2);
    let fourth = begin(3);
    // The second finishes first: nothing may be written before the first.
    writer.commit(second).await;
    assert!(
        !writer.path(&id).exists(),
        "a later record was written before an earlier one"
    );
    writer.commit(first).await;
    drop(third);
    writer.commit(fourth).await;
    let steps: Vec<Value> = read_records(&writer.path(&id))
        .into_iter()
        .filter(|r| r["type"] == "step")
        .map(|r| r["data"].clone())
        .collect();
    let order: Vec<u64> = steps.iter().map(|s| s["step"].as_u64().unwrap()).collect();
    assert_eq!(order, [0, 1, 2, 3]);
    assert_eq!(steps[2]["decision"], "aborted");
    let prefix_bytes: Vec<u64> = steps
        .iter()
        .map(|s| s["prompt"]["prefix_bytes"].as_u64().unwrap())
        .collect();
    assert!(prefix_bytes[1..].iter().all(|&p| p > 0), "{prefix_bytes:?}");
    assert_eq!(rebuilt_steps(&writer.path(&id), &expected).1, 4);
}

/// `--trace-compression zstd`: each record is one zstd frame of `{session}.jsonl.zst`; the
/// reader rebuilds the same prompts and requests as from a plain file. A frame cut short by a
/// crash is cut off at the next process's first write (else every frame after it would be
/// unreadable), and a session begun plain stays plain when compression is turned on.
#[tokio::test]
async fn compressed_trace_files_read_like_plain_ones_and_a_torn_frame_is_cut_off() {
    use asap_proxy::config::TraceCompression;
    use asap_proxy::session::SessionId;
    use asap_proxy::trace::{TraceSettings, TraceWriter};
    let dir = tempfile::tempdir().unwrap();
    let settings = |compression| TraceSettings {
        dir: dir.path().to_path_buf(),
        compression,
        ..TraceSettings::default()
    };
    let id = SessionId::from_recorded("eeeeeeeeeeee").unwrap();
    let writer = TraceWriter::new(settings(TraceCompression::Zstd));
    let mut expected = Vec::new();
    write_steps(&writer, &id, 0..3, &mut expected).await;
    let path = writer.path(&id);
    assert_eq!(path, dir.path().join("eeeeeeeeeeee.jsonl.zst"));
    let bytes = std::fs::read(&path).unwrap();
    assert!(bytes.starts_with(&asap_proxy::trace::read::ZSTD_MAGIC));
    // A crash in the middle of the last record's frame.
    let whole = bytes.clone();
    let torn = b"\x28\xb5\x2f\xfd\x00\x58";
    std::fs::write(&path, [&bytes[..], &torn[..]].concat()).unwrap();
    let (reader, n) = rebuilt_steps(&path, &expected);
    assert_eq!((n, reader.invalid_lines()), (3, &[] as &[usize]));
    assert!(
        reader.torn_tail(),
        "a cut frame is reported as a plain file's torn line is"
    );
    // A frame short of its checksum alone is cut too (readers and writer agree on it).
    let short = dir.path().join("short.jsonl.zst");
    std::fs::write(&short, &bytes[..bytes.len() - 2]).unwrap();
    let (reader, n) = rebuilt_steps(&short, &expected);
    assert_eq!(n, 2);
    assert!(reader.torn_tail());
    std::fs::remove_file(&short).unwrap();
    // A new process (a fresh writer) appends the next record after the whole frames.
    let writer = TraceWriter::new(settings(TraceCompression::Zstd));
    let (record, prompt, body) = made_up_step(3);
    writer.write_record(&id, record).await;
    expected.push((prompt, body));
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(
        &bytes[..whole.len()],
        &whole[..],
        "the whole frames stay as written"
    );
    assert!(
        !bytes.windows(torn.len()).any(|w| w == torn),
        "the torn frame stayed"
    );
    let (reader, n) = rebuilt_steps(&path, &expected);
    assert_eq!(n, 4);
    assert!(reader.session().is_some());
    assert!(!reader.torn_tail());
    assert_eq!(
        asap_proxy::trace::read::first_line(&path)
            .map(|l| l.starts_with(b"{\"v\":1,\"type\":\"session\"")),
        Some(true)
    );
    // A plain file of another session keeps its form under a compressing writer.
    let plain = SessionId::from_recorded("ffffffffffff").unwrap();
    let (record, _, _) = made_up_step(0);
    TraceWriter::new(settings(TraceCompression::None))
        .write_record(&plain, record)
        .await;
    let (record, _, _) = made_up_step(1);
    writer.write_record(&plain, record).await;
    assert_eq!(writer.path(&plain), dir.path().join("ffffffffffff.jsonl"));
    assert!(!dir.path().join("ffffffffffff.jsonl.zst").exists());
    assert_eq!(read_records(&writer.path(&plain)).len(), 3);
    let files = asap_proxy::trace::read::trace_files(&[dir.path().to_path_buf()]).unwrap();
    let stems: Vec<&str> = files
        .iter()
        .map(|p| asap_proxy::trace::read::trace_stem(p))
        .collect();
    assert_eq!(stems, ["eeeeeeeeeeee", "ffffffffffff"]);
}

/// A record cut short in the middle of a compressed file (a failed write, then more records
/// from the same process) costs that record only, as a torn line does in a plain file: the
/// readers skip the damaged frame (listed as an invalid line) and read every record after
/// it, and the next process's first write cuts nothing that decodes (found by a break-it
/// review: a torn frame's header claimed the good frames after it).
#[tokio::test]
async fn a_damaged_frame_in_the_middle_of_a_compressed_file_costs_one_record() {
    use asap_proxy::config::TraceCompression;
    use asap_proxy::session::SessionId;
    use asap_proxy::trace::{TraceSettings, TraceWriter};
    let dir = tempfile::tempdir().unwrap();
    let settings = || TraceSettings {
        dir: dir.path().to_path_buf(),
        compression: TraceCompression::Zstd,
        ..TraceSettings::default()
    };
    let id = SessionId::from_recorded("dadadadadada").unwrap();
    let writer = TraceWriter::new(settings());
    let mut expected = Vec::new();
    write_steps(&writer, &id, 0..3, &mut expected).await;
    let path = writer.path(&id);
    let bytes = std::fs::read(&path).unwrap();
    // The start of a real frame (its header claims more bytes than follow it).
    let fragment = bytes[..30].to_vec();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(&fragment)
        .unwrap();
    write_steps(&writer, &id, 3..5, &mut expected).await;
    let steps = |path: &Path, expected: &[(String, Value)]| {
        let (reader, n) = rebuilt_steps(path, expected);
        (n, reader.invalid_lines().len())
    };
    assert_eq!(steps(&path, &expected), (5, 1));
    let len = std::fs::metadata(&path).unwrap().len();
    let restarted = TraceWriter::new(settings());
    let (record, prompt, body) = made_up_step(5);
    restarted.write_record(&id, record).await;
    expected.push((prompt, body));
    assert!(
        std::fs::metadata(&path).unwrap().len() > len,
        "nothing was cut"
    );
    assert_eq!(steps(&path, &expected), (6, 1));
}

/// A new process (or a writer whose memory of the session was evicted) continuing a session
/// whose file exists stores its first record as a delta against the file's last records, not
/// whole: a restart in the middle of a 100-turn run costs one turn's bytes, not the history's.
/// Observations referenced into the prompt, headers and the other fields rebuild as sent.
#[tokio::test]
async fn a_restarted_writer_extends_the_files_records_instead_of_storing_whole() {
    use asap_proxy::session::SessionId;
    use asap_proxy::trace::{RequestInput, TraceSettings, TraceWriter};
    let dir = tempfile::tempdir().unwrap();
    let settings = || TraceSettings {
        dir: dir.path().to_path_buf(),
        ..TraceSettings::default()
    };
    let id = SessionId::from_recorded("abcabcabcabc").unwrap();
    // Long contents that appear in the prompt (stored as references into it).
    let step = |turn: usize| {
        let (mut record, prompt, _) = made_up_step(turn);
        let messages: Vec<Value> = (0..=turn)
            .map(|i| json!({"role": if i == 0 { "user" } else { "tool" }, "content": format!("file_{i}.py\n").repeat(300)}))
            .collect();
        let body = json!({"model": "m", "temperature": 0.5, "messages": messages});
        record.input = Some(std::sync::Arc::new(RequestInput {
            body: body.to_string().into(),
            task_text: "Fix it.".into(),
            task_header: Some("t-1".into()),
            ..RequestInput::default()
        }));
        (record, prompt, body)
    };
    let mut expected = Vec::new();
    let writer = TraceWriter::new(settings());
    for turn in 0..3 {
        let (record, prompt, body) = step(turn);
        writer.write_record(&id, record).await;
        expected.push((prompt, body));
    }
    let before = std::fs::metadata(writer.path(&id)).unwrap().len();
    let restarted = TraceWriter::new(settings());
    let (record, prompt, body) = step(3);
    restarted.write_record(&id, record).await;
    expected.push((prompt.clone(), body));
    let added = std::fs::metadata(writer.path(&id)).unwrap().len() - before;
    let records = read_records(&writer.path(&id));
    let last = &records.last().unwrap()["data"];
    let previous_prompt = &expected[2].0;
    assert_eq!(last["prompt"]["prefix_bytes"], previous_prompt.len());
    assert_eq!(last["request"]["messages_from"], 3);
    assert!(last["request"].get("rest").is_none() && last["request"].get("headers").is_none());
    assert!(
        (added as usize) < prompt.len() - previous_prompt.len() + 4096,
        "the restarted record took {added} bytes for a {}-byte turn",
        prompt.len() - previous_prompt.len()
    );
    let (reader, n) = rebuilt_steps(&writer.path(&id), &expected);
    assert_eq!(n, 4);
    assert_eq!(reader.request().header("x-asap-task"), Some("t-1"));
}

/// A restarted process's first prompt of a session, held as the escaped frames its backend
/// body sent (a prompt the render cache does not hold, as after every restart): the record
/// is rebased on the file's chain as a prompt held as text is, and a new session's first
/// record stores it whole from the frames. Both rebuild as sent.
#[tokio::test]
async fn a_prompt_held_escaped_is_rebased_after_a_restart_and_stored_whole_in_a_new_file() {
    use asap_proxy::session::SessionId;
    use asap_proxy::trace::{TraceSettings, TraceWriter};
    use asap_proxy::util::JsonFrames;
    let dir = tempfile::tempdir().unwrap();
    let settings = || TraceSettings {
        dir: dir.path().to_path_buf(),
        ..TraceSettings::default()
    };
    let begin_escaped = |writer: &TraceWriter, id: &SessionId, turn: usize| {
        let (mut record, prompt, body) = made_up_step(turn);
        let full = std::mem::take(&mut record.full_prompt);
        let frames = std::sync::Arc::new(JsonFrames::of(full.as_bytes(), b""));
        (
            writer.begin_from(id, record, &full, None, Some(&frames)),
            (prompt, body),
        )
    };
    let id = SessionId::from_recorded("cdecdecdecde").unwrap();
    let mut expected = Vec::new();
    write_steps(&TraceWriter::new(settings()), &id, 0..3, &mut expected).await;
    let restarted = TraceWriter::new(settings());
    let (pending, sent) = begin_escaped(&restarted, &id, 3);
    restarted.commit(pending).await;
    expected.push(sent);
    let records = read_records(&restarted.path(&id));
    let last = &records.last().unwrap()["data"];
    assert_eq!(last["prompt"]["prefix_bytes"], expected[2].0.len());
    assert_eq!(rebuilt_steps(&restarted.path(&id), &expected).1, 4);

    let fresh = SessionId::from_recorded("defdefdefdef").unwrap();
    let (pending, sent) = begin_escaped(&restarted, &fresh, 0);
    restarted.commit(pending).await;
    let records = read_records(&restarted.path(&fresh));
    let first = &records[1]["data"];
    assert_eq!(first["prompt"]["prefix_bytes"], 0);
    assert_eq!(first["prompt"]["delta"], sent.0.as_str());
    assert_eq!(rebuilt_steps(&restarted.path(&fresh), &[sent]).1, 1);
}

/// After a restart, the first record a process writes for a session may be a side call (an
/// OpenHands condenser, a Terminus-2 summary): side calls store their prompt whole and are
/// outside the prompt chain, so the step after it must still extend the file's last step
/// prompt rather than store its own whole.
#[tokio::test]
async fn a_restarted_writers_first_side_call_leaves_the_next_step_a_delta() {
    use asap_proxy::session::SessionId;
    use asap_proxy::side_call::SideCallKind;
    use asap_proxy::trace::{TraceSettings, TraceWriter};
    let dir = tempfile::tempdir().unwrap();
    let settings = || TraceSettings {
        dir: dir.path().to_path_buf(),
        ..TraceSettings::default()
    };
    let id = SessionId::from_recorded("bcdbcdbcdbcd").unwrap();
    let mut expected = Vec::new();
    write_steps(&TraceWriter::new(settings()), &id, 0..3, &mut expected).await;
    let restarted = TraceWriter::new(settings());
    let (mut side, _, _) = made_up_step(2);
    side.kind = Some(SideCallKind::OpenhandsCondenser);
    side.full_prompt = std::sync::Arc::new("Summarise the events so far.\n".repeat(40));
    restarted.write_record(&id, side).await;
    let (record, prompt, body) = made_up_step(3);
    restarted.write_record(&id, record).await;
    expected.push((prompt, body));
    let records = read_records(&restarted.path(&id));
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["session", "step", "step", "step", "side_call", "step"]
    );
    let last = &records.last().unwrap()["data"];
    assert_eq!(last["prompt"]["prefix_bytes"], expected[2].0.len());
    assert_eq!(rebuilt_steps(&restarted.path(&id), &expected).1, 4);
}

/// A session's file deleted under a running proxy: the next record starts a new file with the
/// session record and its prompt and request stored whole (the writer appends to a file it
/// wrote without checking the directory, the file's existence and its form again, so this
/// checks that it still notices the file gone), also when the file goes while a record is in
/// flight.
#[tokio::test]
async fn a_session_file_deleted_between_or_during_records_starts_a_new_file() {
    let (_dir, writer, id, mut expected) = three_steps_written("cccccccccccc").await;
    let begin =
        |turn: usize, expected: &mut Vec<(String, Value)>| begin_step(&writer, &id, turn, expected);
    let path = writer.path(&id);
    let kinds = |path: &Path| -> Vec<String> {
        read_records(path)
            .iter()
            .map(|r| r["type"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(kinds(&path), ["session", "step", "step", "step"]);
    // Between records: the next one is stored whole in a new file, and the one after it is
    // a delta again.
    std::fs::remove_file(&path).unwrap();
    for turn in 3..5 {
        let pending = begin(turn, &mut expected);
        writer.commit(pending).await;
    }
    assert_eq!(kinds(&path), ["session", "step", "step"]);
    let steps = read_records(&path);
    assert_eq!(steps[1]["data"]["prompt"]["prefix_bytes"], 0);
    assert!(steps[2]["data"]["prompt"]["prefix_bytes"].as_u64().unwrap() > 0);
    assert_eq!(rebuilt_steps(&path, &expected[3..]).1, 2);
    // While a record is in flight: its file is begun again with the session record. That
    // record's deltas rest on the deleted file, so it is kept without its prompt and request;
    // the next one is read against the new file and rebuilds.
    let pending = begin(5, &mut expected);
    std::fs::remove_file(&path).unwrap();
    writer.commit(pending).await;
    assert_eq!(kinds(&path), ["session", "step"]);
    let pending = begin(6, &mut expected);
    writer.commit(pending).await;
    let records = read_records(&path);
    assert_eq!(kinds(&path), ["session", "step", "step"]);
    assert_eq!(records[1]["data"]["step"], 5);
    assert!(records[1]["data"].get("prompt").is_none_or(Value::is_null));
    assert!(records[1]["data"].get("request").is_none_or(Value::is_null));
    let mut reader = TraceReader::open(&path).unwrap();
    let mut rebuilt = Vec::new();
    while let Some(record) = reader.next_record() {
        if record.unwrap().kind() == "step" {
            rebuilt.push(reader.prompt().to_string());
        }
    }
    assert_eq!(rebuilt, ["", expected[6].0.as_str()]);
    // `report` reads the new file (it refuses a file with a record that does not rebuild).
    assert!(asap_proxy::report::load::trajectory(&path).is_ok_and(|t| t.is_some()));
}

/// A record whose write fails (the file replaced by a directory for one turn, as a full disk
/// or a file made unwritable would fail it) is lost alone: the next record is read against
/// what the file holds, not taken as a delta against the lost one.
#[tokio::test]
async fn a_failed_trace_write_loses_only_its_own_record() {
    let (_dir, writer, id, mut expected) = three_steps_written("efaefaefaefa").await;
    let begin =
        |turn: usize, expected: &mut Vec<(String, Value)>| begin_step(&writer, &id, turn, expected);
    let path = writer.path(&id);
    let kept = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    let pending = begin(3, &mut expected);
    writer.commit(pending).await;
    std::fs::remove_dir(&path).unwrap();
    std::fs::write(&path, &kept).unwrap();
    let pending = begin(4, &mut expected);
    writer.commit(pending).await;
    let records = read_records(&path);
    let steps: Vec<u64> = records
        .iter()
        .filter(|r| r["type"] == "step")
        .map(|r| r["data"]["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [0, 1, 2, 4]);
    let last = &records.last().unwrap()["data"];
    assert_eq!(last["prompt"]["prefix_bytes"], expected[2].0.len());
    expected.remove(3);
    assert_eq!(rebuilt_steps(&path, &expected).1, 4);
}
