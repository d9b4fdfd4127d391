//! Parser of the XML format: the completion continues a `<thought>` after the cue; the thought
//! ends at `</thought>`, the step at a line-start `<step>` or `</step>`, and the action in
//! between is read by the same tolerant scanner as the Markdown+XML format.

use super::{parse_completion, Parsed};
use crate::profile::ResolvedProfile;

/// Parses an XML-format completion (the text after `<step>\n<thought>\n`).
pub fn parse(text: &str, tools: &ResolvedProfile) -> Parsed {
    let (thought, rest) = match text.find("</thought>") {
        Some(i) => (&text[..i], &text[i + "</thought>".len()..]),
        None => ("", text),
    };
    let mut end = rest.len();
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        let t = line.trim_start_matches([' ', '\t']);
        if t.starts_with("</step") || t.starts_with("<step") {
            end = offset;
            break;
        }
        offset += line.len();
    }
    let mut parsed = parse_completion(&rest[..end], tools);
    parsed.dropped_bytes += rest.len() - end;
    let head = thought.trim();
    parsed.thought = match (head.is_empty(), parsed.thought.is_empty()) {
        (_, true) => head.to_string(),
        (true, false) => parsed.thought,
        (false, false) => format!("{head}\n\n{}", parsed.thought),
    };
    parsed
}
