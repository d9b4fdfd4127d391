//! Soak driver (docs/reliability.md item 8; run by `bench/soak.sh`).
//!
//! Runs `--concurrency` scaffold loops against a proxy for `--minutes`. Each loop runs
//! sessions one after another until the deadline; session `k` takes the scaffold
//! `KINDS[k % 8]` (SWE-agent, OpenHands SDK, OpenHands CodeAct, mini-swe-agent in tool and in
//! text mode, OpenHands CodeAct text mode, Terminus-2, BrowseComp-Plus over the Responses API),
//! streams when `(k / 8)` is odd, starts from that scaffold's recorded first request
//! (`tests/fixtures/requests/`, one of four task variants) and runs 5 to 15 turns: each turn
//! appends the reply and a tool result or user feedback in the scaffold's own shape, as the
//! scaffold would. Sessions end on the scaffold's finish action (submit, finish, mini's
//! completion command, Terminus' confirmed `task_complete`, a BrowseComp answer), on their
//! turn cap, or at the deadline (no new turn starts after it). Every request carries
//! `X-ASAP-Task: soak-<profile>-<variant>` and `X-ASAP-Run: <k>`. A failed request is retried
//! like the `openai` SDK does (429 after its `Retry-After`, 5xx after 0.5 s), up to 5 tries.
//!
//! Recorded: every response's status (for a stream, whether it ended with the error event),
//! latency, and per session the answered and failed requests; the proxy's VmRSS and VmHWM
//! (`/proc/<--proxy-pid>/status`), threads and open descriptors every `--sample-s` seconds.
//!
//! Checks after the run (each prints `PASS` or `FAIL`; the exit status is 1 on any `FAIL`):
//! - **statuses**: every failed request is a 429, 502 or 504 (or a stream's error event with
//!   those codes), and every stream ended with `[DONE]` / `response.completed`;
//! - **traces**: per session (task and run from the trace's session record), the step records
//!   that answered (`accept`, `terminate`) equal the requests answered, the `error` records
//!   equal the requests that failed, none is `aborted`, every line parses, the profile is the
//!   expected one, and every `error` record is explained by a fault the backend injected for
//!   that prompt (`GET {--backend}/soak/faults`: prompt SHA-256 and kind; the error message
//!   must fit the kind);
//! - **rss**: flat after the warm-up (see [`rss_verdict`]).
//!
//! `cargo run --release --example soak -- --proxy http://127.0.0.1:19012/v1 --minutes 10
//!  --concurrency 64 --log-dir DIR --proxy-pid PID --backend http://127.0.0.1:19011`

#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{json, Value};

#[derive(Parser, Clone)]
struct Args {
    /// Proxy base URL, with `/v1`.
    #[arg(long)]
    proxy: String,
    /// Length of the run, minutes (no new turn starts after it).
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// Concurrent scaffold loops.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// The proxy's trace directory (`--log-dir` of `serve`), checked after the run.
    #[arg(long)]
    log_dir: PathBuf,
    /// Process id of the proxy, for RSS samples.
    #[arg(long)]
    proxy_pid: Option<u32>,
    /// Soak backend base URL (without `/v1`), for its fault log.
    #[arg(long)]
    backend: Option<String>,
    /// Seconds between RSS samples.
    #[arg(long, default_value_t = 10)]
    sample_s: u64,
    /// Fewest turns per session.
    #[arg(long, default_value_t = 5)]
    min_turns: usize,
    /// Most turns per session.
    #[arg(long, default_value_t = 15)]
    max_turns: usize,
    /// Longest pause between turns (the scaffold running the tool), milliseconds; each pause
    /// is uniform in [think-ms-max / 4, think-ms-max].
    #[arg(long, default_value_t = 400)]
    think_ms_max: u64,
    /// Client timeout per request, seconds.
    #[arg(long, default_value_t = 120)]
    request_timeout_s: u64,
    /// Seed of the sessions' pseudo-random choices (turn caps, tool outputs).
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Write the Markdown summary here too.
    #[arg(long)]
    summary_md: Option<PathBuf>,
    /// Write the JSON summary here too.
    #[arg(long)]
    summary_json: Option<PathBuf>,
    /// Directory of the request fixtures.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/requests"))]
    fixtures: PathBuf,
}

// ----- scaffolds ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    SweAgent,
    OpenhandsSdk,
    OpenhandsCodeact,
    MiniTool,
    MiniText,
    OpenhandsText,
    Terminus,
    BrowsecompResponses,
}

const KINDS: [Kind; 8] = [
    Kind::SweAgent,
    Kind::OpenhandsSdk,
    Kind::OpenhandsCodeact,
    Kind::MiniTool,
    Kind::MiniText,
    Kind::OpenhandsText,
    Kind::Terminus,
    Kind::BrowsecompResponses,
];

impl Kind {
    /// The proxy profile expected to serve it.
    fn profile(self) -> &'static str {
        match self {
            Self::SweAgent => "swe-agent",
            Self::OpenhandsSdk => "openhands-sdk",
            Self::OpenhandsCodeact => "openhands-codeact",
            Self::MiniTool => "mini-swe-agent",
            Self::MiniText => "mini-swe-agent-text",
            Self::OpenhandsText => "openhands-codeact-text",
            Self::Terminus => "terminus-2",
            Self::BrowsecompResponses => "browsecomp-plus",
        }
    }

    /// Label in the summary (the profile, and the API where it is not chat).
    fn label(self) -> &'static str {
        match self {
            Self::BrowsecompResponses => "browsecomp-plus (responses)",
            other => other.profile(),
        }
    }

    fn fixture(self) -> &'static str {
        match self {
            Self::SweAgent => "swe-agent-1.json",
            Self::OpenhandsSdk => "openhands-sdk-1.json",
            Self::OpenhandsCodeact => "openhands-codeact-1.json",
            Self::MiniTool | Self::MiniText => "mini-swe-agent-1.json",
            Self::OpenhandsText => "openhands-codeact-text-1.json",
            Self::Terminus => "terminus-2-1.json",
            Self::BrowsecompResponses => "browsecomp-plus-1.json",
        }
    }
}

