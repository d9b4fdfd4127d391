//! The behaviour breakdown of one trajectory (ASAP §metrics, "behaviour metrics") and its
//! aggregation per label. Every definition is in `docs/report.md`; the text rules for test
//! commands and failed tests are in [`super::testcmd`] and [`super::failure`].

use std::collections::BTreeMap;

use serde::Serialize;

use super::failure::shows_test_failure;
use super::results::Outcome;
use super::testcmd::is_test_command;
use super::{Attempt, Trajectory};
use crate::policy::same_action;
use crate::policy::{
    base_name, edit_failed, mentions, reports_error, EditTool, WriteKind, WriteTarget,
};
use crate::profile::Action;
use crate::session::NudgeKind;

/// Parse failure classes that still mean "the model wrote an action in the format": the tag
/// and structure were right, only the tool name or a parameter was wrong.
pub const PARSABLE_FAILURES: [&str; 4] = [
    "unknown_tool",
    "missing_parameter",
    "invalid_parameter",
    MULTIPLE_TOOL_CALLS,
];

/// The class the report gives a reply of several tool calls that the scaffold did not run
/// (SWE-agent takes one call a turn and asks again): complete actions, so a parsable turn,
/// but not a valid tool call, and not accepted.
pub const MULTIPLE_TOOL_CALLS: &str = "multiple_tool_calls";

/// The proxy's termination reasons that are a loop rule: `degenerate_loop`, and the rules of
/// proxies before issue 17 (`same_action_thrice`, `alternation`), read from old traces.
pub const LOOP_TERMINATIONS: [&str; 3] = ["degenerate_loop", "same_action_thrice", "alternation"];

/// The proxy's termination reasons that are the second violation of a nudged rule.
pub const NUDGE_TERMINATIONS: [&str; 2] = ["submit_before_edit_again", "repeated_action_again"];

/// Occurrences of one action that make a repetitive command loop.
pub const LOOP_REPEATS: usize = 3;

/// How a trajectory ended: exactly one per trajectory (docs/report.md "How the run ended").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// The model's own accepted submit.
    Submitted,
    /// The proxy's step cap (`step_cap` termination), or the scaffold's own limit when
    /// `report --step-limit N` is given and the run made N or more requests.
    StepCap,
    /// The scaffold stopped sending requests without a submit (its format-error or cost
    /// limit, a crash, an interrupted run): the proxy cannot tell which.
    #[default]
    StoppedWithoutSubmission,
    /// The second violation of a nudged rule (`submit_before_edit_again`,
    /// `repeated_action_again`).
    NudgeRuleViolatedTwice,
    /// A loop rule ended it ([`LOOP_TERMINATIONS`]).
    DegenerateLoop,
    /// The unparsable-streak rule ended it (`unparsable`).
    UnparsableStreak,
    /// The last request failed (backend error, context window exceeded, timeout, bad
    /// request).
    Error,
}

impl Ending {
    /// Every ending, in report order.
    pub const ALL: [Ending; 7] = [
        Ending::Submitted,
        Ending::StepCap,
        Ending::StoppedWithoutSubmission,
        Ending::NudgeRuleViolatedTwice,
        Ending::DegenerateLoop,
        Ending::UnparsableStreak,
        Ending::Error,
    ];

    /// The snake_case key.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Submitted => "submitted",
            Self::StepCap => "step_cap",
            Self::StoppedWithoutSubmission => "stopped_without_submission",
            Self::NudgeRuleViolatedTwice => "nudge_rule_violated_twice",
            Self::DegenerateLoop => "degenerate_loop",
            Self::UnparsableStreak => "unparsable_streak",
            Self::Error => "error",
        }
    }

    /// Abnormal termination (the paper's): the last four. Step cap and stopping without a
    /// submit are reported beside it, not inside it.
    pub fn is_abnormal(self) -> bool {
        matches!(
            self,
            Self::NudgeRuleViolatedTwice
                | Self::DegenerateLoop
                | Self::UnparsableStreak
                | Self::Error
        )
    }
}

