//! The paper's failure recovery and termination rules (ASAP, "minimal failure recovery"):
//! a pure function from the trajectory so far and the parsed action to a decision.
//!
//! - **Submit before edit**: a submit when no file edit has happened is rejected once with the
//!   profile's hint (only where the tools can edit: a shell or an editor).
//! - **Repeated action**: an action identical to the previous one (same tool, same arguments,
//!   strings compared without surrounding whitespace) is rejected once with a hint.
//! - **Termination**: the second violation of either rule; the step cap; `max_unparsable`
//!   consecutive unparsable outputs; the same action three times within the last
//!   `loop_window` actions; an A/B/A/B alternation. The trajectory then ends with the
//!   profile's finish action (or an error, `--on-terminate error`).
//!
//! A nudge is used at most once per kind per session (the paper's "one nudge per failure
//! mode"); the session's nudge state travels in the tool-call ids ([`crate::session`]).

pub mod edit;
pub mod observe;

use serde::Serialize;
use serde_json::Value;

use crate::conversation::{Action, Conversation, Step};
use crate::parse::ParseFailure;
use crate::profile::{SubmitTarget, ToolRole, ToolSet, EDITOR_TAG};
use crate::session::{NudgeKind, NudgeState};

/// Thresholds of the termination rules. Defaults: [`Limits::default`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Actions per trajectory; the action at this index ends it (default 100).
    pub max_steps: usize,
    /// Consecutive unparsable outputs that end it, counting the current one (default 5).
    pub max_unparsable: usize,
    /// Recent actions in which the same action three times ends it (default 10).
    pub loop_window: usize,
    /// Whether the two nudges run (default true). Off, a premature submit and a repeated
    /// action are accepted as they are (the ablation without failure recovery); the other
    /// termination rules still apply.
    pub nudges: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_steps: 100,
            max_unparsable: 5,
            loop_window: 10,
            nudges: true,
        }
    }
}

/// Why a trajectory was ended by the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum Termination {
    /// A second submit before any edit, after the nudge.
    SubmitBeforeEditAgain,
    /// A second repeated action, after the nudge.
    RepeatedActionAgain,
    /// The step cap was reached.
    StepCap { max_steps: usize },
    /// Too many unparsable outputs in a row.
    Unparsable { consecutive: usize },
    /// The same action three times within the window.
    SameActionThrice { window: usize },
    /// Two actions alternating: A, B, A, B.
    Alternation,
}

impl Termination {
    /// A one-line explanation for the finish message and logs.
    pub fn describe(&self) -> String {
        match self {
            Self::SubmitBeforeEditAgain => "submitted again without editing any file".into(),
            Self::RepeatedActionAgain => "repeated the previous action again".into(),
            Self::StepCap { max_steps } => format!("reached the step cap of {max_steps}"),
            Self::Unparsable { consecutive } => {
                format!("{consecutive} unparsable outputs in a row")
            }
            Self::SameActionThrice { window } => {
                format!("the same action three times within {window} steps")
            }
            Self::Alternation => "alternated between two actions".into(),
        }
    }
}

/// What to do with the model's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Send it to the scaffold.
    Accept,
    /// Reject it, show the hint, generate again.
    Nudge(NudgeKind),
    /// End the trajectory.
    Terminate(Termination),
}

/// Decides about the parsed output of the step after `conversation` (which may contain the
/// nudged steps of this session; they are never counted as actions).
pub fn decide(
    conversation: &Conversation,
    outcome: &Result<Action, ParseFailure>,
    nudges: &NudgeState,
    tools: &ToolSet,
    limits: &Limits,
) -> Decision {
    let history: Vec<&Action> = conversation.actions().collect();
    let action = match outcome {
        Err(_) => {
            let consecutive = 1 + trailing_unparsable(&conversation.steps);
            return if consecutive >= limits.max_unparsable {
                Decision::Terminate(Termination::Unparsable { consecutive })
            } else {
                Decision::Accept
            };
        }
        Ok(action) => action,
    };
    if is_submit(action, tools) {
        if limits.nudges && tools.can_edit() && !history.iter().any(|a| is_edit(a, tools)) {
            return if nudges.used(NudgeKind::SubmitBeforeEdit) {
                Decision::Terminate(Termination::SubmitBeforeEditAgain)
            } else {
                Decision::Nudge(NudgeKind::SubmitBeforeEdit)
            };
        }
        return Decision::Accept;
    }
    if history.len() >= limits.max_steps {
        return Decision::Terminate(Termination::StepCap {
            max_steps: limits.max_steps,
        });
    }
    if limits.nudges && history.last().is_some_and(|prev| same_action(prev, action)) {
        return if nudges.used(NudgeKind::RepeatedAction) {
            Decision::Terminate(Termination::RepeatedActionAgain)
        } else {
            Decision::Nudge(NudgeKind::RepeatedAction)
        };
    }
    let window = &history[history.len().saturating_sub(limits.loop_window - 1)..];
    if window.iter().filter(|a| same_action(a, action)).count() >= 2 {
        return Decision::Terminate(Termination::SameActionThrice {
            window: limits.loop_window,
        });
    }
    if let [.., a, b, c] = history.as_slice() {
        if same_action(a, c) && same_action(b, action) && !same_action(a, b) {
            return Decision::Terminate(Termination::Alternation);
        }
    }
    Decision::Accept
}

