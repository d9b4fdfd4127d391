//! The paper's failure recovery and termination rules (ASAP, "minimal failure recovery"):
//! a pure function from the trajectory so far and the parsed action to a decision.
//!
//! The paper ends a run on the model's submit, the step cap, the second violation of a nudged
//! rule, or a degenerate loop. Here:
//!
//! - **Submit before edit** (paper): a submit when no edit command ([`is_edit`], successful or
//!   not) has been issued is rejected once with the profile's hint (only where the tools can
//!   edit: a shell or an editor).
//! - **Repeated action** (paper): an action identical to the previous one (same tool, same
//!   arguments, strings compared without surrounding whitespace) is rejected once with a hint.
//!   The second violation of either rule ends the trajectory. Switch: `--nudges on|off`.
//! - **Step cap** (paper): the action at index `max_steps` ends it (`--max-steps`).
//! - **Degenerate loop** (paper, "degenerate loop"; this definition is ours, issue 17): the
//!   current action is at least the third occurrence of one action within the last
//!   `loop_window` actions, the two latest earlier occurrences got the same observation, and
//!   nothing since the first of those two may have changed a file (no successful edit, no edit
//!   whose result is unknown). The model keeps asking the same question of an unchanged
//!   environment and gets the same answer. An edit → test → edit → test cycle is therefore
//!   never a loop (the paper's "valid re-edit after a failed test"), nor is a repeated
//!   successful edit. This covers A/B alternation (A B A B A). Switch: `--loop-rule
//!   degenerate|off`, window `--loop-window`.
//! - **Unparsable streak** (ours, not the paper's): `max_unparsable` consecutive outputs
//!   without a parsable action end it, so a model that never writes the format does not run
//!   to the step cap at full cost. Switch: `--max-unparsable N`, 0 off.
//!
//! A terminated trajectory ends with the profile's finish action (or an error,
//! `--on-terminate error`). A nudge is used at most once per kind per session (the paper's
//! "one nudge per failure mode"); the session's nudge state travels in the tool-call ids
//! ([`crate::session`]).

mod edit;
mod observe;

pub use edit::{
    command_words, edit_targets, shell_write_targets, shell_writes_files, WriteKind, WriteTarget,
};
pub use observe::{
    base_name, edit_failed, mentions, reports_error, EditTool, EDITOR_REFUSALS, EDITOR_SUCCESS,
    FILE_ERRORS, WRITER_ERRORS,
};

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::conversation::{Conversation, Step};
use crate::parse::ParseFailure;
use crate::profile::Action;
use crate::profile::{ResolvedProfile, SubmitTarget, ToolRole};
use crate::session::{NudgeKind, NudgeState};

/// Thresholds and switches of the termination rules. Defaults: [`Limits::default`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Actions per trajectory; the action at this index ends it (default 100; the paper's
    /// step cap).
    pub max_steps: usize,
    /// Consecutive unparsable outputs that end it, counting the current one; 0: never
    /// (default 5). Ours, not the paper's: a model that never writes the format would
    /// otherwise run to the step cap at full cost.
    pub max_unparsable: usize,
    /// Whether the degenerate-loop rule runs (default [`LoopRule::Degenerate`]).
    pub loop_rule: LoopRule,
    /// Recent actions, the current one included, in which the degenerate-loop rule looks for
    /// repeats (default 10, at least 3).
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
            loop_rule: LoopRule::Degenerate,
            loop_window: 10,
            nudges: true,
        }
    }
}

/// Which loop rule ends a trajectory (`--loop-rule`, env `ASAP_LOOP_RULE`, TOML `loop_rule`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum LoopRule {
    /// The paper's "degenerate loop", as defined in the module docs: the same action a third
    /// time within the window, the same observation for the earlier two, no successful edit
    /// since.
    #[default]
    Degenerate,
    /// No loop rule: only the nudges, the step cap and the unparsable streak end a run.
    Off,
}