/// The first request of each kind, as sent (before the task variant and `stream`).
fn first_bodies(dir: &Path) -> HashMap<&'static str, Value> {
    let mut out = HashMap::new();
    for kind in KINDS {
        let path = dir.join(kind.fixture());
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let mut body: Value = serde_json::from_str(&text).unwrap();
        match kind {
            Kind::MiniText => {
                // mini-swe-agent's text-mode config: no tools, one fenced block per reply.
                body.as_object_mut().unwrap().remove("tools");
                body.as_object_mut().unwrap().remove("parallel_tool_calls");
                body["messages"][0]["content"] = json!(
                    "You are a helpful assistant that can interact with a computer.\n\nYour response must contain exactly ONE bash code block with ONE command (or commands connected with && or ||), in a fenced block tagged mswea_bash_command:\n\n```mswea_bash_command\nls -la\n```\n\nWhen you are done, run `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` on its own."
                );
            }
            Kind::BrowsecompResponses => {
                // The Responses form of the BrowseComp-Plus request: flat function tools.
                let tools: Vec<Value> = body["tools"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| {
                        let f = &t["function"];
                        json!({"type": "function", "name": f["name"], "description": f["description"],
                               "parameters": f["parameters"], "strict": f["strict"]})
                    })
                    .collect();
                let question = body["messages"][0]["content"].clone();
                body = json!({
                    "model": body["model"],
                    "instructions": "You are a deep-research agent with a search engine over a fixed corpus.",
                    "input": [{"role": "user", "content": question}],
                    "tools": tools,
                    "max_output_tokens": 2000,
                    "store": false,
                    "reasoning": {"effort": "low"},
                });
            }
            _ => {}
        }
        out.insert(kind.profile(), body);
    }
    out
}

/// Appends a task variant sentence to the first user message (four tasks per scaffold).
fn with_variant(mut body: Value, variant: usize) -> Value {
    let note = format!("\n\n(Task variant {variant}: keep the public API unchanged.)");
    let list = if body.get("input").is_some() {
        "input"
    } else {
        "messages"
    };
    let user = body[list]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|m| m["role"] == "user")
        .unwrap();
    match &mut user["content"] {
        Value::String(s) => s.push_str(&note),
        Value::Array(parts) => {
            let last = parts.last_mut().unwrap();
            let text = last["text"].as_str().unwrap_or_default().to_string() + &note;
            last["text"] = json!(text);
        }
        _ => {}
    }
    body
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A tool output of realistic size: mostly short, sometimes a long file or log.
fn observation(rng: &mut Rng, what: &str, k: usize, turn: usize) -> String {
    let lines = match rng.below(10) {
        0 => 0,
        1..=6 => 1 + rng.below(20),
        7 | 8 => 20 + rng.below(60),
        _ => 100 + rng.below(200),
    };
    let mut out = String::new();
    for i in 0..lines {
        let line = match rng.below(5) {
            0 => format!(
                "src/pkg/module_{}.py:{}:    total += line.quantity * line.unit_price",
                i % 17,
                10 + i
            ),
            1 => format!(
                "-rw-r--r-- 1 root root {:>6} Jun  1 12:{:02} file_{i}.py",
                rng.below(90_000),
                i % 60
            ),
            2 => format!("{:>6}\t    def method_{i}(self, value):  # {what}", i + 1),
            3 => format!(
                "tests/test_module.py::test_case_{i} PASSED                [{:>3}%]",
                (i * 100) / lines.max(1)
            ),
            _ => format!(
                "INFO session {k} turn {turn}: processed {} records in {} ms",
                rng.below(10_000),
                rng.below(500)
            ),
        };
        out.push_str(&line);
        out.push('\n');
    }
    if out.is_empty() {
        out.push_str("(no output)\n");
    }
    out
}

/// What a reply means to the scaffold loop.
enum Flow {
    Continue,
    Finished,
}

/// One session's conversation state.
struct Session {
    k: usize,
    kind: Kind,
    stream: bool,
    task: String,
    body: Value,
    rng: Rng,
    /// Terminus asked "are you sure?" after a `task_complete: true`.
    confirm_pending: bool,
}

const COMPLETE: &str = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT";

impl Session {
    fn new(k: usize, bodies: &HashMap<&'static str, Value>, seed: u64) -> Self {
        let kind = KINDS[k % KINDS.len()];
        let stream = (k / KINDS.len()) % 2 == 1;
        let variant = (k / (2 * KINDS.len())) % 4;
        let mut body = with_variant(bodies[kind.profile()].clone(), variant);
        body["stream"] = json!(stream);
        Self {
            k,
            kind,
            stream,
            task: format!("soak-{}-{variant}", kind.profile()),
            body,
            rng: Rng::new(seed ^ (k as u64).wrapping_mul(0x1000_0000_01b3)),
            confirm_pending: false,
        }
    }

    fn url(&self, proxy: &str) -> String {
        if self.kind == Kind::BrowsecompResponses {
            format!("{proxy}/responses")
        } else {
            format!("{proxy}/chat/completions")
        }
    }

    fn push(&mut self, message: Value) {
        let list = if self.kind == Kind::BrowsecompResponses {
            "input"
        } else {
            "messages"
        };
        self.body[list].as_array_mut().unwrap().push(message);
    }

