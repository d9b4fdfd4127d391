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
//! Prints one JSON object: `p50_ms`, `p99_ms` (latency of the measured requests), `rps`,
//! `ok` (2xx answers), `total`, `body_bytes` (mean). With `--warm-only` it sends the warm-up
//! and prints nothing; `--skip-warm` sends the measured rounds only (so that a caller can read
//! the proxy's CPU counters around them).
//!
//! `cargo run --release --example bench_turns -- --url http://127.0.0.1:19002/v1/chat/completions --turns 100`

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

#[path = "../benches/support/swe_agent.rs"]
mod swe_agent;

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;

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
    fn new(session: &str, turns: usize, stream: bool) -> Self {
        let mut body = swe_agent::chat_body(turns, session, stream);
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

    /// The request whose history holds `turns` turns.
    fn body(&self, turns: usize) -> Vec<u8> {
        let messages = &self.messages[..self.opening + 2 * turns];
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

#[tokio::main]
async fn main() {
    let args = Args::parse();
    assert!(args.turns >= 1, "--turns must be at least 1");
    assert!(
        args.concurrency >= 1 && args.sessions % args.concurrency == 0,
        "--sessions must be a multiple of --concurrency"
    );
    let rollouts: Arc<Vec<Rollout>> = Arc::new(
        (0..args.sessions)
            .map(|s| {
                let session = format!("{:012x}", args.session_base + s as u64);
                Rollout::new(&session, args.turns + args.rounds, args.stream)
            })
            .collect(),
    );
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
                        for rollout in rollouts.iter().skip(w).step_by(step) {
                            let body = rollout.body(t);
                            let len = body.len();
                            let sent = Instant::now();
                            let ok = match client
                                .post(&url)
                                .header("content-type", "application/json")
                                .body(body)
                                .send()
                                .await
                            {
                                Ok(response) => {
                                    let ok = response.status().is_success();
                                    ok && response.bytes().await.is_ok()
                                }
                                Err(_) => false,
                            };
                            done.push((sent.elapsed(), ok, len));
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
