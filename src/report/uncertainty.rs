//! How sure the report's numbers are (issue 21): a 95 % interval for each label's metric from a
//! bootstrap over tasks, and for the change between consecutive labels a paired bootstrap
//! interval and a paired randomization p-value.
//!
//! - **Interval** (percentile bootstrap, Efron & Tibshirani 1993, "An Introduction to the
//!   Bootstrap", ch. 13): draw the label's tasks with replacement [`RESAMPLES`] times, compute
//!   the metric on each draw, sort; the interval is the draws at ranks `⌊0.025·B⌋` and
//!   `⌈0.975·B⌉ − 1` (0-based). A task keeps all its runs (runs of a task are not independent).
//! - **Change** from label A to label B over their tasks (every label is scored over the same
//!   task set): the same draw of tasks for both, `Δ* = metric_B − metric_A`, its percentile
//!   interval as above; the p-value is the paired randomization (sign-flip) test of Fisher and
//!   Pitman: in each of [`RESAMPLES`] draws each task's A and B values are swapped with
//!   probability ½, and `p = (1 + #{|Δπ| ≥ |Δ|}) / (B + 1)` (Phipson & Smyth 2010: never 0).
//! - A draw in which the metric has no value (a rate's denominator is 0, or a median has no
//!   value: only tasks without a trajectory of the label were drawn) is left out; B is then the
//!   draws with a value.
//!
//! A metric is per-task data and a statistic of a draw ([`TaskStat`], [`Metric`]): a ratio of
//! per-task sums `Σ num / Σ den` (Pass@k: the task's unbiased pass@k over 1; Intersection@n:
//! whether `c = n` over 1; a rate: the task's trajectories or turns with the property over
//! them), or the median of the values of the tasks drawn, pooled (steps before the first edit).
//! Draws come from ChaCha8 seeded with [`SEED`] mixed with the SHA-256 of the label(s) and
//! metric, so a label's interval does not move when another label is added, and every machine
//! gets the same draws.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::metrics::{pass_at_k, TaskCount};

/// Bootstrap and randomization draws per interval or p-value.
pub const RESAMPLES: usize = 2000;

/// The base seed of every draw (see the module docs).
pub const SEED: u64 = 0x0a5a_9021;

/// The intervals' coverage.
pub const LEVEL: f64 = 0.95;

/// A two-sided interval, in the metric's unit (fractions in `[0, 1]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    pub lo: f64,
    pub hi: f64,
}

/// A metric as per-task numerators and denominators: its value is `Σ num / Σ den`.
pub type Parts = Vec<(f64, f64)>;

/// The metric of the median steps before the first edit (the only one not a fraction).
pub const MEDIAN_STEPS: &str = "median_steps_before_first_edit";

/// What a metric's values count: `fraction` (in `[0, 1]`; every metric but one) or `steps`
/// ([`MEDIAN_STEPS`]).
pub fn unit_of(metric: &str) -> &'static str {
    if metric == MEDIAN_STEPS {
        "steps"
    } else {
        "fraction"
    }
}

/// A metric of one label with its interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// `pass@1`, `pass@8`, `intersection`, a behaviour key, `ending:<ending>`, or
    /// [`MEDIAN_STEPS`].
    pub metric: String,
    /// [`unit_of`] the metric: `fraction` or `steps`.
    pub unit: &'static str,
    pub value: f64,
    pub interval: Interval,
}

/// The change of one metric from a label to the next.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    pub from: String,
    pub to: String,
    pub metric: String,
    /// [`unit_of`] the metric.
    pub unit: &'static str,
    /// `to − from`, in the metric's unit.
    pub delta: f64,
    pub interval: Interval,
    pub p_value: f64,
    /// The smallest p the sign-flip test can give with these tasks, `min(1, 2 / 2^m)`, `m` the
    /// tasks whose two values differ ([`smallest_p`]): with few tasks an interval may exclude 0
    /// while p cannot be small.
    pub smallest_p: f64,
    /// Tasks paired.
    pub tasks: usize,
}

