//! `report --html FILE`: the report as one self-contained HTML page (inline CSS and inline SVG;
//! no script, no external file, nothing fetched), for reading a sweep in a browser.
//!
//! The page is rendered from the JSON document ([`super::output::to_json`]), never from the
//! [`super::Report`] itself, so its numbers are the JSON's (and the Markdown's and CSV's): a field
//! the JSON lacks is shown as empty or `–`, so the page works with older and newer documents.
//! The template is `templates/report/report.html` (embedded), rendered by minijinja with HTML
//! auto-escaping on: labels, metric names, commands and session ids are untrusted text. This
//! module arranges what a template cannot do well (the order of map keys, the titles of metric
//! names, the plots' geometry); the template writes every element, text and SVG alike.

use std::collections::{BTreeSet, HashMap};

use minijinja::{context, AutoEscape, Environment, UndefinedBehavior};
use serde::Serialize;
use serde_json::Value;

use super::behaviour::{Aggregate, Ending};

/// `--viewer-url`'s default: where `asap-proxy view` listens by default (docs/viewer.md).
pub const DEFAULT_VIEWER_URL: &str = "http://127.0.0.1:8200";

/// Checks `--viewer-url`: the viewer's base address, to which `/ui/session/{id}` is
/// appended: `http` or `https` (any case), a host, no query or fragment (the path would land
/// inside them), and not ending in `/ui` (it would be doubled).
///
/// Errors: a message naming what is wrong.
pub fn check_viewer_url(url: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("--viewer-url {url:?}: {why}"));
    let Some((scheme, rest)) = url.split_once("://") else {
        return bad("not an http:// or https:// URL");
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return bad("not an http:// or https:// URL");
    }
    if rest.split('/').next().is_none_or(str::is_empty) {
        return bad("no host");
    }
    if rest.contains(['?', '#']) {
        return bad("a query or fragment (the session path would land inside it)");
    }
    if rest.trim_end_matches('/').ends_with("/ui") {
        return bad("give the viewer's base address, without /ui");
    }
    Ok(())
}

const TEMPLATE: &str = include_str!("../../templates/report/report.html");

/// Series colours, one per label (cycled).
const PALETTE: [&str; 10] = [
    "#2f5fb3", "#c8553d", "#2a9d5b", "#8e44ad", "#d4a017", "#17a2b8", "#e0609a", "#6c757d",
    "#7a5c1e", "#1d2330",
];

