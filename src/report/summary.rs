//! Grouping by (label, task), run numbering, and the per-label summary.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::behaviour::{Aggregate, Behaviour};
use super::metrics::{intersection, mean_pass_at_k, Intersection, TaskCount};
use super::pair::PairReport;
use super::results::{Outcome, Results};
use super::Trajectory;

/// The run index of every trajectory (parallel to the input).
///
/// Within each (label, instance id), trajectories are taken in the order (`start_ms`,
/// `session`). An explicit `run` is kept; a trajectory without one (or whose explicit index
/// an earlier trajectory of the group already holds) gets the smallest index not yet taken,
/// in that order.
pub fn number_runs(trajectories: &[Trajectory]) -> Vec<usize> {
    let mut groups: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
    for (i, t) in trajectories.iter().enumerate() {
        groups
            .entry((t.label.as_str(), t.instance_id.as_str()))
            .or_default()
            .push(i);
    }
    let mut runs = vec![0; trajectories.len()];
    for members in groups.values_mut() {
        members.sort_by(|&a, &b| {
            let (ta, tb) = (&trajectories[a], &trajectories[b]);
            (ta.start_ms, &ta.session, a).cmp(&(tb.start_ms, &tb.session, b))
        });
        let mut taken = BTreeSet::new();
        let mut rest = Vec::new();
        for &i in members.iter() {
            match trajectories[i].run {
                Some(r) if taken.insert(r) => runs[i] = r,
                _ => rest.push(i),
            }
        }
        let mut next = 0;
        for i in rest {
            while taken.contains(&next) {
                next += 1;
            }
            runs[i] = next;
            taken.insert(next);
        }
    }
    runs
}

/// One trajectory's line in the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrajectoryRow {
    pub label: String,
    pub instance_id: String,
    /// Run index ([`number_runs`]).
    pub run: usize,
    pub session: String,
    pub behaviour: Behaviour,
    /// The harness outcome; `None` when results are given but none matched (or without
    /// results: see [`Report::has_results`]).
    pub outcome: Option<Outcome>,
}

/// Everything computed for one label.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LabelSummary {
    pub label: String,
    /// Distinct instance ids.
    pub tasks: usize,
    /// Trajectories.
    pub runs: usize,
    /// Fewest and most runs of a task.
    pub min_runs: usize,
    pub max_runs: usize,
    /// Runs and resolved runs per task, sorted by instance id (`c` is 0 without results).
    pub task_counts: Vec<TaskCount>,
    /// Pass@k (a probability in `[0, 1]`) for each requested `k ≤ min_runs`; empty without
    /// results.
    pub pass_at_k: BTreeMap<usize, f64>,
    /// Intersection@n; `None` without results.
    pub intersection: Option<Intersection>,
    pub behaviour: Aggregate,
}

/// The whole report: what every output format prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The requested k values, sorted, without 0 and duplicates.
    pub ks: Vec<usize>,
    /// Whether `--results` were given (Pass@k, Intersection@n and the patch rates exist).
    pub has_results: bool,
    /// Sorted by label.
    pub labels: Vec<LabelSummary>,
    /// Sorted by (label, instance id, run).
    pub trajectories: Vec<TrajectoryRow>,
    /// The paired comparison, when asked for.
    pub pair: Option<PairReport>,
}

impl Report {
    /// Computes the report. `results: None` means resolution is unknown (no Pass@k); with
    /// results, a trajectory without a matching entry counts as unresolved ("no result").
    pub fn build(trajectories: &[Trajectory], results: Option<&Results>, ks: &[usize]) -> Self {
        let mut ks: Vec<usize> = ks.iter().copied().filter(|&k| k > 0).collect();
        ks.sort_unstable();
        ks.dedup();
        let runs = number_runs(trajectories);
        let mut rows: Vec<TrajectoryRow> = trajectories
            .iter()
            .zip(runs)
            .map(|(t, run)| TrajectoryRow {
                label: t.label.clone(),
                instance_id: t.instance_id.clone(),
                run,
                session: t.session.clone(),
                behaviour: Behaviour::of(t),
                outcome: results.and_then(|r| r.lookup(&t.label, &t.instance_id, run)),
            })
            .collect();
        rows.sort_by(|a, b| {
            (&a.label, &a.instance_id, a.run, &a.session).cmp(&(
                &b.label,
                &b.instance_id,
                b.run,
                &b.session,
            ))
        });
        let mut labels = Vec::new();
        for group in rows.chunk_by(|a, b| a.label == b.label) {
            labels.push(summarise(group, results.is_some(), &ks));
        }
        Report {
            ks,
            has_results: results.is_some(),
            labels,
            trajectories: rows,
            pair: None,
        }
    }

    /// The summary of one label.
    pub fn label(&self, label: &str) -> Option<&LabelSummary> {
        self.labels.iter().find(|l| l.label == label)
    }
}

/// Sums one label's rows (sorted by instance id).
fn summarise(rows: &[TrajectoryRow], has_results: bool, ks: &[usize]) -> LabelSummary {
    let mut behaviour = Aggregate::default();
    for row in rows {
        behaviour.add(&row.behaviour, has_results.then_some(row.outcome.as_ref()));
    }
    let task_counts: Vec<TaskCount> = rows
        .chunk_by(|a, b| a.instance_id == b.instance_id)
        .map(|task| TaskCount {
            instance_id: task[0].instance_id.clone(),
            n: task.len(),
            c: task
                .iter()
                .filter(|r| r.outcome.is_some_and(|o| o.resolved))
                .count(),
        })
        .collect();
    let pass_at_k = if has_results {
        ks.iter()
            .filter_map(|&k| mean_pass_at_k(&task_counts, k).map(|p| (k, p)))
            .collect()
    } else {
        BTreeMap::new()
    };
    LabelSummary {
        label: rows.first().map(|r| r.label.clone()).unwrap_or_default(),
        tasks: task_counts.len(),
        runs: rows.len(),
        min_runs: task_counts.iter().map(|t| t.n).min().unwrap_or(0),
        max_runs: task_counts.iter().map(|t| t.n).max().unwrap_or(0),
        intersection: has_results.then(|| intersection(&task_counts)),
        task_counts,
        pass_at_k,
        behaviour,
    }
}
