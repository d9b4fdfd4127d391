//! The stages of one request, called in order (DESIGN.md "One request, start to end"):
//! decode → session → profile → conversation → render → backend → parse → policy → respond
//! → trace. [`prepare`] is the I/O-free front half, shared by `serve` and `render`;
//! [`run_step`] adds the backend calls, the parse, the nudge/termination policy and the trace.

use std::time::Instant;

use crate::backend::{Backend, BackendCompletion, CallContext, GenerationParams};
use crate::config::{OnTerminate, ProfileChoice, PromptConfig};
use crate::context::{self, ContextRecord, ContextSettings, TokenCounter};
use crate::conversation::{Action, Conversation, Example};
use crate::dialect::Dialect;
use crate::error::ProxyError;
use crate::openai::chat::ChatCompletionRequest;
use crate::parse::{parse_for, with_closing_stop, Parsed};
use crate::policy::{self, Decision, Limits};
use crate::prefix::PrefixStore;
use crate::profile::{Profiles, ToolSet};
use crate::render::Renderer;
use crate::respond::{self, Reply};
use crate::session::{CallId, SessionId, SessionIndex, SessionState};
use crate::side_call;
use std::sync::Arc;

use crate::trace::{
    NudgeRecord, RequestInput, StepDecision, StepRecord, TerminateRecord, Timings, TraceWriter,
};

/// A request turned into a prompt.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub tools: ToolSet,
    /// The conversation with this session's nudged steps in place.
    pub conversation: Conversation,
    pub prompt: String,
    /// The session the history belongs to (fresh if none is found).
    pub session: SessionState,
    /// Index key of the prompt of the history alone (no nudged steps): what a turn answered
    /// without a tool call is remembered under ([`crate::session::prompt_key`]).
    base_prompt_key: crate::session::IndexKey,
    /// The reference prefix rendered, if any.
    pub prefix: Option<PrefixInfo>,
    /// The session index scope of the request ([`crate::session::index_scope`]).
    index_scope: String,
}

impl Prepared {
    /// Remembers a turn answered with `content` and no tool call, so the next request of
    /// the session (which carries no minted id) is recognised: by that content and by this
    /// request's prompt, within the request's task and run.
    pub fn remember_turn(
        &self,
        sessions: &SessionIndex,
        content: &str,
        session: &SessionId,
        nudges: &crate::session::NudgeState,
    ) {
        sessions.remember(
            &self.index_scope,
            content,
            self.base_prompt_key,
            session,
            nudges,
        );
    }
}

/// Which prefix a request got (for the trace's session record).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PrefixInfo {
    /// `instance_id` of the prefix (`shell-demo` for the built-in demonstration).
    pub id: String,
    /// `header`, `metadata`, `fingerprint` or `default`.
    pub matched_by: &'static str,
    /// Steps rendered.
    pub k: usize,
    /// The demonstration rendered with a task prefix that names one (`example`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub example: Option<String>,
}

