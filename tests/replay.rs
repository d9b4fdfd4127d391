//! `asap-proxy replay` (re-render and re-parse recorded steps) and the replay backend
//! (`serve --backend replay:DIR`), on a multi-turn SWE-agent session recorded through the
//! proxy against the fake backend: a submit-before-edit nudge (two completion calls in one
//! request); a repeated action nudged, then an unparsable output in the same request (that
//! turn has no tool call, so its nudge lives in the session index only) and SWE-agent's
//! requery; an edit; the final submit. Also: a long session whose old observations the proxy
//! elided to fit the context window, input that is not a trace, and many files at once.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::backend::slow;
use crate::util::backend::{FakeBackend, Scripted};
use crate::util::cli::{command, path_str, run, Ran};
use crate::util::proxy::{serve, Proxy};
use crate::util::{continue_with, read_trace, request};

/// What the "model" writes, one completion call each.
fn script() -> Vec<Scripted> {
    vec![
        Scripted::text("Looks fine already.\n<submit/>\n"),
        Scripted::text("Let me look first.\n<bash>ls</bash>\n"),
        Scripted::text("List again.\n<bash>ls</bash>\n"),
        Scripted::text("I am not sure what to do next, maybe the price."),
        Scripted::text("Read the module.\n<bash>cat inventory.py</bash>\n"),
        Scripted::text(
            "Fix the total.\n<str_replace_editor>\n<command>str_replace</command>\n\
             <path>/testbed/inventory.py</path>\n<old_str>l.quantity</old_str>\n\
             <new_str>l.quantity * l.unit_price</new_str>\n</str_replace_editor>\n",
        ),
        Scripted::text("Done.\n<submit/>\n"),
    ]
}

/// Tool outputs the scaffold sends back, one per tool call.
const OUTPUTS: [&str; 4] = [
    "inventory.py\ntest_inventory.py",
    "class Inventory:\n    def total(self):\n        return sum(l.quantity for l in self.lines)",
    "The file /testbed/inventory.py has been edited.",
    "",
];

/// Plays SWE-agent against `proxy`: tool results for tool calls, its format-error requery for
/// a reply without one; stops after the submit. Returns every response (status, body).
async fn drive(proxy: &Proxy, outputs: &[&str]) -> Vec<(u16, Value)> {
    let mut body = request("swe-agent-1");
    let mut responses = Vec::new();
    let mut outputs = outputs.iter();
    for _ in 0..8 {
        let (status, resp) = proxy.post(&body).await;
        responses.push((status, resp.clone()));
        if status != 200 {
            break;
        }
        let message = &resp["choices"][0]["message"];
        match message["tool_calls"][0]["function"]["name"].as_str() {
            Some("submit") => break,
            Some(_) => continue_with(&mut body, &resp, outputs.next().unwrap()),
            None => {
                let messages = body["messages"].as_array_mut().unwrap();
                messages.push(message.clone());
                messages.push(json!({"role": "user", "content": "Your last output did not use any tool calls!"}));
            }
        }
    }
    responses
}

/// Tool name, parsed arguments and content of each response: what must not change.
fn calls(responses: &[(u16, Value)]) -> Vec<(Option<String>, Value, Value)> {
    responses
        .iter()
        .map(|(status, r)| {
            assert_eq!(*status, 200, "{r}");
            let message = &r["choices"][0]["message"];
            let call = &message["tool_calls"][0]["function"];
            (
                call["name"].as_str().map(str::to_string),
                call["arguments"]
                    .as_str()
                    .map_or(Value::Null, |a| serde_json::from_str(a).unwrap()),
                message["content"].clone(),
            )
        })
        .collect()
}

/// Records the session; returns the proxy (its log directory holds the trace) and the calls.
async fn record() -> (Proxy, Vec<(Option<String>, Value, Value)>) {
    let (backend, proxy) = serve(script()).await;
    let responses = drive(&proxy, &OUTPUTS).await;
    assert_eq!(backend.calls(), 7, "every scripted call was made");
    let calls = calls(&responses);
    let names: Vec<Option<&str>> = calls.iter().map(|c| c.0.as_deref()).collect();
    assert_eq!(
        names,
        [
            Some("bash"),
            None,
            Some("bash"),
            Some("str_replace_editor"),
            Some("submit")
        ]
    );
    let files = proxy.trace_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let records = read_trace(&files[0]);
    assert_eq!(records[1]["data"]["nudge"]["kind"], "submit_before_edit");
    assert_eq!(records[3]["data"]["nudge"]["kind"], "repeated_action");
    assert_eq!(records[4]["data"]["parse"]["error"]["class"], "no_action");
    assert_eq!(
        records[5]["data"]["nudges_used"],
        json!([["submit_before_edit", 0], ["repeated_action", 1]]),
        "the requery found the nudge of the turn without a tool call"
    );
    (proxy, calls)
}

