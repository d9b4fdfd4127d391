//! The report as Markdown (default), CSV or JSON. Column meanings are in `docs/report.md`.

use std::io::{self, Write};

use serde_json::{json, Map, Value};

use super::behaviour::{Ending, Rate};
use super::summary::{LabelSummary, Report};
use super::ReportFormat;

/// Writes `report` in `format`.
///
/// Errors: the writer's.
pub fn write(report: &Report, format: ReportFormat, out: &mut dyn Write) -> io::Result<()> {
    match format {
        ReportFormat::Md => markdown(report, out),
        ReportFormat::Csv => super::csv::write(report, out),
        ReportFormat::Json => {
            serde_json::to_writer_pretty(&mut *out, &to_json(report))?;
            writeln!(out)
        }
    }
}

fn percent(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{:.1}", v * 100.0))
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// An interval in % (or signed points): `lo – hi`.
fn span(i: super::uncertainty::Interval, signed: bool) -> String {
    if signed {
        format!("{:+.1} – {:+.1}", i.lo * 100.0, i.hi * 100.0)
    } else {
        format!("{:.1} – {:.1}", i.lo * 100.0, i.hi * 100.0)
    }
}

/// A metric's value in its Markdown unit: % (points when `signed`) for a fraction, as is for
/// steps.
fn scaled(v: f64, unit: &str, signed: bool) -> String {
    let v = if unit == "steps" { v } else { v * 100.0 };
    if signed {
        format!("{v:+.1}")
    } else {
        format!("{v:.1}")
    }
}

/// [`span`] in the metric's unit.
fn span_in(i: super::uncertainty::Interval, unit: &str, signed: bool) -> String {
    if unit == "steps" {
        format!(
            "{} – {}",
            scaled(i.lo, unit, signed),
            scaled(i.hi, unit, signed)
        )
    } else {
        span(i, signed)
    }
}

/// `--reference`: the benchmark's score and ASAP's Pass@1 per label, each with its change from
/// the label before (docs/report.md "Against a reference benchmark").
fn reference_table(out: &mut dyn Write, report: &Report) -> std::io::Result<()> {
    let Some(r) = &report.reference else {
        return Ok(());
    };
    writeln!(
        out,
        "\n## Against a reference benchmark\n\n`{}`: its score (its own unit) and ASAP's \
         Pass@1 (%), each with its change from the label before; Pass@1's change with its 95 % \
         interval and p (\"Uncertainty\").\n",
        cell(&r.file)
    )?;
    table_head(
        out,
        &["label", "reference", "change", "Pass@1", "change (points)"].map(String::from),
    )?;
    let d = r.decimals;
    let num = |v: Option<f64>, signed: bool| match v {
        Some(v) if signed => format!("{v:+.d$}"),
        Some(v) => format!("{v:.d$}"),
        None => "–".to_string(),
    };
    for row in &r.rows {
        let change = row.pass1_change.as_ref().map_or_else(
            || "–".to_string(),
            |c| {
                format!(
                    "{:+.1} ({}, p {:.3})",
                    c.delta * 100.0,
                    span(c.interval, true),
                    c.p_value
                )
            },
        );
        table_row(
            out,
            &[
                cell(&row.label),
                num(row.score, false),
                num(row.score_change, true),
                percent(row.pass1),
                change,
            ],
        )?;
    }
    Ok(())
}

/// Rank agreement between the groups of `model@group` labels (docs/report.md "Rank
/// agreement").
fn rank_tables(out: &mut dyn Write, report: &Report) -> std::io::Result<()> {
    let coefficient = |v: Option<f64>, i: Option<super::uncertainty::Interval>| match (v, i) {
        (Some(v), Some(i)) => format!("{v:.2} ({:.2} – {:.2})", i.lo, i.hi),
        (Some(v), None) => format!("{v:.2}"),
        _ => "–".to_string(),
    };
    for r in &report.rank_agreement {
        let (ga, gb) = &r.groups;
        writeln!(
            out,
            "\n## Rank agreement: {} against {}\n\nModels ranked by Pass@1 in each group (1 = \
             best, ties share the mean rank); Spearman ρ {}, Kendall τ-b {} over {} models \
             (95 % intervals from bootstrap draws of the tasks).\n",
            cell(ga),
            cell(gb),
            coefficient(r.spearman, r.spearman_interval),
            coefficient(r.kendall, r.kendall_interval),
            r.models.len()
        )?;
        table_head(
            out,
            &[
                "model".to_string(),
                format!("rank @{}", cell(ga)),
                format!("Pass@1 @{}", cell(ga)),
                format!("rank @{}", cell(gb)),
                format!("Pass@1 @{}", cell(gb)),
                "moves".to_string(),
            ],
        )?;
        for m in &r.models {
            table_row(
                out,
                &[
                    cell(&m.model),
                    format!("{}", m.a.0),
                    format!("{:.1}", m.a.1 * 100.0),
                    format!("{}", m.b.0),
                    format!("{:.1}", m.b.1 * 100.0),
                    format!("{:+}", m.b.0 - m.a.0),
                ],
            )?;
        }
    }
    Ok(())
}

/// The network audit: per label the trajectories that attempted external access or sought the
/// task's upstream repository, the paper's worst-case Pass@1 bound, then the flagged
/// trajectories (docs/report.md "Network audit").
fn network_tables(out: &mut dyn Write, report: &Report) -> std::io::Result<()> {
    write!(
        out,
        "\n## Network audit\n\nExecuted shell commands that can reach the network (download, \
         package install, git remote, URL opened from code) or that seek the task's upstream \
         repository (gold-seeking)"
    )?;
    if report.has_results {
        write!(
            out,
            "; \"Pass@1 bound\": the points of Pass@1 that the flagged runs which resolved \
             their task contribute at most"
        )?;
    }
    writeln!(out, ".\n")?;
    let mut head = vec![
        "label".to_string(),
        "trajectories".into(),
        "external access".into(),
        "gold-seeking".into(),
    ];
    if report.has_results {
        head.extend(["Pass@1 bound (any)".into(), "Pass@1 bound (gold)".into()]);
    }
    table_head(out, &head)?;
    for l in &report.labels {
        let n = &l.network;
        let share = |c: usize| {
            if n.trajectories == 0 {
                "–".to_string()
            } else {
                format!("{c} ({:.2}%)", c as f64 * 100.0 / n.trajectories as f64)
            }
        };
        let mut cells = vec![
            cell(&l.label),
            n.trajectories.to_string(),
            share(n.flagged),
            share(n.gold_seeking),
        ];
        if report.has_results {
            let points =
                |v: Option<f64>| v.map_or_else(|| "–".into(), |v| format!("{:.2}", v * 100.0));
            cells.push(points(n.pass1_bound));
            cells.push(points(n.pass1_bound_gold));
        }
        table_row(out, &cells)?;
    }
    let flagged: Vec<_> = report
        .trajectories
        .iter()
        .filter(|t| t.network.any())
        .collect();
    if flagged.is_empty() {
        return Ok(());
    }
    writeln!(out, "\n### Flagged trajectories\n")?;
    table_head(
        out,
        &[
            "label",
            "instance_id",
            "run",
            "session",
            "kinds",
            "gold",
            "first command",
        ]
        .map(String::from),
    )?;
    for t in flagged {
        let first: String = t
            .network
            .commands
            .first()
            .map(|c| c.chars().take(100).collect())
            .unwrap_or_default();
        table_row(
            out,
            &[
                cell(&t.label),
                cell(&t.instance_id),
                t.run.to_string(),
                cell(&t.session),
                t.network.kinds.join(", "),
                if t.network.gold { "yes" } else { "no" }.into(),
                cell(&first),
            ],
        )?;
    }
    Ok(())
}

/// Each label's metrics with their 95 % intervals, and the change from each label to the next
/// with its paired interval and p-value (docs/report.md "Uncertainty").
fn uncertainty_tables(out: &mut dyn Write, report: &Report) -> std::io::Result<()> {
    use super::uncertainty::{LEVEL, RESAMPLES};
    writeln!(
        out,
        "\n## Uncertainty\n\n{:.0} % intervals from {RESAMPLES} bootstrap draws of the tasks \
         (a task keeps all its runs); values in % (the median steps before the first edit in \
         steps).\n",
        LEVEL * 100.0
    )?;
    table_head(
        out,
        &["label", "metric", "value", "interval"].map(String::from),
    )?;
    for l in &report.labels {
        for e in &l.estimates {
            table_row(
                out,
                &[
                    cell(&l.label),
                    e.metric.clone(),
                    scaled(e.value, e.unit, false),
                    span_in(e.interval, e.unit, false),
                ],
            )?;
        }
    }
    if report.changes.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\n### Change from each label to the next\n\nIn points (steps for the median); the interval from a paired \
         bootstrap over the common tasks, p from a paired sign-flip randomization test \
         ({RESAMPLES} draws each); \"smallest p\" is the least p the test can give with these \
         tasks (2/2^m, m the tasks whose values differ): when it is large, an interval that \
         excludes 0 is no evidence of a change.\n"
    )?;
    table_head(
        out,
        &[
            "from",
            "to",
            "metric",
            "change",
            "interval",
            "p",
            "smallest p",
            "tasks",
        ]
        .map(String::from),
    )?;
    for c in &report.changes {
        table_row(
            out,
            &[
                cell(&c.from),
                cell(&c.to),
                c.metric.clone(),
                scaled(c.delta, c.unit, true),
                span_in(c.interval, c.unit, true),
                format!("{:.3}", c.p_value),
                format!("{:.3}", c.smallest_p),
                c.tasks.to_string(),
            ],
        )?;
    }
    Ok(())
}

