//! Soak mode: a fault-injecting completion backend for the soak run (`bench/soak.sh`,
//! docs/reliability.md item 8).
//!
//! `POST /v1/completions` answers the proxy's `markdown_xml` prompts with realistic base-model
//! steps: a `## Thinking` line and one action in the tools the prompt offers (`<bash>`,
//! `<str_replace_editor>`, `<search>`, `<get_document>`, `<submit/>`), chosen from the SHA-256
//! of the prompt (the same prompt always gets the same text, like greedy decoding). Some steps
//! are made to trip the proxy's rules: `<submit/>` before any edit and the previous action
//! again (both nudged; after the hint, now and then the same mistake again, which terminates),
//! and unparsable text (prose without an action, an unknown tool, an unclosed tag cut off by
//! the token limit). Answers come in vLLM, llama-server or SGLang shape, after a delay of
//! `delay_ms_min`..`delay_ms_max`.
//!
//! **Faults.** Each call starts a fault with probability `fault_rate`; a started fault of a
//! retried kind lasts for 1 to 5 consecutive calls *of the same prompt* (the proxy retries
//! the same prompt up to `--backend-retries` times, so bursts of 4 or more reach the client):
//!
//! | kind | what the proxy gets | proxy retries? |
//! |---|---|---|
//! | `http_500` | HTTP 500, message `soak-fault http_500 …` | yes |
//! | `rate_limited` | HTTP 429, `Retry-After: 0`, message `soak-fault rate_limited …` | yes |
//! | `hangup` | status 200 and half a body, then the connection is dropped | yes |
//! | `invalid_json` | status 200, a body that is not JSON (`<html>soak-fault invalid_json …`) | no |
//! | `slow` | the normal answer after `slow_ms` (default 2 s) | – (succeeds) |
//! | `stall` | the normal answer after `stall_ms` (default 7 s: past a `--backend-timeout 5`) | no (504) |
//!
//! Every injected fault is logged with the prompt's SHA-256 (the `prompt.sha256` of the
//! proxy's trace record); `GET /soak/faults` returns that log, the counts per kind and the
//! counts of the kinds of text generated, so the soak driver can check after the run that
//! every error a client saw was injected.
//!
//! `cargo run --release -p fake-backend -- --port 19011 soak --fault-rate 0.05`

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::reply::{self, Names, Shape};

/// Settings of the soak mode.
#[derive(Debug, Clone, clap::Args)]
pub struct SoakOptions {
    /// Probability that a call (with no fault under way for its prompt) starts a fault.
    #[arg(long, default_value_t = 0.05)]
    pub fault_rate: f64,
    /// Shortest generation time, milliseconds.
    #[arg(long, default_value_t = 20)]
    pub delay_ms_min: u64,
    /// Longest generation time, milliseconds.
    #[arg(long, default_value_t = 200)]
    pub delay_ms_max: u64,
    /// Delay of a `slow` fault, milliseconds (the answer is normal).
    #[arg(long, default_value_t = 2000)]
    pub slow_ms: u64,
    /// Delay of a `stall` fault, milliseconds (longer than the proxy's `--backend-timeout`).
    #[arg(long, default_value_t = 7000)]
    pub stall_ms: u64,
    /// Seed of the fault generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// The router of a soak backend.
pub fn router(args: SoakOptions) -> Router {
    let mock = Arc::new(Mock {
        inner: Mutex::new(Inner {
            rng: args.seed.max(1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
            ..Inner::default()
        }),
        args,
    });
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/health", get(|| async { "ok" }))
        .route("/soak/faults", get(faults))
        .layer(DefaultBodyLimit::max(256 * 1024 * 1024))
        .with_state(mock)
}

/// The kinds of injected faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Http500,
    RateLimited,
    Hangup,
    InvalidJson,
    Slow,
    Stall,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Self::Http500 => "http_500",
            Self::RateLimited => "rate_limited",
            Self::Hangup => "hangup",
            Self::InvalidJson => "invalid_json",
            Self::Slow => "slow",
            Self::Stall => "stall",
        }
    }

    /// A fault for a uniform `u` in [0, 1): weights 30/20/20/10/15/5.
    fn pick(u: f64) -> Self {
        match u {
            u if u < 0.30 => Self::Http500,
            u if u < 0.50 => Self::RateLimited,
            u if u < 0.70 => Self::Hangup,
            u if u < 0.80 => Self::InvalidJson,
            u if u < 0.95 => Self::Slow,
            _ => Self::Stall,
        }
    }

    /// Whether the proxy retries it (then it comes as a burst of 1 to 5 calls).
    fn bursts(self) -> bool {
        matches!(self, Self::Http500 | Self::RateLimited | Self::Hangup)
    }
}

