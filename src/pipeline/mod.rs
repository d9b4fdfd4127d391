//! One turn: a scaffold's request in, the reply out, one trace record per completion call.
//! The stages, in order (docs/architecture.md, "The pipeline"):
//!
//! 1. [`prepare`] (no I/O; the body was decoded by the HTTP layer, [`crate::openai`]):
//!    profile ([`crate::profile`]) → conversation ([`crate::conversation`]) → prefix
//!    ([`crate::prefix`]) → render ([`crate::render`]) → session ([`crate::session`]).
//! 2. [`run_turn`], the async driver: the context window ([`crate::context`]), then per
//!    attempt the backend call ([`crate::backend`]) under the request's budget, fed to
//! 3. the attempt machine ([`Attempts`], no I/O): parse ([`crate::parse`]) → policy
//!    ([`crate::policy`]) → a nudge and the next attempt, or the reply ([`crate::respond`]).
//! 4. `finish`: the one place a turn ends (timings, the record, the turn remembered).
//!
//! Side calls ([`crate::side_call`]) and passthrough mode are other drivers over the same
//! [`prepare`] and `finish`; `replay` runs [`prepare`] and the attempt machine over a trace.

mod attempt;
mod finish;
mod passthrough;
mod prepare;

pub use attempt::{parse_completion, AttemptSettings, Attempts, Verdict};
pub use prepare::{prepare, Prepared};

use std::sync::Arc;
use std::time::Instant;

use crate::backend::{Backend, CallContext, GenerationParams, RequestClock};
use crate::config::{Mode, OnTerminate, PromptConfig};
use crate::context::{self, ContextRecord, ContextSettings, TokenCounter};
use crate::conversation::Conversation;
use crate::error::ProxyError;
use crate::openai::chat::{AsapHeaders, ChatCompletionRequest};
use crate::openai::response::FinishReason;
use crate::policy::Limits;
use crate::prefix::PrefixStore;
use crate::profile::{Action, Profiles};
use crate::render::Renderer;
use crate::respond::Reply;
use crate::session::SessionIndex;
use crate::side_call;
use crate::trace::{
    NudgeRecord, RequestInput, StepDecision, TerminateRecord, Timings, TraceWriter,
};
use finish::{finish, Ending, TurnRecord};

/// A one-time signal that a turn got as far as its first backend call: a streamed answer
/// starts only then (and a short grace later, for the backend's own context-overflow
/// answer), so that what fails before (a prompt that cannot fit the context window, an
/// unknown profile) still reaches the client as an HTTP status.
#[derive(Debug, Default)]
pub struct StartSignal(std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>);

impl StartSignal {
    /// A signal and the receiver that resolves when it fires (or is dropped unfired).
    pub fn new() -> (Arc<Self>, tokio::sync::oneshot::Receiver<()>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (Arc::new(Self(std::sync::Mutex::new(Some(tx)))), rx)
    }

    /// Fires the signal (later calls do nothing).
    pub fn fire(&self) {
        if let Some(tx) = self.0.lock().ok().and_then(|mut s| s.take()) {
            let _ = tx.send(());
        }
    }
}

/// What travels beside a decoded request (set by the HTTP layer; empty for `render`,
/// `replay` and tests): its `X-ASAP-*` headers, its clock and its start signal.
#[derive(Debug, Default, Clone)]
pub struct RequestMeta {
    pub headers: AsapHeaders,
    /// Backend waits are added to it (the `x-asap-overhead-ms` figure).
    pub clock: Option<Arc<RequestClock>>,
    /// Fired when the first backend call starts (streams).
    pub started: Option<Arc<StartSignal>>,
}

impl RequestMeta {
    fn backend_call_starts(&self) {
        if let Some(signal) = &self.started {
            signal.fire();
        }
    }

    fn waited_on_backend(&self, since: Instant) {
        if let Some(clock) = &self.clock {
            clock.add_backend(since.elapsed());
        }
    }
}

