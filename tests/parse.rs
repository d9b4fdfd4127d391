//! Golden tests of the parser and the scaffold mapping, one fixture file per case
//! (`tests/fixtures/parse/*.txt`: a header naming the request whose tools apply and
//! optionally the backend's finish_reason and matched_stop (`none` when it names none; with
//! this header the closing tag is put back as the pipeline does), `---`, then the raw
//! completion). `err_` cases must fail to parse; all others must yield an action.

use asap_proxy::backend::BackendCompletion;
use asap_proxy::openai::chat::ChatCompletionRequest;
use asap_proxy::parse::parse_completion;
use asap_proxy::profile::{Profiles, ResolvedProfile};
use asap_proxy::respond;
use asap_proxy::session::{CallId, NudgeState, SessionId};
use serde_json::{json, Value};

use crate::util::fixture_path;

pub fn tools_for(request_fixture: &str) -> ResolvedProfile {
    let body = std::fs::read(fixture_path(&format!("requests/{request_fixture}"))).unwrap();
    let request = ChatCompletionRequest::from_slice(&body).unwrap();
    let profiles = Profiles::builtin().unwrap();
    ResolvedProfile::build(
        profiles.detect(&request.tools, &request.detection_text()),
        &request.tools,
    )
}

#[test]
fn golden_parse_cases() {
    insta::glob!("fixtures/parse/*.txt", |path| {
        let raw = std::fs::read_to_string(path).unwrap();
        let (header, text) = raw.split_once("---\n").unwrap();
        let mut tools_file = "";
        let mut finish_reason = "stop";
        let mut matched_stop: Option<Option<&str>> = None;
        for line in header.lines() {
            match line.split_once(": ") {
                Some(("tools", v)) => tools_file = v,
                Some(("finish_reason", v)) => finish_reason = v,
                Some(("matched_stop", v)) => matched_stop = Some((v != "none").then_some(v)),
                _ => panic!("bad header line {line:?} in {}", path.display()),
            }
        }
        let tools = tools_for(tools_file);
        // With a `matched_stop` header (`none`: the backend did not say), the closing tag is
        // put back first, as the pipeline does.
        let text = match matched_stop {
            Some(matched) => asap_proxy::parse::with_closing_stop(
                asap_proxy::render::Format::MarkdownXml,
                text,
                Some(finish_reason),
                matched,
                &tools,
            )
            .0
            .into_owned(),
            None => text.to_string(),
        };
        let text = text.as_str();
        let parsed = parse_completion(text, &tools);
        let name = path.file_name().unwrap().to_string_lossy();
        assert_eq!(
            name.starts_with("err_"),
            parsed.outcome.is_err(),
            "{name}: {:?}",
            parsed.outcome
        );
        let completion = BackendCompletion {
            text: text.to_string(),
            finish_reason: Some(finish_reason.to_string()),
            matched_stop: None,
            closer: None,
            usage: None,
            model: "m".into(),
            attempts: 1,
        };
        let call_id = CallId {
            session: SessionId::mint(),
            step: 0,
            nudges: NudgeState::default(),
        };
        let reply = respond::reply(&parsed, &completion, &tools, &call_id, true);
        let tool_call = reply.tool_call.as_ref().map(|c| {
            json!({
                "name": c.function.name,
                "arguments": serde_json::from_str::<Value>(&c.function.arguments).unwrap(),
            })
        });
        insta::assert_yaml_snapshot!(json!({
            "profile": tools.profile,
            "thought": parsed.thought,
            "action": parsed.outcome.as_ref().ok(),
            "error": parsed.outcome.as_ref().err(),
            "dropped_bytes": parsed.dropped_bytes,
            "notes": parsed.notes,
            "response": {
                "content": reply.content,
                "tool_call": tool_call,
                "finish_reason": reply.finish_reason,
            },
        }));
    });
}

