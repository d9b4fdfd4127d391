//! Property tests (issue 9 item 7) that complement the fuzz targets in `fuzz/`: the
//! shell-write classifier (read-only commands never edit, any write anywhere in a list or
//! pipeline is an edit, no panic on any text), round trips the golden and format tests do not
//! cover (typed parameters, shell commands in every format, scaffold tool call → prompt →
//! parse → the same tool call), and totality of parse and render on hostile input.

use asap_proxy::backend::BackendCompletion;
use asap_proxy::config::{ProfileChoice, PromptConfig};
use asap_proxy::conversation::Conversation;
use asap_proxy::openai::chat::ChatCompletionRequest;
use asap_proxy::parse::parse_for;
use asap_proxy::pipeline::prepare;
use asap_proxy::policy::shell_writes_files;
use asap_proxy::prefix::PrefixStore;
use asap_proxy::profile::Action;
use asap_proxy::profile::{Profiles, ResolvedProfile};
use asap_proxy::render::{Renderer, FORMATS};
use asap_proxy::respond;
use asap_proxy::session::{CallId, NudgeState, SessionId, SessionIndex};
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{json, Map, Value};

use crate::formats::{model_text, value_strategy};
use crate::parse::tools_for;

/// Cases per property: `default`, or `PROPTEST_CASES` for a longer run
/// (`PROPTEST_CASES=10000 cargo test --test integration props::`).
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ---------------------------------------------------------------------------------------
// The edit classifier (src/policy/edit.rs).

/// A word that is a plain argument: letters, digits, `_`, `.`, `/`, or a harmless flag.
fn plain_word() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9_./]{1,12}",
        select(vec![
            "-n",
            "-l",
            "-la",
            "-r",
            "-rn",
            "-5",
            "-c",
            "--color=never"
        ])
        .prop_map(String::from),
    ]
}

/// A quoted argument whose text may hold anything a shell would otherwise act on: `>`, `|`,
/// `&&`, `;`, `#`, `<<`, `rm -rf`, `sed -i`, newlines. Double quotes exclude `$`, `` ` ``, `\`
/// and `"` (inside them `$(…)` would run a command).
fn quoted_word() -> impl Strategy<Value = String> {
    let hostile = "([a-zA-Z0-9 \t\n<>|&;()#*?!=.,/{}~%^+:\\[\\]-]|> out|>> f\\.py|rm -rf x|sed -i s/a/b/ f|tee f|<<EOF|2>&1){0,12}";
    prop_oneof![
        proptest::string::string_regex(&format!("({hostile}|\"|\\\\){{0,3}}"))
            .unwrap()
            .prop_map(|s| format!("'{s}'")),
        proptest::string::string_regex(&format!("({hostile}|'){{0,3}}"))
            .unwrap()
            .prop_map(|s| format!("\"{s}\"")),
    ]
}

/// A command that only reads: `cat`, `grep`, `ls`, `head`, `tail`, `wc`, `diff`, `echo`,
/// `git status|log|diff|show`, ..., with plain or quoted arguments.
fn reader() -> impl Strategy<Value = String> {
    let program = select(vec![
        "cat",
        "grep",
        "ls",
        "head",
        "tail",
        "wc",
        "diff",
        "echo",
        "sort",
        "uniq",
        "git status",
        "git log",
        "git diff",
        "git show",
        "nl",
        "stat",
    ]);
    let arg = prop_oneof![plain_word(), quoted_word()];
    (program, proptest::collection::vec(arg, 0..4)).prop_map(|(p, args)| {
        let mut c = p.to_string();
        for a in args {
            c.push(' ');
            c.push_str(&a);
        }
        c
    })
}

/// A reading command, possibly with a redirection that writes no file.
fn reading_command() -> impl Strategy<Value = String> {
    let redirect = select(vec![
        "",
        " 2>&1",
        " 2>/dev/null",
        " > /dev/null",
        " &>/dev/null",
        " >&2",
        " < input.txt",
    ]);
    (reader(), redirect).prop_map(|(c, r)| c + r)
}

fn separator() -> impl Strategy<Value = &'static str> {
    select(vec![" | ", " && ", " || ", "; ", "\n", " & "])
}

