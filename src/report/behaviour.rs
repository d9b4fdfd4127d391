//! The behaviour breakdown of one trajectory (ASAP §metrics, "behaviour metrics") and its
//! aggregation per label. Every definition is in `docs/report.md`; the text rules for test
//! commands and failed tests are in [`super::testcmd`] and [`super::failure`].

use std::collections::BTreeMap;

use serde::Serialize;

use super::failure::shows_test_failure;
use super::results::Outcome;
use super::testcmd::is_test_command;
use super::{Trajectory, Turn};
use crate::session::NudgeKind;

/// Parse failure classes that still mean "the model wrote an action in the format": the tag
/// and structure were right, only the tool name or a parameter was wrong.
pub const PARSABLE_FAILURES: [&str; 3] = ["unknown_tool", "missing_parameter", "invalid_parameter"];

/// Termination reasons that count as a repetitive command loop (with the `repeated_action`
/// nudge).
pub const LOOP_TERMINATIONS: [&str; 3] =
    ["repeated_action_again", "same_action_thrice", "alternation"];

/// Behaviour flags and counts of one trajectory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Behaviour {
    /// Completion calls (turns), nudged ones included.
    pub turns: usize,
    /// Turns whose output is an action in the format: no parse error, or one of
    /// [`PARSABLE_FAILURES`].
    pub parsable_turns: usize,
    /// Turns that parsed into an action (no parse error).
    pub valid_tool_calls: usize,
    /// Accepted turns (parsed, not nudged, not the terminating turn) that edit a file.
    pub edits: usize,
    /// At least one accepted edit.
    pub autonomous_edit: bool,
    /// Accepted shell commands that run tests ([`is_test_command`]).
    pub test_runs: usize,
    /// At least one test run.
    pub active_testing: bool,
    /// At least one test run whose observation shows a failure ([`shows_test_failure`]).
    pub failed_test: bool,
    /// An accepted edit after a failed test run.
    pub re_edit_after_failed_test: bool,
    /// An accepted submit that the proxy did not produce (not a nudged or terminating turn).
    pub explicit_submission: bool,
    /// The `repeated_action` nudge fired, or the proxy ended the trajectory for a loop
    /// ([`LOOP_TERMINATIONS`]).
    pub repetitive_loop: bool,
    /// `submit_before_edit` nudges fired.
    pub nudges_submit_before_edit: usize,
    /// `repeated_action` nudges fired.
    pub nudges_repeated_action: usize,
    /// The proxy's termination reason, if it ended the trajectory.
    pub termination: Option<String>,
    /// The trajectory's last step returned an error to the client.
    pub error: bool,
    /// Ended with no explicit submission, no termination and no error (the scaffold stopped).
    pub no_submission: bool,
    /// Why it ended abnormally: the termination reason, else `error`, else `no_submission`;
    /// `None` for a trajectory that ended with an explicit submission.
    pub abnormal: Option<String>,
}

/// A turn whose output reached the scaffold as an action.
fn accepted(turn: &Turn) -> bool {
    turn.parse_error.is_none() && turn.nudge.is_none() && !turn.terminated
}

impl Behaviour {
    /// The behaviour of one trajectory (turns in order).
    pub fn of(trajectory: &Trajectory) -> Self {
        let mut b = Behaviour {
            turns: trajectory.turns.len(),
            termination: trajectory.termination.clone(),
            error: trajectory.error.is_some(),
            ..Behaviour::default()
        };
        for turn in &trajectory.turns {
            match turn.parse_error.as_deref() {
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
            if !accepted(turn) {
                continue;
            }
            if turn.is_edit {
                b.edits += 1;
                if b.failed_test {
                    b.re_edit_after_failed_test = true;
                }
            }
            if turn.is_submit {
                b.explicit_submission = true;
            }
            if turn.shell_command.as_deref().is_some_and(is_test_command) {
                b.test_runs += 1;
                if turn.observation.as_deref().is_some_and(shows_test_failure) {
                    b.failed_test = true;
                }
            }
        }
        b.autonomous_edit = b.edits > 0;
        b.active_testing = b.test_runs > 0;
        b.repetitive_loop = b.nudges_repeated_action > 0
            || b.termination
                .as_deref()
                .is_some_and(|t| LOOP_TERMINATIONS.contains(&t));
        b.no_submission = !b.explicit_submission && b.termination.is_none() && !b.error;
        b.abnormal = match (&b.termination, b.error, b.no_submission) {
            (Some(reason), _, _) => Some(reason.clone()),
            (None, true, _) => Some("error".into()),
            (None, false, true) => Some("no_submission".into()),
            (None, false, false) => None,
        };
        b
    }
}

/// What a rate is a fraction of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// All turns.
    Turns,
    /// Parsable turns.
    ParsableTurns,
    /// Trajectories.
    Trajectories,
}