/// Behaviour flags and counts of one trajectory. Only the model's own completions count
/// (reference-prefix steps are never turns). Definitions: docs/report.md.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Behaviour {
    /// Completion calls (turns), nudged and terminating ones included.
    pub turns: usize,
    /// Turns whose output is an action in the format: no parse error, or one of
    /// [`PARSABLE_FAILURES`].
    pub parsable_turns: usize,
    /// Turns that parsed into an action naming a tool of the request with its required
    /// parameters of the right types (no parse error); a share of all turns, so
    /// `valid_tool_calls ≤ parsable_turns`.
    pub valid_tool_calls: usize,
    /// Accepted turns that edit a file (any write, successful or not, scratch files too).
    pub edits: usize,
    /// Accepted successful edits of a file the trajectory did not create itself.
    pub repo_edits: usize,
    /// At least one such edit (`repo_edits > 0`).
    pub autonomous_edit: bool,
    /// Accepted shell commands that run tests or a reproduction script.
    pub test_runs: usize,
    /// At least one test run.
    pub active_testing: bool,
    /// At least one test run whose observation shows a failure.
    pub failed_test: bool,
    /// A successful autonomous edit, then a failing test run, then another successful
    /// autonomous edit, in that order.
    pub re_edit_after_failed_test: bool,
    /// An accepted submit that the proxy did not produce (not a nudged or terminating turn).
    pub explicit_submission: bool,
    /// An action issued [`LOOP_REPEATS`] times with no successful edit between the first and
    /// the last of them, or a run ended by a loop rule.
    pub repetitive_loop: bool,
    /// At least one accepted action, and none edits (successfully or not) or runs a test.
    pub exploration_only: bool,
    /// Accepted actions before the first accepted edit; `None` without an edit.
    pub steps_before_first_edit: Option<usize>,
    /// `submit_before_edit` nudges fired.
    pub nudges_submit_before_edit: usize,
    /// `repeated_action` nudges fired.
    pub nudges_repeated_action: usize,
    /// The proxy's termination reason, if it ended the trajectory.
    pub termination: Option<String>,
    /// The trajectory's last step returned an error to the client.
    pub error: bool,
    /// How it ended.
    pub ending: Ending,
    /// `ending` is abnormal ([`Ending::is_abnormal`]).
    pub abnormal: bool,
}

/// A turn whose output reached the scaffold as an action.
fn accepted(turn: &Attempt) -> bool {
    turn.parse_error.is_none() && turn.nudge.is_none() && !turn.terminated
}

/// Tells edits of the repository from writes to files the trajectory made (docs/report.md
/// "Autonomous edit"). Files are matched by base name.
#[derive(Default)]
struct Files {
    /// Files the trajectory created.
    created: std::collections::HashSet<String>,
    /// The task statement, and the action and observation of every earlier accepted turn
    /// whose observation reports no error: a file named there exists.
    seen: String,
}

impl Files {
    /// Whether a successful write of `targets` edits a repository file; records the files it
    /// creates.
    fn edits_repository(&mut self, targets: &[WriteTarget]) -> bool {
        let unknown = [WriteTarget {
            path: None,
            kind: WriteKind::InPlace,
        }];
        let targets = if targets.is_empty() {
            &unknown[..]
        } else {
            targets
        };
        let mut repository = false;
        for t in targets {
            let Some(path) = &t.path else {
                repository = true;
                continue;
            };
            let name = base_name(path).to_string();
            if self.created.contains(&name) {
                continue;
            }
            let creates = match t.kind {
                WriteKind::Create => true,
                WriteKind::Overwrite => !mentions(&self.seen, &name),
                WriteKind::InPlace => false,
            };
            if creates {
                self.created.insert(name);
            } else {
                repository = true;
            }
        }
        repository
    }

    fn see(&mut self, text: &str) {
        self.seen.push_str(text);
        self.seen.push('\n');
    }
}