    /// Appends the reply and the scaffold's next message; `Finished` on a finish action.
    fn absorb(&mut self, reply: Value, turn: usize) -> Flow {
        let (k, kind) = (self.k, self.kind);
        if kind == Kind::BrowsecompResponses {
            let items = reply["output"].as_array().cloned().unwrap_or_default();
            if !items.iter().any(|i| i["type"] == "function_call") {
                return Flow::Finished;
            }
            for item in items {
                let call = (item["type"] == "function_call").then(|| item["call_id"].clone());
                self.push(item);
                if let Some(call_id) = call {
                    let output = observation(&mut self.rng, "search hit", k, turn);
                    self.push(json!({"type": "function_call_output", "call_id": call_id, "output": output}));
                }
            }
            return Flow::Continue;
        }
        let message = reply;
        let content = message["content"].as_str().unwrap_or_default().to_string();
        let call = &message["tool_calls"][0];
        match kind {
            Kind::Terminus => {
                self.push(json!({"role": "assistant", "content": content}));
                let parsed: Option<Value> = serde_json::from_str(content.trim()).ok();
                let user = match parsed {
                    None => "Previous response had parsing errors:\nERROR: No valid JSON found in response\n\nPlease fix these issues and provide a proper JSON response.".to_string(),
                    Some(v) if v["task_complete"] == true => {
                        if self.confirm_pending {
                            return Flow::Finished;
                        }
                        self.confirm_pending = true;
                        "Current terminal state:\nroot@box:/app# \n\nAre you sure you want to mark the task as complete? This will trigger your solution to be graded and you won't be able to make any further corrections. If so, include \"task_complete\": true in your JSON response again.".to_string()
                    }
                    Some(_) => {
                        self.confirm_pending = false;
                        format!(
                            "New Terminal Output:\n\n{}root@box:/app# ",
                            observation(&mut self.rng, "terminal", k, turn)
                        )
                    }
                };
                self.push(json!({"role": "user", "content": user}));
            }
            Kind::MiniText => {
                let blocks: Vec<&str> = content.split("```mswea_bash_command\n").skip(1).collect();
                let user = match blocks.as_slice() {
                    [block] => {
                        let command = block.split("\n```").next().unwrap_or_default();
                        if command.trim_start().starts_with(COMPLETE) {
                            return Flow::Finished;
                        }
                        format!(
                            "<returncode>0</returncode>\n<output>\n{}</output>",
                            observation(&mut self.rng, command, k, turn)
                        )
                    }
                    _ => format!("Please always provide EXACTLY ONE action in triple backticks, found {} actions.\n\nPlease format your action in triple backticks as shown in <response_example>.", blocks.len()),
                };
                self.push(json!({"role": "assistant", "content": content}));
                self.push(json!({"role": "user", "content": user}));
            }
            Kind::OpenhandsText => {
                if content.contains("<function=finish>") {
                    return Flow::Finished;
                }
                let user = match content.split("<function=").nth(1) {
                    Some(rest) => {
                        let name = rest.split('>').next().unwrap_or_default().to_string();
                        format!(
                            "EXECUTION RESULT of [{name}]:\n{}",
                            observation(&mut self.rng, &name, k, turn)
                        )
                    }
                    None => "Please continue working on the task on whatever approach you think is suitable.\nIf you think you have solved the task, please finish the interaction.".to_string(),
                };
                self.push(json!({"role": "assistant", "content": content}));
                self.push(json!({"role": "user", "content": user}));
            }
            _ => {
                if call.is_null() {
                    // An unparsable turn: the scaffold's own format-error feedback.
                    self.push(json!({"role": "assistant", "content": content}));
                    self.push(json!({"role": "user", "content": "Your last output did not use any tool calls!\nPlease make sure your output includes exactly _ONE_ function call!"}));
                    return Flow::Continue;
                }
                let name = call["function"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let arguments: Value =
                    serde_json::from_str(call["function"]["arguments"].as_str().unwrap_or("{}"))
                        .unwrap_or(Value::Null);
                if name == "submit" || name == "finish" {
                    return Flow::Finished;
                }
                let command = arguments["command"].as_str().unwrap_or_default();
                if kind == Kind::MiniTool && command.trim_start().starts_with(COMPLETE) {
                    return Flow::Finished;
                }
                let id = call["id"].clone();
                let output = observation(&mut self.rng, &name, k, turn);
                self.push(message);
                let result = match kind {
                    Kind::SweAgent | Kind::OpenhandsCodeact => {
                        json!({"role": "tool", "tool_call_id": id, "content": [{"type": "text", "text": output}]})
                    }
                    Kind::OpenhandsSdk => {
                        json!({"role": "tool", "tool_call_id": id, "name": name, "content": [{"type": "text", "text": output}]})
                    }
                    _ => {
                        json!({"role": "tool", "tool_call_id": id, "content": format!("<returncode>0</returncode>\n<output>\n{output}</output>")})
                    }
                };
                self.push(result);
            }
        }
        Flow::Continue
    }
}

// ----- requests ------------------------------------------------------------------------------

/// How one request ended.
#[derive(Debug, Clone)]
struct RequestRec {
    session: usize,
    kind: Kind,
    stream: bool,
    /// HTTP status (0: no response).
    status: u16,
    /// `ok`, `http_error`, `stream_error`, `transport`, `truncated`, `bad_body`.
    outcome: &'static str,
    code: Option<String>,
    message: Option<String>,
    latency_ms: f64,
}

/// Sends one request; the reply (chat message or response object) or the failure.
async fn send(
    client: &reqwest::Client,
    url: &str,
    session: &Session,
) -> (Result<Value, Option<u64>>, RequestRec) {
    let started = Instant::now();
    let mut rec = RequestRec {
        session: session.k,
        kind: session.kind,
        stream: session.stream,
        status: 0,
        outcome: "ok",
        code: None,
        message: None,
        latency_ms: 0.0,
    };
    let result = client
        .post(url)
        .header("x-asap-task", &session.task)
        .header("x-asap-run", session.k.to_string())
        .json(&session.body)
        .send()
        .await;
    let fail = |mut rec: RequestRec, outcome, code: Option<String>, message: String, retry| {
        rec.outcome = outcome;
        rec.code = code;
        rec.message = Some(message.chars().take(400).collect());
        rec.latency_ms = started.elapsed().as_secs_f64() * 1e3;
        (Err(retry), rec)
    };
    let resp = match result {
        Ok(r) => r,
        Err(e) => return fail(rec, "transport", None, format!("{e:?}"), None),
    };
    rec.status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let text = match resp.text().await {
        Ok(t) => t,
        Err(e) => return fail(rec, "transport", None, format!("{e:?}"), None),
    };
    if rec.status != 200 {
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let code = body["error"]["code"].as_str().map(str::to_string);
        let message = body["error"]["message"]
            .as_str()
            .map_or_else(|| text.clone(), str::to_string);
        return fail(rec, "http_error", code, message, retry_after);
    }
    let parsed = if !session.stream {
        serde_json::from_str::<Value>(&text)
            .map_err(|e| {
                (
                    "bad_body",
                    None,
                    format!("{e}: {}", &text[..text.len().min(200)]),
                )
            })
            .map(|v| {
                if session.kind == Kind::BrowsecompResponses {
                    v
                } else {
                    v["choices"][0]["message"].clone()
                }
            })
    } else if session.kind == Kind::BrowsecompResponses {
        responses_stream(&text)
    } else {
        chat_stream(&text)
    };
    match parsed {
        Ok(reply) => {
            rec.latency_ms = started.elapsed().as_secs_f64() * 1e3;
            (Ok(reply), rec)
        }
        Err((outcome, code, message)) => fail(rec, outcome, code, message, None),
    }
}

type StreamFailure = (&'static str, Option<String>, String);

/// The assistant message of a chat SSE body, or its error event.
fn chat_stream(text: &str) -> Result<Value, StreamFailure> {
    let mut content = String::new();
    let mut calls: Vec<Value> = Vec::new();
    let mut done = false;
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data:").map(str::trim_start) else {
            continue;
        };
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| ("bad_body", None, format!("chunk is not JSON ({e}): {data}")))?;
        if let Some(error) = chunk.get("error") {
            let code = error["code"].as_str().map(str::to_string);
            let message = error["message"].as_str().unwrap_or_default().to_string();
            if !text.contains("data: [DONE]") {
                return Err((
                    "truncated",
                    code,
                    format!("error event without [DONE]: {message}"),
                ));
            }
            return Err(("stream_error", code, message));
        }
        let delta = &chunk["choices"][0]["delta"];
        if let Some(c) = delta["content"].as_str() {
            content.push_str(c);
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap_or(0) as usize;
            while calls.len() <= index {
                calls.push(json!({"id": "", "type": "function", "function": {"name": "", "arguments": ""}}));
            }
            let slot = &mut calls[index];
            if let Some(id) = call["id"].as_str() {
                slot["id"] = json!(id);
            }
            if let Some(name) = call["function"]["name"].as_str() {
                slot["function"]["name"] = json!(name);
            }
            if let Some(a) = call["function"]["arguments"].as_str() {
                let joined = slot["function"]["arguments"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
                    + a;
                slot["function"]["arguments"] = json!(joined);
            }
        }
    }
    if !done {
        return Err(("truncated", None, "stream ended without [DONE]".into()));
    }
    let mut message = json!({"role": "assistant", "content": if content.is_empty() { Value::Null } else { json!(content) }});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    Ok(message)
}

