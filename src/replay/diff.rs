//! Describing differences between a recorded and a replayed step: the first differing byte
//! of two prompts with a short escaped context, and compact forms of parse outcomes.

use serde_json::Value;

use crate::trace::ParseRecord;

use crate::parse::Parsed;

/// Bytes of context shown on each side of the first difference.
const CONTEXT: usize = 24;

/// Longest action description printed, characters.
const MAX_ACTION: usize = 160;

/// Offset of the first byte where `a` and `b` differ (the shorter length when one is a prefix
/// of the other); `None` when they are equal.
pub fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    if a == b {
        return None;
    }
    Some(
        a.iter()
            .zip(b)
            .position(|(x, y)| x != y)
            .unwrap_or(a.len().min(b.len())),
    )
}

/// `text` around byte `at`: up to [`CONTEXT`] bytes before and after, widened to character
/// boundaries, escaped like a Rust string literal (`\n`, `\"`), with `…` where cut.
pub fn context(text: &str, at: usize) -> String {
    let mut start = at.saturating_sub(CONTEXT).min(text.len());
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = at.saturating_add(CONTEXT).min(text.len());
    while !text.is_char_boundary(end) {
        end += 1;
    }
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.push('"');
    out.extend(text[start..end].chars().flat_map(char::escape_debug));
    out.push('"');
    if end < text.len() {
        out.push('…');
    }
    out
}

/// The parse outcome as recorded: the action (JSON, as the trace stores it) and the failure
/// class, from a record's `parse`.
pub fn recorded_outcome(parse: Option<&ParseRecord>) -> (Value, Option<String>) {
    let action = parse
        .and_then(|p| p.action.as_ref())
        .and_then(|a| serde_json::to_value(a).ok())
        .unwrap_or(Value::Null);
    let class = parse
        .and_then(|p| p.error.as_ref())
        .map(|e| e.class.as_str().to_string());
    (action, class)
}

/// The parse outcome of a re-parse, in the recorded form.
pub fn replayed_outcome(parsed: &Parsed) -> (Value, Option<String>) {
    match &parsed.outcome {
        Ok(action) => (serde_json::to_value(action).unwrap_or(Value::Null), None),
        Err(failure) => (Value::Null, Some(failure.class.as_str().to_string())),
    }
}

/// A short description of an outcome: the action's JSON (shortened) or the failure class.
pub fn describe(outcome: &(Value, Option<String>)) -> String {
    match outcome {
        (Value::Null, Some(class)) => format!("error {class}"),
        (Value::Null, None) => "nothing".to_string(),
        (action, class) => {
            let json = action.to_string();
            let mut text: String = json.chars().take(MAX_ACTION).collect();
            if text.len() < json.len() {
                text.push('…');
            }
            match class {
                Some(class) => format!("{text} and error {class}"),
                None => text,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_difference_and_context() {
        assert_eq!(first_difference(b"abc", b"abc"), None);
        assert_eq!(first_difference(b"abc", b"abd"), Some(2));
        assert_eq!(first_difference(b"ab", b"abc"), Some(2));
        let text = format!("{}\"é\n{}", "x".repeat(40), "y".repeat(40));
        let at = text.find('é').unwrap() + 1; // inside the two-byte character
        let shown = context(&text, at);
        assert!(shown.starts_with("…\"xxx"), "{shown}");
        assert!(shown.contains("\\\"é\\n"), "{shown}");
        assert!(shown.ends_with("yyy\"…"), "{shown}");
        assert_eq!(context("ab", 1), "\"ab\"");
    }

    #[test]
    fn outcomes_are_described_briefly() {
        assert_eq!(
            describe(&(Value::Null, Some("no_action".into()))),
            "error no_action"
        );
        let long = serde_json::json!({"kind": "call", "tag": "bash", "arguments": {"command": "x".repeat(500)}});
        let shown = describe(&(long, None));
        assert!(shown.ends_with('…') && shown.chars().count() == MAX_ACTION + 1);
    }
}