/// Fuzzing regression (`fuzz/` target `parse`, issue 9 item 7): a run of `<` in an action's
/// body made the heredoc scan slice past the end of the line (`<<<<<`) or into a multi-byte
/// character (`<<<<<é`), a panic on model output. Every format scans bodies for heredocs.
#[test]
fn runs_of_angle_brackets_in_a_body_do_not_panic() {
    use asap_proxy::parse::parse_for;
    use asap_proxy::render::FORMATS;
    let tools = tools_for("swe-agent-1.json");
    for body in ["cat <<<<<", "cat <<<<<é", "x<<<<<<<", "<<<<<\n<<<<<é\n"] {
        for format in FORMATS {
            let text = match format {
                asap_proxy::render::Format::MarkdownXml => {
                    format!("Run.\n\n<bash>\n{body}\n</bash>\n")
                }
                asap_proxy::render::Format::Xml => {
                    format!("Run.\n</thought>\n<bash>\n{body}\n</bash>\n")
                }
                asap_proxy::render::Format::Markdown => {
                    format!("Run.\n\n### Action\n```bash\n{body}\n```\n")
                }
                asap_proxy::render::Format::Json => format!(
                    "Run.\",\"action\":{{\"tool\":\"bash\",\"arguments\":{{\"command\":{}}}}}}}",
                    serde_json::to_string(body).unwrap()
                ),
            };
            let parsed = parse_for(format, &text, &tools);
            assert_eq!(
                parsed.outcome.as_ref().ok(),
                Some(&asap_proxy::profile::Action::Call {
                    tag: "bash".into(),
                    arguments: [("command".to_string(), json!(body))]
                        .into_iter()
                        .collect::<serde_json::Map<_, _>>()
                        .into(),
                }),
                "{format:?}: {text:?}"
            );
        }
    }
    // The fuzzer's input itself (an editor call whose body holds the runs).
    let crash = "View.et me run Python.Puan\n\n<python\u{8}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<</new_str><<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<ad calc.py.\n\n<bash>ca# /workspacecat /workspac<<<<<<<<\n\n<s</command>trpreplaceieto_dr>\n<command[1\u{c}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}e`w</command>\n<path>/testbed/x.py\n<str_replace_editor>>\n";
    for format in FORMATS {
        let _ = parse_for(format, crash, &tools);
    }
}

/// Issue 11: the tag formats stop at an action's closing tag, which backends drop from the
/// text; the parser gets it back from `matched_stop`, or infers it when the backend does not
/// say which stop matched (llama-server's OpenAI endpoint).
#[test]
fn closing_tag_stop_is_rebuilt() {
    use asap_proxy::parse::{parse_for, with_closing_stop};
    use asap_proxy::render::Format;
    let tools = tools_for("swe-agent-1.json");
    let stops = Format::MarkdownXml.stops(&tools);
    assert!(stops.contains(&"</bash>".to_string()), "{stops:?}");
    assert!(
        stops.contains(&"</str_replace_editor>".to_string()),
        "{stops:?}"
    );
    assert!(!stops.iter().any(|s| s.contains("submit")), "{stops:?}");
    assert!(Format::Markdown.action_closers(&tools).is_empty());

    let cut = "I list the files.\n\n<bash>ls -la";
    // Reported by the backend (vLLM `stop_reason`, SGLang `matched_stop`).
    let (text, closer) = with_closing_stop(
        Format::MarkdownXml,
        cut,
        Some("stop"),
        Some("</bash>"),
        &tools,
    );
    assert_eq!(
        (text.as_ref(), closer.as_deref()),
        ("I list the files.\n\n<bash>ls -la</bash>", Some("</bash>"))
    );
    // Not reported: inferred from the unclosed action.
    let (text, closer) = with_closing_stop(Format::MarkdownXml, cut, Some("stop"), None, &tools);
    assert_eq!(closer.as_deref(), Some("</bash>"));
    let parsed = parse_for(Format::MarkdownXml, &text, &tools);
    assert!(
        matches!(parsed.outcome, Ok(asap_proxy::profile::Action::Call { ref tag, .. }) if tag == "bash"),
        "{:?}",
        parsed.outcome
    );
    let editor = "<str_replace_editor>\n<command>view</command>\n<path>/a.py</path>\n";
    let (_, closer) = with_closing_stop(Format::MarkdownXml, editor, Some("stop"), None, &tools);
    assert_eq!(closer.as_deref(), Some("</str_replace_editor>"));
    // The token limit, another stop string, or a complete action: nothing is added.
    for (text, finish, matched) in [
        (cut, Some("length"), None),
        (cut, Some("stop"), Some("\n<observation>")),
        ("<bash>ls</bash>\n", Some("stop"), None),
        ("no action at all\n", Some("stop"), None),
    ] {
        let (out, closer) = with_closing_stop(Format::MarkdownXml, text, finish, matched, &tools);
        assert_eq!(
            (out.as_ref(), closer),
            (text, None),
            "{text:?} {finish:?} {matched:?}"
        );
    }
    // The XML format has the same closers; Markdown and JSON none.
    let (_, closer) = with_closing_stop(Format::Xml, "<bash>ls", Some("stop"), None, &tools);
    assert_eq!(closer.as_deref(), Some("</bash>"));
    let (_, closer) = with_closing_stop(Format::Json, cut, Some("stop"), Some("</bash>"), &tools);
    assert_eq!(closer, None);
}

