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
    /// Step index of the turn: actions in the history, after the steps it no longer holds
    /// ([`crate::session::SessionState::step_base`]).
    pub step: usize,
    /// Completion call within the turn: 0, then 1 and 2 after nudges.
    pub attempt: usize,
}

impl Attempts {
    /// The first attempt of a prepared turn.
    pub fn new(prepared: Prepared) -> Self {
        Self {
            nudges: prepared.session.nudges.clone(),
            step: prepared.session.step_base + prepared.conversation.action_count(),
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
            .render_shared(format, &self.prepared.conversation, &self.prepared.tools)
            .map_err(|e| ProxyError::Internal(e.to_string()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ProfileChoice, PromptConfig};
    use crate::openai::chat::ChatCompletionRequest;
    use crate::openai::response::FinishReason;
    use crate::prefix::PrefixStore;
    use crate::profile::{Action, Profiles};
    use crate::session::SessionIndex;

    const SUBMIT: &str = "I am done.\n\n<submit/>";
    const LS: &str = "Look around first.\n\n<bash>\nls -la\n</bash>";

    /// A SWE-agent turn after `history` (assistant commands, each answered by `ok`).
    fn turn(history: &[&str]) -> (Attempts, Renderer) {
        let tools = serde_json::from_str::<serde_json::Value>(include_str!(
            "../../tests/fixtures/requests/swe-agent-1.json"
        ))
        .unwrap()["tools"]
            .clone();
        let mut messages = vec![
            serde_json::json!({"role": "system", "content": "You are a helpful assistant."}),
            serde_json::json!({"role": "user", "content": "Fix the bug in calc.py."}),
        ];
        for (i, command) in history.iter().enumerate() {
            let id = format!("call_{i}");
            messages.push(serde_json::json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": id, "type": "function",
                 "function": {"name": "bash", "arguments": serde_json::json!({"command": command}).to_string()}}]}));
            messages.push(serde_json::json!({"role": "tool", "tool_call_id": id, "content": "ok"}));
        }
        let body = serde_json::json!({"model": "m", "messages": messages, "tools": tools});
        let request = ChatCompletionRequest::from_slice(body.to_string().as_bytes()).unwrap();
        let renderer = Renderer::new().unwrap();
        let config = PromptConfig {
            profile: ProfileChoice::Auto,
            format: Format::MarkdownXml,
            prefixes: Vec::new(),
            tasks: Vec::new(),
            prefix_k: 0,
        };
        let prepared = super::super::prepare(
            &request,
            &Default::default(),
            &Profiles::builtin().unwrap(),
            &renderer,
            &config,
            &SessionIndex::new(16),
            &PrefixStore::load(&[], 0).unwrap(),
        )
        .unwrap();
        (Attempts::new(prepared), renderer)
    }

    fn settings(on_terminate: OnTerminate) -> AttemptSettings {
        AttemptSettings {
            format: Format::MarkdownXml,
            limits: Limits::default(),
            on_terminate,
        }
    }

    fn completion(text: &str) -> BackendCompletion {
        BackendCompletion::stopped(text, "m")
    }

    #[test]
    fn an_action_is_accepted_as_a_tool_call() {
        let (turn, _) = turn(&[]);
        let (parsed, verdict) =
            turn.judge(&settings(OnTerminate::Submit), &mut completion(LS), true);
        assert!(matches!(parsed.outcome, Ok(Action::Call { ref tag, .. }) if tag == "bash"));
        let Verdict::Reply(reply) = verdict else {
            panic!("expected a reply, got {verdict:?}")
        };
        let call = reply.tool_call.expect("a tool call");
        assert_eq!(call.function.name, "bash");
        assert_eq!(reply.finish_reason, FinishReason::ToolCalls);
    }

    #[test]
    fn a_submit_before_any_edit_is_nudged_then_ends_the_run_the_second_time() {
        let (mut turn, renderer) = turn(&["ls"]);
        let settings = settings(OnTerminate::Submit);
        let (_, verdict) = turn.judge(&settings, &mut completion(SUBMIT), true);
        assert!(matches!(
            verdict,
            Verdict::Nudge(NudgeKind::SubmitBeforeEdit)
        ));
        let before = turn.prepared.prompt.clone();
        let hint = turn.push_nudge(NudgeKind::SubmitBeforeEdit);
        turn.render(&renderer, settings.format).unwrap();
        assert_eq!(turn.attempt, 1);
        assert!(turn.prepared.prompt.starts_with(before.trim_end()));
        assert!(
            turn.prepared.prompt.contains(&hint),
            "the hint is in the next prompt"
        );
        // The same violation again ends the trajectory with the profile's finish action.
        let (_, verdict) = turn.judge(&settings, &mut completion(SUBMIT), true);
        let Verdict::Terminate(Termination::SubmitBeforeEditAgain, Ok(reply)) = verdict else {
            panic!("expected a termination with a reply, got {verdict:?}")
        };
        assert_eq!(reply.tool_call.expect("submit").function.name, "submit");
    }

    #[test]
    fn a_termination_is_an_error_under_on_terminate_error() {
        let (mut turn, _) = turn(&["ls"]);
        let settings = settings(OnTerminate::Error);
        turn.push_nudge(NudgeKind::SubmitBeforeEdit);
        let (_, verdict) = turn.judge(&settings, &mut completion(SUBMIT), true);
        assert!(matches!(
            verdict,
            Verdict::Terminate(_, Err(ProxyError::Terminated(_)))
        ));
    }

    #[test]
    fn unparsable_output_is_replied_as_content_and_a_cut_off_closer_is_put_back() {
        let (turn, _) = turn(&[]);
        let settings = settings(OnTerminate::Submit);
        let (parsed, verdict) =
            turn.judge(&settings, &mut completion("I wonder what to do."), true);
        assert!(parsed.outcome.is_err());
        let Verdict::Reply(reply) = verdict else {
            panic!("expected a reply, got {verdict:?}")
        };
        assert!(reply.tool_call.is_none());
        assert_eq!(reply.content.as_deref(), Some("I wonder what to do."));
        // The backend stopped on `</bash>` and dropped it: the closer is recorded.
        let mut stopped = completion("Listing.\n\n<bash>\nls\n");
        stopped.matched_stop = Some("</bash>".into());
        let (parsed, _) = turn.judge(&settings, &mut stopped, true);
        assert!(parsed.outcome.is_ok());
        assert_eq!(stopped.closer.as_deref(), Some("</bash>"));
    }
}
