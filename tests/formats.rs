//! The four-way format ablation minus Markdown (issue 6): golden documents in every format,
//! parse ∘ render = identity per format, and nudges and prefixes over HTTP per format.

use asap_proxy::openai::chat::ChatCompletionRequest;
use asap_proxy::parse::parse_for;
use asap_proxy::profile::Action;
use asap_proxy::profile::{Profiles, ResolvedProfile};
use asap_proxy::render::{Format, FORMATS};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

use crate::parse::tools_for;
use crate::render::render_value_as;
use crate::util::backend::Scripted;
use crate::util::proxy::serve_with;
use crate::util::request;

#[test]
fn golden_render_cases_in_every_format() {
    for format in [Format::Xml, Format::Markdown, Format::Json] {
        insta::glob!("fixtures/render/*.json", |path| {
            let body: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
            let prompt = render_value_as(&body, format);
            assert!(prompt.ends_with(format.cue()));
            let stem = path.file_stem().unwrap().to_string_lossy();
            insta::with_settings!({snapshot_suffix => format!("{stem}.{}", format.name())}, {
                insta::assert_snapshot!(prompt);
            });
        });
    }
}

/// What a model writes after the cue: the thought, then the action, in `format`.
pub fn model_text(
    format: Format,
    thought: &str,
    action: &Action,
    tools: &ResolvedProfile,
) -> String {
    let action_text = format.action(action, tools);
    match format {
        Format::MarkdownXml => format!("{thought}\n\n{action_text}\n"),
        Format::Xml => format!("{thought}\n</thought>\n{action_text}\n"),
        Format::Markdown => format!("{thought}\n\n### Action\n{action_text}\n"),
        Format::Json => {
            let quoted = serde_json::to_string(thought).unwrap();
            format!("{},\"action\":{action_text}}}", &quoted[1..])
        }
    }
}

fn args(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// A generic tool set with one tool of the given name and string parameters.
fn generic_tools(tool: &str, params: &[String]) -> ResolvedProfile {
    let props: Map<String, Value> = params
        .iter()
        .map(|p| (p.clone(), json!({"type": "string"})))
        .collect();
    let body = json!({
        "messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": tool, "parameters": {"type": "object", "properties": props, "required": params}}}]
    });
    let request = ChatCompletionRequest::from_slice(body.to_string().as_bytes()).unwrap();
    let profiles = Profiles::builtin().unwrap();
    ResolvedProfile::build(
        profiles.detect(&request.tools, &request.detection_text()),
        &request.tools,
    )
}

/// Argument text with quotes, backslashes, newlines, markup (`<div>`, `</div>`) and
/// non-ASCII. Excluded: closing tags of the tool's own tags (the documented limit of the
/// tag formats), lines that start a tag or a step, fences, and `<<` (heredoc markers).
pub fn value_strategy() -> impl Strategy<Value = String> {
    proptest::string::string_regex(
        "([a-zA-Z0-9 \t\r\n<>&\"'\\\\/=._é😀{}:,-]|</div>|<div>|</b>){0,40}",
    )
    .unwrap()
    .prop_filter("no own closing tags or step markers", |s| {
        let own = [
            "</old_str",
            "</new_str",
            "</path",
            "</command",
            "</str_replace_editor",
            "</bash",
            "</observation",
            "</thought",
            "</step",
            "</parameter",
            "</function",
        ];
        !own.iter().any(|t| s.contains(t))
            && !s
                .split("</")
                .skip(1)
                .any(|rest| !(rest.starts_with("div>") || rest.starts_with("b>")))
            && !s.contains("<<")
            && !s.lines().any(|l| {
                let t = l.trim_start_matches([' ', '\t']);
                t.starts_with('<')
                    || t.starts_with("## Thinking")
                    || t.starts_with("```")
                    || t.starts_with("~~~")
            })
    })
}

#[test]
fn fixed_actions_round_trip_in_every_format() {
    let tools = tools_for("swe-agent-1.json");
    let actions = [
        Action::Call {
            tag: "bash".into(),
            arguments: std::sync::Arc::new(args(&[(
                "command",
                json!("grep -n \"x\" a.py && echo 'ok'"),
            )])),
        },
        Action::Submit { message: None },
        Action::Call {
            tag: "str_replace_editor".into(),
            arguments: std::sync::Arc::new(args(&[
                ("command", json!("view")),
                ("path", json!("/t/a.py")),
                ("view_range", json!([1, 20])),
            ])),
        },
        Action::Call {
            tag: "str_replace_editor".into(),
            arguments: std::sync::Arc::new(args(&[
                ("command", json!("insert")),
                ("path", json!("/t/a.py")),
                ("insert_line", json!(3)),
                ("new_str", json!("x = 1\n")),
            ])),
        },
    ];
    for format in FORMATS {
        for action in &actions {
            let text = model_text(format, "Because.", action, &tools);
            let parsed = parse_for(format, &text, &tools);
            assert_eq!(parsed.outcome.as_ref(), Ok(action), "{format:?}: {text}");
            assert_eq!(parsed.thought, "Because.", "{format:?}");
        }
    }
}

