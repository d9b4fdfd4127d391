//! Content dialects (issue 6): scaffolds without `tools` get the action in their own reply
//! format, checked with the scaffold's own acceptance rules, and their history is read back.

use serde_json::{json, Value};

use crate::util::backend::Scripted;
use crate::util::proxy::serve;
use crate::util::{fixture_json, read_trace, request};

fn content(r: &Value) -> String {
    assert!(
        r["choices"][0]["message"].get("tool_calls").is_none(),
        "{r}"
    );
    r["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Terminus-2's acceptance rules for a reply (its prompt): one JSON object with string
/// `analysis` and `plan`, a `commands` list of `{keystrokes: string, duration: number}`, and
/// an optional boolean `task_complete`. Returns the object.
fn terminus_accepts(text: &str) -> Value {
    let v: Value =
        serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    assert!(v["analysis"].is_string() && v["plan"].is_string(), "{v}");
    for c in v["commands"].as_array().unwrap() {
        assert!(
            c["keystrokes"].is_string() && c["duration"].is_number(),
            "{c}"
        );
        assert!(c["duration"].as_f64().unwrap() <= 60.0);
    }
    assert!(v.get("task_complete").is_none_or(Value::is_boolean));
    v
}

#[tokio::test]
async fn terminus_2_gets_json_keystrokes_and_a_consistent_confirmation() {
    let (backend, proxy) = serve(vec![
        Scripted::text(
            "Write the file.\n\n<bash>printf 'int main(){return 0;}' > /app/hello.c</bash>\n",
        ),
        Scripted::text("It builds now.\n\n<submit/>\n"),
    ])
    .await;
    let mut body = request("terminus-2-1");
    let (_, r1) = proxy.post(&body).await;
    let v1 = terminus_accepts(&content(&r1));
    assert_eq!(
        v1["commands"][0]["keystrokes"],
        "printf 'int main(){return 0;}' > /app/hello.c\n"
    );
    assert_eq!(v1["task_complete"], false);
    assert_eq!(v1["analysis"], "Write the file.");
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": content(&r1)}));
    messages.push(json!({"role": "user", "content": "New Terminal Output:\n\nroot@box:/app# "}));
    let (_, r2) = proxy.post(&body).await;
    let v2 = terminus_accepts(&content(&r2));
    assert_eq!(v2["task_complete"], true);
    assert_eq!(v2["commands"], json!([]));
    let prompt = &backend.prompts()[1];
    assert!(
        prompt.contains("<bash>printf 'int main(){return 0;}' > /app/hello.c</bash>"),
        "history read back"
    );
    assert!(prompt.starts_with(backend.prompts()[0].strip_suffix("## Thinking\n").unwrap()));

    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": content(&r2)}));
    messages.push(json!({"role": "user", "content": "Current terminal state:\nroot@box:/app# \n\nAre you sure you want to mark the task as complete? If so, include \"task_complete\": true in your JSON response again."}));
    let (_, r3) = proxy.post(&body).await;
    let v3 = terminus_accepts(&content(&r3));
    assert_eq!(v3["task_complete"], true, "confirmed consistently");
    assert_eq!(backend.calls(), 2, "the confirmation needs no model call");
    let files = proxy.trace_files();
    assert_eq!(files.len(), 1, "one session through the content index");
    let records = read_trace(&files[0]);
    assert_eq!(records[0]["data"]["profile"], "terminus-2");
    assert!(
        records[3]["data"]["completion"].is_null() && records[3]["data"]["response"].is_object()
    );
}

/// mini-swe-agent's text-mode rule: exactly one ```mswea_bash_command block.
fn mini_command(text: &str) -> String {
    let blocks: Vec<&str> = text.split("```mswea_bash_command\n").skip(1).collect();
    assert_eq!(blocks.len(), 1, "{text}");
    blocks[0].split("\n```").next().unwrap().to_string()
}

#[tokio::test]
async fn mini_swe_agent_text_mode_gets_one_command_block() {
    let (backend, proxy) = serve(vec![
        Scripted::text("Read it.\n\n<bash>cat /repo/textutil/slug.py</bash>\n"),
        Scripted::text("No action here."),
    ])
    .await;
    let mut body = request("mini-swe-agent-1");
    body.as_object_mut().unwrap().remove("tools");
    body["messages"][0]["content"] = json!("You are a helpful assistant. Reply with a THOUGHT and exactly one ```mswea_bash_command block.");
    let (_, r1) = proxy.post(&body).await;
    let text = content(&r1);
    assert_eq!(mini_command(&text), "cat /repo/textutil/slug.py");
    assert!(text.starts_with("Read it."));
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": text}));
    messages.push(json!({"role": "user", "content": "<returncode>0</returncode>\n<output>\nimport re\n</output>"}));
    let (_, r2) = proxy.post(&body).await;
    assert_eq!(
        content(&r2),
        "No action here.",
        "no block: mini's own format error runs"
    );
    let prompt = &backend.prompts()[1];
    assert!(prompt.contains(
        "<bash>cat /repo/textutil/slug.py</bash>\n\n<observation>\n<returncode>0</returncode>"
    ));
    let records = proxy.first_trace();
    assert_eq!(records[0]["data"]["profile"], "mini-swe-agent-text");
}

/// mini-swe-agent's `action_regex` for a fenced block ```` ```LANG\s*\n(.*?)\n``` ````, or
/// `<TAG>(.*?)</TAG>` for an element: every match, as mini collects them (it accepts
/// exactly one).
fn mini_actions(text: &str, open: &str, close: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(open) {
        let body = rest[i + open.len()..].trim_start_matches([' ', '\t', '\n']);
        let Some(end) = body.find(close) else { break };
        out.push(body[..end].trim().to_string());
        rest = &body[end + close.len()..];
    }
    out
}

/// Requests recorded from the real mini-swe-agent 1.17.5 (`mini.yaml`: ```` ```bash ````)
/// and 2.4.6 (`mini_textbased.yaml`: ```` ```mswea_bash_command ````), each at its second
/// turn: the proxy answers in the block form the request's own system prompt asks for, and
/// the completion command that prompt names ends the run.
#[tokio::test]
async fn mini_swe_agent_text_mode_answers_in_the_prompts_own_block_form() {
    for (fixture, lang, replace) in [
        ("requests/mini-swe-agent-v1-text-1.json", "bash", None),
        (
            "requests/mini-swe-agent-v2-text-1.json",
            "mswea_bash_command",
            None,
        ),
        // Early 1.x named another completion command.
        (
            "requests/mini-swe-agent-v1-text-1.json",
            "bash",
            Some("MINI_SWE_AGENT_FINAL_OUTPUT"),
        ),
    ] {
        let (backend, proxy) = serve(vec![
            Scripted::text("Check it.\n\n<bash>cat note.txt</bash>\n"),
            Scripted::text("Done.\n\n<submit/>\n"),
            Scripted::text("Done.\n\n<submit/>\n"),
        ])
        .await;
        let mut body = fixture_json(fixture);
        let submit = format!(
            "echo {}{}",
            replace.unwrap_or("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
            asap_proxy::profile::MINI_SUBMIT_PATCH
        );
        if let Some(word) = replace {
            body = serde_json::from_str(
                &body
                    .to_string()
                    .replace("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", word),
            )
            .unwrap();
        }
        let open = format!("```{lang}");
        let (_, r1) = proxy.post(&body).await;
        let text = content(&r1);
        assert_eq!(
            mini_actions(&text, &open, "\n```"),
            ["cat note.txt"],
            "{fixture}: {text}"
        );
        assert!(text.starts_with("Check it."), "{text}");
        let prompt = &backend.prompts()[0];
        assert!(
            prompt.contains("<bash>echo hi > note.txt</bash>"),
            "{fixture}: the history's block is read back"
        );
        let messages = body["messages"].as_array_mut().unwrap();
        messages.push(json!({"role": "assistant", "content": text}));
        messages.push(json!({"role": "user", "content": "<returncode>0</returncode>\n<output>\nhi\n</output>"}));
        let (_, r2) = proxy.post(&body).await;
        let text = content(&r2);
        assert_eq!(
            mini_actions(&text, &open, "\n```"),
            [submit],
            "{fixture}: {text}"
        );
        let records = proxy.first_trace();
        assert_eq!(records[0]["data"]["profile"], "mini-swe-agent-text");
        assert!(
            !records
                .iter()
                .any(|r| r["type"] == "nudge" || r["type"] == "terminate"),
            "{fixture}: {records:?}"
        );
    }
}

/// mini-swe-agent's XML configs (`swebench_xml.yaml`, 2.4.6's system prompt) ask for one
/// `<mswea_bash_command>` element.
#[tokio::test]
async fn mini_swe_agent_xml_config_gets_one_element() {
    let (backend, proxy) = serve(vec![Scripted::text(
        "Check it.\n\n<bash>cat note.txt</bash>\n",
    )])
    .await;
    let mut body = request("mini-swe-agent-v2-text-1");
    body["messages"][0]["content"] = json!(MINI_XML_SYSTEM);
    body["messages"][2]["content"] =
        json!("I will write it.\n\n<mswea_bash_command>echo hi > note.txt</mswea_bash_command>");
    let (_, r1) = proxy.post(&body).await;
    let text = content(&r1);
    let tags = mini_actions(&text, "<mswea_bash_command>", "</mswea_bash_command>");
    assert_eq!(tags, ["cat note.txt"], "{text}");
    assert!(!text.contains("```"), "{text}");
    assert!(backend.prompts()[0].contains("<bash>echo hi > note.txt</bash>"));
}

/// The system prompt of mini-swe-agent 2.4.6's `benchmarks/swebench_xml.yaml`.
const MINI_XML_SYSTEM: &str = "You are a helpful assistant that can interact multiple times with a computer shell to solve programming tasks.\nYour response must contain exactly ONE bash code block with ONE command (or commands connected with && or ||).\n\nInclude a THOUGHT section before your command where you explain your reasoning process.\nFormat your response as shown in <format_example>.\n\n<format_example>\nTHOUGHT: Your reasoning and analysis here\n\n<mswea_bash_command>your_command_here</mswea_bash_command>\n</format_example>\n\nFailure to follow these rules will cause your response to be rejected.\n";

#[tokio::test]
async fn terminus_2_xml_variant_gets_xml_keystrokes() {
    let (_backend, proxy) = serve(vec![Scripted::text(
        "Compile it.\n\n<bash>gcc -o /app/hello /app/hello.c</bash>\n",
    )])
    .await;
    let mut body = request("terminus-2-1");
    body["messages"][0]["content"] = json!(
        "Answer in this XML format:\n<response>\n<analysis>…</analysis>\n<plan>…</plan>\n<commands>\n<keystrokes duration=\"0.1\">ls -la\n</keystrokes>\n</commands>\n<task_complete>true</task_complete>\n</response>\n\nTask Description:\nCompile /app/hello.c."
    );
    let (_, r) = proxy.post(&body).await;
    let text = content(&r);
    // Terminus' plain XML rules: one <response> with analysis, plan and commands in order.
    let at = |t: &str| {
        text.find(t)
            .unwrap_or_else(|| panic!("{t} missing in {text}"))
    };
    assert!(
        at("<response>") < at("<analysis>")
            && at("<analysis>") < at("<plan>")
            && at("<plan>") < at("<commands>")
    );
    assert!(
        text.contains("<keystrokes duration=\"1.0\">gcc -o /app/hello /app/hello.c\n</keystrokes>"),
        "{text}"
    );
    assert!(
        text.contains("<task_complete>false</task_complete>")
            && text.trim_end().ends_with("</response>")
    );
    assert_eq!(proxy.first_trace()[0]["data"]["profile"], "terminus-2-xml");
}

/// Side calls (summaries, hand-off questions, condenser prompts) are plain prose: no action,
/// no parse, logged with `side_call`, not counted as a step.
#[tokio::test]
async fn side_calls_get_plain_prose() {
    let (backend, proxy) = serve(vec![
        Scripted::text("Write it.\n<bash>printf x > /app/a.c</bash>\n"),
        Scripted::text("I wrote /app/a.c; the build is next."),
    ])
    .await;
    let mut body = request("terminus-2-1");
    let (_, r1) = proxy.post(&body).await;
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": content(&r1)}));
    messages.push(json!({"role": "user", "content": "You are about to hand off your work to another AI agent.\nPlease provide a comprehensive summary of what you have accomplished so far on this task:"}));
    let (_, r2) = proxy.post(&body).await;
    assert_eq!(content(&r2), "I wrote /app/a.c; the build is next.");
    let request = &backend.requests()[1];
    assert!(request["prompt"]
        .as_str()
        .unwrap()
        .ends_with("\n\nAssistant:\n"));
    assert_eq!(
        request["stop"],
        json!(["\nUser:", "\nSystem:", "\n## Thinking"])
    );
    let records = proxy.first_trace();
    let side = &records[2]["data"];
    assert_eq!(side["side_call"], "terminus_summary");
    assert_eq!(side["step"], 1, "the trajectory's step, not a new one");
    assert!(side["parse"].is_null());
}

/// opencode's title request (its own system prompt, no tools) is a side call alone in its
/// trace file: the model writes the title, and `report` counts only the agent's trajectory,
/// whose task is the task without opencode's quoting or context.
#[tokio::test]
async fn opencode_title_request_is_a_side_call_outside_the_trajectories() {
    let (backend, proxy) = serve(vec![
        Scripted::text("Fix add in calc.py"),
        Scripted::text("I will look at the code first.\n<bash>cat calc.py</bash>\n"),
    ])
    .await;
    let title = json!({"model": "base", "max_tokens": 32000, "messages": [
        {"role": "system", "content": "You are a title generator. You output ONLY a thread title. Nothing else."},
        {"role": "user", "content": "Generate a title for this conversation:\n"},
        {"role": "user", "content": "\"add() in calc.py subtracts. Fix it.\""}
    ]});
    let (status, r) = proxy.post(&title).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(content(&r), "Fix add in calc.py");
    assert!(backend.prompts()[0].ends_with("\n\nAssistant:\n"));
    let mut agent = request("opencode-1");
    agent["stream"] = json!(false);
    agent.as_object_mut().unwrap().remove("stream_options");
    let (status, r) = proxy.post(&agent).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        r["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "bash"
    );
    let files = proxy.trace_files();
    assert_eq!(files.len(), 2, "{files:?}");
    let out = crate::util::cli::run(&[&"report", &proxy.log_dir.path(), &"--format", &"json"]);
    assert!(out.success(), "{}", out.stderr);
    let trajectories = out.json()["trajectories"].clone();
    assert_eq!(
        trajectories.as_array().map(Vec::len),
        Some(1),
        "{trajectories}"
    );
    assert!(
        out.stderr
            .contains("left out 1 trace file(s) of side calls only"),
        "{}",
        out.stderr
    );
    // In the report itself too: a saved report says what its numbers leave out.
    let warnings = out.json()["warnings"].to_string();
    assert!(
        warnings.contains("left out 1 trace file(s) of side calls only"),
        "{warnings}"
    );
}

/// OpenHands CodeAct without native tool calling: tools from the system prompt, replies as
/// one `<function=NAME>` block with required parameters, nothing after it.
#[tokio::test]
async fn openhands_text_mode_gets_function_blocks() {
    let (backend, proxy) = serve(vec![
        Scripted::text("Look around.\n\n<bash>ls /workspace</bash>\n"),
        Scripted::text("Done.\n\n<submit/>\n"),
        Scripted::text("Really done.\n\n<submit/>\n"),
    ])
    .await;
    let mut body = request("openhands-codeact-text-1");
    let (_, r1) = proxy.post(&body).await;
    let text = content(&r1);
    assert!(
        text.starts_with("Look around.\n\n<function=execute_bash>\n"),
        "{text}"
    );
    assert!(text.contains("<parameter=command>ls /workspace</parameter>\n"));
    assert!(
        text.contains("<parameter=security_risk>LOW</parameter>\n"),
        "required enum filled"
    );
    assert!(text.ends_with("</function>"), "nothing after the block");
    let prompt = &backend.prompts()[0];
    assert!(
        prompt.contains("## <bash>")
            && prompt.contains("## <str_replace_editor>")
            && prompt.contains("## <submit>")
    );
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": text}));
    messages
        .push(json!({"role": "user", "content": "EXECUTION RESULT of [execute_bash]:\nreport.py"}));
    let (_, r2) = proxy.post(&body).await;
    let finish = content(&r2);
    assert!(
        finish.contains("<function=finish>\n<parameter=message>"),
        "{finish}"
    );
    assert!(backend.prompts()[1]
        .contains("<bash>ls /workspace</bash>\n\n<observation>\nEXECUTION RESULT"));
    assert_eq!(
        proxy.first_trace()[0]["data"]["profile"],
        "openhands-codeact-text"
    );
}

/// openhands-sdk with `native_tool_calling=False` describes `terminal`, `file_editor`, … in
/// its system prompt (fixture made with the SDK's own converter from
/// `openhands-sdk-1.json`). The reply must name the SDK's tools (V0's `execute_bash` is not
/// one of them), so that the reply the SDK sends back in its history is recognised and the
/// session continues in one trace.
#[tokio::test]
async fn openhands_sdk_text_mode_names_the_sdk_tools_and_keeps_its_session() {
    let (backend, proxy) = serve(vec![
        Scripted::text("Look around.\n\n<bash>ls /workspace</bash>\n"),
        Scripted::text("Check again.\n\n<bash>ls -la /workspace</bash>\n"),
    ])
    .await;
    let mut body = request("openhands-sdk-text-1");
    let (_, r1) = proxy.post(&body).await;
    let text = content(&r1);
    assert!(
        text.starts_with("Look around.\n\n<function=terminal>\n"),
        "{text}"
    );
    assert!(text.contains("<parameter=command>ls /workspace</parameter>\n"));
    let prompt = &backend.prompts()[0];
    assert!(prompt.contains("## <bash>") && prompt.contains("## <str_replace_editor>"));
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": text}));
    messages.push(json!({"role": "user", "content": "EXECUTION RESULT of [terminal]:\nreport.py"}));
    let (_, r2) = proxy.post(&body).await;
    assert!(
        content(&r2).contains("<function=terminal>"),
        "{}",
        content(&r2)
    );
    assert!(backend.prompts()[1]
        .contains("<bash>ls /workspace</bash>\n\n<observation>\nEXECUTION RESULT"));
    let files = proxy.trace_files();
    assert_eq!(files.len(), 1, "one session: {files:?}");
    let records = read_trace(&files[0]);
    assert_eq!(records[0]["data"]["profile"], "openhands-sdk-text");
}

/// Golden replies of every content dialect for the same actions.
#[test]
fn golden_dialect_replies() {
    use asap_proxy::openai::chat::ChatCompletionRequest;
    use asap_proxy::profile::Action;
    use asap_proxy::profile::Dialect;
    use asap_proxy::profile::{Profiles, ResolvedProfile};
    let shell = Action::Call {
        tag: "bash".into(),
        arguments: std::sync::Arc::new(serde_json::Map::from_iter([(
            "command".to_string(),
            json!("grep -n \"total\" src/*.py | head -5"),
        )])),
    };
    let submit = Action::Submit { message: None };
    let mut out = String::new();
    for (name, fixture) in [
        ("mini_text", "requests/mini-swe-agent-1.json"),
        ("terminus_json", "requests/terminus-2-1.json"),
        ("terminus_xml", "requests/terminus-2-1.json"),
        (
            "openhands_function",
            "requests/openhands-codeact-text-1.json",
        ),
    ] {
        let body = fixture_json(fixture);
        let request = ChatCompletionRequest::from_slice(body.to_string().as_bytes()).unwrap();
        let profiles = Profiles::builtin().unwrap();
        let tools_in = if name == "openhands_function" {
            asap_proxy::profile::tools_from_prompt(&request.detection_text())
        } else {
            Vec::new()
        };
        let profile = match name {
            "mini_text" => profiles.get("mini-swe-agent-text").unwrap(),
            "terminus_json" => profiles.get("terminus-2").unwrap(),
            "terminus_xml" => profiles.get("terminus-2-xml").unwrap(),
            _ => profiles.get("openhands-codeact-text").unwrap(),
        };
        let tools = ResolvedProfile::build(profile, &tools_in);
        let dialect: Dialect = tools.dialect.unwrap();
        for (label, action) in [
            ("shell", Some(&shell)),
            ("submit", Some(&submit)),
            ("none", None),
        ] {
            out.push_str(&format!(
                "=== {name} / {label}\n{}\n",
                dialect.write("I check the totals.", action, &tools)
            ));
        }
    }
    insta::assert_snapshot!(out);
}

#[test]
fn actions_a_dialect_cannot_carry_become_format_errors() {
    use asap_proxy::profile::Action;
    use asap_proxy::profile::Dialect;
    use asap_proxy::profile::ResolvedProfile;
    let shell = |c: &str| Action::Call {
        tag: "bash".into(),
        arguments: std::sync::Arc::new(serde_json::Map::from_iter([(
            "command".to_string(),
            json!(c),
        )])),
    };
    let tools = ResolvedProfile::empty();
    let fenced = shell("cat > R.md <<'EOF'\n```python\nprint(1)\n```\nEOF");
    assert_eq!(Dialect::MiniText.write("T.", Some(&fenced), &tools), "T.");
    let quoted = Dialect::MiniText.write(
        "See:\n```mswea_bash_command\nls\n```",
        Some(&shell("pwd")),
        &tools,
    );
    assert_eq!(
        quoted.matches("```mswea_bash_command").count(),
        1,
        "{quoted}"
    );
    assert_eq!(
        Dialect::TerminusXml.write("T.", Some(&shell("echo '</keystrokes>'")), &tools),
        "T."
    );
    let (thought, action) = Dialect::OpenhandsFunction.read("Fn: <function=x> is how.", &tools);
    assert_eq!(
        (thought.as_str(), action),
        ("Fn: <function=x> is how.", None)
    );
}

/// Content dialects carry no ids, so sessions are recovered by content: parallel runs of one
/// task whose turns are byte-identical stay apart when they name their run (`X-ASAP-Run`).
#[tokio::test]
async fn identical_parallel_runs_of_a_content_dialect_stay_apart_by_run_header() {
    let runs = 4;
    let (_backend, proxy) = serve(
        (0..2 * runs)
            .map(|i| {
                Scripted::text(if i < runs {
                    "Look.\n\n<bash>ls /app</bash>\n"
                } else {
                    "Read it.\n\n<bash>cat /app/hello.c</bash>\n"
                })
            })
            .collect(),
    )
    .await;
    let post = |body: Value, run: usize| {
        let request = proxy
            .client
            .post(proxy.url())
            .header("x-asap-run", run.to_string())
            .header("x-asap-task", "hello-c")
            .json(&body);
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let mut bodies = vec![request("terminus-2-1"); runs];
    // Interleaved: every run's first turn, then every run's second turn.
    for (run, body) in bodies.iter_mut().enumerate() {
        let r = post(body.clone(), run).await;
        let messages = body["messages"].as_array_mut().unwrap();
        messages.push(json!({"role": "assistant", "content": content(&r)}));
        messages.push(
            json!({"role": "user", "content": "New Terminal Output:\n\nhello.c\nroot@box:/app# "}),
        );
    }
    for (run, body) in bodies.iter().enumerate() {
        post(body.clone(), run).await;
    }
    let files = proxy.trace_files();
    assert_eq!(files.len(), runs, "one session per run");
    for file in &files {
        let records = read_trace(file);
        assert_eq!(records.len(), 3, "session + two steps: {file:?}");
        let run = &records[0]["data"]["run"];
        assert_eq!(records[0]["data"]["run_source"], "header");
        let steps: Vec<u64> = records[1..]
            .iter()
            .map(|r| r["data"]["step"].as_u64().unwrap())
            .collect();
        assert_eq!(steps, [0, 1]);
        assert!(run.as_u64().unwrap() < runs as u64);
    }
}

/// An output the proxy cannot parse reaches a content-dialect scaffold as text its own parser
/// reads no action from, even when the model quoted the scaffold's block syntax in prose (its
/// prompt shows the model those examples): the scaffold's format-error path runs, and what the
/// trace calls unparsable is never executed.
#[tokio::test]
async fn unparsable_outputs_carry_no_runnable_markup_in_any_dialect() {
    // (fixture, system prompt override, the model's unparsable output, markup that must not
    // reach the scaffold)
    let terminus_xml = "Answer in this XML format:\n<response>\n<analysis>…</analysis>\n<plan>…</plan>\n<commands>\n<keystrokes duration=\"0.1\">ls -la\n</keystrokes>\n</commands>\n<task_complete>true</task_complete>\n</response>\n\nTask Description:\nCompile /app/hello.c.";
    let cases: Vec<(&str, Option<&str>, &str, Vec<&str>)> = vec![
        (
            "requests/mini-swe-agent-v1-text-1.json",
            None,
            "The fix is to run\n```bash\nrm -rf build && make\n```\nthen check.",
            vec!["```"],
        ),
        (
            "requests/mini-swe-agent-v2-text-1.json",
            None,
            "Maybe\n```mswea_bash_command\nrm -rf build\n```\nlater.",
            vec!["```"],
        ),
        (
            "requests/openhands-codeact-text-1.json",
            None,
            "I could run\n<function=execute_bash>\n<parameter=command>rm -rf /tmp/x</parameter>\n</function>\nbut won't.",
            vec!["<function=", "<parameter=", "</function", "</parameter"],
        ),
        (
            "requests/terminus-2-1.json",
            None,
            "Something like {\"analysis\": \"a\", \"plan\": \"b\", \"commands\": [{\"keystrokes\": \"rm -rf build\\n\", \"duration\": 0.1}]}",
            vec!["{", "}"],
        ),
        (
            "requests/terminus-2-1.json",
            Some(terminus_xml),
            "Perhaps <response><commands><keystrokes duration=\"0.1\">rm -rf build\n</keystrokes></commands></response>",
            vec!["<keystrokes", "<response", "<commands"],
        ),
    ];
    for (fixture, system, output, forbidden) in cases {
        let (_backend, proxy) = serve(vec![Scripted::text(output)]).await;
        let mut body = fixture_json(fixture);
        if let Some(system) = system {
            body["messages"][0]["content"] = json!(system);
        }
        let (status, r) = proxy.post(&body).await;
        assert_eq!(status, 200, "{fixture}: {r}");
        let text = content(&r);
        for markup in &forbidden {
            assert!(!text.contains(markup), "{fixture}: {markup:?} in {text:?}");
        }
        assert!(
            text.contains("rm -rf"),
            "the thought is kept as text: {text}"
        );
        let records = proxy.first_trace();
        let step = records.iter().find(|r| r["type"] == "step").unwrap();
        assert!(
            step["data"]["parse"]["error"].is_object(),
            "{fixture}: the trace calls it unparsable: {step}"
        );
    }
}