/// The `response` of a Responses SSE body's `response.completed` event, or its error event.
fn responses_stream(text: &str) -> Result<Value, StreamFailure> {
    for block in text.split("\n\n") {
        let mut name = "";
        let mut data = String::new();
        for line in block.lines() {
            if let Some(n) = line.strip_prefix("event:") {
                name = n.trim();
            } else if let Some(d) = line.strip_prefix("data:") {
                data.push_str(d.trim_start());
            }
        }
        match name {
            "error" => {
                let v: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
                let code = v["code"].as_str().map(str::to_string);
                return Err((
                    "stream_error",
                    code,
                    v["message"].as_str().unwrap_or_default().to_string(),
                ));
            }
            // `response.incomplete`: the generation hit the token limit (a final answer).
            "response.completed" | "response.incomplete" => {
                let v: Value = serde_json::from_str(&data)
                    .map_err(|e| ("bad_body", None, format!("{name} event ({e})")))?;
                return Ok(v["response"].clone());
            }
            _ => {}
        }
    }
    Err((
        "truncated",
        None,
        "stream ended without response.completed, response.incomplete or error".into(),
    ))
}

// ----- the run -------------------------------------------------------------------------------

#[derive(Debug, Clone, Default)]
struct SessionRec {
    k: usize,
    kind: Option<Kind>,
    stream: bool,
    task: String,
    answered: usize,
    failed: usize,
    /// `finished`, `turn_cap`, `deadline`, `gave_up`.
    end: &'static str,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    t_s: f64,
    rss_kib: u64,
    hwm_kib: u64,
    threads: u64,
    fds: u64,
    requests: usize,
    sessions: usize,
}

#[derive(Default)]
struct Stats {
    requests: Vec<RequestRec>,
    sessions: Vec<SessionRec>,
    samples: Vec<Sample>,
}

struct Ctx {
    args: Args,
    client: reqwest::Client,
    bodies: HashMap<&'static str, Value>,
    deadline: Instant,
    next: AtomicUsize,
    stats: Mutex<Stats>,
}

async fn run_session(ctx: &Ctx, k: usize) {
    let mut session = Session::new(k, &ctx.bodies, ctx.args.seed);
    let url = session.url(&ctx.args.proxy);
    let (lo, hi) = (
        ctx.args.min_turns,
        ctx.args.max_turns.max(ctx.args.min_turns),
    );
    let cap = lo + session.rng.below((hi - lo + 1) as u64) as usize;
    let mut rec = SessionRec {
        k,
        kind: Some(session.kind),
        stream: session.stream,
        task: session.task.clone(),
        end: "turn_cap",
        ..SessionRec::default()
    };
    'turns: for turn in 0..cap {
        if Instant::now() >= ctx.deadline {
            rec.end = "deadline";
            break;
        }
        let mut tries = 0;
        let reply = loop {
            let (result, request) = send(&ctx.client, &url, &session).await;
            let (status, outcome) = (request.status, request.outcome);
            ctx.stats.lock().unwrap().requests.push(request);
            match result {
                Ok(reply) => break reply,
                Err(retry_after) => {
                    rec.failed += 1;
                    tries += 1;
                    if tries >= 5 || outcome == "transport" {
                        rec.end = "gave_up";
                        break 'turns;
                    }
                    let wait = match (status, retry_after) {
                        (429, Some(s)) => Duration::from_secs(s.min(5)),
                        _ => Duration::from_millis(500),
                    };
                    tokio::time::sleep(wait).await;
                }
            }
        };
        rec.answered += 1;
        if let Flow::Finished = session.absorb(reply, turn) {
            rec.end = "finished";
            break;
        }
        let think = ctx.args.think_ms_max;
        let pause = think / 4 + session.rng.below(think - think / 4 + 1);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    ctx.stats.lock().unwrap().sessions.push(rec);
}

fn sample(pid: u32, t_s: f64, requests: usize, sessions: usize) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    Some(Sample {
        t_s,
        rss_kib: field("VmRSS:"),
        hwm_kib: field("VmHWM:"),
        threads: field("Threads:"),
        fds,
        requests,
        sessions,
    })
}

