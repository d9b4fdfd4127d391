//! Hand-built inputs of `report`: turns (`report::Attempt`), trajectories, result rows, and
//! rendering a report, shared by `behaviours`, `report` and `denominators`.

use std::path::Path;

use serde_json::{json, Map, Value};

use asap_proxy::profile::Action;
use asap_proxy::report::results::{self, Entry, Parsed};
use asap_proxy::report::{output, Attempt, Outcome, Report, ReportFormat, Results, Trajectory};
use asap_proxy::session::NudgeKind;

/// A tool call `<tag>` with string arguments.
pub fn call(tag: &str, arguments: &[(&str, &str)]) -> Action {
    Action::Call {
        tag: tag.into(),
        arguments: std::sync::Arc::new(
            arguments
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect::<Map<String, Value>>(),
        ),
    }
}

/// The model's `<submit/>`, its flags set by hand (the last action: no observation).
pub fn submit() -> Attempt {
    Attempt {
        action: Some(Action::Submit { message: None }),
        is_submit: true,
        ..Attempt::default()
    }
}

/// A completion that did not parse, with its failure class.
pub fn unparsed(class: &str) -> Attempt {
    Attempt {
        parse_error: Some(class.into()),
        ..Attempt::default()
    }
}

/// The proxy rejected this output with a nudge (the scaffold never saw it).
pub fn nudged(mut turn: Attempt, kind: NudgeKind) -> Attempt {
    turn.nudge = Some(kind);
    turn.observation = None;
    turn
}

/// The proxy ended the run on this output (replaced it by its termination).
pub fn terminated(mut turn: Attempt) -> Attempt {
    turn.terminated = true;
    turn.observation = None;
    turn
}

/// Numbers steps and attempts as the proxy would: the output after a nudge is the next
/// attempt of the same request; every other output opens a new request.
pub fn numbered(turns: Vec<Attempt>) -> Vec<Attempt> {
    let mut out: Vec<Attempt> = Vec::new();
    let mut step = 0;
    for t in turns {
        let (step_now, attempt) = match out.last() {
            Some(prev) if prev.nudge.is_some() => (prev.step, prev.attempt + 1),
            Some(_) => {
                step += 1;
                (step, 0)
            }
            None => (0, 0),
        };
        out.push(Attempt {
            step: step_now,
            attempt,
            ..t
        });
    }
    out
}

/// Numbers every turn as a step of its own (attempt 0), nudged or not.
pub fn one_step_each(turns: Vec<Attempt>) -> Vec<Attempt> {
    turns
        .into_iter()
        .enumerate()
        .map(|(step, t)| Attempt { step, ..t })
        .collect()
}

/// A SWE-agent (`markdown_xml`) trajectory `session` of `label` on `task`, with no run index
/// and start time 0, its attempts as given.
pub fn trajectory(session: &str, label: &str, task: &str, attempts: Vec<Attempt>) -> Trajectory {
    Trajectory {
        session: session.into(),
        label: label.into(),
        instance_id: task.into(),
        profile: "swe-agent".into(),
        format: "markdown_xml".into(),
        attempts,
        ..Trajectory::default()
    }
}

/// A result row: `label`'s run `run` of task `id`, resolved or not.
pub fn entry(label: Option<&str>, id: &str, run: Option<usize>, resolved: bool) -> Entry {
    Entry {
        label: label.map(String::from),
        instance_id: id.into(),
        run,
        outcome: Outcome {
            resolved,
            ..Outcome::default()
        },
    }
}

/// The SWE-bench harness report `harness` (JSON text) as results of run 0, unlabelled.
pub fn harness_results(harness: &str, name: &str) -> Results {
    let Parsed::Report(outcomes) = results::parse(harness, Path::new(name)).unwrap() else {
        panic!("not a harness report")
    };
    Results::from_entries(outcomes.into_iter().map(|(id, outcome)| Entry {
        label: None,
        instance_id: id,
        run: Some(0),
        outcome,
    }))
}

/// `report` written in `format`.
pub fn render(report: &Report, format: ReportFormat) -> String {
    let mut out = Vec::new();
    output::write(report, format, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}
