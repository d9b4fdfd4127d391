//! `--plots DIR`: `pass_at_k.svg` (one line per label, Pass@k for every k from 1 to the
//! label's fewest runs of a task; only with results) and `behaviour.svg` (grouped horizontal
//! bars: one group per behaviour rate, one bar per label). SVG text needs no font files.

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::metrics::mean_pass_at_k;
use super::summary::Report;

/// Errors writing plots.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("creating {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("drawing {path}: {message}")]
    Draw { path: PathBuf, message: String },
}

/// Writes the plots into `dir` (created if missing) and returns the files written:
/// `behaviour.svg` always, `pass_at_k.svg` when the report has results.
///
/// Errors: the directory cannot be created, or drawing/writing a file fails.
pub fn write(report: &Report, dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    std::fs::create_dir_all(dir).map_err(|source| PlotError::Dir {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut written = Vec::new();
    if report.has_results {
        let path = dir.join("pass_at_k.svg");
        pass_at_k(report, &path).map_err(|message| PlotError::Draw {
            path: path.clone(),
            message,
        })?;
        written.push(path);
    }
    let path = dir.join("behaviour.svg");
    behaviour(report, &path).map_err(|message| PlotError::Draw {
        path: path.clone(),
        message,
    })?;
    written.push(path);
    Ok(written)
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Pass@k curves: x = k, y = Pass@k in %.
fn pass_at_k(report: &Report, path: &Path) -> Result<(), String> {
    let curves: Vec<(&str, Vec<(f64, f64)>)> = report
        .labels
        .iter()
        .map(|l| {
            let points = (1..=l.min_runs)
                .filter_map(|k| mean_pass_at_k(&l.task_counts, k).map(|p| (k as f64, p * 100.0)))
                .collect();
            (l.label.as_str(), points)
        })
        .collect();
    let k_max = curves
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(k, _)| *k))
        .fold(1.0, f64::max);
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Pass@k", ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0.5..k_max + 0.5, 0.0..100.0)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("k")
        .y_desc("Pass@k (%)")
        .x_labels((k_max as usize).min(20))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()
        .map_err(err)?;
    for (i, (label, points)) in curves.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(err)?
            .label(*label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// Behaviour bars: one group per rate, one bar per label, x = rate in %.
fn behaviour(report: &Report, path: &Path) -> Result<(), String> {
    let rates: Vec<_> = report
        .labels
        .iter()
        .map(|l| l.behaviour.rates(report.has_results))
        .collect();
    // A rate that is unknown for a label (patch rates the results do not give) gets no bar,
    // never a zero one, and its title says so.
    let titles: Vec<String> = rates
        .first()
        .map(|r| {
            r.iter()
                .enumerate()
                .map(|(i, rate)| {
                    if rates.iter().any(|l| l[i].value().is_none()) {
                        format!("{} (no bar: unknown)", rate.title)
                    } else {
                        rate.title.to_string()
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let groups = titles.len().max(1);
    let labels = report.labels.len().max(1);
    let group_px = (labels * 14 + 12).max(28);
    let height = (groups * group_px + 130) as u32;
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Behaviour (% of trajectories; turn rates: % of turns)",
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(270)
        .build_cartesian_2d(0.0..100.0, 0.0..groups as f64)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_desc("%")
        .draw()
        .map_err(err)?;
    let width = 0.8 / labels as f64;
    for (j, label) in report.labels.iter().enumerate() {
        let color = Palette99::pick(j).to_rgba();
        let bars = rates[j].iter().enumerate().filter_map(move |(i, r)| {
            // Group i from the top; bar j from the top of its group.
            let top = (groups - i) as f64 - 0.1 - j as f64 * width;
            let value = r.value()? * 100.0;
            Some(Rectangle::new(
                [(0.0, top - width), (value, top)],
                color.filled(),
            ))
        });
        chart
            .draw_series(bars)
            .map_err(err)?
            .label(label.label.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    let style =
        TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
    for (i, title) in titles.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(0.0, (groups - i) as f64 - 0.5));
        root.draw(&Text::new(title.as_str(), (x - 8, y), style.clone()))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}
