//! The paper's termination rules over HTTP (issue 17 item 1): a re-edit after a failed test
//! is never cut off, a degenerate loop is, and the session record names the rules in force.

use serde_json::{json, Value};

use crate::util::backend::Scripted;
use crate::util::proxy::{serve, serve_with, Proxy};
use crate::util::{arguments as args, continue_with, read_records, request, tool_call};

/// A base model's continuation with a `str_replace` edit of `/testbed/x.py`.
fn edit_text(thought: &str, old: &str, new: &str) -> Scripted {
    Scripted::text(&format!(
        "{thought}\n\n### Action\n\n<str_replace_editor>\n<command>str_replace</command>\n\
         <path>/testbed/x.py</path>\n<old_str>{old}</old_str>\n<new_str>{new}</new_str>\n\
         </str_replace_editor>\n"
    ))
}

fn bash_text(thought: &str, command: &str) -> Scripted {
    Scripted::text(&format!(
        "{thought}\n\n### Action\n\n<bash>{command}</bash>\n"
    ))
}

/// What SWE-agent's `str_replace_editor` answers to a successful `str_replace`.
fn edited(line: &str) -> String {
    format!(
        "The file /testbed/x.py has been edited. Here's the result of running `cat -n` on a \
         snippet of /testbed/x.py:\n     1\tdef add(a, b):\n     2\t    {line}\nReview the \
         changes and make sure they are as expected. Edit the file again if necessary."
    )
}

const TEST: &str = "python -m pytest tests/test_x.py";

/// The same failing pytest run every time: the fix is still wrong.
const FAILING: &str = "============================= test session starts ==============================\n\
collected 3 items\n\ntests/test_x.py .F.                                                      [100%]\n\n\
=================================== FAILURES ===================================\n\
___________________________________ test_add ___________________________________\n\n    \
def test_add():\n>       assert add(2, 3) == 5\nE       assert 6 == 5\n\ntests/test_x.py:7: AssertionError\n\
=========================== short test summary info ============================\n\
FAILED tests/test_x.py::test_add - assert 6 == 5\n\
========================= 1 failed, 2 passed in 0.03s ==========================";

fn session_record(proxy: &Proxy) -> Value {
    let files = proxy.trace_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let records = read_records(&files[0]);
    assert_eq!(records[0]["type"], "session");
    records[0]["data"].clone()
}

fn terminate_records(proxy: &Proxy) -> Vec<Value> {
    read_records(&proxy.trace_files()[0])
        .into_iter()
        .filter(|r| r["type"] == "terminate")
        .map(|r| r["data"].clone())
        .collect()
}

/// Edit, failing test, edit, the same failing test, edit, the same test, submit: the paper's
/// "valid re-edit after a failed test". Under the old `same_action_thrice` rule the third
/// test run was answered with a forced submit.
#[tokio::test]
async fn re_editing_after_the_same_failing_test_runs_to_the_models_own_submit() {
    let (backend, proxy) = serve(vec![
        edit_text(
            "The function subtracts; it should add.",
            "return a - b",
            "return a * b",
        ),
        bash_text("Let me run the tests.", TEST),
        edit_text(
            "Still failing: multiplication is wrong too.",
            "return a * b",
            "return a + b + 1",
        ),
        bash_text("Run the tests again.", TEST),
        edit_text("Off by one.", "return a + b + 1", "return a + b"),
        bash_text("Once more.", TEST),
        Scripted::text("The fix is in place.\n\n### Action\n\n<submit/>\n"),
    ])
    .await;
    let mut body = request("swe-agent-1");
    let observations = [
        edited("return a * b"),
        FAILING.to_string(),
        edited("return a + b + 1"),
        FAILING.to_string(),
        edited("return a + b"),
        // The test output is the same as before (the scaffold's environment is scripted here).
        FAILING.to_string(),
    ];
    let mut tools_called = Vec::new();
    for (turn, observation) in observations.iter().enumerate() {
        let (status, r) = proxy.post(&body).await;
        assert_eq!(status, 200, "{r}");
        let name = tool_call(&r)["function"]["name"]
            .as_str()
            .unwrap()
            .to_string();
        if name == "bash" {
            assert_eq!(args(&r)["command"], TEST, "turn {turn}");
        } else {
            assert_eq!(name, "str_replace_editor", "turn {turn}");
            assert_eq!(args(&r)["command"], "str_replace");
            assert_eq!(args(&r)["path"], "/testbed/x.py");
        }
        tools_called.push(name);
        continue_with(&mut body, &r, observation);
    }
    let (status, r) = proxy.post(&body).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(tool_call(&r)["function"]["name"], "submit");
    assert!(
        r["choices"][0]["message"]["content"]
            .as_str()
            .is_some_and(|c| c.contains("The fix is in place.")),
        "the model's own submit, not the proxy's: {r}"
    );
    assert_eq!(
        tools_called,
        [
            "str_replace_editor",
            "bash",
            "str_replace_editor",
            "bash",
            "str_replace_editor",
            "bash"
        ]
    );
    assert_eq!(backend.calls(), 7, "no nudge, no re-generation");
    assert_eq!(terminate_records(&proxy), Vec::<Value>::new());
    let session = session_record(&proxy);
    assert_eq!(
        session["rules"],
        json!({"nudges": true, "max_steps": 100, "loop_rule": "degenerate", "loop_window": 10, "max_unparsable": 5})
    );
    assert_eq!(
        session["prefix_source"], "demonstration",
        "./prefixes holds only the built-in demonstration"
    );
    // Built in a git checkout (CI's clean clone): the commit, so `report` tells builds apart.
    if std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".git")
        .exists()
        && std::env::var_os("ASAP_BUILD_COMMIT").is_none()
    {
        let build = session["proxy_build"].as_str().unwrap_or_default();
        assert!(
            build.len() == 12 && build.chars().all(|c| c.is_ascii_hexdigit()),
            "{session}"
        );
    }
}

