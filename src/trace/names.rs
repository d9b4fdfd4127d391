//! Reading the names the writer stores as `&'static str` (side-call `kind`, `on_terminate`,
//! the response's `finish_reason`, the prefix's `matched_by`): their producers hand the trace
//! string literals, so the record fields stay `&'static str` and a reader maps each name it
//! reads back to the same literal. The sets are closed; a name this build does not know (a
//! newer build's) is kept too, interned once per distinct name (at most [`MAX_UNKNOWN`] of
//! them, then `unknown`), so reading never fails on one and never grows without bound.

use std::sync::Mutex;

use serde::{Deserialize, Deserializer};

/// A name the writer stores (an alias, so that serde's derive does not take the field for a
/// string borrowed from the input).
pub type Name = &'static str;

/// Every name this build writes in those fields, and the older ones it reads.
const KNOWN: &[&str] = &[
    // side-call kinds
    "terminus_summary",
    "terminus_questions",
    "terminus_answers",
    "openhands_condenser",
    "summary",
    "question",
    // on_terminate
    "submit",
    "error",
    // finish_reason
    "stop",
    "length",
    "tool_calls",
    "content_filter",
    // matched_by
    "header",
    "metadata",
    "fingerprint",
    "default",
    "example",
    "unknown",
];

/// Distinct unknown names kept before the rest read as `unknown`.
pub const MAX_UNKNOWN: usize = 256;

static UNKNOWN: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// The `&'static str` for `name`: the writer's literal when known, else an interned copy.
pub fn intern(name: &str) -> &'static str {
    if let Some(known) = KNOWN.iter().find(|k| **k == name) {
        return known;
    }
    let mut unknown = UNKNOWN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(seen) = unknown.iter().find(|k| **k == name) {
        return seen;
    }
    if unknown.len() >= MAX_UNKNOWN {
        return "unknown";
    }
    let leaked: &'static str = Box::leak(name.to_string().into_boxed_str());
    unknown.push(leaked);
    leaked
}

/// `deserialize_with` for a `&'static str` name.
pub fn name<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    let s = std::borrow::Cow::<str>::deserialize(d)?;
    Ok(intern(&s))
}

/// `deserialize_with` for an optional `&'static str` name.
pub fn optional_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'static str>, D::Error> {
    let s = Option::<std::borrow::Cow<str>>::deserialize(d)?;
    Ok(s.map(|s| intern(&s)))
}

/// `deserialize_with` for a field older traces may hold in another shape: `None` (or the
/// default) when it does not fit this build's type, instead of failing the record.
pub fn lenient<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned + Default,
{
    let value = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(value).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_names_are_the_literals_and_unknown_ones_are_kept() {
        assert_eq!(intern(&String::from("submit")), "submit");
        let a = intern(&String::from("a_newer_kind"));
        assert_eq!(a, "a_newer_kind");
        assert!(std::ptr::eq(a, intern("a_newer_kind")), "interned once");
    }
}
