//! In-order load driver for the next-turn path of the benchmarks (`bench/load.sh`,
//! `bench/instructions.sh`; BENCHMARKS.md).
//!
//! A load tool that picks bodies at random (oha's `-Z`) or sends one body again and again
//! (`-D`) does not send what a running session sends: each request of a rollout is its
//! previous request with one more turn (the agent's tool call and its result). The proxy's
//! caches answer a body sent before whole, so a repeated body measures a retry, not a turn.
//! This driver sends `--sessions` SWE-agent-shaped rollouts (`benches/support/swe_agent.rs`,
//! proxy-minted ids) turn by turn: first each rollout's request at `--turns - 1` turns
//! (the warm-up, unmeasured), then `--rounds` rounds in which every rollout sends its next
//! turn, `--turns` turns and up. `--concurrency` workers each own every C-th rollout, so a
//! rollout's turns are sent in order, one at a time, with the other rollouts' turns between
//! them (as concurrent rollouts interleave).
//!
//! `--dialect mini` or `terminus` sends id-less content-dialect rollouts instead
//! (mini-swe-agent's text mode, Terminus-2's JSON keystrokes; `benches/support/swe_agent.rs`):
//! the proxy finds such a running session by the text of its own last reply, so each next
//! turn appends the reply the proxy sent (its `content`, streamed or not) and the turn's
//! observation, as those scaffolds do. The warm-up's history is generated (as after a
//! restart: it opens the session); `--state FILE` carries the warm-up's replies from a
//! `--warm-only` run to the `--skip-warm` run. The backend's answers must differ from each
//! other (`fake-backend constant --numbered`), or every rollout would be one session.
//!
//! `--openings FILE` sends openings that no process has seen instead (a restart, another
//! replica, a content-dialect scaffold's first turn in a process): FILE holds template bodies,
//! one per line (`bench_bodies`' `chat`, `foreign`, `parts`, `mini` or `terminus` files), and
//! request `i` is template `i` modulo their number with a tag of its own written into every
//! message ([`Template`]; the tag holds the run, from the clock and the process id, so another
//! run against the same proxy sends other tags), so no message, history or prompt of one
//! request is another's and the proxy's caches answer none of it. A load tool that cycles through the templates (oha's `-Z`)
//! sends each again after one cycle, and from then on the caches answer part of every request:
//! a lower bound on an opening's cost (BENCHMARKS.md, twenty-second session). `--requests`
//! measured requests follow `--warm-requests` (tags of their own), `--concurrency` workers
//! taking every C-th request.
//!
//! Prints one JSON object: `p50_ms`, `p99_ms` (latency of the measured requests), `rps`,
//! `ok` (2xx answers), `total`, `body_bytes` (mean). With `--warm-only` it sends the warm-up
//! and prints nothing; `--skip-warm` sends the measured rounds only (so that a caller can read
//! the proxy's CPU counters around them).
//!
//! `cargo run --release --example bench_turns -- --url http://127.0.0.1:19002/v1/chat/completions --turns 100`

#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

#[path = "../benches/support/swe_agent.rs"]
mod swe_agent;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Parser, ValueEnum};
use serde_json::Value;

/// How a rollout's requests are written and how the proxy finds its session.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Dialect {
    /// SWE-agent tool calls with proxy-minted ids.
    Ids,
    /// mini-swe-agent's text mode: no tools, no ids.
    Mini,
    /// Terminus-2's JSON keystrokes: no tools, no ids.
    Terminus,
}

