//! `GET /metrics` (issue 10): real requests over loopback against the fake backend move the
//! exact series they should; `--log-format json` makes every line of the binary's standard
//! error a JSON object.

use std::time::Duration;

use serde_json::{json, Value};

use crate::util::backend::{FakeBackend, Scripted};
use crate::util::cli::Served;
use crate::util::proxy::{serve_with, Proxy};
use crate::util::request;

const KEY: &str = "metrics-test-key";

/// `GET /metrics` without credentials: the status, the `Content-Type` and the text.
async fn scrape(proxy: &Proxy) -> (u16, String, String) {
    let resp = proxy.get("/metrics").await;
    let status = resp.status().as_u16();
    let content_type = resp.headers()["content-type"].to_str().unwrap().to_string();
    (status, content_type, resp.text().await.unwrap())
}

/// The value of the series `series` (name and labels exactly as rendered), if present.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
}

/// Scrapes until `series` reaches `expected` (requests are counted when the server is done
/// with their response body, a moment after the client has read it), then returns the text.
async fn scrape_when(proxy: &Proxy, series: &str, expected: f64) -> String {
    for _ in 0..100 {
        let (_, _, text) = scrape(proxy).await;
        if value(&text, series) == Some(expected) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, _, text) = scrape(proxy).await;
    panic!("{series} never reached {expected}:\n{text}");
}

#[tokio::test]
async fn requests_steps_parse_failures_nudges_terminations_and_backend_errors_are_counted() {
    let (backend, proxy) = serve_with(
        vec![
            // Request 1: a submit before any edit is nudged, the second output accepted.
            Scripted::text("Looks fine.\n<submit/>\n"),
            Scripted::text("Let me look first.\n<bash>ls</bash>\n"),
            // Request 2 (SSE): no action; with --max-unparsable 1 that ends the trajectory.
            Scripted::text("I am not sure what to do here."),
            // Request 3: a 503, retried once, a 503 again: 502 to the client.
            Scripted::Error {
                status: 503,
                message: "overloaded".into(),
            },
            Scripted::Error {
                status: 503,
                message: "still overloaded".into(),
            },
        ],
        |a| {
            a.api_key = vec![KEY.into()];
            a.max_unparsable = Some(1);
            a.backend_retries = Some(1);
        },
    )
    .await;

    // Nothing counted yet; /metrics needs no key and speaks the text format 0.0.4.
    let (status, content_type, text) = scrape(&proxy).await;
    assert_eq!(status, 200);
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    assert!(!text.contains("asap_steps_total{"), "{text}");

    let body = request("swe-agent-1");
    let post = |body: &Value| {
        proxy
            .client
            .post(proxy.url())
            .bearer_auth(KEY)
            .json(body)
            .send()
    };
    let r1 = post(&body).await.unwrap();
    assert_eq!(r1.status(), 200);
    r1.bytes().await.unwrap();
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let r2 = post(&streamed).await.unwrap();
    assert_eq!(r2.status(), 200);
    let events = r2.text().await.unwrap();
    assert!(events.contains("data: [DONE]"), "{events}");
    let r3 = post(&body).await.unwrap();
    assert_eq!(r3.status(), 502);
    r3.bytes().await.unwrap();
    let r4 = proxy.send_chat(&body).await;
    assert_eq!(r4.status(), 401);
    r4.bytes().await.unwrap();
    assert_eq!(backend.calls(), 5);

    let chat = "endpoint=\"/v1/chat/completions\"";
    let text = scrape_when(
        &proxy,
        &format!("asap_requests_total{{{chat},profile=\"none\",status=\"401\"}}"),
        1.0,
    )
    .await;
    let expect = |series: &str, expected: f64| {
        assert_eq!(value(&text, series), Some(expected), "{series}\n{text}");
    };
    // Requests: by route, profile (known once the pipeline chose one) and status.
    expect(
        &format!("asap_requests_total{{{chat},profile=\"swe-agent\",status=\"200\"}}"),
        2.0,
    );
    expect(
        &format!("asap_requests_total{{{chat},profile=\"swe-agent\",status=\"502\"}}"),
        1.0,
    );
    expect(
        &format!("asap_request_duration_seconds_count{{{chat}}}"),
        4.0,
    );
    // The 401 never reached the clock: no overhead for it.
    expect(&format!("asap_proxy_overhead_seconds_count{{{chat}}}"), 3.0);
    // Completion calls: the nudged one, the accepted one, the terminating one, the failed one.
    let steps = |decision: &str| {
        format!("asap_steps_total{{profile=\"swe-agent\",decision=\"{decision}\"}}")
    };
    expect(&steps("nudge"), 1.0);
    expect(&steps("accept"), 1.0);
    expect(&steps("terminate"), 1.0);
    expect(&steps("error"), 1.0);
    expect("asap_parse_failures_total{class=\"no_action\"}", 1.0);
    expect("asap_nudges_total{kind=\"submit_before_edit\"}", 1.0);
    expect("asap_terminations_total{reason=\"unparsable\"}", 1.0);
    expect(
        "asap_backend_errors_total{kind=\"backend_unavailable\"}",
        1.0,
    );
    expect(
        "asap_backend_retries_total{kind=\"backend_unavailable\"}",
        1.0,
    );
    // Stage histograms: every call rendered and called the backend; the failed one parsed
    // nothing.
    expect("asap_render_duration_seconds_count", 4.0);
    expect("asap_backend_duration_seconds_count", 4.0);
    expect("asap_parse_duration_seconds_count", 3.0);
    expect("asap_backend_duration_seconds_bucket{le=\"+Inf\"}", 4.0);
    // The 503 was retried after a 250 ms backoff: at least that call is above 0.1 s.
    assert!(
        value(&text, "asap_backend_duration_seconds_bucket{le=\"0.1\"}").unwrap() <= 3.0,
        "{text}"
    );
    // Only the scrape itself is in flight.
    expect("asap_requests_in_flight", 1.0);
    expect("asap_steps_in_flight", 0.0);
    for help in [
        "# HELP asap_requests_total ",
        "# TYPE asap_requests_total counter",
        "# TYPE asap_backend_duration_seconds histogram",
        "# TYPE asap_steps_in_flight gauge",
    ] {
        assert!(text.contains(help), "{help}\n{text}");
    }
    // Bounded labels: no session ids, no model text.
    assert!(
        !text.contains("call_asap_") && !text.contains("not sure"),
        "{text}"
    );
}

