//! Pass@k and Intersection@n (ASAP §metrics).
//!
//! Pass@k uses the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models
//! Trained on Code", §2.1): for a task with `n` runs of which `c` resolved it,
//! `pass@k = 1 - C(n-c, k) / C(n, k)`, averaged over tasks. The binomial ratio is computed as
//! the product `∏_{i=n-c+1}^{n} (1 - k/i)`, which never forms a large binomial coefficient and
//! stays exact to a few ulps for any `n`.

use serde::Serialize;

/// Unbiased Pass@k for one task: `1 - C(n-c, k) / C(n, k)` (Chen et al. 2021).
///
/// `n` runs, `c` of them resolved, `k` samples. Returns a probability in `[0, 1]`, or `None`
/// when it is undefined: `k == 0`, `k > n`, or `c > n`.
pub fn pass_at_k(n: usize, c: usize, k: usize) -> Option<f64> {
    if k == 0 || k > n || c > n {
        return None;
    }
    if n - c < k {
        // Every k-subset contains a resolved run.
        return Some(1.0);
    }
    // C(n-c, k) / C(n, k) = ∏_{i=n-c+1}^{n} (1 - k / i)
    let ratio: f64 = (n - c + 1..=n).map(|i| 1.0 - k as f64 / i as f64).product();
    Some(1.0 - ratio)
}

/// Runs and resolved runs of one task (one label, one `instance_id`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskCount {
    /// The task.
    pub instance_id: String,
    /// Runs (trajectories) of the task.
    pub n: usize,
    /// Resolved runs.
    pub c: usize,
}

/// Pass@k averaged over tasks (ASAP §metrics; Chen et al. 2021), `None` when some task has
/// fewer than `k` runs (or there are no tasks): a mean over a subset of tasks would not be
/// comparable.
pub fn mean_pass_at_k(tasks: &[TaskCount], k: usize) -> Option<f64> {
    if tasks.is_empty() {
        return None;
    }
    let mut sum = 0.0;
    for t in tasks {
        sum += pass_at_k(t.n, t.c, k)?;
    }
    Some(sum / tasks.len() as f64)
}

/// Intersection@n: tasks solved in all of their runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Intersection {
    /// Tasks with `c == n` (and `n ≥ 1`).
    pub solved: usize,
    /// All tasks.
    pub tasks: usize,
    /// `solved / tasks` in `[0, 1]` (0 when there are no tasks).
    pub fraction: f64,
}

/// Intersection@n (ASAP §metrics): the tasks resolved in every one of their `n` runs.
pub fn intersection(tasks: &[TaskCount]) -> Intersection {
    let solved = tasks.iter().filter(|t| t.n > 0 && t.c == t.n).count();
    let fraction = if tasks.is_empty() {
        0.0
    } else {
        solved as f64 / tasks.len() as f64
    };
    Intersection {
        solved,
        tasks: tasks.len(),
        fraction,
    }
}

/// Stable versus occasional capability (issue 21; the paper's "82 instances solved in all
/// eight runs" against "24.20 % Pass@8 yet zero in all eight"): each task of the set in exactly
/// one class by its resolved runs `c` of `n`. `every + some + none = tasks`; `every` is
/// Intersection@n's numerator and `every + some` the tasks Pass@n counts (k = each task's n).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Stability {
    /// Resolved in every run (`c == n`, `n ≥ 1`).
    pub every: usize,
    /// Resolved in some runs but not all (`0 < c < n`).
    pub some: usize,
    /// Resolved in no run (`c == 0`).
    pub none: usize,
    /// All tasks.
    pub tasks: usize,
}

/// The class of one task's runs: `every`, `some` or `none` (see [`Stability`]).
pub fn stability_class(t: &TaskCount) -> &'static str {
    match (t.c, t.n) {
        (0, _) => "none",
        (c, n) if c >= n => "every",
        _ => "some",
    }
}

/// [`Stability`] over a label's tasks.
pub fn stability(tasks: &[TaskCount]) -> Stability {
    let mut s = Stability {
        every: 0,
        some: 0,
        none: 0,
        tasks: tasks.len(),
    };
    for t in tasks {
        let class = match stability_class(t) {
            "every" => &mut s.every,
            "some" => &mut s.some,
            _ => &mut s.none,
        };
        *class += 1;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binom(n: u64, k: u64) -> f64 {
        if k > n {
            return 0.0;
        }
        (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
    }

    #[test]
    fn matches_the_binomial_definition() {
        for n in 1..=20usize {
            for c in 0..=n {
                for k in 1..=n {
                    let direct = 1.0 - binom((n - c) as u64, k as u64) / binom(n as u64, k as u64);
                    let got = pass_at_k(n, c, k).unwrap_or(f64::NAN);
                    assert!((got - direct).abs() < 1e-12, "n={n} c={c} k={k}");
                }
            }
        }
    }

    #[test]
    fn undefined_cases() {
        assert_eq!(pass_at_k(3, 1, 4), None);
        assert_eq!(pass_at_k(3, 1, 0), None);
        assert_eq!(pass_at_k(3, 4, 1), None);
        assert_eq!(pass_at_k(1000, 0, 1000), Some(0.0));
        assert_eq!(pass_at_k(1000, 1, 1000), Some(1.0));
    }
}
