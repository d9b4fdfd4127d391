//! The real binary: flags, environment, config file, exit codes, shutdown, `render`.

use serde_json::{json, Value};

use crate::util::backend::{FakeBackend, Scripted};
use crate::util::{fixture_path, request};

use crate::util::cli::{run, run_with_input, Served};

#[tokio::test]
async fn serve_binary_end_to_end_with_env_and_config_file() {
    let backend = FakeBackend::start(vec![Scripted::text("Look.\n\n<bash>ls</bash>\n")]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("asap.toml");
    std::fs::write(
        &config,
        format!(
            "backend = \"{}\"\nmax_tokens = 50\nlog_dir = \"{}\"\n",
            backend.url(),
            dir.path().join("logs").display()
        ),
    )
    .unwrap();
    // env beats the file, the file beats the default.
    let served = Served::start(
        &["--config", config.to_str().unwrap()],
        &[("ASAP_MAX_TOKENS", "60")],
    );
    let resp = served.chat(&request("swe-agent-1")).await;
    assert_eq!(
        resp["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "bash"
    );
    assert_eq!(backend.requests()[0]["max_tokens"], 60);
    let logs: Vec<_> = std::fs::read_dir(dir.path().join("logs"))
        .unwrap()
        .collect();
    assert_eq!(logs.len(), 1);

    // Error bodies from the real binary are OpenAI-shaped.
    let err = reqwest::Client::new()
        .post(format!("{}/chat/completions", served.base))
        .body("[]")
        .send()
        .await
        .unwrap();
    assert_eq!(err.status(), 400);
    let body: Value = err.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
}

/// `--trace-compression zstd`: the trace is `{session}.jsonl.zst`, and `report`, `replay
/// --check` and the replay backend read it as they read a plain one.
#[tokio::test]
async fn a_compressed_trace_is_read_by_report_replay_and_the_replay_backend() {
    let backend = FakeBackend::start(vec![Scripted::text("Look.\n\n<bash>ls</bash>\n")]).await;
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let served = Served::start(
        &[
            "--backend",
            &backend.url(),
            "--log-dir",
            logs.to_str().unwrap(),
            "--trace-compression",
            "zstd",
        ],
        &[],
    );
    let body = request("swe-agent-1");
    let first = served.chat(&body).await;
    drop(served);
    let files: Vec<String> = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files.len(), 1);
    assert!(files[0].ends_with(".jsonl.zst"), "{files:?}");

    let out = run(&[&"report", &logs, &"--format", &"json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        report["labels"][0]["network"]["trajectories"], 1,
        "{report}"
    );
    assert_eq!(
        report["trajectories"][0]["session"].as_str(),
        files[0].strip_suffix(".jsonl.zst")
    );
    assert_eq!(report["trajectories"][0]["behaviour"]["turns"], 1);

    let viewer = asap_proxy::view::Viewer::new(vec![logs.clone()], None);
    let list = viewer.sessions();
    assert_eq!(list.sessions.len(), 1, "{:?}", list.skipped);
    let id = files[0].strip_suffix(".jsonl.zst").unwrap();
    assert_eq!(viewer.session(id).unwrap().steps.steps.len(), 1);
    assert_eq!(viewer.prompt(id, 0).unwrap(), backend.prompts()[0]);

    let out = run(&[&"replay", &"--check", &logs]);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.ends_with(
            "files 1  steps 1  prompt differences 0  parse differences 0  unreadable 0\n"
        ),
        "{}",
        out.stdout
    );

    let replayed = Served::start(
        &[
            "--backend",
            &format!("replay:{}", logs.display()),
            "--log-dir",
            dir.path().join("again").to_str().unwrap(),
        ],
        &[],
    );
    let again = replayed.chat(&body).await;
    assert_eq!(
        again["choices"][0]["message"]["tool_calls"][0]["function"],
        first["choices"][0]["message"]["tool_calls"][0]["function"]
    );
}

#[test]
fn sigterm_shuts_down_cleanly() {
    let mut served = Served::start(&["--backend", "http://127.0.0.1:9/v1"], &[]);
    served.sigterm();
    let code = served.wait();
    assert!(code.success(), "{code:?}");
}

#[test]
fn config_errors_exit_2_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(&config, "max_tokenz = 5\n").unwrap();
    let out = run(&[&"serve", &"--config", &config]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("max_tokenz"));
    let out = run(&[&"serve", &"--backend", &"localhost:8000"]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("backend"));
    let out = run(&[&"serve", &"--profile", &"nope", &"--listen", &"127.0.0.1:0"]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("unknown profile"));
    let missing = dir.path().join("missing.jsonl");
    let out = run(&[&"serve", &"--tasks", &missing, &"--listen", &"127.0.0.1:0"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("loading tasks") && out.stderr.contains("missing.jsonl"),
        "{}",
        out.stderr
    );
    let wrong = dir.path().join("wrong.jsonl");
    std::fs::write(&wrong, "{\"id\": \"x\"}\n").unwrap();
    let out = run(&[&"serve", &"--tasks", &wrong, &"--listen", &"127.0.0.1:0"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("instance_id"), "{}", out.stderr);
}

#[test]
fn render_prints_the_continuation_document() {
    let path = fixture_path("render/swe_agent_multi_turn.json");
    let out = run(&[&"render", &"--request", &path]);
    assert!(out.success(), "{}", out.stderr);
    let text = out.stdout;
    assert!(text.starts_with("# Task\n"));
    assert!(text.ends_with("</observation>\n\n## Thinking\n"));
    assert!(text.contains("<str_replace_editor>\n<command>view</command>"));

    // From standard input, with a forced profile.
    let generic = run_with_input(
        &[&"render", &"--request", &"-", &"--profile", &"generic"],
        &std::fs::read(&path).unwrap(),
    )
    .stdout;
    // The generic profile writes a shell-like tool (`bash` with one required string
    // parameter) as the paper's `<bash>COMMAND</bash>` too; other tools keep child tags.
    assert!(
        generic.contains("## <str_replace_editor>")
            && generic.contains("<str_replace_editor>\n<command>view</command>")
            && generic.contains("\n<bash>ls /testbed</bash>\n"),
        "{generic}"
    );

    let out = run(&[&"render", &"--request", &"/nonexistent.json"]);
    assert_eq!(out.code, Some(2));
    let bad = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(bad.path(), json!({"messages": 1}).to_string()).unwrap();
    let out = run(&[&"render", &"--request", &bad.path()]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("messages"));
}
