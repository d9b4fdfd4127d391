//! Reference prefixes over HTTP: matching by header, metadata and task-text fingerprint, K,
//! the profile default, and the prefix recorded in the session record (issue 5).

use serde_json::{json, Value};

use crate::util::backend::{FakeBackend, Scripted};
use crate::util::proxy::{serve_with, Proxy};
use crate::util::{continue_with, fixture_path, read_trace, request};

async fn proxy_with(k: usize, backend: &FakeBackend) -> Proxy {
    Proxy::start_with(&backend.url(), |a| {
        a.prompt.prefixes = vec![fixture_path("prefixes")];
        a.prompt.prefix_k = Some(k);
    })
    .await
}

fn trajectory(prompt: &str) -> &str {
    prompt.split("\n# Trajectory\n").nth(1).unwrap()
}

fn session_prefix(proxy: &Proxy) -> Value {
    session_field(proxy, "prefix")
}

/// A field of the session record of the proxy's last trace file.
fn session_field(proxy: &Proxy, field: &str) -> Value {
    let files = proxy.trace_files();
    read_trace(files.last().unwrap())[0]["data"][field].clone()
}

#[tokio::test]
async fn fingerprint_match_renders_k_reference_steps_before_the_live_ones() {
    let backend = FakeBackend::start(vec![
        Scripted::text("Go.\n<bash>ls</bash>\n"),
        Scripted::text("Next.\n<bash>pwd</bash>\n"),
    ])
    .await;
    let proxy = proxy_with(3, &backend).await;
    let mut body = request("swe-agent-1");
    let (_, r1) = proxy.post(&body).await;
    continue_with(&mut body, &r1, "live output");
    proxy.post(&body).await;
    let prompts = backend.prompts();
    let t = trajectory(&prompts[1]);
    let one = t.find("Reference step one.").unwrap();
    let three = t.find("Reference step three.").unwrap();
    let live = t.find("live output").unwrap();
    assert!(one < three && three < live, "{t}");
    assert!(!t.contains("Reference step four."), "K=3 caps the steps");
    assert!(
        t.starts_with(
            "\n## Thinking\nReference step one.\n\n### Action\n\n<bash>ls /testbed</bash>"
        ),
        "{t}"
    );
    assert!(
        !prompts[0].contains("# Example trajectory"),
        "a task prefix replaces the demonstration"
    );
    assert!(prompts[1].starts_with(prompts[0].strip_suffix("## Thinking\n").unwrap()));
    assert_eq!(
        session_prefix(&proxy),
        json!({"id": "inventory__inventory-1", "matched_by": "fingerprint", "k": 3})
    );
    assert_eq!(session_field(&proxy, "prefix_source"), "task");
}

#[tokio::test]
async fn header_and_metadata_name_the_task_explicitly() {
    let backend = FakeBackend::start(vec![Scripted::text("a"), Scripted::text("b")]).await;
    let proxy = proxy_with(3, &backend).await;
    let body = request("swe-agent-1");
    proxy
        .post_with_headers(&body, &[("X-ASAP-Task", "other__other-7")])
        .await;
    assert!(trajectory(&backend.prompts()[0]).contains("<bash>ls /other</bash>"));
    assert_eq!(session_prefix(&proxy)["matched_by"], "header");
    assert_eq!(session_field(&proxy, "prefix_source"), "task");

    let backend = FakeBackend::start(vec![Scripted::text("a")]).await;
    let proxy = proxy_with(3, &backend).await;
    let mut body = request("mini-swe-agent-1");
    body["metadata"] = json!({"instance_id": "other__other-7"});
    proxy.post(&body).await;
    assert!(trajectory(&backend.prompts()[0]).contains("<bash>ls /other</bash>"));
    assert_eq!(
        session_prefix(&proxy),
        json!({"id": "other__other-7", "matched_by": "metadata", "k": 1})
    );
}

#[tokio::test]
async fn unmatched_tasks_get_the_profile_demonstration_and_k0_renders_none() {
    let backend = FakeBackend::start(vec![
        Scripted::text("a"),
        Scripted::text("b"),
        Scripted::text("c"),
    ])
    .await;
    let proxy = proxy_with(3, &backend).await;
    proxy.post(&request("openhands-sdk-1")).await;
    let prompt = &backend.prompts()[0];
    assert!(
        prompt.contains("# Example trajectory")
            && prompt.contains("<bash>cat -n shop/cart.py</bash>")
    );
    assert!(
        trajectory(prompt).trim_start().starts_with("## Thinking"),
        "nothing of the demo in the live trajectory"
    );
    assert_eq!(
        session_prefix(&proxy),
        json!({"id": "shell-demo", "matched_by": "default", "k": 3})
    );
    assert_eq!(session_field(&proxy, "prefix_source"), "demonstration");
    // generic (no default demonstration)
    proxy.post(&request("browsecomp-plus-1")).await;
    assert!(!backend.prompts()[1].contains("# Example trajectory"));

    let backend = FakeBackend::start(vec![Scripted::text("a")]).await;
    let proxy = proxy_with(0, &backend).await;
    proxy.post(&request("swe-agent-1")).await;
    let prompt = &backend.prompts()[0];
    assert!(!prompt.contains("Reference step") && !prompt.contains("# Example trajectory"));
    assert_eq!(session_prefix(&proxy), Value::Null);
    assert_eq!(session_field(&proxy, "prefix_source"), "none");
}

