//! Rank agreement (issue 21; the paper ranks six base models under SWE-agent and under
//! OpenHands, Spearman ρ ≈ 0.89): labels named `model@group` (the group a scaffold or a
//! benchmark) are ranked by Pass@1 within each group, and every two groups that share at least
//! three models are compared on those models.
//!
//! - **Ranks**: 1 = highest Pass@1; ties get the mean of the ranks they span (mid-ranks).
//! - **Spearman's ρ** (Spearman 1904): the Pearson correlation of the two mid-rank vectors,
//!   which is the tie-corrected form (with no ties it equals `1 − 6 Σd² / (n(n² − 1))`).
//! - **Kendall's τ-b** (Kendall 1945): `(C − D) / √((n₀ − T₁)(n₀ − T₂))`, `n₀ = n(n − 1)/2`, C and
//!   D the concordant and discordant pairs, T₁ and T₂ the pairs tied in one ranking.
//! - **Intervals**: the percentile bootstrap over tasks of [`super::uncertainty`]: each draw
//!   takes the same tasks for every label (all labels are scored over one task set), recomputes
//!   every Pass@1, both rankings and the coefficient. A draw in which one ranking is all ties
//!   has no coefficient and is left out.

use rand::Rng;
use serde::Serialize;

use super::uncertainty::{self, Interval, Parts};

/// One model's place in the two groups.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelRanks {
    pub model: String,
    /// (mid-rank, Pass@1) in the first group.
    pub a: (f64, f64),
    /// (mid-rank, Pass@1) in the second group.
    pub b: (f64, f64),
}

/// Two groups' rankings of their common models.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankAgreement {
    pub groups: (String, String),
    pub models: Vec<ModelRanks>,
    pub spearman: Option<f64>,
    pub spearman_interval: Option<Interval>,
    pub kendall: Option<f64>,
    pub kendall_interval: Option<Interval>,
}

/// `model@group` → (model, group).
pub fn split_label(label: &str) -> Option<(&str, &str)> {
    let (model, group) = label.rsplit_once('@')?;
    (!model.is_empty() && !group.is_empty()).then_some((model, group))
}

/// Mid-ranks, 1 for the largest value.
pub fn mid_ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&i, &j| values[j].total_cmp(&values[i]));
    let mut ranks = vec![0.0; values.len()];
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && values[order[end]] == values[order[start]] {
            end += 1;
        }
        // Positions start..end (0-based) hold ranks start+1..=end: their mean.
        let rank = (start + 1 + end) as f64 / 2.0;
        for &i in &order[start..end] {
            ranks[i] = rank;
        }
        start = end;
    }
    ranks
}

/// Spearman's ρ of two value vectors (Pearson on mid-ranks); `None` when a ranking is all ties
/// or there are fewer than two values.
pub fn spearman(a: &[f64], b: &[f64]) -> Option<f64> {
    let (ra, rb) = (mid_ranks(a), mid_ranks(b));
    let n = ra.len() as f64;
    if ra.len() < 2 {
        return None;
    }
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let cov: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = ra.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = rb.iter().map(|y| (y - mb).powi(2)).sum();
    (va > 0.0 && vb > 0.0).then(|| cov / (va * vb).sqrt())
}

/// Kendall's τ-b of two value vectors; `None` when a ranking is all ties.
pub fn kendall(a: &[f64], b: &[f64]) -> Option<f64> {
    let n = a.len();
    let (mut concordant, mut discordant, mut ties_a, mut ties_b) = (0i64, 0i64, 0i64, 0i64);
    for i in 0..n {
        for j in i + 1..n {
            let (da, db) = (a[i] - a[j], b[i] - b[j]);
            if da == 0.0 {
                ties_a += 1;
            }
            if db == 0.0 {
                ties_b += 1;
            }
            if da * db > 0.0 {
                concordant += 1;
            } else if da * db < 0.0 {
                discordant += 1;
            }
        }
    }
    let pairs = (n * n.saturating_sub(1) / 2) as i64;
    let den = (((pairs - ties_a) * (pairs - ties_b)) as f64).sqrt();
    (den > 0.0).then(|| (concordant - discordant) as f64 / den)
}