fn main() {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let code = runtime.block_on(run(args));
    std::process::exit(code);
}

async fn run(args: Args) -> i32 {
    let bodies = first_bodies(&args.fixtures);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(args.request_timeout_s))
        .pool_max_idle_per_host(args.concurrency * 2)
        .build()
        .unwrap();
    let start = Instant::now();
    let run_for = Duration::from_secs_f64(args.minutes * 60.0);
    let ctx = Arc::new(Ctx {
        deadline: start + run_for,
        args: args.clone(),
        client,
        bodies,
        next: AtomicUsize::new(0),
        stats: Mutex::new(Stats::default()),
    });
    eprintln!(
        "soak: {} loops for {:.1} min against {}",
        args.concurrency, args.minutes, args.proxy
    );
    // RSS sampler.
    let sampler = args.proxy_pid.map(|pid| {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(ctx.args.sample_s.max(1)));
            loop {
                tick.tick().await;
                let t = start.elapsed().as_secs_f64();
                let n = ctx.stats.lock().unwrap().requests.len();
                let k = ctx.next.load(Ordering::Relaxed);
                if let Some(s) = sample(pid, t, n, k) {
                    eprintln!(
                        "soak: t={:>5.0}s sessions={:>6} requests={:>7} VmRSS={:.1} MiB VmHWM={:.1} MiB threads={} fds={}",
                        s.t_s,
                        s.sessions,
                        s.requests,
                        s.rss_kib as f64 / 1024.0,
                        s.hwm_kib as f64 / 1024.0,
                        s.threads,
                        s.fds
                    );
                    ctx.stats.lock().unwrap().samples.push(s);
                }
            }
        })
    });
    let loops: Vec<_> = (0..args.concurrency)
        .map(|_| {
            let ctx = ctx.clone();
            tokio::spawn(async move {
                while Instant::now() < ctx.deadline {
                    let k = ctx.next.fetch_add(1, Ordering::Relaxed);
                    run_session(&ctx, k).await;
                }
            })
        })
        .collect();
    for l in loops {
        l.await.unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    if let Some(pid) = args.proxy_pid {
        let n = ctx.stats.lock().unwrap().requests.len();
        let k = ctx.next.load(Ordering::Relaxed);
        if let Some(s) = sample(pid, elapsed, n, k) {
            ctx.stats.lock().unwrap().samples.push(s);
        }
    }
    if let Some(s) = sampler {
        s.abort();
    }
    let faults = match &args.backend {
        Some(url) => match fetch_faults(&ctx.client, url).await {
            Ok(v) => Some(v),
            Err(e) => {
                eprintln!("soak: fault log of {url}: {e}");
                None
            }
        },
        None => None,
    };
    let stats = std::mem::take(&mut *ctx.stats.lock().unwrap());
    let traces = read_traces(&args.log_dir);
    let report = Report::build(&args, elapsed, &stats, faults.as_ref(), &traces);
    let md = report.markdown();
    let js = report.json();
    println!("{md}");
    println!(
        "```json\n{}\n```",
        serde_json::to_string_pretty(&js).unwrap()
    );
    if let Some(path) = &args.summary_md {
        std::fs::write(path, &md).unwrap();
    }
    if let Some(path) = &args.summary_json {
        std::fs::write(path, serde_json::to_string_pretty(&js).unwrap()).unwrap();
    }
    for line in &report.checks {
        eprintln!("{line}");
    }
    i32::from(report.checks.iter().any(|l| l.starts_with("FAIL")))
}

async fn fetch_faults(client: &reqwest::Client, base: &str) -> Result<Value, String> {
    let url = format!(
        "{}/soak/faults",
        base.trim_end_matches('/').trim_end_matches("/v1")
    );
    let resp = client.get(&url).send().await.map_err(|e| e.to_string())?;
    resp.json().await.map_err(|e| e.to_string())
}

// ----- traces --------------------------------------------------------------------------------

/// What the trace files of one session (task, run) hold.
#[derive(Debug, Default)]
struct TraceSession {
    files: usize,
    profiles: Vec<String>,
    run_sources: Vec<String>,
    answered: usize,
    errors: Vec<(String, String)>,
    nudged: usize,
    aborted: usize,
    other: usize,
    side_calls: usize,
    /// Files with a step record that is not an `error`.
    answering_files: usize,
    /// Files with only `error` step records, one of them past step 0 (a failed first request
    /// has no history to tie it to its session, so its retry starts a new file; a later one
    /// must not).
    stray_error_files: usize,
}

#[derive(Debug, Default)]
struct Traces {
    sessions: BTreeMap<(String, u64), TraceSession>,
    files: usize,
    lines: usize,
    bytes: u64,
    /// Problems with files themselves (unreadable, bad lines, no session record).
    problems: Vec<String>,
    nudges: BTreeMap<String, usize>,
    terminations: BTreeMap<String, usize>,
    parse_failures: BTreeMap<String, usize>,
}

