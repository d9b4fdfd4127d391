//! Prometheus metrics (`GET /metrics`, docs/metrics.md): requests, stage latencies, parse
//! failures, nudges, terminations, backend errors and retries, work in flight.
//!
//! Design: every server owns one [`Metrics`], a `metrics-exporter-prometheus` recorder held in
//! its state and rendered by its own router; nothing is installed as the process-global
//! recorder. The hooks below set that recorder as the thread's recorder for the duration of a
//! synchronous closure ([`::metrics::with_local_recorder`]) and use the `metrics` macros inside
//! it. Hooks never await, so the scoping is exact even on a multi-threaded runtime. Why not the
//! global recorder: it can be installed once per process, so servers started in one process
//! (the integration tests start dozens, in parallel) would share and mix their counts, and a
//! program embedding the library could not install its own. The cost is plumbing: the HTTP
//! layer, the trace writer and the backend client each hold a clone of the server's
//! [`Metrics`].
//!
//! Where each value is measured: the HTTP middleware (`server/observe.rs`) counts and times
//! requests when their response body ends (for SSE, the end of the stream); every step
//! record the trace writer writes goes through [`Metrics::record_step`] (so the trace and the
//! metrics count the same completion calls); the completions client reports each retry and
//! each failed call ([`Metrics::backend_retry`], [`Metrics::backend_error`]).
//!
//! Labels are bounded: endpoints are route templates, profiles the built-in profile names,
//! every other label a fixed enum; no session ids, models or model-written text.

use std::sync::Arc;
use std::time::Duration;

use ::metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use crate::error::ProxyError;
use crate::policy::Termination;
use crate::session::NudgeKind;

/// `Content-Type` of `GET /metrics`: the Prometheus text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How often [`Metrics::spawn_upkeep`] folds recorded histogram samples into their buckets.
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// `profile` label of requests that never reached a profile (`/health`, 401s, bad bodies).
pub const NO_PROFILE: &str = "none";

/// Metric names (docs/metrics.md lists labels, units and where each is measured).
pub mod names {
    /// Counter `{endpoint, profile, status}`: HTTP requests served.
    pub const REQUESTS: &str = "asap_requests_total";
    /// Histogram `{endpoint}`, seconds: wall time until the response body ended.
    pub const REQUEST_DURATION: &str = "asap_request_duration_seconds";
    /// Histogram `{endpoint}`, seconds: the proxy's own time (`x-asap-overhead-ms`).
    pub const PROXY_OVERHEAD: &str = "asap_proxy_overhead_seconds";
    /// Gauge: requests whose response has not ended.
    pub const REQUESTS_IN_FLIGHT: &str = "asap_requests_in_flight";
    /// Gauge: steps running (one per active agent session).
    pub const STEPS_IN_FLIGHT: &str = "asap_steps_in_flight";
    /// Counter `{profile, decision}`: completion calls (trace step records).
    pub const STEPS: &str = "asap_steps_total";
    /// Histogram, seconds: render (and context fit) per completion call.
    pub const RENDER_DURATION: &str = "asap_render_duration_seconds";
    /// Histogram, seconds: the backend call per completion call, retries included.
    pub const BACKEND_DURATION: &str = "asap_backend_duration_seconds";
    /// Histogram, seconds: parse and policy decision per completion call.
    pub const PARSE_DURATION: &str = "asap_parse_duration_seconds";
    /// Counter `{class}`: completions without an action.
    pub const PARSE_FAILURES: &str = "asap_parse_failures_total";
    /// Counter `{kind}`: nudges.
    pub const NUDGES: &str = "asap_nudges_total";
    /// Counter `{reason}`: trajectories ended by a rule.
    pub const TERMINATIONS: &str = "asap_terminations_total";
    /// Counter `{kind}`: backend calls failed after their retries.
    pub const BACKEND_ERRORS: &str = "asap_backend_errors_total";
    /// Counter `{kind}`: backend attempts retried.
    pub const BACKEND_RETRIES: &str = "asap_backend_retries_total";
    /// Counter `{result}` (`hit`, `miss`): messages looked up in the process's message cache.
    pub const MESSAGE_CACHE_LOOKUPS: &str = "asap_message_cache_lookups_total";
    /// Gauge, bytes: JSON text of the messages the cache holds.
    pub const MESSAGE_CACHE_BYTES: &str = "asap_message_cache_bytes";
    /// Gauge, bytes: the cache's bound (`--message-cache-mib`).
    pub const MESSAGE_CACHE_CAPACITY: &str = "asap_message_cache_capacity_bytes";
    /// Gauge: new messages are admitted one in this many (1: all; the cache narrows it when
    /// the histories in flight exceed its bound).
    pub const MESSAGE_CACHE_ADMIT_ONE_IN: &str = "asap_message_cache_admit_one_in";
    /// Counter `{result}` (`hit`, `extended`, `miss`): prompts asked of the server's render
    /// cache.
    pub const RENDER_CACHE_LOOKUPS: &str = "asap_render_cache_lookups_total";
    /// Gauge, bytes: prompt text and escaped frames the render cache holds.
    pub const RENDER_CACHE_BYTES: &str = "asap_render_cache_bytes";
    /// Gauge, bytes: of those, the prompts' JSON-escaped frames.
    pub const RENDER_CACHE_ESCAPED_BYTES: &str = "asap_render_cache_escaped_bytes";
    /// Gauge, bytes: the render cache's bound (`--render-cache-mib`; 0: off).
    pub const RENDER_CACHE_CAPACITY: &str = "asap_render_cache_capacity_bytes";
    /// Gauge: whole renders the render cache gives an entry, one in this many (1: all).
    pub const RENDER_CACHE_ADMIT_ONE_IN: &str = "asap_render_cache_admit_one_in";
}