fn replay(args: &[&str]) -> (i32, String, String) {
    let mut all: Vec<&dyn AsRef<OsStr>> = vec![&"replay"];
    all.extend(args.iter().map(|a| a as &dyn AsRef<OsStr>));
    let out = run(&all);
    (out.code.unwrap(), out.stdout, out.stderr)
}

#[tokio::test]
async fn replay_check_passes_on_a_recording_and_fails_after_a_template_change() {
    let (proxy, _) = record().await;
    let logs = path_str(proxy.log_dir.path());

    // (a) The current code renders and parses every recorded step identically.
    let (code, out, err) = replay(&["--check", "--verbose", logs]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.ends_with(
            "files 1  steps 7  prompt differences 0  parse differences 0  unreadable 0\n"
        ),
        "{out}"
    );
    assert_eq!(out.matches(": same (prompt ").count(), 7, "{out}");
    assert!(out.contains("step 0 attempt 1: same"), "{out}");

    // A verbatim copy of the template changes nothing.
    let templates = tempfile::tempdir().unwrap();
    let original = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/markdown_xml.jinja"),
    )
    .unwrap();
    let target = templates.path().join("markdown_xml.jinja");
    std::fs::write(&target, &original).unwrap();
    let (code, out, err) = replay(&["--check", "--templates", path_str(templates.path()), logs]);
    assert_eq!(code, 0, "{out}\n{err}");

    // (b) One changed word in the template: every prompt differs, --check fails and names
    // the steps, the first differing byte and both sides.
    let changed = original.replace("Finish with <submit/>.", "End with <submit/>.");
    assert_ne!(changed, original);
    std::fs::write(&target, changed).unwrap();
    let (code, out, err) = replay(&["--check", "--templates", path_str(templates.path()), logs]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains("prompt differences 7  parse differences 0  unreadable 0"),
        "{out}"
    );
    let first = out.lines().next().unwrap();
    assert!(
        first.contains(".jsonl:2 step 0 attempt 0: prompt differs at byte "),
        "{first}"
    );
    assert!(
        first.contains("Finish with") && first.contains("End with"),
        "{first}"
    );
    assert!(out.contains("step 0 attempt 1: prompt differs"), "{out}");
    assert!(err.contains("difference"), "{err}");
    // Without --check the report is the same and the exit status 0.
    let (code, _, _) = replay(&["--templates", path_str(templates.path()), logs]);
    assert_eq!(code, 0);
}

#[tokio::test]
async fn replay_reports_parse_differences_and_unreadable_input() {
    let (proxy, _) = record().await;
    let file = &proxy.trace_files()[0];
    // What the parser of today makes of a changed completion differs from what was recorded.
    let tampered = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(file).unwrap();
    let text = text.replacen(
        "<bash>cat inventory.py</bash>",
        "<bash>cat setup.py</bash>",
        1,
    ) + "{\"v\": 1, \"type\": \"st"; // and a crash cut the last write short
    let copy = tampered.path().join(file.file_name().unwrap());
    std::fs::write(&copy, text).unwrap();
    let (code, out, _) = replay(&["--check", path_str(&copy)]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("prompt differences 0  parse differences 1  unreadable 0"),
        "{out}"
    );
    assert!(out.contains("note: torn last line skipped"), "{out}");
    assert!(
        out.contains("step 1 attempt 0: parse differs: recorded {")
            && out.contains("cat inventory.py")
            && out.contains("cat setup.py"),
        "{out}"
    );

    // A file that is not a trace is skipped with a note (exit 0 without --check).
    std::fs::write(tampered.path().join("junk.jsonl"), "not json\n").unwrap();
    let (code, out, _) = replay(&[path_str(tampered.path())]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("junk.jsonl: note: not a trace (no session record), skipped"),
        "{out}"
    );
    assert!(out.contains("files 2  steps 7 "), "{out}");

    // A record whose delta does not apply is unreadable: exit 2, with or without --check.
    let broken = tempfile::tempdir().unwrap();
    let bad_step = json!({"v": 1, "type": "step", "session": "x", "time_ms": 0, "data": {
        "step": 9, "attempt": 0,
        "prompt": {"prefix_bytes": 999_999, "delta": "", "sha256": "00", "bytes": 999_999}}});
    std::fs::write(
        broken.path().join(file.file_name().unwrap()),
        std::fs::read_to_string(file).unwrap() + &bad_step.to_string() + "\n",
    )
    .unwrap();
    for args in [vec![], vec!["--check"]] {
        let (code, out, _) = replay(&[args, vec![path_str(broken.path())]].concat());
        assert_eq!(code, 2, "{out}");
        assert!(
            out.contains("prompt differences 0  parse differences 0  unreadable 1"),
            "{out}"
        );
        assert!(
            out.contains("unreadable: ") && out.contains("keeps 999999 bytes of a shorter prompt"),
            "{out}"
        );
    }
}