#[derive(Default)]
struct Inner {
    /// xorshift64* state of the fault generator.
    rng: u64,
    /// Faults under way: prompt digest → (kind, calls left).
    bursts: HashMap<[u8; 32], (Fault, u32)>,
    /// Every injected fault: (prompt SHA-256 hex, kind, Unix ms).
    log: Vec<(String, &'static str, u64)>,
    calls: u64,
    faults: BTreeMap<&'static str, u64>,
    outputs: BTreeMap<&'static str, u64>,
}

impl Inner {
    fn next(&mut self) -> f64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The fault for this call of a prompt, if any (and logs it).
    fn fault(&mut self, digest: [u8; 32], hex: &str, rate: f64) -> Option<Fault> {
        self.calls += 1;
        let burst = self.bursts.get_mut(&digest).map(|(kind, left)| {
            *left -= 1;
            (*kind, *left == 0)
        });
        let fault = match burst {
            Some((kind, over)) => {
                if over {
                    self.bursts.remove(&digest);
                }
                Some(kind)
            }
            None if self.next() < rate => {
                let kind = Fault::pick(self.next());
                if kind.bursts() {
                    let len = 1 + (self.next() * 5.0) as u32;
                    if len > 1 {
                        self.bursts.insert(digest, (kind, len - 1));
                    }
                }
                Some(kind)
            }
            None => None,
        }?;
        *self.faults.entry(fault.name()).or_default() += 1;
        self.log.push((hex.to_string(), fault.name(), unix_ms()));
        Some(fault)
    }
}

struct Mock {
    args: SoakOptions,
    inner: Mutex<Inner>,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

async fn models() -> impl IntoResponse {
    Json(json!({
        "object": "list",
        "data": [{"id": "soak-base", "object": "model", "created": 0, "owned_by": "asap-proxy-soak"}]
    }))
}

async fn faults(State(mock): State<Arc<Mock>>) -> impl IntoResponse {
    let inner = mock.inner.lock().unwrap_or_else(|e| e.into_inner());
    let log: Vec<Value> = inner
        .log
        .iter()
        .map(|(sha, kind, at)| json!({"sha256": sha, "kind": kind, "time_ms": at}))
        .collect();
    Json(json!({
        "calls": inner.calls,
        "fault_rate": mock.args.fault_rate,
        "counts": inner.faults,
        "outputs": inner.outputs,
        "faults": log,
    }))
}

async fn completions(State(mock): State<Arc<Mock>>, body: Bytes) -> Response {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "body is not JSON").into_response();
    };
    let prompt = request["prompt"].as_str().unwrap_or_default();
    let digest: [u8; 32] = Sha256::digest(prompt.as_bytes()).into();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let word =
        |i: usize| u64::from_le_bytes(digest[i * 8..i * 8 + 8].try_into().unwrap_or_default());
    let fault = mock
        .inner
        .lock()
        .unwrap()
        .fault(digest, &hex, mock.args.fault_rate);
    let (lo, hi) = (mock.args.delay_ms_min, mock.args.delay_ms_max.max(1));
    let mut delay = lo + word(3) % (hi.saturating_sub(lo) + 1);
    let message = |kind: &str| format!("soak-fault {kind} (prompt {})", &hex[..16]);
    match fault {
        Some(Fault::Http500) => return reply::error(500, &message("http_500")),
        Some(Fault::RateLimited) => {
            return reply::rate_limited(&message("rate_limited"), Some("0"));
        }
        Some(Fault::InvalidJson) => {
            let body = format!(
                "<html><body>{}: upstream worker crashed</body></html>",
                message("invalid_json")
            );
            return reply::raw(200, body);
        }
        Some(Fault::Hangup) => {
            return reply::hangup(
                "{\"id\": \"cmpl-soak\", \"object\": \"text_comp",
                Duration::from_millis(20),
                "soak-fault hangup",
            );
        }
        Some(Fault::Slow) => delay = mock.args.slow_ms,
        Some(Fault::Stall) => delay = mock.args.stall_ms,
        None => {}
    }
    let (text, kind, finish) = generate(prompt, [word(0), word(1), word(2)]);
    *mock
        .inner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .outputs
        .entry(kind)
        .or_default() += 1;
    tokio::time::sleep(Duration::from_millis(delay)).await;
    let stop = request["stop"][0]
        .as_str()
        .unwrap_or("\n<observation>")
        .to_string();
    let usage = reply::usage(prompt.len() / 4, text.len().div_ceil(4));
    let matched = (finish == "stop").then_some(stop.as_str());
    let shape = match word(3) % 3 {
        0 => Shape::Vllm,
        1 => Shape::LlamaServer,
        _ => Shape::Sglang,
    };
    let names = Names {
        id: "cmpl-soak",
        model: "soak-base".to_string(),
        created: 0,
    };
    Json(reply::completion(
        &names, shape, &text, finish, matched, usage,
    ))
    .into_response()
}