/// "Stable versus occasional": per label, the tasks resolved in every run, in some, in none
/// (docs/report.md), beside Pass@1 and the share resolved at least once.
fn stability_table(out: &mut dyn Write, report: &Report) -> std::io::Result<()> {
    writeln!(
        out,
        "\n## Stable versus occasional (tasks)\n\nEach task once, by its resolved runs c of n: \
         every run (c = n, Intersection@n), some runs (0 < c < n), none (c = 0). \
         \"at least once\" is every + some (Pass@n with k = each task's n).\n"
    )?;
    table_head(
        out,
        &[
            "label",
            "every run",
            "some runs",
            "none",
            "at least once",
            "Pass@1",
        ]
        .map(String::from),
    )?;
    for l in &report.labels {
        let Some(s) = &l.stability else { continue };
        let share = |c: usize| {
            if s.tasks == 0 {
                "–".to_string()
            } else {
                format!("{c} ({:.1}%)", c as f64 * 100.0 / s.tasks as f64)
            }
        };
        table_row(
            out,
            &[
                cell(&l.label),
                share(s.every),
                share(s.some),
                share(s.none),
                share(s.every + s.some),
                percent(l.pass_at_k.get(&1).copied()),
            ],
        )?;
    }
    Ok(())
}

fn runs_per_task(l: &LabelSummary) -> String {
    if l.min_runs == l.max_runs {
        l.min_runs.to_string()
    } else {
        format!("{}–{}", l.min_runs, l.max_runs)
    }
}