#[test]
fn json_failures_are_classified() {
    let tools = tools_for("swe-agent-1.json");
    let class = |text: &str| {
        parse_for(Format::Json, text, &tools)
            .outcome
            .unwrap_err()
            .class
            .as_str()
    };
    assert_eq!(class("Only thinking.\"}"), "no_action");
    assert_eq!(class("Cut short"), "unclosed_tag");
    assert_eq!(
        class("x\",\"action\":{\"tool\":\"bash\",\"arguments\":{\"comm"),
        "unclosed_tag"
    );
    assert_eq!(
        class("x\",\"action\":{\"tool\":\"python\",\"arguments\":{}}}"),
        "unknown_tool"
    );
    assert_eq!(class("x\",\"action\":{\"tool\":\"str_replace_editor\",\"arguments\":{\"command\":\"view\"}}}"), "missing_parameter");
    assert_eq!(class("x\",\"action\":{\"tool\":\"str_replace_editor\",\"arguments\":{\"command\":\"drop\",\"path\":\"/a\"}}}"), "invalid_parameter");
    // Spaces the model may add are fine, and text after the step is dropped.
    let ok = parse_for(Format::Json, "x\", \"action\": {\"tool\": \"bash\", \"arguments\": {\"command\": \"ls\"}}}\n{\"thought\":\"more", &tools);
    assert!(ok.outcome.is_ok() && ok.dropped_bytes > 0, "{ok:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    #[test]
    fn any_editor_values_round_trip_in_every_format(old in value_strategy(), new in value_strategy(), path in "[a-z/._]{1,20}") {
        let tools = tools_for("swe-agent-1.json");
        let action = Action::Call {
            tag: "str_replace_editor".into(),
            arguments: std::sync::Arc::new(args(&[("command", json!("str_replace")), ("path", json!(path)), ("old_str", json!(old)), ("new_str", json!(new))])),
        };
        for format in FORMATS {
            let text = model_text(format, "Edit.", &action, &tools);
            prop_assert_eq!(parse_for(format, &text, &tools).outcome, Ok(action.clone()), "{:?}", format);
        }
    }

    #[test]
    fn random_tool_schemas_round_trip_in_every_format(
        tool in "[a-z]{3,8}",
        names in proptest::collection::btree_set("[a-z]{2,7}", 1..4),
        values in proptest::collection::vec(value_strategy().prop_filter("non-blank", |s| !s.trim().is_empty()), 4),
    ) {
        let reserved = ["observation", "submit", "thought", "step", "bash", "task", "tool", "tools", "div"];
        prop_assume!(!reserved.contains(&tool.as_str()) && names.iter().all(|n| !reserved.contains(&n.as_str()) && n != &tool));
        let names: Vec<String> = names.into_iter().collect();
        let tools = generic_tools(&tool, &names);
        let arguments: Map<String, Value> = names.iter().zip(&values).map(|(n, v)| (n.clone(), json!(v))).collect();
        let action = Action::Call { tag: tool.clone(), arguments: std::sync::Arc::new(arguments) };
        for format in FORMATS {
            let text = model_text(format, "Use it.", &action, &tools);
            prop_assert_eq!(parse_for(format, &text, &tools).outcome, Ok(action.clone()), "{:?}: {}", format, text);
        }
    }

    #[test]
    fn any_string_survives_json(cmd in "\\PC{1,60}") {
        prop_assume!(!cmd.trim().is_empty());
        let tools = tools_for("swe-agent-1.json");
        let action = Action::Call { tag: "bash".into(), arguments: std::sync::Arc::new(args(&[("command", json!(cmd))])) };
        let text = model_text(Format::Json, "Any text: \"quotes\", \\ and </observation>", &action, &tools);
        prop_assert_eq!(parse_for(Format::Json, &text, &tools).outcome, Ok(action));
    }
}

/// Nudges (both kinds) and the demonstration prefix work in every format, with append-only
/// prompts across turns and regenerations.
#[tokio::test]
async fn nudges_and_prefixes_in_every_format() {
    let tools = tools_for("swe-agent-1.json");
    let bash = |c: &str| Action::Call {
        tag: "bash".into(),
        arguments: std::sync::Arc::new(args(&[("command", json!(c))])),
    };
    let submit = Action::Submit { message: None };
    for format in FORMATS {
        let script = [
            ("Done?", &submit),
            ("Look.", &bash("ls")),
            ("Again.", &bash("ls")),
            ("Else.", &bash("pwd")),
        ]
        .iter()
        .map(|(t, a)| Scripted::text(&model_text(format, t, a, &tools)))
        .collect();
        let (backend, proxy) = serve_with(script, |a| a.prompt.format = Some(format)).await;
        let mut body = request("swe-agent-1");
        let (_, r1) = proxy.post(&body).await;
        let call = &r1["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(
            call["function"]["arguments"], "{\"command\":\"ls\"}",
            "{format:?}: {r1}"
        );
        let id = call["id"].as_str().unwrap().to_string();
        let messages = body["messages"].as_array_mut().unwrap();
        messages.push(r1["choices"][0]["message"].clone());
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": "a.py"}));
        let (_, r2) = proxy.post(&body).await;
        let call = &r2["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(
            call["function"]["arguments"], "{\"command\":\"pwd\"}",
            "{format:?}"
        );
        assert!(
            call["id"].as_str().unwrap().contains("_1_s0r1_"),
            "{format:?}: {call}"
        );
        let prompts = backend.prompts();
        assert_eq!(prompts.len(), 4);
        for pair in prompts.windows(2) {
            assert!(
                pair[1].starts_with(pair[0].strip_suffix(format.cue()).unwrap()),
                "{format:?}"
            );
        }
        assert!(
            prompts[0].contains("cat -n shop/cart.py"),
            "{format:?}: the demonstration prefix"
        );
        assert_eq!(
            backend.requests()[0]["stop"],
            json!(format.stops(&tools)),
            "{format:?}"
        );
        let records = proxy.first_trace();
        assert_eq!(records[0]["data"]["format"], format.name());
    }
}
