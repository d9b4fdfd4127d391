//! Prefix-cache stability (issue 8, part 5): drives 100-turn SWE-agent sessions through the
//! proxy's HTTP API and counts how many consecutive prompts start with the previous prompt
//! minus the trailing `## Thinking\n` cue (what vLLM's and SGLang's prefix caches need).
//!
//! Everything runs in this process on loopback: a scripted completion backend that records
//! every prompt, the proxy (`asap_proxy::server::app`, the same router `serve` runs), and a
//! scaffold that plays SWE-agent: it posts the history, appends the proxy's tool call and a
//! generated observation of a few KiB (`benches/support/swe_agent.rs`), and posts again.
//! The backend's script makes every rule of the proxy fire once per session:
//!
//! - request 0: `<submit/>` before any edit → the submit nudge (generate again in the same
//!   request: two prompts for one request);
//! - request 30: the previous action again → the repeated-action nudge;
//! - request 50: no action at all → an unparsable turn answered with content; the scaffold
//!   keeps it and appends a format-error message as a user turn (mini-swe-agent, OpenHands);
//! - every other request: a new action (bash or str_replace_editor).
//!
//! Three sessions are driven: one with the built-in demonstration (`shell-demo`, the default
//! prefix of the swe-agent profile, rendered as `# Example trajectory`), one with the task
//! prefix of `tests/fixtures/prefixes` (matched by `X-ASAP-Task`, K=3 reference steps before
//! the live ones), and the latter again with a context window (`--context-length`, default
//! 32,768 tokens) that the history outgrows, so the proxy elides old observations: a prompt
//! that does not extend the previous one is then expected exactly where the trace's `context`
//! record shows the elision growing (the documented truncation), and nowhere else. The trace
//! of each session is checked too: every `step` record after the first should store its
//! prompt as a delta (`prefix_bytes > 0`, a shorter one after an elision).
//!
//! `cargo run --release --example prefix_cache -- --turns 100`

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

#[path = "../benches/support/swe_agent.rs"]
mod swe_agent;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use asap_proxy::config::Config;
use asap_proxy::config::ServeArgs;
use asap_proxy::openai::chat::Tool;
use asap_proxy::profile::Action;
use asap_proxy::profile::{Profiles, ResolvedProfile};
use asap_proxy::server::{app, AppState};
use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use serde_json::{json, Map, Value};

const CUE: &str = "## Thinking\n";

#[derive(Parser)]
struct Args {
    /// Requests per session (the scaffold's turns).
    #[arg(long, default_value_t = 100)]
    turns: usize,
    /// Directory with the task prefix (`inventory__inventory-1`).
    #[arg(long, default_value = "tests/fixtures/prefixes")]
    prefixes: PathBuf,
    /// Context length of the third session, tokens (the proxy estimates 2 bytes per token
    /// when the backend cannot count).
    #[arg(long, default_value_t = 131_072)]
    context_length: u32,
}

/// What a session is driven with.
#[derive(Clone, Copy)]
struct Setup {
    name: &'static str,
    task_prefix: bool,
    context_length: Option<u32>,
}

#[derive(Default)]
struct Backend {
    script: VecDeque<String>,
    prompts: Vec<String>,
}

type Shared = Arc<Mutex<Backend>>;