/// Every two groups' agreement: `labels` are (label, Pass@1 parts in task-set order).
pub fn agreements(labels: &[(&str, &Parts)]) -> Vec<RankAgreement> {
    let mut groups: Vec<&str> = labels
        .iter()
        .filter_map(|(l, _)| split_label(l).map(|(_, g)| g))
        .collect();
    groups.sort_unstable();
    groups.dedup();
    let mut out = Vec::new();
    for (i, ga) in groups.iter().enumerate() {
        for gb in &groups[i + 1..] {
            let find = |model: &str, group: &str| {
                labels
                    .iter()
                    .find(|(l, _)| split_label(l) == Some((model, group)))
                    .map(|(_, p)| *p)
            };
            let mut common: Vec<(&str, &Parts, &Parts)> = labels
                .iter()
                .filter_map(|(l, _)| split_label(l).filter(|(_, g)| g == ga).map(|(m, _)| m))
                .filter_map(|m| Some((m, find(m, ga)?, find(m, gb)?)))
                .filter(|(_, pa, pb)| pa.len() == pb.len())
                .collect();
            common.sort_by(|x, y| x.0.cmp(y.0));
            if common.len() < 3 || common.iter().any(|(_, p, _)| p.len() != common[0].1.len()) {
                continue;
            }
            out.push(agreement(ga, gb, &common));
        }
    }
    out
}

fn agreement(ga: &str, gb: &str, common: &[(&str, &Parts, &Parts)]) -> RankAgreement {
    let va: Vec<f64> = common
        .iter()
        .map(|(_, p, _)| uncertainty::value(p))
        .collect();
    let vb: Vec<f64> = common
        .iter()
        .map(|(_, _, p)| uncertainty::value(p))
        .collect();
    let (ra, rb) = (mid_ranks(&va), mid_ranks(&vb));
    let models = common
        .iter()
        .enumerate()
        .map(|(i, (m, _, _))| ModelRanks {
            model: m.to_string(),
            a: (ra[i], va[i]),
            b: (rb[i], vb[i]),
        })
        .collect();
    // One draw of tasks for every label: the rankings move together with the task set.
    let tasks = common[0].1.len();
    let mut rng = uncertainty::rng_for(&["rank", ga, gb]);
    let (mut rhos, mut taus) = (Vec::new(), Vec::new());
    for _ in 0..uncertainty::RESAMPLES {
        let draw: Vec<usize> = (0..tasks).map(|_| rng.random_range(0..tasks)).collect();
        let pass1 = |p: &Parts| {
            let (n, d) = draw
                .iter()
                .fold((0.0, 0.0), |(n, d), &i| (n + p[i].0, d + p[i].1));
            if d > 0.0 {
                n / d
            } else {
                0.0
            }
        };
        let da: Vec<f64> = common.iter().map(|(_, p, _)| pass1(p)).collect();
        let db: Vec<f64> = common.iter().map(|(_, _, p)| pass1(p)).collect();
        rhos.extend(spearman(&da, &db));
        taus.extend(kendall(&da, &db));
    }
    RankAgreement {
        groups: (ga.to_string(), gb.to_string()),
        models,
        spearman: spearman(&va, &vb),
        spearman_interval: uncertainty::percentile_of(rhos),
        kendall: kendall(&va, &vb),
        kendall_interval: uncertainty::percentile_of(taus),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coefficients_by_hand() {
        assert_eq!(mid_ranks(&[0.3, 0.1, 0.3, 0.2]), [1.5, 4.0, 1.5, 3.0]);
        // The same order: 1; reversed: −1.
        let a = [0.1, 0.2, 0.3, 0.4];
        assert_eq!(spearman(&a, &[1.0, 2.0, 3.0, 4.0]), Some(1.0));
        assert_eq!(kendall(&a, &[4.0, 3.0, 2.0, 1.0]), Some(-1.0));
        // One swap of neighbours among 4: Σd² = 2, ρ = 1 − 6·2/(4·15) = 0.8; C = 5, D = 1,
        // τ = 4/6.
        let b = [0.1, 0.3, 0.2, 0.4];
        assert!((spearman(&a, &b).unwrap() - 0.8).abs() < 1e-12);
        assert!((kendall(&a, &b).unwrap() - 4.0 / 6.0).abs() < 1e-12);
        // All ties: no coefficient.
        assert_eq!(spearman(&a, &[0.5; 4]), None);
        assert_eq!(kendall(&a, &[0.5; 4]), None);
        assert_eq!(split_label("qwen-7b@mini"), Some(("qwen-7b", "mini")));
        assert_eq!(split_label("stage2-end"), None);
    }
}