/// The metrics of one label's task counts, as parts: `pass@k` for each `k` in `ks` that every
/// task has runs for, and `intersection`. `None` parts are left out.
pub fn metric_parts(tasks: &[TaskCount], ks: &[usize]) -> Vec<(String, Parts)> {
    let mut out = Vec::new();
    for &k in ks {
        let parts: Option<Parts> = tasks
            .iter()
            .map(|t| pass_at_k(t.n, t.c, k).map(|p| (p, 1.0)))
            .collect();
        if let Some(parts) = parts.filter(|p| !p.is_empty()) {
            out.push((format!("pass@{k}"), parts));
        }
    }
    if !tasks.is_empty() {
        let parts = tasks
            .iter()
            .map(|t| (f64::from(u8::from(t.n > 0 && t.c == t.n)), 1.0))
            .collect();
        out.push(("intersection".to_string(), parts));
    }
    out
}

/// `num / den`; `None` when nothing was counted (a draw of tasks without any unit of the
/// rate, e.g. only tasks a label has no trajectory of).
fn ratio(num: f64, den: f64) -> Option<f64> {
    (den > 0.0).then(|| num / den)
}

/// `Σ num / Σ den` (0 when nothing was counted).
pub fn value(parts: &[(f64, f64)]) -> f64 {
    let (n, d) = parts
        .iter()
        .fold((0.0, 0.0), |(n, d), (a, b)| (n + a, d + b));
    ratio(n, d).unwrap_or(0.0)
}

/// The seeded generator of the draws for `names` (see the module docs).
pub fn rng_for(names: &[&str]) -> ChaCha8Rng {
    let digest = crate::util::sha256_hex(names.join("\u{1f}").as_bytes());
    let mixed = u64::from_str_radix(&digest[..16], 16).unwrap_or(0);
    ChaCha8Rng::seed_from_u64(SEED ^ mixed)
}

/// The percentile interval of the draws (ranks in the module docs, over the draws that have a
/// value); `None` without any.
pub fn percentile_of(mut draws: Vec<f64>) -> Option<Interval> {
    if draws.is_empty() {
        return None;
    }
    draws.sort_by(f64::total_cmp);
    let b = draws.len();
    let lo = ((1.0 - LEVEL) / 2.0 * b as f64).floor() as usize;
    let hi = (((1.0 + LEVEL) / 2.0 * b as f64).ceil() as usize).clamp(1, b) - 1;
    Some(Interval {
        lo: draws[lo.min(b - 1)],
        hi: draws[hi],
    })
}

/// One task's share of a metric, and how a draw of tasks gives the metric's value.
pub trait TaskStat {
    /// The metric over `tasks` (a draw, tasks repeated as drawn); `None` when the draw
    /// counts nothing.
    fn stat(tasks: &[&Self]) -> Option<f64>;
}

/// A ratio of per-task sums: `Σ num / Σ den`.
impl TaskStat for (f64, f64) {
    fn stat(tasks: &[&Self]) -> Option<f64> {
        let (n, d) = tasks
            .iter()
            .fold((0.0, 0.0), |(n, d), (a, b)| (n + a, d + b));
        ratio(n, d)
    }
}

/// The median of the values of every task drawn, pooled (a task drawn twice counts its
/// values twice); the mean of the middle two for an even count.
impl TaskStat for Vec<f64> {
    fn stat(tasks: &[&Self]) -> Option<f64> {
        let mut all: Vec<f64> = tasks.iter().flat_map(|t| t.iter().copied()).collect();
        median(&mut all)
    }
}

/// The median (mean of the middle two for an even count); `None` for no values.
pub fn median(values: &mut [f64]) -> Option<f64> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let (_, &mut upper, _) = values.select_nth_unstable_by(n / 2, f64::total_cmp);
    if n % 2 == 1 {
        return Some(upper);
    }
    let lower = values[..n / 2]
        .iter()
        .copied()
        .max_by(f64::total_cmp)
        .unwrap_or(upper);
    Some((lower + upper) / 2.0)
}