/// Unparsable outputs at the end of the history: steps without an action. A failed turn the
/// scaffold kept and a feedback step it added after dropping one each stand for one output.
fn trailing_unparsable(steps: &[Step]) -> usize {
    steps
        .iter()
        .rev()
        .filter(|s| s.nudge.is_none())
        .take_while(|s| s.action.is_none())
        .count()
}

/// Whether an action ends the run: `<submit/>`, or a shell command that starts with the
/// profile's finish command (mini-swe-agent's `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`,
/// which the model may also write itself; the scaffold ends the run on it either way).
pub fn is_submit(action: &Action, tools: &ToolSet) -> bool {
    match action {
        Action::Submit { .. } => true,
        Action::Call { tag, arguments } => match (&tools.submit, tools.get(tag).map(|t| &t.role)) {
            (SubmitTarget::Command(sentinel), Some(ToolRole::Shell { command_parameter })) => {
                arguments
                    .get(command_parameter)
                    .and_then(Value::as_str)
                    .is_some_and(|c| c.trim_start().starts_with(sentinel.as_str()))
            }
            _ => false,
        },
    }
}

/// Whether an action changes files: an editor command listed as modifying in the profile, or
/// a shell command that writes files ([`edit::shell_writes_files`]).
pub fn is_edit(action: &Action, tools: &ToolSet) -> bool {
    let Action::Call { tag, arguments } = action else {
        return false;
    };
    let text = |key: &str| arguments.get(key).and_then(Value::as_str);
    match tools.get(tag).map(|t| &t.role) {
        Some(ToolRole::Shell { command_parameter }) => {
            text(command_parameter).is_some_and(edit::shell_writes_files)
        }
        Some(ToolRole::Editor) => {
            text("command").is_some_and(|c| tools.modifying_commands().iter().any(|m| m == c))
        }
        _ if tag == EDITOR_TAG => text("command").is_some_and(|c| c != "view"),
        _ => false,
    }
}

/// Whether an action is a *successful edit*: an edit ([`is_edit`]) whose observation is known
/// and reports no error ([`observe::reports_error`]). An edit whose result the scaffold never
/// sent back (`observation` `None`) is not known to have happened, so it is not one.
pub fn is_successful_edit(action: &Action, observation: Option<&str>, tools: &ToolSet) -> bool {
    is_edit(action, tools) && observation.is_some_and(|o| !observe::reports_error(o))
}

/// Identity for the repeated-action rule: same tag and the same arguments, strings compared
/// without surrounding whitespace, key order ignored.
pub fn same_action(a: &Action, b: &Action) -> bool {
    match (a, b) {
        (Action::Submit { .. }, Action::Submit { .. }) => true,
        (
            Action::Call {
                tag: ta,
                arguments: xa,
            },
            Action::Call {
                tag: tb,
                arguments: xb,
            },
        ) => {
            ta == tb
                && xa.len() == xb.len()
                && xa
                    .iter()
                    .all(|(k, v)| xb.get(k).is_some_and(|w| canonical(v) == canonical(w)))
        }
        _ => false,
    }
}

fn canonical(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(s.trim().to_string()),
        other => other.clone(),
    }
}

/// Inserts the nudged steps of `nudges` into a conversation rebuilt from a scaffold's history,
/// each at its recorded place, so later prompts render them where they first appeared.
/// A nudge whose place lies beyond the history (a scaffold that dropped steps) is skipped.
pub fn insert_nudged_steps(conversation: &mut Conversation, nudges: &NudgeState, tools: &ToolSet) {
    let mut inserted = 0;
    let mut ordered = nudges.0.clone();
    ordered.sort_by_key(|(_, place)| *place);
    for (kind, place) in ordered {
        let index = place + inserted;
        if index > conversation.steps.len() {
            continue;
        }
        let step = nudged_step(&conversation.steps[..index], kind, tools);
        conversation.steps.insert(index, step);
        inserted += 1;
    }
}

/// Applies a nudge within a request: records it in `nudges` at its place (the live steps
/// before it) and appends the nudged step to `conversation`. Returns the hint shown.
pub fn push_nudge(
    conversation: &mut Conversation,
    nudges: &mut NudgeState,
    kind: NudgeKind,
    tools: &ToolSet,
) -> String {
    let place = conversation
        .steps
        .iter()
        .filter(|s| s.nudge.is_none())
        .count();
    nudges.push(kind, place);
    let nudged = nudged_step(&conversation.steps, kind, tools);
    let hint = nudged.observation.clone().unwrap_or_default();
    conversation.steps.push(nudged);
    hint
}

