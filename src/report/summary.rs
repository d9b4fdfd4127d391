//! Grouping by (label, task), run numbering, and the per-label summary.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::behaviour::{Aggregate, Behaviour, Ending, Rate};
use super::metrics::{intersection, mean_pass_at_k, stability, Intersection, Stability, TaskCount};
use super::network::{self, NetworkFlags};
use super::pair::PairReport;
use super::protocol::{differences, LabelProtocol};
use super::ranks::{agreements, RankAgreement};
use super::results::{Outcome, Results};
use super::uncertainty::{metric_parts, Change, Estimate, Metric, Parts, MEDIAN_STEPS};
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
    /// The network audit of the trajectory ([`super::network`]).
    pub network: NetworkFlags,
}

/// Everything computed for one label.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LabelSummary {
    /// The model or checkpoint label.
    pub label: String,
    /// Tasks of the comparison's task set ([`Report::task_set`]): the denominator of Pass@k
    /// and Intersection@n.
    pub tasks: usize,
    /// Trajectories (the denominator of the trajectory behaviours).
    pub runs: usize,
    /// Fewest and most `n` of a task of the task set (trajectories and result-only runs; a
    /// missing task with its padded `n`).
    pub min_runs: usize,
    pub max_runs: usize,
    /// Runs and resolved runs per task of the task set, sorted by instance id (`c` is 0
    /// without results). A task the label lacks has `c = 0` and `n =` the label's most runs
    /// of a task (at least 1).
    pub task_counts: Vec<TaskCount>,
    /// Tasks of the task set with no trajectory and no result for this label (counted as
    /// resolved in none of their runs).
    pub missing_tasks: Vec<String>,
    /// Runs `(instance id, run)` that have a result but no trajectory: counted for Pass@k and
    /// Intersection@n, not in the behaviours.
    pub result_only_runs: Vec<(String, usize)>,
    /// Pass@k (a probability in `[0, 1]`) for each requested `k ≤ min_runs`; empty without
    /// results.
    pub pass_at_k: BTreeMap<usize, f64>,
    /// Intersection@n; `None` without results.
    pub intersection: Option<Intersection>,
    /// Tasks resolved in every run, in some, in none; `None` without results.
    pub stability: Option<Stability>,
    /// Pass@k (each k every task has runs for) and Intersection@n (with results), and every
    /// behaviour rate the label has a value for, with their 95 % bootstrap intervals
    /// ([`super::uncertainty`]).
    pub estimates: Vec<Estimate>,
    /// The same metrics as per-task parts, in task-set order (for the changes between labels).
    #[serde(skip)]
    pub parts: Vec<(String, Metric)>,
    /// The network audit over the label's trajectories.
    pub network: NetworkSummary,
    /// Behaviour counts over the label's trajectories.
    pub behaviour: Aggregate,
    /// The protocol its trajectories ran under.
    pub protocol: LabelProtocol,
}

/// The network audit of one label (docs/report.md "Network audit").
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct NetworkSummary {
    /// Trajectories audited.
    pub trajectories: usize,
    /// Trajectories with any external access attempted (any rule, gold-seeking included).
    pub flagged: usize,
    /// Trajectories that sought the task's upstream repository.
    pub gold_seeking: usize,
    /// The most Pass@1 the flagged trajectories' resolved runs contribute (a fraction): the
    /// mean over tasks of (resolved flagged runs / n); `None` without results.
    pub pass1_bound: Option<f64>,
    /// The same for the gold-seeking trajectories.
    pub pass1_bound_gold: Option<f64>,
}

/// `--reference`: a conventional benchmark's scores beside ASAP's Pass@1, label by label in
/// the report's order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReferenceTable {
    pub file: String,
    /// Decimals to show the scores and their changes with: the most any score of the file
    /// was written with (`0.123` → 3; `1.5e-3` → 4), at most 6.
    pub decimals: usize,
    pub rows: Vec<ReferenceRow>,
}

