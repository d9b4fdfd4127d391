//! Micro-benchmarks of one request's CPU work, stage by stage (issue 8, part 1), for generated
//! SWE-agent-shaped conversations of 2, 20, 100 and 1,000 turns (`support/swe_agent.rs`:
//! about 13 KiB, 58 KiB, 300 KiB and 3 MiB of JSON).
//!
//! Groups (each reports time and throughput in bytes of the request body, except `parse`
//! and `respond`, whose input does not grow with the conversation):
//! - `decode`: `ChatCompletionRequest::from_slice` of the body (its messages found in the
//!   message cache after the first iteration, as a running session's are);
//! - `decode_uncached`: the same with the message cache off, so every message is decoded, as
//!   when a request opens its session;
//! - `prepare`: `pipeline::prepare` (profile, conversation, session, prefix, render);
//! - `render`: `Renderer::render` of the prepared conversation alone;
//! - `parse`: `parse::parse_for` of the mock backend's completion, plus `policy::decide`;
//! - `respond`: `respond::reply` and the JSON encoding of the `chat.completion` object, and
//!   the SSE chunks of the same reply;
//! - `trace`: building the step record and `TraceWriter::write_record` (SHA-256 of prompt and
//!   messages, request delta, one append to a file in the temp directory), in a steady-state
//!   session whose prompt extends the previous one;
//! - `request`: everything but the trace and HTTP: decode, prepare, parse, decide, reply,
//!   JSON encoding.
//!
//! `cargo bench --bench pipeline` (all), `cargo bench --bench pipeline -- request` (one group).
//! Not run by `cargo test` (benches are only compiled with `--benches`/`--all-targets`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "support/swe_agent.rs"]
mod swe_agent;

use std::sync::Arc;
use std::time::Duration;

use asap_proxy::backend::{Backend, BackendCompletion, OpenAiCompletions};
use asap_proxy::config::Mode;
use asap_proxy::config::OnTerminate;
use asap_proxy::config::{ProfileChoice, PromptConfig, DEFAULT_PREFIX_K};
use asap_proxy::openai::chat::ChatCompletionRequest;
use asap_proxy::openai::split::{MessageCache, MESSAGE_CACHE_MIB};
use asap_proxy::parse::parse_for;
use asap_proxy::pipeline::{Prepared, RequestMeta, Scope};
use asap_proxy::policy::{self, Limits, LoopRule};
use asap_proxy::prefix::PrefixStore;
use asap_proxy::profile::Profiles;
use asap_proxy::render::{Format, Renderer};
use asap_proxy::respond::{self, ChunkBuilder};
use asap_proxy::session::{CallId, SessionIndex};
use asap_proxy::trace::{RequestInput, TraceSettings, TraceWriter};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const TURNS: [usize; 4] = [2, 20, 100, 1000];

/// The default limits without the step cap, which would end the 100- and 1,000-turn
/// trajectories (the load benchmark runs the proxy with `--max-steps 100000` likewise).
const LIMITS: Limits = Limits {
    max_steps: 100_000,
    max_unparsable: 5,
    loop_rule: LoopRule::Degenerate,
    loop_window: 10,
    nudges: true,
};

struct Fixture {
    profiles: Profiles,
    renderer: Renderer,
    config: PromptConfig,
    sessions: SessionIndex,
    prefixes: PrefixStore,
    backend: Backend,
    trace: TraceWriter,
    trace_dir: tempfile::TempDir,
    context: asap_proxy::context::ContextSettings,
}

impl Fixture {
    fn new() -> Self {
        let config = PromptConfig {
            profile: ProfileChoice::Auto,
            format: Format::MarkdownXml,
            prefixes: Vec::new(),
            tasks: Vec::new(),
            prefix_k: DEFAULT_PREFIX_K,
        };
        let trace_dir = tempfile::tempdir().unwrap();
        Self {
            profiles: Profiles::builtin().unwrap(),
            renderer: Renderer::new().unwrap(),
            prefixes: PrefixStore::load(&[], config.prefix_k).unwrap(),
            config,
            sessions: SessionIndex::new(1024),
            // Never called: the context needs one.
            backend: Backend::OpenAiCompletions(
                OpenAiCompletions::new("http://127.0.0.1:9/v1".into(), None, None, 1, 0).unwrap(),
            ),
            trace: TraceWriter::new(TraceSettings {
                dir: trace_dir.path().to_path_buf(),
                format: "markdown_xml".into(),
                backend: "http://127.0.0.1:9/v1".into(),
                mode: "proxy",
                prefix_k: DEFAULT_PREFIX_K,
                ..TraceSettings::default()
            }),
            trace_dir,
            context: asap_proxy::context::ContextSettings::default(),
        }
    }

