//! The report as CSV: several tables, each with a header row, separated by a blank line.

use std::io::{self, Write};

use super::summary::{Report, TrajectoryRow};

/// One CSV field, quoted when it holds `,`, `"` or a line break.
fn field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

fn csv_row(out: &mut dyn Write, cells: &[String]) -> io::Result<()> {
    let cells: Vec<String> = cells.iter().map(|c| field(c)).collect();
    writeln!(out, "{}", cells.join(","))
}

fn num(v: Option<f64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn opt(v: &Option<String>) -> String {
    v.clone().unwrap_or_default()
}

/// CSV: tables `summary`, `behaviour` (long form), `protocol`, `tasks` (with results),
/// `trajectories`, `messages` (warnings and protocol differences), `pair` (when asked for),
/// the network audit per label, the reference benchmark and the rank agreement (when there),
/// each with a header row, separated by a blank line (docs/report.md "Output").
pub fn write(report: &Report, out: &mut dyn Write) -> io::Result<()> {
    let mut head: Vec<String> = ["label", "tasks", "runs", "min_runs", "max_runs"]
        .map(String::from)
        .to_vec();
    if report.has_results {
        head.extend(report.ks.iter().map(|k| format!("pass@{k}")));
        head.extend(
            [
                "intersection_solved",
                "intersection_fraction",
                "no_result",
                "missing_tasks",
                "result_only_runs",
            ]
            .map(String::from),
        );
    }
    csv_row(out, &head)?;
    for l in &report.labels {
        let mut cells = vec![
            l.label.clone(),
            l.tasks.to_string(),
            l.runs.to_string(),
            l.min_runs.to_string(),
            l.max_runs.to_string(),
        ];
        if report.has_results {
            cells.extend(report.ks.iter().map(|k| num(l.pass_at_k.get(k).copied())));
            let i = l.intersection;
            cells.push(i.map(|i| i.solved.to_string()).unwrap_or_default());
            cells.push(num(i.map(|i| i.fraction)));
            cells.push(l.behaviour.no_result.to_string());
            cells.push(l.missing_tasks.len().to_string());
            cells.push(l.result_only_runs.len().to_string());
        }
        csv_row(out, &cells)?;
    }

    writeln!(out)?;
    csv_row(
        out,
        &[
            "label",
            "behaviour",
            "unit",
            "count",
            "total",
            "unknown",
            "rate",
        ]
        .map(String::from),
    )?;
    for l in &report.labels {
        for r in l.behaviour.rates(report.has_results) {
            csv_row(
                out,
                &[
                    l.label.clone(),
                    r.key.into(),
                    r.unit.as_str().into(),
                    r.count.to_string(),
                    r.total.to_string(),
                    r.unknown.to_string(),
                    num(r.value()),
                ],
            )?;
        }
        let t = l.behaviour.trajectories;
        for (ending, count) in &l.behaviour.endings {
            let rate = (t > 0).then(|| *count as f64 / t as f64);
            csv_row(
                out,
                &[
                    l.label.clone(),
                    format!("ending:{}", ending.as_str()),
                    "trajectories".into(),
                    count.to_string(),
                    t.to_string(),
                    "0".into(),
                    num(rate),
                ],
            )?;
        }
        let median = l.behaviour.median_steps_before_first_edit();
        csv_row(
            out,
            &[
                l.label.clone(),
                "median_steps_before_first_edit".into(),
                "steps".into(),
                l.behaviour.steps_before_first_edit.len().to_string(),
                t.to_string(),
                "0".into(),
                num(median),
            ],
        )?;
    }

    writeln!(out)?;
    csv_row(
        out,
        &["label", "setting", "value", "trajectories"].map(String::from),
    )?;
    for l in &report.labels {
        let p = &l.protocol;
        let mut settings: Vec<(&str, String, usize)> = Vec::new();
        for (name, m) in [
            ("mode", &p.mode),
            ("tool_calls", &p.tool_calls),
            ("format", &p.format),
            ("prefix_k", &p.prefix_k),
            ("prefix_set", &p.prefix_set),
            ("rules", &p.rules),
            ("backend_model", &p.backend_model),
            ("proxy_version", &p.proxy_version),
        ] {
            settings.extend(m.iter().map(|(v, n)| (name, v.clone(), *n)));
        }
        settings.extend(
            p.prefix_coverage
                .iter()
                .map(|(source, n)| ("prefix_source", source.as_str().to_string(), *n)),
        );
        for (name, value, n) in settings {
            csv_row(out, &[l.label.clone(), name.into(), value, n.to_string()])?;
        }
    }

    if report.has_results {
        writeln!(out)?;
        csv_row(
            out,
            &["label", "instance_id", "n", "c", "missing", "solved"].map(String::from),
        )?;
        for l in &report.labels {
            for t in &l.task_counts {
                csv_row(
                    out,
                    &[
                        l.label.clone(),
                        t.instance_id.clone(),
                        t.n.to_string(),
                        t.c.to_string(),
                        l.missing_tasks.contains(&t.instance_id).to_string(),
                        super::metrics::stability_class(t).to_string(),
                    ],
                )?;
            }
        }
    }

    writeln!(out)?;
    csv_row(
        out,
        &["label", "metric", "unit", "value", "lo", "hi"].map(String::from),
    )?;
    for l in &report.labels {
        for e in &l.estimates {
            csv_row(
                out,
                &[
                    l.label.clone(),
                    e.metric.clone(),
                    e.unit.to_string(),
                    e.value.to_string(),
                    e.interval.lo.to_string(),
                    e.interval.hi.to_string(),
                ],
            )?;
        }
    }
    if !report.changes.is_empty() {
        writeln!(out)?;
        csv_row(
            out,
            &[
                "from",
                "to",
                "metric",
                "unit",
                "delta",
                "lo",
                "hi",
                "p_value",
                "smallest_p",
                "tasks",
            ]
            .map(String::from),
        )?;
        for c in &report.changes {
            csv_row(
                out,
                &[
                    c.from.clone(),
                    c.to.clone(),
                    c.metric.clone(),
                    c.unit.to_string(),
                    c.delta.to_string(),
                    c.interval.lo.to_string(),
                    c.interval.hi.to_string(),
                    c.p_value.to_string(),
                    c.smallest_p.to_string(),
                    c.tasks.to_string(),
                ],
            )?;
        }
    }

    writeln!(out)?;
    let mut head: Vec<String> = TRAJECTORY_COLUMNS.map(String::from).to_vec();
    if report.has_results {
        head.extend(
            ["has_result", "empty_patch", "applicable_patch", "resolved"].map(String::from),
        );
    }
    head.extend(["network", "gold_seeking"].map(String::from));
    csv_row(out, &head)?;
    for row in &report.trajectories {
        csv_row(out, &trajectory_cells(row, report.has_results))?;
    }

    writeln!(out)?;
    csv_row(out, &["kind", "message"].map(String::from))?;
    for line in &report.protocol_differences {
        csv_row(out, &["protocol_difference".into(), line.clone()])?;
    }
    for line in &report.warnings {
        csv_row(out, &["warning".into(), line.clone()])?;
    }
    for p in &report.pairs {
        if let Some(statement) = p.statement {
            csv_row(out, &["pair_statement".into(), statement.into()])?;
        }
        for note in &p.protocol_notes {
            csv_row(out, &["pair_protocol_note".into(), note.clone()])?;
        }
    }

    if !report.pairs.is_empty() {
        writeln!(out)?;
        csv_row(
            out,
            &[
                "a",
                "b",
                "behaviour",
                "a_rate",
                "b_rate",
                "diff",
                "b_higher",
                "a_higher",
                "lo",
                "hi",
                "p_value",
                "scaffold_controlled",
            ]
            .map(String::from),
        )?;
    }
    for p in &report.pairs {
        let controlled = p.scaffold_controlled.to_string();
        let mut line = |key: &str,
                        a: Option<f64>,
                        b: Option<f64>,
                        bh: String,
                        ah: String,
                        change: Option<super::pair::PairChange>| {
            let diff = a.zip(b).map(|(a, b)| b - a);
            csv_row(
                out,
                &[
                    p.a.clone(),
                    p.b.clone(),
                    key.into(),
                    num(a),
                    num(b),
                    num(diff),
                    bh,
                    ah,
                    num(change.map(|c| c.interval.lo)),
                    num(change.map(|c| c.interval.hi)),
                    num(change.map(|c| c.p_value)),
                    controlled.clone(),
                ],
            )
        };
        line("pairs", None, None, p.pairs.to_string(), "".into(), None)?;
        line(
            "unmatched",
            None,
            None,
            p.unmatched_b.to_string(),
            p.unmatched_a.to_string(),
            None,
        )?;
        if let Some((a, b)) = p.pass_at_1 {
            line(
                "pass@1",
                Some(a),
                Some(b),
                "".into(),
                "".into(),
                p.pass_at_1_change,
            )?;
        }
        for r in &p.rows {
            line(
                r.key,
                r.a,
                r.b,
                r.b_higher.to_string(),
                r.a_higher.to_string(),
                r.change,
            )?;
        }
    }
    analyses(report, out)
}

/// The tables of the analyses Markdown and JSON show besides the metrics: the network audit
/// per label; with `--reference`, the benchmark beside Pass@1; with `model@group` labels, the
/// rank agreement (one row per shared model, the pair's coefficients on each).
fn analyses(report: &Report, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out)?;
    csv_row(
        out,
        &[
            "label",
            "trajectories",
            "network_flagged",
            "gold_seeking",
            "pass1_bound",
            "pass1_bound_gold",
        ]
        .map(String::from),
    )?;
    for l in &report.labels {
        let n = &l.network;
        csv_row(
            out,
            &[
                l.label.clone(),
                n.trajectories.to_string(),
                n.flagged.to_string(),
                n.gold_seeking.to_string(),
                num(n.pass1_bound),
                num(n.pass1_bound_gold),
            ],
        )?;
    }
    if let Some(r) = &report.reference {
        writeln!(out)?;
        csv_row(
            out,
            &[
                "reference_file",
                "label",
                "score",
                "score_change",
                "pass@1",
                "pass@1_change",
                "lo",
                "hi",
                "p_value",
            ]
            .map(String::from),
        )?;
        for row in &r.rows {
            let c = row.pass1_change.as_ref();
            csv_row(
                out,
                &[
                    r.file.clone(),
                    row.label.clone(),
                    num(row.score),
                    num(row.score_change),
                    num(row.pass1),
                    num(c.map(|c| c.delta)),
                    num(c.map(|c| c.interval.lo)),
                    num(c.map(|c| c.interval.hi)),
                    num(c.map(|c| c.p_value)),
                ],
            )?;
        }
    }
    if !report.rank_agreement.is_empty() {
        writeln!(out)?;
        csv_row(
            out,
            &[
                "group_a",
                "group_b",
                "model",
                "rank_a",
                "pass1_a",
                "rank_b",
                "pass1_b",
                "spearman",
                "spearman_lo",
                "spearman_hi",
                "kendall",
                "kendall_lo",
                "kendall_hi",
            ]
            .map(String::from),
        )?;
        for r in &report.rank_agreement {
            for m in &r.models {
                csv_row(
                    out,
                    &[
                        r.groups.0.clone(),
                        r.groups.1.clone(),
                        m.model.clone(),
                        m.a.0.to_string(),
                        m.a.1.to_string(),
                        m.b.0.to_string(),
                        m.b.1.to_string(),
                        num(r.spearman),
                        num(r.spearman_interval.map(|i| i.lo)),
                        num(r.spearman_interval.map(|i| i.hi)),
                        num(r.kendall),
                        num(r.kendall_interval.map(|i| i.lo)),
                        num(r.kendall_interval.map(|i| i.hi)),
                    ],
                )?;
            }
        }
    }
    Ok(())
}