/// A metric of a label as per-task data, in task-set order.
#[derive(Debug, Clone, PartialEq)]
pub enum Metric {
    /// Pass@k, Intersection@n, a behaviour rate or an ending's share.
    Ratio(Parts),
    /// Values per task pooled into a median: steps before the first edit.
    Median(Vec<Vec<f64>>),
}

impl Metric {
    /// The metric over every task once.
    pub fn value(&self) -> Option<f64> {
        match self {
            Metric::Ratio(p) => TaskStat::stat(&p.iter().collect::<Vec<_>>()),
            Metric::Median(v) => TaskStat::stat(&v.iter().collect::<Vec<_>>()),
        }
    }

    /// Tasks.
    pub fn len(&self) -> usize {
        match self {
            Metric::Ratio(p) => p.len(),
            Metric::Median(v) => v.len(),
        }
    }

    /// No tasks.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// [`estimate`] of either kind.
    pub fn estimate(&self, names: &[&str]) -> Option<(f64, Interval)> {
        match self {
            Metric::Ratio(p) => estimate(p, names),
            Metric::Median(v) => estimate(v, names),
        }
    }

    /// [`smallest_p`] of two metrics of the same kind (1 for different kinds).
    pub fn smallest_p(&self, other: &Metric) -> f64 {
        match (self, other) {
            (Metric::Ratio(a), Metric::Ratio(b)) => smallest_p(a, b),
            (Metric::Median(a), Metric::Median(b)) => smallest_p(a, b),
            _ => 1.0,
        }
    }

    /// [`paired`] of two metrics of the same kind; `None` for different kinds.
    pub fn paired(&self, other: &Metric, names: &[&str]) -> Option<(f64, Interval, f64)> {
        match (self, other) {
            (Metric::Ratio(a), Metric::Ratio(b)) => paired(a, b, names),
            (Metric::Median(a), Metric::Median(b)) => paired(a, b, names),
            _ => None,
        }
    }
}

/// The smallest two-sided p of an exact sign-flip test over `a` and `b` (aligned by task):
/// `min(1, 2 / 2^m)`, `m` the tasks whose two values differ (only the two flips that give every
/// such task the same side reach the extreme).
pub fn smallest_p<T: PartialEq>(a: &[T], b: &[T]) -> f64 {
    let m = a.iter().zip(b).filter(|(x, y)| x != y).count();
    (2.0 / 2f64.powi(i32::try_from(m).unwrap_or(i32::MAX))).min(1.0)
}

/// The metric's value and bootstrap interval over tasks; `names` seed the draws (label,
/// metric). `None` without tasks, or when the metric has no value over all of them.
pub fn estimate<T: TaskStat>(parts: &[T], names: &[&str]) -> Option<(f64, Interval)> {
    if parts.is_empty() {
        return None;
    }
    let value = T::stat(&parts.iter().collect::<Vec<_>>())?;
    let mut rng = rng_for(names);
    let n = parts.len();
    let mut draw: Vec<&T> = Vec::with_capacity(n);
    let draws = (0..RESAMPLES)
        .filter_map(|_| {
            draw.clear();
            draw.extend((0..n).map(|_| &parts[rng.random_range(0..n)]));
            T::stat(&draw)
        })
        .collect();
    Some((value, percentile_of(draws)?))
}