    fn ctx(&self) -> Scope<'_> {
        Scope {
            mode: Mode::Proxy,
            profiles: &self.profiles,
            renderer: &self.renderer,
            prompt_config: &self.config,
            backend: &self.backend,
            trace: &self.trace,
            sessions: &self.sessions,
            prefixes: &self.prefixes,
            max_tokens: 1024,
            limits: LIMITS,
            on_terminate: OnTerminate::Submit,
            tool_calls: Default::default(),
            context: &self.context,
        }
    }

    fn prepare(&self, request: &ChatCompletionRequest) -> Prepared {
        self.ctx()
            .prepare(request, &RequestMeta::default())
            .unwrap()
    }
}

/// What the mock backend answers.
fn completion() -> BackendCompletion {
    BackendCompletion {
        text: fake_backend::constant::COMPLETION.to_string(),
        finish_reason: Some("stop".into()),
        matched_stop: Some("\n<observation>".into()),
        closer: None,
        usage: None,
        model: "mock".into(),
        attempts: 1,
    }
}

/// The CPU work of one request without HTTP and trace: the bytes the client gets.
fn handle(fx: &Fixture, body: &[u8]) -> Vec<u8> {
    let ctx = fx.ctx();
    let request = ChatCompletionRequest::from_slice(body).unwrap();
    let prepared = ctx.prepare(&request, &RequestMeta::default()).unwrap();
    let completion = completion();
    let parsed = parse_for(fx.config.format, &completion.text, &prepared.tools);
    let decision = policy::decide(
        &prepared.conversation,
        &parsed.outcome,
        &prepared.session.nudges,
        &prepared.tools,
        &ctx.limits,
    );
    let reply = respond::reply(
        &parsed,
        &completion,
        &prepared.tools,
        &CallId {
            session: prepared.session.session.clone(),
            step: prepared.conversation.action_count(),
            nudges: prepared.session.nudges.clone(),
        },
        true,
    );
    let out = serde_json::to_vec(&respond::completion_object(
        &reply,
        "chatcmpl-bench",
        "base-model",
        0,
    ))
    .unwrap();
    assert!(matches!(decision, policy::Decision::Accept));
    out
}

