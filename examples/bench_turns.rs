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
    /// Turns of history of the first measured request of each rollout (at least 1).
    #[arg(long)]
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

#[tokio::main]
async fn main() {
    let args = Args::parse();
    assert!(args.turns >= 1, "--turns must be at least 1");
    assert!(
        args.concurrency >= 1 && args.sessions % args.concurrency == 0,
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
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .timeout(Duration::from_secs(600))
        .build()
        .unwrap();
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
                            let answer = match client
                                .post(&url)
                                .header("content-type", "application/json")
                                .body(body)
                                .send()
                                .await
                            {
                                Ok(response) => {
                                    let status = response.status();
                                    match response.bytes().await {
                                        Ok(bytes) if status.is_success() => Ok(bytes),
                                        Ok(bytes) => Err(format!(
                                            "{status}: {}",
                                            String::from_utf8_lossy(&bytes)
                                        )),
                                        Err(e) => Err(e.to_string()),
                                    }
                                }
                                Err(e) => Err(e.to_string()),
                            };
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
        let mut latencies: Vec<f64> = results
            .iter()
            .map(|(d, _, _)| d.as_secs_f64() * 1e3)
            .collect();
        latencies.sort_by(f64::total_cmp);
        let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
        let total = results.len();
        let summary = serde_json::json!({
            "p50_ms": at(0.5),
            "p99_ms": at(0.99),
            "rps": total as f64 / elapsed,
            "ok": results.iter().filter(|r| r.1).count(),
            "total": total,
            "body_bytes": results.iter().map(|r| r.2).sum::<usize>() / total.max(1),
        });
        println!("{summary}");
    }
}