fn read_traces(dir: &Path) -> Traces {
    let mut out = Traces::default();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    paths.retain(|p| p.extension().is_some_and(|e| e == "jsonl"));
    paths.sort();
    for path in paths {
        out.files += 1;
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                out.problems.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        out.bytes += text.len() as u64;
        if !text.ends_with('\n') {
            out.problems.push(format!(
                "{}: last line has no newline (torn)",
                path.display()
            ));
        }
        let mut key: Option<(String, u64)> = None;
        let (mut answering, mut errors_past_0) = (false, false);
        for (i, line) in text.lines().enumerate() {
            out.lines += 1;
            let record: Value = match serde_json::from_str(line) {
                Ok(v) => v,
                Err(e) => {
                    out.problems
                        .push(format!("{}:{}: not JSON: {e}", path.display(), i + 1));
                    continue;
                }
            };
            let data = &record["data"];
            match (record["type"].as_str().unwrap_or_default(), &key) {
                ("session", None) => {
                    let k = (
                        data["instance_id"].as_str().unwrap_or("?").to_string(),
                        data["run"].as_u64().unwrap_or(u64::MAX),
                    );
                    let s = out.sessions.entry(k.clone()).or_default();
                    s.files += 1;
                    s.profiles
                        .push(data["profile"].as_str().unwrap_or("?").to_string());
                    s.run_sources
                        .push(data["run_source"].as_str().unwrap_or("?").to_string());
                    key = Some(k);
                }
                (kind, None) => out.problems.push(format!(
                    "{}:{}: `{kind}` record before the session record",
                    path.display(),
                    i + 1
                )),
                ("session", Some(_)) => out.problems.push(format!(
                    "{}:{}: second session record",
                    path.display(),
                    i + 1
                )),
                ("step", Some(k)) => {
                    let s = out.sessions.get_mut(k).unwrap();
                    let decision = data["decision"].as_str().unwrap_or_default();
                    answering |= decision != "error";
                    errors_past_0 |= decision == "error" && data["step"].as_u64() != Some(0);
                    match decision {
                        "accept" | "terminate" => s.answered += 1,
                        "nudge" => s.nudged += 1,
                        "error" => s.errors.push((
                            data["prompt"]["sha256"]
                                .as_str()
                                .unwrap_or_default()
                                .to_string(),
                            data["error"].as_str().unwrap_or_default().to_string(),
                        )),
                        "aborted" => s.aborted += 1,
                        _ => s.other += 1,
                    }
                    if let Some(class) = data["parse"]["error"]["class"].as_str() {
                        *out.parse_failures.entry(class.to_string()).or_default() += 1;
                    }
                }
                ("side_call", Some(k)) => out.sessions.get_mut(k).unwrap().side_calls += 1,
                ("nudge", Some(_)) => {
                    *out.nudges
                        .entry(data["kind"].as_str().unwrap_or("?").to_string())
                        .or_default() += 1;
                }
                ("terminate", Some(_)) => {
                    *out.terminations
                        .entry(data["reason"].as_str().unwrap_or("?").to_string())
                        .or_default() += 1;
                }
                (other, Some(_)) => out.problems.push(format!(
                    "{}:{}: unknown record type `{other}`",
                    path.display(),
                    i + 1
                )),
            }
        }
        if let Some(s) = key.and_then(|k| out.sessions.get_mut(&k)) {
            if answering {
                s.answering_files += 1;
            } else if errors_past_0 {
                s.stray_error_files += 1;
            }
        }
    }
    out
}

/// Whether a trace `error` record is explained by a fault injected for its prompt.
fn explained(message: &str, kinds: &[String]) -> bool {
    kinds.iter().any(|kind| match kind.as_str() {
        "http_500" | "rate_limited" | "invalid_json" => {
            message.contains(&format!("soak-fault {kind}"))
        }
        "hangup" => {
            message.contains("connection dropped") || message.contains("error sending request")
        }
        "stall" => message.contains("timed out"),
        _ => false,
    })
}

// ----- report --------------------------------------------------------------------------------

struct Report {
    md: String,
    json: Value,
    checks: Vec<String>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Flat RSS: after a warm-up (the first 20 % of the run, at least one sample), the largest
/// VmRSS of the second half of the remaining samples is at most 10 % (or 8 MiB, whichever is
/// more) above the largest of the first half. Returns (verdict, explanation).
fn rss_verdict(samples: &[Sample], duration_s: f64) -> (bool, String) {
    let after: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.t_s >= duration_s * 0.2)
        .collect();
    if after.len() < 4 {
        return (
            true,
            format!("only {} samples after the warm-up: not judged", after.len()),
        );
    }
    let (first, second) = after.split_at(after.len() / 2);
    let max = |v: &[&Sample]| v.iter().map(|s| s.rss_kib).max().unwrap_or(0) as f64 / 1024.0;
    let (a, b) = (max(first), max(second));
    let allowed = (a * 1.10).max(a + 8.0);
    // Least-squares slope over the samples after the warm-up, MiB per minute.
    let n = after.len() as f64;
    let mx = after.iter().map(|s| s.t_s).sum::<f64>() / n;
    let my = after.iter().map(|s| s.rss_kib as f64 / 1024.0).sum::<f64>() / n;
    let sxy: f64 = after
        .iter()
        .map(|s| (s.t_s - mx) * (s.rss_kib as f64 / 1024.0 - my))
        .sum();
    let sxx: f64 = after.iter().map(|s| (s.t_s - mx).powi(2)).sum();
    let slope = if sxx > 0.0 { sxy / sxx * 60.0 } else { 0.0 };
    (
        b <= allowed,
        format!(
            "peak VmRSS {a:.1} MiB in the first half after the warm-up, {b:.1} MiB in the second (allowed {allowed:.1}); slope {slope:+.2} MiB/min"
        ),
    )
}

impl Report {
    fn markdown(&self) -> String {
        self.md.clone()
    }
    fn json(&self) -> Value {
        self.json.clone()
    }