/// Buckets (seconds) of the proxy's own work: overhead, render, parse. Typical values are
/// tens of microseconds to a few milliseconds; long prompts and context fitting reach 100 ms.
const FAST_BUCKETS: [f64; 14] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0,
];

/// Buckets (seconds) of waits on the model: a short step takes 100 ms, a long generation on a
/// loaded server minutes (the default backend timeout is 300 s, the request timeout 600 s).
const SLOW_BUCKETS: [f64; 14] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0,
];

/// One server's metrics registry; cheap to clone (clones share it).
#[derive(Clone)]
pub struct Metrics {
    recorder: Arc<PrometheusRecorder>,
    handle: PrometheusHandle,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// An empty registry with the histogram buckets above and every metric described (its
    /// `# HELP` line).
    pub fn new() -> Self {
        let recorder = builder()
            .unwrap_or_else(|e| {
                // Unreachable with the constant buckets; summaries instead of histograms.
                tracing::error!(error = %e, "metrics buckets refused; histograms become summaries");
                PrometheusBuilder::new()
            })
            .build_recorder();
        let metrics = Self {
            handle: recorder.handle(),
            recorder: Arc::new(recorder),
        };
        metrics.with(describe);
        metrics
    }

    /// Runs `f` with this registry as the thread's recorder (see the module doc).
    fn with<T>(&self, f: impl FnOnce() -> T) -> T {
        ::metrics::with_local_recorder(self.recorder.as_ref(), f)
    }

    /// The registry in the Prometheus text format (version 0.0.4).
    pub fn render(&self) -> String {
        self.handle.render()
    }

    /// Folds recorded histogram samples into their buckets. Rendering does it too; without
    /// either, samples accumulate in memory.
    pub fn upkeep(&self) {
        self.handle.run_upkeep();
    }

    /// Runs [`Metrics::upkeep`] every [`UPKEEP_INTERVAL`] on the current runtime until the
    /// returned guard is dropped.
    pub fn spawn_upkeep(&self) -> UpkeepTask {
        let metrics = self.clone();
        UpkeepTask(tokio::spawn(async move {
            let mut tick = tokio::time::interval(UPKEEP_INTERVAL);
            loop {
                tick.tick().await;
                metrics.upkeep();
            }
        }))
    }

    /// A request is being served: `asap_requests_in_flight` goes up until the request is
    /// [finished](Metrics::request_finished).
    pub fn request_started(&self) {
        self.with(|| gauge!(names::REQUESTS_IN_FLIGHT).increment(1.0));
    }

    /// A request ended (its response body was sent or dropped): counts it, records its
    /// duration and, when known, the proxy's own share of it.
    pub fn request_finished(&self, request: &FinishedRequest<'_>) {
        self.with(|| {
            gauge!(names::REQUESTS_IN_FLIGHT).decrement(1.0);
            counter!(
                names::REQUESTS,
                "endpoint" => request.endpoint.to_string(),
                "profile" => request.profile.unwrap_or(NO_PROFILE).to_string(),
                "status" => request.status.to_string(),
            )
            .increment(1);
            histogram!(names::REQUEST_DURATION, "endpoint" => request.endpoint.to_string())
                .record(request.duration);
            if let Some(overhead) = request.overhead {
                histogram!(names::PROXY_OVERHEAD, "endpoint" => request.endpoint.to_string())
                    .record(overhead);
            }
        });
    }