/// Issue 18 item 4: a backend that leaves a proper prefix of the closing tag at the end of the
/// text (a stop string cut partly) never gets it into a command. With `finish_reason: "stop"`
/// the fragment is dropped and the action rebuilt as if the stop had matched; with `length`
/// the model did not finish its command and the action stays unclosed. Every format.
#[test]
fn partial_closing_stop_never_reaches_a_command() {
    use asap_proxy::parse::{parse_for, with_closing_stop, FailureClass};
    use asap_proxy::profile::Action;
    use asap_proxy::render::Format;
    let tools = tools_for("swe-agent-1.json");
    let command = "python -m pytest tests/test_x.py::test_total";
    let expected = Action::Call {
        tag: "bash".into(),
        arguments: [("command".to_string(), json!(command))]
            .into_iter()
            .collect::<serde_json::Map<_, _>>()
            .into(),
    };
    let unclosed = |format: Format, text: &str, finish: &str, matched: Option<&str>| {
        let (full, closer) = with_closing_stop(format, text, Some(finish), matched, &tools);
        let parsed = parse_for(format, &full, &tools);
        assert_eq!(closer, None, "{format:?} {text:?} {finish}");
        assert!(
            matches!(&parsed.outcome, Err(f) if f.class == FailureClass::UnclosedTag),
            "{format:?} {text:?} {finish}: {:?}",
            parsed.outcome
        );
    };
    let fragments = ["</bash", "</bas", "</ba", "</b", "</", "<"];
    for format in [Format::MarkdownXml, Format::Xml] {
        let head = match format {
            Format::Xml => "I run the test.\n</thought>\n<bash>",
            _ => "I run the test.\n\n### Action\n\n<bash>",
        };
        for fragment in fragments {
            let text = format!("{head}{command}{fragment}");
            // Stopped, no stop reported (llama-server's OpenAI endpoint), or the closer
            // reported although the backend left part of it: dropped and rebuilt.
            for matched in [None, Some("</bash>")] {
                let (full, closer) =
                    with_closing_stop(format, &text, Some("stop"), matched, &tools);
                assert_eq!(closer.as_deref(), Some("</bash>"), "{format:?} {text:?}");
                assert_eq!(full, format!("{head}{command}</bash>"), "{matched:?}");
                let parsed = parse_for(format, &full, &tools);
                assert_eq!(parsed.outcome.as_ref().ok(), Some(&expected), "{text:?}");
                assert_eq!(parsed.thought, "I run the test.");
            }
            // Cut by the token limit: never run.
            unclosed(format, &text, "length", None);
        }
        // A partial line-anchored stop after an unclosed command is dropped too.
        let line_stops: &[&str] = match format {
            Format::Xml => &["\n<obs", "\n</observ", "\n<st", "\n</ste"],
            _ => &["\n<obs", "\n</observ", "\n## Th"],
        };
        for fragment in line_stops {
            let text = format!("{head}{command}{fragment}");
            let (full, _) = with_closing_stop(format, &text, Some("stop"), None, &tools);
            let parsed = parse_for(format, &full, &tools);
            assert_eq!(parsed.outcome.as_ref().ok(), Some(&expected), "{text:?}");
            unclosed(format, &text, "length", None);
        }
        // A fragment of another tool's closer is no closer of `<bash>`: unclosed, not run.
        unclosed(
            format,
            &format!("{head}{command}</str_replace_ed"),
            "stop",
            None,
        );
        // A complete action keeps its bytes: `<` inside the command is not a fragment.
        let text = format!("{head}cat < a.txt</bash>\n");
        let (full, closer) = with_closing_stop(format, &text, Some("stop"), None, &tools);
        assert_eq!((full.as_ref(), closer), (text.as_str(), None));
    }
    // Markdown: the closing fence is not a stop; a fence cut short never closes the block.
    for fragment in ["``", "`", ""] {
        let text = format!("I run the test.\n\n### Action\n```bash\n{command}\n{fragment}");
        unclosed(Format::Markdown, &text, "stop", None);
        unclosed(Format::Markdown, &text, "length", None);
    }
    // Markdown: a partial stop after the block is text after the action.
    for fragment in ["\n### Obs", "\n#", "\n## Th"] {
        let text = format!("I run the test.\n\n### Action\n```bash\n{command}\n```\n{fragment}");
        let (full, _) = with_closing_stop(Format::Markdown, &text, Some("stop"), None, &tools);
        let parsed = parse_for(Format::Markdown, &full, &tools);
        assert_eq!(parsed.outcome.as_ref().ok(), Some(&expected), "{text:?}");
    }
    // JSON: an action object cut anywhere is unclosed; a partial stop after it is dropped.
    let step = format!(
        "I run the test.\",\"action\":{{\"tool\":\"bash\",\"arguments\":{{\"command\":\"{command}\"}}}}"
    );
    for cut in [1, 2, 3, 10] {
        let text = &step[..step.len() - cut];
        unclosed(Format::Json, text, "stop", None);
        unclosed(Format::Json, text, "length", None);
    }
    for fragment in [",\"obs", ",", ",\"observation\""] {
        let text = format!("{step}{fragment}");
        let parsed = parse_for(Format::Json, &text, &tools);
        assert_eq!(parsed.outcome.as_ref().ok(), Some(&expected), "{text:?}");
    }
}