/// Commands joined into a list or pipeline.
fn chain(commands: Vec<String>, separators: &[&str]) -> String {
    let mut out = String::new();
    for (i, c) in commands.iter().enumerate() {
        if i > 0 {
            out.push_str(separators[(i - 1) % separators.len()]);
        }
        out.push_str(c);
    }
    out
}

/// A file name in the working tree (never one of the sinks such as `/dev/null`).
fn file_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9_]{0,7}(\\.[a-z]{1,3})?",
        "(src|/tmp|/repo)/[a-z]{1,8}\\.py",
        "'[a-z ]{1,8}\\.txt'",
    ]
}

/// A command that writes `file`: a redirection, `tee`, `sed -i`.
fn writing_command() -> impl Strategy<Value = String> {
    (reader(), file_name(), 0..6usize).prop_map(|(reader, file, how)| match how {
        0 => format!("{reader} > {file}"),
        1 => format!("{reader} >> {file}"),
        2 => format!("{reader} | tee {file}"),
        3 => format!("{reader} | tee -a {file}"),
        4 => format!("sed -i 's/a/b/' {file}"),
        _ => format!("sed -i.bak -e 's/x/y/g' {file}"),
    })
}

/// Token soup for the classifier: the lexer's special characters and words.
fn shell_soup() -> impl Strategy<Value = String> {
    let token = select(vec![
        " ",
        "\n",
        "\t",
        "'",
        "\"",
        "\\",
        "$",
        "$(",
        "$((",
        "((",
        "))",
        "(",
        ")",
        "`",
        "[[",
        "]]",
        "[",
        "]",
        ">",
        ">>",
        ">|",
        ">&",
        "&>",
        "2>&1",
        "<",
        "<<",
        "<<-",
        "<<<",
        "EOF",
        "'EOF'",
        "|",
        "||",
        "&",
        "&&",
        ";",
        "#",
        "=",
        "x=1",
        "-",
        "-i",
        "-c",
        "-exec",
        "{}",
        "+",
        "sed",
        "tee",
        "rm",
        "cat",
        "bash",
        "sh",
        "python3",
        "-c",
        "open(",
        "'w'",
        ",",
        "find",
        "git",
        "checkout",
        "-b",
        "timeout",
        "10",
        "sudo",
        "-u",
        "xargs",
        "env",
        "a.py",
        "/dev/null",
        "é",
        "😀",
        "\u{0}",
    ]);
    proptest::collection::vec(token, 0..40).prop_map(|t| t.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    #[test]
    fn reading_commands_are_never_edits(
        commands in proptest::collection::vec(reading_command(), 1..5),
        separators in proptest::collection::vec(separator(), 1..5),
    ) {
        let command = chain(commands, &separators);
        prop_assert!(!shell_writes_files(&command), "classified as an edit: {command:?}");
    }

    #[test]
    fn a_write_anywhere_in_a_list_or_pipeline_is_an_edit(
        before in proptest::collection::vec(reading_command(), 0..3),
        write in writing_command(),
        after in proptest::collection::vec(reading_command(), 0..3),
        separators in proptest::collection::vec(separator(), 1..6),
    ) {
        let commands: Vec<String> = before.into_iter().chain([write]).chain(after).collect();
        let command = chain(commands, &separators);
        prop_assert!(shell_writes_files(&command), "not classified as an edit: {command:?}");
    }

    #[test]
    fn the_classifier_never_panics(text in "\\PC{0,200}", soup in shell_soup(), bytes in proptest::collection::vec(any::<char>(), 0..100)) {
        let _ = shell_writes_files(&text);
        let _ = shell_writes_files(&soup);
        let _ = shell_writes_files(&bytes.into_iter().collect::<String>());
    }
}

// ---------------------------------------------------------------------------------------
// Round trips: an action written by a format's writer parses back to the same action.

/// One parameter of a random schema and a value that fits it.
#[derive(Debug, Clone)]
struct TypedParam {
    schema: Value,
    value: Value,
}

fn typed_param() -> impl Strategy<Value = TypedParam> {
    prop_oneof![
        command_strategy().prop_map(|s| TypedParam {
            schema: json!({"type": "string"}),
            value: json!(s),
        }),
        any::<i64>().prop_map(|i| TypedParam {
            schema: json!({"type": "integer"}),
            value: json!(i),
        }),
        // Decimals as a scaffold or a model writes them (`0.5`, `-12.25`, `30`). Numbers with
        // 16-17 significant digits can come back one ULP off in the JSON format: serde_json
        // parses floats without its `float_roundtrip` feature (see docs/reliability.md).
        (any::<i32>(), 0..7u32)
            .prop_map(|(m, d)| f64::from(m) / 10f64.powi(d as i32))
            .prop_map(|f| TypedParam {
                schema: json!({"type": "number"}),
                value: json!(f),
            }),
        any::<bool>().prop_map(|b| TypedParam {
            schema: json!({"type": "boolean"}),
            value: json!(b),
        }),
        (
            proptest::collection::btree_set("[a-z][a-z_]{0,7}", 1..5),
            any::<prop::sample::Index>()
        )
            .prop_map(|(values, pick)| {
                let values: Vec<String> = values.into_iter().collect();
                let chosen = pick.get(&values).clone();
                TypedParam {
                    schema: json!({"type": "string", "enum": values}),
                    value: json!(chosen),
                }
            }),
        proptest::collection::vec(any::<i32>(), 0..5).prop_map(|v| TypedParam {
            schema: json!({"type": "array", "items": {"type": "integer"}}),
            value: json!(v),
        }),
        proptest::collection::vec(command_strategy(), 0..3).prop_map(|v| TypedParam {
            schema: json!({"type": "array", "items": {"type": "string"}}),
            value: json!(v),
        }),
        (proptest::collection::btree_map("[a-z]{1,5}", any::<i32>(), 0..3)).prop_map(|m| {
            TypedParam {
                schema: json!({"type": "object"}),
                value: json!(m),
            }
        }),
    ]
}

/// A tool `name` with the given parameters; present ones are required, absent optional.
fn typed_tools(name: &str, params: &[(String, TypedParam, bool)]) -> ResolvedProfile {
    let properties: Map<String, Value> = params
        .iter()
        .map(|(n, p, _)| (n.clone(), p.schema.clone()))
        .collect();
    let required: Vec<&String> = params
        .iter()
        .filter(|(_, _, present)| *present)
        .map(|(n, _, _)| n)
        .collect();
    let body = json!({
        "messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": properties, "required": required}}}]
    });
    let request = ChatCompletionRequest::from_slice(body.to_string().as_bytes()).unwrap();
    let profiles = Profiles::builtin().unwrap();
    ResolvedProfile::build(
        profiles.detect(&request.tools, &request.detection_text()),
        &request.tools,
    )
}