/// `replay ARGS`, killed (and failed) if it runs longer than `limit`.
fn replay_within(args: &[&str], limit: Duration) -> (i32, String, String) {
    let mut child = command()
        .arg("replay")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            child.kill().unwrap();
            panic!("replay {args:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = Ran::from(child.wait_with_output().unwrap());
    (out.code.unwrap(), out.stdout, out.stderr)
}

#[tokio::test]
async fn replay_skips_what_is_not_a_trace_and_survives_a_link_loop() {
    let (proxy, _) = record().await;
    let file = &proxy.trace_files()[0];
    let name = file.file_name().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let dir = logs.path();
    std::fs::copy(file, dir.join(name)).unwrap();
    // A crash cut a write short, the proxy restarted and went on: a torn line in the middle.
    let text = std::fs::read_to_string(file).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(4, "{\"v\": 1, \"type\": \"step\", \"session\": \"0123");
    std::fs::create_dir(dir.join("crashed")).unwrap();
    std::fs::write(dir.join("crashed").join(name), lines.join("\n") + "\n").unwrap();
    // Stray files that are not traces.
    std::fs::write(dir.join("stray.jsonl"), "{\"foo\": 1}\n").unwrap();
    std::fs::write(dir.join("empty.jsonl"), "").unwrap();
    // A link back to the directory itself.
    #[cfg(unix)]
    std::os::unix::fs::symlink(".", dir.join("loop")).unwrap();

    let (code, out, err) = replay_within(&["--check", path_str(dir)], Duration::from_secs(120));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.ends_with(
            "files 4  steps 14  prompt differences 0  parse differences 0  unreadable 0\n"
        ),
        "{out}"
    );
    for note in [
        "stray.jsonl: note: not a trace (no session record), skipped",
        "empty.jsonl: note: not a trace (no session record), skipped",
        ": note: lines [5] are not records (torn by a crash?), skipped",
    ] {
        assert!(out.contains(note), "{note}\n{out}");
    }

    // A file that cannot be read at all (a dangling link) is unreadable: exit 2.
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(dir.join("missing"), dir.join("gone.jsonl")).unwrap();
        let (code, out, _) = replay_within(&[path_str(dir)], Duration::from_secs(120));
        assert_eq!(code, 2, "{out}");
        assert!(out.contains("gone.jsonl: unreadable: "), "{out}");
        assert!(out.contains("files 5  steps 14 "), "{out}");
        assert!(out.ends_with("unreadable 1\n"), "{out}");
    }
}