/// One label of [`ReferenceTable`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReferenceRow {
    pub label: String,
    /// The benchmark's score, in its own unit; `None`: not in the file.
    pub score: Option<f64>,
    /// The score minus the previous label's (both known).
    pub score_change: Option<f64>,
    /// ASAP's Pass@1 (a fraction); `None` without it.
    pub pass1: Option<f64>,
    /// Pass@1's change from the previous label, with its interval and p-value.
    pub pass1_change: Option<Change>,
}

impl Report {
    /// Puts a benchmark's `(label, score)` rows beside the labels; returns the file's labels
    /// that no trajectory has (for a warning).
    pub fn with_reference(
        &mut self,
        file: &str,
        scores: &[(String, f64)],
        decimals: usize,
    ) -> Vec<String> {
        let score = |l: &str| scores.iter().find(|(x, _)| x == l).map(|(_, s)| *s);
        let mut rows: Vec<ReferenceRow> = Vec::new();
        for (i, l) in self.labels.iter().enumerate() {
            let previous = i.checked_sub(1).map(|p| &self.labels[p]);
            rows.push(ReferenceRow {
                label: l.label.clone(),
                score: score(&l.label),
                // Rounded to the decimals the scores were written with: 41.2 − 41.5 is −0.3,
                // not −0.29999999999999716.
                score_change: previous.and_then(|p| {
                    let change = score(&l.label)? - score(&p.label)?;
                    let scale = 10f64.powi(i32::try_from(decimals).unwrap_or(6));
                    Some((change * scale).round() / scale)
                }),
                pass1: l.pass_at_k.get(&1).copied(),
                pass1_change: previous.and_then(|p| {
                    self.changes
                        .iter()
                        .find(|c| c.from == p.label && c.to == l.label && c.metric == "pass@1")
                        .cloned()
                }),
            });
        }
        self.reference = Some(ReferenceTable {
            file: file.to_string(),
            decimals,
            rows,
        });
        scores
            .iter()
            .filter(|(l, _)| !self.labels.iter().any(|x| &x.label == l))
            .map(|(l, _)| l.clone())
            .collect()
    }
}

/// What the report is asked for besides the traces and results.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// The k of Pass@k; empty: every k from 1 to each label's fewest runs of a task.
    pub ks: Vec<usize>,
    /// The task set (`--tasks FILE`); `None`: every instance id seen (trajectories and
    /// results, any label).
    pub tasks: Option<Vec<String>>,
    /// The scaffold's own step limit (`--step-limit`), for the `step_cap` ending.
    pub step_limit: Option<usize>,
    /// Labels in this order first (`--order`), the rest after them in natural order.
    pub order: Vec<String>,
    /// `--rank-groups`: (label, model, group) for the rank agreement, beside the
    /// `model@group` naming convention (a label listed here is read from the file).
    pub rank_groups: Vec<(String, String, String)>,
}