#[derive(Parser)]
struct Args {
    /// The chat completions URL.
    #[arg(long)]
    url: String,
    /// Turns of history of the first measured request of each rollout (at least 1; not with
    /// `--openings`).
    #[arg(long, required_unless_present = "openings", default_value_t = 0)]
    turns: usize,
    /// Rollouts (a multiple of `--concurrency`).
    #[arg(long, default_value_t = 32)]
    sessions: usize,
    /// Measured requests per rollout (turns `--turns`, `--turns + 1`, …).
    #[arg(long, default_value_t = 4)]
    rounds: usize,
    /// Requests in flight.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Streaming requests (`"stream": true`).
    #[arg(long)]
    stream: bool,
    /// Send the warm-up only.
    #[arg(long, conflicts_with = "skip_warm")]
    warm_only: bool,
    /// Send the measured rounds only (after a `--warm-only` run).
    #[arg(long)]
    skip_warm: bool,
    /// First rollout's session id as a number (rollouts of one run must not meet another
    /// run's in the proxy's caches unless meant to).
    #[arg(long, default_value_t = 0x0b5e_1000_0000)]
    session_base: u64,
    /// The rollouts' dialect.
    #[arg(long, value_enum, default_value = "ids")]
    dialect: Dialect,
    /// Content dialects: the file the warm-up's replies are written to (`--warm-only`) and
    /// read from (`--skip-warm`).
    #[arg(long)]
    state: Option<PathBuf>,
    /// Send never-seen openings made from these template bodies (JSONL: chat completions
    /// bodies, one a line) instead of rollouts; `--turns`, `--sessions`, `--rounds`,
    /// `--dialect`, `--stream` and `--session-base` do not apply (a template's own `stream`
    /// is sent).
    #[arg(long)]
    openings: Option<PathBuf>,
    /// With `--openings`: measured requests.
    #[arg(long, default_value_t = 3000)]
    requests: usize,
    /// With `--openings`: warm-up requests (unmeasured; tags apart from the measured ones').
    #[arg(long, default_value_t = 512)]
    warm_requests: usize,
}

/// Where a template body takes each request's tag.
const TAG_SLOT: &str = "\u{1}TAG\u{1}";
/// Bytes of a tag: one letter for the phase (`w` warm-up, `m` measured), 6 hex digits of the
/// run (the clock and the process: runs against one proxy do not share tags) and 6 of the
/// request.
const TAG_LEN: usize = 13;

/// An opening's body with a slot for its tag in every message, so that each request is new
/// to the proxy: its system and user messages and tool results take `TAG\n` at the start of
/// their last line (inside the output a tool result wraps, e.g. before mini-swe-agent's
/// `</output>` or Terminus-2's shell prompt), its assistant messages take `TAG ` before the
/// thought (inside Terminus-2's `analysis` string, whose content is JSON); one whose content
/// is null or absent (tool calls only) gets the tag as its content. A list of parts takes it
/// in its first text part.
struct Template {
    /// The body's bytes between the slots (one more than the slots).
    pieces: Vec<Vec<u8>>,
}

impl Template {
    /// The template of one body (a chat request; `line` is its line number in the file);
    /// panics with that number on a body it cannot tag.
    fn new(line: usize, bytes: &[u8]) -> Self {
        let mut body: Value = serde_json::from_slice(bytes)
            .unwrap_or_else(|e| panic!("--openings line {line}: not a JSON body: {e}"));
        let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) else {
            panic!("--openings line {line}: no `messages` array (a chat completions body)");
        };
        assert!(!messages.is_empty(), "--openings line {line}: no messages");
        for message in messages.iter_mut() {
            let assistant = message["role"] == "assistant";
            if assistant && message.get("content").is_none_or(Value::is_null) {
                message["content"] = Value::String(String::new());
            }
            let text = match &mut message["content"] {
                Value::String(text) => text,
                Value::Array(parts) => parts
                    .iter_mut()
                    .find_map(|p| match &mut p["text"] {
                        Value::String(text) => Some(text),
                        _ => None,
                    })
                    .unwrap_or_else(|| {
                        panic!("--openings line {line}: a list of parts without a text part")
                    }),
                other => panic!(
                    "--openings line {line}: a message whose content cannot take a tag: {other}"
                ),
            };
            let at = if assistant {
                ["\"analysis\": \"", "\"analysis\":\""]
                    .iter()
                    .find_map(|key| text.find(key).map(|i| i + key.len()))
                    .unwrap_or(0)
            } else {
                text.trim_end_matches('\n').rfind('\n').map_or(0, |i| i + 1)
            };
            let slot = if assistant {
                format!("{TAG_SLOT} ")
            } else {
                format!("{TAG_SLOT}\n")
            };
            text.insert_str(at, &slot);
        }
        let bytes = serde_json::to_string(&body).unwrap();
        // The slot's control characters are escaped in the JSON text.
        let slot = serde_json::to_string(TAG_SLOT).unwrap();
        let slot = &slot[1..slot.len() - 1];
        Self {
            pieces: bytes.split(slot).map(|p| p.as_bytes().to_vec()).collect(),
        }
    }

    /// The body with `tag` (ASCII, [`TAG_LEN`] bytes) in every slot.
    fn body(&self, tag: &str) -> Vec<u8> {
        let len = self.pieces.iter().map(Vec::len).sum::<usize>();
        let mut out = Vec::with_capacity(len + (self.pieces.len() - 1) * tag.len());
        for (i, piece) in self.pieces.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(tag.as_bytes());
            }
            out.extend_from_slice(piece);
        }
        out
    }
}

