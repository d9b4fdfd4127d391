//! Prepare: a request → its session, profile, conversation, prefix and prompt, without I/O
//! (the front half of a turn, shared by `serve`, `render` and `replay`).

use crate::config::{ProfileChoice, PromptConfig};
use crate::conversation::{Compacted, Conversation, Example, Step};
use crate::error::ProxyError;
use crate::openai::chat::{AsapHeaders, ChatCompletionRequest, Tool};
use crate::policy;
use crate::prefix::{PrefixStore, Selected};
use crate::profile::{Dialect, Profiles, ResolvedProfile};
use crate::render::Renderer;
use crate::session::{self, CallId, NudgeState, SessionId, SessionIndex, SessionState};
use crate::trace::{PrefixInfo, StepRecord};

/// A request turned into a prompt.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Shared with the requests whose tool set was resolved from the same inputs
    /// ([`tools_for`]).
    pub tools: std::sync::Arc<ResolvedProfile>,
    /// The conversation with this session's nudged steps in place.
    pub conversation: Conversation,
    /// Shared with the backend call and the trace record of each completion call (no copy
    /// per record).
    pub prompt: std::sync::Arc<String>,
    /// The session the history belongs to (fresh if none is found).
    pub session: SessionState,
    /// The prompt of the history alone (no nudged steps; `prompt` itself when the session
    /// has none): a turn answered without a tool call is remembered under its key
    /// ([`crate::session::prompt_key`]), hashed then rather than on every request (a pass over
    /// the whole prompt).
    base_prompt: std::sync::Arc<String>,
    /// The reference prefix rendered, if any.
    pub prefix: Option<PrefixInfo>,
    /// The task the request names explicitly, else the one its first user message holds
    /// (fingerprint over the prefixes' and `--tasks` task texts): the session's `instance_id`.
    pub task: Option<String>,
    /// The session index scope of the request ([`crate::session::index_scope`]).
    index_scope: String,
}

impl Prepared {
    /// A trace record for a completion call of this prepared turn, with a copy of its prompt
    /// (for [`crate::trace::TraceWriter::write_record`]).
    pub fn record(&self, step: usize, attempt: usize) -> StepRecord {
        let mut record = self.record_without_prompt(step, attempt);
        record.full_prompt = self.prompt.clone();
        record
    }

    /// A record whose prompt goes to [`crate::trace::TraceWriter::begin`] by reference.
    pub(super) fn record_without_prompt(&self, step: usize, attempt: usize) -> StepRecord {
        StepRecord {
            step,
            attempt,
            profile: self.tools.profile.clone(),
            nudges_used: self.session.nudges.0.clone(),
            prefix: self.prefix.clone(),
            ..StepRecord::default()
        }
    }

    /// Remembers the summary the model wrote for the client's compaction of `session` (see
    /// [`SessionIndex::remember_summary`]), within the request's task and run: the next step,
    /// and whether an action so far (compacted before, or in this history) edited a file.
    pub fn remember_summary(
        &self,
        sessions: &SessionIndex,
        text: &str,
        session: &SessionId,
        next_step: usize,
    ) {
        let conversation = &self.conversation;
        // The request may offer no tools (Codex's, qwen-code's compaction): the edits this
        // process answered for the session count too.
        let edited = conversation.compacted.is_some_and(|c| c.edited)
            || sessions.has_edit(session)
            || conversation
                .actions()
                .any(|a| policy::is_edit(a, &self.tools));
        sessions.remember_summary(
            &self.index_scope,
            text,
            session,
            &self.session.nudges,
            (next_step, edited),
        );
    }

    /// Remembers a turn answered with `content` and no tool call, so the next request of
    /// the session (which carries no minted id) is recognised: by that content and by this
    /// request's prompt, within the request's task and run.
    pub fn remember_turn(
        &self,
        sessions: &SessionIndex,
        content: &str,
        session: &SessionId,
        nudges: &NudgeState,
    ) {
        sessions.remember(
            &self.index_scope,
            content,
            session::prompt_key(&self.index_scope, &self.base_prompt),
            session,
            nudges,
        );
    }
}

