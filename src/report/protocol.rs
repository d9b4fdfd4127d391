//! The protocol each label ran under (issue 17, "protocol in view"): interaction format,
//! prefix K, prefix set (the digest of the prefixes loaded), prefix coverage (same-task prefix, built-in demonstration, none), nudge and
//! termination rules, backend model and proxy version, read from each session record.
//!
//! Two labels are comparable only when their protocols match on everything but the backend
//! model (which is what is being compared): [`differences`] lists what differs, and `report`
//! refuses a comparison with differences unless `--allow-protocol-mismatch` is given.
//! Everything here is defined in `docs/report.md` ("Protocol").

use std::collections::BTreeMap;

use serde::Serialize;

use crate::trace::MatchedBy;

pub use crate::trace::{PrefixSource, Rules};

/// A session's prefix source from its record: `prefix_source` when recorded, else derived from
/// the rendered prefix's `matched_by` (traces before issue 17: `default` → demonstration;
/// `header`, `metadata`, `fingerprint` → task; no prefix → none).
pub fn prefix_source(
    recorded: Option<PrefixSource>,
    matched_by: Option<MatchedBy>,
) -> PrefixSource {
    match recorded {
        Some(source) => source,
        None => match matched_by {
            None => PrefixSource::None,
            Some(MatchedBy::Default) => PrefixSource::Demonstration,
            Some(_) => PrefixSource::Task,
        },
    }
}

/// What one session record says of its protocol besides its format
/// ([`super::Trajectory::format`]); `None` fields were not recorded (traces
/// older than the field).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionProtocol {
    /// `proxy` or `passthrough` (in passthrough no rule runs, whatever `rules` says).
    pub mode: Option<String>,
    /// Passthrough: the tool calls of a reply kept, `first` or `all`; `None` in proxy mode.
    pub tool_calls: Option<String>,
    /// Configured K (`serve --prefix-k`).
    pub prefix_k: Option<usize>,
    /// The prefix set loaded, as [`prefix_set_name`] writes it (`None`: a trace from before
    /// it was recorded).
    pub prefix_set: Option<String>,
    /// Where the rendered prefix came from.
    pub prefix_source: PrefixSource,
    /// The termination rules (`None`: a trace from before they were recorded).
    pub rules: Option<Rules>,
    /// The model name the backend was asked for (first completion of the session).
    pub backend_model: Option<String>,
    /// The proxy's version (`CARGO_PKG_VERSION`), with the build's commit when recorded:
    /// `0.1.0 (3a6459c1d2e4)`.
    pub proxy_version: Option<String>,
}

/// The prefix set of a session run with K 0 (no prefix rendered, whatever was loaded).
pub const NO_PREFIX_SET: &str = "none (K 0)";

/// A prefix set as the report names it: the first 12 hex digits of its digest and its size,
/// `3fa2c1d9e0b1 (500 prefixes)`.
pub fn prefix_set_name(set: &crate::trace::PrefixSetId) -> String {
    let short = set.sha256.get(..12).unwrap_or(&set.sha256);
    format!("{short} ({} prefixes)", set.prefixes)
}

/// Written where a session record lacks a field (traces from before it was recorded).
pub const UNKNOWN: &str = "unknown";

/// The prefix K, prefix set and rules of a passthrough session: none apply to a chat model.
pub const PASSTHROUGH: &str = "none (passthrough)";

/// One label's protocol: each setting with the number of trajectories that ran with it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LabelProtocol {
    /// Trajectories by mode (`proxy`, `passthrough`).
    pub mode: BTreeMap<String, usize>,
    /// Trajectories by interaction format.
    pub format: BTreeMap<String, usize>,
    /// Trajectories by configured prefix K (`unknown` for old traces).
    pub prefix_k: BTreeMap<String, usize>,
    /// Trajectories by prefix set ([`prefix_set_name`]; `unknown` for old traces).
    pub prefix_set: BTreeMap<String, usize>,
    /// Passthrough trajectories by tool calls kept (`first`, `all`); proxy ones not counted.
    pub tool_calls: BTreeMap<String, usize>,
    /// Trajectories by prefix source (`task`, `demonstration`, `none`).
    pub prefix_coverage: BTreeMap<PrefixSource, usize>,
    /// Rules as [`Rules::describe`] lines (or `unknown`).
    pub rules: BTreeMap<String, usize>,
    /// Trajectories by backend model; those without a completion are not counted.
    pub backend_model: BTreeMap<String, usize>,
    /// Trajectories by proxy version.
    pub proxy_version: BTreeMap<String, usize>,
}