fn table_row(out: &mut dyn Write, cells: &[String]) -> io::Result<()> {
    writeln!(out, "| {} |", cells.join(" | "))
}

fn table_head(out: &mut dyn Write, head: &[String]) -> io::Result<()> {
    table_row(out, head)?;
    let align: Vec<String> = (0..head.len())
        .map(|i| if i == 0 { "---" } else { "--:" }.to_string())
        .collect();
    writeln!(out, "|{}|", align.join("|"))
}

/// Markdown: summary, behaviour, abnormal endings, nudges, and the pair when asked for.
fn markdown(report: &Report, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "# asap-proxy report\n")?;
    writeln!(
        out,
        "{} trajectories, {} labels. {}\n",
        report.trajectories.len(),
        report.labels.len(),
        if report.has_results {
            "Pass@k and rates in %; Pass@k is shown for k ≤ the fewest runs of a task (– otherwise)."
        } else {
            "No `--results`: resolution unknown, so no Pass@k or Intersection@n. Rates in %."
        }
    )?;
    writeln!(
        out,
        "Task set: {} tasks ({}). Every label is scored over all of them: a task a label \
         lacks counts as resolved in none of its runs.\n",
        report.task_set.len(),
        if report.task_set_source == "tasks_file" {
            "from --tasks"
        } else {
            "every instance id seen in the trajectories and results"
        }
    )?;
    if !report.protocol_differences.is_empty() {
        writeln!(
            out,
            "## Protocol differences\n\nThe labels compared below ran under different \
             protocols (allowed by --allow-protocol-mismatch):\n"
        )?;
        for line in &report.protocol_differences {
            writeln!(out, "- {}", cell(line))?;
        }
        writeln!(out)?;
    }
    if !report.warnings.is_empty() {
        writeln!(out, "## Warnings\n")?;
        for line in &report.warnings {
            writeln!(out, "- {}", cell(line))?;
        }
        writeln!(out)?;
    }
    writeln!(out, "## Protocol\n")?;
    table_head(out, &head_with("setting", report))?;
    type Setting = fn(&LabelSummary) -> String;
    let settings: [(&str, Setting); 9] = [
        ("mode", |l| counts(&l.protocol.mode)),
        ("tool calls (passthrough)", |l| {
            counts(&l.protocol.tool_calls)
        }),
        ("format", |l| counts(&l.protocol.format)),
        ("prefix K", |l| counts(&l.protocol.prefix_k)),
        ("prefix set", |l| counts(&l.protocol.prefix_set)),
        ("prefix coverage", |l| l.protocol.coverage()),
        ("rules", |l| counts(&l.protocol.rules)),
        ("backend model", |l| counts(&l.protocol.backend_model)),
        ("proxy version", |l| counts(&l.protocol.proxy_version)),
    ];
    for (name, get) in settings {
        let mut cells = vec![name.to_string()];
        cells.extend(report.labels.iter().map(|l| cell(&get(l))));
        table_row(out, &cells)?;
    }
    writeln!(out)?;
    writeln!(out, "## Summary\n")?;
    let mut head: Vec<String> = ["label", "tasks", "runs", "runs/task"]
        .map(String::from)
        .to_vec();
    if report.has_results {
        head.extend(report.ks.iter().map(|k| format!("Pass@{k}")));
        head.extend([
            "Intersection@n".into(),
            "no result".into(),
            "missing tasks".into(),
            "result-only runs".into(),
        ]);
    }
    table_head(out, &head)?;
    for l in &report.labels {
        let mut cells = vec![
            cell(&l.label),
            l.tasks.to_string(),
            l.runs.to_string(),
            runs_per_task(l),
        ];
        if report.has_results {
            cells.extend(
                report
                    .ks
                    .iter()
                    .map(|k| percent(l.pass_at_k.get(k).copied())),
            );
            if let Some(i) = &l.intersection {
                cells.push(format!(
                    "{}/{} ({:.1}%)",
                    i.solved,
                    i.tasks,
                    i.fraction * 100.0
                ));
            }
            cells.push(l.behaviour.no_result.to_string());
            cells.push(l.missing_tasks.len().to_string());
            cells.push(l.result_only_runs.len().to_string());
        }
        table_row(out, &cells)?;
    }
    if report.has_results {
        stability_table(out, report)?;
    }
    uncertainty_tables(out, report)?;
    rank_tables(out, report)?;
    reference_table(out, report)?;
    network_tables(out, report)?;

    writeln!(
        out,
        "\n## Behaviour\n\n% of trajectories unless the row says otherwise; (count/total). \
         \"unknown\": the results do not say for some runs.\n"
    )?;
    let mut head = vec!["behaviour".to_string()];
    head.extend(report.labels.iter().map(|l| cell(&l.label)));
    table_head(out, &head)?;
    let rates: Vec<_> = report
        .labels
        .iter()
        .map(|l| l.behaviour.rates(report.has_results))
        .collect();
    if let Some(first) = rates.first() {
        for (i, rate) in first.iter().enumerate() {
            let mut cells = vec![rate.title.to_string()];
            cells.extend(rates.iter().map(|r| rate_cell(&r[i])));
            table_row(out, &cells)?;
        }
    }

    let mut cells = vec!["median steps before the first edit".to_string()];
    cells.extend(report.labels.iter().map(|l| {
        let b = &l.behaviour;
        b.median_steps_before_first_edit().map_or_else(
            || "– (no edit)".to_string(),
            |m| format!("{m} ({} editing)", b.steps_before_first_edit.len()),
        )
    }));
    table_row(out, &cells)?;

    writeln!(
        out,
        "\n## How the runs ended (trajectories)\n\nOne ending per trajectory; abnormal \
         termination is the sum of the rows marked abnormal.\n"
    )?;
    table_head(out, &head_with("ending", report))?;
    for ending in Ending::ALL {
        let name = if ending.is_abnormal() {
            format!("{} (abnormal)", ending.as_str())
        } else {
            ending.as_str().to_string()
        };
        let mut cells = vec![name];
        cells.extend(report.labels.iter().map(|l| {
            let n = l.behaviour.ending(ending);
            let t = l.behaviour.trajectories;
            let rate = (t > 0).then(|| n as f64 / t as f64);
            format!("{} ({n}/{t})", percent(rate))
        }));
        table_row(out, &cells)?;
    }

    writeln!(out, "\n## Nudges fired (count)\n")?;
    table_head(out, &head_with("nudge", report))?;
    for (name, get) in NUDGES {
        let mut cells = vec![name.to_string()];
        cells.extend(report.labels.iter().map(|l| get(l).to_string()));
        table_row(out, &cells)?;
    }

    for p in &report.pairs {
        pair_table(out, p)?;
    }
    Ok(())
}