/// The page for the JSON document `doc` of a report, linking each trajectory's session to the
/// viewer at `viewer_url` (`{viewer_url}/ui/session/{session}`).
///
/// Errors: the template fails to render (a bug: every field it reads may be absent).
pub fn render(doc: &Value, viewer_url: &str) -> Result<String, minijinja::Error> {
    let mut env = Environment::new();
    // Absent fields (older or newer JSON) read as undefined, print as nothing, iterate as empty.
    env.set_undefined_behavior(UndefinedBehavior::Chainable);
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    env.add_filter("pct", |v: Option<f64>, digits: Option<usize>| {
        v.map_or_else(
            || "–".to_string(),
            |v| format!("{:.*}", digits.unwrap_or(1), v * 100.0),
        )
    });
    env.add_filter("signed_pct", |v: Option<f64>| {
        v.map_or_else(|| "–".to_string(), |v| format!("{:+.1}", v * 100.0))
    });
    env.add_filter("fixed", |v: Option<f64>, digits: usize| {
        v.map_or_else(|| "–".to_string(), |v| format!("{v:.digits$}"))
    });
    env.add_filter("signed_fixed", |v: Option<f64>, digits: usize| {
        v.map_or_else(|| "–".to_string(), |v| format!("{v:+.digits$}"))
    });
    // Rust's own display of a number (`2`, `2.5`), as the Markdown prints ranks and medians.
    env.add_filter("num", |v: Option<f64>| {
        v.map_or_else(|| "–".to_string(), |v| format!("{v}"))
    });
    env.add_filter("signed_num", |v: Option<f64>| {
        v.map_or_else(|| "–".to_string(), |v| format!("{v:+}"))
    });
    env.add_filter("chars", |text: Option<String>, n: usize| -> String {
        text.unwrap_or_default().chars().take(n).collect()
    });
    env.add_filter("title", |metric: Option<String>| {
        metric_title(&metric.unwrap_or_default())
    });
    env.add_function(
        "metric_value",
        |v: Option<f64>, metric: Option<String>, unit: Option<String>, signed: Option<bool>| {
            let raw = is_raw(&metric.unwrap_or_default(), unit.as_deref());
            v.map_or_else(
                || "–".to_string(),
                |v| scaled(v, raw, signed.unwrap_or(false)),
            )
        },
    );
    env.add_function(
        "metric_interval",
        |lo: Option<f64>,
         hi: Option<f64>,
         metric: Option<String>,
         unit: Option<String>,
         signed: Option<bool>| {
            let raw = is_raw(&metric.unwrap_or_default(), unit.as_deref());
            let signed = signed.unwrap_or(false);
            match (lo, hi) {
                (Some(lo), Some(hi)) => {
                    format!("{} – {}", scaled(lo, raw, signed), scaled(hi, raw, signed))
                }
                _ => "–".to_string(),
            }
        },
    );
    // `count (share%)` of a total, as the Markdown's network and stability tables.
    env.add_function(
        "share",
        |count: Option<f64>, total: Option<f64>, digits: usize| match (count, total) {
            (Some(c), Some(t)) if t > 0.0 => format!("{c} ({:.digits$}%)", c * 100.0 / t),
            _ => "–".to_string(),
        },
    );
    // A session's address in the viewer, escaped here for an attribute (the URL keeps its
    // slashes readable; auto-escaping would write them as `&#x2f;`).
    let viewer = viewer_url.trim_end_matches('/').to_string();
    env.add_filter("session_href", move |session: Option<String>| {
        minijinja::Value::from_safe_string(escape_attribute(&format!(
            "{viewer}/ui/session/{}",
            crate::util::path_segment(&session.unwrap_or_default())
        )))
    });
    env.add_template("report.html", TEMPLATE)?;
    let labels: Vec<&Value> = list(doc, "labels").iter().collect();
    let names: Vec<String> = labels.iter().map(|l| text(l, "label")).collect();
    env.get_template("report.html")?.render(context! {
        doc => minijinja::Value::from_serialize(doc),
        labels => names,
        viewer => viewer_url.trim_end_matches('/'),
        protocol_rows => protocol_rows(&labels),
        behaviour_rows => behaviour_rows(&labels),
        ending_rows => ending_rows(&labels),
        nudge_rows => nudge_rows(&labels),
        estimate_rows => estimate_rows(&labels),
        metric_plots => metric_plots(&labels),
        pass_plot => pass_plot(&labels),
        trajectories_open => list(doc, "trajectories").len() <= 200,
    })
}

/// `doc[key]` as a list; empty when absent or not a list.
fn list<'a>(doc: &'a Value, key: &str) -> &'a [Value] {
    doc.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// `doc[key]` as text; empty when absent.
fn text(doc: &Value, key: &str) -> String {
    match doc.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    }
}

/// The keys of `doc[key]` (an object) over every label, each once, in the order first seen.
fn keys_of(labels: &[&Value], key: &str) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut keys = Vec::new();
    for l in labels {
        if let Some(map) = l.get(key).and_then(Value::as_object) {
            for k in map.keys() {
                if seen.insert(k.clone()) {
                    keys.push(k.clone());
                }
            }
        }
    }
    keys
}

/// A metric whose values are not fractions (shown as they are, not in %): the JSON's `unit`
/// when given (`fraction` or another unit), else by name (`…steps…`).
fn is_raw(metric: &str, unit: Option<&str>) -> bool {
    unit.map_or_else(|| metric.contains("steps"), |u| u != "fraction")
}

/// `v` with one decimal: in % for a fraction, as it is otherwise; with a sign when `signed`.
fn scaled(v: f64, raw: bool, signed: bool) -> String {
    let v = if raw { v } else { v * 100.0 };
    if signed {
        format!("{v:+.1}")
    } else {
        format!("{v:.1}")
    }
}

/// The title of a metric name, as the Markdown's tables name it: `Pass@k`, `Intersection@n`,
/// a behaviour's row title, an ending, the median steps; otherwise the name itself.
pub fn metric_title(metric: &str) -> String {
    if let Some(k) = metric.strip_prefix("pass@") {
        return format!("Pass@{k}");
    }
    if metric == "intersection" {
        return "Intersection@n".into();
    }
    if metric == "median_steps_before_first_edit" {
        return "median steps before the first edit".into();
    }
    if let Some(name) = metric.strip_prefix("ending:") {
        return match Ending::ALL.iter().find(|e| e.as_str() == name) {
            Some(e) if e.is_abnormal() => format!("ended: {name} (abnormal)"),
            _ => format!("ended: {name}"),
        };
    }
    Aggregate::default()
        .rates(true)
        .iter()
        .find(|r| r.key == metric)
        .map_or_else(|| metric.to_string(), |r| r.title.to_string())
}

