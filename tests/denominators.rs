//! `report` denominators and protocols (issue 17 items 3 and 4): every label is scored over
//! the whole task set (a task a label lacks counts as resolved in none of its runs), result
//! rows without a trajectory count for Pass@k and Intersection@n but not for the behaviours,
//! `--tasks` drops trajectories outside the set, patch rates stay unknown unless the results
//! say, and labels run under different protocols are not compared silently.
//!
//! Every expected number is worked out by hand in a comment next to it, with the value a
//! wrong denominator would give.

use std::path::Path;

use serde_json::{json, Value};

use asap_proxy::report::protocol::{Rules, SessionProtocol};
use asap_proxy::report::results::{self, Entry, Parsed};
use asap_proxy::report::summary::Options;
use asap_proxy::report::ReportFormat;
use asap_proxy::report::{Report, Results, TaskCount, Trajectory};

use crate::util::backend::Scripted;
use crate::util::proxy::{serve_with, Proxy};
use crate::util::request;
use crate::util::turns::{entry, harness_results, render, submit, trajectory};

// ---------------------------------------------------------------------------------------------
// Builders

/// One trajectory of `label` on `task`, explicit `run`, a single submit turn.
fn traj(label: &str, task: &str, run: usize) -> Trajectory {
    let session = format!("{label}-{task}-{run}");
    Trajectory {
        run: Some(run),
        start_ms: run as u64,
        ..trajectory(&session, label, task, vec![submit()])
    }
}

/// `runs` trajectories of `label` on `task` (runs 0..runs) and a result row for each, the
/// first `resolved` of them resolved.
fn task_runs(
    label: &str,
    task: &str,
    runs: usize,
    resolved: usize,
    trajs: &mut Vec<Trajectory>,
    entries: &mut Vec<Entry>,
) {
    for run in 0..runs {
        trajs.push(traj(label, task, run));
        entries.push(entry(Some(label), task, Some(run), run < resolved));
    }
}

fn options(ks: &[usize], tasks: Option<&[&str]>) -> Options {
    Options {
        ks: ks.to_vec(),
        tasks: tasks.map(|t| t.iter().map(|s| s.to_string()).collect()),
        ..Options::default()
    }
}

fn count(id: &str, n: usize, c: usize) -> TaskCount {
    TaskCount {
        instance_id: id.into(),
        n,
        c,
    }
}

fn close(got: f64, want: f64) -> bool {
    (got - want).abs() < 1e-12
}

// ---------------------------------------------------------------------------------------------
// Pure: Report::build_with