async fn complete(State(backend): State<Shared>, Json(body): Json<Value>) -> Json<Value> {
    let mut b = backend.lock().unwrap();
    b.prompts
        .push(body["prompt"].as_str().unwrap_or_default().to_string());
    let text = b
        .script
        .pop_front()
        .unwrap_or_else(|| "The script is empty.".to_string());
    Json(json!({
        "choices": [{"index": 0, "text": text, "finish_reason": "stop",
                     "stop_reason": "\n<observation>"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    }))
}

async fn models() -> Json<Value> {
    Json(json!({"object": "list", "data": [{"id": "scripted", "object": "model"}]}))
}

/// How many consecutive prompt pairs extend (prompt n+1 starts with prompt n minus the cue);
/// the pairs that do not, with the first differing byte.
fn extending(prompts: &[String]) -> (usize, Vec<(usize, String)>) {
    let mut ok = 0;
    let mut bad = Vec::new();
    for (i, pair) in prompts.windows(2).enumerate() {
        let stem = pair[0].strip_suffix(CUE).unwrap_or(&pair[0]);
        if pair[1].starts_with(stem) {
            ok += 1;
        } else {
            let at = stem
                .bytes()
                .zip(pair[1].bytes())
                .position(|(a, b)| a != b)
                .unwrap_or(stem.len().min(pair[1].len()));
            let from = at.saturating_sub(60);
            bad.push((
                i,
                format!(
                    "prompt {} does not extend prompt {i} (first difference at byte {at}: \
                     {:?} vs {:?})",
                    i + 1,
                    stem.get(from..(at + 60).min(stem.len())).unwrap_or(""),
                    pair[1]
                        .get(from..(at + 60).min(pair[1].len()))
                        .unwrap_or(""),
                ),
            ));
        }
    }
    (ok, bad)
}

struct Outcome {
    requests: usize,
    prompts: Vec<String>,
    /// Nudge records and unparsable steps found in the trace.
    nudges: usize,
    unparsable: usize,
    /// The session record's prefix: id and how it matched.
    prefix: String,
    trace_steps: usize,
    trace_deltas: usize,
    /// Per step record (one per completion call, in order): observations elided so far.
    elided: Vec<u64>,
}

async fn drive(args: &Args, setup: Setup) -> Outcome {
    let task_prefix = setup.task_prefix;
    let backend: Shared = Arc::default();
    let router = Router::new()
        .route("/v1/completions", post(complete))
        .route("/v1/models", get(models))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(backend.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    let log_dir = std::env::temp_dir().join(format!(
        "asap-prefix-cache-{}-{}",
        std::process::id(),
        setup.name.replace(' ', "-")
    ));
    let _ = std::fs::remove_dir_all(&log_dir);
    let mut serve = ServeArgs {
        backend: Some(format!("http://{backend_addr}/v1")),
        backend_model: Some("scripted".into()),
        log_dir: Some(log_dir.clone()),
        // The session is longer than the default step cap of 100 actions only with
        // `--turns` above 100; keep the cap out of the way.
        max_steps: Some(args.turns + 10),
        context_length: setup.context_length,
        ..ServeArgs::default()
    };
    // The built-in demonstration only: an empty directory of prefixes (the system's temp
    // directory may hold other programs' JSON files).
    let no_prefixes = tempfile::tempdir().unwrap();
    if task_prefix {
        serve.prompt.prefixes = vec![args.prefixes.clone()];
    } else {
        serve.prompt.prefixes = vec![no_prefixes.path().to_path_buf()];
    }
    let config = Config::resolve(&serve).unwrap();
    let state = Arc::new(AppState::from_config(&config).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app(state)).await.unwrap() });
    let url = format!("http://{proxy}/v1/chat/completions");
    let client = reqwest::Client::new();

    let mut rng = swe_agent::Rng::new(0xcafe + u64::from(task_prefix));
    let mut body = swe_agent::first_request(&mut rng, false);
    let tools: Vec<Tool> = serde_json::from_value(body["tools"].clone()).unwrap();
    let profiles = Profiles::builtin().unwrap();
    let toolset = ResolvedProfile::build(profiles.get("swe-agent").unwrap(), &tools);
    let write = |tool: &str, arguments: &Value| {
        let action = Action::Call {
            tag: tool.to_string(),
            arguments: std::sync::Arc::new(arguments.as_object().cloned().unwrap_or_else(Map::new)),
        };
        asap_proxy::render::Format::Xml.action(&action, &toolset)
    };

    let mut previous_action = String::new();
    for request in 0..args.turns {
        let (thought, tool, arguments, observation) = swe_agent::turn(&mut rng, request);
        let action = write(tool, &arguments);
        let step = format!("{thought}\n\n{action}\n");
        {
            let mut b = backend.lock().unwrap();
            match request {
                0 => {
                    b.script
                        .push_back("Nothing to change, I think.\n\n<submit/>\n".into());
                    b.script.push_back(step);
                }
                30 => {
                    b.script
                        .push_back(format!("Once more to be sure.\n\n{previous_action}\n"));
                    b.script.push_back(step);
                }
                50 => {
                    b.script.push_back(
                        "I am not sure what to do next; maybe look at the tests again.\n".into(),
                    );
                }
                _ => b.script.push_back(step),
            }
        }
        previous_action = action;
        let mut post = client.post(&url).json(&body);
        if task_prefix {
            post = post.header("X-ASAP-Task", "inventory__inventory-1");
        }
        let response: Value = post.send().await.unwrap().json().await.unwrap();
        let message = response["choices"][0]["message"].clone();
        let messages = body["messages"].as_array_mut().unwrap();
        match message["tool_calls"][0]["id"].as_str() {
            Some(id) => {
                let id = id.to_string();
                messages.push(message);
                messages.push(json!({"role": "tool", "tool_call_id": id,
                                     "content": format!("OBSERVATION:\n{observation}")}));
            }
            None => {
                assert!(
                    message["content"].is_string(),
                    "request {request}: {response}"
                );
                messages.push(message);
                messages.push(
                    json!({"role": "user", "content": "Your last output did not \
                    use any tool calls! Please make sure your output includes exactly one \
                    function call."}),
                );
            }
        }
    }
    let prompts = backend.lock().unwrap().prompts.clone();
    let (mut trace_steps, mut trace_deltas, mut nudges, mut unparsable) = (0, 0, 0, 0);
    let mut prefix = String::new();
    let mut elided = Vec::new();
    for entry in std::fs::read_dir(&log_dir).unwrap().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap();
        for line in text.lines() {
            let record: Value = serde_json::from_str(line).unwrap();
            if record["type"] == "session" {
                prefix = format!(
                    "{} ({})",
                    record["data"]["prefix"]["id"].as_str().unwrap_or("none"),
                    record["data"]["prefix"]["matched_by"]
                        .as_str()
                        .unwrap_or("-")
                );
            }
            if record["type"] == "nudge" {
                nudges += 1;
            }
            if record["type"] == "step" {
                trace_steps += 1;
                elided.push(
                    record["data"]["context"]["elided_observations"]
                        .as_u64()
                        .unwrap_or(0),
                );
                if record["data"]["parse"]["error"].is_object() {
                    unparsable += 1;
                }
                if record["data"]["prompt"]["prefix_bytes"].as_u64() > Some(0) {
                    trace_deltas += 1;
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&log_dir);
    Outcome {
        requests: args.turns,
        prompts,
        nudges,
        unparsable,
        prefix,
        trace_steps,
        trace_deltas,
        elided,
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    println!(
        "| session | prefix | requests | prompts | nudges | unparsable turns | extending pairs \
         | not extending: at an elision / other | trace records stored as delta |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut failed = false;
    for setup in [
        Setup {
            name: "demonstration",
            task_prefix: false,
            context_length: None,
        },
        Setup {
            name: "task prefix K=3",
            task_prefix: true,
            context_length: None,
        },
        Setup {
            name: "task prefix K=3, context window",
            task_prefix: true,
            context_length: Some(args.context_length),
        },
    ] {
        let out = drive(&args, setup).await;
        let (ok, bad) = extending(&out.prompts);
        // A pair that does not extend is documented when the elision grew between them.
        let grew = |i: usize| match (out.elided.get(i), out.elided.get(i + 1)) {
            (Some(a), Some(b)) => b > a,
            _ => false,
        };
        let at_elision = bad.iter().filter(|(i, _)| grew(*i)).count();
        let name = match setup.context_length {
            Some(n) => format!("{} ({n} tokens)", setup.name),
            None => setup.name.to_string(),
        };
        println!(
            "| {name} | {} | {} | {} | {} | {} | {ok} / {} | {at_elision} / {} | {} / {} |",
            out.prefix,
            out.requests,
            out.prompts.len(),
            out.nudges,
            out.unparsable,
            out.prompts.len().saturating_sub(1),
            bad.len() - at_elision,
            out.trace_deltas,
            out.trace_steps.saturating_sub(1),
        );
        for (i, line) in &bad {
            let why = if grew(*i) {
                "elision grew (documented)"
            } else {
                "UNEXPECTED"
            };
            eprintln!("{name}: {line} [{why}]");
        }
        failed |= bad.iter().any(|(i, _)| !grew(*i));
        if let (Some(first), Some(last)) = (out.prompts.first(), out.prompts.last()) {
            eprintln!(
                "{name}: first prompt {} bytes, last {} bytes, observations elided at the end: {}",
                first.len(),
                last.len(),
                out.elided.last().copied().unwrap_or(0)
            );
        }
    }
    if failed {
        std::process::exit(1);
    }
}