/// The step that shows a rejected action and its hint. The rejected action is rebuilt from the
/// history (a submit, or a copy of the previous action), never from the model's text, so the
/// same step renders identically on every later turn (append-only prompts).
pub fn nudged_step(before: &[Step], kind: NudgeKind, tools: &ToolSet) -> Step {
    let action = match kind {
        NudgeKind::SubmitBeforeEdit => Action::Submit { message: None },
        NudgeKind::RepeatedAction => before
            .iter()
            .rev()
            .filter(|s| s.nudge.is_none())
            .find_map(|s| s.action.clone())
            .unwrap_or(Action::Submit { message: None }),
    };
    let hint = match kind {
        NudgeKind::SubmitBeforeEdit => tools.hints.submit_before_edit.clone(),
        NudgeKind::RepeatedAction => tools.hints.repeated_action.clone(),
    };
    Step {
        thought: String::new(),
        action: Some(action),
        observation: Some(hint),
        call_id: None,
        turn: before.last().map_or(0, |s| s.turn + 1),
        nudge: Some(kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::chat::ChatCompletionRequest;
    use crate::parse::FailureClass;
    use crate::profile::Profiles;
    use serde_json::{json, Map};

    fn tools(fixture: &str) -> ToolSet {
        let path = format!(
            "{}/tests/fixtures/requests/{fixture}",
            env!("CARGO_MANIFEST_DIR")
        );
        let request = ChatCompletionRequest::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let profiles = Profiles::builtin().unwrap();
        ToolSet::build(
            profiles.detect(&request.tools, &request.detection_text()),
            &request.tools,
        )
    }

    fn bash(cmd: &str) -> Action {
        Action::Call {
            tag: "bash".into(),
            arguments: Map::from_iter([("command".to_string(), json!(cmd))]),
        }
    }

    fn conv(actions: &[Action]) -> Conversation {
        Conversation {
            steps: actions
                .iter()
                .enumerate()
                .map(|(i, a)| Step {
                    action: Some(a.clone()),
                    observation: Some("ok".into()),
                    turn: i,
                    ..Step::default()
                })
                .collect(),
            ..Conversation::default()
        }
    }

    fn decide_swe(history: &[Action], current: Action, nudges: &NudgeState) -> Decision {
        decide(
            &conv(history),
            &Ok(current),
            nudges,
            &tools("swe-agent-1.json"),
            &Limits::default(),
        )
    }

    const SUBMIT: Action = Action::Submit { message: None };

    #[test]
    fn mini_finish_command_written_by_the_model_is_a_submit() {
        let mini = tools("mini-swe-agent-1.json");
        let finish = bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff");
        assert!(is_submit(&finish, &mini));
        assert!(!is_submit(&bash("echo done"), &mini));
        assert!(
            !is_submit(&finish, &tools("swe-agent-1.json")),
            "not SWE-agent's finish"
        );
        assert_eq!(
            decide(
                &conv(&[bash("ls")]),
                &Ok(finish),
                &NudgeState::default(),
                &mini,
                &Limits::default()
            ),
            Decision::Nudge(NudgeKind::SubmitBeforeEdit)
        );
    }

    #[test]
    fn submit_before_edit_is_nudged_once_then_ends() {
        let none = NudgeState::default();
        assert_eq!(
            decide_swe(&[bash("ls")], SUBMIT, &none),
            Decision::Nudge(NudgeKind::SubmitBeforeEdit)
        );
        let used = NudgeState(vec![(NudgeKind::SubmitBeforeEdit, 1)]);
        assert_eq!(
            decide_swe(&[bash("ls")], SUBMIT, &used),
            Decision::Terminate(Termination::SubmitBeforeEditAgain)
        );
        assert_eq!(
            decide_swe(&[bash("sed -i s/a/b/ f.py"), bash("ls")], SUBMIT, &none),
            Decision::Accept
        );
        let edit = Action::Call {
            tag: "str_replace_editor".into(),
            arguments: Map::from_iter([
                ("command".to_string(), json!("create")),
                ("path".to_string(), json!("/a.py")),
            ]),
        };
        assert_eq!(decide_swe(&[edit], SUBMIT, &none), Decision::Accept);
        // A search agent cannot edit: its answer is never premature.
        let generic = tools("browsecomp-plus-1.json");
        assert_eq!(
            decide(&conv(&[]), &Ok(SUBMIT), &none, &generic, &Limits::default()),
            Decision::Accept
        );
    }

    #[test]
    fn repeated_action_is_nudged_once_then_ends() {
        let none = NudgeState::default();
        assert_eq!(
            decide_swe(&[bash("ls")], bash(" ls\n"), &none),
            Decision::Nudge(NudgeKind::RepeatedAction)
        );
        let used = NudgeState(vec![(NudgeKind::RepeatedAction, 3)]);
        assert_eq!(
            decide_swe(&[bash("ls")], bash("ls"), &used),
            Decision::Terminate(Termination::RepeatedActionAgain)
        );
        assert_eq!(
            decide_swe(&[bash("ls")], bash("ls -la"), &none),
            Decision::Accept
        );
    }

    #[test]
    fn without_nudges_submit_and_repeat_are_accepted_and_loops_still_end() {
        let off = Limits {
            nudges: false,
            ..Limits::default()
        };
        let swe = tools("swe-agent-1.json");
        let none = NudgeState::default();
        let decide_off = |history: &[Action], current: Action| {
            decide(&conv(history), &Ok(current), &none, &swe, &off)
        };
        assert_eq!(decide_off(&[bash("ls")], SUBMIT), Decision::Accept);
        assert_eq!(decide_off(&[bash("ls")], bash("ls")), Decision::Accept);
        assert_eq!(
            decide_off(&[bash("ls"), bash("ls")], bash("ls")),
            Decision::Terminate(Termination::SameActionThrice { window: 10 })
        );
    }

    #[test]
    fn loops_end_the_trajectory() {
        let none = NudgeState::default();
        let (a, b, c) = (bash("a"), bash("b"), bash("c"));
        assert_eq!(
            decide_swe(
                &[a.clone(), b.clone(), a.clone(), c.clone()],
                a.clone(),
                &none
            ),
            Decision::Terminate(Termination::SameActionThrice { window: 10 })
        );
        assert_eq!(
            decide_swe(
                &[c.clone(), a.clone(), b.clone(), a.clone()],
                b.clone(),
                &none
            ),
            Decision::Terminate(Termination::Alternation)
        );
        // Outside the window, an old action may come back.
        let mut long = vec![a.clone(), a.clone()];
        long.extend((0..9).map(|i| bash(&format!("x{i}"))));
        assert_eq!(decide_swe(&long, a, &none), Decision::Accept);
    }

    #[test]
    fn unparsable_streak_and_step_cap_end_the_trajectory() {
        let tools = tools("swe-agent-1.json");
        let limits = Limits {
            max_steps: 3,
            max_unparsable: 3,
            loop_window: 10,
            nudges: true,
        };
        let failure = Err(ParseFailure {
            class: FailureClass::NoAction,
            detail: String::new(),
        });
        let mut c = conv(&[bash("ls")]);
        c.steps.push(Step {
            observation: Some("format error".into()),
            ..Step::default()
        });
        let none = NudgeState::default();
        assert_eq!(
            decide(&c, &failure, &none, &tools, &limits),
            Decision::Accept
        );
        c.steps.push(Step {
            observation: Some("format error".into()),
            ..Step::default()
        });
        assert_eq!(
            decide(&c, &failure, &none, &tools, &limits),
            Decision::Terminate(Termination::Unparsable { consecutive: 3 })
        );
        let three = conv(&[bash("a"), bash("b"), bash("c")]);
        assert_eq!(
            decide(&three, &Ok(bash("d")), &none, &tools, &limits),
            Decision::Terminate(Termination::StepCap { max_steps: 3 })
        );
        assert_eq!(
            decide(&three, &Ok(bash("sed -i s/a/b/ f")), &none, &tools, &limits),
            Decision::Terminate(Termination::StepCap { max_steps: 3 })
        );
    }

    #[test]
    fn nudged_steps_go_back_to_their_place() {
        let tools = tools("swe-agent-1.json");
        let mut c = conv(&[bash("ls"), bash("ls -a"), bash("pwd")]);
        let nudges = NudgeState(vec![
            (NudgeKind::RepeatedAction, 2),
            (NudgeKind::SubmitBeforeEdit, 2),
        ]);
        insert_nudged_steps(&mut c, &nudges, &tools);
        let kinds: Vec<Option<NudgeKind>> = c.steps.iter().map(|s| s.nudge).collect();
        assert_eq!(
            kinds,
            vec![
                None,
                None,
                Some(NudgeKind::RepeatedAction),
                Some(NudgeKind::SubmitBeforeEdit),
                None
            ]
        );
        assert_eq!(
            c.steps[2].action,
            Some(bash("ls -a")),
            "the repeated action is the previous one"
        );
        assert_eq!(c.steps[3].action, Some(SUBMIT));
        assert_eq!(
            c.steps[3].observation.as_deref(),
            Some(tools.hints.submit_before_edit.as_str())
        );
        assert_eq!(c.actions().count(), 3, "nudged steps are not actions");
    }
}