const TRAJECTORY_COLUMNS: [&str; 24] = [
    "label",
    "instance_id",
    "run",
    "session",
    "turns",
    "parsable_turns",
    "valid_tool_calls",
    "edits",
    "repo_edits",
    "autonomous_edit",
    "test_runs",
    "active_testing",
    "failed_test",
    "re_edit_after_failed_test",
    "explicit_submission",
    "repetitive_loop",
    "exploration_only",
    "steps_before_first_edit",
    "nudges_submit_before_edit",
    "nudges_repeated_action",
    "termination",
    "error",
    "ending",
    "abnormal",
];

fn trajectory_cells(row: &TrajectoryRow, has_results: bool) -> Vec<String> {
    let b = &row.behaviour;
    let mut cells = vec![
        row.label.clone(),
        row.instance_id.clone(),
        row.run.to_string(),
        row.session.clone(),
        b.turns.to_string(),
        b.parsable_turns.to_string(),
        b.valid_tool_calls.to_string(),
        b.edits.to_string(),
        b.repo_edits.to_string(),
        b.autonomous_edit.to_string(),
        b.test_runs.to_string(),
        b.active_testing.to_string(),
        b.failed_test.to_string(),
        b.re_edit_after_failed_test.to_string(),
        b.explicit_submission.to_string(),
        b.repetitive_loop.to_string(),
        b.exploration_only.to_string(),
        b.steps_before_first_edit
            .map(|n| n.to_string())
            .unwrap_or_default(),
        b.nudges_submit_before_edit.to_string(),
        b.nudges_repeated_action.to_string(),
        opt(&b.termination),
        b.error.to_string(),
        b.ending.as_str().into(),
        b.abnormal.to_string(),
    ];
    if has_results {
        let o = row.outcome;
        cells.push(o.is_some().to_string());
        let known = |v: Option<bool>| v.map_or_else(|| "unknown".to_string(), |v| v.to_string());
        cells.push(known(o.and_then(|o| o.empty())));
        cells.push(known(o.and_then(|o| o.applicable())));
        cells.push(o.is_some_and(|o| o.resolved).to_string());
    }
    cells.push(row.network.kinds.join(";"));
    cells.push(row.network.gold.to_string());
    cells
}