/// `text` for a double-quoted HTML attribute: `&`, `<`, `>`, `"` and `'` as references.
fn escape_attribute(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A table row: its name and one cell per label.
#[derive(Debug, Serialize)]
struct Row {
    name: String,
    /// Marked (an abnormal ending).
    mark: bool,
    cells: Vec<String>,
}

/// A `value → trajectories` map as the Markdown's protocol cell: the value alone, `v (n), …`
/// when several, `–` when none.
fn counts(map: Option<&Value>) -> String {
    let Some(map) = map.and_then(Value::as_object).filter(|m| !m.is_empty()) else {
        return "–".into();
    };
    if map.len() == 1 {
        return map.keys().next().cloned().unwrap_or_default();
    }
    map.iter()
        .map(|(k, n)| format!("{k} ({n})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The protocol table: the Markdown's settings first, then any other setting the JSON has.
fn protocol_rows(labels: &[&Value]) -> Vec<Row> {
    const SETTINGS: [(&str, &str); 9] = [
        ("mode", "mode"),
        ("tool calls (passthrough)", "tool_calls"),
        ("format", "format"),
        ("prefix K", "prefix_k"),
        ("prefix set", "prefix_set"),
        ("prefix coverage", "prefix_coverage"),
        ("rules", "rules"),
        ("backend model", "backend_model"),
        ("proxy version", "proxy_version"),
    ];
    let protocols: Vec<Option<&Value>> = labels.iter().map(|l| l.get("protocol")).collect();
    let coverage = |p: Option<&Value>| {
        let sum = |key: &str| {
            p.and_then(|p| p.get(key))
                .and_then(Value::as_object)
                .map_or(0, |m| m.values().filter_map(Value::as_u64).sum::<u64>())
        };
        let total = sum("format").max(1) as f64;
        let shares = p.and_then(|p| p.get("prefix_coverage"));
        ["task", "demonstration", "none"]
            .iter()
            .map(|s| {
                let n = shares
                    .and_then(|m| m.get(*s))
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                format!("{s} {:.1}%", n as f64 * 100.0 / total)
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut rows: Vec<Row> = SETTINGS
        .iter()
        .map(|(name, key)| Row {
            name: (*name).to_string(),
            mark: false,
            cells: protocols
                .iter()
                .map(|p| {
                    if *key == "prefix_coverage" {
                        coverage(*p)
                    } else {
                        counts(p.and_then(|p| p.get(*key)))
                    }
                })
                .collect(),
        })
        .collect();
    let known: BTreeSet<&str> = SETTINGS.iter().map(|(_, k)| *k).collect();
    let mut others = BTreeSet::new();
    for p in protocols.iter().flatten() {
        if let Some(m) = p.as_object() {
            others.extend(m.keys().filter(|k| !known.contains(k.as_str())).cloned());
        }
    }
    for key in others {
        rows.push(Row {
            cells: protocols
                .iter()
                .map(|p| counts(p.and_then(|p| p.get(&key))))
                .collect(),
            name: key,
            mark: false,
        });
    }
    rows
}

/// `rate (count/total)`, or `unknown (…)` when the results do not say for some runs (the
/// Markdown's behaviour cell).
fn rate_cell(r: Option<&Value>) -> String {
    let Some(r) = r else {
        return "–".into();
    };
    let n = |k: &str| r.get(k).and_then(Value::as_u64).unwrap_or(0);
    let (count, total, unknown) = (n("count"), n("total"), n("unknown"));
    if unknown == 0 {
        let rate = r
            .get("rate")
            .and_then(Value::as_f64)
            .map_or_else(|| "–".to_string(), |v| format!("{:.1}", v * 100.0));
        return format!("{rate} ({count}/{total})");
    }
    if unknown == total {
        return format!("unknown (all {total})");
    }
    format!(
        "unknown ({count}/{} known, {unknown} unknown)",
        total - unknown
    )
}

/// The behaviour table: one row per behaviour key (in the JSON's order), then the median
/// steps before the first edit.
fn behaviour_rows(labels: &[&Value]) -> Vec<Row> {
    let mut rows: Vec<Row> = keys_of(labels, "behaviour")
        .into_iter()
        .map(|key| Row {
            name: metric_title(&key),
            mark: false,
            cells: labels
                .iter()
                .map(|l| rate_cell(l.get("behaviour").and_then(|b| b.get(&key))))
                .collect(),
        })
        .collect();
    rows.push(Row {
        name: "median steps before the first edit".into(),
        mark: false,
        cells: labels
            .iter()
            .map(|l| {
                match l
                    .get("median_steps_before_first_edit")
                    .and_then(Value::as_f64)
                {
                    Some(m) => format!(
                        "{m} ({} editing)",
                        l.get("trajectories_editing")
                            .and_then(Value::as_u64)
                            .unwrap_or(0)
                    ),
                    None => "– (no edit)".into(),
                }
            })
            .collect(),
    });
    rows
}

/// How the runs ended: every ending of [`Ending::ALL`] (abnormal ones marked), then any other
/// the JSON names; each cell `share (count/trajectories)`.
fn ending_rows(labels: &[&Value]) -> Vec<Row> {
    let mut names: Vec<String> = Ending::ALL.iter().map(|e| e.as_str().to_string()).collect();
    for k in keys_of(labels, "endings") {
        if !names.contains(&k) {
            names.push(k);
        }
    }
    let totals: Vec<u64> = labels
        .iter()
        .map(|l| {
            l.get("endings")
                .and_then(Value::as_object)
                .map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
        })
        .collect();
    names
        .into_iter()
        .map(|name| {
            let cells = labels
                .iter()
                .zip(&totals)
                .map(|(l, &t)| {
                    let n = l
                        .get("endings")
                        .and_then(|m| m.get(&name))
                        .and_then(Value::as_u64)
                        .unwrap_or(0);
                    let share = if t == 0 {
                        "–".to_string()
                    } else {
                        format!("{:.1}", n as f64 * 100.0 / t as f64)
                    };
                    format!("{share} ({n}/{t})")
                })
                .collect();
            let mark = Ending::ALL
                .iter()
                .any(|e| e.as_str() == name && e.is_abnormal());
            Row { name, mark, cells }
        })
        .collect()
}

/// The metrics of the labels' `estimates`, each once, in the order first seen, with the unit
/// the JSON gives (if any).
fn metrics_of(labels: &[&Value]) -> Vec<(String, Option<String>)> {
    let mut metrics: Vec<(String, Option<String>)> = Vec::new();
    let mut seen = BTreeSet::new();
    for l in labels {
        for e in l
            .get("estimates")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(m) = e.get("metric").and_then(Value::as_str) else {
                continue;
            };
            if seen.insert(m.to_string()) {
                let unit = e.get("unit").and_then(Value::as_str).map(String::from);
                metrics.push((m.to_string(), unit));
            }
        }
    }
    metrics
}

/// Each label's estimates by metric name.
fn estimates_by_label<'a>(labels: &[&'a Value]) -> Vec<HashMap<&'a str, &'a Value>> {
    labels
        .iter()
        .map(|l| {
            l.get("estimates")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|e| Some((e.get("metric")?.as_str()?, e)))
                .collect()
        })
        .collect()
}

/// One row of the estimates table: a metric, and per label `value (lo – hi)`.
#[derive(Debug, Serialize)]
struct EstimateRow {
    metric: String,
    title: String,
    /// `%`, or the unit of a metric that is not a fraction.
    unit: String,
    cells: Vec<String>,
}

/// The estimates as a table: one row per metric (in the order first seen), one column per
/// label; the value and its 95 % interval in % (a median of steps in steps).
fn estimate_rows(labels: &[&Value]) -> Vec<EstimateRow> {
    let by_label = estimates_by_label(labels);
    metrics_of(labels)
        .into_iter()
        .map(|(metric, unit)| {
            let raw = is_raw(&metric, unit.as_deref());
            let cells = by_label
                .iter()
                .map(
                    |est| match est.get(metric.as_str()).and_then(|e| estimate_of(e)) {
                        Some((v, Some((lo, hi)))) => format!(
                            "{} ({} – {})",
                            scaled(v, raw, false),
                            scaled(lo, raw, false),
                            scaled(hi, raw, false)
                        ),
                        Some((v, None)) => scaled(v, raw, false),
                        None => "–".into(),
                    },
                )
                .collect();
            EstimateRow {
                title: metric_title(&metric),
                unit: if raw {
                    unit.unwrap_or_else(|| "steps".into())
                } else {
                    "%".into()
                },
                metric,
                cells,
            }
        })
        .collect()
}

/// Nudges fired: one row per kind the JSON names.
fn nudge_rows(labels: &[&Value]) -> Vec<Row> {
    keys_of(labels, "nudges_fired")
        .into_iter()
        .map(|kind| Row {
            cells: labels
                .iter()
                .map(|l| {
                    l.get("nudges_fired")
                        .and_then(|m| m.get(&kind))
                        .map_or_else(|| "–".to_string(), |n| n.to_string())
                })
                .collect(),
            name: kind,
            mark: false,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Plots: geometry here, elements in the template.

/// One SVG chart.
#[derive(Debug, Serialize)]
struct Plot {
    /// The metric's name (`pass@1`), or `pass@k` for the curves.
    metric: String,
    title: String,
    /// The title with its unit, unless it names one.
    heading: String,
    /// The y axis's unit: `%` or `steps`.
    unit: &'static str,
    width: f64,
    height: f64,
    /// The plot area: x from `left` to `right`, y from `top` to `bottom`.
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    y_ticks: Vec<Tick>,
    x_ticks: Vec<Tick>,
    /// Tick texts turned 35° (many or long labels).
    rotate: bool,
    x_title: String,
    series: Vec<Series>,
    /// A legend at the right (one entry per series).
    legend: bool,
}

#[derive(Debug, Serialize)]
struct Tick {
    pos: f64,
    text: String,
    /// The whole text, when `text` is cut short.
    full: String,
}

#[derive(Debug, Serialize)]
struct Series {
    label: String,
    color: &'static str,
    /// `x,y x,y …` through the points, for a polyline.
    line: String,
    points: Vec<Point>,
    /// The legend entry's y.
    legend_y: f64,
}

#[derive(Debug, Serialize)]
struct Point {
    x: f64,
    y: f64,
    /// The interval's ends (pixels), when known.
    lo: Option<f64>,
    hi: Option<f64>,
    /// `label: value (lo – hi)` for the tooltip.
    tip: String,
    value: String,
}

/// One value of a series: x position index or k, the value and its interval (in the metric's
/// unit: fractions or steps).
struct Datum {
    x: f64,
    value: f64,
    interval: Option<(f64, f64)>,
}

/// The smallest of 1, 2, 2.5, 5 times a power of ten that is at least `v` (at least 1).
fn nice_ceiling(v: f64) -> f64 {
    if v.is_nan() || v <= 1.0 {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|c| *c >= v * (1.0 - 1e-12))
        .unwrap_or(10.0 * mag)
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// Tick text: as few decimals as the number needs (up to 2).
fn tick_text(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A label cut to `n` characters (with `…`) for a tick or legend; the whole is in a tooltip.
fn short(label: &str, n: usize) -> String {
    if label.chars().count() <= n {
        label.to_string()
    } else {
        let mut s: String = label.chars().take(n - 1).collect();
        s.push('…');
        s
    }
}

/// A chart of `series` (label, data): `raw` values are drawn as they are (steps), others in %;
/// `x_ticks` are the x positions' names, at `x` = their index (or k − 1 for the curves).
fn plot(
    metric: &str,
    title: String,
    raw: bool,
    x_names: Vec<String>,
    x_title: &str,
    series: Vec<(String, &'static str, Vec<Datum>)>,
    legend: bool,
) -> Plot {
    let scale = if raw { 1.0 } else { 100.0 };
    let top_value = series
        .iter()
        .flat_map(|(_, _, d)| d.iter())
        .map(|d| d.interval.map_or(d.value, |(_, hi)| hi.max(d.value)) * scale)
        .fold(0.0, f64::max);
    // A percentage axis shows at least 0–10 %, so that zeros do not look like a scale of 1 %.
    let y_max = if raw {
        nice_ceiling(top_value * 1.05)
    } else {
        nice_ceiling((top_value * 1.05).max(10.0)).min(100.0)
    };
    let slots = x_names.len().max(1);
    let longest = x_names
        .iter()
        .map(|n| n.chars().count().min(24))
        .max()
        .unwrap_or(0) as f64;
    // The curves' ticks are k (short numbers): never turned.
    let rotate = !legend && (slots > 4 || longest > 10.0);
    // The curves' k axis keeps within about 560 px however many k there are.
    let step_px = if legend {
        (560.0 / slots as f64).min(56.0)
    } else {
        56.0
    };
    // Turned tick texts reach left of their slot by up to cos 35° of their length (~6 px a
    // character): the plot area starts far enough right to keep the first one inside.
    let left = if rotate {
        (16.0 + longest * 6.0 * 0.82 - step_px / 2.0).max(56.0)
    } else {
        56.0
    };
    let top = 34.0;
    let legend_px = if legend { 190.0 } else { 0.0 };
    let width = (left + 34.0 + slots as f64 * step_px).max(420.0) + legend_px;
    let right = width - 16.0 - legend_px;
    let bottom = top + 200.0;
    let height = bottom
        + if rotate {
            16.0 + longest * 6.0 * 0.58
        } else {
            40.0
        };
    let step = (right - left) / slots as f64;
    // Several series at one x (the curves) are set a few pixels apart, so that their
    // intervals do not hide each other.
    let count = series.len() as f64;
    let spread = (step / (count + 1.0)).min(6.0);
    let x_at = |i: f64| round1(left + (i + 0.5) * step);
    let y_at = |v: f64| round1(bottom - (v * scale / y_max).clamp(0.0, 1.0) * (bottom - top));
    let unit = if raw { "steps" } else { "%" };
    let y_ticks = (0..=5)
        .map(|i| {
            let v = y_max * f64::from(i) / 5.0;
            Tick {
                pos: round1(bottom - (bottom - top) * f64::from(i) / 5.0),
                text: tick_text(v),
                full: String::new(),
            }
        })
        .collect();
    let x_ticks = x_names
        .iter()
        .enumerate()
        .filter(|(_, name)| !name.is_empty())
        .map(|(i, name)| Tick {
            pos: x_at(i as f64),
            text: short(name, 24),
            full: name.clone(),
        })
        .collect();
    let fmt = |v: f64| scaled(v, raw, false);
    let series = series
        .into_iter()
        .enumerate()
        .map(|(j, (label, color, data))| {
            let points: Vec<Point> = data
                .iter()
                .map(|d| {
                    // One series per chart of a metric: its points are the labels (x).
                    let label = match label.as_str() {
                        "" => x_names
                            .get(d.x as usize)
                            .map_or("", String::as_str)
                            .to_string(),
                        named => named.to_string(),
                    };
                    let tip = match d.interval {
                        Some((lo, hi)) => format!(
                            "{label}: {} {unit} (95 % interval {} – {})",
                            fmt(d.value),
                            fmt(lo),
                            fmt(hi)
                        ),
                        None => format!("{label}: {} {unit}", fmt(d.value)),
                    };
                    Point {
                        x: round1(x_at(d.x) + (j as f64 - (count - 1.0) / 2.0) * spread),
                        y: y_at(d.value),
                        lo: d.interval.map(|(lo, _)| y_at(lo)),
                        hi: d.interval.map(|(_, hi)| y_at(hi)),
                        tip,
                        value: fmt(d.value),
                    }
                })
                .collect();
            let line = points
                .iter()
                .map(|p| format!("{},{}", p.x, p.y))
                .collect::<Vec<_>>()
                .join(" ");
            Series {
                label: short(&label, 26),
                color,
                line,
                points,
                legend_y: top + 8.0 + j as f64 * 18.0,
            }
        })
        .collect();
    Plot {
        metric: metric.to_string(),
        // `parsable turns (% of turns)` already says its unit.
        heading: if title.contains('%') {
            title.clone()
        } else {
            format!("{title} ({unit})")
        },
        title,
        unit,
        width,
        height,
        left,
        right,
        top,
        bottom,
        y_ticks,
        x_ticks,
        rotate,
        x_title: x_title.to_string(),
        series,
        legend,
    }
}

/// `(value, interval)` of estimate `e`.
fn estimate_of(e: &Value) -> Option<(f64, Option<(f64, f64)>)> {
    let value = e.get("value").and_then(Value::as_f64)?;
    let interval = e.get("interval").and_then(|i| {
        Some((
            i.get("lo").and_then(Value::as_f64)?,
            i.get("hi").and_then(Value::as_f64)?,
        ))
    });
    Some((value, interval))
}

/// One chart per metric of the labels' `estimates` (in the order first seen): x = the labels in
/// the report's order, y = the value with its 95 % interval as an error bar.
fn metric_plots(labels: &[&Value]) -> Vec<Plot> {
    let names: Vec<String> = labels.iter().map(|l| text(l, "label")).collect();
    let by_label = estimates_by_label(labels);
    metrics_of(labels)
        .into_iter()
        .map(|(metric, unit)| {
            let data: Vec<Datum> = by_label
                .iter()
                .enumerate()
                .filter_map(|(i, est)| {
                    let (value, interval) = estimate_of(est.get(metric.as_str())?)?;
                    Some(Datum {
                        x: i as f64,
                        value,
                        interval,
                    })
                })
                .collect();
            plot(
                &metric,
                metric_title(&metric),
                is_raw(&metric, unit.as_deref()),
                names.clone(),
                "",
                vec![(String::new(), PALETTE[0], data)],
                false,
            )
        })
        .collect()
}

/// Pass@k against k, one curve per label, from each label's `pass_at_k` (every k the JSON
/// has), with the `pass@k` estimates' intervals where given; `None` without any Pass@k.
fn pass_plot(labels: &[&Value]) -> Option<Plot> {
    let by_label = estimates_by_label(labels);
    let series: Vec<(String, &'static str, Vec<Datum>)> = labels
        .iter()
        .zip(&by_label)
        .enumerate()
        .map(|(j, (l, estimates))| {
            let mut data: Vec<Datum> = l
                .get("pass_at_k")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| {
                    let k: usize = k.parse().ok().filter(|&k| k > 0)?;
                    let interval = estimates
                        .get(format!("pass@{k}").as_str())
                        .and_then(|e| estimate_of(e))
                        .and_then(|(_, i)| i);
                    Some(Datum {
                        x: (k - 1) as f64,
                        value: v.as_f64()?,
                        interval,
                    })
                })
                .collect();
            data.sort_by(|a, b| a.x.total_cmp(&b.x));
            (text(l, "label"), PALETTE[j % PALETTE.len()], data)
        })
        .collect();
    let k_max = series
        .iter()
        .flat_map(|(_, _, d)| d.iter().map(|d| d.x as usize + 1))
        .max()?;
    // Up to about 12 k named on the axis.
    let every = k_max.div_ceil(12);
    let x_names = (1..=k_max)
        .map(|k| {
            if k == 1 || k % every == 0 {
                k.to_string()
            } else {
                String::new()
            }
        })
        .collect();
    Some(plot(
        "pass@k",
        "Pass@k".into(),
        false,
        x_names,
        "k",
        series,
        true,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn viewer_urls_that_make_broken_links_are_refused() {
        for ok in [
            DEFAULT_VIEWER_URL,
            "https://host:8200/",
            "HTTP://X",
            "http://x/proxy",
        ] {
            assert!(check_viewer_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://",
            "ftp://x",
            "x",
            "http://x?y=1",
            "http://x#f",
            "http://x/ui/",
            "http://x/ui",
        ] {
            assert!(check_viewer_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn titles_follow_the_markdown() {
        assert_eq!(metric_title("pass@8"), "Pass@8");
        assert_eq!(metric_title("intersection"), "Intersection@n");
        assert_eq!(metric_title("autonomous_edit"), "autonomous edit");
        assert_eq!(metric_title("ending:error"), "ended: error (abnormal)");
        assert_eq!(metric_title("ending:submitted"), "ended: submitted");
        assert_eq!(metric_title("something_new"), "something_new");
    }

    #[test]
    fn axis_ceilings_are_round() {
        assert_eq!(nice_ceiling(0.3), 1.0);
        assert_eq!(nice_ceiling(37.0), 50.0);
        assert_eq!(nice_ceiling(21.0), 25.0);
        assert_eq!(nice_ceiling(100.0), 100.0);
        assert_eq!(tick_text(12.5), "12.5");
        assert_eq!(tick_text(20.0), "20");
    }

    #[test]
    fn attributes_are_escaped() {
        assert_eq!(
            escape_attribute("http://h/?a=1&b=\"'<>"),
            "http://h/?a=1&amp;b=&quot;&#39;&lt;&gt;"
        );
    }

    #[test]
    fn an_empty_document_renders() {
        let page = render(&serde_json::json!({}), DEFAULT_VIEWER_URL).unwrap();
        assert!(page.starts_with("<!doctype html>"), "{page}");
        assert!(!page.contains("<svg"));
    }
}