#[tokio::test]
async fn replay_reports_many_files_in_file_order() {
    let (proxy, _) = record().await;
    let file = &proxy.trace_files()[0];
    let name = file.file_name().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let copies: Vec<PathBuf> = (0..12)
        .map(|i| {
            let sub = logs.path().join(format!("run-{i:02}"));
            std::fs::create_dir(&sub).unwrap();
            std::fs::copy(file, sub.join(name)).unwrap();
            sub.join(name)
        })
        .collect();
    // A changed template: every step of every file differs, one line each.
    let templates = tempfile::tempdir().unwrap();
    let original = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/markdown_xml.jinja"),
    )
    .unwrap();
    std::fs::write(
        templates.path().join("markdown_xml.jinja"),
        original.replace("Finish with <submit/>.", "End with <submit/>."),
    )
    .unwrap();
    let t = path_str(templates.path());
    let (code, out, err) = replay(&["--templates", t, path_str(logs.path())]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.ends_with(
            "files 12  steps 84  prompt differences 84  parse differences 0  unreadable 0\n"
        ),
        "{out}"
    );
    // Each file's lines together, as replaying it alone prints them, files in sorted order.
    let mut expected = String::new();
    for copy in &copies {
        let (_, alone, _) = replay(&["--templates", t, path_str(copy)]);
        let (lines, _summary) = alone.trim_end().rsplit_once('\n').unwrap();
        assert_eq!(lines.lines().count(), 7, "{alone}");
        expected.push_str(lines);
        expected.push('\n');
    }
    let (lines, _summary) = out.trim_end().rsplit_once('\n').unwrap();
    assert_eq!(format!("{lines}\n"), expected);
    assert_eq!(replay(&["--templates", t, path_str(logs.path())]).1, out);
}

/// A listing of about `bytes` bytes, distinct per `i` (as in tests/context.rs).
fn listing(i: usize, bytes: usize) -> String {
    (0..bytes / 40)
        .map(|l| format!("src/module_{i:02}/file_{l:04}.py    1024 bytes\n"))
        .collect()
}

#[tokio::test]
async fn replay_elides_old_observations_with_the_recorded_cut() {
    const TURNS: usize = 40;
    /// This turn's first output repeats the previous command: nudged, generated again.
    const NUDGED: usize = 32;
    let command = |i: usize| {
        Scripted::text(&format!(
            "Next.\n<bash>ls /testbed/src/module_{i:02}</bash>\n"
        ))
    };
    let mut script = Vec::new();
    for i in 0..TURNS {
        if i == NUDGED {
            script.push(command(i - 1));
        }
        script.push(command(i));
    }
    let backend = FakeBackend::start(script).await;
    // 12,000 tokens of context, `/tokenize` counts one token per 4 bytes: the proxy elides.
    backend.set_context(12_000, true);
    let proxy = Proxy::start(&backend.url()).await;
    let mut body = request("swe-agent-1");
    body["max_tokens"] = json!(500);
    for i in 0..TURNS {
        let (status, resp) = proxy.post(&body).await;
        assert_eq!(status, 200, "turn {i}: {resp}");
        continue_with(&mut body, &resp, &listing(i, 2400));
    }
    let file = proxy.trace_files().pop().unwrap();
    let records = read_trace(&file);
    assert_eq!(records.len(), 1 + TURNS + 1);
    assert_eq!(
        records[1 + NUDGED]["data"]["nudge"]["kind"],
        "repeated_action"
    );
    let cuts: Vec<u64> = records[1..]
        .iter()
        .map(|r| r["data"]["context"]["elided_before_step"].as_u64().unwrap())
        .collect();
    assert!(cuts[NUDGED] >= 10 && cuts[TURNS] >= 20, "{cuts:?}");

    // The recording replays cleanly: the recorded cut is applied before rendering.
    let (code, out, err) = replay(&["--check", path_str(&file)]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.ends_with(&format!(
            "files 1  steps {}  prompt differences 0  parse differences 0  unreadable 0\n",
            TURNS + 1
        )),
        "{out}"
    );

    // Tampered cuts: the last step's a block back, the nudged attempt's a block past its
    // first attempt's (the pipeline checks the context again after a nudge, on the
    // conversation already elided; 0 there when it fitted): those two prompts differ.
    let text = std::fs::read_to_string(&file).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let last = lines.len() - 1;
    let nudged = lines
        .iter()
        .position(|l| l.contains("\"type\":\"step\"") && l.contains("\"attempt\":1"))
        .unwrap();
    for (line, cut) in [(nudged, cuts[NUDGED] + 10), (last, cuts[TURNS] - 10)] {
        let mut step: Value = serde_json::from_str(&lines[line]).unwrap();
        step["data"]["context"]["elided_before_step"] = json!(cut);
        lines[line] = step.to_string();
    }
    let tampered = tempfile::tempdir().unwrap();
    let copy = tampered.path().join(file.file_name().unwrap());
    std::fs::write(&copy, lines.join("\n") + "\n").unwrap();
    let (code, out, err) = replay(&["--check", path_str(&copy)]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains("prompt differences 2  parse differences 0  unreadable 0"),
        "{out}"
    );
    let differing: Vec<&str> = out.lines().filter(|l| l.contains(" differs ")).collect();
    assert_eq!(differing.len(), 2, "{out}");
    for (shown, line, attempt) in [(differing[0], nudged, 1), (differing[1], last, 0)] {
        assert!(
            shown.contains(&format!(".jsonl:{} step ", line + 1))
                && shown.contains(&format!("attempt {attempt}: prompt differs at byte "))
                && shown.contains("bytes\\n[… "),
            "{shown}"
        );
    }
}