/// Session, profile, conversation and prompt for a request. No I/O; `sessions` is consulted
/// for histories whose latest turns carry no minted id.
///
/// Errors: an unknown profile name (400), a template failure (500).
pub fn prepare(
    request: &ChatCompletionRequest,
    profiles: &Profiles,
    renderer: &Renderer,
    config: &PromptConfig,
    sessions: &SessionIndex,
    prefixes: &PrefixStore,
) -> Result<Prepared, ProxyError> {
    let profile = match &config.profile {
        ProfileChoice::Auto => profiles.detect(&request.tools, &request.detection_text()),
        ProfileChoice::Named(name) => profiles
            .get(name)
            .map_err(|e| ProxyError::invalid(e.to_string()))?,
    };
    // OpenHands' text mode describes its tools in the system prompt instead of `tools`.
    let prompt_tools = match (profile.dialect, request.tools.is_empty()) {
        (Some(Dialect::OpenhandsFunction), true) => {
            crate::dialect::tools_from_prompt(&request.detection_text())
        }
        _ => Vec::new(),
    };
    let offered = if prompt_tools.is_empty() {
        &request.tools
    } else {
        &prompt_tools
    };
    let mut tools = ToolSet::build(profile, offered);
    if profile.dialect == Some(Dialect::MiniText) {
        // mini-swe-agent 1.x wants ```bash, 2.x ```mswea_bash_command, its XML configs an
        // element: answer in the form its own prompt asks for.
        tools.mini = crate::dialect::MiniFormat::from_prompt(
            &request.system_text(),
            request.first_user_text(),
        );
    }
    let mut base = Conversation::from_messages(&request.messages, &tools);
    let explicit = request.explicit_task();
    let selected = prefixes.select(
        explicit.as_ref().map(|(id, how)| (id.as_str(), *how)),
        request.first_user_text(),
        tools.default_prefix.as_deref(),
    );
    if let Some(selected) = &selected {
        // Prefix actions are neutral; a generic shell may name its command otherwise.
        let adapt = |steps: &[crate::conversation::Step]| -> Vec<crate::conversation::Step> {
            steps
                .iter()
                .map(|step| crate::conversation::Step {
                    action: step.action.as_ref().map(|a| tools.adapt_neutral(a)),
                    ..step.clone()
                })
                .collect()
        };
        // A demonstration is rendered as the example; a task prefix as the first steps, after
        // the demonstration it names, if any.
        let as_example = |s: &crate::prefix::Selected| Example {
            task: s.demo_task.clone().unwrap_or_default(),
            steps: adapt(&s.steps),
        };
        if selected.demo_task.is_some() {
            base.example = Some(as_example(selected));
        } else {
            base.prefix = adapt(&selected.steps);
            base.example = selected.example.as_deref().map(as_example);
        }
    }
    let render = |c: &Conversation| {
        renderer
            .render(config.format, c, &tools)
            .map_err(|e| ProxyError::Internal(e.to_string()))
    };
    let base_prompt = render(&base)?;
    // Ids carry the state of the last turn that had a tool call; a later turn answered
    // without one (and dropped by the scaffold) may have used a nudge since: the prompt index
    // knows it. Same session: the newer state wins; different sessions: the ids win.
    let scope = crate::session::index_scope(
        explicit.as_ref().map(|(id, _)| id.as_str()),
        request.explicit_run(),
    );
    let by_id = sessions.find(&scope, &request.messages);
    let by_prompt = session_by_prompt(&base, &render, sessions, &scope)?;
    let session = match (by_id, by_prompt) {
        (Some(id), Some(prompt))
            if id.session == prompt.session && prompt.nudges.0.len() > id.nudges.0.len() =>
        {
            prompt
        }
        (Some(id), _) => id,
        (None, Some(prompt)) => prompt,
        (None, None) => SessionState::fresh(),
    };
    let mut conversation = base;
    policy::insert_nudged_steps(&mut conversation, &session.nudges, &tools);
    let base_prompt_key = crate::session::prompt_key(&scope, &base_prompt);
    let prompt = if session.nudges.0.is_empty() {
        base_prompt
    } else {
        render(&conversation)?
    };
    Ok(Prepared {
        tools,
        conversation,
        prompt,
        session,
        base_prompt_key,
        prefix: selected.map(|s| PrefixInfo {
            id: s.id,
            matched_by: s.matched_by,
            k: s.steps.len(),
            example: s.example.map(|e| e.id),
        }),
        index_scope: scope,
    })
}

