//! `--pair A B`: the paper's paired comparison of two checkpoints (ASAP §metrics). Runs of
//! labels A and B are aligned by (instance id, run index); every behaviour is compared over
//! the matched pairs only.

use std::collections::BTreeMap;

use serde::Serialize;

use super::behaviour::{Aggregate, Unit};
use super::results::Outcome;
use super::summary::{Report, TrajectoryRow};

/// One behaviour compared between A and B over the matched pairs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairRow {
    /// The behaviour's key ([`super::Rate::key`]).
    pub key: &'static str,
    /// Its title ([`super::Rate::title`]).
    pub title: &'static str,
    /// What its rate counts.
    pub unit: Unit,
    /// A's and B's rate in `[0, 1]` over the matched pairs (pooled over turns for turn
    /// rates); `None` when the denominator is 0.
    pub a: Option<f64>,
    pub b: Option<f64>,
    /// `b - a`.
    pub diff: Option<f64>,
    /// Pairs where B's value is higher than A's (a flag false → true from A to B).
    pub b_higher: usize,
    /// Pairs where A's value is higher (true → false).
    pub a_higher: usize,
}

/// The paired comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairReport {
    pub a: String,
    pub b: String,
    /// Matched (instance id, run) pairs.
    pub pairs: usize,
    /// Trajectories of A, and of B, with no partner.
    pub unmatched_a: usize,
    pub unmatched_b: usize,
    pub rows: Vec<PairRow>,
    /// Pass@1 of A and B over the matched pairs (mean over tasks of resolved/runs), with
    /// results only.
    pub pass_at_1: Option<(f64, f64)>,
}

/// Compares labels `a` and `b` of `report`.
///
/// Errors: a label that has no trajectory (the message lists the labels).
pub fn compare(report: &Report, a: &str, b: &str) -> Result<PairReport, String> {
    for label in [a, b] {
        if report.label(label).is_none() {
            let known: Vec<&str> = report.labels.iter().map(|l| l.label.as_str()).collect();
            return Err(format!(
                "--pair: no trajectories with label {label:?} (labels: {})",
                known.join(", ")
            ));
        }
    }
    let side = |label: &str| -> BTreeMap<(&str, usize), &TrajectoryRow> {
        report
            .trajectories
            .iter()
            .filter(|r| r.label == label)
            .map(|r| ((r.instance_id.as_str(), r.run), r))
            .collect()
    };
    let (rows_a, rows_b) = (side(a), side(b));
    let pairs: Vec<(&TrajectoryRow, &TrajectoryRow)> = rows_a
        .iter()
        .filter_map(|(key, ra)| rows_b.get(key).map(|rb| (*ra, *rb)))
        .collect();
    let with = report.has_results;
    fn outcome(with: bool, r: &TrajectoryRow) -> Option<Option<&Outcome>> {
        with.then_some(r.outcome.as_ref())
    }
    let (mut agg_a, mut agg_b) = (Aggregate::default(), Aggregate::default());
    let mut b_higher = BTreeMap::<&str, usize>::new();
    let mut a_higher = BTreeMap::<&str, usize>::new();
    for (ra, rb) in &pairs {
        agg_a.add(&ra.behaviour, outcome(with, ra));
        agg_b.add(&rb.behaviour, outcome(with, rb));
        let (mut one_a, mut one_b) = (Aggregate::default(), Aggregate::default());
        one_a.add(&ra.behaviour, outcome(with, ra));
        one_b.add(&rb.behaviour, outcome(with, rb));
        for (x, y) in one_a.rates(with).iter().zip(one_b.rates(with)) {
            match (x.value(), y.value()) {
                (Some(va), Some(vb)) if vb > va => *b_higher.entry(x.key).or_default() += 1,
                (Some(va), Some(vb)) if va > vb => *a_higher.entry(x.key).or_default() += 1,
                _ => {}
            }
        }
    }
    let rows = agg_a
        .rates(with)
        .into_iter()
        .zip(agg_b.rates(with))
        .map(|(x, y)| {
            let (va, vb) = (x.value(), y.value());
            PairRow {
                key: x.key,
                title: x.title,
                unit: x.unit,
                a: va,
                b: vb,
                diff: va.zip(vb).map(|(va, vb)| vb - va),
                b_higher: b_higher.get(x.key).copied().unwrap_or(0),
                a_higher: a_higher.get(x.key).copied().unwrap_or(0),
            }
        })
        .collect();
    let pass_at_1 = with.then(|| {
        let mut tasks = BTreeMap::<&str, (usize, usize, usize)>::new();
        for (ra, rb) in &pairs {
            let t = tasks.entry(ra.instance_id.as_str()).or_default();
            let resolved = |r: &TrajectoryRow| usize::from(r.outcome.is_some_and(|o| o.resolved));
            *t = (t.0 + 1, t.1 + resolved(ra), t.2 + resolved(rb));
        }
        let count = tasks.len().max(1) as f64;
        let mean = |f: fn(&(usize, usize, usize)) -> usize| {
            tasks
                .values()
                .map(|t| f(t) as f64 / t.0 as f64)
                .sum::<f64>()
                / count
        };
        (mean(|t| t.1), mean(|t| t.2))
    });
    Ok(PairReport {
        a: a.to_string(),
        b: b.to_string(),
        pairs: pairs.len(),
        unmatched_a: rows_a.len() - pairs.len(),
        unmatched_b: rows_b.len() - pairs.len(),
        rows,
        pass_at_1,
    })
}