#[tokio::test]
async fn replay_backend_reruns_the_recorded_session_offline() {
    let (recorded, recorded_calls) = record().await;
    let source = format!("replay:{}", path_str(recorded.log_dir.path()));
    let replayed = Proxy::start(&source).await;

    // (c) The same conversation again: identical tool calls and contents, every turn, with no
    // model server.
    let responses = drive(&replayed, &OUTPUTS).await;
    assert_eq!(calls(&responses), recorded_calls);
    let records = replayed.first_trace();
    assert_eq!(
        records[1]["data"]["nudge"]["kind"], "submit_before_edit",
        "the nudge happened again"
    );
    assert_eq!(records.len(), 1 + 7);
    assert_eq!(records[3]["data"]["nudge"]["kind"], "repeated_action");
    let models: Value = replayed.get_json("/v1/models").await;
    assert_eq!(models["data"][0]["id"], "fake-base", "the recorded model");

    // (d) A prompt nobody recorded: a clear error.
    let mut other = request("swe-agent-1");
    other["messages"][1]["content"] = json!("Fix the tests in /other.");
    let (status, body) = replayed.post(&other).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "replay_miss");
    assert_eq!(body["error"]["type"], "server_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("prompt sha256 ") && message.contains("none of the 7 recorded prompts"),
        "{message}"
    );

    // (e) A changed observation: the prompts differ from then on, and the recorded session's
    // calls are served by session and step order.
    let mut outputs = OUTPUTS;
    outputs[0] = "inventory.py\ntest_inventory.py\nREADME.md";
    let responses = drive(&replayed, &outputs).await;
    assert_eq!(calls(&responses), recorded_calls);

    // The same through the real binary with `replay:FILE`.
    let file = recorded.trace_files()[0].clone();
    let logs = tempfile::tempdir().unwrap();
    let served = crate::util::cli::Served::start(
        &[
            "--backend",
            &format!("replay:{}", path_str(&file)),
            "--log-dir",
            path_str(logs.path()),
        ],
        &[],
    );
    let resp = served.chat(&request("swe-agent-1")).await;
    assert_eq!(
        resp["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "bash",
        "{resp}"
    );
}

#[test]
fn replay_backend_needs_traces() {
    let empty = tempfile::tempdir().unwrap();
    let backend = format!("replay:{}", path_str(empty.path()));
    let out = run(&[
        &"serve",
        &"--listen",
        &"127.0.0.1:0",
        &"--backend",
        &backend,
    ]);
    assert_eq!(out.code, Some(2));
    let err = &out.stderr;
    assert!(err.contains("no recorded completions"), "{err}");
}