/// The change from `a` to `b` (per-task data aligned by task): `(Δ, interval, p-value)`;
/// `None` without tasks, when the two are not aligned, or when either has no value.
pub fn paired<T: TaskStat>(a: &[T], b: &[T], names: &[&str]) -> Option<(f64, Interval, f64)> {
    if a.is_empty() || a.len() != b.len() {
        return None;
    }
    let all = |x: &[T]| T::stat(&x.iter().collect::<Vec<_>>());
    let delta = all(b)? - all(a)?;
    let mut rng = rng_for(names);
    let n = a.len();
    let (mut da, mut db): (Vec<&T>, Vec<&T>) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let draws = (0..RESAMPLES)
        .filter_map(|_| {
            da.clear();
            db.clear();
            for _ in 0..n {
                let i = rng.random_range(0..n);
                da.push(&a[i]);
                db.push(&b[i]);
            }
            Some(T::stat(&db)? - T::stat(&da)?)
        })
        .collect();
    let interval = percentile_of(draws)?;
    // Sign-flip: under "no difference" the labels of each task's pair are exchangeable.
    let flips: Vec<f64> = (0..RESAMPLES)
        .filter_map(|_| {
            da.clear();
            db.clear();
            for i in 0..n {
                let (x, y) = if rng.random_bool(0.5) {
                    (&b[i], &a[i])
                } else {
                    (&a[i], &b[i])
                };
                da.push(x);
                db.push(y);
            }
            Some(T::stat(&db)? - T::stat(&da)?)
        })
        .collect();
    let at_least = flips
        .iter()
        .filter(|d| d.abs() >= delta.abs() - 1e-12)
        .count();
    let p = (1 + at_least) as f64 / (flips.len() + 1) as f64;
    Some((delta, interval, p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_constant_metric_has_a_point_interval() {
        let parts = vec![(1.0, 1.0); 10];
        let (v, i) = estimate(&parts, &["a", "m"]).unwrap();
        assert_eq!((v, i.lo, i.hi), (1.0, 1.0, 1.0));
    }

    #[test]
    fn percentile_ranks_follow_the_docs() {
        let draws: Vec<f64> = (0..2000).map(f64::from).rev().collect();
        let i = percentile_of(draws).unwrap();
        assert_eq!((i.lo, i.hi), (50.0, 1949.0));
    }

    #[test]
    fn identical_labels_change_nothing_and_a_clear_gain_is_significant() {
        let a: Parts = (0..50)
            .map(|i| (f64::from(u8::from(i % 2 == 0)), 1.0))
            .collect();
        let (d, i, p) = paired(&a, &a, &["a", "a", "m"]).unwrap();
        assert_eq!((d, i.lo, i.hi), (0.0, 0.0, 0.0));
        assert!((p - 1.0).abs() < 1e-12, "{p}");
        let b: Parts = vec![(1.0, 1.0); 50];
        let (d, i, p) = paired(&a, &b, &["a", "b", "m"]).unwrap();
        assert!((d - 0.5).abs() < 1e-12);
        assert!(i.lo > 0.3 && i.hi <= 0.7, "{i:?}");
        assert!(p < 0.001, "{p}");
        // Draws are seeded by the names: the same inputs give the same numbers.
        assert_eq!(paired(&a, &b, &["a", "b", "m"]).unwrap().2, p);
    }

    #[test]
    fn medians_pool_the_values_of_the_tasks_drawn() {
        assert_eq!(median(&mut [9.0, 2.0, 5.0]), Some(5.0));
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&mut []), None);
        // Task x has steps 1 and 3, task y none (no trajectory edits): a draw of only y has
        // no median and is left out, so every interval bound is one of x's medians (2).
        let m = Metric::Median(vec![vec![1.0, 3.0], vec![]]);
        assert_eq!(m.value(), Some(2.0));
        let (v, i) = m.estimate(&["a", "median"]).unwrap();
        assert_eq!((v, i.lo, i.hi), (2.0, 2.0, 2.0));
        // One task per label, so every draw and every flip is that task: Δ = 6 − 2, and both
        // signs occur among the flips, so p is about 1.
        let later = Metric::Median(vec![vec![6.0], vec![]]);
        let (d, i, p) = m.paired(&later, &["a", "b", "median"]).unwrap();
        assert_eq!((d, i.lo, i.hi), (4.0, 4.0, 4.0));
        assert!(p > 0.9, "{p}");
        assert!(m
            .paired(&Metric::Ratio(vec![(1.0, 1.0); 2]), &["x"])
            .is_none());
    }
}