/// Label A has all four tasks; label B lacks t4. B is still scored over four tasks, t4 with
/// c = 0 and n = B's most runs of a task (3), not over the three it has.
#[test]
fn a_missing_task_counts_as_resolved_in_none_of_the_labels_runs() {
    let (mut trajs, mut entries) = (Vec::new(), Vec::new());
    // A: 2 runs per task, resolved c = 2, 1, 0, 1.
    for (task, c) in [("t1", 2), ("t2", 1), ("t3", 0), ("t4", 1)] {
        task_runs("A", task, 2, c, &mut trajs, &mut entries);
    }
    // B: t1 3 runs c = 1, t2 2 runs c = 2, t3 2 runs c = 2, no t4 at all.
    task_runs("B", "t1", 3, 1, &mut trajs, &mut entries);
    task_runs("B", "t2", 2, 2, &mut trajs, &mut entries);
    task_runs("B", "t3", 2, 2, &mut trajs, &mut entries);
    let results = Results::from_entries(entries);
    let report = Report::build_with(&trajs, Some(&results), &options(&[1, 2, 3], None));

    assert_eq!(report.task_set, ["t1", "t2", "t3", "t4"]);
    assert_eq!(report.task_set_source, "seen");

    let a = report.label("A").unwrap();
    // Pass@1 = (2/2 + 1/2 + 0 + 1/2) / 4 = 0.5; Pass@2 = (1 + 1 + 0 + 1) / 4 = 0.75.
    assert!(close(a.pass_at_k[&1], 0.5), "{:?}", a.pass_at_k);
    assert!(close(a.pass_at_k[&2], 0.75), "{:?}", a.pass_at_k);
    assert!(!a.pass_at_k.contains_key(&3), "k = 3 > n = 2");
    // Intersection@n: only t1 resolved in both runs: 1/4.
    let i = a.intersection.unwrap();
    assert_eq!((i.solved, i.tasks), (1, 4));
    assert!(a.missing_tasks.is_empty());

    let b = report.label("B").unwrap();
    assert_eq!((b.tasks, b.runs, b.min_runs, b.max_runs), (4, 7, 2, 3));
    assert_eq!(b.missing_tasks, ["t4"]);
    assert_eq!(
        b.task_counts,
        [
            count("t1", 3, 1),
            count("t2", 2, 2),
            count("t3", 2, 2),
            // n = B's most runs of a task (t1's 3), c = 0.
            count("t4", 3, 0),
        ]
    );
    // Pass@1 = (1/3 + 1 + 1 + 0) / 4 = 7/12 ≈ 0.583 (over the three tasks B has: 7/9 ≈ 0.778).
    assert!(close(b.pass_at_k[&1], 7.0 / 12.0), "{:?}", b.pass_at_k);
    // Pass@2: t1 = 1 − C(2,2)/C(3,2) = 2/3, t2 = t3 = 1, t4 = 1 − C(3,2)/C(3,2) = 0:
    // (2/3 + 2) / 4 = 2/3 (over three tasks: 8/9; with t4 at n = 1 it would be undefined).
    assert!(close(b.pass_at_k[&2], 2.0 / 3.0), "{:?}", b.pass_at_k);
    // Pass@3: t2 and t3 have 2 runs, so it is not reported.
    assert!(!b.pass_at_k.contains_key(&3));
    // Intersection@n: t2 and t3 of 4 tasks = 0.5 (over three tasks: 2/3).
    let i = b.intersection.unwrap();
    assert_eq!((i.solved, i.tasks), (2, 4));
    assert!(close(i.fraction, 0.5));
    // The behaviours stay over B's 7 trajectories.
    assert_eq!(b.behaviour.trajectories, 7);
    assert_eq!(b.behaviour.resolved, 5);

    // One warning, naming the label and the task; none for A.
    let about_missing: Vec<&String> = report
        .warnings
        .iter()
        .filter(|w| w.contains("have no trajectory"))
        .collect();
    assert_eq!(about_missing.len(), 1, "{:?}", report.warnings);
    assert!(
        about_missing[0].starts_with("B: 1 task(s)")
            && about_missing[0].contains("and no result")
            && about_missing[0].ends_with(": t4"),
        "{}",
        about_missing[0]
    );

    // The same numbers in the JSON and Markdown outputs.
    let value: Value = serde_json::from_str(&render(&report, ReportFormat::Json)).unwrap();
    let b_json = &value["labels"][1];
    assert_eq!(b_json["label"], "B");
    assert_eq!(b_json["missing_tasks"], json!(["t4"]));
    assert_eq!(
        b_json["task_counts"][3],
        json!({"instance_id": "t4", "n": 3, "c": 0})
    );
    assert_eq!(b_json["intersection"]["solved"], 2);
    assert!(value["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().contains(": t4")));
    let md = render(&report, ReportFormat::Md);
    // label | tasks | runs | runs/task | Pass@1..3 | Intersection | no result | missing |
    // result-only
    assert!(
        md.contains("| B | 4 | 7 | 2–3 | 58.3 | 66.7 | – | 2/4 (50.0%) | 0 | 1 | 0 |"),
        "{md}"
    );
    assert!(md.contains("## Warnings\n\n- B: 1 task(s)"), "{md}");
}

/// Result rows with no trajectory behind them add runs to Pass@k and Intersection@n (n and
/// c grow), are listed, and are warned about; the behaviours stay over trajectories.
#[test]
fn result_only_runs_count_for_pass_at_k_not_for_the_behaviours() {
    let trajs = vec![
        traj("m", "t1", 0),
        traj("m", "t1", 1),
        traj("m", "t4", 0),
        traj("m", "t4", 1),
    ];
    let results = Results::from_entries([
        // t1: runs 0 and 1 traced, run 2 only in the results: n = 3, c = 2.
        entry(Some("m"), "t1", Some(0), true),
        entry(Some("m"), "t1", Some(1), false),
        entry(Some("m"), "t1", Some(2), true),
        // t2: no trajectory, explicit runs 0 and 1: n = 2, c = 1.
        entry(Some("m"), "t2", Some(0), false),
        entry(None, "t2", Some(1), true),
        // t3: no trajectory, a run-less result (it applies to every run): as many runs as
        // the label's other tasks have at most, n = 3, all resolved, c = 3.
        entry(Some("m"), "t3", None, true),
        // t4: two trajectories, a run-less result for both: n = 2, c = 0 (no extra run).
        entry(Some("m"), "t4", None, false),
    ]);
    let report = Report::build_with(&trajs, Some(&results), &options(&[1, 2], None));
    assert_eq!(report.task_set, ["t1", "t2", "t3", "t4"]);
    let m = report.label("m").unwrap();
    assert_eq!(
        m.task_counts,
        [
            count("t1", 3, 2),
            count("t2", 2, 1),
            count("t3", 3, 3),
            count("t4", 2, 0)
        ]
    );
    assert_eq!(
        m.result_only_runs,
        [
            ("t1".to_string(), 2),
            ("t2".to_string(), 0),
            ("t2".to_string(), 1),
            ("t3".to_string(), 0),
            ("t3".to_string(), 1),
            ("t3".to_string(), 2)
        ]
    );
    assert!(m.missing_tasks.is_empty(), "t2 and t3 have results");
    // Pass@1 = (2/3 + 1/2 + 1 + 0) / 4 = 13/24 ≈ 0.5417 (trajectories only, t2 and t3
    // missing: (1/2 + 0 + 0 + 0) / 4 = 0.125).
    assert!(close(m.pass_at_k[&1], 13.0 / 24.0), "{:?}", m.pass_at_k);
    // Pass@2 = (1 + 1 + 1 + 0) / 4: t1 (n 3, c 2) 1 − C(1,2)/C(3,2) = 1; t2 (2, 1) 1; t3 1;
    // t4 (2, 0) 0. (Had the run-less row stood for one run, t3's n = 1 would leave Pass@2
    // undefined for the whole label.)
    assert!(close(m.pass_at_k[&2], 0.75), "{:?}", m.pass_at_k);
    assert_eq!((m.min_runs, m.max_runs), (2, 3));
    // Intersection@n: t3 (3 of 3) only: 1/4.
    let i = m.intersection.unwrap();
    assert_eq!((i.solved, i.tasks), (1, 4));
    // Behaviours: 4 trajectories, every one with a result; resolved 1 of 4 (t1 run 0), not
    // the 3 resolved runs of Pass@k.
    assert_eq!(m.runs, 4);
    assert_eq!(m.behaviour.trajectories, 4);
    assert_eq!(m.behaviour.no_result, 0);
    assert_eq!(m.behaviour.resolved, 1);
    assert_eq!(m.behaviour.explicit_submission, 4);
    let warning = report
        .warnings
        .iter()
        .find(|w| w.contains("result but no trajectory"))
        .unwrap();
    assert_eq!(
        warning,
        "m: 6 run(s) have a result but no trajectory: counted for Pass@k and Intersection@n, \
         missing from the behaviours: t1 run 2, t2 run 0, t2 run 1, t3 run 0, t3 run 1, t3 run 2"
    );
    let value: Value = serde_json::from_str(&render(&report, ReportFormat::Json)).unwrap();
    assert_eq!(
        value["labels"][0]["result_only_runs"],
        json!([
            ["t1", 2],
            ["t2", 0],
            ["t2", 1],
            ["t3", 0],
            ["t3", 1],
            ["t3", 2]
        ])
    );
    assert_eq!(value["labels"][0]["behaviour"]["resolved"]["total"], 4);
}

/// `--tasks`: trajectories of other tasks are out of every number (with a warning), and a
/// task of the set that no label has is missing for each.
#[test]
fn a_task_set_leaves_out_trajectories_outside_it() {
    let (mut trajs, mut entries) = (Vec::new(), Vec::new());
    task_runs("m", "t1", 1, 1, &mut trajs, &mut entries);
    task_runs("m", "t2", 1, 0, &mut trajs, &mut entries);
    // Outside the set: two resolved runs of t3.
    task_runs("m", "t3", 2, 2, &mut trajs, &mut entries);
    let results = Results::from_entries(entries);
    let set = ["t2", "t5", "t1"];
    let report = Report::build_with(&trajs, Some(&results), &options(&[1], Some(&set)));
    assert_eq!(report.task_set, ["t1", "t2", "t5"], "sorted");
    assert_eq!(report.task_set_source, "tasks_file");
    let m = report.label("m").unwrap();
    assert_eq!(m.tasks, 3);
    assert_eq!(m.runs, 2, "t3's trajectories are left out");
    assert_eq!(m.behaviour.trajectories, 2);
    assert_eq!(m.behaviour.resolved, 1);
    assert_eq!(m.missing_tasks, ["t5"]);
    assert_eq!(
        m.task_counts,
        [count("t1", 1, 1), count("t2", 1, 0), count("t5", 1, 0)]
    );
    // Pass@1 = (1 + 0 + 0) / 3 = 1/3 (with t3 in and t5 out it would be 2/3).
    assert!(close(m.pass_at_k[&1], 1.0 / 3.0), "{:?}", m.pass_at_k);
    assert!(report
        .trajectories
        .iter()
        .all(|r| r.instance_id == "t1" || r.instance_id == "t2"));
    assert!(
        report.warnings.contains(
            &"2 trajectories are of tasks outside --tasks: left out of every number".to_string()
        ),
        "{:?}",
        report.warnings
    );
    let md = render(&report, ReportFormat::Md);
    assert!(md.contains("Task set: 3 tasks (from --tasks)"), "{md}");
}

/// A label whose trajectories are all outside `--tasks` is still scored over the task set
/// (every task missing, Pass@1 = 0), not dropped from the report; with no trajectory left it
/// has no protocol to compare. (Before the fix the label vanished: `report.label("B")` was
/// `None` and `--pair A B` said "unknown label".)
#[test]
fn a_label_with_no_trajectory_in_the_task_set_is_scored_not_dropped() {
    let (mut trajs, mut entries) = (Vec::new(), Vec::new());
    task_runs("A", "t1", 2, 1, &mut trajs, &mut entries);
    task_runs("A", "t2", 2, 2, &mut trajs, &mut entries);
    // B ran t3 only (resolved), which is outside the set, and in another format.
    task_runs("B", "t3", 2, 2, &mut trajs, &mut entries);
    for t in trajs.iter_mut().filter(|t| t.label == "B") {
        t.format = "xml".into();
    }
    let results = Results::from_entries(entries);
    let report = Report::build_with(
        &trajs,
        Some(&results),
        &options(&[1, 2], Some(&["t1", "t2"])),
    );
    assert_eq!(report.labels.len(), 2, "{:?}", report.labels);
    let a = report.label("A").unwrap();
    // A: Pass@1 = (1/2 + 1) / 2 = 0.75.
    assert!(close(a.pass_at_k[&1], 0.75), "{:?}", a.pass_at_k);
    let b = report.label("B").unwrap();
    assert_eq!((b.tasks, b.runs), (2, 0));
    assert_eq!(b.missing_tasks, ["t1", "t2"]);
    // Both tasks at n = 1 (B has no run of a task in the set), c = 0: Pass@1 = 0, not B's
    // resolved t3.
    assert_eq!(b.task_counts, [count("t1", 1, 0), count("t2", 1, 0)]);
    assert_eq!(b.pass_at_k.get(&1), Some(&0.0));
    assert_eq!(b.intersection.unwrap().solved, 0);
    assert_eq!(b.behaviour.trajectories, 0);
    assert!(report
        .warnings
        .iter()
        .any(|w| w.starts_with("B: 2 task(s)") && w.ends_with(": t1, t2")));
    assert!(report
        .warnings
        .contains(&"2 trajectories are of tasks outside --tasks: left out of every number".into()));
    // B's xml trajectories are out of every number, its protocol too: nothing to compare.
    assert_eq!(report.protocol_differences, Vec::<String>::new());
    // The paired comparison finds B (no pairs), and every output format renders it.
    let pair = asap_proxy::report::compare(&report, "A", "B").unwrap();
    assert_eq!(pair.pairs, 0);
    let md = render(&report, ReportFormat::Md);
    assert!(
        md.contains("| B | 2 | 0 | 1 | 0.0 | – | 0/2 (0.0%) | 0 | 2 | 0 |"),
        "{md}"
    );
    render(&report, ReportFormat::Csv);
}

/// Empty patch and applicable patch are unknown for runs whose results do not say; a
/// harness report says for every id it lists.
#[test]
fn patch_rates_are_unknown_unless_the_results_say() {
    let trajs: Vec<Trajectory> = ["t1", "t2", "t3", "t4"]
        .iter()
        .map(|t| traj("m", t, 0))
        .collect();
    let rates = |report: &Report| -> Value {
        let value: Value = serde_json::from_str(&render(report, ReportFormat::Json)).unwrap();
        value["labels"][0]["behaviour"].clone()
    };

    // Rows: t1 resolved (so it had a patch that applied), t2 unresolved with no columns
    // (unknown), t3 unresolved with an empty patch (known: empty, not applicable), t4 no row
    // (unknown). The same rows as JSONL and as CSV.
    let jsonl = "{\"instance_id\": \"t1\", \"run\": 0, \"resolved\": true}\n\
                 {\"instance_id\": \"t2\", \"run\": 0, \"resolved\": false}\n\
                 {\"instance_id\": \"t3\", \"run\": 0, \"resolved\": false, \"empty_patch\": true}\n";
    let csv = "instance_id,run,resolved,empty_patch\nt1,0,true,\nt2,0,false,\nt3,0,false,true\n";
    for (name, text) in [("r.jsonl", jsonl), ("r.csv", csv)] {
        let Parsed::Rows(rows) = results::parse(text, Path::new(name)).unwrap() else {
            panic!("{name}: not rows")
        };
        let report = Report::build_with(
            &trajs,
            Some(&Results::from_entries(rows)),
            &options(&[1], None),
        );
        let b = &report.label("m").unwrap().behaviour;
        // Empty: t1 no, t3 yes, t2 and t4 unknown. Applicable: t1 yes, t3 no, t2 t4 unknown.
        assert_eq!(
            (b.empty_patch, b.empty_patch_unknown),
            (1, 2),
            "{name}: empty"
        );
        assert_eq!(
            (b.applicable_patch, b.applicable_patch_unknown),
            (1, 2),
            "{name}: applicable"
        );
        assert_eq!(b.no_result, 1, "{name}: t4");
        let r = rates(&report);
        assert_eq!(
            r["empty_patch"],
            json!({"unit": "trajectories", "count": 1, "total": 4, "unknown": 2, "rate": null}),
            "{name}"
        );
        assert_eq!(r["applicable_patch"]["rate"], Value::Null, "{name}");
        assert_eq!(r["applicable_patch"]["unknown"], 2, "{name}");
        // Resolved is known for every run (no row: unresolved): 1/4.
        assert_eq!(r["resolved"]["rate"], json!(0.25), "{name}");
        let md = render(&report, ReportFormat::Md);
        assert!(
            md.contains("| empty patch | unknown (1/2 known, 2 unknown) |")
                && md.contains("| applicable patch | unknown (1/2 known, 2 unknown) |"),
            "{name}: {md}"
        );
    }

    // The harness report lists every id: t1 resolved, t2 unresolved (its patch applied), t3
    // empty patch, t4 harness error (not applicable, not empty).
    let harness = json!({
        "resolved_ids": ["t1"],
        "unresolved_ids": ["t2"],
        "empty_patch_ids": ["t3"],
        "error_ids": ["t4"],
    })
    .to_string();
    let results = harness_results(&harness, "h.json");
    let report = Report::build_with(&trajs, Some(&results), &options(&[1], None));
    let r = rates(&report);
    // Empty: t3 only, 1/4. Applicable: t1 and t2, 2/4.
    assert_eq!(r["empty_patch"]["unknown"], 0);
    assert_eq!(r["empty_patch"]["rate"], json!(0.25));
    assert_eq!(r["applicable_patch"]["unknown"], 0);
    assert_eq!(r["applicable_patch"]["rate"], json!(0.5));
    let md = render(&report, ReportFormat::Md);
    assert!(
        md.contains("| empty patch | 25.0 (1/4) |")
            && md.contains("| applicable patch | 50.0 (2/4) |"),
        "{md}"
    );
}

fn rules(nudges: bool) -> Rules {
    Rules {
        nudges,
        max_steps: 100,
        loop_rule: asap_proxy::policy::LoopRule::Degenerate,
        loop_window: 10,
        max_unparsable: 5,
    }
}

fn with_protocol(
    label: &str,
    task: &str,
    format: &str,
    rules: Option<Rules>,
    model: &str,
) -> Trajectory {
    Trajectory {
        format: format.into(),
        protocol: SessionProtocol {
            prefix_k: Some(0),
            rules,
            backend_model: Some(model.into()),
            proxy_version: Some("0.9.0".into()),
            ..SessionProtocol::default()
        },
        ..traj(label, task, 0)
    }
}

/// The protocol of each label, the differences between labels (not the backend model), and
/// a protocol mixed inside one label.
#[test]
fn protocols_differ_between_labels_and_mix_inside_one() {
    // a and b differ only in the backend model: comparable.
    let same = vec![
        with_protocol("a", "t1", "markdown_xml", Some(rules(true)), "ckpt-100"),
        with_protocol("b", "t1", "markdown_xml", Some(rules(true)), "ckpt-200"),
    ];
    let report = Report::build_with(&same, None, &options(&[1], None));
    assert_eq!(report.protocol_differences, Vec::<String>::new());
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);

    // c: another format and the nudges off; d: one trace from before `rules` was recorded
    // and one with it (mixed inside d).
    let mut trajs = same;
    trajs.push(with_protocol(
        "c",
        "t1",
        "xml",
        Some(rules(false)),
        "ckpt-100",
    ));
    trajs.push(with_protocol("d", "t1", "markdown_xml", None, "ckpt-100"));
    trajs.push(with_protocol(
        "d",
        "t2",
        "markdown_xml",
        Some(rules(true)),
        "ckpt-100",
    ));
    let report = Report::build_with(&trajs, None, &options(&[1], None));
    let on = "nudges on, step cap 100, loop degenerate/10, unparsable streak 5";
    let off = "nudges off, step cap 100, loop degenerate/10, unparsable streak 5";
    assert_eq!(
        report.protocol_differences,
        [
            "format: a markdown_xml; c xml".to_string(),
            format!("rules: a {on}; c {off}"),
            format!("rules: a {on}; d {on} + {}", "unknown"),
        ]
    );
    let d = report.label("d").unwrap();
    assert_eq!(d.protocol.rules.get("unknown"), Some(&1));
    assert!(
        report.warnings.contains(&format!(
            "d: mixed protocol inside the label: rules: {on} 1, unknown 1"
        )),
        "{:?}",
        report.warnings
    );
    let md = render(&report, ReportFormat::Md);
    assert!(md.contains("## Protocol\n"), "{md}");
    assert!(
        md.contains(&format!(
            "| rules | {on} | {on} | {off} | {on} (1), unknown (1) |"
        )),
        "{md}"
    );
    assert!(md.contains("| backend model | ckpt-100 | ckpt-200 | ckpt-100 | ckpt-100 |"));
    let value: Value = serde_json::from_str(&render(&report, ReportFormat::Json)).unwrap();
    assert_eq!(value["labels"][2]["protocol"]["format"], json!({"xml": 1}));
    assert_eq!(value["protocol_differences"].as_array().unwrap().len(), 3);

    // The first label (by name) has no trajectory of the task set: b and c are still compared
    // (they differ in format and rules), not skipped.
    let three = vec![
        with_protocol("a", "t9", "markdown_xml", Some(rules(true)), "m"),
        with_protocol("b", "t1", "markdown_xml", Some(rules(true)), "m"),
        with_protocol("c", "t1", "xml", Some(rules(false)), "m"),
    ];
    let report = Report::build_with(&three, None, &options(&[1], Some(&["t1"])));
    assert_eq!(
        report.protocol_differences,
        [
            "format: b markdown_xml; c xml".to_string(),
            format!("rules: b {on}; c {off}"),
        ]
    );
}

/// Results without a label apply to every label: with two labels that is usually a file of
/// one label's runs given without `LABEL=`, so it is warned about.
#[test]
fn unlabelled_results_shared_by_several_labels_are_warned_about() {
    let trajs = vec![traj("a", "t1", 0), traj("b", "t1", 0)];
    let results = Results::from_entries([entry(None, "t1", Some(0), true)]);
    let report = Report::build_with(&trajs, Some(&results), &options(&[1], None));
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.starts_with("results without a label apply to every label (a, b)")),
        "{:?}",
        report.warnings
    );
    // Labelled results, or one label: no such warning.
    let results = Results::from_entries([
        entry(Some("a"), "t1", Some(0), true),
        entry(Some("b"), "t1", Some(0), false),
        entry(Some("z"), "t7", Some(0), true),
    ]);
    let report = Report::build_with(&trajs, Some(&results), &options(&[1], None));
    assert!(!report
        .warnings
        .iter()
        .any(|w| w.contains("without a label")));
    // A label only the results know is ignored, warned about, and adds no task.
    assert_eq!(report.task_set, ["t1"]);
    assert!(report
        .warnings
        .contains(&"results name label(s) with no trajectory, ignored: z".to_string()));
}