/// One rollout's requests as bytes: its fixed fields and its messages, each serialized once,
/// so that the body of any turn is a concatenation.
struct Rollout {
    /// `{"messages":[`.
    head: Vec<u8>,
    /// The other fields, from the `,` after the messages array to the closing brace.
    tail: Vec<u8>,
    messages: Vec<Vec<u8>>,
    /// Messages before the first assistant turn.
    opening: usize,
}

impl Rollout {
    fn new(dialect: Dialect, session: &str, turns: usize, stream: bool) -> Self {
        let mut body = match dialect {
            Dialect::Ids => swe_agent::chat_body(turns, session, stream),
            Dialect::Mini => {
                serde_json::from_slice(&swe_agent::mini_text_bytes(turns, session, stream)).unwrap()
            }
            Dialect::Terminus => {
                serde_json::from_slice(&swe_agent::terminus_text_bytes(turns, session, stream))
                    .unwrap()
            }
        };
        let messages: Vec<Vec<u8>> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| serde_json::to_vec(m).unwrap())
            .collect();
        body.as_object_mut().unwrap().remove("messages");
        let rest = serde_json::to_vec(&body).unwrap();
        let mut tail = b"],".to_vec();
        tail.extend_from_slice(&rest[1..]);
        Self {
            head: b"{\"messages\":[".to_vec(),
            tail,
            opening: messages.len() - 2 * turns,
            messages,
        }
    }

    /// The request whose history holds `turns` turns, as generated.
    fn body(&self, turns: usize) -> Vec<u8> {
        self.body_of(&self.messages[..self.opening + 2 * turns])
    }

    /// The request of these messages.
    fn body_of(&self, messages: &[Vec<u8>]) -> Vec<u8> {
        let len = messages.iter().map(|m| m.len() + 1).sum::<usize>();
        let mut out = Vec::with_capacity(self.head.len() + len + self.tail.len());
        out.extend_from_slice(&self.head);
        for (i, m) in messages.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(m);
        }
        out.extend_from_slice(&self.tail);
        out
    }
}

/// A content-dialect rollout's history as sent so far: the generated turns before the
/// warm-up, then each turn the proxy answered as its reply and the generated observation.
struct Live {
    rollout: Rollout,
    history: Mutex<Vec<Vec<u8>>>,
}

impl Live {
    /// The history of `turns` generated turns.
    fn new(rollout: Rollout, turns: usize) -> Self {
        let history = rollout.messages[..rollout.opening + 2 * turns].to_vec();
        Self {
            rollout,
            history: Mutex::new(history),
        }
    }

    fn body(&self) -> Vec<u8> {
        self.rollout.body_of(&self.history.lock().unwrap())
    }

    /// Appends the proxy's `reply` and the generated observation of that turn.
    fn answered(&self, reply: &str) {
        let mut history = self.history.lock().unwrap();
        let observation = history.len() + 1;
        history.push(
            serde_json::to_vec(&serde_json::json!({"role": "assistant", "content": reply}))
                .unwrap(),
        );
        history.push(self.rollout.messages[observation].clone());
    }
}

