//! The report as Markdown (default), CSV or JSON. Column meanings are in `docs/report.md`.

use std::io::{self, Write};

use serde_json::{json, Map, Value};

use super::summary::{LabelSummary, Report};
use crate::cli::ReportFormat;

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
    writeln!(out, "## Summary\n")?;
    let mut head: Vec<String> = ["label", "tasks", "runs", "runs/task"]
        .map(String::from)
        .to_vec();
    if report.has_results {
        head.extend(report.ks.iter().map(|k| format!("Pass@{k}")));
        head.extend(["Intersection@n".into(), "no result".into()]);
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
        }
        table_row(out, &cells)?;
    }

    writeln!(
        out,
        "\n## Behaviour\n\n% of trajectories unless the row says otherwise; (count/total).\n"
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
            cells.extend(rates.iter().map(|r| {
                let r = &r[i];
                format!("{} ({}/{})", percent(r.value()), r.count, r.total)
            }));
            table_row(out, &cells)?;
        }
    }

    let reasons: std::collections::BTreeSet<&String> = report
        .labels
        .iter()
        .flat_map(|l| l.behaviour.abnormal_by_reason.keys())
        .collect();
    writeln!(out, "\n## Abnormal termination by reason (trajectories)\n")?;
    if reasons.is_empty() {
        writeln!(
            out,
            "None: every trajectory ended with an explicit submission."
        )?;
    } else {
        table_head(out, &head_with("reason", report))?;
    }
    for reason in reasons {
        let mut cells = vec![cell(reason)];
        cells.extend(report.labels.iter().map(|l| {
            l.behaviour
                .abnormal_by_reason
                .get(reason)
                .copied()
                .unwrap_or(0)
                .to_string()
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

    if let Some(p) = &report.pair {
        writeln!(out, "\n## Pair: {} → {}\n", cell(&p.a), cell(&p.b))?;
        writeln!(
            out,
            "{} pairs matched by (instance id, run); unmatched: {} of {}, {} of {}. \
             B−A in percentage points; B>A / A>B: pairs where that side's value is higher.\n",
            p.pairs,
            p.unmatched_a,
            cell(&p.a),
            p.unmatched_b,
            cell(&p.b)
        )?;
        let head: Vec<String> = ["behaviour", &cell(&p.a), &cell(&p.b), "B−A", "B>A", "A>B"]
            .map(String::from)
            .to_vec();
        table_head(out, &head)?;
        if let Some((a, b)) = p.pass_at_1 {
            table_row(
                out,
                &[
                    "Pass@1 (matched pairs)".into(),
                    percent(Some(a)),
                    percent(Some(b)),
                    signed(Some(b - a)),
                    "".into(),
                    "".into(),
                ],
            )?;
        }
        for r in &p.rows {
            table_row(
                out,
                &[
                    r.title.to_string(),
                    percent(r.a),
                    percent(r.b),
                    signed(r.diff),
                    r.b_higher.to_string(),
                    r.a_higher.to_string(),
                ],
            )?;
        }
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
                    json!({"unit": r.unit, "count": r.count, "total": r.total, "rate": r.value()}),
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
                "no_result": report.has_results.then_some(l.behaviour.no_result),
                "behaviour": behaviour,
                "abnormal_by_reason": l.behaviour.abnormal_by_reason,
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
            });
            if report.has_results {
                if let Value::Object(m) = &mut v {
                    m.insert("outcome".into(), json!(row.outcome));
                    m.insert(
                        "applicable_patch".into(),
                        json!(row.outcome.is_some_and(|o| o.applicable())),
                    );
                }
            }
            v
        })
        .collect();
    json!({
        "ks": report.ks,
        "has_results": report.has_results,
        "labels": labels,
        "trajectories": trajectories,
        "pair": report.pair,
    })
}