/// `--pair A B`: B − A per behaviour over the matched pairs, with the paired interval and p
/// (docs/report.md "`--pair A B`"), and the plain statement when the pair is not
/// scaffold-controlled.
fn pair_table(out: &mut dyn Write, p: &super::PairReport) -> io::Result<()> {
    writeln!(out, "\n## Pair: {} → {}\n", cell(&p.a), cell(&p.b))?;
    if let Some(statement) = p.statement {
        writeln!(out, "**{statement}**\n")?;
        for note in &p.protocol_notes {
            writeln!(out, "- {}", cell(note))?;
        }
        if !p.protocol_notes.is_empty() {
            writeln!(out)?;
        }
    }
    writeln!(
        out,
        "{} pairs matched by (instance id, run); unmatched: {} of {}, {} of {}. \
         B−A in percentage points, its 95 % interval from a paired bootstrap over the tasks of \
         the pairs and p from a paired sign-flip test; B>A / A>B: pairs where that side's value \
         is higher.\n",
        p.pairs,
        p.unmatched_a,
        cell(&p.a),
        p.unmatched_b,
        cell(&p.b)
    )?;
    let head: Vec<String> = [
        "behaviour",
        &cell(&p.a),
        &cell(&p.b),
        "B−A",
        "interval",
        "p",
        "B>A",
        "A>B",
    ]
    .map(String::from)
    .to_vec();
    table_head(out, &head)?;
    let sure = |c: Option<super::pair::PairChange>| match c {
        Some(c) => [span(c.interval, true), format!("{:.3}", c.p_value)],
        None => ["–".into(), "–".into()],
    };
    if let Some((a, b)) = p.pass_at_1 {
        let [interval, p_value] = sure(p.pass_at_1_change);
        table_row(
            out,
            &[
                "Pass@1 (matched pairs)".into(),
                percent(Some(a)),
                percent(Some(b)),
                signed(Some(b - a)),
                interval,
                p_value,
                "".into(),
                "".into(),
            ],
        )?;
    }
    for r in &p.rows {
        let [interval, p_value] = sure(r.change);
        table_row(
            out,
            &[
                r.title.to_string(),
                percent(r.a),
                percent(r.b),
                signed(r.diff),
                interval,
                p_value,
                r.b_higher.to_string(),
                r.a_higher.to_string(),
            ],
        )?;
    }
    Ok(())
}

