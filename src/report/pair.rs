//! `--pair A B`: the paper's paired comparison of two checkpoints, or of a base model and its
//! post-trained version (ASAP §metrics and its post-training table). Runs of labels A and B
//! are aligned by (instance id, run index); every behaviour is compared over the matched pairs
//! only, each difference with a 95 % interval from a paired bootstrap over the tasks of the
//! pairs and a sign-flip p-value ([`super::uncertainty`]).

use std::collections::BTreeMap;

use serde::Serialize;

use super::behaviour::{Aggregate, Unit};
use super::results::Outcome;
use super::summary::{Report, TrajectoryRow};
use super::uncertainty::{paired, Interval, Parts};

/// How sure a difference B − A over the matched pairs is: the percentile interval of a
/// bootstrap over the tasks of the pairs (a task keeps all its pairs) and the paired
/// sign-flip p-value, as in "Uncertainty" (docs/report.md).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PairChange {
    pub interval: Interval,
    pub p_value: f64,
    /// The smallest p these tasks allow ([`super::uncertainty::smallest_p`]).
    pub smallest_p: f64,
    /// Tasks with at least one matched pair.
    pub tasks: usize,
}

/// What a pair compares: two labels of the same protocol (scaffold-controlled), or a base
/// model through the proxy against a model recorded through passthrough (the post-trained
/// model on its own tool calls, no prefix and no rule): not scaffold-controlled.
pub const NOT_SCAFFOLD_CONTROLLED: &str = "Not scaffold-controlled: one label ran through the \
     proxy (a base model writing actions as text, with the reference prefix, the nudges and the \
     termination rules) and the other through passthrough (a chat model calling the scaffold's \
     tools itself, with none of them). The differences below measure the model and the \
     interface together, as in the paper's comparison of base and post-trained models.";

/// The statement of a pair where a label mixes modes: neither controlled nor the paper's
/// base-versus-post-trained comparison.
pub const MIXED_MODES: &str = "Not scaffold-controlled: a label of the pair mixes runs through \
     the proxy and through passthrough (or runs of unknown mode); its rates blend two \
     interfaces.";

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
    /// The interval and p-value of `diff`; `None` when either rate has no value.
    pub change: Option<PairChange>,
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
    /// The interval and p-value of Pass@1's B − A.
    pub pass_at_1_change: Option<PairChange>,
    /// Whether both labels ran all under one and the same mode; false for proxy against
    /// passthrough ([`NOT_SCAFFOLD_CONTROLLED`]) and for a label that mixes modes
    /// ([`MIXED_MODES`]).
    pub scaffold_controlled: bool,
    /// One label all through the proxy, the other all through passthrough: the paper's base
    /// against post-trained comparison, whose protocol differences are expected.
    pub base_vs_post: bool,
    /// What the reader must know when not scaffold-controlled; `None` when controlled.
    pub statement: Option<&'static str>,
    /// The protocol differences of the two labels when not scaffold-controlled (expected
    /// there, so reported rather than refused).
    pub protocol_notes: Vec<String>,
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
    // Per task of the pairs, A's and B's counts of each rate, for the paired bootstrap.
    let mut by_task: BTreeMap<&str, (Aggregate, Aggregate)> = BTreeMap::new();
    for (ra, rb) in &pairs {
        let t = by_task.entry(ra.instance_id.as_str()).or_default();
        t.0.add(&ra.behaviour, outcome(with, ra));
        t.1.add(&rb.behaviour, outcome(with, rb));
    }
    // Each task's rates of A and of B, for the per-task parts of row `i`.
    let task_rates: Vec<[Vec<super::Rate>; 2]> = by_task
        .values()
        .map(|(x, y)| [x.rates(with), y.rates(with)])
        .collect();
    let parts = |i: usize, side: usize| {
        task_rates
            .iter()
            .map(|t| (t[side][i].count as f64, t[side][i].total as f64))
            .collect::<Parts>()
    };
    let change = |pa: &Parts, pb: &Parts, key: &str| {
        paired(pa, pb, &["pair", a, b, key]).map(|(_, interval, p_value)| PairChange {
            interval,
            p_value,
            smallest_p: super::uncertainty::smallest_p(pa, pb),
            tasks: pa.len(),
        })
    };
    let rows = agg_a
        .rates(with)
        .into_iter()
        .zip(agg_b.rates(with))
        .enumerate()
        .map(|(i, (x, y))| {
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
                change: va
                    .zip(vb)
                    .and_then(|_| change(&parts(i, 0), &parts(i, 1), x.key)),
            }
        })
        .collect();
    // Pass@1 over the pairs: per task, its resolved pairs of each side over its pairs.
    let mut tasks = BTreeMap::<&str, (usize, usize, usize)>::new();
    for (ra, rb) in &pairs {
        let t = tasks.entry(ra.instance_id.as_str()).or_default();
        let resolved = |r: &TrajectoryRow| usize::from(r.outcome.is_some_and(|o| o.resolved));
        *t = (t.0 + 1, t.1 + resolved(ra), t.2 + resolved(rb));
    }
    let pass_parts = |f: fn(&(usize, usize, usize)) -> usize| -> Parts {
        tasks
            .values()
            .map(|t| (f(t) as f64 / t.0 as f64, 1.0))
            .collect()
    };
    let (pass_a, pass_b) = (pass_parts(|t| t.1), pass_parts(|t| t.2));
    let mean = |p: &Parts| p.iter().map(|x| x.0).sum::<f64>() / p.len().max(1) as f64;
    // No pair, no Pass@1 (not a mean of nothing).
    let pass_at_1 = (with && !tasks.is_empty()).then(|| (mean(&pass_a), mean(&pass_b)));
    let pass_at_1_change = with.then(|| change(&pass_a, &pass_b, "pass@1")).flatten();
    let modes = |label: &str| {
        report
            .label(label)
            .map(|l| l.protocol.mode.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let (mode_a, mode_b) = (modes(a), modes(b));
    let scaffold_controlled = mode_a == mode_b && mode_a.len() == 1;
    let one = |m: &[String], mode: &str| m.len() == 1 && m[0] == mode;
    let base_vs_post = (one(&mode_a, "proxy") && one(&mode_b, "passthrough"))
        || (one(&mode_a, "passthrough") && one(&mode_b, "proxy"));
    let statement = match (scaffold_controlled, base_vs_post) {
        (true, _) => None,
        (false, true) => Some(NOT_SCAFFOLD_CONTROLLED),
        (false, false) => Some(MIXED_MODES),
    };
    Ok(PairReport {
        a: a.to_string(),
        b: b.to_string(),
        pairs: pairs.len(),
        unmatched_a: rows_a.len() - pairs.len(),
        unmatched_b: rows_b.len() - pairs.len(),
        rows,
        pass_at_1,
        pass_at_1_change,
        scaffold_controlled,
        base_vs_post,
        statement,
        protocol_notes: Vec::new(),
    })
}