/// Session, profile, conversation and prompt for a request, one call per stage. No I/O;
/// `sessions` is consulted for histories whose latest turns carry no minted id.
///
/// Errors: an unknown profile name (400), a template failure (500).
#[allow(clippy::too_many_arguments)]
pub fn prepare(
    request: &ChatCompletionRequest,
    headers: &AsapHeaders,
    profiles: &Profiles,
    renderer: &Renderer,
    config: &PromptConfig,
    sessions: &SessionIndex,
    prefixes: &PrefixStore,
) -> Result<Prepared, ProxyError> {
    let tools = tools_for(request, profiles, config)?;
    let mut base = Conversation::from_messages(&request.messages, &tools);
    base.subagent = request.is_subagent();
    let explicit = request.explicit_task(headers);
    // The task named by its text, when the request names none (one scan of the task text).
    let identified = match explicit {
        Some(_) => None,
        None => prefixes.identify(&request.task_text()),
    };
    let selected = prefixes.select_identified(
        explicit.as_ref().map(|(id, how)| (id.as_str(), *how)),
        identified,
        tools.default_prefix.as_deref(),
    );
    if let Some(selected) = &selected {
        with_prefix(&mut base, selected, &tools);
    }
    let render = |c: &Conversation| {
        renderer
            .render(config.format, c, &tools)
            .map_err(|e| ProxyError::Internal(e.to_string()))
    };
    // The history as sent (the prompt unless the session has nudges, and the key it is
    // identified by) and the prompt with nudged steps come from the render cache (only new
    // steps rendered); the truncated histories of `find_session` are rendered whole and not
    // kept (they are looked up once).
    let render_shared = |c: &Conversation| {
        renderer
            .render_shared(config.format, c, &tools)
            .map_err(|e| ProxyError::Internal(e.to_string()))
    };
    let base_prompt = render_shared(&base)?;
    let scope = session::index_scope(
        explicit.as_ref().map(|(id, _)| id.as_str()),
        request.explicit_run(headers),
    );
    let mut session = find_session(request, &base, &render, sessions, &scope)?;
    if let Some(step_base) = step_base_of(&base, &session.session) {
        session.step_base = step_base;
    }
    if session.step_base > 0 {
        // Unknown (another replica saw the compaction): counted as edited, so a submit is
        // never refused for an edit this process cannot see (docs/architecture.md).
        let edited = sessions.compacted_edit(&session.session).unwrap_or(true);
        base.compacted = Some(Compacted {
            steps: session.step_base,
            edited,
        });
    }
    let mut conversation = base;
    policy::insert_nudged_steps(&mut conversation, &session.nudges, &tools);
    let prompt = if session.nudges.0.is_empty() {
        base_prompt.clone()
    } else {
        render_shared(&conversation)?
    };
    Ok(Prepared {
        tools,
        conversation,
        prompt,
        session,
        base_prompt,
        task: explicit
            .as_ref()
            .map(|(id, _)| id.clone())
            .or_else(|| identified.map(str::to_string)),
        prefix: selected.map(|s| PrefixInfo {
            id: s.id,
            matched_by: s.matched_by,
            k: s.steps.len(),
            example: s.example.map(|e| e.id),
        }),
        index_scope: scope,
    })
}

/// The profile's tools for this request: the configured profile or the detected one, with
/// OpenHands' text-mode tools read from its system prompt and mini-swe-agent's block form
/// from its own prompt.
///
/// The set is remembered by what it was resolved from ([`ResolvedFrom`]): the turns of a
/// session, and sessions of one scaffold and task, send the same tools and opening messages,
/// which the body decoder hands out as the same shared values, so a later request finds its
/// set without detecting and building it again (about 0.1 M instructions a request).
fn tools_for(
    request: &ChatCompletionRequest,
    profiles: &Profiles,
    config: &PromptConfig,
) -> Result<std::sync::Arc<ResolvedProfile>, ProxyError> {
    let from = ResolvedFrom::of(request, config);
    if let Some(found) = ResolvedFrom::find(&from) {
        return Ok(found);
    }
    let tools = std::sync::Arc::new(resolve_tools(request, profiles, config)?);
    ResolvedFrom::remember(from, tools.clone());
    Ok(tools)
}