/// Everything a turn needs from the server, borrowed.
pub struct Scope<'a> {
    pub mode: Mode,
    pub profiles: &'a Profiles,
    pub renderer: &'a Renderer,
    pub prompt_config: &'a PromptConfig,
    pub backend: &'a Backend,
    pub trace: &'a TraceWriter,
    pub sessions: &'a SessionIndex,
    pub prefixes: &'a PrefixStore,
    /// Cap on generated tokens (config `max_tokens`).
    pub max_tokens: u32,
    pub limits: Limits,
    pub on_terminate: OnTerminate,
    /// Passthrough: the tool calls of a reply kept (`--tool-calls`).
    pub tool_calls: crate::config::ToolCalls,
    /// Context length and token counting (`--context-length`, `--tokenizer`).
    pub context: &'a ContextSettings,
}

impl Scope<'_> {
    /// [`prepare`] with the server's profiles, templates, sessions and prefixes; tells the
    /// request's clock the profile chosen (the `profile` label of its metrics).
    pub fn prepare(
        &self,
        request: &ChatCompletionRequest,
        meta: &RequestMeta,
    ) -> Result<Prepared, ProxyError> {
        let prepared = prepare(
            request,
            &meta.headers,
            self.profiles,
            self.renderer,
            self.prompt_config,
            self.sessions,
            self.prefixes,
        )?;
        if let Some(clock) = &meta.clock {
            clock.set_profile(&prepared.tools.profile);
        }
        Ok(prepared)
    }

    fn attempt_settings(&self) -> AttemptSettings {
        AttemptSettings {
            format: self.prompt_config.format,
            limits: self.limits,
            on_terminate: self.on_terminate,
        }
    }
}

/// How a turn ended, ready to be sent in either API.
#[derive(Debug, Clone)]
pub struct TurnOutcome {
    pub reply: Reply,
    pub session: crate::session::SessionId,
    /// Step index of the turn.
    pub step: usize,
}

/// What the rest of a turn needs of its request once the conversation is built: the decoded
/// messages are dropped then, so a turn waiting on the backend does not hold its history
/// twice (BENCHMARKS.md, RSS).
struct Asked {
    params: GenerationParams,
    model: Option<String>,
    ignored_fields: Vec<String>,
    stream: bool,
    /// False for `tool_choice: "none"`.
    allow_tool_call: bool,
}

impl Asked {
    /// Sampling from the request, its token bound capped by `--max-tokens`.
    fn of(scope: &Scope<'_>, request: &ChatCompletionRequest) -> Self {
        Self {
            params: GenerationParams {
                max_tokens: request
                    .max_tokens()
                    .map_or(scope.max_tokens, |m| m.min(scope.max_tokens)),
                temperature: request.temperature,
                top_p: request.top_p,
                seed: request.seed,
            },
            model: request.model.clone(),
            ignored_fields: request.ignored_fields(),
            stream: request.is_stream(),
            allow_tool_call: !request.tool_choice_is_none(),
        }
    }

    /// A record of a completion call of this request (with a copy of its prompt).
    fn record(
        &self,
        input: &Arc<RequestInput>,
        prepared: &Prepared,
        step: usize,
        attempt: usize,
    ) -> crate::trace::StepRecord {
        let mut record = prepared.record(step, attempt);
        self.fill(&mut record, input);
        record
    }

