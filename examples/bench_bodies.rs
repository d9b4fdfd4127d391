//! Writes the load benchmark's request bodies (see `BENCHMARKS.md`):
//!
//! - `chat-<N>.json` / `chat-<N>-stream.json`: the SWE-agent-shaped chat request of
//!   `benches/support/swe_agent.rs` with N turns, non-streaming / streaming;
//! - `chat-<N>.jsonl` / `chat-<N>-stream.jsonl` (with `--sessions K`): K such bodies, one
//!   per line, each in its own session with its own contents (for load tools that cycle through
//!   bodies: concurrent requests then come from distinct rollouts, as they do in a run);
//! - `foreign-<N>[-stream].jsonl` / `mini-<N>[-stream].jsonl` / `terminus-<N>[-stream].jsonl`
//!   (with `--sessions K`): K bodies of the paths that open a session on every request, each
//!   with its own contents: SWE-agent conversations with tool-call ids that are not the
//!   proxy's, mini-swe-agent's text mode and Terminus-2's JSON keystrokes (content dialects,
//!   no ids at all);
//! - `parts-<N>[-stream].jsonl` (with `--sessions K`): the `foreign` bodies with each tool
//!   result a list of one text part (SWE-agent's and OpenHands' shape);
//! - `growth-100.jsonl` (with `--sessions K`): the 101 requests of one growing 100-turn
//!   session, in order (the trace's bytes per turn against each turn's new content);
//! - `completions-<N>.json` / `completions-<N>-stream.json`: the `/v1/completions` body the
//!   proxy sends to its backend for that chat request (same prompt, stop sequences and
//!   parameters), for the direct-to-backend baseline.
//!
//! `cargo run --release --example bench_bodies -- --out DIR --turns 2,20,100,1000`

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

#[path = "../benches/support/swe_agent.rs"]
mod swe_agent;

use std::path::PathBuf;

use asap_proxy::config::{ProfileChoice, PromptConfig};
use asap_proxy::openai::chat::ChatCompletionRequest;
use asap_proxy::openai::completions::CompletionRequest;
use asap_proxy::pipeline::prepare;
use asap_proxy::prefix::PrefixStore;
use asap_proxy::profile::Profiles;
use asap_proxy::render::{Format, Renderer};
use asap_proxy::session::SessionIndex;
use clap::Parser;

#[derive(Parser)]
struct Args {
    /// Output directory (created).
    #[arg(long)]
    out: PathBuf,
    /// Conversation lengths, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "2,20,100,1000")]
    turns: Vec<usize>,
    /// Also write `chat-<N>.jsonl` with this many bodies in distinct sessions (0: none; only
    /// for N up to 100).
    #[arg(long, default_value_t = 0)]
    sessions: usize,
    /// Model name in the completions bodies (the proxy's `--backend-model`).
    #[arg(long, default_value = "mock")]
    model: String,
    /// `max_tokens` of the completions bodies (the proxy's `--max-tokens`).
    #[arg(long, default_value_t = 1024)]
    max_tokens: u32,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    std::fs::create_dir_all(&args.out)?;
    let profiles = Profiles::builtin()?;
    let renderer = Renderer::new()?;
    let config = PromptConfig {
        profile: ProfileChoice::Auto,
        format: Format::MarkdownXml,
        prefixes: Vec::new(),
        tasks: Vec::new(),
        prefix_k: asap_proxy::config::DEFAULT_PREFIX_K,
    };
    let prefixes = PrefixStore::load(&[], config.prefix_k)?;
    let sessions = SessionIndex::new(16);
    for &turns in &args.turns {
        for stream in [false, true] {
            let suffix = if stream { "-stream" } else { "" };
            let chat = swe_agent::chat_bytes(turns, swe_agent::SESSION, stream);
            std::fs::write(args.out.join(format!("chat-{turns}{suffix}.json")), &chat)?;
            let request = ChatCompletionRequest::from_slice(&chat)?;
            let prepared = prepare(
                &request,
                &Default::default(),
                &profiles,
                &renderer,
                &config,
                &sessions,
                &prefixes,
            )?;
            let completions = CompletionRequest {
                model: args.model.clone(),
                prompt: &prepared.prompt,
                max_tokens: args.max_tokens,
                temperature: request.temperature,
                top_p: request.top_p,
                seed: request.seed,
                stop: config
                    .format
                    .step_end_stops()
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                stream,
                cache_prompt: true,
            };
            std::fs::write(
                args.out.join(format!("completions-{turns}{suffix}.json")),
                serde_json::to_vec(&completions)?,
            )?;
            if !stream {
                println!(
                    "{turns:>5} turns: chat body {:>9} bytes, prompt {:>9} bytes",
                    chat.len(),
                    prepared.prompt.len()
                );
            }
        }
        for stream in [false, true] {
            if args.sessions == 0 || turns > 100 {
                break;
            }
            let suffix = if stream { "-stream" } else { "" };
            let mut lines = Vec::new();
            for k in 0..args.sessions {
                let session = format!("{:012x}", 0x0b5e_0000_0000u64 + k as u64);
                lines.extend(swe_agent::chat_bytes(turns, &session, stream));
                lines.push(b'\n');
            }
            std::fs::write(args.out.join(format!("chat-{turns}{suffix}.jsonl")), lines)?;
        }
        for stream in [false, true] {
            if args.sessions == 0 || turns > 100 {
                break;
            }
            let suffix = if stream { "-stream" } else { "" };
            let (mut foreign, mut mini, mut terminus) = (Vec::new(), Vec::new(), Vec::new());
            let mut parts = Vec::new();
            for k in 0..args.sessions {
                let tag = format!("{k:04}");
                foreign.extend(swe_agent::foreign_id_bytes(turns, &tag, stream));
                foreign.push(b'\n');
                parts.extend(swe_agent::parts_bytes(turns, &tag, stream));
                parts.push(b'\n');
                mini.extend(swe_agent::mini_text_bytes(turns, &tag, stream));
                mini.push(b'\n');
                terminus.extend(swe_agent::terminus_text_bytes(turns, &tag, stream));
                terminus.push(b'\n');
            }
            let out = |name: &str| args.out.join(format!("{name}-{turns}{suffix}.jsonl"));
            std::fs::write(out("foreign"), foreign)?;
            std::fs::write(out("parts"), parts)?;
            std::fs::write(out("mini"), mini)?;
            std::fs::write(out("terminus"), terminus)?;
        }
        if args.sessions > 0 && turns == 100 {
            let mut lines = Vec::new();
            for body in swe_agent::growing_bytes(turns, "0b5e00000fff") {
                lines.extend(body);
                lines.push(b'\n');
            }
            std::fs::write(args.out.join(format!("growth-{turns}.jsonl")), lines)?;
        }
    }
    Ok(())
}