impl LabelProtocol {
    /// Adds one trajectory's protocol; `format` is its interaction format.
    pub fn add(&mut self, format: &str, p: &SessionProtocol) {
        let or_unknown = |v: Option<String>| v.unwrap_or_else(|| UNKNOWN.into());
        // A chat model in passthrough is shown no prefix and runs under no rule, whatever the
        // configuration recorded: say so rather than repeat the configuration.
        let passthrough = p.mode.as_deref() == Some("passthrough");
        let unless_passthrough = |v: Option<String>| {
            if passthrough {
                PASSTHROUGH.to_string()
            } else {
                or_unknown(v)
            }
        };
        *self.mode.entry(or_unknown(p.mode.clone())).or_default() += 1;
        *self.format.entry(format.to_string()).or_default() += 1;
        if let Some(kept) = &p.tool_calls {
            *self.tool_calls.entry(kept.clone()).or_default() += 1;
        }
        *self
            .prefix_k
            .entry(unless_passthrough(p.prefix_k.map(|k| k.to_string())))
            .or_default() += 1;
        *self
            .prefix_set
            .entry(unless_passthrough(p.prefix_set.clone()))
            .or_default() += 1;
        let source = if passthrough {
            PrefixSource::None
        } else {
            p.prefix_source
        };
        *self.prefix_coverage.entry(source).or_default() += 1;
        *self
            .rules
            .entry(unless_passthrough(p.rules.as_ref().map(Rules::describe)))
            .or_default() += 1;
        // A trajectory with no completion (its first request failed) asked no model: it says
        // nothing of the backend model, rather than "unknown".
        if let Some(model) = &p.backend_model {
            *self.backend_model.entry(model.clone()).or_default() += 1;
        }
        *self
            .proxy_version
            .entry(or_unknown(p.proxy_version.clone()))
            .or_default() += 1;
    }

    fn trajectories(&self) -> usize {
        self.format.values().sum()
    }

    /// Prefix coverage as `task 80.0%, demonstration 20.0%, none 0.0%`.
    pub fn coverage(&self) -> String {
        let total = self.trajectories().max(1) as f64;
        [
            PrefixSource::Task,
            PrefixSource::Demonstration,
            PrefixSource::None,
        ]
        .iter()
        .map(|s| {
            let n = self.prefix_coverage.get(s).copied().unwrap_or(0);
            format!("{} {:.1}%", s.as_str(), n as f64 * 100.0 / total)
        })
        .collect::<Vec<_>>()
        .join(", ")
    }

    /// The settings compared between labels, each as one line of text: (name, value).
    /// The backend model is left out: it is what a comparison of checkpoints varies.
    pub fn compared(&self) -> Vec<(&'static str, String)> {
        let keys = |m: &BTreeMap<String, usize>| m.keys().cloned().collect::<Vec<_>>().join(" + ");
        vec![
            ("mode", keys(&self.mode)),
            // Only passthrough runs keep tool calls: `–` for a label without one.
            (
                "tool calls",
                Some(keys(&self.tool_calls))
                    .filter(|k| !k.is_empty())
                    .unwrap_or_else(|| "–".into()),
            ),
            ("format", keys(&self.format)),
            ("prefix K", keys(&self.prefix_k)),
            ("prefix set", keys(&self.prefix_set)),
            ("prefix coverage", self.coverage()),
            ("rules", keys(&self.rules)),
            ("proxy version", keys(&self.proxy_version)),
        ]
    }

    /// What is mixed inside the label, or off the paper's protocol: each setting with more
    /// than one value, with the counts (`format: markdown_xml 8, xml 2`), and a prefix
    /// coverage that is not all one source or that used the demonstration at all (not for a
    /// label all in passthrough: a chat model there is shown no prefix).
    pub fn mixed(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let counts = |m: &BTreeMap<String, usize>| {
            m.iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        for (name, m) in [
            ("mode", &self.mode),
            ("tool calls", &self.tool_calls),
            ("format", &self.format),
            ("prefix K", &self.prefix_k),
            ("prefix set", &self.prefix_set),
            ("rules", &self.rules),
            ("proxy version", &self.proxy_version),
            ("backend model", &self.backend_model),
        ] {
            if m.len() > 1 {
                lines.push(format!(
                    "mixed protocol inside the label: {name}: {}",
                    counts(m)
                ));
            }
        }
        let demonstration = self
            .prefix_coverage
            .get(&PrefixSource::Demonstration)
            .copied()
            .unwrap_or(0);
        // A chat model in passthrough is shown no prefix: its coverage means nothing.
        let passthrough = self.mode.keys().all(|m| m == "passthrough");
        if !passthrough && (self.prefix_coverage.len() > 1 || demonstration > 0) {
            let mixed = if self.prefix_coverage.len() > 1 {
                "mixed protocol inside the label: "
            } else {
                ""
            };
            lines.push(format!(
                "{mixed}prefix coverage: {} ({demonstration} of {} trajectories ran with the \
                 demonstration of another task instead of a same-task prefix)",
                self.coverage(),
                self.trajectories()
            ));
        }
        lines
    }
}

/// The compared settings on which two labels differ, one line each:
/// `format: ckpt-a markdown_xml; ckpt-b xml`. None when a label has no trajectory (of the task
/// set): there is no protocol to compare.
pub fn differences(a: (&str, &LabelProtocol), b: (&str, &LabelProtocol)) -> Vec<String> {
    if a.1.trajectories() == 0 || b.1.trajectories() == 0 {
        return Vec::new();
    }
    a.1.compared()
        .into_iter()
        .zip(b.1.compared())
        .filter(|((_, va), (_, vb))| va != vb)
        .map(|((name, va), (_, vb))| format!("{name}: {} {va}; {} {vb}", a.0, b.0))
        .collect()
}