impl Behaviour {
    /// The behaviour of one trajectory (turns in order). `step_limit`: the scaffold's own
    /// step limit (`report --step-limit`), for telling its cap from other stops.
    pub fn of(trajectory: &Trajectory, step_limit: Option<usize>) -> Self {
        let mut b = Behaviour {
            turns: trajectory.attempts.iter().filter(|t| !t.continued).count(),
            termination: trajectory.termination.clone(),
            error: trajectory.error.is_some(),
            ..Behaviour::default()
        };
        let mut files = Files::default();
        files.see(&trajectory.task_text);
        // Re-edit after a failed test: 0 nothing yet, 1 an autonomous edit, 2 then a failed
        // test, 3 then another autonomous edit.
        let mut re_edit = 0;
        let mut accepted_actions = 0;
        // Parsed turns (issued actions) and whether each was a successful edit.
        let mut issued: Vec<(&Action, bool)> = Vec::new();
        for turn in &trajectory.attempts {
            match turn.parse_error.as_deref() {
                // A record with neither a parse error nor a readable action is neither; a
                // further call of a completion is no turn.
                None if turn.action.is_none() || turn.continued => {}
                None => {
                    b.parsable_turns += 1;
                    b.valid_tool_calls += 1;
                }
                Some(e) if PARSABLE_FAILURES.contains(&e) => b.parsable_turns += 1,
                Some(_) => {}
            }
            match turn.nudge {
                Some(NudgeKind::SubmitBeforeEdit) => b.nudges_submit_before_edit += 1,
                Some(NudgeKind::RepeatedAction) => b.nudges_repeated_action += 1,
                None => {}
            }
            let observation = turn.observation.as_deref();
            let test_run = turn.shell_command.as_deref().is_some_and(is_test_command);
            let test_failed = test_run && observation.is_some_and(shows_test_failure);
            let paths: Vec<Option<String>> =
                turn.edit_targets.iter().map(|t| t.path.clone()).collect();
            let tool = if turn.shell_command.is_some() {
                EditTool::Shell(&paths)
            } else {
                EditTool::Editor
            };
            let successful = accepted(turn)
                && turn.is_edit
                && (observation.is_some_and(|o| !edit_failed(o, tool))
                    || (observation.is_none() && turn.ran_before_submit));
            if let Some(action) = &turn.action {
                if turn.parse_error.is_none() {
                    issued.push((action, successful));
                }
            }
            if !accepted(turn) {
                continue;
            }
            if turn.is_edit {
                b.edits += 1;
                b.steps_before_first_edit.get_or_insert(accepted_actions);
                if successful && files.edits_repository(&turn.edit_targets) {
                    b.repo_edits += 1;
                    re_edit = match re_edit {
                        0 => 1,
                        2 => 3,
                        other => other,
                    };
                }
            }
            if turn.is_submit {
                b.explicit_submission = true;
            }
            if test_run {
                b.test_runs += 1;
                if test_failed {
                    b.failed_test = true;
                    if re_edit == 1 {
                        re_edit = 2;
                    }
                }
            }
            // A command that ran without error shows that the files it names exist.
            if let (Some(action), Some(observation)) = (&turn.action, &turn.observation) {
                if !reports_error(observation) {
                    if let Action::Call { arguments, .. } = action {
                        for value in arguments.values().filter_map(|v| v.as_str()) {
                            files.see(value);
                        }
                    }
                    files.see(observation);
                }
            }
            accepted_actions += 1;
        }
        b.autonomous_edit = b.repo_edits > 0;
        b.active_testing = b.test_runs > 0;
        b.re_edit_after_failed_test = re_edit == 3;
        // A run with no accepted action (every output unparsable, or the backend down) did
        // not explore either.
        b.exploration_only = accepted_actions > 0 && b.edits == 0 && b.test_runs == 0;
        let loop_ended = b
            .termination
            .as_deref()
            .is_some_and(|t| LOOP_TERMINATIONS.contains(&t));
        b.repetitive_loop = loop_ended || repeats_without_edit(&issued);
        let requests = trajectory
            .attempts
            .iter()
            .filter(|t| t.attempt == 0 && !t.continued)
            .count();
        b.ending = match b.termination.as_deref() {
            Some("step_cap") => Ending::StepCap,
            Some("unparsable") => Ending::UnparsableStreak,
            Some(t) if NUDGE_TERMINATIONS.contains(&t) => Ending::NudgeRuleViolatedTwice,
            Some(_) if loop_ended => Ending::DegenerateLoop,
            Some(_) => Ending::Error,
            None if b.error => Ending::Error,
            None if b.explicit_submission => Ending::Submitted,
            None if step_limit.is_some_and(|n| requests >= n) => Ending::StepCap,
            None => Ending::StoppedWithoutSubmission,
        };
        b.abnormal = b.ending.is_abnormal();
        b
    }
}