    /// Sets `asap_steps_in_flight` (read when rendering, from the server's step counter).
    pub fn set_steps_in_flight(&self, steps: usize) {
        self.with(|| gauge!(names::STEPS_IN_FLIGHT).set(steps as f64));
    }

    /// Sets the message cache's series (read when rendering, from the process's cache,
    /// `openai::split::MessageCache`): lookups answered (`hits`) and not (`misses`) since the
    /// process started, the bytes of JSON text held and allowed, and the share of new messages
    /// admitted (one in `admit_one_in`).
    pub fn set_message_cache(
        &self,
        hits: u64,
        misses: u64,
        (bytes, capacity): (usize, usize),
        admit_one_in: u64,
    ) {
        self.with(|| {
            counter!(names::MESSAGE_CACHE_LOOKUPS, "result" => "hit").absolute(hits);
            counter!(names::MESSAGE_CACHE_LOOKUPS, "result" => "miss").absolute(misses);
            gauge!(names::MESSAGE_CACHE_BYTES).set(bytes as f64);
            gauge!(names::MESSAGE_CACHE_CAPACITY).set(capacity as f64);
            gauge!(names::MESSAGE_CACHE_ADMIT_ONE_IN).set(admit_one_in as f64);
        });
    }

    /// Sets the render cache's series (read when rendering, from the server's renderer,
    /// [`crate::render::Renderer::render_cache_stats`]).
    pub fn set_render_cache(&self, stats: &crate::render::RenderCacheStats) {
        self.with(|| {
            for (result, count) in [
                ("hit", stats.hits),
                ("extended", stats.extended),
                ("miss", stats.misses),
            ] {
                counter!(names::RENDER_CACHE_LOOKUPS, "result" => result).absolute(count);
            }
            gauge!(names::RENDER_CACHE_BYTES).set(stats.bytes as f64);
            gauge!(names::RENDER_CACHE_ESCAPED_BYTES).set(stats.escaped_bytes as f64);
            gauge!(names::RENDER_CACHE_CAPACITY).set(stats.capacity as f64);
            gauge!(names::RENDER_CACHE_ADMIT_ONE_IN).set(stats.admit_one_in as f64);
        });
    }

    /// One completion call (or side call, or answer made without the model), as its trace
    /// record counts it ([`crate::trace::StepRecord::counts`]): the decision, the stage times,
    /// the parse failure, the nudge, the termination. A stage given 0 ms did not run and is not
    /// observed.
    pub fn record_step(&self, step: &StepCounts<'_>) {
        self.with(|| {
            counter!(
                names::STEPS,
                "profile" => step.profile.to_string(),
                "decision" => step.decision,
            )
            .increment(1);
            for (name, ms) in [
                (names::RENDER_DURATION, step.render_ms),
                (names::BACKEND_DURATION, step.backend_ms),
                (names::PARSE_DURATION, step.parse_ms),
            ] {
                if ms > 0.0 {
                    histogram!(name).record(ms / 1e3);
                }
            }
            if let Some(class) = step.parse_failure {
                counter!(names::PARSE_FAILURES, "class" => class).increment(1);
            }
            if let Some(kind) = step.nudge {
                counter!(names::NUDGES, "kind" => nudge_label(kind)).increment(1);
            }
            if let Some(end) = step.termination {
                counter!(names::TERMINATIONS, "reason" => termination_label(end)).increment(1);
            }
        });
    }

    /// A backend call failed after its retries. Errors of the proxy's own making (client
    /// gone, shutdown cut-off, encoding) are not counted; see [`backend_error_kind`].
    pub fn backend_error(&self, error: &ProxyError) {
        if let Some(kind) = backend_error_kind(error) {
            self.with(|| counter!(names::BACKEND_ERRORS, "kind" => kind).increment(1));
        }
    }

    /// A failed backend attempt is about to be retried; `error` is why it failed.
    pub fn backend_retry(&self, error: &ProxyError) {
        let kind = backend_error_kind(error).unwrap_or("other");
        self.with(|| counter!(names::BACKEND_RETRIES, "kind" => kind).increment(1));
    }
}

/// What [`Metrics::record_step`] counts of one completion call: labels are the trace record's
/// own values (`decision`, `parse.error.class`, `nudge.kind`, `termination.reason`).
#[derive(Debug, Clone, Copy)]
pub struct StepCounts<'a> {
    pub profile: &'a str,
    pub decision: &'static str,
    /// Stage times in milliseconds; 0 = the stage did not run.
    pub render_ms: f64,
    pub backend_ms: f64,
    pub parse_ms: f64,
    pub parse_failure: Option<&'static str>,
    pub nudge: Option<NudgeKind>,
    pub termination: Option<&'a Termination>,
}