#[tokio::test]
async fn template_overrides_apply_to_render_and_serve() {
    let templates = tempfile::tempdir().unwrap();
    let original = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/markdown_xml.jinja"),
    )
    .unwrap();
    let changed = original.replace("Finish with <submit/>.", "End with <submit/>.");
    std::fs::write(templates.path().join("markdown_xml.jinja"), changed).unwrap();
    let request_file = crate::util::fixture_path("requests/swe-agent-1.json");
    let out = run(&[
        &"render",
        &"--request",
        &request_file,
        &"--templates",
        &templates.path(),
    ]);
    assert!(out.success());
    let prompt = out.stdout;
    assert!(prompt.contains("End with <submit/>.") && !prompt.contains("Finish with"));

    let backend = FakeBackend::start(vec![Scripted::text("Look.\n<bash>ls</bash>\n")]).await;
    let dir = templates.path().to_path_buf();
    let proxy = Proxy::start_with(&backend.url(), |a| a.prompt.templates = Some(dir)).await;
    let (status, _) = proxy.post(&request("swe-agent-1")).await;
    assert_eq!(status, 200);
    assert_eq!(
        backend.prompts()[0],
        prompt,
        "serve renders with the override too"
    );

    // A directory without any template, and a template that does not compile: start-up errors.
    let empty = tempfile::tempdir().unwrap();
    for (dir, needle) in [
        (empty.path(), "holds none of"),
        (templates.path(), "syntax"),
    ] {
        if dir == templates.path() {
            std::fs::write(dir.join("markdown_xml.jinja"), "{% if %}").unwrap();
        }
        let out = run(&[&"render", &"--request", &request_file, &"--templates", &dir]);
        assert_eq!(out.code, Some(2));
        let err = &out.stderr;
        assert!(err.contains(needle), "{err}");
    }
}

/// Terminus-2 (a content dialect: no tool call ever, so every turn's session is found through
/// the session index), its confirmation turn (no completion) and a summary side call.
async fn drive_terminus(proxy: &Proxy) -> Vec<Value> {
    let mut body = request("terminus-2-1");
    let mut replies = Vec::new();
    let followups = [
        "New Terminal Output:\n\nroot@box:/app# ",
        "Current terminal state:\nroot@box:/app# \n\nAre you sure you want to mark the task as complete? If so, include \"task_complete\": true in your JSON response again.",
        "You are about to hand off your work to another AI agent.\nPlease provide a comprehensive summary of what you have accomplished so far on this task:",
    ];
    for followup in followups.iter().map(Some).chain([None]) {
        let (status, r) = proxy.post(&body).await;
        assert_eq!(status, 200, "{r}");
        let message = r["choices"][0]["message"].clone();
        replies.push(message["content"].clone());
        let Some(followup) = followup else { break };
        let messages = body["messages"].as_array_mut().unwrap();
        messages.push(json!({"role": "assistant", "content": message["content"]}));
        messages.push(json!({"role": "user", "content": followup}));
    }
    replies
}

#[tokio::test]
async fn content_dialects_confirmations_and_side_calls_replay_cleanly() {
    let backend = FakeBackend::start(vec![
        Scripted::text("Write the file.\n\n<bash>printf 'int main(){}' > /app/hello.c</bash>\n"),
        Scripted::text("It builds now.\n\n<submit/>\n"),
        Scripted::text("I wrote /app/hello.c and it builds."),
    ])
    .await;
    let recorded = Proxy::start(&backend.url()).await;
    let replies = drive_terminus(&recorded).await;
    assert_eq!(backend.calls(), 3, "the confirmation needs no model call");
    let files = recorded.trace_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let records = read_trace(&files[0]);
    assert!(records[3]["data"]["completion"].is_null());
    assert_eq!(records[4]["data"]["side_call"], "terminus_summary");

    let logs = path_str(recorded.log_dir.path());
    let (code, out, err) = replay(&["--check", "--verbose", logs]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.ends_with("steps 4  prompt differences 0  parse differences 0  unreadable 0\n"),
        "{out}"
    );
    assert!(
        out.contains("side_call terminus_summary step 3: same"),
        "{out}"
    );

    let replayed = Proxy::start(&format!("replay:{logs}")).await;
    assert_eq!(drive_terminus(&replayed).await, replies);
}