#[tokio::test]
async fn a_task_prefix_can_name_a_demonstration_rendered_before_it() {
    let dir = std::env::temp_dir().join(format!("asap-paired-prefix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let step = |thought: &str, command: &str, observation: &str| {
        json!({"thought": thought, "action": {"tool": "bash", "arguments": {"command": command}},
               "observation": observation})
    };
    let demo = json!({"instance_id": "my-demo", "demo_task": "Fix the cart total.",
        "steps": [step("Demo one.", "ls", "cart.py"), step("Demo two.", "cat cart.py", "x"),
                  step("Demo three.", "sed -i '1c\\y' cart.py", ""),
                  step("Demo four.", "python3 -m unittest", "OK")]});
    let task = json!({"instance_id": "paired__paired-1", "example": "my-demo",
        "steps": [step("Task one.", "ls", "pager.py")]});
    std::fs::write(dir.join("demo.json"), demo.to_string()).unwrap();
    std::fs::write(dir.join("task.json"), task.to_string()).unwrap();
    let backend = FakeBackend::start(vec![Scripted::text("a")]).await;
    let proxy = Proxy::start_with(&backend.url(), |a| {
        a.prompt.prefixes = vec![dir.clone()];
        a.prompt.prefix_k = Some(3);
    })
    .await;
    let body = request("mini-swe-agent-1");
    proxy
        .post_with_headers(&body, &[("X-ASAP-Task", "paired__paired-1")])
        .await;
    std::fs::remove_dir_all(&dir).unwrap();
    let prompt = &backend.prompts()[0];
    let (before, live) = prompt.split_once("\n# Trajectory\n").unwrap();
    let example = before.split_once("# Example trajectory").unwrap().1;
    assert!(example.contains("Task: Fix the cart total.") && example.contains("Demo three."));
    assert!(
        !example.contains("Demo four."),
        "the demonstration is cut to K too"
    );
    assert!(
        live.contains("Task one.") && !live.contains("Demo one."),
        "{live}"
    );
    assert_eq!(
        session_prefix(&proxy),
        json!({"id": "paired__paired-1", "matched_by": "header", "k": 1, "example": "my-demo"})
    );
}

/// Issue 18 item 6: a prefix's neutral shell step (`command`) renders as `<bash>…</bash>`
/// under an unknown scaffold whose shell names its parameter `cmd`, like the live steps.
#[tokio::test]
async fn a_prefix_shell_step_reads_as_bash_under_a_generic_cmd_shell() {
    let dir = std::env::temp_dir().join(format!("asap-generic-prefix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let task = json!({"instance_id": "generic__shell-1", "steps": [
        {"thought": "List first.", "action": {"tool": "bash", "arguments": {"command": "ls -a"}},
         "observation": "setup.py"}]});
    std::fs::write(dir.join("task.json"), task.to_string()).unwrap();
    let (backend, proxy) = serve_with(vec![Scripted::text("a")], |a| {
        a.prompt.prefixes = vec![dir.clone()];
        a.prompt.prefix_k = Some(1);
    })
    .await;
    let body = json!({
        "model": "base-model",
        "messages": [{"role": "user", "content": "Count the files."}],
        "tools": [
            {"type": "function", "function": {"name": "run_command", "description": "Run a command.",
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}},
            {"type": "function", "function": {"name": "read_notes", "description": "Read notes.",
                "parameters": {"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]}}}
        ]
    });
    proxy
        .post_with_headers(&body, &[("X-ASAP-Task", "generic__shell-1")])
        .await;
    std::fs::remove_dir_all(&dir).unwrap();
    let prompt = &backend.prompts()[0];
    let live = trajectory(prompt);
    assert!(
        live.contains("List first.") && live.contains("\n<bash>ls -a</bash>\n"),
        "{live}"
    );
    assert!(!prompt.contains("<command>"), "{prompt}");
}

#[tokio::test]
async fn a_task_file_names_the_instance_of_a_task_without_a_prefix() {
    // A batch runner sends no task header; the dataset names the task by its problem statement.
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("test.jsonl");
    let statement =
        "The function `add` in /workspace/project/calc.py returns the difference of its arguments.";
    std::fs::write(
        &tasks,
        format!(
            "{}\n{}\n",
            json!({"instance_id": "calc__calc-1", "problem_statement": statement, "repo": "calc/calc"}),
            json!({"instance_id": "other__other-2", "problem_statement": "A different task whose text appears in no request at all."})
        ),
    )
    .unwrap();
    for k in [3, 0] {
        let backend = FakeBackend::start(vec![Scripted::text("a")]).await;
        let proxy = Proxy::start_with(&backend.url(), |a| {
            a.prompt.prefixes = vec![fixture_path("prefixes")];
            a.prompt.prefix_k = Some(k);
            a.prompt.tasks = vec![tasks.clone()];
        })
        .await;
        proxy.post(&request("openhands-sdk-1")).await;
        assert_eq!(
            session_field(&proxy, "instance_id"),
            "calc__calc-1",
            "K={k}"
        );
        assert_eq!(session_field(&proxy, "task"), "calc__calc-1");
        // Known, but without a prefix: the demonstration as before (none with K=0).
        let expected = if k == 3 { "demonstration" } else { "none" };
        assert_eq!(session_field(&proxy, "prefix_source"), expected);
    }
    // Without the task file the session has no id, only a task key from its text.
    let backend = FakeBackend::start(vec![Scripted::text("a")]).await;
    let proxy = proxy_with(3, &backend).await;
    proxy.post(&request("openhands-sdk-1")).await;
    assert_eq!(session_field(&proxy, "instance_id"), Value::Null);
    assert!(session_field(&proxy, "task")
        .as_str()
        .unwrap()
        .starts_with("task-"));
}