const SUBMIT_HINT: &str = "You submitted, but no file has been changed yet";
const REPEAT_HINT: &str = "This action is the same as the previous one";

/// The step of the trajectory the prompt asks for: `(text, kind of output, finish_reason)`.
fn generate(prompt: &str, words: [u64; 3]) -> (String, &'static str, &'static str) {
    // Side calls (Terminus hand-off summaries) end with an `Assistant:` turn: plain prose.
    if prompt.ends_with("Assistant:\n") {
        return (
            "I listed the files and read the module; the fix is the next step.".into(),
            "prose",
            "stop",
        );
    }
    let u = |w: u64| (w >> 11) as f64 / (1u64 << 53) as f64;
    let (u1, u2) = (u(words[0]), u(words[1]));
    let pick = words[2] as usize;
    let (head, traj) = match prompt.rfind("\n# Trajectory\n") {
        Some(at) => (&prompt[..at], &prompt[at..]),
        None => ("", prompt),
    };
    let research = head.contains("## <search>");
    let editor = head.contains("## <str_replace_editor>");
    let base = ["/testbed", "/workspace", "/repo", "/app"]
        .into_iter()
        .find(|b| head.contains(b))
        .unwrap_or("/work");
    let n = traj.matches("<observation>").count();
    let last_obs = traj.rfind("<observation>").map_or("", |at| &traj[at..]);
    let last = last_action(traj);
    let edited = traj.contains("<command>str_replace</command>")
        || traj.contains("<command>create</command>")
        || traj.contains("sed -i");
    let thought = THOUGHTS[pick % THOUGHTS.len()];
    let step =
        |action: String, kind: &'static str| (format!("{thought}\n\n{action}\n"), kind, "stop");

    if last_obs.contains(SUBMIT_HINT) {
        return if u1 < 0.15 {
            step("<submit/>".into(), "submit_again")
        } else {
            step(edit(editor, base, n), "edit")
        };
    }
    if last_obs.contains(REPEAT_HINT) {
        if let Some(action) = last.filter(|_| u1 < 0.15) {
            return step(action.to_string(), "repeat_again");
        }
        return step(explore(research, editor, base, n, pick), "explore");
    }
    if n > 0 {
        if !research && !edited && u1 < 0.06 {
            return step("<submit/>".into(), "submit_before_edit");
        }
        if let Some(action) = last.filter(|_| u1 < 0.12) {
            return step(action.to_string(), "repeat");
        }
        if u1 < 0.20 {
            return match pick % 3 {
                0 => (
                    "I am not sure what to do next, so let me think about the structure of the code again."
                        .into(),
                    "unparsable",
                    "stop",
                ),
                1 => (
                    format!("{thought}\n\n<python>print(open('{base}/setup.py').read())</python>\n"),
                    "unparsable",
                    "stop",
                ),
                _ => (
                    format!("{thought}\n\n<bash>for f in {base}/src/*.py; do\n  echo \"$f\"\n  wc -l"),
                    "unparsable",
                    "length",
                ),
            };
        }
    }
    if research {
        if n >= 4 && u2 < 0.35 {
            return step(
                format!("<submit>Explanation: the documents agree [doc-{}]\nExact Answer: the Vell\nConfidence: 80%</submit>", 1000 + n),
                "answer",
            );
        }
        return step(explore(true, false, base, n, pick), "explore");
    }
    if !edited && n >= 3 && u2 < 0.5 {
        return step(edit(editor, base, n), "edit");
    }
    if edited && n >= 5 && u2 < 0.35 {
        return step("<submit/>".into(), "submit");
    }
    step(explore(false, editor, base, n, pick), "explore")
}

