//! `asap-proxy report` on crafted trajectories: Pass@k and Intersection@n by hand, each
//! behaviour definition with a positive and a negative case, results files, run numbering,
//! the paired comparison, the three output formats, the SVG plots and the HTML page.

use std::path::Path;

use serde_json::json;

use crate::util::cli::run;
use crate::util::proxy::{serve, serve_with};
use crate::util::turns::{
    call, entry, harness_results, nudged, one_step_each, render, submit, terminated, trajectory,
    unparsed,
};
use crate::util::write_file;
use asap_proxy::report::behaviour::Ending;
use asap_proxy::report::results::{self, Parsed, Spec};
use asap_proxy::report::ReportFormat;
use asap_proxy::report::{
    compare, intersection, mean_pass_at_k, number_runs, pass_at_k, plots, Attempt, Behaviour,
    Report, Results, TaskCount, Trajectory,
};
use asap_proxy::session::NudgeKind;

// ---------------------------------------------------------------------------------------------
// Builders

fn shell(command: &str, observation: &str) -> Attempt {
    Attempt {
        action: Some(call("bash", &[("command", command)])),
        shell_command: Some(command.into()),
        observation: Some(observation.into()),
        ..Attempt::default()
    }
}

fn edit() -> Attempt {
    Attempt {
        action: Some(call("str_replace_editor", &[("command", "str_replace")])),
        is_edit: true,
        observation: Some("The file has been edited.".into()),
        ..Attempt::default()
    }
}

/// A trajectory of `label` on `task`, one step per turn; the session id names all four
/// arguments. Spelt `markdown-xml`, as the committed report snapshots were written.
fn traj(
    label: &str,
    task: &str,
    run: Option<usize>,
    start_ms: u64,
    turns: Vec<Attempt>,
) -> Trajectory {
    let session = format!(
        "{label}-{task}-{}-{start_ms}",
        run.map_or("x".to_string(), |r| r.to_string())
    );
    Trajectory {
        run,
        start_ms,
        format: "markdown-xml".into(),
        ..trajectory(&session, label, task, one_step_each(turns))
    }
}

fn one(turns: Vec<Attempt>) -> Trajectory {
    traj("m", "t", None, 0, turns)
}

fn behaviour(turns: Vec<Attempt>) -> Behaviour {
    Behaviour::of(&one(turns), None)
}

// ---------------------------------------------------------------------------------------------
// Pass@k and Intersection@n

#[test]
fn pass_at_k_by_hand() {
    assert!((pass_at_k(8, 3, 1).unwrap() - 0.375).abs() < 1e-12);
    assert!((pass_at_k(8, 3, 3).unwrap() - (1.0 - 10.0 / 56.0)).abs() < 1e-12);
    assert_eq!(pass_at_k(8, 3, 9), None);
    assert_eq!(pass_at_k(8, 0, 8), Some(0.0));
    assert_eq!(pass_at_k(8, 1, 8), Some(1.0));
    // Large n stays finite and exact enough: C(200,100) overflows f64 factorial forms.
    let p = pass_at_k(200, 1, 100).unwrap();
    assert!((p - 0.5).abs() < 1e-12, "{p}");
}