fn stages(c: &mut Criterion) {
    let fx = Fixture::new();
    let bodies: Vec<(usize, Vec<u8>)> = TURNS
        .iter()
        .map(|&t| (t, swe_agent::chat_bytes(t, swe_agent::SESSION, false)))
        .collect();
    for (turns, body) in &bodies {
        eprintln!("{turns:>5} turns: {:>8} bytes of JSON", body.len());
    }

    // `decode`: the messages are in the message cache after the first iteration, as a running
    // session's are. `decode_uncached`: the cache off, every message decoded, as when a request
    // opens its session (a restart, another replica, a dialect without ids).
    for (name, cache_bytes) in [("decode", MESSAGE_CACHE_MIB << 20), ("decode_uncached", 0)] {
        MessageCache::configure_global(cache_bytes);
        let mut group = c.benchmark_group(name);
        for (turns, body) in &bodies {
            group.throughput(Throughput::Bytes(body.len() as u64));
            group.bench_with_input(BenchmarkId::from_parameter(turns), body, |b, body| {
                b.iter(|| ChatCompletionRequest::from_slice(body).unwrap())
            });
        }
        group.finish();
    }
    MessageCache::configure_global(MESSAGE_CACHE_MIB << 20);

    let requests: Vec<(usize, usize, ChatCompletionRequest)> = bodies
        .iter()
        .map(|(t, body)| {
            (
                *t,
                body.len(),
                ChatCompletionRequest::from_bytes(body.clone().into()).unwrap(),
            )
        })
        .collect();

    let mut group = c.benchmark_group("prepare");
    for (turns, bytes, request) in &requests {
        group.throughput(Throughput::Bytes(*bytes as u64));
        group.bench_with_input(BenchmarkId::from_parameter(turns), request, |b, r| {
            b.iter(|| fx.prepare(r))
        });
    }
    group.finish();

    let prepared: Vec<(usize, usize, Prepared)> = requests
        .iter()
        .map(|(t, bytes, r)| (*t, *bytes, fx.prepare(r)))
        .collect();

    let mut group = c.benchmark_group("render");
    for (turns, bytes, p) in &prepared {
        group.throughput(Throughput::Bytes(*bytes as u64));
        group.bench_with_input(BenchmarkId::from_parameter(turns), p, |b, p| {
            b.iter(|| {
                fx.renderer
                    .render(fx.config.format, &p.conversation, &p.tools)
                    .unwrap()
            })
        });
    }
    group.finish();

    // The backend body's escaping of the whole prompt: its length first (Content-Length),
    // then the text, in the body's frames.
    let mut group = c.benchmark_group("escape");
    for (turns, _, p) in &prepared {
        let prompt = p.prompt.as_bytes();
        group.throughput(Throughput::Bytes(prompt.len() as u64));
        group.bench_with_input(BenchmarkId::new("len", turns), prompt, |b, prompt| {
            b.iter(|| asap_proxy::util::json_escaped_len(prompt))
        });
        group.bench_with_input(BenchmarkId::new("text", turns), prompt, |b, prompt| {
            b.iter(|| {
                let mut out = Vec::with_capacity(prompt.len() + prompt.len() / 8);
                asap_proxy::util::push_json_escaped(&mut out, prompt);
                out
            })
        });
    }
    group.finish();

    let completion = completion();
    let mut group = c.benchmark_group("parse");
    for (turns, _, p) in &prepared {
        group.throughput(Throughput::Bytes(completion.text.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(turns), p, |b, p| {
            b.iter(|| {
                let parsed = parse_for(fx.config.format, &completion.text, &p.tools);
                let decision = policy::decide(
                    &p.conversation,
                    &parsed.outcome,
                    &p.session.nudges,
                    &p.tools,
                    &LIMITS,
                );
                (parsed, decision)
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("respond");
    for (turns, _, p) in &prepared {
        let parsed = parse_for(fx.config.format, &completion.text, &p.tools);
        let call = CallId {
            session: p.session.session.clone(),
            step: p.conversation.action_count(),
            nudges: p.session.nudges.clone(),
        };
        let encode = || {
            let reply = respond::reply(&parsed, &completion, &p.tools, &call, true);
            let json = serde_json::to_vec(&respond::completion_object(
                &reply,
                "chatcmpl-bench",
                "base-model",
                0,
            ))
            .unwrap();
            let chunks = ChunkBuilder {
                id: "chatcmpl-bench".into(),
                model: "base-model".into(),
                created: 0,
                include_usage: true,
            };
            let sse: usize = chunks
                .rest(&reply)
                .iter()
                .map(|c| serde_json::to_string(c).unwrap().len())
                .sum();
            json.len() + sse
        };
        group.throughput(Throughput::Bytes(encode() as u64));
        group.bench_function(BenchmarkId::from_parameter(turns), |b| b.iter(encode));
    }
    group.finish();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("trace");
    for ((turns, bytes, p), (_, _, request)) in prepared.iter().zip(&requests) {
        let input = Arc::new(RequestInput::from_request(request, &Default::default()));
        let parsed = parse_for(fx.config.format, &completion.text, &p.tools);
        let call = CallId {
            session: p.session.session.clone(),
            step: p.conversation.action_count(),
            nudges: p.session.nudges.clone(),
        };
        let reply = respond::reply(&parsed, &completion, &p.tools, &call, true);
        // Steady state: each record's prompt extends the one stored before it (here: equals
        // it), so the file grows by a small delta per record, as in a real session.
        let record = || {
            let mut record = p.record(call.step, 0);
            record.input = Some(input.clone());
            record.set_completion(&completion, &parsed, &reply);
            record
        };
        // The first record of a session (a new file, the whole request stored): reported
        // once, not benchmarked (it happens once per session and per proxy process).
        let first = std::time::Instant::now();
        runtime.block_on(fx.trace.write_record(&p.session.session, record()));
        eprintln!(
            "trace: first record of a {turns}-turn session took {:.2} ms",
            first.elapsed().as_secs_f64() * 1e3
        );
        group.throughput(Throughput::Bytes(*bytes as u64));
        group.bench_function(BenchmarkId::from_parameter(turns), |b| {
            b.iter(|| runtime.block_on(fx.trace.write_record(&p.session.session, record())))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("request");
    for (turns, body) in &bodies {
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(turns), body, |b, body| {
            b.iter(|| handle(&fx, body))
        });
    }
    group.finish();
    drop(fx.trace_dir);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20);
    targets = stages
}
criterion_main!(benches);
