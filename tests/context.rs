//! The context window over HTTP (src/context.rs): the backend's length from `/v1/models` or
//! the flag, tokens from `/tokenize` or the estimate, block-wise elision of old long
//! observations that keeps prompts append-only between cuts, and OpenAI's 400 when nothing
//! fits.

use serde_json::{json, Value};

use crate::util::backend::{FakeBackend, Scripted};
use crate::util::proxy::Proxy;
use crate::util::{continue_with, request, tool_call};

/// A listing of about `bytes` bytes, distinct per `i`.
fn output(i: usize, bytes: usize) -> String {
    (0..bytes / 40)
        .map(|l| format!("src/module_{i:02}/file_{l:04}.py    1024 bytes\n"))
        .collect()
}

#[tokio::test]
async fn old_observations_are_elided_a_block_at_a_time_and_prompts_stay_append_only_between_cuts() {
    let turns = 50;
    let backend = FakeBackend::start(
        (0..turns)
            .map(|i| {
                Scripted::text(&format!(
                    "Next.\n<bash>ls /testbed/src/module_{i:02}</bash>\n"
                ))
            })
            .collect(),
    )
    .await;
    // vLLM-like: 12,000 tokens of context (room for more than a block of 10 recent steps),
    // `/tokenize` counts one token per 4 bytes.
    backend.set_context(12_000, true);
    let proxy = Proxy::start(&backend.url()).await;
    let mut body = request("swe-agent-1");
    body["max_tokens"] = json!(500);
    for i in 0..turns {
        let (status, resp) = proxy.post(&body).await;
        assert_eq!(status, 200, "turn {i}: {resp}");
        assert_eq!(tool_call(&resp)["function"]["name"], "bash");
        continue_with(&mut body, &resp, &output(i, 2400));
    }
    let prompts = backend.prompts();
    assert_eq!(prompts.len(), turns);
    for (i, p) in prompts.iter().enumerate() {
        assert!(
            p.len().div_ceil(4) + 500 <= 12_000,
            "prompt {i} does not fit"
        );
        // The latest observation is always whole.
        if i > 0 {
            assert!(
                p.contains(&output(i - 1, 2400)),
                "prompt {i} lost its latest output"
            );
        }
    }
    assert!(prompts[turns - 1].contains("elided to fit the model's context window"));
    assert!(backend.tokenize_calls() > 0);

    let steps: Vec<Value> = proxy.first_trace()[1..]
        .iter()
        .map(|r| r["data"].clone())
        .collect();
    let cuts: Vec<u64> = steps
        .iter()
        .map(|s| s["context"]["elided_before_step"].as_u64().unwrap())
        .collect();
    assert!(
        cuts.windows(2).all(|w| w[0] <= w[1]),
        "the cut only moves forward: {cuts:?}"
    );
    assert!(cuts.iter().all(|c| c % 10 == 0), "{cuts:?}");
    assert_eq!(steps[0]["context"]["context_length"], 12_000);
    assert_eq!(steps[0]["context"]["counted_by"], "bytes");
    assert_eq!(steps[turns - 1]["context"]["counted_by"], "backend");
    // Append-only except where the cut moved.
    let moves = cuts.windows(2).filter(|w| w[0] != w[1]).count();
    let breaks = prompts
        .windows(2)
        .filter(|w| !w[1].starts_with(w[0].strip_suffix("## Thinking\n").unwrap()))
        .count();
    assert!(moves >= 1);
    let break_at: Vec<usize> = prompts
        .windows(2)
        .enumerate()
        .filter(|(_, w)| !w[1].starts_with(w[0].strip_suffix("## Thinking\n").unwrap()))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(breaks, moves, "cuts {cuts:?} breaks at {break_at:?}");
    assert!(
        moves * 5 <= turns,
        "a cut frees room for several turns: {cuts:?}"
    );
}

#[tokio::test]
async fn the_flag_overrides_the_backend_and_without_tokenize_tokens_are_estimated() {
    let backend = FakeBackend::start(
        (0..12)
            .map(|i| Scripted::text(&format!("Look.\n<bash>cat part_{i}.txt</bash>\n")))
            .collect(),
    )
    .await;
    backend.set_context(1_000_000, false);
    let proxy = Proxy::start_with(&backend.url(), |a| a.context_length = Some(16_000)).await;
    let mut body = request("swe-agent-1");
    body["max_tokens"] = json!(1000);
    for i in 0..12 {
        let (status, resp) = proxy.post(&body).await;
        assert_eq!(status, 200, "{resp}");
        continue_with(&mut body, &resp, &output(i, 3000));
    }
    // One token per 2 bytes assumed: 15,000 tokens leave room for 30,000 bytes.
    for p in backend.prompts() {
        assert!(p.len() <= 30_000, "{}", p.len());
    }
    let last = proxy.first_trace().pop().unwrap();
    let context = &last["data"]["context"];
    assert_eq!(context["context_length"], 16_000);
    assert_eq!(context["counted_by"], "estimate");
    assert!(context["elided_observations"].as_u64().unwrap() > 0);
    assert_eq!(backend.tokenize_calls(), 0);
}

#[tokio::test]
async fn a_history_that_cannot_fit_is_openais_context_length_400() {
    let backend = FakeBackend::start(vec![Scripted::text("Look.\n<bash>ls</bash>\n")]).await;
    backend.set_context(4096, true);
    let proxy = Proxy::start(&backend.url()).await;
    let mut body = request("swe-agent-1");
    let (_, resp) = proxy.post(&body).await;
    // The latest observation alone is larger than the window: it is never elided.
    continue_with(&mut body, &resp, &output(0, 40_000));
    let (status, err) = proxy.post(&body).await;
    assert_eq!(status, 400);
    assert_eq!(err["error"]["code"], "context_length_exceeded");
    assert_eq!(err["error"]["type"], "invalid_request_error");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "This model's maximum context length is 4096 tokens. However, you requested"
        ),
        "{message}"
    );
    assert_eq!(
        backend.calls(),
        1,
        "the backend is not called for a prompt that cannot fit"
    );
    let last = proxy.first_trace().pop().unwrap();
    assert_eq!(last["data"]["decision"], "error");
    assert!(last["data"]["error"]
        .as_str()
        .unwrap()
        .contains("maximum context length"));
    // The record's timings say where the time went: rendering and the context check.
    let timings = &last["data"]["timings"];
    assert!(timings["render_ms"].as_f64().unwrap() > 0.0, "{timings}");
    assert_eq!(timings["backend_ms"], json!(0.0), "{timings}");
    // Streamed, the same request gets the same HTTP 400 (not a 200 stream with an error
    // event, which LiteLLM would not map to its context-window error).
    body["stream"] = json!(true);
    let (status, err) = proxy.post(&body).await;
    assert_eq!(status, 400);
    assert_eq!(err["error"]["code"], "context_length_exceeded");
    assert_eq!(backend.calls(), 1);
}