/// A Terminus-2 history sent to a process that has not seen it (a restart, another replica)
/// opens a session: its record stores the history once. The prompt keeps each terminal output
/// but trims its last prompt line, so each is stored as a run of the prompt with the bytes
/// around it (schema version 2, docs/trace-format.md "Request delta"); `replay --check`
/// rebuilds the request and renders the recorded prompt from it.
#[tokio::test]
async fn a_terminus_history_that_opens_a_session_is_stored_once_and_replays() {
    let backend = FakeBackend::start(vec![Scripted::text("Look.\n\n<bash>ls -l</bash>\n")]).await;
    let proxy = Proxy::start(&backend.url()).await;
    let mut body = request("terminus-2-1");
    let output: String = (0..30)
        .map(|i| format!("-rw-r--r-- 1 root root {i:>4} Dec  4 12:00 file_{i}.c\n"))
        .collect();
    let turns = 6;
    let messages = body["messages"].as_array_mut().unwrap();
    for i in 0..turns {
        let reply = json!({"analysis": format!("Listing the files, pass {i}."),
            "plan": "Run ls -l.", "commands": [{"keystrokes": format!("ls -l # {i}\n"),
            "duration": 1.0}], "task_complete": false});
        messages.push(json!({"role": "assistant",
            "content": serde_json::to_string_pretty(&reply).unwrap()}));
        messages.push(json!({"role": "user", "content": format!(
            "New Terminal Output:\n\nroot@box:/app# ls -l # {i}\n{output}root@box:/app# ")}));
    }
    let (status, r) = proxy.post(&body).await;
    assert_eq!(status, 200, "{r}");
    let refs = opening_stored_once(&proxy, &body, 2, (turns - 1) * output.len());
    let around = refs.iter().filter(|r| r["after"] == " ").count();
    assert_eq!(around, turns, "{refs:?}");
}

/// The content references of the one record a single opening request to `proxy` wrote, after
/// checking that it is schema version `v`, that it is smaller than the body and its prompt
/// less `held_twice` bytes (the outputs the prompt already holds), and that `replay --check`
/// rebuilds it.
fn opening_stored_once(proxy: &Proxy, body: &Value, v: u64, held_twice: usize) -> Vec<Value> {
    let files = proxy.trace_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let step_line = text.lines().nth(1).unwrap();
    let step: Value = serde_json::from_str(step_line).unwrap();
    assert_eq!(step["v"], v, "{step_line}");
    let prompt = step["data"]["prompt"]["delta"].as_str().unwrap();
    let sent = body.to_string().len();
    assert!(
        step_line.len() < sent + prompt.len() - held_twice,
        "{} bytes against {sent} + {}",
        step_line.len(),
        prompt.len()
    );
    let logs = path_str(proxy.log_dir.path());
    let (code, out, err) = replay(&["--check", logs]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.ends_with("steps 1  prompt differences 0  parse differences 0  unreadable 0\n"),
        "{out}"
    );
    step["data"]["request"]["content_refs"]
        .as_array()
        .unwrap()
        .clone()
}

/// A SWE-agent history sent to a process that has not seen it opens a session. SWE-agent sends
/// its tool results as lists of text parts (the last ones with `cache_control`); each part's
/// text is stored as a reference into the prompt (schema version 3, docs/trace-format.md
/// "Request delta"), so the record holds each output once, and `replay --check` rebuilds the
/// request and renders the recorded prompt from it.
#[tokio::test]
async fn a_swe_agent_history_that_opens_a_session_stores_its_tool_results_once() {
    let backend = FakeBackend::start(vec![Scripted::text("Look.\n\n<bash>ls -l</bash>\n")]).await;
    let proxy = Proxy::start(&backend.url()).await;
    let mut body = request("swe-agent-1");
    let output: String = (0..30)
        .map(|i| format!("    {i:>3}\tdef handler_{i}(request):  # \"quoted\" \\ path\n"))
        .collect();
    let turns = 6;
    let messages = body["messages"].as_array_mut().unwrap();
    for i in 0..turns {
        let id = format!("call_{i}f3a9c2e1b7d4");
        messages.push(
            json!({"role": "assistant", "content": format!("Read part {i} of the module."),
            "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash",
            "arguments": json!({"command": format!("cat -n app_{i}.py")}).to_string()}}]}),
        );
        let mut part = json!({"type": "text", "text": format!("{output}# file {i}\n")});
        if i + 2 >= turns {
            part["cache_control"] = json!({"type": "ephemeral"});
        }
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": [part]}));
    }
    let (status, r) = proxy.post(&body).await;
    assert_eq!(status, 200, "{r}");
    let refs = opening_stored_once(&proxy, &body, 3, (turns - 1) * output.len());
    let parts = refs.iter().filter(|r| r["part"] == 0).count();
    assert_eq!(parts, turns, "{refs:?}");
}