type NudgeCount = fn(&LabelSummary) -> usize;

const NUDGES: [(&str, NudgeCount); 2] = [
    ("submit_before_edit", |l| {
        l.behaviour.nudges_submit_before_edit
    }),
    ("repeated_action", |l| l.behaviour.nudges_repeated_action),
];

fn head_with(first: &str, report: &Report) -> Vec<String> {
    let mut head = vec![first.to_string()];
    head.extend(report.labels.iter().map(|l| cell(&l.label)));
    head
}

/// `rate (count/total)`; with unknown cases `unknown (count/known known, u unknown)`, or
/// `unknown (all total)`.
fn rate_cell(r: &Rate) -> String {
    if r.unknown == 0 {
        return format!("{} ({}/{})", percent(r.value()), r.count, r.total);
    }
    if r.unknown == r.total {
        return format!("unknown (all {})", r.total);
    }
    format!(
        "unknown ({}/{} known, {} unknown)",
        r.count,
        r.total - r.unknown,
        r.unknown
    )
}

/// `value` alone, `value (n), value (n)` when several, `–` when none.
fn counts(m: &std::collections::BTreeMap<String, usize>) -> String {
    if m.is_empty() {
        return "–".into();
    }
    if m.len() == 1 {
        return m.keys().next().cloned().unwrap_or_default();
    }
    m.iter()
        .map(|(k, n)| format!("{k} ({n})"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn signed(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{:+.1}", v * 100.0))
}

/// The JSON document (see `docs/report.md`): full precision, rates in `[0, 1]`.
pub fn to_json(report: &Report) -> Value {
    let labels: Vec<Value> = report
        .labels
        .iter()
        .map(|l| {
            let mut behaviour = Map::new();
            for r in l.behaviour.rates(report.has_results) {
                behaviour.insert(
                    r.key.into(),
                    json!({"unit": r.unit, "count": r.count, "total": r.total,
                           "unknown": r.unknown, "rate": r.value()}),
                );
            }
            let pass: Map<String, Value> = l
                .pass_at_k
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect();
            json!({
                "label": l.label,
                "tasks": l.tasks,
                "runs": l.runs,
                "min_runs": l.min_runs,
                "max_runs": l.max_runs,
                "pass_at_k": if report.has_results { Value::Object(pass) } else { Value::Null },
                "intersection": l.intersection,
                "stability": l.stability,
                "network": l.network,
                "estimates": l.estimates,
                "no_result": report.has_results.then_some(l.behaviour.no_result),
                "behaviour": behaviour,
                "endings": l.behaviour.endings.iter()
                    .map(|(e, n)| (e.as_str(), *n))
                    .collect::<std::collections::BTreeMap<_, _>>(),
                "median_steps_before_first_edit": l.behaviour.median_steps_before_first_edit(),
                "trajectories_editing": l.behaviour.steps_before_first_edit.len(),
                "missing_tasks": l.missing_tasks,
                "result_only_runs": l.result_only_runs,
                "protocol": l.protocol,
                "nudges_fired": {
                    "submit_before_edit": l.behaviour.nudges_submit_before_edit,
                    "repeated_action": l.behaviour.nudges_repeated_action,
                },
                "task_counts": report.has_results.then_some(&l.task_counts),
            })
        })
        .collect();
    let trajectories: Vec<Value> = report
        .trajectories
        .iter()
        .map(|row| {
            let mut v = json!({
                "label": row.label,
                "instance_id": row.instance_id,
                "run": row.run,
                "session": row.session,
                "behaviour": row.behaviour,
                "network": row.network,
            });
            if report.has_results {
                if let Value::Object(m) = &mut v {
                    m.insert("outcome".into(), json!(row.outcome));
                    m.insert(
                        "applicable_patch".into(),
                        json!(row.outcome.and_then(|o| o.applicable())),
                    );
                    m.insert(
                        "empty_patch".into(),
                        json!(row.outcome.and_then(|o| o.empty())),
                    );
                }
            }
            v
        })
        .collect();
    json!({
        "ks": report.ks,
        "has_results": report.has_results,
        "task_set": report.task_set,
        "task_set_source": report.task_set_source,
        "step_limit": report.step_limit,
        "protocol_differences": report.protocol_differences,
        "warnings": report.warnings,
        "bootstrap": {
            "resamples": super::uncertainty::RESAMPLES,
            "seed": super::uncertainty::SEED,
            "level": super::uncertainty::LEVEL,
        },
        "changes": report.changes,
        "rank_agreement": report.rank_agreement,
        "reference": report.reference,
        "labels": labels,
        "trajectories": trajectories,
        "pair": report.pairs.first(),
        "pairs": report.pairs,
    })
}