fn call_id() -> CallId {
    CallId {
        session: SessionId::from_recorded("0123456789ab").unwrap(),
        step: 0,
        nudges: NudgeState::default(),
    }
}

fn completion(text: &str) -> BackendCompletion {
    BackendCompletion::stopped(text, "m")
}

/// A shell command that survives every format: no line starting a tag, step or fence.
fn command_strategy() -> impl Strategy<Value = String> {
    value_strategy().prop_filter("non-blank", |s| !s.trim().is_empty())
}

/// Scaffold tool calls (name, arguments) of the fixture requests, with a random command or
/// edit, as a scaffold sends them back in its history.
fn scaffold_call() -> impl Strategy<Value = (&'static str, &'static str, Map<String, Value>)> {
    let shell = (
        select(vec![
            ("swe-agent-1.json", "bash"),
            ("mini-swe-agent-1.json", "bash"),
            ("openhands-codeact-1.json", "execute_bash"),
            ("openhands-sdk-1.json", "terminal"),
        ]),
        command_strategy(),
    )
        .prop_map(|((fixture, tool), command)| {
            let mut args = Map::new();
            args.insert("command".into(), json!(command));
            (fixture, tool, args)
        });
    let edit = (
        select(vec![
            ("swe-agent-1.json", "str_replace_editor"),
            ("openhands-codeact-1.json", "str_replace_editor"),
            ("openhands-sdk-1.json", "file_editor"),
        ]),
        "/[a-z]{1,8}/[a-z_]{1,8}\\.py",
        value_strategy(),
        value_strategy(),
    )
        .prop_map(|((fixture, tool), path, old, new)| {
            let mut args = Map::new();
            args.insert("command".into(), json!("str_replace"));
            args.insert("path".into(), json!(path));
            args.insert("old_str".into(), json!(old));
            args.insert("new_str".into(), json!(new));
            (fixture, tool, args)
        });
    prop_oneof![shell, edit]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(128)))]

    #[test]
    fn typed_parameters_round_trip_in_every_format(
        tool in "t_[a-z]{2,6}",
        params in proptest::collection::btree_map("p_[a-z]{1,6}", (typed_param(), any::<bool>()), 1..6),
    ) {
        let params: Vec<(String, TypedParam, bool)> =
            params.into_iter().map(|(n, (p, present))| (n, p, present)).collect();
        let tools = typed_tools(&tool, &params);
        let arguments: Map<String, Value> = params
            .iter()
            .filter(|(_, _, present)| *present)
            .map(|(n, p, _)| (n.clone(), p.value.clone()))
            .collect();
        let action = Action::Call { tag: tool.clone(), arguments: std::sync::Arc::new(arguments) };
        for format in FORMATS {
            let text = model_text(format, "Typed.", &action, &tools);
            let parsed = parse_for(format, &text, &tools);
            prop_assert_eq!(parsed.outcome, Ok(action.clone()), "{:?}: {}", format, text);
        }
    }

    #[test]
    fn shell_commands_round_trip_in_every_format(command in command_strategy()) {
        let tools = tools_for("swe-agent-1.json");
        let mut arguments = Map::new();
        arguments.insert("command".into(), json!(command));
        let action = Action::Call { tag: "bash".into(), arguments: std::sync::Arc::new(arguments) };
        for format in FORMATS {
            let text = model_text(format, "Run it.", &action, &tools);
            let parsed = parse_for(format, &text, &tools);
            prop_assert_eq!(parsed.outcome, Ok(action.clone()), "{:?}: {}", format, text);
            prop_assert_eq!(parsed.thought.as_str(), "Run it.", "{:?}", format);
        }
    }

    /// A scaffold's tool call in its history becomes a step of the conversation; the step's
    /// action, written the way the prompt shows it, parses back and is answered as the same
    /// scaffold tool call (name and arguments), in every format.
    #[test]
    fn scaffold_tool_calls_survive_history_render_parse_and_reply((fixture, tool, args) in scaffold_call()) {
        let mut body: Value = serde_json::from_slice(
            &std::fs::read(crate::util::fixture_path(&format!("requests/{fixture}"))).unwrap(),
        )
        .unwrap();
        let messages = body["messages"].as_array_mut().unwrap();
        messages.push(json!({"role": "assistant", "content": "I act.", "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": tool, "arguments": Value::Object(args.clone()).to_string()}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "ok"}));
        let request = ChatCompletionRequest::from_slice(body.to_string().as_bytes()).unwrap();
        let tools = tools_for(fixture);
        let conversation = Conversation::from_messages(&request.messages, &tools);
        let action = conversation.steps.last().and_then(|s| s.action.clone()).unwrap();
        for format in FORMATS {
            let text = model_text(format, "Again.", &action, &tools);
            let parsed = parse_for(format, &text, &tools);
            prop_assert_eq!(parsed.outcome.as_ref(), Ok(&action), "{:?}: {}", format, text);
            let reply = respond::reply(&parsed, &completion(&text), &tools, &call_id(), true);
            let call = reply.tool_call.unwrap();
            prop_assert_eq!(call.function.name.as_str(), tool, "{:?}", format);
            let sent: Map<String, Value> = serde_json::from_str(&call.function.arguments).unwrap();
            for (key, value) in &args {
                prop_assert_eq!(sent.get(key), Some(value), "{:?}: {} of {}", format, key, tool);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Totality: parse and render never panic on hostile input (the fuzz targets' properties, run
// in every `cargo test`).

/// Token soup of every format's markup and the fixture tools' tags.
fn completion_soup() -> impl Strategy<Value = String> {
    let token = select(vec![
        "\n",
        "\r\n",
        " ",
        "\t",
        "<",
        ">",
        "/>",
        "</",
        "=\"",
        "\"",
        "'",
        "\\",
        "```",
        "```bash\n",
        "~~~",
        "## Thinking",
        "### Action",
        "### Observation",
        "# Trajectory",
        "<observation>",
        "</observation>",
        "<step>",
        "</step>",
        "<thought>",
        "</thought>",
        "<bash>",
        "</bash>",
        "<command>",
        "</command>",
        "<str_replace_editor>",
        "</str_replace_editor>",
        "<path>",
        "</path>",
        "<old_str>",
        "</old_str>",
        "<new_str>",
        "</new_str>",
        "<view_range>",
        "</view_range>",
        "[1, 20]",
        "<insert_line>",
        "3",
        "<submit/>",
        "<submit>",
        "</submit>",
        "<search>",
        "<query>",
        "<terminal>",
        "<finish>",
        "<think>",
        "<execute_bash>",
        "<task_tracker>",
        "<<EOF",
        "<<'EOF'",
        "EOF",
        "{\"thought\":\"",
        "\",\"action\":{",
        "\"tool\":\"bash\"",
        "\"arguments\":{",
        "\"command\":\"ls\"",
        "}",
        "{",
        "]",
        "[",
        ",",
        ":",
        "str_replace",
        "view",
        "ls -la",
        "x",
        "é",
        "😀",
        "\u{0}",
    ]);
    proptest::collection::vec(token, 0..60).prop_map(|t| t.concat())
}

/// Message text for random conversations: markup of the prompt and control characters.
fn message_text() -> impl Strategy<Value = String> {
    prop_oneof!["\\PC{0,30}", completion_soup(),]
}

/// A random but well-formed chat history: a task, then assistant turns with tool calls (known
/// or unknown tools; arguments JSON, not JSON, or not an object) and their results.
fn random_history() -> impl Strategy<Value = Vec<Value>> {
    let call = (
        select(vec![
            "bash",
            "str_replace_editor",
            "submit",
            "python",
            "",
            "</bash>",
        ]),
        prop_oneof![
            command_strategy().prop_map(|c| json!({"command": c}).to_string()),
            message_text(),
            Just("[1, 2]".to_string()),
            Just("{\"command\": \"view\", \"path\": \"/a\", \"view_range\": [1, -1]}".to_string()),
        ],
    );
    let turn = (
        message_text(),
        proptest::collection::vec(call, 0..3),
        message_text(),
    );
    (message_text(), proptest::collection::vec(turn, 0..4), any::<bool>()).prop_map(
        |(task, turns, feedback)| {
            let mut messages = vec![
                json!({"role": "system", "content": "You are an agent."}),
                json!({"role": "user", "content": task}),
            ];
            for (t, (thought, calls, result)) in turns.into_iter().enumerate() {
                let ids: Vec<String> = (0..calls.len()).map(|i| format!("call_{t}_{i}")).collect();
                let tool_calls: Vec<Value> = calls
                    .iter()
                    .zip(&ids)
                    .map(|((name, arguments), id)| {
                        json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
                    })
                    .collect();
                let mut assistant = json!({"role": "assistant", "content": thought});
                if !tool_calls.is_empty() {
                    assistant["tool_calls"] = Value::Array(tool_calls);
                }
                messages.push(assistant);
                for id in &ids {
                    messages.push(json!({"role": "tool", "tool_call_id": id, "content": result}));
                }
                if ids.is_empty() || feedback {
                    messages.push(json!({"role": "user", "content": result}));
                }
            }
            messages
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]

    #[test]
    fn parsing_never_panics_on_markup_soup(text in completion_soup()) {
        for fixture in ["swe-agent-1.json", "openhands-sdk-1.json", "browsecomp-plus-1.json"] {
            let tools = tools_for(fixture);
            for format in FORMATS {
                let parsed = parse_for(format, &text, &tools);
                prop_assert!(parsed.dropped_bytes <= text.len());
                let _ = respond::reply(&parsed, &completion(&text), &tools, &call_id(), true);
            }
        }
    }

    /// Any history renders in every format (with the built-in demonstration prefix), and the
    /// prompt ends with the format's cue.
    #[test]
    fn random_histories_render_in_every_format(messages in random_history()) {
        let mut body: Value = serde_json::from_slice(
            &std::fs::read(crate::util::fixture_path("requests/swe-agent-1.json")).unwrap(),
        )
        .unwrap();
        body["messages"] = Value::Array(messages);
        let request = ChatCompletionRequest::from_slice(body.to_string().as_bytes()).unwrap();
        let profiles = Profiles::builtin().unwrap();
        let renderer = Renderer::new().unwrap();
        let prefixes = PrefixStore::load(&[], 3).unwrap();
        for format in FORMATS {
            let config = PromptConfig { profile: ProfileChoice::Auto, format, prefixes: Vec::new(), tasks: Vec::new(), prefix_k: 3 };
            let sessions = SessionIndex::new(16);
            let prepared = prepare(&request, &Default::default(), &profiles, &renderer, &config, &sessions, &prefixes);
            let prepared = prepared.map_err(|e| TestCaseError::fail(format!("{format:?}: {e}")))?;
            prop_assert!(prepared.prompt.ends_with(format.cue()), "{:?}", format);
        }
    }
    /// The render cache gives what a whole render gives: a history grown message by message,
    /// then cut back and grown again at random lengths (a rewound or dropped turn, another
    /// rollout of the task), with the built-in demonstration prefix, in every format.
    #[test]
    fn cached_prompts_equal_whole_renders(
        messages in random_history(),
        cuts in proptest::collection::vec(0usize..64, 0..6),
    ) {
        let mut body: Value = serde_json::from_slice(
            &std::fs::read(crate::util::fixture_path("requests/swe-agent-1.json")).unwrap(),
        )
        .unwrap();
        let profiles = Profiles::builtin().unwrap();
        let cached = Renderer::new().unwrap();
        let whole = Renderer::new().unwrap().with_render_cache(0);
        let prefixes = PrefixStore::load(&[], 3).unwrap();
        let lengths: Vec<usize> = (2..=messages.len())
            .chain(cuts.iter().map(|c| 2 + c % (messages.len() - 1)))
            .collect();
        // Prompts that had frames.
        let mut framed = 0;
        for format in FORMATS {
            let config = PromptConfig { profile: ProfileChoice::Auto, format, prefixes: Vec::new(), tasks: Vec::new(), prefix_k: 3 };
            let sessions = SessionIndex::new(16);
            for &n in &lengths {
                body["messages"] = Value::Array(messages[..n].to_vec());
                let request = ChatCompletionRequest::from_slice(body.to_string().as_bytes()).unwrap();
                let prepare_with = |renderer: &Renderer| {
                    prepare(&request, &Default::default(), &profiles, renderer, &config, &sessions, &prefixes)
                        .map_err(|e| TestCaseError::fail(format!("{format:?}: {e}")))
                };
                let from_cache = prepare_with(&cached)?;
                let rendered_whole = prepare_with(&whole)?;
                prop_assert_eq!(&from_cache.prompt, &rendered_whole.prompt, "{:?} after {} messages", format, n);
                // The backend body's Content-Length comes from the escaped length kept with
                // it, its prompt from the escaped frames (made at a conversation's first
                // extension, extended turn by turn).
                let held = cached.prompt_held(&from_cache.prompt).unwrap();
                let mut escaped = Vec::new();
                asap_proxy::util::push_json_escaped(&mut escaped, from_cache.prompt.as_bytes());
                prop_assert_eq!(held.json_len, escaped.len());
                framed += usize::from(held.escaped.is_some());
                if let Some(frames) = held.escaped {
                    prop_assert_eq!(frames.frames().concat(), escaped);
                }
                prop_assert!(whole.prompt_held(&rendered_whole.prompt).is_none());
            }
        }
        let stats = cached.render_cache_stats();
        prop_assert_eq!(whole.render_cache_stats().capacity, 0);
        prop_assert!(stats.capacity > 0);
        prop_assert_eq!(
            stats.hits + stats.extended + stats.misses,
            (lengths.len() * FORMATS.len()) as u64,
            "one lookup a prompt: {:?}", stats
        );
        prop_assert_eq!(framed > 0, stats.extended > 0, "{:?}", stats);
    }
}