/// Tools of an unknown scaffold, built with the profile detection picks.
fn generic_tools(tools: Value) -> ResolvedProfile {
    let tools: Vec<asap_proxy::openai::chat::Tool> = serde_json::from_value(tools).unwrap();
    let profiles = Profiles::builtin().unwrap();
    ResolvedProfile::build(profiles.detect(&tools, ""), &tools)
}

fn function(name: &str, properties: Value, required: &[&str]) -> Value {
    json!({"type": "function", "function": {"name": name, "description": "x",
        "parameters": {"type": "object", "properties": properties, "required": required}}})
}

/// Issue 18 item 6: a shell among the tools of an unknown scaffold (a shell-like name, one
/// required string parameter) is the model's `<bash>`, mapped back to its own name and
/// parameter; the form with the tool's own name and child tags is still read.
#[test]
fn a_generic_shell_reads_like_the_paper() {
    use asap_proxy::profile::Action;
    use asap_proxy::profile::{ScaffoldReply, ToolRole};
    let notes = function(
        "read_notes",
        json!({"topic": {"type": "string"}}),
        &["topic"],
    );
    let tools = generic_tools(json!([
        function("run_command", json!({"cmd": {"type": "string"}}), &["cmd"]),
        notes.clone(),
    ]));
    assert_eq!(tools.profile, "generic");
    let shell = tools.get("bash").expect("run_command is <bash>");
    assert_eq!(shell.scaffold_name.as_deref(), Some("run_command"));
    assert_eq!(
        shell.role,
        ToolRole::Shell {
            command_parameter: "cmd".into()
        }
    );
    let expected = Action::Call {
        tag: "bash".into(),
        arguments: [("cmd".to_string(), json!("ls -la"))]
            .into_iter()
            .collect::<serde_json::Map<_, _>>()
            .into(),
    };
    for text in [
        "I list the files.\n\n<bash>ls -la</bash>\n",
        "I list the files.\n\n<bash>\nls -la\n</bash>\n",
        "I list the files.\n\n<bash><cmd>ls -la</cmd></bash>\n",
        "I list the files.\n\n<run_command>ls -la</run_command>\n",
        "I list the files.\n\n<run_command>\n<cmd>ls -la</cmd>\n</run_command>\n",
    ] {
        let parsed = parse_completion(text, &tools);
        assert_eq!(parsed.outcome.as_ref().ok(), Some(&expected), "{text:?}");
        assert_eq!(
            tools.to_scaffold(parsed.outcome.as_ref().unwrap(), &parsed.thought),
            ScaffoldReply::ToolCall {
                name: "run_command".into(),
                arguments: [("cmd".to_string(), json!("ls -la"))].into_iter().collect(),
            }
        );
    }
    // Optional parameters beside the command are allowed and stay child tags.
    let tools = generic_tools(json!([
        function(
            "shell",
            json!({"command": {"type": "string"}, "timeout": {"type": "integer"}}),
            &["command"]
        ),
        notes.clone(),
    ]));
    assert!(matches!(
        tools.get("bash").unwrap().role,
        ToolRole::Shell { .. }
    ));
    let parsed = parse_completion(
        "<bash><command>sleep 1</command><timeout>5</timeout></bash>",
        &tools,
    );
    assert_eq!(
        parsed.outcome.unwrap(),
        Action::Call {
            tag: "bash".into(),
            arguments: [
                ("command".to_string(), json!("sleep 1")),
                ("timeout".to_string(), json!(5))
            ]
            .into_iter()
            .collect::<serde_json::Map<_, _>>()
            .into(),
        }
    );
    // Not a shell: two required parameters, a required parameter that is neither a string nor
    // an argument vector of strings, no
    // required parameter, a name that is not a shell's, or `bash` taken by another tool.
    for (case, tools) in [
        (
            "bash with two required parameters",
            json!([
                function(
                    "bash",
                    json!({"command": {"type": "string"}, "cwd": {"type": "string"}}),
                    &["command", "cwd"]
                ),
                notes.clone()
            ]),
        ),
        (
            "an array command not of strings (an argument vector of strings is a shell: Codex)",
            json!([
                function(
                    "shell",
                    json!({"command": {"type": "array", "items": {"type": "integer"}}}),
                    &["command"]
                ),
                notes.clone()
            ]),
        ),
        (
            "nothing required",
            json!([
                function("run_command", json!({"cmd": {"type": "string"}}), &[]),
                notes.clone()
            ]),
        ),
        (
            "not a shell's name",
            json!([
                function("run_query", json!({"sql": {"type": "string"}}), &["sql"]),
                notes.clone()
            ]),
        ),
        (
            "bash is another tool",
            json!([
                function(
                    "shell",
                    json!({"command": {"type": "string"}}),
                    &["command"]
                ),
                function(
                    "bash",
                    json!({"a": {"type": "string"}, "b": {"type": "string"}}),
                    &["a", "b"]
                ),
            ]),
        ),
    ] {
        let tools = generic_tools(tools);
        assert_eq!(tools.profile, "generic", "{case}");
        assert!(
            tools
                .tools
                .iter()
                .all(|t| !matches!(t.role, ToolRole::Shell { .. })),
            "{case}: {:?}",
            tools.tools
        );
    }
    // A `bash` with two required parameters keeps one child tag per parameter.
    let tools = generic_tools(json!([
        function(
            "bash",
            json!({"command": {"type": "string"}, "cwd": {"type": "string"}}),
            &["command", "cwd"]
        ),
        notes.clone(),
    ]));
    let parsed = parse_completion(
        "<bash>\n<command>ls</command>\n<cwd>/tmp</cwd>\n</bash>",
        &tools,
    );
    assert_eq!(
        parsed.outcome.unwrap(),
        Action::Call {
            tag: "bash".into(),
            arguments: [
                ("command".to_string(), json!("ls")),
                ("cwd".to_string(), json!("/tmp"))
            ]
            .into_iter()
            .collect::<serde_json::Map<_, _>>()
            .into(),
        }
    );
}