// ---------------------------------------------------------------------------------------------
// Binary: traces recorded through the proxy, then `asap-proxy report`

/// Records one single-turn session per `(task, run)` through a proxy with `--label label`,
/// prefix K 0 (so prefix coverage is `none` whatever the task), and `tweak` applied.
pub(crate) async fn record(
    label: &str,
    runs: &[(&str, usize)],
    tweak: impl FnOnce(&mut asap_proxy::config::ServeArgs),
) -> Proxy {
    let script = runs
        .iter()
        .map(|_| Scripted::text("Look around.\n<bash>ls /testbed</bash>\n"))
        .collect();
    let (_backend, proxy) = serve_with(script, |a| {
        a.label = Some(label.into());
        a.prompt.prefix_k = Some(0);
        tweak(a);
    })
    .await;
    let body = request("swe-agent-1");
    for (task, run) in runs {
        let resp = proxy
            .client
            .post(proxy.url())
            .header("x-asap-task", *task)
            .header("x-asap-run", run.to_string())
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{label} {task} {run}");
    }
    assert_eq!(proxy.trace_files().len(), runs.len(), "one session per run");
    proxy
}

/// Runs `asap-proxy report` with `args`: (exit code, stdout, stderr).
fn report_bin(args: &[&dyn AsRef<std::ffi::OsStr>]) -> (Option<i32>, String, String) {
    let out = crate::util::cli::run(&[&[&"report" as &dyn AsRef<std::ffi::OsStr>], args].concat());
    (out.code, out.stdout, out.stderr)
}