/// Whether some action occurs [`LOOP_REPEATS`] times with no successful edit strictly between
/// its first and its last occurrence. `issued`: the parsed actions in order (accepted, nudged
/// and terminating), each with whether it was a successful edit.
fn repeats_without_edit(issued: &[(&Action, bool)]) -> bool {
    (0..issued.len()).any(|first| {
        let mut count = 1;
        for (action, successful_edit) in &issued[first + 1..] {
            if same_action(action, issued[first].0) {
                count += 1;
                if count >= LOOP_REPEATS {
                    return true;
                }
            }
            if *successful_edit {
                return false;
            }
        }
        false
    })
}

/// What a rate is a fraction of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// All turns (completion calls).
    Turns,
    /// Trajectories.
    Trajectories,
}

impl Unit {
    /// The snake_case name (`turns`, `trajectories`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Turns => "turns",
            Self::Trajectories => "trajectories",
        }
    }
}

/// One aggregated behaviour: `count` out of `total` (`unit`s), of which `unknown` could not
/// be told (patch rates where the results do not say).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rate {
    /// Stable snake_case key (CSV/JSON column).
    pub key: &'static str,
    /// Human-readable name (Markdown, plots).
    pub title: &'static str,
    /// What `total` counts.
    pub unit: Unit,
    /// Units with the property.
    pub count: usize,
    /// All units: the denominator.
    pub total: usize,
    /// Units whose property the inputs do not give (patch rates only); the rate is then
    /// `None`.
    pub unknown: usize,
}

impl Rate {
    /// `count / total` in `[0, 1]`; `None` when `total` is 0 or any case is unknown (a rate
    /// over only the known cases would move its denominator silently).
    pub fn value(&self) -> Option<f64> {
        (self.total > 0 && self.unknown == 0).then(|| self.count as f64 / self.total as f64)
    }
}

/// Behaviour counts summed over trajectories (one label, or one side of a pair). Each field
/// without its own comment counts the trajectories whose [`Behaviour`] flag of the same name
/// is set; `turns`, `parsable_turns` and `valid_tool_calls` are sums of turn counts.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Aggregate {
    pub trajectories: usize,
    pub turns: usize,
    pub parsable_turns: usize,
    pub valid_tool_calls: usize,
    pub autonomous_edit: usize,
    pub active_testing: usize,
    pub failed_test: usize,
    pub re_edit_after_failed_test: usize,
    pub explicit_submission: usize,
    pub repetitive_loop: usize,
    pub exploration_only: usize,
    /// [`Behaviour::steps_before_first_edit`] of each trajectory that edits.
    pub steps_before_first_edit: Vec<usize>,
    pub abnormal_termination: usize,
    /// Trajectories by [`Ending`] (every ending present, zeros included).
    pub endings: BTreeMap<Ending, usize>,
    /// Trajectories where the nudge fired.
    pub nudged_submit_before_edit: usize,
    pub nudged_repeated_action: usize,
    /// Nudges fired in all (equal to the trajectory counts while a nudge fires at most once).
    pub nudges_submit_before_edit: usize,
    pub nudges_repeated_action: usize,
    /// Trajectories with no result row (only when results are given).
    pub no_result: usize,
    pub empty_patch: usize,
    /// Trajectories whose results do not say whether the patch was empty.
    pub empty_patch_unknown: usize,
    pub applicable_patch: usize,
    /// Trajectories whose results do not say whether the patch applied.
    pub applicable_patch_unknown: usize,
    pub resolved: usize,
}