impl LoopRule {
    /// The name used by the flag, the TOML file and the session record (`degenerate`, `off`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Degenerate => "degenerate",
            Self::Off => "off",
        }
    }
}

/// Why a trajectory was ended by the proxy. Serialised with its snake_case name as `reason`
/// and its parameters beside it (`{"reason": "degenerate_loop", "window": 10, "repeats": 3}`).
/// Traces written before issue 17 may also hold `same_action_thrice` and `alternation`,
/// rules that no longer exist; those names are not reused.
///
/// Read back from traces ([`crate::trace`]), it also takes the two retired reasons and, as
/// [`Termination::Unrecognised`], a reason this build does not know (a newer build's), so an
/// old or newer trace never fails to read; the proxy itself produces none of those three.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum Termination {
    /// A second submit before any edit, after the nudge (paper).
    SubmitBeforeEditAgain,
    /// A second repeated action, after the nudge (paper).
    RepeatedActionAgain,
    /// The step cap was reached (paper).
    StepCap { max_steps: usize },
    /// Too many unparsable outputs in a row (ours: `--max-unparsable`).
    Unparsable { consecutive: usize },
    /// A degenerate loop (paper; definition in the module docs): the action occurred
    /// `repeats` times within the last `window` actions, the current one included.
    DegenerateLoop { window: usize, repeats: usize },
    /// Traces before issue 17 only (read, never produced): the same action three times.
    SameActionThrice {
        #[serde(default)]
        window: usize,
    },
    /// Traces before issue 17 only (read, never produced): an A/B/A/B alternation.
    Alternation,
    /// Read only: a reason this build does not know (its name is not kept).
    #[serde(other, rename = "unknown")]
    Unrecognised,
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
            Self::DegenerateLoop { window, repeats } => format!(
                "a degenerate loop: the same action {repeats} times within {window} steps, \
                 with the same result and no successful edit in between"
            ),
            Self::SameActionThrice { .. } => "the same action three times".into(),
            Self::Alternation => "two actions alternating".into(),
            Self::Unrecognised => "a rule this build does not know".into(),
        }
    }

    /// The snake_case name written as `reason` (`unknown` for [`Termination::Unrecognised`]).
    pub fn name(&self) -> &'static str {
        match self {
            Self::SubmitBeforeEditAgain => "submit_before_edit_again",
            Self::RepeatedActionAgain => "repeated_action_again",
            Self::StepCap { .. } => "step_cap",
            Self::Unparsable { .. } => "unparsable",
            Self::DegenerateLoop { .. } => "degenerate_loop",
            Self::SameActionThrice { .. } => "same_action_thrice",
            Self::Alternation => "alternation",
            Self::Unrecognised => "unknown",
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
    tools: &ResolvedProfile,
    limits: &Limits,
) -> Decision {
    let history: Vec<&Action> = conversation.actions().collect();
    let action = match outcome {
        Err(_) => {
            let consecutive = 1 + trailing_unparsable(&conversation.steps);
            return if limits.max_unparsable > 0 && consecutive >= limits.max_unparsable {
                Decision::Terminate(Termination::Unparsable { consecutive })
            } else {
                Decision::Accept
            };
        }
        Ok(action) => action,
    };
    // Steps a client compacted away still count: as steps of the cap, and as an edit.
    let compacted = conversation.compacted.unwrap_or_default();
    if is_submit(action, tools) {
        // A subagent may have edited for the model: handing work to one is an attempt.
        let delegated =
            |a: &&Action| matches!(a, Action::Call { tag, .. } if tools.is_delegate(tag));
        let edited = compacted.edited
            || history.iter().any(|a| is_edit(a, tools))
            || history.iter().any(delegated);
        if limits.nudges && tools.can_edit() && !edited && !conversation.subagent {
            return if nudges.used(NudgeKind::SubmitBeforeEdit) {
                Decision::Terminate(Termination::SubmitBeforeEditAgain)
            } else {
                Decision::Nudge(NudgeKind::SubmitBeforeEdit)
            };
        }
        return Decision::Accept;
    }
    if compacted.steps + history.len() >= limits.max_steps {
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
    if limits.loop_rule == LoopRule::Degenerate {
        if let Some(repeats) = degenerate_loop(conversation, action, tools, limits.loop_window) {
            return Decision::Terminate(Termination::DegenerateLoop {
                window: limits.loop_window,
                repeats,
            });
        }
    }
    Decision::Accept
}

/// The degenerate-loop rule (module docs): `Some(occurrences of action within the window,
/// the current one included)` when `action` closes a loop, else `None`.
///
/// Why each condition: a repeat alone is not a loop (a test run after each edit repeats the
/// same command on purpose); a repeat whose earlier runs answered differently is exploring
/// a changing environment; an edit that may have landed (successful, or its result unknown,
/// which counts as landed since this rule cuts a run) may change what the repeat will show.
fn degenerate_loop(
    conversation: &Conversation,
    action: &Action,
    tools: &ResolvedProfile,
    loop_window: usize,
) -> Option<usize> {
    // Actions the scaffold ran with their observations; nudged steps are never actions.
    let ran: Vec<(&Action, Option<&str>)> = conversation
        .steps
        .iter()
        .filter(|s| s.nudge.is_none())
        .filter_map(|s| Some((s.action.as_ref()?, s.observation.as_deref())))
        .collect();
    // The window holds the current action too.
    let start = ran.len().saturating_sub(loop_window.saturating_sub(1));
    let earlier: Vec<usize> = (start..ran.len())
        .filter(|&i| same_action(ran[i].0, action))
        .collect();
    let &[.., first, second] = earlier.as_slice() else {
        return None;
    };
    // An observation the scaffold elided in this request (SWE-agent's last_n_observations)
    // says nothing of what the action showed: never the same result.
    let same_result = match (ran[first].1, ran[second].1) {
        (Some(a), Some(b)) => a.trim() == b.trim() && !observe::elided(a),
        _ => false,
    };
    let may_have_changed = ran[first..].iter().any(|(a, observation)| {
        is_successful_edit(a, *observation, tools) || (observation.is_none() && is_edit(a, tools))
    });
    (same_result && !may_have_changed).then_some(earlier.len() + 1)
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
pub fn is_submit(action: &Action, tools: &ResolvedProfile) -> bool {
    match action {
        Action::Submit { .. } => true,
        Action::Call { tag, arguments } => match (&tools.submit, tools.get(tag).map(|t| &t.role)) {
            (
                SubmitTarget::Command { sentinel, .. },
                Some(ToolRole::Shell { command_parameter }),
            ) => arguments
                .get(command_parameter)
                .and_then(Value::as_str)
                .is_some_and(|c| c.trim_start().starts_with(sentinel.as_str())),
            _ => false,
        },
    }
}

/// Whether an action changes files: an editor command listed as modifying in the profile, or
/// a shell command that writes files; i.e. it has write targets ([`edit::edit_targets`]).
pub fn is_edit(action: &Action, tools: &ResolvedProfile) -> bool {
    !edit::edit_targets(action, tools).is_empty()
}

/// Whether an action is a *successful edit*: an edit ([`is_edit`]) whose observation is known
/// and does not say the write failed ([`observe::edit_failed`], with the action's tool and
/// written files). An edit whose result the scaffold never sent back (`observation` `None`) is
/// not known to have happened, so it is not one.
pub fn is_successful_edit(
    action: &Action,
    observation: Option<&str>,
    tools: &ResolvedProfile,
) -> bool {
    if !is_edit(action, tools) {
        return false;
    }
    let Some(observation) = observation else {
        return false;
    };
    let shell = matches!(action, Action::Call { tag, .. }
        if matches!(tools.get(tag).map(|t| &t.role), Some(ToolRole::Shell { .. })));
    if !shell {
        return !observe::edit_failed(observation, observe::EditTool::Editor);
    }
    let paths: Vec<Option<String>> = edit::edit_targets(action, tools)
        .into_iter()
        .map(|t| t.path)
        .collect();
    !observe::edit_failed(observation, observe::EditTool::Shell(&paths))
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
pub fn insert_nudged_steps(
    conversation: &mut Conversation,
    nudges: &NudgeState,
    tools: &ResolvedProfile,
) {
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
    tools: &ResolvedProfile,
) -> String {
    let place = conversation
        .steps
        .iter()
        .filter(|s| s.nudge.is_none())
        .count();
    nudges.push(kind, place);
    let nudged = nudged_step(&conversation.steps, kind, tools);
    let hint = nudged
        .observation
        .as_deref()
        .unwrap_or_default()
        .to_string();
    conversation.steps.push(nudged);
    hint
}

/// The step that shows a rejected action and its hint. The rejected action is rebuilt from the
/// history (a submit, or a copy of the previous action), never from the model's text, so the
/// same step renders identically on every later turn (append-only prompts).
pub fn nudged_step(before: &[Step], kind: NudgeKind, tools: &ResolvedProfile) -> Step {
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
        thought: Arc::default(),
        action: Some(action),
        observation: Some(hint.into()),
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

    fn tools(fixture: &str) -> ResolvedProfile {
        let path = format!(
            "{}/tests/fixtures/requests/{fixture}",
            env!("CARGO_MANIFEST_DIR")
        );
        let request = ChatCompletionRequest::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let profiles = Profiles::builtin().unwrap();
        ResolvedProfile::build(
            profiles.detect(&request.tools, &request.detection_text()),
            &request.tools,
        )
    }

    /// Claude Code's write tools are edits of the file they name; its other tools are not;
    /// its refusals (`<tool_use_error>`) are failed edits.
    #[test]
    fn claude_code_write_tools_are_edits() {
        let t = tools("claude-code-1.json");
        let call = |tag: &str, args: serde_json::Value| Action::Call {
            tag: tag.into(),
            arguments: std::sync::Arc::new(args.as_object().unwrap().clone()),
        };
        let edit = call(
            "Edit",
            json!({"file_path": "/repo/calc.py", "old_string": "-", "new_string": "+"}),
        );
        let targets = edit::edit_targets(&edit, &t);
        assert_eq!(targets.len(), 1);
        assert_eq!(targets[0].path.as_deref(), Some("/repo/calc.py"));
        assert_eq!(targets[0].kind, edit::WriteKind::InPlace);
        let write = call(
            "Write",
            json!({"file_path": "/repo/new.py", "content": "x"}),
        );
        assert_eq!(
            edit::edit_targets(&write, &t)[0].kind,
            edit::WriteKind::Overwrite
        );
        for other in [
            call("Read", json!({"file_path": "/repo/calc.py"})),
            call("TodoWrite", json!({"todos": []})),
            call("Grep", json!({"pattern": "add"})),
        ] {
            assert!(!is_edit(&other, &t), "{other:?}");
        }
        assert!(is_edit(&bash("sed -i s/-/+/ calc.py"), &t));
        assert!(t.can_edit());
        assert!(is_successful_edit(
            &edit,
            Some("The file /repo/calc.py has been updated. Here's the result of running `cat -n`"),
            &t
        ));
        assert!(!is_successful_edit(
            &edit,
            Some(
                "<tool_use_error>String to replace not found in file.\nString: -</tool_use_error>"
            ),
            &t
        ));
    }

    /// Handing work to a subagent counts as an attempt to edit for the submit nudge; a
    /// subagent's own session is never nudged for submitting without an edit; steps a
    /// client compacted away count as edits when one was.
    #[test]
    fn delegation_subagents_and_compaction_in_the_submit_nudge() {
        let t = tools("claude-code-1.json");
        let submit = Ok(Action::Submit { message: None });
        let none = NudgeState::default();
        let limits = Limits::default();
        let look = bash("cat calc.py");
        assert_eq!(
            decide(
                &conv(std::slice::from_ref(&look)),
                &submit,
                &none,
                &t,
                &limits
            ),
            Decision::Nudge(NudgeKind::SubmitBeforeEdit)
        );
        let agent = Action::Call {
            tag: "Agent".into(),
            arguments: std::sync::Arc::new(Map::from_iter([(
                "prompt".to_string(),
                json!("Fix calc.py"),
            )])),
        };
        assert_eq!(
            decide(&conv(&[look.clone(), agent]), &submit, &none, &t, &limits),
            Decision::Accept
        );
        let mut subagent = conv(std::slice::from_ref(&look));
        subagent.subagent = true;
        assert_eq!(
            decide(&subagent, &submit, &none, &t, &limits),
            Decision::Accept
        );
        let mut compacted = conv(&[look]);
        compacted.compacted = Some(crate::conversation::Compacted {
            steps: 4,
            edited: true,
        });
        assert_eq!(
            decide(&compacted, &submit, &none, &t, &limits),
            Decision::Accept
        );
        // The compacted steps count toward the step cap.
        let capped = Limits {
            max_steps: 5,
            ..Limits::default()
        };
        assert_eq!(
            decide(&compacted, &Ok(bash("ls")), &none, &t, &capped),
            Decision::Terminate(Termination::StepCap { max_steps: 5 })
        );
    }

    fn bash(cmd: &str) -> Action {
        Action::Call {
            tag: "bash".into(),
            arguments: std::sync::Arc::new(Map::from_iter([("command".to_string(), json!(cmd))])),
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
            arguments: std::sync::Arc::new(Map::from_iter([
                ("command".to_string(), json!("create")),
                ("path".to_string(), json!("/a.py")),
            ])),
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
            Decision::Terminate(Termination::DegenerateLoop {
                window: 10,
                repeats: 3
            })
        );
    }

    fn str_replace(old: &str, new: &str) -> Action {
        Action::Call {
            tag: "str_replace_editor".into(),
            arguments: std::sync::Arc::new(Map::from_iter([
                ("command".to_string(), json!("str_replace")),
                ("path".to_string(), json!("/testbed/x.py")),
                ("old_str".to_string(), json!(old)),
                ("new_str".to_string(), json!(new)),
            ])),
        }
    }

    /// A conversation of actions with their observations (`None`: never sent back).
    fn conv_seen(steps: &[(Action, Option<&str>)]) -> Conversation {
        Conversation {
            steps: steps
                .iter()
                .enumerate()
                .map(|(i, (a, o))| Step {
                    action: Some(a.clone()),
                    observation: o.map(Into::into),
                    turn: i,
                    ..Step::default()
                })
                .collect(),
            ..Conversation::default()
        }
    }

    /// The decision for each step of `steps` given the ones before it.
    fn decisions(steps: &[(Action, Option<&str>)], limits: &Limits) -> Vec<Decision> {
        let swe = tools("swe-agent-1.json");
        (0..steps.len())
            .map(|i| {
                decide(
                    &conv_seen(&steps[..i]),
                    &Ok(steps[i].0.clone()),
                    &NudgeState::default(),
                    &swe,
                    limits,
                )
            })
            .collect()
    }

    const EDITED: &str = "The file /testbed/x.py has been edited. Here's the result of running \
                          `cat -n` on a snippet of /testbed/x.py:\n     1\tx = 2\n";
    const FAILED: &str = "F\n=== FAILURES ===\nassert 1 == 2\n1 failed in 0.02s\n";
    const NOT_REPLACED: &str = "No replacement was performed, old_str `y = 1` did not appear \
                                verbatim in /testbed/x.py.";

    const LOOP3: Decision = Decision::Terminate(Termination::DegenerateLoop {
        window: 10,
        repeats: 3,
    });

    #[test]
    fn re_editing_after_a_failed_test_is_never_a_loop() {
        // The paper's "valid re-edit after a failed test": the same test three times with
        // the same failure, a successful edit before each run.
        let test = bash("python -m pytest tests/test_x.py");
        let run = [
            (str_replace("x = 1", "x = 2"), Some(EDITED)),
            (test.clone(), Some(FAILED)),
            (str_replace("x = 2", "x = 3"), Some(EDITED)),
            (test.clone(), Some(FAILED)),
            (str_replace("x = 3", "x = 4"), Some(EDITED)),
            (test.clone(), Some(FAILED)),
            (SUBMIT, None),
        ];
        assert_eq!(
            decisions(&run, &Limits::default()),
            vec![Decision::Accept; run.len()]
        );
        // Nor is the same successful edit repeated (it changed the file each time it ran).
        let edit = str_replace("x = 1", "x = 2");
        let run = [
            (edit.clone(), Some(EDITED)),
            (test.clone(), Some(FAILED)),
            (edit.clone(), Some(EDITED)),
            (test.clone(), Some(FAILED)),
            (edit, Some(EDITED)),
        ];
        assert_eq!(
            decisions(&run, &Limits::default()),
            vec![Decision::Accept; run.len()]
        );
    }

    #[test]
    fn an_edit_chained_with_a_failing_reproduction_is_a_successful_edit() {
        // `sed … && python reproduce.py` whose script fails with FileNotFoundError: the
        // write happened (the error names another file), so these re-edits are not a loop.
        let repro = bash("python reproduce.py");
        let failing = "Traceback (most recent call last):\n  File \"reproduce.py\", line 2\n\
                       FileNotFoundError: [Errno 2] No such file or directory: '/etc/app.yml'";
        let run = [
            (repro.clone(), Some(failing)),
            (
                bash("sed -i 's/a/b/' src/config.py && python reproduce.py"),
                Some(failing),
            ),
            (repro.clone(), Some(failing)),
            (
                bash("sed -i 's/b/c/' src/config.py && python reproduce.py"),
                Some(failing),
            ),
            (repro, Some(failing)),
        ];
        assert_eq!(
            decisions(&run, &Limits::default()),
            vec![Decision::Accept; run.len()]
        );
    }

    #[test]
    fn elided_observations_are_never_the_same_result() {
        // SWE-agent's last_n_observations: both earlier runs of the script now read
        // "Old environment output: (3 lines omitted)"; what they showed is unknown.
        let repro = bash("python reproduce.py");
        let elided = "Old environment output: (3 lines omitted)";
        let run = [
            (repro.clone(), Some(elided)),
            (bash("pip install -e ."), Some(elided)),
            (repro.clone(), Some(elided)),
            (bash("ls"), Some("a.py")),
            (repro, None),
        ];
        assert_eq!(
            decisions(&run, &Limits::default()),
            vec![Decision::Accept; run.len()]
        );
    }

    #[test]
    fn the_same_result_thrice_with_only_failed_edits_between_is_a_degenerate_loop() {
        let test = bash("python -m pytest tests/test_x.py");
        let run = [
            (str_replace("y = 1", "y = 2"), Some(NOT_REPLACED)),
            (test.clone(), Some(FAILED)),
            (str_replace("y = 1", "y = 3"), Some(NOT_REPLACED)),
            (test.clone(), Some(FAILED)),
            (str_replace("y = 1", "y = 4"), Some(NOT_REPLACED)),
            (
                test.clone(),
                Some("ignored: the current action has no result yet"),
            ),
        ];
        let mut expected = vec![Decision::Accept; run.len() - 1];
        expected.push(LOOP3);
        assert_eq!(decisions(&run, &Limits::default()), expected);
        // Observations compare without surrounding whitespace.
        let padded = format!("\n{FAILED}  \n");
        let mut run = run.to_vec();
        run[3].1 = Some(&padded);
        assert_eq!(decisions(&run, &Limits::default())[5], LOOP3);
        // Off, nothing ends it.
        let off = Limits {
            loop_rule: LoopRule::Off,
            ..Limits::default()
        };
        assert_eq!(decisions(&run, &off), vec![Decision::Accept; run.len()]);
    }

    #[test]
    fn the_same_action_with_different_results_is_not_a_loop() {
        let cat = bash("cat x.py");
        let run = [
            (cat.clone(), Some("x = 1")),
            (bash("ls"), Some("x.py")),
            (cat.clone(), Some("x = 2")),
            (bash("pwd"), Some("/testbed")),
            (cat.clone(), Some("x = 2")),
        ];
        assert_eq!(
            decisions(&run, &Limits::default()),
            vec![Decision::Accept; run.len()]
        );
        // A fourth time: the two latest earlier results agree now.
        let mut four = run.to_vec();
        four.push((bash("id"), Some("uid=0")));
        four.push((cat, Some("x = 2")));
        assert_eq!(
            decisions(&four, &Limits::default())[6],
            Decision::Terminate(Termination::DegenerateLoop {
                window: 10,
                repeats: 4
            })
        );
    }

    #[test]
    fn an_edit_whose_result_is_unknown_breaks_a_loop() {
        let cat = bash("cat x.py");
        let with = |edit_result: Option<&'static str>| {
            [
                (cat.clone(), Some("x = 1")),
                (str_replace("x = 1", "x = 2"), edit_result),
                (cat.clone(), Some("x = 1")),
                (bash("ls"), Some("x.py")),
                (cat.clone(), None),
            ]
        };
        assert_eq!(
            decisions(&with(None), &Limits::default())[4],
            Decision::Accept
        );
        assert_eq!(
            decisions(&with(Some(NOT_REPLACED)), &Limits::default())[4],
            LOOP3
        );
        // An earlier occurrence whose result is unknown is not known to repeat.
        let mut unknown = with(Some(NOT_REPLACED));
        unknown[2].1 = None;
        assert_eq!(decisions(&unknown, &Limits::default())[4], Decision::Accept);
    }

    #[test]
    fn alternation_with_the_same_results_is_a_degenerate_loop() {
        let (a, b) = (bash("cat x.py"), bash("cat y.py"));
        let run = [
            (a.clone(), Some("x")),
            (b.clone(), Some("y")),
            (a.clone(), Some("x")),
            (b.clone(), Some("y")),
            (a, Some("x")),
        ];
        let mut expected = vec![Decision::Accept; 4];
        expected.push(LOOP3);
        assert_eq!(decisions(&run, &Limits::default()), expected);
    }

    #[test]
    fn loops_end_the_trajectory_within_the_window_only() {
        let none = NudgeState::default();
        let (a, b, c) = (bash("a"), bash("b"), bash("c"));
        assert_eq!(
            decide_swe(
                &[a.clone(), b.clone(), a.clone(), c.clone()],
                a.clone(),
                &none
            ),
            LOOP3
        );
        // Two occurrences of b before: not yet a loop (A B A B used to end as an alternation).
        assert_eq!(
            decide_swe(
                &[c.clone(), a.clone(), b.clone(), a.clone()],
                b.clone(),
                &none
            ),
            Decision::Accept
        );
        // Outside the window, an old action may come back.
        let mut long = vec![a.clone(), a.clone()];
        long.extend((0..9).map(|i| bash(&format!("x{i}"))));
        assert_eq!(decide_swe(&long, a.clone(), &none), Decision::Accept);
        long.drain(2..4);
        assert_eq!(
            decide_swe(&long, a, &none),
            Decision::Terminate(Termination::DegenerateLoop {
                window: 10,
                repeats: 3
            }),
            "the first occurrence is the 9th action back: within 10, the current one counted"
        );
    }

    #[test]
    fn unparsable_streak_and_step_cap_end_the_trajectory() {
        let tools = tools("swe-agent-1.json");
        let limits = Limits {
            max_steps: 3,
            max_unparsable: 3,
            ..Limits::default()
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
        // 0 turns the rule off: no streak ends the trajectory.
        let never = Limits {
            max_unparsable: 0,
            ..limits
        };
        for _ in 0..20 {
            c.steps.push(Step {
                observation: Some("format error".into()),
                ..Step::default()
            });
        }
        assert_eq!(
            decide(&c, &failure, &none, &tools, &never),
            Decision::Accept
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