/// Two checkpoints recorded through real proxies; ckpt-b lacks t3 and has a result-only run;
/// ckpt-a has a trajectory (and a result) of t9, outside `--tasks`.
#[tokio::test]
async fn report_binary_scores_both_labels_over_the_task_set() {
    let a = record(
        "ckpt-a",
        &[
            ("t1", 0),
            ("t1", 1),
            ("t2", 0),
            ("t2", 1),
            ("t3", 0),
            ("t3", 1),
            ("t9", 0),
        ],
        |_| {},
    )
    .await;
    let b = record(
        "ckpt-b",
        &[("t1", 0), ("t1", 1), ("t2", 0), ("t2", 1)],
        |_| {},
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let rows = [
        // ckpt-a: c = 2, 1, 0 over t1..t3 (2 runs each). No patch columns: the unresolved
        // runs' patches are unknown.
        json!({"label": "ckpt-a", "instance_id": "t1", "run": 0, "resolved": true}),
        json!({"label": "ckpt-a", "instance_id": "t1", "run": 1, "resolved": true}),
        json!({"label": "ckpt-a", "instance_id": "t2", "run": 0, "resolved": true}),
        json!({"label": "ckpt-a", "instance_id": "t2", "run": 1, "resolved": false}),
        json!({"label": "ckpt-a", "instance_id": "t3", "run": 0, "resolved": false}),
        json!({"label": "ckpt-a", "instance_id": "t3", "run": 1, "resolved": false}),
        json!({"label": "ckpt-a", "instance_id": "t9", "run": 0, "resolved": true}),
        // ckpt-b: t1 0 of 2, t2 2 of 2 plus run 2 (no trajectory) unresolved; patch columns
        // on every row.
        json!({"label": "ckpt-b", "instance_id": "t1", "run": 0, "resolved": false,
               "empty_patch": true}),
        json!({"label": "ckpt-b", "instance_id": "t1", "run": 1, "resolved": false,
               "empty_patch": false, "applied": false}),
        json!({"label": "ckpt-b", "instance_id": "t2", "run": 0, "resolved": true}),
        json!({"label": "ckpt-b", "instance_id": "t2", "run": 1, "resolved": true}),
        json!({"label": "ckpt-b", "instance_id": "t2", "run": 2, "resolved": false,
               "empty_patch": false, "applied": true}),
    ];
    let results = dir.path().join("results.jsonl");
    let text: Vec<String> = rows.iter().map(Value::to_string).collect();
    std::fs::write(&results, text.join("\n") + "\n").unwrap();
    let tasks = dir.path().join("tasks.txt");
    std::fs::write(&tasks, "# the comparison's tasks\nt1\n\n  t2  \nt3\n").unwrap();
    let (la, lb) = (a.log_dir.path(), b.log_dir.path());
    let common: [&dyn AsRef<std::ffi::OsStr>; 8] = [
        &la,
        &lb,
        &"--results",
        &results,
        &"--tasks",
        &tasks,
        &"--k",
        &"1,2",
    ];

    let mut args = common.to_vec();
    args.extend([&"--format" as &dyn AsRef<std::ffi::OsStr>, &"json"]);
    let (code, stdout, stderr) = report_bin(&args);
    assert_eq!(code, Some(0), "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["task_set"], json!(["t1", "t2", "t3"]));
    assert_eq!(report["task_set_source"], "tasks_file");
    assert_eq!(report["protocol_differences"], json!([]));
    let (ja, jb) = (&report["labels"][0], &report["labels"][1]);
    assert_eq!(
        (ja["label"].as_str(), jb["label"].as_str()),
        (Some("ckpt-a"), Some("ckpt-b"))
    );

    // ckpt-a: t9 left out. Pass@1 = (1 + 1/2 + 0) / 3 = 0.5; Pass@2 = (1 + 1 + 0) / 3 = 2/3.
    assert_eq!(
        (ja["tasks"].as_u64(), ja["runs"].as_u64()),
        (Some(3), Some(6))
    );
    assert!(close(ja["pass_at_k"]["1"].as_f64().unwrap(), 0.5), "{ja}");
    assert!(
        close(ja["pass_at_k"]["2"].as_f64().unwrap(), 2.0 / 3.0),
        "{ja}"
    );
    assert_eq!(ja["intersection"]["solved"], 1);
    assert_eq!(ja["missing_tasks"], json!([]));
    // Empty patch: the 3 resolved runs had one; the 3 unresolved runs' rows do not say.
    assert_eq!(
        ja["behaviour"]["empty_patch"],
        json!({"unit": "trajectories", "count": 0, "total": 6, "unknown": 3, "rate": null})
    );
    assert_eq!(ja["behaviour"]["applicable_patch"]["unknown"], 3);

    // ckpt-b: t1 n = 2 c = 0; t2 n = 3 (run 2 from the results) c = 2; t3 missing, n = 3
    // (the label's most) c = 0.
    assert_eq!(
        jb["task_counts"],
        json!([
            {"instance_id": "t1", "n": 2, "c": 0},
            {"instance_id": "t2", "n": 3, "c": 2},
            {"instance_id": "t3", "n": 3, "c": 0},
        ])
    );
    assert_eq!(jb["missing_tasks"], json!(["t3"]));
    assert_eq!(jb["result_only_runs"], json!([["t2", 2]]));
    // Pass@1 = (0 + 2/3 + 0) / 3 = 2/9 ≈ 0.222 (over t1, t2 without run 2: 0.5).
    assert!(
        close(jb["pass_at_k"]["1"].as_f64().unwrap(), 2.0 / 9.0),
        "{jb}"
    );
    // Pass@2: t2 = 1 − C(1,2)/C(3,2) = 1: (0 + 1 + 0) / 3 = 1/3 (over two tasks: 0.5).
    assert!(
        close(jb["pass_at_k"]["2"].as_f64().unwrap(), 1.0 / 3.0),
        "{jb}"
    );
    // Intersection@n: t2 resolved in 2 of its 3 runs: 0 of 3 (without run 2: 1 of 3).
    assert_eq!(
        jb["intersection"],
        json!({"solved": 0, "tasks": 3, "fraction": 0.0})
    );
    assert_eq!(
        (jb["runs"].as_u64(), jb["min_runs"].as_u64()),
        (Some(4), Some(2))
    );
    // Patches: t1 run 0 empty; t1 run 1 not applied; t2 runs resolved; run 2 has no
    // trajectory and is not a behaviour case. Empty 1/4, applicable 2/4, all known.
    assert_eq!(jb["behaviour"]["empty_patch"]["rate"], json!(0.25));
    assert_eq!(jb["behaviour"]["applicable_patch"]["rate"], json!(0.5));
    assert_eq!(jb["behaviour"]["resolved"]["rate"], json!(0.5));

    // Warnings, on stderr and in the document.
    let warnings: Vec<&str> = report["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    for expected in [
        "1 trajectories are of tasks outside --tasks: left out of every number",
        "ckpt-b: 1 task(s) of the task set have no trajectory and no result: counted as \
         resolved in none of their runs: t3",
        "ckpt-b: 1 run(s) have a result but no trajectory: counted for Pass@k and \
         Intersection@n, missing from the behaviours: t2 run 2",
    ] {
        assert!(warnings.contains(&expected), "{expected}\n{warnings:?}");
        assert!(stderr.contains(&format!("warning: {expected}")), "{stderr}");
    }
    // The results' own warning is in the report too, not only on standard error.
    let outside = "1 instance id(s) in the results are outside --tasks: ignored";
    assert!(warnings.contains(&outside), "{warnings:?}");
    assert!(stderr.contains(&format!("warning: {outside}")), "{stderr}");
    assert_eq!(warnings.len(), 4, "{warnings:?}");

    // Markdown: the same numbers.
    let (code, md, _) = report_bin(&common);
    assert_eq!(code, Some(0));
    assert!(md.contains("Task set: 3 tasks (from --tasks)"), "{md}");
    assert!(
        md.contains("| ckpt-a | 3 | 6 | 2 | 50.0 | 66.7 | 1/3 (33.3%) | 0 | 0 | 0 |"),
        "{md}"
    );
    assert!(
        md.contains("| ckpt-b | 3 | 4 | 2–3 | 22.2 | 33.3 | 0/3 (0.0%) | 0 | 1 | 1 |"),
        "{md}"
    );
    assert!(
        md.contains("| empty patch | unknown (0/3 known, 3 unknown) | 25.0 (1/4) |"),
        "{md}"
    );
    assert!(md.contains("## Warnings\n"), "{md}");
    assert!(!md.contains("## Protocol differences"), "{md}");
    assert!(
        md.contains("| prefix coverage | task 0.0%, demonstration 0.0%, none 100.0% |"),
        "{md}"
    );

    // Without --tasks: the task set is every id seen (t9 too), so ckpt-b lacks t3 and t9.
    let (code, stdout, _) = report_bin(&[&la, &lb, &"--results", &results, &"--format", &"json"]);
    assert_eq!(code, Some(0));
    let seen: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(seen["task_set"], json!(["t1", "t2", "t3", "t9"]));
    assert_eq!(seen["task_set_source"], "seen");
    assert_eq!(seen["labels"][1]["missing_tasks"], json!(["t3", "t9"]));
    // ckpt-a with t9 (1 run, resolved): Pass@1 = (1 + 1/2 + 0 + 1) / 4 = 0.625.
    assert_eq!(seen["labels"][0]["pass_at_k"]["1"], json!(0.625));

    // A task set of t3 alone, which ckpt-b never ran: ckpt-b is still in the report, with
    // t3 missing (Pass@1 0), not dropped.
    let only_t3 = dir.path().join("t3.txt");
    std::fs::write(&only_t3, "t3\n").unwrap();
    let (code, stdout, stderr) = report_bin(&[
        &la,
        &lb,
        &"--results",
        &results,
        &"--tasks",
        &only_t3,
        &"--format",
        &"json",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let t3: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(t3["labels"][1]["label"], "ckpt-b", "{t3}");
    assert_eq!(t3["labels"][1]["missing_tasks"], json!(["t3"]));
    assert_eq!(t3["labels"][1]["pass_at_k"]["1"], json!(0.0));
    assert_eq!(
        t3["labels"][0]["pass_at_k"]["1"],
        json!(0.0),
        "ckpt-a: t3 0 of 2"
    );

    // A task file with no id, and one that cannot be read: usage errors.
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "# nothing yet\n\n").unwrap();
    let (code, _, stderr) = report_bin(&[&la, &"--tasks", &empty]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("no instance ids"), "{stderr}");
    let (code, _, stderr) = report_bin(&[&la, &"--tasks", &dir.path().join("absent.txt")]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("reading --tasks"), "{stderr}");
}

/// A label recorded with the nudges off, and one in another format: `report` refuses to
/// compare it with the others unless allowed, and `--pair` compares only the pair.
#[tokio::test]
async fn report_binary_refuses_a_protocol_mismatch_unless_allowed() {
    let runs = [("t1", 0), ("t2", 0)];
    let a = record("ckpt-a", &runs, |_| {}).await;
    let b = record("ckpt-b", &runs, |_| {}).await;
    let c = record("ckpt-c", &runs, |a| a.nudges = Some(false)).await;
    let x = record("ckpt-x", &runs, |a| {
        a.prompt.format = Some(asap_proxy::render::Format::Xml)
    })
    .await;
    let (la, lb, lc, lx) = (
        a.log_dir.path(),
        b.log_dir.path(),
        c.log_dir.path(),
        x.log_dir.path(),
    );
    let on = "nudges on, step cap 100, loop degenerate/10, unparsable streak 5";
    let off = "nudges off, step cap 100, loop degenerate/10, unparsable streak 5";

    // The same protocol: fine.
    let (code, _, stderr) = report_bin(&[&la, &lb]);
    assert_eq!(code, Some(0), "{stderr}");

    // The nudges off in ckpt-c: exit 2, naming the rules that differ.
    let (code, stdout, stderr) = report_bin(&[&la, &lb, &lc]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains(&format!("rules: ckpt-a {on}; ckpt-c {off}"))
            && stderr.contains("--allow-protocol-mismatch"),
        "{stderr}"
    );
    assert!(!stderr.contains("ckpt-b"), "a and b match: {stderr}");

    // Another format: named as a format difference.
    let (code, _, stderr) = report_bin(&[&la, &lx]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("format: ckpt-a markdown_xml; ckpt-x xml"),
        "{stderr}"
    );

    // Allowed: exit 0, the differences above the tables, in JSON too.
    let (code, md, stderr) = report_bin(&[&la, &lc, &lx, &"--allow-protocol-mismatch"]);
    assert_eq!(code, Some(0), "{stderr}");
    let diffs = md.find("## Protocol differences").expect(&md);
    assert!(diffs < md.find("## Protocol\n").unwrap() && diffs < md.find("## Summary").unwrap());
    assert!(
        md.contains(&format!("- rules: ckpt-a {on}; ckpt-c {off}\n")),
        "{md}"
    );
    assert!(
        md.contains("- format: ckpt-a markdown_xml; ckpt-x xml\n"),
        "{md}"
    );
    assert!(
        stderr.contains("warning: comparing labels with different protocols"),
        "{stderr}"
    );
    let (code, stdout, _) =
        report_bin(&[&la, &lc, &"--allow-protocol-mismatch", &"--format", &"json"]);
    assert_eq!(code, Some(0));
    let value: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        value["protocol_differences"],
        json!([format!("rules: ckpt-a {on}; ckpt-c {off}")])
    );
    assert_eq!(value["labels"][1]["protocol"]["rules"], json!({off: 2}));

    // --pair of two matching labels: the others' protocols do not matter.
    let (code, md, stderr) = report_bin(&[&la, &lb, &lc, &lx, &"--pair", &"ckpt-a", &"ckpt-b"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(md.contains("## Pair: ckpt-a → ckpt-b"), "{md}");
    assert!(!md.contains("## Protocol differences"), "{md}");
    // --pair of a mismatched pair: refused.
    let (code, _, stderr) = report_bin(&[&la, &lb, &lc, &"--pair", &"ckpt-b", &"ckpt-c"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("rules: ckpt-b {on}; ckpt-c {off}")),
        "{stderr}"
    );
}

/// The prefix set is part of the protocol (the paper gives every model the same prefixes):
/// each session records its digest; the same prefixes in another file layout are the same
/// set, a changed step is another, and `report` refuses to compare labels across sets.
#[tokio::test]
async fn labels_run_with_different_prefix_sets_are_a_protocol_mismatch() {
    let fixture = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/prefixes/tasks.jsonl"),
    )
    .unwrap();
    let dirs = tempfile::tempdir().unwrap();
    let one = dirs.path().join("one");
    let split = dirs.path().join("split");
    let changed = dirs.path().join("changed");
    for d in [&one, &split, &changed] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(one.join("tasks.jsonl"), &fixture).unwrap();
    // The same two prefixes, one file each, in the other order.
    for (i, line) in fixture.lines().rev().enumerate() {
        std::fs::write(split.join(format!("p{i}.json")), line).unwrap();
    }
    let edited = fixture.replacen("Reference step one.", "Reference step 1.", 1);
    assert_ne!(edited, fixture);
    std::fs::write(changed.join("tasks.jsonl"), edited).unwrap();

    let runs = [("t1", 0)];
    let with = |dir: std::path::PathBuf| {
        move |a: &mut asap_proxy::config::ServeArgs| {
            a.prompt.prefixes = vec![dir];
            a.prompt.prefix_k = Some(3);
        }
    };
    let a = record("ckpt-a", &runs, with(one.clone())).await;
    let b = record("ckpt-b", &runs, with(split)).await;
    let c = record("ckpt-c", &runs, with(changed)).await;

    let expected = asap_proxy::prefix::PrefixStore::load(&[one], 3)
        .unwrap()
        .id();
    assert_eq!(expected.prefixes, 2);
    let session = &a.first_trace()[0]["data"];
    assert_eq!(
        session["prefix_set"]["sha256"],
        json!(expected.sha256),
        "{session}"
    );
    assert_eq!(session["prefix_set"]["prefixes"], json!(2));
    let name = format!("{} (2 prefixes)", &expected.sha256[..12]);

    let (la, lb, lc) = (a.log_dir.path(), b.log_dir.path(), c.log_dir.path());
    let (code, md, stderr) = report_bin(&[&la, &lb]);
    assert_eq!(code, Some(0), "same set, other files: {stderr}");
    assert!(md.contains(&name), "{md}");
    let (code, _, stderr) = report_bin(&[&la, &lc]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("prefix set: ckpt-a {name}; ckpt-c ")),
        "{stderr}"
    );
}