/// What the HTTP layer knows of a request when it ends.
#[derive(Debug, Clone, Copy)]
pub struct FinishedRequest<'a> {
    /// The matched route (`/v1/chat/completions`), or `unmatched`.
    pub endpoint: &'a str,
    /// The profile that served it, if it got that far.
    pub profile: Option<&'a str>,
    /// HTTP status of the response head (SSE: 200, even when the stream ends in an error).
    pub status: u16,
    /// Wall time, seconds.
    pub duration: f64,
    /// Seconds spent in the proxy, backend waits excluded (`x-asap-overhead-ms`); `None`
    /// when the request was refused before the clock started (401).
    pub overhead: Option<f64>,
}

/// Aborts the upkeep task when dropped.
#[derive(Debug)]
pub struct UpkeepTask(tokio::task::JoinHandle<()>);

impl Drop for UpkeepTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn builder() -> Result<PrometheusBuilder, metrics_exporter_prometheus::BuildError> {
    let mut builder = PrometheusBuilder::new();
    for name in [
        names::PROXY_OVERHEAD,
        names::RENDER_DURATION,
        names::PARSE_DURATION,
    ] {
        builder = builder.set_buckets_for_metric(Matcher::Full(name.into()), &FAST_BUCKETS)?;
    }
    for name in [names::REQUEST_DURATION, names::BACKEND_DURATION] {
        builder = builder.set_buckets_for_metric(Matcher::Full(name.into()), &SLOW_BUCKETS)?;
    }
    Ok(builder)
}

fn describe() {
    use ::metrics::Unit;
    describe_counter!(
        names::MESSAGE_CACHE_LOOKUPS,
        "Messages looked up in the process's message cache, by result (hit: not decoded again)"
    );
    describe_gauge!(
        names::MESSAGE_CACHE_BYTES,
        Unit::Bytes,
        "JSON text of the messages the message cache holds"
    );
    describe_gauge!(
        names::MESSAGE_CACHE_CAPACITY,
        Unit::Bytes,
        "The message cache's bound (--message-cache-mib)"
    );
    describe_gauge!(
        names::MESSAGE_CACHE_ADMIT_ONE_IN,
        "New messages the message cache admits: one in this many (1: all)"
    );
    describe_counter!(
        names::RENDER_CACHE_LOOKUPS,
        "Prompts rendered, by how the render cache answered (hit: whole; extended: only the new steps rendered; miss: rendered whole)"
    );
    describe_gauge!(
        names::RENDER_CACHE_BYTES,
        Unit::Bytes,
        "Prompt text and escaped frames the render cache holds"
    );
    describe_gauge!(
        names::RENDER_CACHE_ESCAPED_BYTES,
        Unit::Bytes,
        "Of the render cache's bytes, the prompts' JSON-escaped frames (dropped first past the bound)"
    );
    describe_gauge!(
        names::RENDER_CACHE_CAPACITY,
        Unit::Bytes,
        "The render cache's bound (--render-cache-mib; 0: off)"
    );
    describe_gauge!(
        names::RENDER_CACHE_ADMIT_ONE_IN,
        "Whole renders the render cache gives an entry: one in this many (1: all; more once the rollouts in flight pass its bound)"
    );
    describe_counter!(
        names::REQUESTS,
        "HTTP requests served, by route, profile and status, counted when the response ends"
    );
    describe_histogram!(
        names::REQUEST_DURATION,
        Unit::Seconds,
        "Wall time of a request until its response body ended (SSE: the end of the stream)"
    );
    describe_histogram!(
        names::PROXY_OVERHEAD,
        Unit::Seconds,
        "Time a request spent in the proxy, backend waits excluded (x-asap-overhead-ms)"
    );
    describe_gauge!(
        names::REQUESTS_IN_FLIGHT,
        "HTTP requests whose response has not ended yet (open SSE streams included)"
    );
    describe_gauge!(
        names::STEPS_IN_FLIGHT,
        "Steps running (one per active agent session; they outlive a client that left)"
    );
    describe_counter!(
        names::STEPS,
        "Completion calls by profile and policy decision (one per trace step record)"
    );
    describe_histogram!(
        names::RENDER_DURATION,
        Unit::Seconds,
        "Rendering the prompt and fitting it to the context window, per completion call"
    );
    describe_histogram!(
        names::BACKEND_DURATION,
        Unit::Seconds,
        "One completion call to the backend, retries and backoff included"
    );
    describe_histogram!(
        names::PARSE_DURATION,
        Unit::Seconds,
        "Parsing the completion and deciding about it, per completion call"
    );
    describe_counter!(
        names::PARSE_FAILURES,
        "Completions that yielded no action, by failure class"
    );
    describe_counter!(names::NUDGES, "Outputs rejected with a hint, by nudge kind");
    describe_counter!(
        names::TERMINATIONS,
        "Trajectories ended by a policy rule, by reason"
    );
    describe_counter!(
        names::BACKEND_ERRORS,
        "Backend calls that failed after their retries, by error code"
    );
    describe_counter!(
        names::BACKEND_RETRIES,
        "Backend attempts retried, by the error code of the failed attempt"
    );
}