#[test]
fn pass_at_k_is_averaged_over_tasks_and_omitted_for_k_above_n() {
    let tasks = [
        TaskCount {
            instance_id: "a".into(),
            n: 8,
            c: 3,
        },
        TaskCount {
            instance_id: "b".into(),
            n: 8,
            c: 0,
        },
    ];
    assert!((mean_pass_at_k(&tasks, 1).unwrap() - 0.375 / 2.0).abs() < 1e-12);
    assert_eq!(mean_pass_at_k(&tasks, 9), None);

    // Through the report: task a has 8 runs (3 resolved), task b 8 runs (none).
    let mut trajs = Vec::new();
    let mut entries = Vec::new();
    for run in 0..8 {
        trajs.push(traj("m", "a", Some(run), 0, vec![submit()]));
        trajs.push(traj("m", "b", Some(run), 0, vec![submit()]));
        entries.push(entry(None, "a", Some(run), run < 3));
        entries.push(entry(None, "b", Some(run), false));
    }
    let results = Results::from_entries(entries);
    let report = Report::build(&trajs, Some(&results), &[3, 1, 8, 9, 0, 1]);
    assert_eq!(report.ks, vec![1, 3, 8, 9]);
    let m = report.label("m").unwrap();
    assert_eq!((m.tasks, m.runs, m.min_runs, m.max_runs), (2, 16, 8, 8));
    assert!((m.pass_at_k[&1] - 0.1875).abs() < 1e-12);
    assert!((m.pass_at_k[&3] - (1.0 - 10.0 / 56.0) / 2.0).abs() < 1e-12);
    assert!((m.pass_at_k[&8] - 0.5).abs() < 1e-12);
    assert!(!m.pass_at_k.contains_key(&9), "k > n is not reported");

    // A label whose fewest runs per task is 2 reports only k ≤ 2.
    let short = vec![
        traj("s", "a", None, 1, vec![]),
        traj("s", "a", None, 2, vec![]),
        traj("s", "b", None, 1, vec![]),
        traj("s", "b", None, 2, vec![]),
        traj("s", "b", None, 3, vec![]),
    ];
    let report = Report::build(&short, Some(&Results::default()), &[1, 2, 3]);
    let s = report.label("s").unwrap();
    assert_eq!(s.pass_at_k.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(s.behaviour.no_result, 5);
}

#[test]
fn intersection_on_a_crafted_set() {
    let counts = |v: &[(usize, usize)]| -> Vec<TaskCount> {
        v.iter()
            .enumerate()
            .map(|(i, &(n, c))| TaskCount {
                instance_id: format!("t{i}"),
                n,
                c,
            })
            .collect()
    };
    let i = intersection(&counts(&[(3, 3), (3, 2), (3, 3), (3, 0)]));
    assert_eq!((i.solved, i.tasks), (2, 4));
    assert!((i.fraction - 0.5).abs() < 1e-12);
    assert_eq!(intersection(&[]).solved, 0);

    // Through the report, with a harness-style "any run" entry and per-run rows.
    let trajs: Vec<Trajectory> = ["x", "y", "z"]
        .iter()
        .flat_map(|t| (0..3).map(move |r| traj("m", t, Some(r), 0, vec![])))
        .collect();
    let results = Results::from_entries(vec![
        entry(None, "x", None, true),
        entry(Some("m"), "y", None, true),
        entry(Some("m"), "y", Some(1), false),
        entry(None, "z", Some(0), true),
    ]);
    let report = Report::build(&trajs, Some(&results), &[1]);
    let i = report.label("m").unwrap().intersection.unwrap();
    assert_eq!(
        (i.solved, i.tasks),
        (1, 3),
        "only x is solved in all 3 runs"
    );
    let m = report.label("m").unwrap();
    assert_eq!(m.behaviour.no_result, 2, "z runs 1 and 2 have no result");
    assert_eq!(m.behaviour.resolved, 3 + 2 + 1);
    // x every run, y two of three, z one of three: stable 1, occasional 2, never 0.
    let s = m.stability.unwrap();
    assert_eq!((s.every, s.some, s.none, s.tasks), (1, 2, 0, 3));
}

#[test]
fn stable_versus_occasional_by_hand() {
    use asap_proxy::report::{stability, stability_class};
    let t = |id: &str, n, c| TaskCount {
        instance_id: id.into(),
        n,
        c,
    };
    // Eight runs each: a solved in all eight, b in three, c and d in none.
    let tasks = [t("a", 8, 8), t("b", 8, 3), t("c", 8, 0), t("d", 8, 0)];
    let s = stability(&tasks);
    assert_eq!((s.every, s.some, s.none, s.tasks), (1, 1, 2, 4));
    assert_eq!(
        tasks.iter().map(stability_class).collect::<Vec<_>>(),
        ["every", "some", "none", "none"]
    );
    // "Pass@8 yet zero in all eight": Pass@8 counts every + some (2 of 4), Intersection@8 every.
    assert!((mean_pass_at_k(&tasks, 8).unwrap() - 0.5).abs() < 1e-12);
    assert_eq!(intersection(&tasks).solved, s.every);
}

#[test]
fn without_results_there_is_no_pass_at_k() {
    let report = Report::build(&[one(vec![submit()])], None, &[1]);
    let m = report.label("m").unwrap();
    assert!(!report.has_results);
    assert!(m.pass_at_k.is_empty());
    assert!(m.intersection.is_none());
    assert_eq!(m.behaviour.rates(false).len(), 14);
    assert_eq!(m.behaviour.no_result, 0);
}

// ---------------------------------------------------------------------------------------------
// Behaviours: one positive and one negative trajectory per definition

#[test]
fn parsable_turns_and_valid_tool_calls() {
    let b = behaviour(vec![
        shell("ls", "a"),
        unparsed("unknown_tool"),
        unparsed("missing_parameter"),
        unparsed("invalid_parameter"),
        unparsed("no_action"),
        unparsed("unclosed_tag"),
    ]);
    assert_eq!((b.turns, b.parsable_turns, b.valid_tool_calls), (6, 4, 1));
    let b = behaviour(vec![unparsed("no_action")]);
    assert_eq!((b.turns, b.parsable_turns, b.valid_tool_calls), (1, 0, 0));
}

#[test]
fn autonomous_edit() {
    assert!(behaviour(vec![shell("ls", ""), edit()]).autonomous_edit);
    // An edit rejected by a nudge, or replaced by the termination, does not count.
    let b = behaviour(vec![
        nudged(edit(), NudgeKind::RepeatedAction),
        terminated(edit()),
        shell("ls", ""),
    ]);
    assert!(!b.autonomous_edit);
    assert_eq!(b.edits, 0);
}

#[test]
fn active_testing() {
    assert!(
        behaviour(vec![shell(
            "cd /testbed && python -m pytest tests/",
            "1 passed"
        )])
        .active_testing
    );
    let b = behaviour(vec![
        shell("cat tests/test_x.py", "def test(): ..."),
        shell("grep -rn test src", ""),
        shell("ls tests", ""),
        nudged(shell("pytest", ""), NudgeKind::RepeatedAction),
    ]);
    assert!(!b.active_testing);
    assert_eq!(b.test_runs, 0);
}

#[test]
fn failed_test_and_valid_re_edit() {
    let failing = "===== 1 failed, 2 passed in 0.1s =====";
    let b = behaviour(vec![edit(), shell("pytest -q", failing), edit(), submit()]);
    assert!(b.failed_test && b.re_edit_after_failed_test);

    // The paper's meaning: an edit, then a failing test, then another edit, all successful.
    for turns in [
        // The first fix after a failing reproduction is not a re-edit.
        vec![shell("pytest -q", failing), edit(), submit()],
        vec![edit(), shell("pytest -q", failing), submit()],
        vec![shell("pytest -q", "3 passed in 0.1s"), edit()],
        vec![
            edit(),
            shell("pytest -q", failing),
            nudged(edit(), NudgeKind::RepeatedAction),
            unparsed("no_action"),
        ],
        // Failure text from a command that is not a test run.
        vec![edit(), shell("cat log.txt", failing), edit()],
    ] {
        let b = behaviour(turns);
        assert!(!b.re_edit_after_failed_test, "{b:?}");
    }
    let b = behaviour(vec![shell("pytest", "3 passed"), edit()]);
    assert!(b.active_testing && !b.failed_test);
}

#[test]
fn explicit_submission() {
    let b = behaviour(vec![edit(), submit()]);
    assert!(b.explicit_submission);
    assert!(!b.abnormal);
    for turns in [
        vec![
            nudged(submit(), NudgeKind::SubmitBeforeEdit),
            shell("ls", ""),
        ],
        vec![terminated(submit())],
        vec![edit()],
    ] {
        assert!(!behaviour(turns).explicit_submission);
    }
}

#[test]
fn repetitive_command_loop() {
    // One nudged repeat is a nudge, not a loop.
    let b = behaviour(vec![
        shell("ls", ""),
        nudged(shell("ls", ""), NudgeKind::RepeatedAction),
        edit(),
        submit(),
    ]);
    assert!(!b.repetitive_loop);
    assert_eq!(b.nudges_repeated_action, 1);
    for reason in ["degenerate_loop", "same_action_thrice", "alternation"] {
        let mut t = one(vec![shell("ls", ""), terminated(submit())]);
        t.termination = Some(reason.into());
        assert!(Behaviour::of(&t, None).repetitive_loop, "{reason}");
    }
    for reason in ["step_cap", "repeated_action_again"] {
        let mut t = one(vec![shell("ls", ""), terminated(submit())]);
        t.termination = Some(reason.into());
        assert!(!Behaviour::of(&t, None).repetitive_loop, "{reason}");
    }
    assert!(!behaviour(vec![shell("ls", ""), shell("pwd", "")]).repetitive_loop);
}

#[test]
fn endings_one_per_trajectory() {
    let mut t = one(vec![shell("ls", ""), terminated(submit())]);
    t.termination = Some("step_cap".into());
    let b = Behaviour::of(&t, None);
    assert_eq!(b.ending, Ending::StepCap);
    assert!(
        !b.abnormal,
        "a step cap is reported beside abnormal termination"
    );

    let mut t = one(vec![shell("ls", "")]);
    t.error = Some("backend: connection refused".into());
    assert_eq!(Behaviour::of(&t, None).ending, Ending::Error);
    assert!(Behaviour::of(&t, None).abnormal);

    let b = behaviour(vec![shell("ls", "")]);
    assert_eq!(b.ending, Ending::StoppedWithoutSubmission);
    assert!(!b.abnormal);
    // With the scaffold's step limit given, a run that used it up ended at the step cap.
    let t = one(vec![shell("ls", ""), shell("pwd", "")]);
    assert_eq!(Behaviour::of(&t, Some(2)).ending, Ending::StepCap);
    assert_eq!(
        Behaviour::of(&t, Some(3)).ending,
        Ending::StoppedWithoutSubmission
    );

    let b = behaviour(vec![edit(), submit()]);
    assert_eq!(b.ending, Ending::Submitted);
    assert!(!b.abnormal);

    let mut trajs = vec![one(vec![edit(), submit()]), one(vec![shell("ls", "")])];
    trajs[1].session = "other".into();
    let mut t = traj("m", "u", None, 0, vec![terminated(submit())]);
    t.termination = Some("unparsable".into());
    trajs.push(t);
    let mut t = traj("m", "v", None, 0, vec![terminated(submit())]);
    t.termination = Some("repeated_action_again".into());
    trajs.push(t);
    let report = Report::build(&trajs, None, &[1]);
    let agg = &report.label("m").unwrap().behaviour;
    assert_eq!(agg.abnormal_termination, 2);
    assert_eq!(agg.ending(Ending::StoppedWithoutSubmission), 1);
    assert_eq!(agg.ending(Ending::UnparsableStreak), 1);
    assert_eq!(agg.ending(Ending::NudgeRuleViolatedTwice), 1);
    assert_eq!(agg.ending(Ending::Submitted), 1);
}

#[test]
fn nudges_fired() {
    let b = behaviour(vec![
        nudged(submit(), NudgeKind::SubmitBeforeEdit),
        edit(),
        submit(),
    ]);
    assert_eq!(
        (b.nudges_submit_before_edit, b.nudges_repeated_action),
        (1, 0)
    );
    assert!(b.explicit_submission);
    let b = behaviour(vec![edit(), submit()]);
    assert_eq!(
        (b.nudges_submit_before_edit, b.nudges_repeated_action),
        (0, 0)
    );
}

#[test]
fn patch_outcomes_with_results() {
    let trajs = vec![
        traj("m", "resolved", Some(0), 0, vec![edit(), submit()]),
        traj("m", "empty", Some(0), 0, vec![submit()]),
        traj("m", "error", Some(0), 0, vec![edit(), submit()]),
        traj("m", "unresolved", Some(0), 0, vec![edit(), submit()]),
        traj("m", "missing", Some(0), 0, vec![edit(), submit()]),
    ];
    let text = json!({
        "resolved_ids": ["resolved"],
        "unresolved_ids": ["unresolved"],
        "empty_patch_ids": ["empty"],
        "error_ids": ["error"],
    })
    .to_string();
    let results = harness_results(&text, "r.json");
    let report = Report::build(&trajs, Some(&results), &[1]);
    let agg = &report.label("m").unwrap().behaviour;
    assert_eq!(
        (
            agg.empty_patch,
            agg.applicable_patch,
            agg.resolved,
            agg.no_result
        ),
        (1, 2, 1, 1)
    );
    // The run without a result: its patch is unknown, never assumed.
    assert_eq!(
        (agg.empty_patch_unknown, agg.applicable_patch_unknown),
        (1, 1)
    );
    let rates = agg.rates(true);
    let rate = |key: &str| rates.iter().find(|r| r.key == key).unwrap().clone();
    assert_eq!(rate("applicable_patch").value(), None, "unknown, not 2/5");
    assert_eq!(rate("applicable_patch").unknown, 1);
    assert_eq!(rate("resolved").value(), Some(0.2));
    let row = |id: &str| {
        report
            .trajectories
            .iter()
            .find(|r| r.instance_id == id)
            .unwrap()
            .outcome
    };
    assert_eq!(row("resolved").unwrap().applicable(), Some(true));
    assert_eq!(row("unresolved").unwrap().applicable(), Some(true));
    assert_eq!(row("empty").unwrap().applicable(), Some(false));
    assert_eq!(row("error").unwrap().applicable(), Some(false));
    assert_eq!(row("error").unwrap().empty(), Some(false));
    assert_eq!(row("missing"), None);
}

// ---------------------------------------------------------------------------------------------
// Results files

#[test]
fn results_harness_json_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let report = |resolved: &[&str]| {
        json!({"resolved_ids": resolved, "unresolved_ids": ["t1", "t2"], "schema_version": 2})
            .to_string()
    };
    let labels = vec!["org/base-7b".to_string(), "chat".to_string()];
    // Harness naming `<label>.<run id>.json` with `/` → `__`; `LABEL:RUN=FILE`; file order.
    let named = write_file(dir.path(), "org__base-7b.run_3.json", &report(&["t1"]));
    let explicit = write_file(dir.path(), "x.json", &report(&["t2"]));
    let order0 = write_file(dir.path(), "a.json", &report(&["t1", "t2"]));
    let order1 = write_file(dir.path(), "b.json", &report(&[]));
    let results = results::load(
        &[named, format!("chat:1={explicit}"), order0, order1],
        &labels,
    )
    .unwrap();
    let resolved =
        |label: &str, id: &str, run: usize| results.lookup(label, id, run).map(|o| o.resolved);
    assert_eq!(resolved("org/base-7b", "t1", 3), Some(true));
    assert_eq!(resolved("org/base-7b", "t2", 3), Some(false));
    assert_eq!(resolved("chat", "t2", 1), Some(true));
    assert_eq!(resolved("chat", "t1", 1), Some(false));
    // Unlabelled files in command-line order: runs 0 and 1 of every label.
    assert_eq!(resolved("chat", "t2", 0), Some(true));
    assert_eq!(resolved("org/base-7b", "t1", 0), Some(true));
    assert_eq!(
        resolved("chat", "t1", 1),
        Some(false),
        "label-specific wins"
    );
    assert_eq!(resolved("org/base-7b", "t1", 1), Some(false));
    assert_eq!(resolved("chat", "t1", 2), None);
    assert_eq!(resolved("chat", "t9", 0), None);
}