impl Unit {
    /// The snake_case name (`turns`, `parsable_turns`, `trajectories`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Turns => "turns",
            Self::ParsableTurns => "parsable_turns",
            Self::Trajectories => "trajectories",
        }
    }
}

/// One aggregated behaviour: `count` out of `total` (`unit`s).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rate {
    /// Stable snake_case key (CSV/JSON column).
    pub key: &'static str,
    /// Human-readable name (Markdown, plots).
    pub title: &'static str,
    pub unit: Unit,
    pub count: usize,
    pub total: usize,
}

impl Rate {
    /// `count / total` in `[0, 1]`; `None` when `total` is 0.
    pub fn value(&self) -> Option<f64> {
        (self.total > 0).then(|| self.count as f64 / self.total as f64)
    }
}

/// Behaviour counts summed over trajectories (one label, or one side of a pair). Each field
/// without its own comment counts the trajectories whose [`Behaviour`] flag of the same name
/// is set; `turns`, `parsable_turns` and `valid_tool_calls` are sums of turn counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
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
    pub abnormal_termination: usize,
    /// Trajectories where the nudge fired.
    pub nudged_submit_before_edit: usize,
    pub nudged_repeated_action: usize,
    /// Nudges fired in all (equal to the trajectory counts while a nudge fires at most once).
    pub nudges_submit_before_edit: usize,
    pub nudges_repeated_action: usize,
    /// Abnormal endings by reason ([`Behaviour::abnormal`]).
    pub abnormal_by_reason: BTreeMap<String, usize>,
    /// Trajectories with no result row (only when results are given).
    pub no_result: usize,
    pub empty_patch: usize,
    pub applicable_patch: usize,
    pub resolved: usize,
}

impl Aggregate {
    /// Adds one trajectory. `outcome`: `None` without results; `Some(None)` when results are
    /// given but none matched this trajectory (it counts as unresolved, without a patch).
    pub fn add(&mut self, b: &Behaviour, outcome: Option<Option<&Outcome>>) {
        let n = |flag: bool| usize::from(flag);
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
        self.abnormal_termination += n(b.abnormal.is_some());
        self.nudged_submit_before_edit += n(b.nudges_submit_before_edit > 0);
        self.nudged_repeated_action += n(b.nudges_repeated_action > 0);
        self.nudges_submit_before_edit += b.nudges_submit_before_edit;
        self.nudges_repeated_action += b.nudges_repeated_action;
        if let Some(reason) = &b.abnormal {
            *self.abnormal_by_reason.entry(reason.clone()).or_default() += 1;
        }
        match outcome {
            None => {}
            Some(None) => self.no_result += 1,
            Some(Some(o)) => {
                self.empty_patch += n(o.empty_patch);
                self.applicable_patch += n(o.applicable());
                self.resolved += n(o.resolved);
            }
        }
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
        };
        let mut rates = vec![
            Rate {
                key: "parsable_turns",
                title: "parsable turns (% of turns)",
                unit: Unit::Turns,
                count: self.parsable_turns,
                total: self.turns,
            },
            Rate {
                key: "valid_tool_calls",
                title: "valid tool calls (% of parsable turns)",
                unit: Unit::ParsableTurns,
                count: self.valid_tool_calls,
                total: self.parsable_turns,
            },
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
            rates.push(traj("empty_patch", "empty patch", self.empty_patch));
            rates.push(traj(
                "applicable_patch",
                "applicable patch",
                self.applicable_patch,
            ));
            rates.push(traj("resolved", "resolved", self.resolved));
        }
        rates
    }
}