/// The reply's `content`: of a chat completion, or of the chunks of its SSE stream.
fn reply_content(body: &[u8]) -> Option<String> {
    if let Ok(value) = serde_json::from_slice::<Value>(body) {
        return value["choices"][0]["message"]["content"]
            .as_str()
            .map(str::to_string);
    }
    let mut content = String::new();
    for line in std::str::from_utf8(body).ok()?.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if let Ok(chunk) = serde_json::from_str::<Value>(data) {
            if let Some(piece) = chunk["choices"][0]["delta"]["content"].as_str() {
                content.push_str(piece);
            }
        }
    }
    Some(content)
}

/// POSTs `body` to `url`: the answer's body, or what went wrong (a non-2xx answer with its
/// body).
async fn send(client: &reqwest::Client, url: &str, body: Vec<u8>) -> Result<Bytes, String> {
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    match response.bytes().await {
        Ok(bytes) if status.is_success() => Ok(bytes),
        Ok(bytes) => Err(format!("{status}: {}", String::from_utf8_lossy(&bytes))),
        Err(e) => Err(e.to_string()),
    }
}

/// The printed summary of measured requests (latency, ok, body bytes) sent in `elapsed`
/// seconds.
fn summary(results: &[(Duration, bool, usize)], elapsed: f64) -> Value {
    let mut latencies: Vec<f64> = results
        .iter()
        .map(|(d, _, _)| d.as_secs_f64() * 1e3)
        .collect();
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| {
        latencies
            .get(((latencies.len().max(1) - 1) as f64 * q).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let total = results.len();
    serde_json::json!({
        "p50_ms": at(0.5),
        "p99_ms": at(0.99),
        "rps": total as f64 / elapsed,
        "ok": results.iter().filter(|r| r.1).count(),
        "total": total,
        "body_bytes": results.iter().map(|r| r.2).sum::<usize>() / total.max(1),
    })
}

/// `--openings`: the warm-up's and the measured requests, each a template with a tag no other
/// request of this run has ([`Template`]); prints the measured requests' summary.
async fn openings(args: &Args, client: reqwest::Client) {
    let path = args.openings.as_ref().unwrap();
    let text = std::fs::read(path).expect("--openings: the template bodies");
    let templates: Arc<Vec<Template>> = Arc::new(
        text.split(|&b| b == b'\n')
            .enumerate()
            .filter(|(_, line)| !line.trim_ascii().is_empty())
            .map(|(i, line)| Template::new(i + 1, line))
            .collect(),
    );
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id()).rotate_left(40);
    let run = (run ^ (run >> 24) ^ (run >> 48)) & 0xff_ffff;
    assert!(!templates.is_empty(), "--openings: no bodies");
    let mut phases = Vec::new();
    if !args.skip_warm {
        phases.push(('w', args.warm_requests));
    }
    if !args.warm_only {
        phases.push(('m', args.requests));
    }
    for (phase, n) in phases {
        let started = Instant::now();
        let workers: Vec<_> = (0..args.concurrency)
            .map(|w| {
                let (client, templates, url) =
                    (client.clone(), templates.clone(), args.url.clone());
                let step = args.concurrency;
                tokio::spawn(async move {
                    let mut done = Vec::new();
                    for i in (w..n).step_by(step) {
                        let tag = format!("{phase}{run:06x}{:06x}", i & 0xff_ffff);
                        assert_eq!(tag.len(), TAG_LEN);
                        let body = templates[i % templates.len()].body(&tag);
                        let len = body.len();
                        let sent = Instant::now();
                        let answer = send(&client, &url, body).await;
                        if let Err(e) = &answer {
                            eprintln!("bench_turns: request {phase}{i} failed: {e}");
                        }
                        done.push((sent.elapsed(), answer.is_ok(), len));
                    }
                    done
                })
            })
            .collect();
        let mut results = Vec::new();
        for worker in workers {
            results.extend(worker.await.unwrap());
        }
        if phase == 'm' {
            println!("{}", summary(&results, started.elapsed().as_secs_f64()));
        }
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    assert!(args.concurrency >= 1, "--concurrency must be at least 1");
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .timeout(Duration::from_secs(600))
        .build()
        .unwrap();
    if args.openings.is_some() {
        openings(&args, client).await;
        return;
    }
    assert!(args.turns >= 1, "--turns must be at least 1");
    assert!(
        args.sessions % args.concurrency == 0,
        "--sessions must be a multiple of --concurrency"
    );
    let content = args.dialect != Dialect::Ids;
    assert!(
        !content || args.state.is_some() || !(args.warm_only || args.skip_warm),
        "a content dialect's split run needs --state"
    );
    let rollouts: Arc<Vec<Live>> = Arc::new(
        (0..args.sessions)
            .map(|s| {
                let session = format!("{:012x}", args.session_base + s as u64);
                let rollout = Rollout::new(
                    args.dialect,
                    &session,
                    args.turns + args.rounds,
                    args.stream,
                );
                Live::new(rollout, args.turns - 1)
            })
            .collect(),
    );
    if content && args.skip_warm {
        let path = args.state.as_ref().unwrap();
        let replies: Vec<String> =
            serde_json::from_slice(&std::fs::read(path).expect("--state: the warm-up's replies"))
                .unwrap();
        assert_eq!(replies.len(), rollouts.len(), "--state of another run");
        for (live, reply) in rollouts.iter().zip(&replies) {
            live.answered(reply);
        }
    }
    // Each phase: the turn counts each rollout sends, in order.
    let mut phases = Vec::new();
    if !args.skip_warm {
        phases.push((false, vec![args.turns - 1]));
    }
    if !args.warm_only {
        phases.push((true, (args.turns..args.turns + args.rounds).collect()));
    }
    for (measured, turns) in phases {
        let started = Instant::now();
        let workers: Vec<_> = (0..args.concurrency)
            .map(|w| {
                let (client, rollouts, turns, url) = (
                    client.clone(),
                    rollouts.clone(),
                    turns.clone(),
                    args.url.clone(),
                );
                let step = args.concurrency;
                tokio::spawn(async move {
                    let mut done = Vec::new();
                    for &t in &turns {
                        for live in rollouts.iter().skip(w).step_by(step) {
                            let body = if content {
                                live.body()
                            } else {
                                live.rollout.body(t)
                            };
                            let len = body.len();
                            let sent = Instant::now();
                            let answer = send(&client, &url, body).await;
                            let elapsed = sent.elapsed();
                            let ok = answer.is_ok();
                            if content {
                                // A content rollout cannot go on without the proxy's reply.
                                let answer = answer.unwrap_or_else(|e| panic!("no reply: {e}"));
                                let reply = reply_content(&answer).unwrap_or_else(|| {
                                    panic!("no content in {}", String::from_utf8_lossy(&answer))
                                });
                                live.answered(&reply);
                            }
                            done.push((elapsed, ok, len));
                        }
                    }
                    done
                })
            })
            .collect();
        let mut results = Vec::new();
        for worker in workers {
            results.extend(worker.await.unwrap());
        }
        let elapsed = started.elapsed().as_secs_f64();
        if !measured {
            if let (true, Some(path)) = (content && args.warm_only, &args.state) {
                // Each rollout's last message pair is the warm-up's reply and observation.
                let replies: Vec<String> = rollouts
                    .iter()
                    .map(|live| {
                        let history = live.history.lock().unwrap();
                        let reply: Value =
                            serde_json::from_slice(&history[history.len() - 2]).unwrap();
                        reply["content"].as_str().unwrap().to_string()
                    })
                    .collect();
                std::fs::write(path, serde_json::to_vec(&replies).unwrap()).unwrap();
            }
            continue;
        }
        println!("{}", summary(&results, elapsed));
    }
}
