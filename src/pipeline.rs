//! The stages of one request, called in order (DESIGN.md "One request, start to end"):
//! decode → session → profile → conversation → render → backend → parse → respond → trace.
//! [`prepare`] is the pure front half, shared by `serve` and `render`; [`run_step`] adds the
//! backend call, the parse and the trace record.

use std::time::Instant;

use crate::backend::{Backend, BackendCompletion, GenerationParams};
use crate::config::{ProfileChoice, PromptConfig};
use crate::conversation::Conversation;
use crate::error::ProxyError;
use crate::openai::chat::ChatCompletionRequest;
use crate::parse::{parse_completion, Parsed};
use crate::profile::{Profiles, ToolSet};
use crate::render::{Renderer, CUE};
use crate::respond::{self, Reply};
use crate::session::{SessionId, SessionIndex};
use crate::trace::{StepRecord, Timings, TraceWriter};

/// A request turned into a prompt.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub tools: ToolSet,
    pub conversation: Conversation,
    pub prompt: String,
}

/// Profile, conversation and prompt for a request. Pure: no I/O.
///
/// Errors: an unknown profile name (400), a template failure (500).
pub fn prepare(
    request: &ChatCompletionRequest,
    profiles: &Profiles,
    renderer: &Renderer,
    config: &PromptConfig,
) -> Result<Prepared, ProxyError> {
    let profile = match &config.profile {
        ProfileChoice::Auto => profiles.detect(&request.tools),
        ProfileChoice::Named(name) => profiles
            .get(name)
            .map_err(|e| ProxyError::invalid(e.to_string()))?,
    };
    let tools = ToolSet::build(profile, &request.tools);
    let conversation = Conversation::from_messages(&request.messages, &tools);
    let prompt = renderer
        .render(config.format, &conversation, &tools)
        .map_err(|e| ProxyError::Internal(e.to_string()))?;
    Ok(Prepared {
        tools,
        conversation,
        prompt,
    })
}

/// Everything a step needs from the server, borrowed.
pub struct StepContext<'a> {
    pub profiles: &'a Profiles,
    pub renderer: &'a Renderer,
    pub prompt_config: &'a PromptConfig,
    pub backend: &'a Backend,
    pub trace: &'a TraceWriter,
    pub sessions: &'a SessionIndex,
    /// Cap on generated tokens (config `max_tokens`).
    pub max_tokens: u32,
}

/// The outcome of one step, ready to be sent in either dialect.
#[derive(Debug, Clone)]
pub struct StepOutcome {
    pub reply: Reply,
    pub session: SessionId,
    pub step: usize,
}

/// Runs one step: prepare, call the backend, parse, build the reply, write the trace record.
/// The trace record is written before returning, also when the backend fails.
pub async fn run_step(
    ctx: &StepContext<'_>,
    request: &ChatCompletionRequest,
) -> Result<StepOutcome, ProxyError> {
    let started = Instant::now();
    let prepared = prepare(request, ctx.profiles, ctx.renderer, ctx.prompt_config)?;
    let found = ctx
        .sessions
        .find(&request.messages)
        .or_else(|| session_by_prompt(ctx, &prepared));
    let recovered = found.is_some();
    let session = found.unwrap_or_else(SessionId::mint);
    let step = prepared.conversation.steps.len();
    let render_ms = started.elapsed().as_secs_f64() * 1e3;

    let params = GenerationParams {
        max_tokens: request
            .max_tokens()
            .map_or(ctx.max_tokens, |m| m.min(ctx.max_tokens)),
        temperature: request.temperature,
        top_p: request.top_p,
        seed: request.seed,
    };
    let backend_started = Instant::now();
    let completion = ctx
        .backend
        .complete(&prepared.prompt, &params, request.model.as_deref())
        .await;
    let backend_ms = backend_started.elapsed().as_secs_f64() * 1e3;
    // A new session's file must be readable on its own: its first prompt is stored whole.
    let previous_prompt = if recovered {
        previous_prompt(ctx, &prepared)
    } else {
        None
    };

    let mut record = StepRecord::new(&session, step, &prepared, previous_prompt.as_deref());
    record.ignored_fields = request.ignored_fields();
    record.stream = request.is_stream();
    let completion: BackendCompletion = match completion {
        Ok(c) => c,
        Err(e) => {
            record.error = Some(e.to_string());
            record.timings = Timings {
                render_ms,
                backend_ms,
                parse_ms: 0.0,
                total_ms: started.elapsed().as_secs_f64() * 1e3,
            };
            ctx.trace.write_step(&session, record).await;
            return Err(e);
        }
    };

    let parse_started = Instant::now();
    let parsed: Parsed = parse_completion(&completion.text, &prepared.tools);
    let reply = respond::reply(
        &parsed,
        &completion,
        &prepared.tools,
        &session,
        step,
        !request.tool_choice_is_none(),
    );
    let parse_ms = parse_started.elapsed().as_secs_f64() * 1e3;
    if reply.tool_call.is_none() {
        let content = reply.content.as_deref().unwrap_or_default();
        ctx.sessions.remember(content, &prepared.prompt, &session);
    }

    record.set_completion(&completion, &parsed, &reply);
    record.timings = Timings {
        render_ms,
        backend_ms,
        parse_ms,
        total_ms: started.elapsed().as_secs_f64() * 1e3,
    };
    ctx.trace.write_step(&session, record).await;
    Ok(StepOutcome {
        reply,
        session,
        step,
    })
}

/// For a history that ends in steps without an action (turns the proxy answered without a
/// tool call, kept or dropped by the scaffold, followed by its feedback), the session of the
/// prompt that produced the first of them.
fn session_by_prompt(ctx: &StepContext<'_>, prepared: &Prepared) -> Option<SessionId> {
    let steps = &prepared.conversation.steps;
    (1..=prepared.conversation.trailing_actionless()).find_map(|dropped| {
        let mut conversation = prepared.conversation.clone();
        conversation.steps.truncate(steps.len() - dropped);
        let prompt = ctx
            .renderer
            .render(ctx.prompt_config.format, &conversation, &prepared.tools)
            .ok()?;
        ctx.sessions.find_prompt(&prompt)
    })
}

/// The prompt of the previous step, re-rendered from the history without its last step, so
/// the trace can store this step's prompt as a delta. `None` on the first step.
fn previous_prompt(ctx: &StepContext<'_>, prepared: &Prepared) -> Option<String> {
    let steps = &prepared.conversation.steps;
    let last_turn = steps.last()?.turn;
    // All tool calls of one assistant message form one turn: drop them together.
    let turn_start = steps.iter().position(|s| s.turn == last_turn).unwrap_or(0);
    let mut conversation = prepared.conversation.clone();
    conversation.steps.truncate(turn_start);
    ctx.renderer
        .render(ctx.prompt_config.format, &conversation, &prepared.tools)
        .ok()
        .map(|p| p.strip_suffix(CUE).map(str::to_string).unwrap_or(p))
}