impl Aggregate {
    /// Adds one trajectory. `outcome`: `None` without results; `Some(None)` when results are
    /// given but none matched this trajectory (unresolved; patch unknown).
    pub fn add(&mut self, b: &Behaviour, outcome: Option<Option<&Outcome>>) {
        let n = |flag: bool| usize::from(flag);
        if self.endings.is_empty() {
            self.endings = Ending::ALL.iter().map(|e| (*e, 0)).collect();
        }
        self.trajectories += 1;
        self.turns += b.turns;
        self.parsable_turns += b.parsable_turns;
        self.valid_tool_calls += b.valid_tool_calls;
        self.autonomous_edit += n(b.autonomous_edit);
        self.active_testing += n(b.active_testing);
        self.failed_test += n(b.failed_test);
        self.re_edit_after_failed_test += n(b.re_edit_after_failed_test);
        self.explicit_submission += n(b.explicit_submission);
        self.repetitive_loop += n(b.repetitive_loop);
        self.exploration_only += n(b.exploration_only);
        self.steps_before_first_edit
            .extend(b.steps_before_first_edit);
        self.abnormal_termination += n(b.abnormal);
        *self.endings.entry(b.ending).or_default() += 1;
        self.nudged_submit_before_edit += n(b.nudges_submit_before_edit > 0);
        self.nudged_repeated_action += n(b.nudges_repeated_action > 0);
        self.nudges_submit_before_edit += b.nudges_submit_before_edit;
        self.nudges_repeated_action += b.nudges_repeated_action;
        match outcome {
            None => {}
            Some(None) => {
                self.no_result += 1;
                self.empty_patch_unknown += 1;
                self.applicable_patch_unknown += 1;
            }
            Some(Some(o)) => {
                match o.empty() {
                    Some(empty) => self.empty_patch += n(empty),
                    None => self.empty_patch_unknown += 1,
                }
                match o.applicable() {
                    Some(applicable) => self.applicable_patch += n(applicable),
                    None => self.applicable_patch_unknown += 1,
                }
                self.resolved += n(o.resolved);
            }
        }
    }

    /// Median of [`Aggregate::steps_before_first_edit`] (mean of the middle two for an even
    /// count); `None` when no trajectory edits.
    pub fn median_steps_before_first_edit(&self) -> Option<f64> {
        let mut v: Vec<f64> = self
            .steps_before_first_edit
            .iter()
            .map(|&s| s as f64)
            .collect();
        super::uncertainty::median(&mut v)
    }

    /// Trajectories that ended with `ending`.
    pub fn ending(&self, ending: Ending) -> usize {
        self.endings.get(&ending).copied().unwrap_or(0)
    }

    /// The behaviour rates in report order; the last three (`empty_patch`,
    /// `applicable_patch`, `resolved`) only when `with_results`.
    pub fn rates(&self, with_results: bool) -> Vec<Rate> {
        let t = self.trajectories;
        let traj = |key, title, count| Rate {
            key,
            title,
            unit: Unit::Trajectories,
            count,
            total: t,
            unknown: 0,
        };
        let turns = |key, title, count| Rate {
            key,
            title,
            unit: Unit::Turns,
            count,
            total: self.turns,
            unknown: 0,
        };
        let mut rates = vec![
            turns(
                "parsable_turns",
                "parsable turns (% of turns)",
                self.parsable_turns,
            ),
            turns(
                "valid_tool_calls",
                "valid tool calls (% of turns)",
                self.valid_tool_calls,
            ),
            traj("autonomous_edit", "autonomous edit", self.autonomous_edit),
            traj("active_testing", "active testing", self.active_testing),
            traj("failed_test", "failed test seen", self.failed_test),
            traj(
                "re_edit_after_failed_test",
                "valid re-edit after failed test",
                self.re_edit_after_failed_test,
            ),
            traj(
                "explicit_submission",
                "explicit submission",
                self.explicit_submission,
            ),
            traj(
                "repetitive_loop",
                "repetitive command loop",
                self.repetitive_loop,
            ),
            traj(
                "abnormal_termination",
                "abnormal termination",
                self.abnormal_termination,
            ),
            traj(
                "step_cap",
                "ended at a step cap (not abnormal)",
                self.ending(Ending::StepCap),
            ),
            traj(
                "stopped_without_submission",
                "stopped without submitting (not abnormal)",
                self.ending(Ending::StoppedWithoutSubmission),
            ),
            traj(
                "exploration_only",
                "stayed in exploration (no edit, no test)",
                self.exploration_only,
            ),
            traj(
                "nudge_submit_before_edit",
                "nudge: submit before edit",
                self.nudged_submit_before_edit,
            ),
            traj(
                "nudge_repeated_action",
                "nudge: repeated action",
                self.nudged_repeated_action,
            ),
        ];
        if with_results {
            rates.push(Rate {
                unknown: self.empty_patch_unknown,
                ..traj("empty_patch", "empty patch", self.empty_patch)
            });
            rates.push(Rate {
                unknown: self.applicable_patch_unknown,
                ..traj(
                    "applicable_patch",
                    "applicable patch",
                    self.applicable_patch,
                )
            });
            rates.push(traj("resolved", "resolved", self.resolved));
        }
        rates
    }
}
