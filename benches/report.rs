//! What `report` costs on a sweep the size of the paper's (issue 21): 9 checkpoints × 500
//! SWE-bench tasks × 8 runs = 36,000 trajectories of 12 turns each (shell commands, edits,
//! test runs, a submission), with results for every run.
//!
//! Groups:
//! - `build`: `Report::build_with` (behaviours, Pass@k for k = 1…8, Intersection@8, the network
//!   audit, every metric's bootstrap interval and every consecutive change's paired interval
//!   and p-value, rank agreement);
//! - `outputs`: the JSON document, then the HTML page rendered from it (`report --html`).
//!
//! Reading the 36,000 trace files is not included (it is the trace reader's cost, measured
//! with the trace benchmarks of the pipeline). `cargo bench --bench report`; not run by
//! `cargo test`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{Map, Value};

use asap_proxy::profile::Action;
use asap_proxy::report::results::Entry;
use asap_proxy::report::summary::Options;
use asap_proxy::report::{Attempt, Outcome, Report, Results, Trajectory};

const LABELS: usize = 9;
const TASKS: usize = 500;
const RUNS: usize = 8;

fn call(tag: &str, key: &str, value: &str) -> Action {
    Action::Call {
        tag: tag.into(),
        arguments: Map::from_iter([(key.to_string(), Value::String(value.into()))]).into(),
    }
}

fn shell(command: &str, observation: &str) -> Attempt {
    Attempt {
        action: Some(call("bash", "command", command)),
        shell_command: Some(command.into()),
        observation: Some(observation.into()),
        ..Attempt::default()
    }
}

fn edit() -> Attempt {
    Attempt {
        action: Some(call("str_replace_editor", "command", "str_replace")),
        is_edit: true,
        observation: Some("The file /testbed/src/a.py has been edited.".into()),
        ..Attempt::default()
    }
}

/// One run: explore, reproduce, edit, test (failing on odd seeds), re-edit, test, submit.
fn attempts(seed: usize) -> Vec<Attempt> {
    let test = if seed % 2 == 1 {
        "FAILED tests/test_a.py::test_x - AssertionError\n1 failed, 3 passed"
    } else {
        "4 passed in 0.12s"
    };
    let mut turns = vec![
        shell("ls /testbed", "setup.py src tests"),
        shell("grep -rn 'def total' src/", "src/a.py:12:def total(self):"),
        shell("cat src/a.py", "class A:\n    def total(self): ..."),
        shell(
            "python reproduce.py",
            "Traceback (most recent call last):\nValueError",
        ),
        edit(),
        shell("python -m pytest tests/test_a.py", test),
        edit(),
        shell("python -m pytest tests/", "4 passed"),
        shell("git diff", "diff --git a/src/a.py b/src/a.py"),
    ];
    if seed % 7 == 0 {
        turns.push(shell("pip install pytest", "Requirement already satisfied"));
    }
    turns.push(Attempt {
        action: Some(Action::Submit { message: None }),
        is_submit: true,
        ..Attempt::default()
    });
    turns
        .into_iter()
        .enumerate()
        .map(|(step, t)| Attempt { step, ..t })
        .collect()
}

/// The sweep: labels `stage-1` … `stage-9`, tasks `owner__repo-<i>`, and which runs resolve
/// (more with each stage).
fn sweep() -> (Vec<Trajectory>, Results) {
    let mut trajectories = Vec::with_capacity(LABELS * TASKS * RUNS);
    let mut entries = Vec::new();
    for l in 0..LABELS {
        let label = format!("stage-{}", l + 1);
        for t in 0..TASKS {
            let task = format!("owner__repo-{t}");
            for r in 0..RUNS {
                let seed = l * 7919 + t * 104_729 + r * 31;
                trajectories.push(Trajectory {
                    session: format!("{label}-{t}-{r}"),
                    label: label.clone(),
                    instance_id: task.clone(),
                    run: Some(r),
                    profile: "swe-agent".into(),
                    format: "markdown_xml".into(),
                    task_text: "Fix total() in src/a.py".into(),
                    attempts: attempts(seed),
                    ..Trajectory::default()
                });
                entries.push(Entry {
                    label: Some(label.clone()),
                    instance_id: task.clone(),
                    run: Some(r),
                    outcome: Outcome {
                        resolved: seed % 100 < 10 + 3 * l,
                        ..Outcome::default()
                    },
                });
            }
        }
    }
    (trajectories, Results::from_entries(entries))
}

fn bench(c: &mut Criterion) {
    let (trajectories, results) = sweep();
    let options = Options::default();
    let mut group = c.benchmark_group("report");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(60));
    group.bench_function("build", |b| {
        b.iter(|| Report::build_with(&trajectories, Some(&results), &options))
    });
    let report = Report::build_with(&trajectories, Some(&results), &options);
    group.bench_function("outputs", |b| {
        b.iter(|| {
            let json = asap_proxy::report::output::to_json(&report);
            asap_proxy::report::html::render(&json, asap_proxy::report::html::DEFAULT_VIEWER_URL)
                .unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