/// For a history that ends in steps without an action (turns the proxy answered without a
/// tool call, kept or dropped by the scaffold, followed by its feedback), the session of the
/// history that produced the first of them.
fn session_by_prompt(
    base: &Conversation,
    render: &impl Fn(&Conversation) -> Result<String, ProxyError>,
    sessions: &SessionIndex,
    scope: &str,
) -> Result<Option<SessionState>, ProxyError> {
    for dropped in 1..=base.trailing_actionless() {
        let mut truncated = base.clone();
        truncated.steps.truncate(base.steps.len() - dropped);
        if let Some(found) = sessions.find_prompt(scope, &render(&truncated)?) {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// Everything a step needs from the server, borrowed.
pub struct StepContext<'a> {
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
    /// Context length and token counting (`--context-length`, `--tokenizer`).
    pub context: &'a ContextSettings,
}

impl StepContext<'_> {
    /// [`prepare`] with the server's profiles, templates, sessions and prefixes; tells the
    /// request's clock the profile chosen (the `profile` label of its metrics).
    pub fn prepare(&self, request: &ChatCompletionRequest) -> Result<Prepared, ProxyError> {
        let prepared = prepare(
            request,
            self.profiles,
            self.renderer,
            self.prompt_config,
            self.sessions,
            self.prefixes,
        )?;
        if let Some(clock) = &request.clock {
            clock.set_profile(&prepared.tools.profile);
        }
        Ok(prepared)
    }
}

/// The outcome of one step, ready to be sent in either dialect.
#[derive(Debug, Clone)]
pub struct StepOutcome {
    pub reply: Reply,
    pub session: SessionId,
    pub step: usize,
}

/// Sampling from the request; its token bound capped by `--max-tokens`.
fn generation_params(ctx: &StepContext<'_>, request: &ChatCompletionRequest) -> GenerationParams {
    GenerationParams {
        max_tokens: request
            .max_tokens()
            .map_or(ctx.max_tokens, |m| m.min(ctx.max_tokens)),
        temperature: request.temperature,
        top_p: request.top_p,
        seed: request.seed,
    }
}

/// A trace record for a completion call of `request`.
pub fn new_record(
    input: &Arc<RequestInput>,
    request: &ChatCompletionRequest,
    step: usize,
    attempt: usize,
    prepared: &Prepared,
) -> StepRecord {
    let mut record = StepRecord::new(step, attempt, prepared);
    record.input = Some(input.clone());
    record.ignored_fields = request.ignored_fields();
    record.stream = request.is_stream();
    record
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Runs one step: prepare, then generate–parse–decide until the policy accepts the output or
/// ends the trajectory (a nudge appends the rejected action and its hint and generates again,
/// at most once per kind), build the reply, and write one trace record per completion call.
/// Records are written before returning, also when the backend fails.
pub async fn run_step(
    ctx: &StepContext<'_>,
    mut request: ChatCompletionRequest,
) -> Result<StepOutcome, ProxyError> {
    let started = Instant::now();
    let mut input = Arc::new(RequestInput::from_request(&request));
    let mut prepared = ctx.prepare(&request)?;
    let session = prepared.session.session.clone();
    let mut nudges = prepared.session.nudges.clone();
    let step = prepared.conversation.action_count();
    if let Some(kind) = side_call::detect(&request) {
        return run_side_call(ctx, &request, &input, &prepared, kind, started).await;
    }
    // The conversation holds what the rest needs; the decoded messages would only add a
    // copy of the history to every request waiting on the backend (BENCHMARKS.md, RSS).
    request.release_messages();
    let request = &request;
    // Terminus-2 asks to confirm a `task_complete`: the answer stays the same, with no model
    // call (the trace record has a response and no completion).
    if let Some(confirmation) = prepared.tools.dialect.and_then(|d| d.confirmation()) {
        let last = prepared.conversation.steps.last();
        if matches!(
            last.and_then(|s| s.action.as_ref()),
            Some(Action::Submit { .. })
        ) {
            let reply = Reply {
                content: Some(confirmation),
                tool_call: None,
                finish_reason: "stop",
                usage: Default::default(),
                action: Some(Action::Submit { message: None }),
                parse_error: None,
            };
            let mut record = new_record(&input, request, step, 0, &prepared);
            record.set_response(&reply);
            record.timings.total_ms = ms_since(started);
            prepared.remember_turn(
                ctx.sessions,
                reply.content.as_deref().unwrap_or_default(),
                &session,
                &nudges,
            );
            ctx.trace.write_step(&session, record).await;
            return Ok(StepOutcome {
                reply,
                session,
                step,
            });
        }
    }
    let params = generation_params(ctx, request);
    let mut fitted = fit_context(ctx, request, &mut prepared, params.max_tokens).await;
    let mut render_ms = ms_since(started);
    let mut attempt = 0;
    let stops = ctx.prompt_config.format.stops(&prepared.tools);
    let stops: Vec<&str> = stops.iter().map(String::as_str).collect();
    loop {
        let context = match fitted {
            Ok(record) => record,
            Err(e) => {
                let mut record = new_record(&input, request, step, attempt, &prepared);
                record.set_error(&e);
                record.timings.total_ms = ms_since(started);
                ctx.trace.write_step(&session, record).await;
                return Err(e);
            }
        };
        request.backend_call_starts();
        let attempt_started = Instant::now();
        let mut record = StepRecord::without_prompt(step, attempt, &prepared);
        record.input = Some(input.clone());
        record.ignored_fields = request.ignored_fields();
        record.stream = request.is_stream();
        record.nudges_used = nudges.0.clone();
        record.context = context.clone();
        // The record's prompt and request deltas are taken while the backend generates (the
        // backend call is polled first, so its request is under way), off the answer's path;
        // the request body is released once they are.
        let (completion, mut record) = tokio::join!(
            ctx.backend.complete(
                &prepared.prompt,
                &params,
                &stops,
                request.model.as_deref(),
                CallContext {
                    session: &session,
                    step,
                    attempt,
                    side_call: None,
                },
            ),
            async {
                let pending = ctx.trace.begin(&session, record, &prepared.prompt);
                input = Arc::new(input.without_body());
                pending
            }
        );
        request.waited_on_backend(attempt_started);
        let backend_ms = ms_since(attempt_started);
        let mut completion: BackendCompletion = match completion {
            Ok(c) => c,
            Err(e) => {
                record.set_error(&e);
                record.timings = Timings {
                    render_ms,
                    backend_ms,
                    parse_ms: 0.0,
                    total_ms: ms_since(started),
                };
                ctx.trace.commit(record).await;
                return Err(e);
            }
        };

        let parse_started = Instant::now();
        let (text, closer) = with_closing_stop(
            ctx.prompt_config.format,
            &completion.text,
            completion.finish_reason.as_deref(),
            completion.matched_stop.as_deref(),
            &prepared.tools,
        );
        let parsed: Parsed = parse_for(ctx.prompt_config.format, &text, &prepared.tools);
        completion.closer = closer;
        let decision = policy::decide(
            &prepared.conversation,
            &parsed.outcome,
            &nudges,
            &prepared.tools,
            &ctx.limits,
        );
        let parse_ms = ms_since(parse_started);
        let timings = |render_ms| Timings {
            render_ms,
            backend_ms,
            parse_ms,
            total_ms: ms_since(started),
        };

        if let Decision::Nudge(kind) = decision {
            let hint = policy::push_nudge(
                &mut prepared.conversation,
                &mut nudges,
                kind,
                &prepared.tools,
            );
            record.set_parse(&completion, &parsed);
            record.decision = StepDecision::Nudge;
            record.nudge = Some(NudgeRecord {
                step,
                attempt,
                kind,
                rejected: parsed.outcome.as_ref().ok().cloned(),
                hint,
            });
            record.timings = timings(render_ms);
            ctx.trace.commit(record).await;
            tracing::info!(%session, step, ?kind, "nudge: generating again");

            let render_started = Instant::now();
            prepared.prompt = ctx
                .renderer
                .render(
                    ctx.prompt_config.format,
                    &prepared.conversation,
                    &prepared.tools,
                )
                .map_err(|e| ProxyError::Internal(e.to_string()))?;
            fitted = fit_context(ctx, request, &mut prepared, params.max_tokens).await;
            render_ms = ms_since(render_started);
            attempt += 1;
            continue;
        }

        let reply = match decision {
            Decision::Terminate(termination) => {
                record.decision = StepDecision::Terminate;
                record.termination = Some(TerminateRecord {
                    step,
                    attempt,
                    termination,
                    description: termination.describe(),
                    on_terminate: match ctx.on_terminate {
                        OnTerminate::Submit => "submit",
                        OnTerminate::Error => "error",
                    },
                });
                tracing::info!(%session, step, reason = termination.describe(), "trajectory terminated");
                if ctx.on_terminate == OnTerminate::Error {
                    let error = ProxyError::Terminated(termination.describe());
                    record.set_parse(&completion, &parsed);
                    record.error = Some(error.to_string());
                    record.timings = timings(render_ms);
                    ctx.trace.commit(record).await;
                    return Err(error);
                }
                respond::termination(
                    &parsed,
                    &completion,
                    &prepared.tools,
                    &session,
                    step,
                    &nudges,
                    &termination,
                )
            }
            _ => respond::reply(
                &parsed,
                &completion,
                &prepared.tools,
                &CallId {
                    session: session.clone(),
                    step,
                    nudges: nudges.clone(),
                },
                !request.tool_choice_is_none(),
            ),
        };
        if reply.tool_call.is_none() {
            let content = reply.content.as_deref().unwrap_or_default();
            prepared.remember_turn(ctx.sessions, content, &session, &nudges);
        }
        record.set_completion(&completion, &parsed, &reply);
        record.timings = timings(render_ms);
        ctx.trace.commit(record).await;
        return Ok(StepOutcome {
            reply,
            session,
            step,
        });
    }
}

/// Makes the prompt fit the backend's context window with room for `max_tokens`, eliding the
/// oldest long observations when needed ([`crate::context`]). `None` when the context
/// length is unknown.
///
/// Errors: [`ProxyError::ContextLengthExceeded`] when it cannot fit.
async fn fit_context(
    ctx: &StepContext<'_>,
    request: &ChatCompletionRequest,
    prepared: &mut Prepared,
    max_tokens: u32,
) -> Result<Option<ContextRecord>, ProxyError> {
    let length = match ctx.context.length {
        Some(n) => n,
        None => {
            let asked = Instant::now();
            let reported = ctx.backend.context_length().await;
            request.waited_on_backend(asked);
            match reported {
                Some(n) => n,
                None => return Ok(None),
            }
        }
    };
    let counter = TokenCounter {
        tokenizer: ctx.context.tokenizer.as_ref(),
        backend: ctx.backend,
        model: request.model.as_deref(),
        clock: request.clock.as_deref(),
    };
    let render = |c: &Conversation| {
        ctx.renderer
            .render(ctx.prompt_config.format, c, &prepared.tools)
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
        prepared.prompt = prompt;
    }
    Ok(Some(record))
}

/// Serves a side call: the transcript as a plain continuation, logged with `side_call`.
async fn run_side_call(
    ctx: &StepContext<'_>,
    request: &ChatCompletionRequest,
    input: &Arc<RequestInput>,
    prepared: &Prepared,
    kind: &'static str,
    started: Instant,
) -> Result<StepOutcome, ProxyError> {
    let session = prepared.session.session.clone();
    let step = prepared.conversation.action_count();
    let mut side = prepared.clone();
    side.prompt = side_call::prompt(request);
    let params = generation_params(ctx, request);
    request.backend_call_starts();
    let backend_started = Instant::now();
    let completion = ctx
        .backend
        .complete(
            &side.prompt,
            &params,
            &side_call::STOP,
            request.model.as_deref(),
            CallContext {
                session: &session,
                step,
                attempt: 0,
                side_call: Some(kind),
            },
        )
        .await;
    request.waited_on_backend(backend_started);
    let mut record = new_record(input, request, step, 0, &side);
    record.kind = Some(kind);
    let completion = match completion {
        Ok(c) => c,
        Err(e) => {
            record.set_error(&e);
            ctx.trace.write_step(&session, record).await;
            return Err(e);
        }
    };
    let reply = Reply {
        content: Some(completion.text.trim().to_string()),
        tool_call: None,
        finish_reason: if completion.hit_length() {
            "length"
        } else {
            "stop"
        },
        usage: completion.usage.unwrap_or_default(),
        action: None,
        parse_error: None,
    };
    record.completion = Some(completion);
    record.set_response(&reply);
    record.timings = Timings {
        render_ms: 0.0,
        backend_ms: ms_since(backend_started),
        parse_ms: 0.0,
        total_ms: ms_since(started),
    };
    ctx.trace.write_step(&session, record).await;
    Ok(StepOutcome {
        reply,
        session,
        step,
    })
}