/// Two requests of one session in flight at once (a scaffold's retry with a different last
/// observation while the first still runs): the first is nudged for a repeated action, and
/// the second's record is written between the first's nudged attempt and its next one
/// (records land in the order their deltas were taken). `replay --check` ties the next
/// attempt to its own nudge, not to the record just before it (found by a break-it pass:
/// "attempt 1 follows no nudge record").
#[tokio::test]
async fn replay_check_pairs_attempts_with_their_nudge_across_concurrent_requests() {
    let backend = FakeBackend::start(vec![
        Scripted::text("Look.\n<bash>ls</bash>\n"),
        // A: the same action again, slowly → repeated-action nudge.
        slow(Duration::from_millis(800), "Again.\n<bash>ls</bash>\n"),
        // B, while A waits.
        Scripted::text("Read it.\n<bash>cat inventory.py</bash>\n"),
        // A's attempt after the nudge.
        Scripted::text("Something else.\n<bash>pwd</bash>\n"),
    ])
    .await;
    let proxy = Proxy::start(&backend.url()).await;
    let mut body = request("swe-agent-1");
    let (_, first) = proxy.post(&body).await;
    continue_with(&mut body, &first, "inventory.py");
    let mut other = body.clone();
    let last = other["messages"].as_array().unwrap().len() - 1;
    other["messages"][last]["content"] = json!("inventory.py\ntests/");
    let (a, b) = tokio::join!(proxy.post(&body), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        proxy.post(&other).await
    });
    assert_eq!((a.0, b.0), (200, 200));
    assert_eq!(
        a.1["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        "{\"command\":\"pwd\"}"
    );
    let files = proxy.trace_files();
    assert_eq!(files.len(), 1, "one session");
    let order: Vec<(String, u64)> = crate::util::read_records(&files[0])
        .iter()
        .filter(|r| r["type"] == "step" || r["type"] == "nudge")
        .map(|r| {
            (
                r["type"].as_str().unwrap().to_string(),
                r["data"]["attempt"].as_u64().unwrap(),
            )
        })
        .collect();
    let order: Vec<(&str, u64)> = order.iter().map(|(t, a)| (t.as_str(), *a)).collect();
    assert_eq!(
        order,
        [
            ("step", 0),
            ("step", 0),
            ("nudge", 0),
            ("step", 0),
            ("step", 1)
        ],
        "B's record lands between A's nudge and A's next attempt"
    );
    let (code, out, err) = replay(&["--check", path_str(proxy.log_dir.path())]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.ends_with("steps 4  prompt differences 0  parse differences 0  unreadable 0\n"),
        "{out}"
    );
}

/// Traces written by an earlier build stay readable (issue 19: users keep months of runs):
/// the committed traces of schema version 1 as written before the schema was typed for
/// reading (tests/fixtures/traces/v1: nudges and a parse failure, a step-cap termination, a
/// Terminus side call) are read by `report`, `replay --check`, `view` and the replay backend.
#[test]
fn committed_traces_of_today_s_format_stay_readable() {
    let dir = crate::util::fixture_path("traces/v1");
    let dir_str = path_str(&dir);

    let (code, out, err) = replay(&["--check", dir_str]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("files 3  steps 17 "), "{out}");
    assert!(out.ends_with("unreadable 0\n"), "{out}");

    let report = run(&[&"report", &"--format", &"json", &dir_str]);
    assert!(report.success(), "{}", report.stderr);
    let json = report.json();
    let text = json.to_string();
    assert!(text.contains("step_cap"), "{text}");

    let viewer = asap_proxy::view::Viewer::new(vec![dir.clone()], None);
    let list = viewer.sessions();
    assert_eq!(list.sessions.len(), 3, "{:?}", list.skipped);
    for summary in &list.sessions {
        let page = viewer.session(&summary.session).unwrap();
        assert!(page.steps.error.is_none(), "{:?}", page.steps.error);
        assert!(!page.steps.steps.is_empty());
    }
    let capped = list
        .sessions
        .iter()
        .find(|s| s.path.contains("swe-agent-step-cap"))
        .unwrap();
    let page = viewer.session(&capped.session).unwrap();
    let last = page.steps.steps.last().unwrap();
    assert_eq!(last.termination.as_ref().unwrap().reason, "step_cap");
    assert!(page.steps.steps.iter().any(|s| s.nudge.is_some()));

    let backend = asap_proxy::replay::ReplayBackend::load(&dir).unwrap();
    assert_eq!(
        backend.len(),
        16,
        "every call with a completion (the confirmation has none)"
    );
}