    fn fill(&self, record: &mut crate::trace::StepRecord, input: &Arc<RequestInput>) {
        record.input = Some(input.clone());
        record.ignored_fields = self.ignored_fields.clone();
        record.stream = self.stream;
    }
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Runs one turn: prepare, then generate–parse–decide until the policy accepts the output or
/// ends the trajectory (a nudge appends the rejected action and its hint and generates again,
/// at most once per kind), build the reply, and write one trace record per completion call.
/// Passthrough mode and side calls take their own driver. Records are written before
/// returning, also when the backend fails.
pub async fn run_turn(
    scope: &Scope<'_>,
    request: ChatCompletionRequest,
    meta: &RequestMeta,
) -> Result<TurnOutcome, ProxyError> {
    let started = Instant::now();
    let mut input = Arc::new(RequestInput::from_request(&request, &meta.headers));
    let prepared = scope.prepare(&request, meta)?;
    if input.instance_id.is_none() && prepared.task.is_some() {
        Arc::make_mut(&mut input).instance_id = prepared.task.clone();
    }
    // The other drivers and `finish` are boxed: a future is as large as its largest await, and
    // every turn in flight holds this one while it waits on the backend (BENCHMARKS.md, issue
    // 23, twenty-first session).
    if scope.mode == Mode::Passthrough {
        return Box::pin(passthrough::run(
            scope, &request, meta, &input, prepared, started,
        ))
        .await;
    }
    let asked = Asked::of(scope, &request);
    if let Some(kind) = side_call::detect(&request) {
        let prompt = side_call::prompt(&request);
        return Box::pin(run_side_call(
            scope, &asked, meta, &input, prepared, prompt, kind, started,
        ))
        .await;
    }
    drop(request);
    let mut turn = Attempts::new(prepared);
    let (session, step) = (turn.session().clone(), turn.step);
    if let Some(reply) = confirmation(&turn) {
        let record = asked.record(&input, &turn.prepared, step, 0);
        let ending = Ending {
            session: &session,
            step,
            remember: Some((&turn.prepared, &turn.nudges)),
        };
        let mut record = TurnRecord::Whole(record);
        record.set_response(&reply);
        return Box::pin(finish(
            scope,
            ending,
            record,
            Timings::default(),
            started,
            Ok(reply),
        ))
        .await;
    }
    let settings = scope.attempt_settings();
    let mut fitted = fit_context(scope, &asked, meta, &mut turn.prepared).await;
    let mut render_ms = ms_since(started);
    let stops = settings.format.stops(&turn.prepared.tools);
    let stops: Vec<&str> = stops.iter().map(String::as_str).collect();
    loop {
        let attempt = turn.attempt;
        let context = match fitted {
            Ok(record) => record,
            Err(e) => {
                let record = TurnRecord::Whole(asked.record(&input, &turn.prepared, step, attempt));
                let ending = Ending {
                    session: &session,
                    step,
                    remember: None,
                };
                // Rendering and the context check ran (and failed): their time is render_ms.
                let timings = Timings {
                    render_ms,
                    ..Timings::default()
                };
                return Box::pin(finish(scope, ending, record, timings, started, Err(e))).await;
            }
        };
        meta.backend_call_starts();
        let attempt_started = Instant::now();
        let mut record = turn.prepared.record_without_prompt(step, attempt);
        asked.fill(&mut record, &input);
        record.nudges_used = turn.nudges.0.clone();
        record.context = context;
        // The record's prompt and request deltas are taken while the backend generates (the
        // backend call is polled first, so its request is under way), off the answer's path;
        // the request body is released once they are. The turn gives its prompt to the call
        // and the record: once sent (and stored, unless the record holds it whole) it is
        // freed, and a retry renders it again from the conversation.
        let prompt = std::mem::take(&mut turn.prepared.prompt);
        let held = scope.renderer.prompt_held(&prompt);
        let lineage = held.as_ref().map(|h| h.lineage);
        // A prompt the render cache does not hold (a session's opening, a rollout past the
        // cache's bound) is escaped once, here: the backend body sends those frames (its
        // length is theirs, no pass to count it) and a record that stores the prompt whole
        // writes them as they are, instead of each escaping the text (a held prompt's frames,
        // when the cache keeps them, serve both the same way). The text itself is let go once
        // the record has taken its delta, so the frames replace it rather than add to it
        // while the call waits.
        let (json_len, escaped) = match held {
            Some(held) => (Some(held.json_len), held.escaped),
            None => {
                let frames = crate::util::JsonFrames::of(prompt.as_bytes(), b"");
                (Some(frames.len()), Some(Arc::new(frames)))
            }
        };
        let again = || {
            scope
                .renderer
                .render_shared(
                    settings.format,
                    &turn.prepared.conversation,
                    &turn.prepared.tools,
                )
                .map_err(|e| ProxyError::Internal(e.to_string()))
        };
        let (completion, mut record) = tokio::join!(
            scope.backend.complete(
                crate::backend::Prompt::new(prompt.clone(), &again)
                    .with_json_len(json_len)
                    .with_escaped(escaped.clone()),
                &asked.params,
                &stops,
                asked.model.as_deref(),
                CallContext {
                    session: &session,
                    step,
                    attempt,
                    side_call: None,
                },
            ),
            async {
                let pending =
                    scope
                        .trace
                        .begin_from(&session, record, &prompt, lineage, escaped.as_ref());
                drop(prompt);
                drop(escaped);
                input = Arc::new(input.without_body());
                pending
            }
        );
        meta.waited_on_backend(attempt_started);
        let backend_ms = ms_since(attempt_started);
        let mut completion = match completion {
            Ok(c) => c,
            Err(e) => {
                let timings = Timings {
                    render_ms,
                    backend_ms,
                    ..Timings::default()
                };
                let ending = Ending {
                    session: &session,
                    step,
                    remember: None,
                };
                let record = TurnRecord::Begun(record);
                return Box::pin(finish(scope, ending, record, timings, started, Err(e))).await;
            }
        };

        let parse_started = Instant::now();
        let (parsed, verdict) = turn.judge(&settings, &mut completion, asked.allow_tool_call);
        let timings = Timings {
            render_ms,
            backend_ms,
            parse_ms: ms_since(parse_started),
            total_ms: 0.0,
        };
        match verdict {
            Verdict::Nudge(kind) => {
                let hint = turn.push_nudge(kind);
                record.set_parse(&completion, &parsed);
                record.decision = StepDecision::Nudge;
                record.nudge = Some(NudgeRecord {
                    step,
                    attempt,
                    kind,
                    rejected: parsed.outcome.as_ref().ok().cloned(),
                    hint,
                });
                record.timings = Timings {
                    total_ms: ms_since(started),
                    ..timings
                };
                scope.trace.commit(record).await;
                tracing::info!(%session, step, ?kind, "nudge: generating again");
                let render_started = Instant::now();
                // A template failure ends the turn like a context failure: at the top of the
                // loop, through `finish`, with an error record.
                fitted = match turn.render(scope.renderer, settings.format) {
                    Ok(()) => fit_context(scope, &asked, meta, &mut turn.prepared).await,
                    Err(e) => Err(e),
                };
                render_ms = ms_since(render_started);
            }
            Verdict::Reply(reply) => {
                record.set_completion(&completion, &parsed, &reply);
                // A later compaction request may offer no tools to tell an edit by: the
                // index keeps that this session issued one.
                if let Some(action) = &reply.action {
                    if crate::policy::is_edit(action, &turn.prepared.tools) {
                        scope.sessions.note_edit(&session);
                    }
                }
                let ending = Ending {
                    session: &session,
                    step,
                    remember: Some((&turn.prepared, &turn.nudges)),
                };
                let record = TurnRecord::Begun(record);
                return Box::pin(finish(scope, ending, record, timings, started, Ok(reply))).await;
            }
            Verdict::Terminate(termination, reply) => {
                record.decision = StepDecision::Terminate;
                record.termination = Some(TerminateRecord {
                    step,
                    attempt,
                    termination,
                    description: termination.describe(),
                    on_terminate: Some(scope.on_terminate),
                });
                tracing::info!(%session, step, reason = termination.describe(), "trajectory terminated");
                match &reply {
                    Ok(reply) => record.set_completion(&completion, &parsed, reply),
                    Err(error) => {
                        record.set_parse(&completion, &parsed);
                        record.error = Some(error.to_string());
                    }
                }
                let ending = Ending {
                    session: &session,
                    step,
                    remember: Some((&turn.prepared, &turn.nudges)),
                };
                let record = TurnRecord::Begun(record);
                return Box::pin(finish(scope, ending, record, timings, started, reply)).await;
            }
        }
    }
}

/// Terminus-2 asks to confirm a `task_complete`: the answer stays the same, with no model
/// call (the trace record has a response and no completion).
fn confirmation(turn: &Attempts) -> Option<Reply> {
    let confirmation = turn.prepared.tools.dialect.and_then(|d| d.confirmation())?;
    let last = turn.prepared.conversation.steps.last();
    matches!(
        last.and_then(|s| s.action.as_ref()),
        Some(Action::Submit { .. })
    )
    .then(|| Reply {
        content: Some(confirmation),
        tool_call: None,
        more_tool_calls: Vec::new(),
        finish_reason: FinishReason::Stop,
        usage: Default::default(),
        action: Some(Action::Submit { message: None }),
        parse_error: None,
    })
}

/// Makes the prompt fit the backend's context window with room for `max_tokens`, eliding the
/// oldest long observations when needed ([`crate::context`]). `None` when the context
/// length is unknown.
///
/// Errors: [`ProxyError::ContextLengthExceeded`] when it cannot fit.
async fn fit_context(
    scope: &Scope<'_>,
    asked: &Asked,
    meta: &RequestMeta,
    prepared: &mut Prepared,
) -> Result<Option<ContextRecord>, ProxyError> {
    let max_tokens = asked.params.max_tokens;
    let length = match scope.context.length {
        Some(n) => n,
        None => {
            let asked_at = Instant::now();
            let reported = scope.backend.context_length().await;
            meta.waited_on_backend(asked_at);
            match reported {
                Some(n) => n,
                None => return Ok(None),
            }
        }
    };
    let counter = TokenCounter {
        tokenizer: scope.context.tokenizer.as_ref(),
        backend: scope.backend,
        model: asked.model.as_deref(),
        clock: meta.clock.as_deref(),
    };
    let render = |c: &Conversation| {
        scope
            .renderer
            .render(scope.prompt_config.format, c, &prepared.tools)
            .map_err(|e| ProxyError::Internal(e.to_string()))
    };
    let (elided, record) = context::fit(
        &prepared.conversation,
        &prepared.prompt,
        render,
        &counter,
        length,
        max_tokens,
    )
    .await?;
    if let Some((conversation, prompt)) = elided {
        tracing::info!(
            elided = record.elided_observations,
            bytes = record.elided_bytes,
            tokens = record.prompt_tokens,
            length,
            "observations elided to fit the context window"
        );
        prepared.conversation = conversation;
        prepared.prompt = Arc::new(prompt);
    }
    Ok(Some(record))
}

/// Serves a side call: the transcript as a plain continuation, logged with `side_call`.
#[allow(clippy::too_many_arguments)]
async fn run_side_call(
    scope: &Scope<'_>,
    asked: &Asked,
    meta: &RequestMeta,
    input: &Arc<RequestInput>,
    mut side: Prepared,
    prompt: String,
    kind: side_call::SideCallKind,
    started: Instant,
) -> Result<TurnOutcome, ProxyError> {
    let session = side.session.session.clone();
    let step = side.session.step_base + side.conversation.action_count();
    side.prompt = Arc::new(prompt);
    meta.backend_call_starts();
    let backend_started = Instant::now();
    let again = || Ok(side.prompt.clone());
    let completion = scope
        .backend
        .complete(
            crate::backend::Prompt::new(side.prompt.clone(), &again),
            &asked.params,
            &side_call::STOP,
            asked.model.as_deref(),
            CallContext {
                session: &session,
                step,
                attempt: 0,
                side_call: Some(kind.as_str()),
            },
        )
        .await;
    meta.waited_on_backend(backend_started);
    let timings = Timings {
        backend_ms: ms_since(backend_started),
        ..Timings::default()
    };
    let mut record = TurnRecord::Whole(asked.record(input, &side, step, 0));
    record.kind = Some(kind);
    let ending = Ending {
        session: &session,
        step,
        remember: None,
    };
    let result = completion.map(|completion| {
        let reply = Reply {
            content: Some(completion.text.trim().to_string()),
            tool_call: None,
            more_tool_calls: Vec::new(),
            finish_reason: if completion.hit_length() {
                FinishReason::Length
            } else {
                FinishReason::Stop
            },
            usage: completion.usage.unwrap_or_default(),
            action: None,
            parse_error: None,
        };
        record.completion = Some(completion);
        record.set_response(&reply);
        if kind == side_call::SideCallKind::Compaction {
            let text = reply.content.as_deref().unwrap_or_default();
            side.remember_summary(scope.sessions, text, &session, step);
        }
        reply
    });
    finish(scope, ending, record, timings, started, result).await
}