/// The message cache's series: a request whose messages were all decoded before (the same
/// history again) is answered from the cache, so hits rise by at least its message count, and
/// the bytes held and the bound are shown. The cache is process-wide (tests in parallel share
/// it), hence lower bounds.
#[tokio::test]
async fn the_message_cache_shows_its_hits_misses_and_size() {
    let backend = FakeBackend::start(vec![Scripted::text("Look.\n<bash>ls</bash>\n"); 2]).await;
    let proxy = Proxy::start(&backend.url()).await;
    let mut body = request("swe-agent-1");
    body["messages"][1]["content"] = json!(format!("a task seen once: {}", uuid_like()));
    let messages = body["messages"].as_array().unwrap().len() as f64;
    let hits = "asap_message_cache_lookups_total{result=\"hit\"}";
    let misses = "asap_message_cache_lookups_total{result=\"miss\"}";
    let (status, _) = proxy.post(&body).await;
    assert_eq!(status, 200);
    let (_, _, before) = scrape(&proxy).await;
    assert!(value(&before, misses).unwrap() >= 1.0, "{before}");
    let (status, _) = proxy.post(&body).await;
    assert_eq!(status, 200);
    let (_, _, after) = scrape(&proxy).await;
    let gained = value(&after, hits).unwrap() - value(&before, hits).unwrap_or(0.0);
    assert!(
        gained >= messages,
        "{gained} hits for {messages} messages:\n{after}"
    );
    assert!(value(&after, "asap_message_cache_bytes").unwrap() > 0.0);
    assert_eq!(
        value(&after, "asap_message_cache_capacity_bytes"),
        Some((asap_proxy::openai::split::MESSAGE_CACHE_MIB << 20) as f64)
    );
    assert!(after.contains("# HELP asap_message_cache_lookups_total"));
    // A few short histories: every new message admitted.
    assert_eq!(value(&after, "asap_message_cache_admit_one_in"), Some(1.0));
}