    fn build(
        args: &Args,
        elapsed: f64,
        stats: &Stats,
        faults: Option<&Value>,
        traces: &Traces,
    ) -> Self {
        let requests = &stats.requests;
        let mut checks = Vec::new();
        // Statuses and outcomes.
        let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
        let mut by_code: BTreeMap<String, usize> = BTreeMap::new();
        let mut unexpected: Vec<&RequestRec> = Vec::new();
        for r in requests {
            let key = match r.outcome {
                "ok" => format!("{} ok", r.status),
                "stream_error" => "200 stream + error event".to_string(),
                other => format!("{} {other}", r.status),
            };
            *by_status.entry(key).or_default() += 1;
            if r.outcome != "ok" {
                let code = r.code.clone().unwrap_or_else(|| "-".into());
                *by_code
                    .entry(format!(
                        "{} {code}",
                        if r.outcome == "stream_error" {
                            "stream".to_string()
                        } else {
                            r.status.to_string()
                        }
                    ))
                    .or_default() += 1;
                let expected_code = matches!(
                    r.code.as_deref(),
                    Some(
                        "backend_unavailable"
                            | "backend_error"
                            | "backend_timeout"
                            | "rate_limit_exceeded"
                    )
                );
                let ok = match r.outcome {
                    "http_error" => matches!(r.status, 429 | 502 | 504) && expected_code,
                    "stream_error" => expected_code,
                    _ => false,
                };
                if !ok {
                    unexpected.push(r);
                }
            }
        }
        let failed = requests.iter().filter(|r| r.outcome != "ok").count();
        // Faults by prompt.
        let mut fault_kinds: HashMap<String, Vec<String>> = HashMap::new();
        for f in faults
            .and_then(|f| f["faults"].as_array())
            .into_iter()
            .flatten()
        {
            fault_kinds
                .entry(f["sha256"].as_str().unwrap_or_default().to_string())
                .or_default()
                .push(f["kind"].as_str().unwrap_or_default().to_string());
        }
        // Trace completeness per session.
        let mut mismatches: Vec<String> = Vec::new();
        let mut unexplained: Vec<String> = Vec::new();
        let mut wrong_profile: Vec<String> = Vec::new();
        let mut seen = 0usize;
        let mut records_answered = 0usize;
        let mut records_errors = 0usize;
        let mut aborted = 0usize;
        let mut multi_file = 0usize;
        for s in &stats.sessions {
            let kind = s.kind.unwrap();
            let t = traces.sessions.get(&(s.task.clone(), s.k as u64));
            if s.answered + s.failed == 0 {
                if t.is_some() {
                    mismatches.push(format!("session {}: trace without requests", s.k));
                }
                continue;
            }
            let Some(t) = t else {
                mismatches.push(format!(
                    "session {} ({}, run {}): no trace file ({} answered, {} failed)",
                    s.k, s.task, s.k, s.answered, s.failed
                ));
                continue;
            };
            seen += 1;
            records_answered += t.answered;
            records_errors += t.errors.len();
            aborted += t.aborted;
            if t.files > 1 {
                multi_file += 1;
            }
            if t.answered != s.answered
                || t.errors.len() != s.failed
                || t.aborted + t.other > 0
                || t.answering_files > 1
                || t.stray_error_files > 0
            {
                mismatches.push(format!(
                    "session {} ({}, {}): answered {} vs {} answering records; failed {} vs {} error records; {} aborted, {} other; {} files ({} answering, {} with errors past step 0 only)",
                    s.k,
                    s.task,
                    if s.stream { "stream" } else { "plain" },
                    s.answered,
                    t.answered,
                    s.failed,
                    t.errors.len(),
                    t.aborted,
                    t.other,
                    t.files,
                    t.answering_files,
                    t.stray_error_files
                ));
            }
            if t.profiles.iter().any(|p| p != kind.profile())
                || t.run_sources.iter().any(|r| r != "header")
            {
                wrong_profile.push(format!(
                    "session {}: profiles {:?}, run sources {:?} (expected {})",
                    s.k,
                    t.profiles,
                    t.run_sources,
                    kind.profile()
                ));
            }
            for (sha, message) in &t.errors {
                let kinds = fault_kinds.get(sha).map_or(&[][..], Vec::as_slice);
                if !explained(message, kinds) {
                    unexplained.push(format!(
                        "session {} prompt {}: {message} (faults for this prompt: {kinds:?})",
                        s.k,
                        &sha[..sha.len().min(16)]
                    ));
                }
            }
        }
        let known: std::collections::HashSet<(String, u64)> = stats
            .sessions
            .iter()
            .map(|s| (s.task.clone(), s.k as u64))
            .collect();
        let orphans: Vec<String> = traces
            .sessions
            .keys()
            .filter(|k| !known.contains(*k))
            .map(|(t, r)| format!("{t} run {r}"))
            .collect();
        let show = |v: &[String]| v.iter().take(10).cloned().collect::<Vec<_>>().join("; ");

        // Checks.
        let statuses_ok = unexpected.is_empty();
        checks.push(if statuses_ok {
            format!(
                "PASS statuses: {} requests, {failed} failed, each a 429/502/504 or a stream error event with a backend code; every stream ended properly",
                requests.len()
            )
        } else {
            format!(
                "FAIL statuses: {} unexpected outcomes, e.g. {}",
                unexpected.len(),
                unexpected
                    .iter()
                    .take(5)
                    .map(|r| format!(
                        "session {} {} status {} {} {:?}: {:?}",
                        r.session,
                        r.kind.label(),
                        r.status,
                        r.outcome,
                        r.code,
                        r.message
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        });
        checks.push(if unexplained.is_empty() && faults.is_some() {
            format!(
                "PASS faults: all {records_errors} error records are backend faults injected for their prompt (fault log: {} entries)",
                fault_kinds.values().map(Vec::len).sum::<usize>()
            )
        } else if faults.is_none() {
            "FAIL faults: no fault log from the backend (--backend)".to_string()
        } else {
            format!(
                "FAIL faults: {} error records not explained by an injected fault: {}",
                unexplained.len(),
                show(&unexplained)
            )
        });
        let answered: usize = stats.sessions.iter().map(|s| s.answered).sum();
        checks.push(if mismatches.is_empty() && orphans.is_empty() && traces.problems.is_empty() {
            format!(
                "PASS traces: {seen} sessions, {} files, {} lines: {answered} answered requests = {records_answered} answering step records, {failed} failed = {records_errors} error records, 0 aborted, every line parses",
                traces.files, traces.lines
            )
        } else {
            format!(
                "FAIL traces: {} sessions differ, {} orphan trace sessions, {} file problems: {} {} {}",
                mismatches.len(),
                orphans.len(),
                traces.problems.len(),
                show(&mismatches),
                show(&orphans),
                show(&traces.problems)
            )
        });
        checks.push(if wrong_profile.is_empty() {
            "PASS profiles: every session was served by its scaffold's profile, run index from the header".to_string()
        } else {
            format!(
                "FAIL profiles: {} sessions: {}",
                wrong_profile.len(),
                show(&wrong_profile)
            )
        });
        let (rss_ok, rss_text) = rss_verdict(&stats.samples, elapsed);
        if args.proxy_pid.is_some() {
            checks.push(format!(
                "{} rss: {rss_text}",
                if rss_ok { "PASS" } else { "FAIL" }
            ));
        }

        // Latency.
        let mut all: Vec<f64> = requests.iter().map(|r| r.latency_ms).collect();
        all.sort_by(f64::total_cmp);
        let lat = |stream: Option<bool>, ok_only: bool| {
            let mut v: Vec<f64> = requests
                .iter()
                .filter(|r| stream.is_none_or(|s| r.stream == s))
                .filter(|r| !ok_only || r.outcome == "ok")
                .map(|r| r.latency_ms)
                .collect();
            v.sort_by(f64::total_cmp);
            (
                v.len(),
                percentile(&v, 0.5),
                percentile(&v, 0.9),
                percentile(&v, 0.99),
                v.last().copied().unwrap_or(0.0),
            )
        };
        let mut ends: BTreeMap<&str, usize> = BTreeMap::new();
        for s in &stats.sessions {
            *ends.entry(s.end).or_default() += 1;
        }

        // Markdown.
        let mut md = String::new();
        let _ = writeln!(md, "## Soak result\n");
        let _ = writeln!(
            md,
            "{:.1} min, {} loops, {} sessions ({} with a trace), {} requests ({:.1}/s), {} answered, {failed} failed.\n",
            elapsed / 60.0,
            args.concurrency,
            stats.sessions.len(),
            seen,
            requests.len(),
            requests.len() as f64 / elapsed.max(1e-9),
            answered
        );
        let _ = writeln!(
            md,
            "Session ends: {}.\n",
            ends.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(md, "| outcome | requests |\n|---|---|");
        for (k, v) in &by_status {
            let _ = writeln!(md, "| {k} | {v} |");
        }
        let _ = writeln!(
            md,
            "\n| failed request (status, code) | requests |\n|---|---|"
        );
        for (k, v) in &by_code {
            let _ = writeln!(md, "| {k} | {v} |");
        }
        if let Some(f) = faults {
            let _ = writeln!(
                md,
                "\nBackend: {} completion calls, fault rate {}. Injected faults (calls):\n",
                f["calls"], f["fault_rate"]
            );
            let _ = writeln!(md, "| fault | calls |\n|---|---|");
            for (k, v) in f["counts"].as_object().into_iter().flatten() {
                let _ = writeln!(md, "| {k} | {v} |");
            }
            let _ = writeln!(md, "\nGenerated texts (calls answered normally):\n");
            let _ = writeln!(md, "| text | calls |\n|---|---|");
            for (k, v) in f["outputs"].as_object().into_iter().flatten() {
                let _ = writeln!(md, "| {k} | {v} |");
            }
        }
        let _ = writeln!(
            md,
            "\nIn the traces: nudges {}; terminations {}; parse failures {}; {} sessions spread over more than one file.\n",
            fmt_map(&traces.nudges),
            fmt_map(&traces.terminations),
            fmt_map(&traces.parse_failures),
            multi_file
        );
        let _ = writeln!(
            md,
            "| scaffold | sessions | requests | failed | finished |\n|---|---|---|---|---|"
        );
        for kind in KINDS {
            let ss: Vec<&SessionRec> = stats
                .sessions
                .iter()
                .filter(|s| s.kind == Some(kind))
                .collect();
            let rq = requests.iter().filter(|r| r.kind == kind).count();
            let fl = requests
                .iter()
                .filter(|r| r.kind == kind && r.outcome != "ok")
                .count();
            let fin = ss.iter().filter(|s| s.end == "finished").count();
            let _ = writeln!(
                md,
                "| {} | {} | {rq} | {fl} | {fin} |",
                kind.label(),
                ss.len()
            );
        }
        let _ = writeln!(
            md,
            "\n| latency, ms | n | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|"
        );
        for (name, stream, ok_only) in [
            ("all requests", None, false),
            ("answered", None, true),
            ("answered, plain", Some(false), true),
            ("answered, streamed", Some(true), true),
        ] {
            let (n, p50, p90, p99, max) = lat(stream, ok_only);
            let _ = writeln!(
                md,
                "| {name} | {n} | {p50:.1} | {p90:.1} | {p99:.1} | {max:.1} |"
            );
        }
        if !stats.samples.is_empty() {
            let _ = writeln!(
                md,
                "\n| t, s | sessions started | requests | VmRSS, MiB | VmHWM, MiB | threads | open fds |\n|---|---|---|---|---|---|---|"
            );
            for s in &stats.samples {
                let _ = writeln!(
                    md,
                    "| {:.0} | {} | {} | {:.1} | {:.1} | {} | {} |",
                    s.t_s,
                    s.sessions,
                    s.requests,
                    s.rss_kib as f64 / 1024.0,
                    s.hwm_kib as f64 / 1024.0,
                    s.threads,
                    s.fds
                );
            }
        }
        let _ = writeln!(
            md,
            "\nTraces: {} files, {} lines, {:.1} MiB.\n",
            traces.files,
            traces.lines,
            traces.bytes as f64 / 1048576.0
        );
        let _ = writeln!(md, "Checks:\n");
        for c in &checks {
            let _ = writeln!(md, "- {c}");
        }

        let json = json!({
            "minutes": elapsed / 60.0,
            "concurrency": args.concurrency,
            "sessions": stats.sessions.len(),
            "sessions_with_trace": seen,
            "session_ends": ends,
            "requests": requests.len(),
            "answered": answered,
            "failed": failed,
            "by_outcome": by_status,
            "failed_by_code": by_code,
            "injected_faults": faults.map(|f| f["counts"].clone()),
            "backend_calls": faults.map(|f| f["calls"].clone()),
            "generated": faults.map(|f| f["outputs"].clone()),
            "nudges": traces.nudges,
            "terminations": traces.terminations,
            "latency_ms": {
                "p50": percentile(&all, 0.5),
                "p90": percentile(&all, 0.9),
                "p99": percentile(&all, 0.99),
                "max": all.last().copied().unwrap_or(0.0),
            },
            "rss": stats.samples.iter().map(|s| json!({
                "t_s": s.t_s, "sessions": s.sessions, "requests": s.requests, "vm_rss_kib": s.rss_kib,
                "vm_hwm_kib": s.hwm_kib, "threads": s.threads, "fds": s.fds,
            })).collect::<Vec<_>>(),
            "trace_files": traces.files,
            "trace_lines": traces.lines,
            "trace_bytes": traces.bytes,
            "records_answered": records_answered,
            "records_errors": records_errors,
            "records_aborted": aborted,
            "checks": checks,
        });
        Self { md, json, checks }
    }
}

fn fmt_map(m: &BTreeMap<String, usize>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}