/// Reading the same file three times with the same output and no edit: a degenerate loop.
/// With the nudges on, the read alternates with another read-only command (an immediate
/// repeat would be nudged first); with them off, the three reads follow each other.
#[tokio::test]
async fn the_same_read_thrice_with_the_same_output_ends_as_a_degenerate_loop() {
    const CAT: &str = "cat x.py";
    const SOURCE: &str = "def add(a, b):\n    return a - b\n";
    for nudges in [true, false] {
        let script = if nudges {
            vec![
                bash_text("Read the file.", CAT),
                bash_text("List the tests.", "ls tests"),
                bash_text("Read it again.", CAT),
                bash_text("List again.", "ls tests"),
                bash_text("And again.", CAT),
            ]
        } else {
            vec![
                bash_text("Read the file.", CAT),
                bash_text("Read it again.", CAT),
                bash_text("And again.", CAT),
            ]
        };
        let turns = script.len();
        let (backend, proxy) = serve_with(script, |a| a.nudges = Some(nudges)).await;
        let mut body = request("swe-agent-1");
        for turn in 0..turns - 1 {
            let (status, r) = proxy.post(&body).await;
            assert_eq!(status, 200, "{r}");
            assert_eq!(tool_call(&r)["function"]["name"], "bash", "turn {turn}");
            let output = if args(&r)["command"] == CAT {
                SOURCE
            } else {
                "test_x.py"
            };
            continue_with(&mut body, &r, output);
        }
        let (status, r) = proxy.post(&body).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(
            tool_call(&r)["function"]["name"],
            "submit",
            "nudges {nudges}: the proxy ends the run with the scaffold's finish action"
        );
        assert_eq!(backend.calls(), turns, "nothing nudged");
        let terminations = terminate_records(&proxy);
        assert_eq!(terminations.len(), 1, "{terminations:?}");
        let t = &terminations[0];
        assert_eq!(t["reason"], "degenerate_loop");
        assert_eq!(t["window"], 10);
        assert_eq!(t["repeats"], 3);
        assert_eq!(t["step"], turns - 1);
        assert_eq!(t["on_terminate"], "submit");
        assert_eq!(session_record(&proxy)["rules"]["nudges"], nudges);
    }
}

/// The switches reach the session record, and with the loop rule off the same reads go on.
#[tokio::test]
async fn switched_rules_are_recorded_and_the_loop_rule_can_be_off() {
    let (_backend, proxy) = serve_with(
        vec![
            bash_text("Read.", "cat x.py"),
            bash_text("Read.", "cat x.py"),
            bash_text("Read.", "cat x.py"),
        ],
        |a| {
            a.nudges = Some(false);
            a.loop_rule = Some(asap_proxy::policy::LoopRule::Off);
            a.loop_window = Some(4);
            a.max_unparsable = Some(0);
            a.max_steps = Some(50);
            a.prompt.prefix_k = Some(0);
        },
    )
    .await;
    let mut body = request("swe-agent-1");
    for _ in 0..3 {
        let (status, r) = proxy.post(&body).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(args(&r)["command"], "cat x.py");
        continue_with(&mut body, &r, "x = 1");
    }
    assert_eq!(terminate_records(&proxy), Vec::<Value>::new());
    let session = session_record(&proxy);
    assert_eq!(
        session["rules"],
        json!({"nudges": false, "max_steps": 50, "loop_rule": "off", "loop_window": 4, "max_unparsable": 0})
    );
    assert_eq!(session["prefix_source"], "none", "K=0 renders no prefix");
}