/// Compares labels as people number checkpoints: runs of digits as numbers (`stage2-end` <
/// `stage10-mid`), the rest as text; equal keys (`v01` and `v1`) fall back to the text.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = s.as_bytes();
        for i in 1..=bytes.len() {
            if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                out.push((bytes[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    let (x, y) = (chunks(a), chunks(b));
    for (p, q) in x.iter().zip(&y) {
        let ord = match (p, q) {
            ((true, m), (true, n)) => {
                let (m, n) = (m.trim_start_matches('0'), n.trim_start_matches('0'));
                m.len().cmp(&n.len()).then_with(|| m.cmp(n))
            }
            ((_, m), (_, n)) => m.cmp(n),
        };
        if ord.is_ne() {
            return ord;
        }
    }
    x.len().cmp(&y.len()).then_with(|| a.cmp(b))
}

/// Sorts `labels` by `order` (named first, in that order), then naturally ([`natural_cmp`]).
pub fn order_labels<T>(labels: &mut [T], name: impl Fn(&T) -> &str, order: &[String]) {
    let rank = |l: &str| order.iter().position(|o| o == l).unwrap_or(order.len());
    labels.sort_by(|a, b| {
        let (a, b) = (name(a), name(b));
        rank(a).cmp(&rank(b)).then_with(|| natural_cmp(a, b))
    });
}

/// The whole report: what every output format prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The k values of Pass@k, sorted, without 0 and duplicates: the requested ones, else
    /// every k that some label has (1 to its fewest runs of a task).
    pub ks: Vec<usize>,
    /// Whether `--results` were given (Pass@k, Intersection@n and the patch rates exist).
    pub has_results: bool,
    /// The task set every label is scored over, sorted.
    pub task_set: Vec<String>,
    /// Where the task set came from: `tasks_file` or `seen` (every instance id of the
    /// trajectories and results).
    pub task_set_source: &'static str,
    /// The scaffold step limit given (`--step-limit`).
    pub step_limit: Option<usize>,
    /// In `--order`, then natural order ([`order_labels`]).
    pub labels: Vec<LabelSummary>,
    /// Sorted by (label in the order of `labels`, instance id, run).
    pub trajectories: Vec<TrajectoryRow>,
    /// The paired comparisons asked for (`--pair A B`, repeatable), in the order given.
    pub pairs: Vec<PairReport>,
    /// Each metric's change from each label to the next in the report's order, with a paired
    /// bootstrap interval and p-value ([`super::uncertainty`]); empty without results.
    pub changes: Vec<Change>,
    /// Rankings by Pass@1 of `model@group` labels compared between groups
    /// ([`super::ranks`]); empty without results or such labels.
    pub rank_agreement: Vec<RankAgreement>,
    /// A conventional benchmark beside ASAP (`--reference`), when given.
    pub reference: Option<ReferenceTable>,
    /// What the protocols of different labels differ in (one line each); empty when they
    /// match or there is one label.
    pub protocol_differences: Vec<String>,
    /// Warnings about denominators and protocols, also printed on standard error.
    pub warnings: Vec<String>,
}

impl Report {
    /// Computes the report with the task set of every instance id seen. See
    /// [`Report::build_with`].
    pub fn build(trajectories: &[Trajectory], results: Option<&Results>, ks: &[usize]) -> Self {
        Self::build_with(
            trajectories,
            results,
            &Options {
                ks: ks.to_vec(),
                ..Options::default()
            },
        )
    }

    /// Computes the report. `results: None` means resolution is unknown (no Pass@k); with
    /// results, a trajectory without a matching entry counts as unresolved ("no result").
    /// With a task set from `options.tasks`, trajectories of other tasks are left out (a
    /// warning says how many).
    pub fn build_with(
        trajectories: &[Trajectory],
        results: Option<&Results>,
        options: &Options,
    ) -> Self {
        let mut ks: Vec<usize> = options.ks.iter().copied().filter(|&k| k > 0).collect();
        ks.sort_unstable();
        ks.dedup();
        let (task_set, task_set_source): (BTreeSet<String>, _) = match &options.tasks {
            Some(tasks) => (tasks.iter().cloned().collect(), "tasks_file"),
            None => {
                let mut seen: BTreeSet<String> =
                    trajectories.iter().map(|t| t.instance_id.clone()).collect();
                // Results of labels with no trajectory are ignored: their ids are no task.
                let traced: BTreeSet<&str> =
                    trajectories.iter().map(|t| t.label.as_str()).collect();
                if let Some(r) = results {
                    seen.extend(r.instance_ids_for(&traced).into_iter().map(str::to_string));
                }
                (seen, "seen")
            }
        };
        let runs = number_runs(trajectories);
        let mut warnings = input_warnings(trajectories, &runs);
        let mut outside = 0;
        let mut rows: Vec<TrajectoryRow> = Vec::new();
        let mut protocols: BTreeMap<String, LabelProtocol> = BTreeMap::new();
        for (t, run) in trajectories.iter().zip(runs) {
            if !task_set.contains(&t.instance_id) {
                outside += 1;
                continue;
            }
            protocols
                .entry(t.label.clone())
                .or_default()
                .add(&t.format, &t.protocol);
            rows.push(TrajectoryRow {
                label: t.label.clone(),
                instance_id: t.instance_id.clone(),
                run,
                session: t.session.clone(),
                behaviour: Behaviour::of(t, options.step_limit),
                outcome: results.and_then(|r| r.lookup(&t.label, &t.instance_id, run)),
                network: network::audit(t),
            });
        }
        if outside > 0 {
            warnings.push(format!(
                "{outside} trajectories are of tasks outside --tasks: left out of every number"
            ));
        }
        rows.sort_by(|a, b| {
            (&a.label, &a.instance_id, a.run, &a.session).cmp(&(
                &b.label,
                &b.instance_id,
                b.run,
                &b.session,
            ))
        });
        let task_set: Vec<String> = task_set.into_iter().collect();
        // Every label of the traces, also one whose trajectories are all outside the task set
        // (it lacks every task of the set).
        let seen: BTreeSet<&str> = trajectories.iter().map(|t| t.label.as_str()).collect();
        let mut labels = Vec::new();
        for label in seen {
            let start = rows.partition_point(|r| r.label.as_str() < label);
            let end = rows.partition_point(|r| r.label.as_str() <= label);
            let protocol = protocols.remove(label).unwrap_or_default();
            labels.push(summarise(
                label,
                &rows[start..end],
                results,
                &task_set,
                &ks,
                protocol,
            ));
        }
        if ks.is_empty() {
            let shown: BTreeSet<usize> = labels
                .iter()
                .flat_map(|l| l.pass_at_k.keys().copied())
                .collect();
            ks = shown.into_iter().collect();
        }
        order_labels(&mut labels, |l| l.label.as_str(), &options.order);
        let rank: BTreeMap<&str, usize> = labels
            .iter()
            .enumerate()
            .map(|(i, l)| (l.label.as_str(), i))
            .collect();
        rows.sort_by(|a, b| {
            (rank[a.label.as_str()], &a.instance_id, a.run, &a.session).cmp(&(
                rank[b.label.as_str()],
                &b.instance_id,
                b.run,
                &b.session,
            ))
        });
        for l in &labels {
            warnings.extend(label_warnings(l, results.is_some()));
        }

        // Every label with trajectories against the first such one: a protocol differs from
        // the first's or matches it, so each difference is named once.
        let mut protocol_differences = Vec::new();
        let traced: Vec<&LabelSummary> = labels.iter().filter(|l| l.runs > 0).collect();
        if let Some((first, rest)) = traced.split_first() {
            for other in rest {
                protocol_differences.extend(differences(
                    (&first.label, &first.protocol),
                    (&other.label, &other.protocol),
                ));
            }
        }
        let changes = consecutive_changes(&labels);
        // Each label as `model@group`: from `--rank-groups`, else its own name.
        let grouped = |label: &str| {
            options
                .rank_groups
                .iter()
                .find(|(l, _, _)| l == label)
                .map_or_else(|| label.to_string(), |(_, m, g)| format!("{m}@{g}"))
        };
        let names: Vec<(String, &Parts)> = labels
            .iter()
            .filter_map(|l| match l.parts.iter().find(|(m, _)| m == "pass@1")? {
                (_, Metric::Ratio(p)) => Some((grouped(&l.label), p)),
                _ => None,
            })
            .collect();
        let pass1: Vec<(&str, &Parts)> = names.iter().map(|(n, p)| (n.as_str(), *p)).collect();
        let rank_agreement = agreements(&pass1);
        let mut report = Report {
            changes,
            rank_agreement,
            reference: None,
            ks,
            has_results: results.is_some(),
            task_set,
            task_set_source,
            step_limit: options.step_limit,
            labels,
            trajectories: rows,
            pairs: Vec::new(),
            protocol_differences,
            warnings,
        };
        if let Some(results) = results {
            let lines = result_warnings(&report, results);
            report.warnings.extend(lines);
        }
        report
    }

    /// The summary of one label.
    pub fn label(&self, label: &str) -> Option<&LabelSummary> {
        self.labels.iter().find(|l| l.label == label)
    }
}

/// Warnings about the trajectories themselves: a session in several trace files (each counts),
/// a run index given twice (renumbered, [`number_runs`]).
fn input_warnings(trajectories: &[Trajectory], runs: &[usize]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut files_per_session = BTreeMap::<&str, usize>::new();
    for t in trajectories {
        *files_per_session.entry(t.session.as_str()).or_default() += 1;
    }
    for (session, n) in files_per_session.into_iter().filter(|(_, n)| *n > 1) {
        lines.push(format!(
            "session {session} is in {n} trace files (copies, or one session split across log \
             directories): each is counted as a trajectory"
        ));
    }
    for (t, &run) in trajectories.iter().zip(runs) {
        if let Some(said) = t.run.filter(|r| *r != run) {
            lines.push(format!(
                "session {} ({}, {}) says run {said}, which an earlier session of that task \
                 already has: counted as run {run}",
                t.session, t.label, t.instance_id
            ));
        }
    }
    lines
}

/// Warnings about the results: runs without a result, result ids outside `--tasks`, result
/// labels that no trajectory has, results without a label shared by several labels.
fn result_warnings(report: &Report, results: &Results) -> Vec<String> {
    let mut lines = Vec::new();
    for l in &report.labels {
        if l.behaviour.no_result > 0 {
            lines.push(format!(
                "{}: {} of {} runs have no result (counted as unresolved)",
                l.label, l.behaviour.no_result, l.runs
            ));
        }
    }
    if report.task_set_source == "tasks_file" {
        let outside = results
            .instance_ids()
            .into_iter()
            .filter(|id| report.task_set.binary_search(&id.to_string()).is_err())
            .count();
        if outside > 0 {
            lines.push(format!(
                "{outside} instance id(s) in the results are outside --tasks: ignored"
            ));
        }
    }
    let unknown: Vec<&str> = results
        .labels()
        .into_iter()
        .filter(|l| report.label(l).is_none())
        .collect();
    if !unknown.is_empty() {
        lines.push(format!(
            "results name label(s) with no trajectory, ignored: {}",
            unknown.join(", ")
        ));
    }
    if results.has_unlabelled() && report.labels.len() > 1 {
        lines.push(format!(
            "results without a label apply to every label ({}): name the label with \
             LABEL=FILE (or a label column) when a file holds one label's runs",
            report
                .labels
                .iter()
                .map(|l| l.label.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    lines
}

/// The warnings of one label: tasks it lacks, results without a trajectory, a protocol that
/// is mixed inside it.
fn label_warnings(l: &LabelSummary, has_results: bool) -> Vec<String> {
    let mut lines = Vec::new();
    let list = |items: Vec<String>| {
        let shown: Vec<String> = items.iter().take(10).cloned().collect();
        let more = items.len().saturating_sub(shown.len());
        let mut text = shown.join(", ");
        if more > 0 {
            text.push_str(&format!(", … ({more} more)"));
        }
        text
    };
    if !l.missing_tasks.is_empty() {
        lines.push(format!(
            "{}: {} task(s) of the task set have no trajectory{}: counted as resolved in none \
             of their runs: {}",
            l.label,
            l.missing_tasks.len(),
            if has_results { " and no result" } else { "" },
            list(l.missing_tasks.clone())
        ));
    }
    if !l.result_only_runs.is_empty() {
        lines.push(format!(
            "{}: {} run(s) have a result but no trajectory: counted for Pass@k and \
             Intersection@n, missing from the behaviours: {}",
            l.label,
            l.result_only_runs.len(),
            list(
                l.result_only_runs
                    .iter()
                    .map(|(id, run)| format!("{id} run {run}"))
                    .collect()
            )
        ));
    }
    for mixed in l.protocol.mixed() {
        lines.push(format!("{}: {mixed}", l.label));
    }
    lines
}

/// Sums one label's rows (sorted by instance id; none when the label has no trajectory of
/// the task set) over the task set.
/// Each metric's change from each label to the next (the report's order), over their common
/// task set: every label is scored over the same tasks, so their task counts align.
fn consecutive_changes(labels: &[LabelSummary]) -> Vec<Change> {
    let mut changes = Vec::new();
    for pair in labels.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let ids = |l: &LabelSummary| {
            l.task_counts
                .iter()
                .map(|t| t.instance_id.clone())
                .collect::<Vec<_>>()
        };
        if ids(a) != ids(b) {
            continue;
        }
        // A chat model through passthrough next to a base checkpoint is no step of a sweep
        // (`--pair` compares them): no change between labels run in different modes.
        let modes = |l: &LabelSummary| l.protocol.mode.keys().cloned().collect::<Vec<_>>();
        let (ma, mb) = (modes(a), modes(b));
        if !ma.is_empty() && !mb.is_empty() && ma != mb {
            continue;
        }
        for (metric, pa) in &a.parts {
            let Some((_, pb)) = b.parts.iter().find(|(m, _)| m == metric) else {
                continue;
            };
            if let Some((delta, interval, p_value)) = pa.paired(pb, &[&a.label, &b.label, metric]) {
                changes.push(Change {
                    from: a.label.clone(),
                    to: b.label.clone(),
                    metric: metric.clone(),
                    unit: super::uncertainty::unit_of(metric),
                    delta,
                    interval,
                    p_value,
                    smallest_p: pa.smallest_p(pb),
                    tasks: pa.len(),
                });
            }
        }
    }
    changes
}

fn summarise(
    label: &str,
    rows: &[TrajectoryRow],
    results: Option<&Results>,
    task_set: &[String],
    ks: &[usize],
    protocol: LabelProtocol,
) -> LabelSummary {
    let has_results = results.is_some();
    let label = label.to_string();
    let mut behaviour = Aggregate::default();
    for row in rows {
        behaviour.add(&row.behaviour, has_results.then_some(row.outcome.as_ref()));
    }
    let by_task: BTreeMap<&str, &[TrajectoryRow]> = rows
        .chunk_by(|a, b| a.instance_id == b.instance_id)
        .map(|task| (task[0].instance_id.as_str(), task))
        .collect();
    let mut task_counts = Vec::new();
    let mut missing_tasks = Vec::new();
    let mut result_only_runs = Vec::new();
    // Tasks whose only result has no run index: (index in task_counts, resolved).
    let mut runless: Vec<(usize, bool)> = Vec::new();
    for id in task_set {
        let traced = by_task.get(id.as_str()).copied().unwrap_or_default();
        let mut n = traced.len();
        let mut c = traced
            .iter()
            .filter(|r| r.outcome.is_some_and(|o| o.resolved))
            .count();
        if let Some(results) = results {
            let extra: Vec<usize> = results
                .runs(&label, id)
                .into_iter()
                .filter(|run| !traced.iter().any(|r| r.run == *run))
                .collect();
            // A result with no run index applies to every run of the task: for a task with no
            // trajectory, to as many runs as the label's other tasks have (set below).
            if traced.is_empty() && extra.is_empty() {
                if let Some(outcome) = results.lookup(&label, id, 0) {
                    runless.push((task_counts.len(), outcome.resolved));
                }
            }
            for run in extra {
                n += 1;
                c += usize::from(results.lookup(&label, id, run).is_some_and(|o| o.resolved));
                result_only_runs.push((id.clone(), run));
            }
        }
        if n == 0 && runless.last().is_none_or(|(i, _)| *i != task_counts.len()) {
            missing_tasks.push(id.clone());
        }
        task_counts.push(TaskCount {
            instance_id: id.clone(),
            n,
            c,
        });
    }
    let most = task_counts.iter().map(|t| t.n).max().unwrap_or(0).max(1);
    for (i, resolved) in runless {
        let t = &mut task_counts[i];
        t.n = most;
        t.c = if resolved { most } else { 0 };
        result_only_runs.extend((0..most).map(|run| (t.instance_id.clone(), run)));
    }
    for t in task_counts.iter_mut().filter(|t| t.n == 0) {
        t.n = most;
    }
    let fewest = task_counts.iter().map(|t| t.n).min().unwrap_or(0);
    let every_k: Vec<usize> = (1..=fewest).collect();
    let ks = if ks.is_empty() { &every_k[..] } else { ks };
    let pass_at_k = if has_results {
        ks.iter()
            .filter_map(|&k| mean_pass_at_k(&task_counts, k).map(|p| (k, p)))
            .collect()
    } else {
        BTreeMap::new()
    };
    // Every metric as per-task parts, tasks in task-set order: Pass@k and Intersection@n from
    // the results; each behaviour rate the label has a value for, from the task's trajectories
    // (a task without any adds nothing to either sum).
    let mut parts: Vec<(String, Metric)> = if has_results {
        metric_parts(&task_counts, ks)
            .into_iter()
            .map(|(m, p)| (m, Metric::Ratio(p)))
            .collect()
    } else {
        Vec::new()
    };
    let per_task: Vec<Aggregate> = task_set
        .iter()
        .map(|id| {
            let mut a = Aggregate::default();
            for row in by_task.get(id.as_str()).copied().unwrap_or_default() {
                a.add(&row.behaviour, has_results.then_some(row.outcome.as_ref()));
            }
            a
        })
        .collect();
    let per_task_rates: Vec<Vec<Rate>> = per_task.iter().map(|a| a.rates(has_results)).collect();
    for (i, rate) in behaviour.rates(has_results).iter().enumerate() {
        if rate.value().is_some() {
            parts.push((
                rate.key.to_string(),
                Metric::Ratio(
                    per_task_rates
                        .iter()
                        .map(|r| (r[i].count as f64, r[i].total as f64))
                        .collect(),
                ),
            ));
        }
    }
    // How the runs ended: each ending's share of the trajectories, and the median steps
    // before the first edit over the trajectories that edit (pooled over the tasks drawn).
    if !rows.is_empty() {
        for ending in Ending::ALL {
            parts.push((
                format!("ending:{}", ending.as_str()),
                Metric::Ratio(
                    per_task
                        .iter()
                        .map(|a| (a.ending(ending) as f64, a.trajectories as f64))
                        .collect(),
                ),
            ));
        }
    }
    if behaviour.median_steps_before_first_edit().is_some() {
        parts.push((
            MEDIAN_STEPS.to_string(),
            Metric::Median(
                per_task
                    .iter()
                    .map(|a| {
                        a.steps_before_first_edit
                            .iter()
                            .map(|&s| s as f64)
                            .collect()
                    })
                    .collect(),
            ),
        ));
    }
    let estimates = parts
        .iter()
        .filter_map(|(metric, p)| {
            p.estimate(&[&label, metric])
                .map(|(value, interval)| Estimate {
                    metric: metric.clone(),
                    unit: super::uncertainty::unit_of(metric),
                    value,
                    interval,
                })
        })
        .collect();
    // The paper's worst case: Pass@1 if every flagged run that resolved its task had not.
    let bound = |flag: fn(&NetworkFlags) -> bool| {
        has_results.then(|| {
            let per_task: f64 = task_counts
                .iter()
                .map(|t| {
                    let flagged = by_task
                        .get(t.instance_id.as_str())
                        .copied()
                        .unwrap_or_default()
                        .iter()
                        .filter(|r| flag(&r.network) && r.outcome.is_some_and(|o| o.resolved))
                        .count();
                    if t.n == 0 {
                        0.0
                    } else {
                        flagged as f64 / t.n as f64
                    }
                })
                .sum();
            if task_counts.is_empty() {
                0.0
            } else {
                per_task / task_counts.len() as f64
            }
        })
    };
    let network = NetworkSummary {
        trajectories: rows.len(),
        flagged: rows.iter().filter(|r| r.network.any()).count(),
        gold_seeking: rows.iter().filter(|r| r.network.gold).count(),
        pass1_bound: bound(NetworkFlags::any),
        pass1_bound_gold: bound(|n| n.gold),
    };
    LabelSummary {
        label,
        network,
        tasks: task_counts.len(),
        runs: rows.len(),
        min_runs: task_counts.iter().map(|t| t.n).min().unwrap_or(0),
        max_runs: task_counts.iter().map(|t| t.n).max().unwrap_or(0),
        intersection: has_results.then(|| intersection(&task_counts)),
        stability: has_results.then(|| stability(&task_counts)),
        estimates,
        parts,
        task_counts,
        missing_tasks,
        result_only_runs,
        pass_at_k,
        behaviour,
        protocol,
    }
}