/// Known scaffolds keep their profiles: the generic shell rule changes nothing for them.
#[test]
fn known_scaffolds_are_unaffected_by_the_generic_shell() {
    use asap_proxy::profile::ToolRole;
    for (fixture, profile, shell) in [
        ("swe-agent-1.json", "swe-agent", Some("bash")),
        ("mini-swe-agent-1.json", "mini-swe-agent", Some("bash")),
        (
            "openhands-codeact-1.json",
            "openhands-codeact",
            Some("execute_bash"),
        ),
        ("openhands-sdk-1.json", "openhands-sdk", Some("terminal")),
        ("browsecomp-plus-1.json", "browsecomp-plus", None),
    ] {
        let tools = tools_for(fixture);
        assert_eq!(tools.profile, profile);
        let shells: Vec<_> = tools
            .tools
            .iter()
            .filter(|t| matches!(t.role, ToolRole::Shell { .. }))
            .map(|t| t.scaffold_name.as_deref().unwrap())
            .collect();
        assert_eq!(shells, shell.into_iter().collect::<Vec<_>>(), "{fixture}");
    }
}

/// Unfinished or malformed closing tags other than a cut-off closer (what a base model writes
/// when it misspells or half-writes the tag and the backend stops on another stop string)
/// never reach a command either.
#[test]
fn malformed_closing_tags_never_reach_a_command() {
    use asap_proxy::parse::{parse_for, with_closing_stop};
    use asap_proxy::render::Format;
    let tools = tools_for("swe-agent-1.json");
    for tail in [
        "</bash\n", "</sub", "</submit", "</Bas", "</BASH", "</bash >", "</Bash>",
    ] {
        let text = format!("Run it.\n\n<bash>ls -la{tail}");
        let (full, _) = with_closing_stop(Format::MarkdownXml, &text, Some("stop"), None, &tools);
        let parsed = parse_for(Format::MarkdownXml, &full, &tools);
        match &parsed.outcome {
            Ok(asap_proxy::profile::Action::Call { arguments, .. }) => {
                assert_eq!(arguments["command"], json!("ls -la"), "{tail:?}")
            }
            other => panic!("{tail:?}: {other:?}"),
        }
    }
    // A parameter's own closing tag inside an editor action stays.
    let editor = "<str_replace_editor>\n<command>view</command>\n<path>/a.py</path>\n";
    let (full, closer) = with_closing_stop(Format::MarkdownXml, editor, Some("stop"), None, &tools);
    assert_eq!(closer.as_deref(), Some("</str_replace_editor>"));
    assert!(full.contains("<path>/a.py</path>"), "{full}");
}

