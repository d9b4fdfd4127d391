//! The attempt machine: the synchronous core of a turn, without I/O.
//!
//! A turn is one request of the scaffold; each of its attempts is one completion call. The
//! machine holds the prepared turn; fed a completion, it parses it and lets the policy judge
//! it ([`Attempts::judge`]): the reply to send, a rule that ends the trajectory, or a nudge
//! (paper §3.2: each of the two nudges at most once per trajectory), after which
//! [`Attempts::push_nudge`] and [`Attempts::render`] make the next attempt's prompt. The
//! async driver ([`super::run_turn`]) adds the backend call and the context window between
//! the two; `replay` drives the same machine from a recorded trace.

use crate::backend::BackendCompletion;
use crate::config::OnTerminate;
use crate::error::ProxyError;
use crate::parse::{parse_for, with_closing_stop, Parsed};
use crate::policy::{self, Decision, Limits, Termination};
use crate::render::{Format, Renderer};
use crate::respond::{self, Reply};
use crate::session::{CallId, NudgeKind, NudgeState, SessionId};

use super::Prepared;

/// The parse of a completion as the live turn and `replay` read it: the action's closing tag
/// put back where the backend stopped on it ([`with_closing_stop`]), then parsed in `format`.
/// Returns the parse and the closer put back (the trace's `completion.closer`).
pub fn parse_completion(
    format: Format,
    text: &str,
    finish_reason: Option<&str>,
    matched_stop: Option<&str>,
    prepared: &Prepared,
) -> (Parsed, Option<String>) {
    let (text, closer) =
        with_closing_stop(format, text, finish_reason, matched_stop, &prepared.tools);
    (parse_for(format, &text, &prepared.tools), closer)
}

/// What the machine needs of the server's settings.
#[derive(Debug, Clone, Copy)]
pub struct AttemptSettings {
    pub format: Format,
    pub limits: Limits,
    pub on_terminate: OnTerminate,
}

/// What the policy made of one completion.
#[derive(Debug)]
pub enum Verdict {
    /// Rejected: push the nudge, render again and ask again.
    Nudge(NudgeKind),
    /// Send this reply; the turn ends.
    Reply(Reply),
    /// A rule ended the trajectory: with `--on-terminate submit` the reply is the profile's
    /// finish action, with `error` it is [`ProxyError::Terminated`].
    Terminate(Termination, Result<Reply, ProxyError>),
}

/// One turn's attempts: the prepared prompt, the nudges used so far and the attempt number.
#[derive(Debug, Clone)]
pub struct Attempts {
    pub prepared: Prepared,
    /// The session's nudges, including those pushed in this turn.
    pub nudges: NudgeState,
    /// Step index of the turn: actions in the history.
    pub step: usize,
    /// Completion call within the turn: 0, then 1 and 2 after nudges.
    pub attempt: usize,
}

impl Attempts {
    /// The first attempt of a prepared turn.
    pub fn new(prepared: Prepared) -> Self {
        Self {
            nudges: prepared.session.nudges.clone(),
            step: prepared.conversation.action_count(),
            attempt: 0,
            prepared,
        }
    }

    /// The session the turn belongs to.
    pub fn session(&self) -> &SessionId {
        &self.prepared.session.session
    }

    /// Parses `completion` (setting its `closer`) and judges it by the policy
    /// ([`policy::decide`]). `allow_tool_call` is false when the client sent
    /// `tool_choice: "none"`.
    pub fn judge(
        &self,
        settings: &AttemptSettings,
        completion: &mut BackendCompletion,
        allow_tool_call: bool,
    ) -> (Parsed, Verdict) {
        let (parsed, closer) = parse_completion(
            settings.format,
            &completion.text,
            completion.finish_reason.as_deref(),
            completion.matched_stop.as_deref(),
            &self.prepared,
        );
        completion.closer = closer;
        let decision = policy::decide(
            &self.prepared.conversation,
            &parsed.outcome,
            &self.nudges,
            &self.prepared.tools,
            &settings.limits,
        );
        let verdict = match decision {
            Decision::Nudge(kind) => Verdict::Nudge(kind),
            Decision::Terminate(termination) => {
                let reply = match settings.on_terminate {
                    OnTerminate::Error => Err(ProxyError::Terminated(termination.describe())),
                    OnTerminate::Submit => Ok(respond::termination(
                        &parsed,
                        completion,
                        &self.prepared.tools,
                        self.session(),
                        self.step,
                        &self.nudges,
                        &termination,
                    )),
                };
                Verdict::Terminate(termination, reply)
            }
            Decision::Accept => Verdict::Reply(respond::reply(
                &parsed,
                completion,
                &self.prepared.tools,
                &CallId {
                    session: self.session().clone(),
                    step: self.step,
                    nudges: self.nudges.clone(),
                },
                allow_tool_call,
            )),
        };
        (parsed, verdict)
    }

    /// Appends the rejected action's nudged step and its hint to the conversation and counts
    /// the nudge as used; the next attempt follows. Returns the hint.
    pub fn push_nudge(&mut self, kind: NudgeKind) -> String {
        self.attempt += 1;
        policy::push_nudge(
            &mut self.prepared.conversation,
            &mut self.nudges,
            kind,
            &self.prepared.tools,
        )
    }

    /// Renders the conversation again as the next attempt's prompt.
    ///
    /// Errors: a template failure ([`ProxyError::Internal`]).
    pub fn render(&mut self, renderer: &Renderer, format: Format) -> Result<(), ProxyError> {
        self.prepared.prompt = renderer
            .render(format, &self.prepared.conversation, &self.prepared.tools)
            .map_err(|e| ProxyError::Internal(e.to_string()))?;
        Ok(())
    }
}