/// The render cache's series (one cache per server): a history rendered before is a hit, the
/// same history with one more turn is extended (only the new step rendered), a first one a
/// miss; the bytes held and the bound are shown.
#[tokio::test]
async fn the_render_cache_shows_its_hits_extensions_and_misses() {
    let backend = FakeBackend::start(vec![Scripted::text("Look.\n<bash>ls</bash>\n"); 3]).await;
    let proxy = Proxy::start(&backend.url()).await;
    let body = request("swe-agent-1");
    let mut longer = body.clone();
    let messages = longer["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": "Look.", "tool_calls": [{"id": "call_x", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"cat setup.py\"}"}}]}));
    messages.push(json!({"role": "tool", "tool_call_id": "call_x", "content": "from setuptools import setup"}));
    for body in [&body, &body, &longer] {
        let (status, answer) = proxy.post(body).await;
        assert_eq!(status, 200, "{answer}");
    }
    let (_, _, text) = scrape(&proxy).await;
    for (result, expected) in [("hit", 1.0), ("extended", 1.0), ("miss", 1.0)] {
        let series = format!("asap_render_cache_lookups_total{{result=\"{result}\"}}");
        assert_eq!(value(&text, &series), Some(expected), "{series}:\n{text}");
    }
    // The prompt and its escaped frames (escaping only grows a text).
    let bytes = value(&text, "asap_render_cache_bytes").unwrap();
    let escaped = value(&text, "asap_render_cache_escaped_bytes").unwrap();
    assert!(
        escaped > 0.0 && bytes > 2.0 * escaped - 4096.0,
        "{bytes} {escaped}"
    );
    assert_eq!(
        value(&text, "asap_render_cache_capacity_bytes"),
        Some((asap_proxy::render::RENDER_CACHE_MIB << 20) as f64)
    );
    // A few short sessions are far from the bound: every whole render is admitted.
    assert_eq!(value(&text, "asap_render_cache_admit_one_in"), Some(1.0));
    assert!(text.contains("# HELP asap_render_cache_lookups_total"));
}

/// A text no other test sends (nanoseconds since the epoch and the process id).
fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{nanos}-{}", std::process::id())
}

#[tokio::test]
async fn each_server_has_its_own_registry() {
    let backend = FakeBackend::start(vec![Scripted::text("Look.\n<bash>ls</bash>\n")]).await;
    let busy = Proxy::start(&backend.url()).await;
    let idle = Proxy::start(&backend.url()).await;
    let (status, _) = busy.post(&request("swe-agent-1")).await;
    assert_eq!(status, 200);
    let series = "asap_steps_total{profile=\"swe-agent\",decision=\"accept\"}";
    scrape_when(&busy, series, 1.0).await;
    let (_, _, text) = scrape(&idle).await;
    assert_eq!(value(&text, series), None, "{text}");
}

#[tokio::test]
async fn log_format_json_writes_one_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().to_str().unwrap();
    // The address comes in the log line itself (no plain "listening on" line).
    let mut served = Served::start_until(
        &[
            "--log-format",
            "json",
            "--backend",
            "http://127.0.0.1:9/v1",
            "--log-dir",
            log_dir,
        ],
        &[],
        |line| {
            let record: Value = serde_json::from_str(line).ok()?;
            (record["fields"]["message"] == "asap-proxy listening")
                .then(|| record["fields"]["local"].as_str().unwrap().to_string())
        },
    );
    let local = served.base.clone();
    let client = reqwest::Client::new();
    let bad = client
        .post(format!("http://{local}/v1/chat/completions"))
        .body("[]")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    bad.bytes().await.unwrap();
    // Counted when the server is done with the body: scrape until it shows.
    let series =
        "asap_requests_total{endpoint=\"/v1/chat/completions\",profile=\"none\",status=\"400\"} 1";
    let mut scraped = String::new();
    for _ in 0..100 {
        scraped = client
            .get(format!("http://{local}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if scraped.contains(series) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(scraped.contains(series), "{scraped}");
    served.sigterm();
    assert!(served.wait().success());
    let lines = served.stderr_lines();
    assert!(lines.len() >= 3, "{lines:?}");
    for line in &lines {
        let record: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(record["level"].is_string(), "{line}");
        assert!(record["fields"].is_object(), "{line}");
    }
    assert!(
        lines.iter().any(|l| l.contains("\"request rejected\"")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("\"shutdown complete\"")),
        "{lines:?}"
    );
}