const THOUGHTS: [&str; 6] = [
    "I should look at the repository before changing anything.",
    "The failing behaviour must come from this module, so I will check it.",
    "Let me verify what the last command showed.",
    "I need more context about how this function is used.",
    "The tests will tell me whether the change works.",
    "I will narrow the search down to the relevant files.",
];

/// A fresh, step-specific action (never the same twice in a trajectory).
fn explore(research: bool, editor: bool, base: &str, n: usize, pick: usize) -> String {
    if research {
        return if n % 2 == 0 {
            format!("<search>\n<query>1931 fishing treaty river town {n}</query>\n</search>")
        } else {
            format!(
                "<get_document>\n<docid>doc-{}</docid>\n</get_document>",
                1000 + n * 7
            )
        };
    }
    match (pick + n) % 7 {
        0 => format!("<bash>ls -la {base}/pkg{n}</bash>"),
        1 => format!("<bash>grep -rn \"def total\" {base} | head -{}</bash>", n + 5),
        2 => format!("<bash>cat -n {base}/src/module_{n}.py</bash>"),
        3 => format!("<bash>cd {base} && python -m pytest -q tests/test_{n}.py</bash>"),
        4 => format!("<bash>find {base} -name \"*.py\" -path \"*{n}*\"</bash>"),
        5 if editor => format!(
            "<str_replace_editor>\n<command>view</command>\n<path>{base}/src/module_{n}.py</path>\n</str_replace_editor>"
        ),
        _ => format!("<bash>git -C {base} log --oneline -{}</bash>", n + 3),
    }
}

fn edit(editor: bool, base: &str, n: usize) -> String {
    if editor {
        format!(
            "<str_replace_editor>\n<command>str_replace</command>\n<path>{base}/src/module_{n}.py</path>\n<old_str>    return a - b</old_str>\n<new_str>    return a + b</new_str>\n</str_replace_editor>"
        )
    } else {
        format!("<bash>sed -i 's/return a - b/return a + b/' {base}/src/module_{n}.py</bash>")
    }
}

/// The action of the last step in the trajectory (the text from its first tag up to its
/// observation), when it is one of the tools this mock writes.
fn last_action(traj: &str) -> Option<&str> {
    let obs = traj.rfind("<observation>")?;
    let head = &traj[..obs];
    let start = head.rfind("## Thinking\n")? + "## Thinking\n".len();
    let step = &head[start..];
    let at = if step.starts_with('<') {
        0
    } else {
        step.find("\n<")? + 1
    };
    let action = step[at..].trim_end();
    [
        "<bash>",
        "<str_replace_editor>",
        "<search>",
        "<get_document>",
    ]
    .iter()
    .any(|t| action.starts_with(t))
    .then_some(action)
}