/// What [`tools_for`] reads of a request: the profile named, the tools and the messages
/// detection and the dialects read (system and developer messages, the first user message).
/// Values are compared by address and held, so an equal key means equal content; the
/// profiles are the built-in ones, the same in every server.
struct ResolvedFrom {
    named: Option<String>,
    tools: std::sync::Arc<[Tool]>,
    read: Vec<std::sync::Arc<crate::openai::chat::ChatMessage>>,
}

/// Sets remembered at most: a server sees a few scaffolds and tasks at a time; the oldest
/// goes first.
const RESOLVED_KEPT: usize = 64;

type ResolvedSets = Vec<(ResolvedFrom, std::sync::Arc<ResolvedProfile>)>;

impl ResolvedFrom {
    fn of(request: &ChatCompletionRequest, config: &PromptConfig) -> Self {
        use crate::openai::chat::Role;
        let first_user = request.messages.iter().position(|m| m.role == Role::User);
        let read = request
            .messages
            .iter()
            .enumerate()
            .filter(|(i, m)| {
                matches!(m.role, Role::System | Role::Developer) || Some(*i) == first_user
            })
            .map(|(_, m)| m.clone())
            .collect();
        Self {
            named: match &config.profile {
                ProfileChoice::Auto => None,
                ProfileChoice::Named(name) => Some(name.clone()),
            },
            tools: request.tools.clone(),
            read,
        }
    }

    fn same(&self, other: &Self) -> bool {
        self.named == other.named
            && ((self.tools.is_empty() && other.tools.is_empty())
                || std::sync::Arc::ptr_eq(&self.tools, &other.tools))
            && self.read.len() == other.read.len()
            && self
                .read
                .iter()
                .zip(&other.read)
                .all(|(a, b)| std::sync::Arc::ptr_eq(a, b))
    }

    fn sets() -> &'static std::sync::Mutex<ResolvedSets> {
        static SETS: std::sync::LazyLock<std::sync::Mutex<ResolvedSets>> =
            std::sync::LazyLock::new(Default::default);
        &SETS
    }

    fn find(from: &Self) -> Option<std::sync::Arc<ResolvedProfile>> {
        let sets = Self::sets().lock().ok()?;
        sets.iter()
            .find(|(key, _)| key.same(from))
            .map(|(_, tools)| tools.clone())
    }

    fn remember(from: Self, tools: std::sync::Arc<ResolvedProfile>) {
        if let Ok(mut sets) = Self::sets().lock() {
            if sets.len() >= RESOLVED_KEPT {
                sets.remove(0);
            }
            sets.push((from, tools));
        }
    }
}

fn resolve_tools(
    request: &ChatCompletionRequest,
    profiles: &Profiles,
    config: &PromptConfig,
) -> Result<ResolvedProfile, ProxyError> {
    let profile = match &config.profile {
        ProfileChoice::Auto => profiles.detect(&request.tools, &request.detection_text()),
        ProfileChoice::Named(name) => profiles
            .get(name)
            .map_err(|e| ProxyError::invalid(e.to_string()))?,
    };
    // OpenHands' text mode describes its tools in the system prompt instead of `tools`.
    let prompt_tools = match (profile.dialect, request.tools.is_empty()) {
        (Some(Dialect::OpenhandsFunction), true) => {
            crate::profile::tools_from_prompt(&request.detection_text())
        }
        _ => Vec::new(),
    };
    let offered: &[Tool] = if prompt_tools.is_empty() {
        &request.tools
    } else {
        &prompt_tools
    };
    let mut tools = ResolvedProfile::build(profile, offered);
    if profile.dialect == Some(Dialect::MiniText) {
        // mini-swe-agent 1.x wants ```bash, 2.x ```mswea_bash_command, its XML configs an
        // element: answer in the form its own prompt asks for.
        tools.mini = crate::profile::MiniFormat::from_prompt(
            &request.system_text(),
            request.first_user_text(),
        );
    }
    Ok(tools)
}

