//! The quick start's closing summary (`scripts/summarize_trace.py`) prints from `report
//! --format json --steps`, the report's own reading of the trace: a recorded mini-swe-agent
//! session with an accepted action, an unparsable output, a nudge and a termination.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use crate::util::backend::{FakeBackend, Scripted};
use crate::util::proxy::{serve, Proxy};
use crate::util::{continue_with, request};

use crate::util::cli::{run, BIN};

/// Records one session: `ls` (accepted), no action (sent as plain content), then submit
/// before any edit twice (nudged, then terminated).
async fn recorded() -> (Proxy, FakeBackend) {
    let (backend, proxy) = serve(vec![
        Scripted::text("Look.\n<bash>ls</bash>\n"),
        Scripted::text("I am not sure."),
        Scripted::text("Done.\n<submit/>\n"),
        Scripted::text("Done!\n<submit/>\n"),
    ])
    .await;
    let mut body = request("mini-swe-agent-1");
    let (status, resp) = proxy.post(&body).await;
    assert_eq!(status, 200, "{resp}");
    continue_with(
        &mut body,
        &resp,
        &json!({"returncode": 0, "output": "slug.py\n"}).to_string(),
    );
    let (status, resp) = proxy.post(&body).await;
    assert_eq!(status, 200, "{resp}");
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(resp["choices"][0]["message"].clone());
    messages.push(json!({"role": "user", "content": "Format error: no tool call."}));
    let (status, resp) = proxy.post(&body).await;
    assert_eq!(status, 200, "{resp}");
    (proxy, backend)
}

fn report_steps(dir: &Path) -> Value {
    let out = run(&[&"report", &"--format", &"json", &"--steps", &dir]);
    assert!(out.success(), "{}", out.stderr);
    out.json()
}

#[tokio::test]
async fn report_steps_lists_every_call_with_its_decision() {
    let (proxy, _backend) = recorded().await;
    let json = report_steps(proxy.log_dir.path());
    let t = &json["trajectories"][0];
    assert_eq!(t["profile"], "mini-swe-agent");
    assert_eq!(t["termination"], "submit_before_edit_again");
    let steps = t["steps"].as_array().unwrap();
    let brief: Vec<Value> = steps
        .iter()
        .map(|s| {
            json!([
                s["step"],
                s["attempt"],
                s["action"]["kind"],
                s["parse_error"],
                s["nudge"],
                s["terminated"]
            ])
        })
        .collect();
    assert_eq!(
        brief,
        [
            json!([0, 0, "call", null, null, false]),
            json!([1, 0, null, "no_action", null, false]),
            json!([1, 0, "submit", null, "submit_before_edit", false]),
            json!([1, 1, "submit", null, null, true]),
        ]
    );
    let md = run(&[&"report", &"--steps", &proxy.log_dir.path()]);
    assert_eq!(md.code, Some(2), "--steps needs --format json");
    // Told before any trace is read: no trace warning first (found by a new-user helper).
    assert!(
        md.stderr.contains("--steps needs --format json"),
        "{}",
        md.stderr
    );
    assert!(!md.stderr.contains("warning"), "{}", md.stderr);
}

#[tokio::test]
async fn summarize_trace_prints_the_reports_steps() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: no python3");
        return;
    }
    let (proxy, _backend) = recorded().await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/summarize_trace.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(proxy.log_dir.path())
        .args(["--proxy-bin", BIN])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().map(str::trim).collect();
    let has = |prefix: &str| lines.iter().any(|l| l.starts_with(prefix));
    for expected in [
        "#1   step 0   bash: ls",
        "#2   step 1   parse failure no_action",
        "#3   step 1   NUDGE submit_before_edit: rejected submit",
        "#4   step 1   TERMINATED submit_before_edit_again: replaced submit",
        "parsed actions: 3 of 4",
        "parse failures: 1 (no_action 1)",
        "nudges: 1 (submit_before_edit 1)",
        "terminated by the proxy: submit_before_edit_again",
    ] {
        assert!(has(expected), "missing {expected:?} in:\n{stdout}");
    }
}