#[test]
fn results_spec_parsing() {
    let spec = Spec::parse("qwen:7b:2=/r/x.json");
    assert_eq!(
        (spec.label.as_deref(), spec.run, spec.path.to_str()),
        (Some("qwen:7b"), Some(2), Some("/r/x.json"))
    );
    let spec = Spec::parse("qwen:7b=/r/x.json");
    assert_eq!((spec.label.as_deref(), spec.run), (Some("qwen:7b"), None));
    let spec = Spec::parse("/r/x.json");
    assert_eq!((spec.label, spec.run), (None, None));
}

#[test]
fn results_per_instance_report() {
    let text = json!({
        "t1": {"resolved": true, "patch_exists": true, "patch_successfully_applied": true},
        "t2": {"resolved": false, "patch_is_None": true},
        "t3": {"resolved": false, "patch_exists": true, "patch_successfully_applied": false},
    })
    .to_string();
    let Parsed::Report(outcomes) = results::parse(&text, Path::new("report.json")).unwrap() else {
        panic!("not a report")
    };
    let get = |id: &str| outcomes.iter().find(|(i, _)| i == id).unwrap().1;
    assert!(get("t1").resolved && get("t1").applicable() == Some(true));
    assert_eq!(get("t2").empty(), Some(true));
    assert_eq!(get("t3").applicable(), Some(false));
    assert_eq!(get("t3").empty(), Some(false));
    assert!(results::parse("{\"x\": 1}", Path::new("bad.json")).is_err());
}

#[test]
fn results_jsonl_and_csv() {
    let dir = tempfile::tempdir().unwrap();
    let jsonl = write_file(
        dir.path(),
        "r.jsonl",
        "{\"instance_id\": \"t1\", \"run\": 0, \"resolved\": true}\n\
         \n\
         {\"instance_id\": \"t1\", \"run\": \"1\", \"resolved\": false, \"label\": \"a\"}\n\
         {\"instance_id\": \"t2\", \"resolved\": 1, \"empty_patch\": false}\n",
    );
    let csv = write_file(
        dir.path(),
        "r.csv",
        "\u{feff}Label,instance_id,run,resolved,empty_patch\r\n\
         b,t3,0,yes,\r\n\
         \"b\",\"t,4\",2,false,true\r\n\
         ,t5,,0,\n",
    );
    let results = results::load(&[jsonl, format!("b={csv}")], &[]).unwrap();
    let get = |label: &str, id: &str, run: usize| results.lookup(label, id, run);
    assert!(get("a", "t1", 0).unwrap().resolved);
    assert!(!get("a", "t1", 1).unwrap().resolved);
    assert_eq!(get("z", "t1", 1), None);
    assert!(get("any", "t2", 7).unwrap().resolved, "no run: every run");
    assert!(get("b", "t3", 0).unwrap().resolved);
    let t4 = get("b", "t,4", 2).unwrap();
    assert!(!t4.resolved && t4.empty() == Some(true));
    // Columns left out or empty: not said, so unknown.
    assert_eq!(get("b", "t3", 0).unwrap().empty_patch, None);
    assert_eq!(get("b", "t5", 3).unwrap().applicable(), None);
    assert!(!get("b", "t5", 3).unwrap().resolved, "label from `b=`");
    assert_eq!(get("c", "t5", 3), None);

    for bad in [
        "{\"run\": 0, \"resolved\": true}\n",
        "{\"instance_id\": \"t\", \"resolved\": \"maybe\"}\n",
        "instance_id,run\nt1,0\n",
        "instance_id,run,resolved\nt1,-1,true\n",
    ] {
        assert!(results::parse(bad, Path::new("bad")).is_err(), "{bad}");
    }
    let missing = results::load(&["/nonexistent/results.json".into()], &[]);
    assert!(missing.is_err());
}

// ---------------------------------------------------------------------------------------------
// Run numbering

#[test]
fn runs_are_numbered_by_start_time_around_explicit_ones() {
    let trajs = vec![
        traj("m", "t", None, 300, vec![]),
        traj("m", "t", Some(0), 500, vec![]),
        traj("m", "t", None, 100, vec![]),
        traj("m", "t", Some(2), 50, vec![]),
        traj("m", "u", None, 10, vec![]),
        traj("n", "t", None, 10, vec![]),
        // A duplicate explicit index is renumbered like an unnumbered one.
        traj("m", "t", Some(2), 900, vec![]),
    ];
    assert_eq!(number_runs(&trajs), vec![3, 0, 1, 2, 0, 0, 4]);

    // Ties in start time break on the session id.
    let mut a = traj("m", "t", None, 5, vec![]);
    a.session = "b".into();
    let mut b = traj("m", "t", None, 5, vec![]);
    b.session = "a".into();
    assert_eq!(number_runs(&[a, b]), vec![1, 0]);
}

// ---------------------------------------------------------------------------------------------
// Paired comparison

fn pair_fixture() -> (Vec<Trajectory>, Results) {
    let failing = "FAILED tests/test_x.py::test_a";
    let trajs = vec![
        // Task t, run 0: A explores only, B edits, tests, re-edits and submits.
        traj("A", "t", Some(0), 0, vec![shell("ls", ""), shell("ls", "")]),
        traj(
            "B",
            "t",
            Some(0),
            0,
            vec![edit(), shell("pytest", failing), edit(), submit()],
        ),
        // Task t, run 1: both edit and submit; A also tests.
        traj(
            "A",
            "t",
            Some(1),
            0,
            vec![edit(), shell("pytest", "1 passed"), submit()],
        ),
        traj("B", "t", Some(1), 0, vec![edit(), submit()]),
        // Task u, run 0: only A has it.
        traj("A", "u", Some(0), 0, vec![submit()]),
        // Task t, run 2: only B.
        traj("B", "t", Some(2), 0, vec![unparsed("no_action")]),
    ];
    let results = Results::from_entries(vec![
        entry(Some("B"), "t", Some(0), true),
        entry(Some("A"), "t", Some(1), true),
        entry(Some("B"), "t", Some(1), true),
    ]);
    (trajs, results)
}

#[test]
fn pair_aligns_by_task_and_run_and_counts_flips() {
    let (trajs, results) = pair_fixture();
    let report = Report::build(&trajs, Some(&results), &[1]);
    let p = compare(&report, "A", "B").unwrap();
    assert_eq!((p.pairs, p.unmatched_a, p.unmatched_b), (2, 1, 1));
    let row = |key: &str| p.rows.iter().find(|r| r.key == key).unwrap();
    let edit = row("autonomous_edit");
    assert_eq!(
        (edit.a, edit.b, edit.b_higher, edit.a_higher),
        (Some(0.5), Some(1.0), 1, 0)
    );
    assert_eq!(edit.diff, Some(0.5));
    let testing = row("active_testing");
    assert_eq!(
        (testing.a, testing.b, testing.b_higher, testing.a_higher),
        (Some(0.5), Some(0.5), 1, 1)
    );
    let re_edit = row("re_edit_after_failed_test");
    assert_eq!((re_edit.b_higher, re_edit.a_higher), (1, 0));
    let resolved = row("resolved");
    assert_eq!((resolved.a, resolved.b), (Some(0.5), Some(1.0)));
    assert_eq!(p.pass_at_1, Some((0.5, 1.0)));
    assert!(compare(&report, "A", "C").is_err());
}

// ---------------------------------------------------------------------------------------------
// Output formats and plots

fn full_report() -> Report {
    let (trajs, results) = pair_fixture();
    let mut report = Report::build(&trajs, Some(&results), &[1, 2]);
    report.pairs = vec![compare(&report, "A", "B").unwrap()];
    report
}

#[test]
fn markdown_output() {
    insta::assert_snapshot!("report_markdown", render(&full_report(), ReportFormat::Md));
    let (trajs, _) = pair_fixture();
    let plain = Report::build(&trajs, None, &[1]);
    let md = render(&plain, ReportFormat::Md);
    assert!(
        !md.contains("Pass@1") && md.contains("No `--results`"),
        "{md}"
    );
}

#[test]
fn csv_output() {
    let csv = render(&full_report(), ReportFormat::Csv);
    insta::assert_snapshot!("report_csv", csv);
}

#[test]
fn json_output() {
    let text = render(&full_report(), ReportFormat::Json);
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["labels"][0]["pass_at_k"]["1"], json!(0.25));
    assert_eq!(
        value["labels"][1]["behaviour"]["autonomous_edit"]["count"],
        json!(2)
    );
    assert_eq!(value["trajectories"].as_array().unwrap().len(), 6);
    assert_eq!(value["pair"]["pairs"], json!(2));
    insta::assert_yaml_snapshot!("report_json", value);
}

#[test]
fn plots_are_svg_with_the_labels() {
    let dir = tempfile::tempdir().unwrap();
    let written = plots::write(&full_report(), &dir.path().join("plots")).unwrap();
    let names: Vec<_> = written
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_string())
        .collect();
    assert_eq!(names, vec!["pass_at_k.svg", "behaviour.svg"]);
    for path in &written {
        let text = std::fs::read_to_string(path).unwrap();
        let mut reader = quick_xml::Reader::from_str(&text);
        let mut texts = Vec::new();
        let mut root = None;
        loop {
            match reader.read_event().unwrap() {
                quick_xml::events::Event::Start(e) if root.is_none() => {
                    root = Some(String::from_utf8(e.name().as_ref().to_vec()).unwrap());
                }
                quick_xml::events::Event::Text(t) => {
                    texts.push(String::from_utf8(t.to_vec()).unwrap().trim().to_string());
                }
                quick_xml::events::Event::Eof => break,
                _ => {}
            }
        }
        assert_eq!(root.as_deref(), Some("svg"), "{}", path.display());
        assert!(texts.iter().any(|t| t == "A"), "{texts:?}");
        assert!(texts.iter().any(|t| t == "B"), "{texts:?}");
    }
    let behaviour = std::fs::read_to_string(dir.path().join("plots/behaviour.svg")).unwrap();
    assert!(behaviour.contains("autonomous edit"));

    // Without results only the behaviour chart is drawn.
    let (trajs, _) = pair_fixture();
    let written = plots::write(&Report::build(&trajs, None, &[1]), dir.path()).unwrap();
    assert_eq!(written.len(), 1);
}