/// Puts the selected prefix into the conversation: a demonstration as the example; a task
/// prefix as the first steps, after the demonstration it names, if any. Prefix actions are
/// neutral; a generic shell may name its command otherwise ([`ResolvedProfile::adapt_neutral`]).
fn with_prefix(base: &mut Conversation, selected: &Selected, tools: &ResolvedProfile) {
    let adapt = |steps: &[Step]| -> Vec<Step> {
        steps
            .iter()
            .map(|step| Step {
                action: step.action.as_ref().map(|a| tools.adapt_neutral(a)),
                ..step.clone()
            })
            .collect()
    };
    let as_example = |s: &Selected| Example {
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

/// The session the history belongs to. Ids carry the state of the last turn that had a
/// tool call; a later turn answered without one (and dropped by the scaffold) may have used a
/// nudge since: the prompt index knows it. Same session: the newer state wins; different
/// sessions: the ids win. Neither: a fresh session.
fn find_session(
    request: &ChatCompletionRequest,
    base: &Conversation,
    render: &impl Fn(&Conversation) -> Result<String, ProxyError>,
    sessions: &SessionIndex,
    scope: &str,
) -> Result<SessionState, ProxyError> {
    let by_id = sessions.find(scope, &request.messages);
    let by_prompt = session_by_prompt(base, render, sessions, scope)?;
    Ok(match (by_id, by_prompt) {
        (Some(id), Some(prompt))
            if id.session == prompt.session && prompt.nudges.0.len() > id.nudges.0.len() =>
        {
            prompt
        }
        (Some(id), _) => id,
        (None, Some(prompt)) => prompt,
        (None, None) => sessions
            .find_summary(scope, &request.messages)
            .unwrap_or_else(SessionState::fresh),
    })
}

/// The step of the history's first action: 0, unless the client dropped earlier steps
/// (compacted its context, condensed its history). The first proxy-minted id of `session`
/// in `conversation` names its own step; the actions before it in the history are that many
/// steps less. `None` when the history holds no id of the session.
fn step_base_of(conversation: &Conversation, session: &SessionId) -> Option<usize> {
    let mut before = 0;
    for step in &conversation.steps {
        let counted = step.action.is_some() && step.nudge.is_none();
        if let Some(id) = step.call_id.as_deref().and_then(CallId::parse) {
            if &id.session == session && counted {
                return Some(id.step.saturating_sub(before));
            }
        }
        before += usize::from(counted);
    }
    None
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

#[cfg(test)]
mod tests {
    use super::*;

    fn request(system: &str) -> ChatCompletionRequest {
        let body = serde_json::json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": "Fix the failing test in utils.py."},
            ],
            "tools": [{"type": "function", "function": {
                "name": "bash",
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}
            }}],
        });
        ChatCompletionRequest::from_bytes(body.to_string().into()).unwrap()
    }

    fn config(profile: ProfileChoice) -> PromptConfig {
        PromptConfig {
            profile,
            format: Default::default(),
            prefixes: Vec::new(),
            tasks: Vec::new(),
            prefix_k: 0,
        }
    }

    #[test]
    fn a_tool_set_is_resolved_once_per_tools_and_opening_messages() {
        let profiles = Profiles::builtin().unwrap();
        let auto = config(ProfileChoice::Auto);
        let system = "You are a helpful assistant that can interact with a computer.";
        let first = tools_for(&request(system), &profiles, &auto).unwrap();
        // The same body again decodes to the same shared values: the set is found, not built.
        let again = tools_for(&request(system), &profiles, &auto).unwrap();
        assert!(std::sync::Arc::ptr_eq(&first, &again));
        // Another system text, another profile choice: resolved apart, as they were.
        let mini = "You are a helpful assistant. mini-swe-agent ```bash";
        let other = tools_for(&request(mini), &profiles, &auto).unwrap();
        assert!(!std::sync::Arc::ptr_eq(&first, &other));
        let built = |system: &str, config: &PromptConfig| {
            format!(
                "{:?}",
                resolve_tools(&request(system), &profiles, config).unwrap()
            )
        };
        assert_eq!(format!("{other:?}"), built(mini, &auto));
        let named = config(ProfileChoice::Named("generic".into()));
        let generic = tools_for(&request(system), &profiles, &named).unwrap();
        assert!(!std::sync::Arc::ptr_eq(&first, &generic));
        assert_eq!(generic.profile, "generic");
        assert_eq!(format!("{first:?}"), built(system, &auto));
        assert_eq!(format!("{generic:?}"), built(system, &named));
    }
}