/// The `kind` label of a backend failure: the OpenAI error code the client gets
/// (`backend_unavailable`, `backend_error`, `backend_timeout`, `rate_limit_exceeded`,
/// `context_length_exceeded`, `request_timeout`, `replay_miss`); `None` for errors that are
/// not the backend's (client disconnected, shutdown cut-off, internal).
pub fn backend_error_kind(error: &ProxyError) -> Option<&'static str> {
    match error {
        ProxyError::BackendUnavailable(_)
        | ProxyError::Backend(_)
        | ProxyError::BackendTimeout(_)
        | ProxyError::RateLimited { .. }
        | ProxyError::ContextLengthExceeded(_)
        | ProxyError::RequestTimeout(_)
        | ProxyError::ReplayMiss(_) => Some(error.body().error.code),
        ProxyError::InvalidRequest { .. }
        | ProxyError::PayloadTooLarge(_)
        | ProxyError::Unauthorized
        | ProxyError::ShuttingDown
        | ProxyError::ClientDisconnected
        | ProxyError::Terminated(_)
        | ProxyError::Internal(_) => None,
    }
}

/// The `kind` label of a nudge: the trace's `nudge.kind`.
fn nudge_label(kind: NudgeKind) -> &'static str {
    match kind {
        NudgeKind::SubmitBeforeEdit => "submit_before_edit",
        NudgeKind::RepeatedAction => "repeated_action",
    }
}

/// The `reason` label of a termination: the trace's `terminate.reason` (without the rule's
/// parameter, which would multiply the series).
fn termination_label(termination: &Termination) -> &'static str {
    termination.name()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_match_the_trace_vocabulary() {
        // The labels are the trace's own names, so dashboards and `report` agree.
        for kind in [NudgeKind::SubmitBeforeEdit, NudgeKind::RepeatedAction] {
            assert_eq!(serde_json::to_value(kind).unwrap(), nudge_label(kind));
        }
        for t in [
            Termination::SubmitBeforeEditAgain,
            Termination::RepeatedActionAgain,
            Termination::StepCap { max_steps: 3 },
            Termination::Unparsable { consecutive: 5 },
            Termination::DegenerateLoop {
                window: 10,
                repeats: 3,
            },
        ] {
            assert_eq!(
                serde_json::to_value(t).unwrap()["reason"],
                termination_label(&t)
            );
        }
    }

    #[test]
    fn registries_are_separate_and_histograms_have_buckets() {
        let a = Metrics::new();
        let b = Metrics::new();
        a.backend_retry(&ProxyError::BackendUnavailable("x".into()));
        a.backend_error(&ProxyError::ClientDisconnected);
        a.request_started();
        a.request_finished(&FinishedRequest {
            endpoint: "/health",
            profile: None,
            status: 200,
            duration: 0.002,
            overhead: Some(0.000_3),
        });
        let text = a.render();
        assert!(
            text.contains("asap_backend_retries_total{kind=\"backend_unavailable\"} 1"),
            "{text}"
        );
        assert!(!text.contains("asap_backend_errors_total{"), "{text}");
        assert!(text.contains(
            "asap_requests_total{endpoint=\"/health\",profile=\"none\",status=\"200\"} 1"
        ));
        assert!(text.contains("asap_requests_in_flight 0"), "{text}");
        assert!(
            text.contains(
                "asap_proxy_overhead_seconds_bucket{endpoint=\"/health\",le=\"0.0005\"} 1"
            ),
            "{text}"
        );
        assert!(text.contains("asap_request_duration_seconds_count{endpoint=\"/health\"} 1"));
        assert!(!b.render().contains("asap_requests_total{"));
    }
}