/// A generic shell's optional parameters are not lost: documented beside the command, and a
/// history call that used one is written with child tags (which the parser reads back); a
/// call with the command alone stays `<bash>COMMAND</bash>`.
#[test]
fn a_generic_shells_optional_parameters_are_kept() {
    use asap_proxy::profile::Action;
    use asap_proxy::render::Format;
    let tools = generic_tools(json!([function(
        "Bash",
        json!({"cmd": {"type": "string"}, "timeout": {"type": "integer", "description": "seconds"}}),
        &["cmd"]
    )]));
    assert!(tools.generic_shell);
    let call = |args: Value| Action::Call {
        tag: "bash".into(),
        arguments: std::sync::Arc::new(args.as_object().unwrap().clone()),
    };
    assert_eq!(
        Format::Xml.action(&call(json!({"cmd": "ls"})), &tools),
        "<bash>ls</bash>"
    );
    let with_timeout = Format::Xml.action(&call(json!({"cmd": "ls", "timeout": 30})), &tools);
    assert!(
        with_timeout.contains("<cmd>ls</cmd>") && with_timeout.contains("<timeout>30</timeout>"),
        "{with_timeout}"
    );
    let parsed = asap_proxy::parse::parse_completion(&format!("Run.\n{with_timeout}\n"), &tools);
    match parsed.outcome {
        Ok(Action::Call { arguments, .. }) => {
            assert_eq!(arguments["cmd"], json!("ls"));
            assert_eq!(arguments["timeout"], json!(30));
        }
        other => panic!("{other:?}"),
    }
    // A known scaffold's shell is unaffected: SWE-agent's bash stays `<bash>…</bash>`.
    assert!(!tools_for("swe-agent-1.json").generic_shell);
}