// ---------------------------------------------------------------------------------------------
// End to end: sessions recorded by the proxy, then the `report` subcommand of the binary

#[tokio::test]
async fn report_subcommand_on_recorded_traces() {
    use crate::util::backend::Scripted;
    use crate::util::{continue_with, request};

    let (_backend, proxy) = serve_with(
        vec![
            // Run 0: test (fails), edit, submit.
            Scripted::text("Test.\n<bash>python -m pytest -q</bash>\n"),
            Scripted::text("Fix.\n<bash>sed -i 's/a/b/' /testbed/inventory.py</bash>\n"),
            Scripted::text("Done.\n<submit/>\n"),
            // Run 1: looks around, then the scaffold stops.
            Scripted::text("Look.\n<bash>ls /testbed</bash>\n"),
        ],
        |a| a.label = Some("ckpt-a".into()),
    )
    .await;
    let run0 = [("x-asap-task", "inventory-1"), ("x-asap-run", "0")];
    let mut body = request("swe-agent-1");
    let resp = proxy.post_with_headers(&body, &run0).await;
    continue_with(&mut body, &resp, "===== 1 failed, 2 passed in 0.03s =====");
    let resp = proxy.post_with_headers(&body, &run0).await;
    continue_with(&mut body, &resp, "");
    proxy.post_with_headers(&body, &run0).await;
    let body = request("swe-agent-1");
    proxy
        .post_with_headers(
            &body,
            &[("x-asap-task", "inventory-1"), ("x-asap-run", "1")],
        )
        .await;

    let dir = tempfile::tempdir().unwrap();
    let results = write_file(
        dir.path(),
        "results.csv",
        "instance_id,run,resolved\ninventory-1,0,true\ninventory-1,1,false\n",
    );
    let plots = dir.path().join("plots");
    let logs = proxy.log_dir.path();
    let out = run(&[
        &"report",
        &logs,
        &"--results",
        &results,
        &"--k",
        &"1,2,3",
        &"--format",
        &"json",
        &"--plots",
        &plots,
    ]);
    let stderr = &out.stderr;
    assert!(out.success(), "{stderr}");
    let report = out.json();
    let label = &report["labels"][0];
    assert_eq!(label["label"], "ckpt-a");
    assert_eq!(
        (label["tasks"].as_u64(), label["runs"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(label["pass_at_k"], json!({"1": 0.5, "2": 1.0}));
    let rate = |key: &str| label["behaviour"][key]["count"].as_u64().unwrap();
    assert_eq!(rate("active_testing"), 1);
    assert_eq!(rate("failed_test"), 1);
    assert_eq!(
        rate("re_edit_after_failed_test"),
        0,
        "no edit before the failed test"
    );
    assert_eq!(rate("explicit_submission"), 1);
    assert_eq!(label["endings"]["stopped_without_submission"], 1);
    assert_eq!(label["endings"]["submitted"], 1);
    assert_eq!(rate("abnormal_termination"), 0);
    assert!(plots.join("pass_at_k.svg").is_file() && plots.join("behaviour.svg").is_file());
    assert!(
        !stderr.contains('\u{1b}'),
        "no progress bar without a terminal: {stderr}"
    );

    // The trace directory after `--results` (which takes several values) is still read as
    // a trace directory, not as a results file.
    let out = run(&[
        &"report",
        &"--format",
        &"json",
        &"--k",
        &"1",
        &"--results",
        &results,
        &logs,
    ]);
    assert!(out.success(), "{}", out.stderr);
    let after = out.json();
    assert_eq!(after["labels"][0]["pass_at_k"], json!({"1": 0.5}));

    // Markdown by default; an unknown --pair label is a usage error.
    let out = run(&[&"report", &logs]);
    assert!(out.success());
    let md = out.stdout;
    assert!(
        md.starts_with("# asap-proxy report") && md.contains("| ckpt-a | 1 | 2 | 2 |"),
        "{md}"
    );
    let out = run(&[&"report", &logs, &"--pair", &"ckpt-a", &"nope"]);
    assert_eq!(out.code, Some(2));
    // So is a label in --order that no trajectory has (a misspelt stage would move silently).
    let out = run(&[&"report", &logs, &"--order", &"ckpt-a,ckpt-z"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains("--order names \"ckpt-z\"") && out.stderr.contains("ckpt-a"),
        "{}",
        out.stderr
    );
}

// ---------------------------------------------------------------------------------------------
// Regressions found by driving the proxy like a scaffold

#[test]
fn results_file_with_a_single_row() {
    let dir = tempfile::tempdir().unwrap();
    // One JSONL row, and the same row pretty-printed: rows, not a per-instance report.
    for (name, text) in [
        (
            "one.jsonl",
            "{\"instance_id\": \"a\", \"run\": 1, \"resolved\": true}\n",
        ),
        (
            "one.json",
            "{\n  \"instance_id\": \"a\",\n  \"run\": 1,\n  \"resolved\": true\n}\n",
        ),
    ] {
        let path = write_file(dir.path(), name, text);
        let parsed = results::parse(text, Path::new(&path)).unwrap();
        assert_eq!(
            parsed,
            Parsed::Rows(vec![entry(None, "a", Some(1), true)]),
            "{name}"
        );
        let results = results::load(&[path], &["L".into()]).unwrap();
        assert!(results.lookup("L", "a", 1).is_some_and(|o| o.resolved));
        assert_eq!(results.lookup("L", "a", 0), None);
    }
    // A per-instance report is still one: its values are objects.
    let text = r#"{"instance_id": {"resolved": true}}"#;
    assert!(matches!(
        results::parse(text, Path::new("r.json")).unwrap(),
        Parsed::Report(_)
    ));
}

/// Posts one request with the task and run headers; the JSON answer.
async fn step(proxy: &str, body: &serde_json::Value, task: &str, run: &str) -> serde_json::Value {
    crate::util::post_with_headers(proxy, body, &[("x-asap-task", task), ("x-asap-run", run)]).await
}

#[tokio::test]
async fn observations_are_read_where_the_scaffold_first_sent_them() {
    use crate::util::backend::Scripted;
    use crate::util::{continue_with, request};
    use asap_proxy::report::load;

    // SWE-agent with `last_n_observations` (here n = 1): older tool results are replaced by
    // "Old environment output: (N lines omitted)" in later requests, so the last request no
    // longer shows that the first test run failed.
    let (_backend, proxy) = serve(vec![
        Scripted::text("Test.\n<bash>python -m pytest -q</bash>\n"),
        Scripted::text("Look.\n<bash>ls /testbed</bash>\n"),
        Scripted::text("Read.\n<bash>cat /testbed/inventory.py</bash>\n"),
        Scripted::text("Fix.\n<bash>sed -i 's/a/b/' /testbed/inventory.py</bash>\n"),
        Scripted::text("Done.\n<submit/>\n"),
    ])
    .await;
    let mut body = request("swe-agent-1");
    let outputs = [
        "===== 1 failed, 2 passed in 0.03s =====",
        "inventory.py\ntests",
        "def total(self): ...",
        "",
    ];
    for output in outputs {
        let resp = step(&proxy.url(), &body, "elided", "0").await;
        continue_with(&mut body, &resp, output);
        let messages = body["messages"].as_array_mut().unwrap();
        let tools: Vec<usize> = (0..messages.len())
            .filter(|&i| messages[i]["role"] == "tool")
            .collect();
        for &i in &tools[..tools.len() - 1] {
            messages[i]["content"] = json!("Old environment output: (1 lines omitted)");
        }
    }
    let resp = step(&proxy.url(), &body, "elided", "0").await;
    assert_eq!(
        resp["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "submit"
    );

    let file = &proxy.trace_files()[0];
    let trajectory = load::trajectory(file).unwrap().unwrap();
    assert_eq!(
        trajectory.attempts[0].observation.as_deref(),
        Some(outputs[0]),
        "the test run's result as first sent"
    );
    let b = Behaviour::of(&trajectory, None);
    assert!(
        b.active_testing && b.failed_test && b.autonomous_edit,
        "{b:?}"
    );
    // The first fix after a failing test is not a re-edit: no edit came before the failure.
    assert!(!b.re_edit_after_failed_test, "{b:?}");
    assert!(b.explicit_submission && !b.abnormal, "{b:?}");
}

#[tokio::test]
async fn mini_completion_command_counts_as_an_explicit_submission() {
    use crate::util::backend::Scripted;
    use crate::util::{continue_with, request};
    use asap_proxy::report::load;

    // mini-swe-agent ends the run when the command is its completion command, whether the
    // model wrote `<submit/>` or the command from the task text as a shell action.
    let (_backend, proxy) = serve(vec![
        Scripted::text("Fix.\n<bash>sed -i 's/--/-/' /repo/textutil/slug.py</bash>\n"),
        Scripted::text("Done.\n<bash>echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT</bash>\n"),
    ])
    .await;
    let mut body = request("mini-swe-agent-1");
    let resp = step(&proxy.url(), &body, "mini", "0").await;
    continue_with(
        &mut body,
        &resp,
        "<returncode>0</returncode>\n<output>\n</output>",
    );
    let resp = step(&proxy.url(), &body, "mini", "0").await;
    // The command alone goes out as the proxy's submit: with the patch after it, which mini
    // submits (it would submit nothing otherwise).
    assert_eq!(
        crate::util::arguments(&resp)["command"],
        crate::util::MINI_SUBMIT_WITH_PATCH
    );

    let file = &proxy.trace_files()[0];
    let trajectory = load::trajectory(file).unwrap().unwrap();
    assert!(trajectory.attempts[1].is_submit);
    let b = Behaviour::of(&trajectory, None);
    assert!(b.autonomous_edit && b.explicit_submission, "{b:?}");
    assert!(!b.abnormal);

    // The model's own submission after the sentinel (mini's prompt: `&& cat patch.txt`) goes
    // out as written.
    let own = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt";
    let (_backend, proxy) = serve(vec![
        Scripted::text("Fix.\n<bash>sed -i 's/--/-/' /repo/textutil/slug.py</bash>\n"),
        Scripted::text(&format!("Done.\n<bash>{own}</bash>\n")),
    ])
    .await;
    let mut body = request("mini-swe-agent-1");
    let resp = step(&proxy.url(), &body, "mini", "0").await;
    continue_with(
        &mut body,
        &resp,
        "<returncode>0</returncode>\n<output>\n</output>",
    );
    let resp = step(&proxy.url(), &body, "mini", "0").await;
    assert_eq!(crate::util::arguments(&resp)["command"], own);
}

#[test]
fn report_warns_about_files_and_lines_it_skips() {
    let dir = tempfile::tempdir().unwrap();
    let session = json!({"v": 1, "type": "session", "session": "0123456789ab", "time_ms": 1,
        "data": {"task": "t", "label": "L", "profile": "swe-agent", "format": "markdown_xml"}});
    write_file(
        dir.path(),
        "0123456789ab.jsonl",
        &format!("{session}\nnot json\n{{\"v\": 1, \"type\": \"st"),
    );
    write_file(dir.path(), "empty.jsonl", "");
    write_file(
        dir.path(),
        "results.jsonl",
        "{\"instance_id\": \"t\", \"resolved\": true}\n",
    );
    let out = run(&[&"report", &dir.path(), &"--format", &"json"]);
    let stderr = &out.stderr;
    assert!(out.success(), "{stderr}");
    let report = out.json();
    assert_eq!(report["labels"][0]["runs"], 1);
    for expected in [
        "0123456789ab.jsonl: invalid lines [2] skipped",
        "0123456789ab.jsonl: torn last line",
        "empty.jsonl: no session record",
        "results.jsonl: no session record",
    ] {
        assert!(stderr.contains(expected), "{expected}: {stderr}");
    }
}

#[cfg(unix)]
#[test]
fn trace_files_are_listed_once_and_link_loops_end() {
    use asap_proxy::trace::read::trace_files;

    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(logs.join("sub")).unwrap();
    write_file(&logs, "a.jsonl", "");
    write_file(&logs.join("sub"), "b.jsonl", "");
    std::os::unix::fs::symlink(&logs, logs.join("sub/loop")).unwrap();
    std::os::unix::fs::symlink(".", logs.join("self")).unwrap();
    // The directory, a file inside it and the directory again: each file once.
    let files = trace_files(&[logs.clone(), logs.join("a.jsonl"), logs.join("sub")]).unwrap();
    let mut names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["a.jsonl", "b.jsonl"], "{files:?}");
}

/// Two sessions that both say `X-ASAP-Run: 0` for one task (a harness reusing its run
/// index): the later one is counted under a free index, and `report` says so on standard
/// error instead of renumbering silently.
#[tokio::test]
async fn report_warns_about_a_run_index_given_twice() {
    use crate::util::backend::Scripted;
    use crate::util::request;

    let (_backend, proxy) = serve_with(
        vec![
            Scripted::text("Look.\n<bash>ls /testbed</bash>\n"),
            Scripted::text("Look.\n<bash>ls -la /testbed</bash>\n"),
        ],
        |a| a.label = Some("ckpt-a".into()),
    )
    .await;
    let run0 = [("x-asap-task", "inventory-1"), ("x-asap-run", "0")];
    let body = request("swe-agent-1");
    proxy.post_with_headers(&body, &run0).await;
    proxy.post_with_headers(&body, &run0).await;
    assert_eq!(proxy.trace_files().len(), 2);
    let out = run(&[&"report", &"--format", &"json", &proxy.log_dir.path()]);
    assert!(out.success());
    let stderr = &out.stderr;
    assert!(
        stderr.contains(
            "says run 0, which an earlier session of that task already has: counted as run 1"
        ),
        "{stderr}"
    );
    let report = out.json();
    assert_eq!(report["labels"][0]["runs"], 2);
}

// ---------------------------------------------------------------------------------------------
// Label order (sweeps)

#[test]
fn labels_are_in_natural_order_unless_an_order_is_given() {
    use asap_proxy::report::summary::{natural_cmp, Options};
    use std::cmp::Ordering::*;
    assert_eq!(natural_cmp("stage2-end", "stage10-mid"), Less);
    assert_eq!(natural_cmp("stage10-mid", "stage3-end"), Greater);
    assert_eq!(natural_cmp("ckpt-900", "ckpt-1000"), Less);
    assert_eq!(natural_cmp("a", "a1"), Less);
    assert_eq!(
        natural_cmp("v01", "v1"),
        Less,
        "equal numbers: the text decides"
    );
    assert_eq!(natural_cmp("B", "a"), Less, "text as text (byte order)");

    let trajs: Vec<Trajectory> = ["stage10-mid", "stage2-end", "stage3-mid"]
        .iter()
        .enumerate()
        .map(|(i, l)| traj(l, "t", Some(0), i as u64, vec![edit()]))
        .collect();
    let names = |r: &Report| r.labels.iter().map(|l| l.label.clone()).collect::<Vec<_>>();
    let rows = |r: &Report| {
        r.trajectories
            .iter()
            .map(|t| t.label.clone())
            .collect::<Vec<_>>()
    };
    let natural = Report::build(&trajs, None, &[1]);
    assert_eq!(names(&natural), ["stage2-end", "stage3-mid", "stage10-mid"]);
    assert_eq!(
        rows(&natural),
        names(&natural),
        "rows follow the labels' order"
    );
    let ordered = Report::build_with(
        &trajs,
        None,
        &Options {
            ks: vec![1],
            order: vec!["stage10-mid".into(), "stage2-end".into()],
            ..Options::default()
        },
    );
    assert_eq!(names(&ordered), ["stage10-mid", "stage2-end", "stage3-mid"]);
    assert_eq!(rows(&ordered), names(&ordered));
    let md = render(&ordered, ReportFormat::Md);
    let at = |l: &str| md.find(&format!("| {l} |")).unwrap();
    assert!(
        at("stage10-mid") < at("stage2-end") && at("stage2-end") < at("stage3-mid"),
        "{md}"
    );
}

#[test]
fn intervals_and_consecutive_changes_by_hand() {
    // A: t resolved in 1 of 2 runs, u in 0 of 1 (Pass@1 0.5 and 0); B: t 2 of 3, u 0 of 3.
    // With two tasks a bootstrap draw is tt, tu, ut or uu, so A's Pass@1 draws are 0.5, 0.25,
    // 0.25, 0 (each draw ≈ ¼ of 2000: both tails hold far more than 50) → interval 0 – 0.5;
    // B's 0 – 2/3. The change: t gains 1/6, u 0; Δ = 1/12, its draws 0 – 1/6. Flipping t's
    // pair gives ±1/12 every time, never smaller than |Δ|: p = 1 (two tasks prove nothing).
    let report = full_report();
    let est = |label: &str, metric: &str| {
        let e = report
            .label(label)
            .unwrap()
            .estimates
            .iter()
            .find(|e| e.metric == metric)
            .unwrap()
            .clone();
        (e.value, e.interval.lo, e.interval.hi)
    };
    let close = |a: (f64, f64, f64), b: (f64, f64, f64)| {
        (a.0 - b.0).abs() < 1e-12 && (a.1 - b.1).abs() < 1e-12 && (a.2 - b.2).abs() < 1e-12
    };
    assert!(
        close(est("A", "pass@1"), (0.25, 0.0, 0.5)),
        "{:?}",
        est("A", "pass@1")
    );
    assert!(close(est("B", "pass@1"), (1.0 / 3.0, 0.0, 2.0 / 3.0)));
    assert!(close(est("B", "intersection"), (0.0, 0.0, 0.0)));
    let change = report
        .changes
        .iter()
        .find(|c| c.metric == "pass@1")
        .unwrap();
    assert_eq!(
        (change.from.as_str(), change.to.as_str(), change.tasks),
        ("A", "B", 2)
    );
    assert!((change.delta - 1.0 / 12.0).abs() < 1e-12);
    assert!(change.interval.lo.abs() < 1e-12 && (change.interval.hi - 1.0 / 6.0).abs() < 1e-12);
    assert!((change.p_value - 1.0).abs() < 1e-12);
    // Only t's values differ between A and B (u is 0 for both): the least p two sign patterns
    // of one task allow is 2/2 = 1.
    assert!((change.smallest_p - 1.0).abs() < 1e-12);
    // Pass@2 exists only for B (A has a task with one run): no change for it.
    assert!(report.changes.iter().all(|c| c.metric != "pass@2"));
}

// ---------------------------------------------------------------------------------------------
// Network audit

#[test]
fn network_audit_by_hand() {
    // django: run 0 fetches the upstream pull request (download, gold-seeking) and resolves,
    // run 1 resolves without the network. astropy: run 0 installs a package and resolves, run 1
    // only reads. A nudged curl was never executed: it does not count.
    let nudged = Attempt {
        nudge: Some(asap_proxy::session::NudgeKind::RepeatedAction),
        ..shell("curl https://example.com", "")
    };
    let trajs = vec![
        traj(
            "m",
            "django__django-1",
            Some(0),
            0,
            vec![
                shell(
                    "curl -sL https://github.com/django/django/pull/1.diff | git apply",
                    "",
                ),
                edit(),
            ],
        ),
        traj(
            "m",
            "django__django-1",
            Some(1),
            1,
            vec![shell("ls", ""), edit()],
        ),
        traj(
            "m",
            "astropy__astropy-2",
            Some(0),
            2,
            vec![shell("pip install pytest", ""), edit()],
        ),
        traj(
            "m",
            "astropy__astropy-2",
            Some(1),
            3,
            vec![nudged, shell("cat setup.py", "")],
        ),
    ];
    let results = Results::from_entries(vec![
        entry(Some("m"), "django__django-1", Some(0), true),
        entry(Some("m"), "django__django-1", Some(1), true),
        entry(Some("m"), "astropy__astropy-2", Some(0), true),
        entry(Some("m"), "astropy__astropy-2", Some(1), false),
    ]);
    let report = Report::build(&trajs, Some(&results), &[1]);
    let n = report.label("m").unwrap().network;
    assert_eq!((n.trajectories, n.flagged, n.gold_seeking), (4, 2, 1));
    // Pass@1 = (2/2 + 1/2) / 2. Without the flagged resolved runs it would lose
    // (1/2 + 1/2) / 2 = 0.5; without the gold-seeking one (1/2 + 0) / 2 = 0.25.
    assert!((report.label("m").unwrap().pass_at_k[&1] - 0.75).abs() < 1e-12);
    assert!((n.pass1_bound.unwrap() - 0.5).abs() < 1e-12);
    assert!((n.pass1_bound_gold.unwrap() - 0.25).abs() < 1e-12);
    let flags: Vec<(&str, usize, Vec<String>, bool)> = report
        .trajectories
        .iter()
        .filter(|t| t.network.any())
        .map(|t| {
            (
                t.instance_id.as_str(),
                t.run,
                t.network.kinds.clone(),
                t.network.gold,
            )
        })
        .collect();
    assert_eq!(
        flags,
        [
            (
                "astropy__astropy-2",
                0,
                vec!["package_install".to_string()],
                false
            ),
            ("django__django-1", 0, vec!["download".to_string()], true),
        ]
    );
    let md = render(&report, ReportFormat::Md);
    assert!(
        md.contains("| m | 4 | 2 (50.00%) | 1 (25.00%) | 50.00 | 25.00 |"),
        "{md}"
    );
}

// ---------------------------------------------------------------------------------------------
// Rank agreement

#[test]
fn rank_agreement_by_hand() {
    // Four tasks, one run each. Under swe: m1 resolves 3, m2 2, m3 1 (ranks 1, 2, 3); under oh:
    // m1 2, m2 3, m3 1 (ranks 2, 1, 3). ρ = 1 − 6·(1 + 1 + 0)/(3·(9 − 1)) = 0.5; pairs
    // (m1, m2) discordant, (m1, m3) and (m2, m3) concordant: τ = (2 − 1)/3.
    let solved = [
        ("m1@swe", 3),
        ("m2@swe", 2),
        ("m3@swe", 1),
        ("m1@oh", 2),
        ("m2@oh", 3),
        ("m3@oh", 1),
    ];
    let mut trajs = Vec::new();
    let mut entries = Vec::new();
    for (label, c) in solved {
        for (i, task) in ["a", "b", "c", "d"].iter().enumerate() {
            trajs.push(traj(label, task, Some(0), i as u64, vec![edit()]));
            entries.push(entry(Some(label), task, Some(0), i < c));
        }
    }
    // A label outside the convention takes no part.
    trajs.push(traj("baseline", "a", Some(0), 9, vec![edit()]));
    let report = Report::build(&trajs, Some(&Results::from_entries(entries)), &[1]);
    assert_eq!(report.rank_agreement.len(), 1);
    let r = &report.rank_agreement[0];
    assert_eq!(r.groups, ("oh".to_string(), "swe".to_string()));
    let ranks: Vec<(&str, f64, f64)> = r
        .models
        .iter()
        .map(|m| (m.model.as_str(), m.a.0, m.b.0))
        .collect();
    assert_eq!(
        ranks,
        [("m1", 2.0, 1.0), ("m2", 1.0, 2.0), ("m3", 3.0, 3.0)]
    );
    assert!((r.spearman.unwrap() - 0.5).abs() < 1e-12);
    assert!((r.kendall.unwrap() - 1.0 / 3.0).abs() < 1e-12);
    let i = r.spearman_interval.unwrap();
    assert!(
        i.lo <= 0.5 && 0.5 <= i.hi && i.lo >= -1.0 && i.hi <= 1.0,
        "{i:?}"
    );
    let md = render(&report, ReportFormat::Md);
    assert!(md.contains("## Rank agreement: oh against swe"), "{md}");
    assert!(md.contains("| m1 | 2 | 50.0 | 1 | 75.0 | -1 |"), "{md}");
    // The CSV carries the same ranks and coefficients.
    let csv = render(&report, ReportFormat::Csv);
    assert!(csv.contains("\ngroup_a,group_b,model,rank_a,pass1_a,rank_b,pass1_b,spearman,"));
    assert!(csv.contains("\noh,swe,m1,2,0.5,1,0.75,0.5,"), "{csv}");
}

// ---------------------------------------------------------------------------------------------
// A reference benchmark beside ASAP

#[test]
fn a_reference_benchmark_stands_beside_pass_at_1() {
    // Three stages of one task set: ASAP's Pass@1 0.25 → 0.5 → 0.75 while the benchmark reads
    // 61.0 → 61.5 → (not given).
    let mut trajs = Vec::new();
    let mut entries = Vec::new();
    for (label, c) in [("stage1", 1), ("stage2", 2), ("stage3", 3)] {
        for (i, task) in ["a", "b", "c", "d"].iter().enumerate() {
            trajs.push(traj(label, task, Some(0), i as u64, vec![edit()]));
            entries.push(entry(Some(label), task, Some(0), i < c));
        }
    }
    let mut report = Report::build(&trajs, Some(&Results::from_entries(entries)), &[1]);
    let unknown = report.with_reference(
        "mmlu.csv",
        &[
            ("stage1".into(), 61.0),
            ("stage2".into(), 61.5),
            ("stage9".into(), 70.0),
        ],
        1,
    );
    assert_eq!(unknown, ["stage9"]);
    let rows = &report.reference.as_ref().unwrap().rows;
    let view: Vec<(&str, Option<f64>, Option<f64>)> = rows
        .iter()
        .map(|r| (r.label.as_str(), r.score, r.score_change))
        .collect();
    assert_eq!(
        view,
        [
            ("stage1", Some(61.0), None),
            ("stage2", Some(61.5), Some(0.5)),
            ("stage3", None, None)
        ]
    );
    let change = rows[1].pass1_change.as_ref().unwrap();
    assert!((change.delta - 0.25).abs() < 1e-12, "{change:?}");
    assert!(rows[0].pass1_change.is_none());
    let md = render(&report, ReportFormat::Md);
    assert!(
        md.contains("| stage2 | 61.5 | +0.5 | 50.0 | +25.0 ("),
        "{md}"
    );

    // Through the CLI, over recorded traces: a header is skipped, a malformed line is exit 2.
    let traces = crate::util::fixture_path("traces/v1");
    let dir = tempfile::tempdir().unwrap();
    let good = write_file(
        dir.path(),
        "good.csv",
        "label,score\n# a comment\nnobody,1.5\n",
    );
    let out = run(&[&"report", &traces, &"--reference", &good]);
    assert!(out.success(), "{}", out.stderr);
    assert!(
        out.stdout.contains("## Against a reference benchmark"),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr.contains("--reference names \"nobody\""),
        "{}",
        out.stderr
    );
    let bad = write_file(dir.path(), "bad.csv", "label,score\nstage1,sixty\n");
    let out = run(&[&"report", &traces, &"--reference", &bad]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("--reference") && out.stderr.contains("line 2"),
        "{}",
        out.stderr
    );
    // A first line with a number is data, never taken for the header: a bad one is an error.
    for (name, text) in [
        ("first.csv", "stage1,40.5x\nstage2,3\n"),
        ("extra.csv", "stage1,40.5,extra\nstage2,3\n"),
        ("twice.csv", "stage1,40.5\nstage1,10\n"),
    ] {
        let file = write_file(dir.path(), name, text);
        let out = run(&[&"report", &traces, &"--reference", &file]);
        assert_eq!(out.code, Some(2), "{name}: {}", out.stderr);
    }
    // A header after a comment (one with a digit in its name), a percent sign, a quoted label.
    let ok = write_file(
        dir.path(),
        "ok.csv",
        "# leaderboard\nlabel,pass@1\n\"nobody\",61.2%\n",
    );
    let out = run(&[&"report", &traces, &"--reference", &ok]);
    assert!(out.success(), "{}", out.stderr);
    assert!(
        out.stderr.contains("--reference names \"nobody\""),
        "{}",
        out.stderr
    );
}

#[test]
fn every_k_by_default_and_intervals_for_the_median_and_the_endings() {
    // Tasks x and y, three runs each. First edit after 1 and 0 accepted actions in x (its third
    // run never edits), after 2 in y (its others never edit): pooled [1, 0, 2], median 1. A
    // draw of two tasks is xx ([1, 0, 1, 0]: 0.5), xy or yx ([1, 0, 2]: 1) or yy ([2, 2]: 2),
    // each about 500 of 2000 times, so the draws at ranks 50 and 1949 are 0.5 and 2.
    let trajs = vec![
        traj(
            "m",
            "x",
            Some(0),
            0,
            vec![shell("ls", ""), edit(), submit()],
        ),
        traj("m", "x", Some(1), 0, vec![edit(), submit()]),
        traj("m", "x", Some(2), 0, vec![shell("ls", "")]),
        traj(
            "m",
            "y",
            Some(0),
            0,
            vec![shell("ls", ""), shell("cat a.py", ""), edit()],
        ),
        traj("m", "y", Some(1), 0, vec![shell("ls", "")]),
        traj("m", "y", Some(2), 0, vec![shell("ls", "")]),
    ];
    // x resolved in runs 0 and 1 (c = 2 of 3), y in none.
    let results = Results::from_entries(vec![
        entry(Some("m"), "x", Some(0), true),
        entry(Some("m"), "x", Some(1), true),
    ]);
    let options = asap_proxy::report::summary::Options::default();
    let report = Report::build_with(&trajs, Some(&results), &options);
    // No --k: every k from 1 to the fewest runs of a task (3), by the unbiased estimator:
    // x gives 2/3, 1 − C(1,2)/C(3,2) = 1, 1; y gives 0.
    assert_eq!(report.ks, vec![1, 2, 3]);
    let m = report.label("m").unwrap();
    let pass: Vec<f64> = m.pass_at_k.values().copied().collect();
    assert_eq!(pass.len(), 3);
    for (got, want) in pass.iter().zip([1.0 / 3.0, 0.5, 0.5]) {
        assert!((got - want).abs() < 1e-12, "{pass:?}");
    }
    let est = |metric: &str| {
        m.estimates
            .iter()
            .find(|e| e.metric == metric)
            .unwrap_or_else(|| panic!("no {metric} in {:?}", m.estimates))
            .clone()
    };
    assert!(m.estimates.iter().any(|e| e.metric == "pass@3"));
    let median = est("median_steps_before_first_edit");
    assert_eq!(median.unit, "steps");
    assert_eq!(
        (median.value, median.interval.lo, median.interval.hi),
        (1.0, 0.5, 2.0)
    );
    // Endings are shares of the trajectories: 2 of 6 submitted; a draw of xx gives 2/3, of
    // yy 0, so the interval spans 0 – 2/3.
    let submitted = est("ending:submitted");
    assert_eq!(submitted.unit, "fraction");
    assert!((submitted.value - 1.0 / 3.0).abs() < 1e-12);
    assert!(submitted.interval.lo.abs() < 1e-12);
    assert!((submitted.interval.hi - 2.0 / 3.0).abs() < 1e-12);
    // The Markdown shows the median in steps, not as a percentage.
    let md = render(&report, ReportFormat::Md);
    assert!(
        md.contains("| m | median_steps_before_first_edit | 1.0 | 0.5 – 2.0 |"),
        "{md}"
    );
    assert!(
        md.contains("| m | ending:submitted | 33.3 | 0.0 – 66.7 |"),
        "{md}"
    );
}

// ---------------------------------------------------------------------------------------------
// --html: one self-contained page from the JSON document

/// `text` as minijinja's HTML auto-escaping writes it.
fn escaped(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#x27;")
        .replace('/', "&#x2f;")
}

#[test]
fn html_page_shows_the_json_numbers_escaped() {
    use asap_proxy::report::{html, output};

    // The pair fixture (labels A and B, with results), and a third label whose name and
    // command are markup: a network-flagged `curl` with a script in its URL.
    let evil = "<script>alert(1)</script>";
    let (mut trajs, results) = pair_fixture();
    trajs.push(traj(
        evil,
        "t",
        Some(0),
        0,
        vec![
            shell("curl https://x.test/<script>alert(2)</script>", ""),
            submit(),
        ],
    ));
    let mut report = Report::build(&trajs, Some(&results), &[1, 2]);
    report.pairs = vec![compare(&report, "A", "B").unwrap()];
    let doc = output::to_json(&report);
    let page = html::render(&doc, "http://viewer.test:8200/").unwrap();

    assert!(page.starts_with("<!doctype html>"), "{page}");
    assert!(!page.to_lowercase().contains("<script"), "{page}");
    assert!(page.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"));
    assert!(page.contains("curl https:&#x2f;&#x2f;x.test&#x2f;&lt;script&gt;alert(2)"));
    let labels = doc["labels"].as_array().unwrap();
    assert_eq!(labels.len(), 3);
    for l in labels {
        let label = l["label"].as_str().unwrap();
        assert!(page.contains(&escaped(label)), "{label}");
    }

    // Pass@1 of each label as the Markdown prints it (one decimal), in the summary table.
    let md = render(&report, ReportFormat::Md);
    let a = labels.iter().find(|l| l["label"] == "A").unwrap();
    let pass1 = format!("{:.1}", a["pass_at_k"]["1"].as_f64().unwrap() * 100.0);
    assert_eq!(pass1, "25.0");
    assert!(
        page.contains(&format!("<td class=\"num\">{pass1}</td>")),
        "{page}"
    );
    assert!(md.contains(&format!("| {pass1} |")), "{md}");
    // A point of a metric's chart names its label when hovered.
    assert!(
        page.contains("<title>A: 25.0 % (95 % interval 0.0 – 50.0)</title>"),
        "{page}"
    );
    // Every estimate: value (lo – hi) in %, from the JSON.
    for l in labels {
        for e in l["estimates"].as_array().unwrap() {
            let pct = |v: &serde_json::Value| format!("{:.1}", v.as_f64().unwrap() * 100.0);
            let cell = format!(
                "{} ({} – {})",
                pct(&e["value"]),
                pct(&e["interval"]["lo"]),
                pct(&e["interval"]["hi"])
            );
            assert!(page.contains(&cell), "{cell} ({e})");
        }
    }
    let b_pass1 = labels.iter().find(|l| l["label"] == "B").unwrap()["estimates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["metric"] == "pass@1")
        .unwrap()
        .clone();
    assert!(page.contains("33.3 (0.0 – 66.7)"), "{b_pass1}");
    // The changes between consecutive labels: delta, interval and p as the Markdown's.
    let changes = doc["changes"].as_array().unwrap();
    assert!(!changes.is_empty());
    for c in changes {
        let points = |v: &serde_json::Value| format!("{:+.1}", v.as_f64().unwrap() * 100.0);
        let row = format!(
            "<td class=\"num\">{}</td>\n<td class=\"num\">{} – {}</td>\n<td class=\"num\">{:.3}</td>",
            points(&c["delta"]),
            points(&c["interval"]["lo"]),
            points(&c["interval"]["hi"]),
            c["p_value"].as_f64().unwrap()
        );
        assert!(page.contains(&row), "{row}");
    }

    // Each session links to the viewer, its id percent-encoded as one path segment.
    for t in doc["trajectories"].as_array().unwrap() {
        let session = t["session"].as_str().unwrap();
        if session.starts_with('<') {
            continue;
        }
        let href = format!("href=\"http://viewer.test:8200/ui/session/{session}\"");
        assert!(page.contains(&href), "{href}");
    }
    assert!(page.contains(
        "href=\"http://viewer.test:8200/ui/session/%3Cscript%3Ealert%281%29%3C%2Fscript%3E-t-0-0\""
    ));

    // One plot per metric of the estimates, and the Pass@k curves.
    let mut metrics: Vec<&str> = labels
        .iter()
        .flat_map(|l| l["estimates"].as_array().unwrap())
        .map(|e| e["metric"].as_str().unwrap())
        .collect();
    metrics.sort_unstable();
    metrics.dedup();
    assert!(metrics.contains(&"pass@1") && metrics.contains(&"autonomous_edit"));
    assert_eq!(page.matches("<svg").count(), metrics.len() + 1);
    for metric in metrics.iter().chain(&["pass@k"]) {
        let attr = format!("data-metric=\"{}\"", escaped(metric));
        assert_eq!(page.matches(&attr).count(), 1, "{attr}");
    }
    // The pair comparison and the flagged trajectory are there.
    assert!(page.contains("Pair: A → B"), "{page}");
    assert!(page.contains("Flagged trajectories"));
}

#[test]
fn html_page_takes_absent_and_new_json_fields() {
    use asap_proxy::report::html::{render as page_of, DEFAULT_VIEWER_URL};
    use asap_proxy::report::output;

    // A document with almost nothing renders (fields read as empty), with no plot.
    let page = page_of(&json!({"labels": [{"label": "only"}]}), DEFAULT_VIEWER_URL).unwrap();
    assert!(page.contains("<th>only</th>"), "{page}");
    assert_eq!(page.matches("<svg").count(), 0);

    // Metrics the JSON may hold besides Pass@k, Intersection@n and the behaviour rates: an
    // ending's share, a median in steps (shown as steps, not ×100), an unknown name; a pair
    // row's change and Pass@1's with an interval and a p-value.
    let mut doc = output::to_json(&full_report());
    let estimates = doc["labels"][0]["estimates"].as_array_mut().unwrap();
    estimates.extend([
        json!({"metric": "median_steps_before_first_edit", "unit": "steps", "value": 4.5,
               "interval": {"lo": 3.0, "hi": 6.0}}),
        json!({"metric": "ending:degenerate_loop", "unit": "fraction", "value": 0.125,
               "interval": {"lo": 0.0, "hi": 0.25}}),
        json!({"metric": "brand_new", "value": 0.5, "interval": {"lo": 0.25, "hi": 0.75}}),
    ]);
    doc["pairs"][0]["rows"][0]["change"] =
        json!({"interval": {"lo": -0.25, "hi": 0.5}, "p_value": 0.0123, "tasks": 2});
    doc["pairs"][0]["pass_at_1_change"] =
        json!({"interval": {"lo": 0.125, "hi": 0.75}, "p_value": 0.5, "tasks": 2});
    let page = page_of(&doc, DEFAULT_VIEWER_URL).unwrap();
    assert!(
        page.contains("4.5 (3.0 – 6.0)") && !page.contains("450.0"),
        "{page}"
    );
    assert!(page.contains("12.5 (0.0 – 25.0)"));
    assert!(page.contains("data-metric=\"median_steps_before_first_edit\""));
    assert!(page.contains("median steps before the first edit (steps)"));
    assert!(page.contains("ended: degenerate_loop (abnormal) (%)"));
    assert!(page.contains("data-metric=\"brand_new\""));
    let metrics: std::collections::BTreeSet<&str> = doc["labels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|l| l["estimates"].as_array().unwrap())
        .map(|e| e["metric"].as_str().unwrap())
        .collect();
    assert!(metrics.contains("brand_new"));
    assert_eq!(page.matches("<svg").count(), metrics.len() + 1);
    assert!(
        page.contains("<td class=\"num\">-25.0 – +50.0</td>"),
        "{page}"
    );
    assert!(page.contains("<td class=\"num\">0.012</td>"));
    assert!(page.contains("<td class=\"num\">+12.5 – +75.0</td>"));
    assert!(page.contains("<td class=\"num\">0.500</td>"));
}

#[test]
fn report_html_writes_the_page_of_the_json() {
    use asap_proxy::report::html;

    let traces = crate::util::fixture_path("view");
    let dir = tempfile::tempdir().unwrap();
    let results = write_file(
        dir.path(),
        "results.jsonl",
        "{\"instance_id\": \"inventory__total-1\", \"resolved\": true}\n",
    );
    let path = dir.path().join("report.html");
    let viewer = "http://127.0.0.1:9999/";
    let out = run(&[
        &"report",
        &traces,
        &"--results",
        &results,
        &"--format",
        &"json",
        &"--html",
        &path,
        &"--viewer-url",
        &viewer,
    ]);
    assert!(out.success(), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("wrote {}", path.display())),
        "{}",
        out.stderr
    );
    let page = std::fs::read_to_string(&path).unwrap();
    // The page is the JSON document the same run printed, rendered.
    assert_eq!(page, html::render(&out.json(), viewer).unwrap());
    assert!(page.contains("href=\"http://127.0.0.1:9999/ui/session/75d14317a253\""));
    assert!(
        page.contains("<td class=\"num\">100.0</td>"),
        "Pass@1 100 %"
    );
    assert!(!page.contains("<script"));

    // The viewer's default address; Markdown still goes to standard output.
    let out = run(&[&"report", &traces, &"--html", &path]);
    assert!(out.success() && out.stdout.starts_with("# asap-proxy report"));
    let page = std::fs::read_to_string(&path).unwrap();
    assert!(page.contains("href=\"http://127.0.0.1:8200/ui/session/75d14317a253\""));

    // A page that cannot be written is exit 1; a viewer URL that is not http(s) exit 2.
    let unwritable = dir.path().join("no-such-dir/report.html");
    let out = run(&[&"report", &traces, &"--html", &unwritable]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("--html"), "{}", out.stderr);
    let out = run(&[
        &"report",
        &traces,
        &"--html",
        &path,
        &"--viewer-url",
        &"javascript:alert(1)",
    ]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
}

#[test]
fn reference_scores_keep_the_decimals_they_were_written_with() {
    // Fractions of a benchmark: 0.123 → 0.127 is +0.004, not 0.12 → 0.13 and +0.00.
    let trajs: Vec<Trajectory> = ["stage1", "stage2"]
        .iter()
        .map(|l| traj(l, "a", Some(0), 0, vec![edit()]))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let mut report = Report::build(&trajs, None, &[1]);
    report.with_reference(
        "f.csv",
        &[("stage1".into(), 0.123), ("stage2".into(), 0.127)],
        3,
    );
    let md = render(&report, ReportFormat::Md);
    assert!(md.contains("| stage1 | 0.123 | – |"), "{md}");
    assert!(md.contains("| stage2 | 0.127 | +0.004 |"), "{md}");
    let csv = render(&report, ReportFormat::Csv);
    assert!(csv.contains("\nf.csv,stage2,0.127,0.004,"), "{csv}");
    assert!(
        csv.contains("\nstage1,1,0,0,,\n"),
        "the network table: {csv}"
    );
    // Through the CLI: the decimals come from the file, exponents included.
    let traces = crate::util::fixture_path("traces/v1");
    let label = run(&[&"report", &traces, &"--format", &"json"]).json()["labels"][0]["label"]
        .as_str()
        .unwrap()
        .to_string();
    let file = write_file(dir.path(), "r.csv", &format!("{label},1.5e-3\n"));
    let out = run(&[
        &"report",
        &traces,
        &"--reference",
        &file,
        &"--format",
        &"json",
    ]);
    assert!(out.success(), "{}", out.stderr);
    let reference = &out.json()["reference"];
    assert_eq!(reference["decimals"], 4);
    let out = run(&[&"report", &traces, &"--reference", &file]);
    assert!(out.stdout.contains("| 0.0015 |"), "{}", out.stdout);
}

#[test]
fn further_tool_calls_are_actions_not_requests() {
    // Two replies of three tool calls each (passthrough `--tool-calls all`), no submission:
    // two requests, under a step limit of 3, so the scaffold stopped on its own.
    let call = |step: usize, continued: bool| Attempt {
        step,
        continued,
        ..shell("ls", "a.py")
    };
    let t = Trajectory {
        attempts: vec![
            call(0, false),
            call(1, true),
            call(2, true),
            call(3, false),
            call(4, true),
            call(5, true),
        ],
        ..traj("m", "t", Some(0), 0, vec![])
    };
    let b = Behaviour::of(&t, Some(3));
    assert_eq!(b.turns, 2);
    assert_eq!(b.parsable_turns, 2);
    assert_eq!(b.ending, Ending::StoppedWithoutSubmission);
    assert_eq!(Behaviour::of(&t, Some(2)).ending, Ending::StepCap);
}

#[test]
fn a_pair_with_a_label_of_mixed_modes_is_neither_controlled_nor_base_against_post() {
    let mode = |t: Trajectory, m: &str| {
        let mut t = t;
        t.protocol.mode = Some(m.into());
        t
    };
    let trajs = vec![
        mode(traj("post", "t", Some(0), 0, vec![submit()]), "passthrough"),
        mode(traj("mix", "t", Some(0), 0, vec![submit()]), "passthrough"),
        mode(traj("mix", "u", Some(0), 0, vec![submit()]), "proxy"),
        mode(traj("base", "t", Some(0), 0, vec![submit()]), "proxy"),
    ];
    let report = Report::build(&trajs, None, &[1]);
    let p = compare(&report, "post", "mix").unwrap();
    assert!(!p.scaffold_controlled && !p.base_vs_post);
    assert_eq!(p.statement, Some(asap_proxy::report::pair::MIXED_MODES));
    let p = compare(&report, "base", "post").unwrap();
    assert!(!p.scaffold_controlled && p.base_vs_post);
    let p = compare(&report, "base", "base").unwrap();
    assert!(p.scaffold_controlled && p.statement.is_none());
    // No matched pair: no Pass@1 over the pairs (not a mean of nothing).
    let results = Results::from_entries(vec![entry(None, "t", Some(0), true)]);
    let trajs_b = vec![
        traj("a", "t", Some(0), 0, vec![submit()]),
        traj("b", "u", Some(0), 0, vec![submit()]),
    ];
    let report = Report::build(&trajs_b, Some(&results), &[1]);
    let p = compare(&report, "a", "b").unwrap();
    assert_eq!(p.pairs, 0);
    assert_eq!(p.pass_at_1, None);
}

#[test]
fn rank_groups_file_maps_labels_to_models_and_groups() {
    // The data of `rank_agreement_by_hand` under labels outside the convention, mapped by
    // `--rank-groups`: the same ρ = 0.5.
    let solved = [
        ("s1", 3, "m1", "swe"),
        ("s2", 2, "m2", "swe"),
        ("s3", 1, "m3", "swe"),
        ("o1", 2, "m1", "oh"),
        ("o2", 3, "m2", "oh"),
        ("o3", 1, "m3", "oh"),
    ];
    let mut trajs = Vec::new();
    let mut entries = Vec::new();
    for (label, c, _, _) in solved {
        for (i, task) in ["a", "b", "c", "d"].iter().enumerate() {
            trajs.push(traj(label, task, Some(0), i as u64, vec![edit()]));
            entries.push(entry(Some(label), task, Some(0), i < c));
        }
    }
    let options = asap_proxy::report::summary::Options {
        rank_groups: solved
            .iter()
            .map(|(l, _, m, g)| (l.to_string(), m.to_string(), g.to_string()))
            .collect(),
        ..Default::default()
    };
    let report = Report::build_with(&trajs, Some(&Results::from_entries(entries)), &options);
    assert_eq!(report.rank_agreement.len(), 1);
    let r = &report.rank_agreement[0];
    assert_eq!(r.groups, ("oh".to_string(), "swe".to_string()));
    assert!((r.spearman.unwrap() - 0.5).abs() < 1e-12);

    // Through the CLI: a header, a comment; a malformed line or a label given twice is exit 2;
    // a label no trajectory has is a warning.
    let traces = crate::util::fixture_path("traces/v1");
    let dir = tempfile::tempdir().unwrap();
    let good = write_file(
        dir.path(),
        "g.csv",
        "label,model,group\n# mapping\nnobody,m1,swe\n",
    );
    let out = run(&[&"report", &traces, &"--rank-groups", &good]);
    assert!(out.success(), "{}", out.stderr);
    assert!(
        out.stderr.contains("--rank-groups names \"nobody\""),
        "{}",
        out.stderr
    );
    for (name, text) in [
        ("short.csv", "a,m1\n"),
        ("empty.csv", "a,,swe\n"),
        ("twice.csv", "a,m1,swe\na,m2,oh\n"),
    ] {
        let file = write_file(dir.path(), name, text);
        let out = run(&[&"report", &traces, &"--rank-groups", &file]);
        assert_eq!(out.code, Some(2), "{name}: {}", out.stderr);
    }
}
