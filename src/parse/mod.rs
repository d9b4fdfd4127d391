//! Generated text → the first complete action, or a classified failure (docs/architecture.md "Tolerant parsing").
//!
//! Model text is not XML: commands contain `<`, `&`, `</div>`, even `</bash>` inside a heredoc.
//! So this is a tolerant line scanner over the known tag names, not an XML parser:
//! - An action counts only where its tag starts a line (leading spaces/tabs allowed) outside a
//!   fenced code block; a tag inside prose or a quoted plan is not run.
//! - The first action wins; anything after it (an invented observation, later steps) is dropped.
//! - A line starting with `<observation`, `</observation` or (after the first line)
//!   `## Thinking` ends the
//!   model's step: text after it is never read.
//! - The closing tag is the first `</tag>` outside an open heredoc (`<<EOF`, `<<'EOF'`,
//!   `<<-EOF`); if the heredoc is never terminated, the first `</tag>` at all.
//! - A value wrapped in newlines (`<old_str>\n…\n</old_str>`) loses exactly that one leading
//!   and one trailing newline; everything else is kept byte for byte.
//! - Parameters are child tags; a tool with one visible parameter also accepts the bare body
//!   (`<search>rivers</search>`), the shell's body is its command, and `<tag a="1">` attributes
//!   (decoded by quick-xml) are parameters too.

mod coerce;
mod json;
mod markdown;
pub(crate) mod scan;
mod xml_format;

pub use coerce::coerce;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::profile::Action;
use crate::profile::{ResolvedProfile, ToolRole, ToolSpec};
use scan::{find_close, heading_is_step, line_tag, strip_pad, LineTag};

/// Why a completion yields no action (the paper's "parsable turn" is the absence of these).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// No action tag at the start of a line.
    NoAction,
    /// A line-start tag that names no tool of this request.
    UnknownTool,
    /// An action (or parameter) tag that is never closed, e.g. cut by `max_tokens`.
    UnclosedTag,
    /// A required parameter is absent or empty.
    MissingParameter,
    /// A parameter does not fit its schema (type or enum).
    InvalidParameter,
}

impl FailureClass {
    /// The snake_case name used in traces.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoAction => "no_action",
            Self::UnknownTool => "unknown_tool",
            Self::UnclosedTag => "unclosed_tag",
            Self::MissingParameter => "missing_parameter",
            Self::InvalidParameter => "invalid_parameter",
        }
    }
}

/// A classified parse failure with a human-readable detail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ParseFailure {
    pub class: FailureClass,
    pub detail: String,
}

/// Result of parsing one completion.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// Text before the action (or before the end of the step), trimmed, without a repeated
    /// `## Thinking` heading.
    pub thought: String,
    pub outcome: Result<Action, ParseFailure>,
    /// Bytes of the completion after the action or step end that were dropped.
    pub dropped_bytes: usize,
    /// Non-fatal oddities (ignored unknown parameters), for the trace.
    pub notes: Vec<String>,
}

/// Parses a completion in the given format (see [`crate::render::Format`]).
pub fn parse_for(format: crate::render::Format, text: &str, tools: &ResolvedProfile) -> Parsed {
    match format {
        crate::render::Format::MarkdownXml => parse_completion(text, tools),
        crate::render::Format::Xml => xml_format::parse(text, tools),
        crate::render::Format::Markdown => markdown::parse(text, tools),
        crate::render::Format::Json => json::parse(text, tools),
    }
}

/// The text to parse: `text` with the closing tag that ended generation put back.
///
/// The tag formats stop generation at an action's closing tag
/// ([`crate::render::Format::stops`]) and backends drop the matched stop string from the
/// text. When the backend names it (`matched_stop`: vLLM `stop_reason`, SGLang
/// `matched_stop`) and it is one of the format's closers, it is appended. When the backend
/// does not say which stop matched (llama-server's OpenAI endpoint) but generation stopped
/// (`finish_reason: "stop"`) inside an unclosed action, the closer that completes the action
/// is inferred: the first of the tools' closers with which the text parses. Returns the text
/// and the closer put back (recorded in the trace as `matched_stop`, so `replay` parses the
/// same text).
///
/// A partial stop string never reaches a command (issue 18): a closer put back replaces a
/// proper prefix of itself left at the very end of the text (`…test_total</ba`, `</`, `<`:
/// a backend that cut the stop string only partly), and an inferred closer also replaces
/// a proper prefix (two bytes or more) of one of the format's line-anchored stops
/// (`\n<obs`, `\n## Th`); a fragment of another tool's closer (`</str_rep` in `<bash>`)
/// infers nothing; any other unfinished or malformed closing tag at the very end (`</sub`,
/// `</Bas`, `</bash >`, `</bash` and a line break) is dropped before the closer is inferred. With `finish_reason: "length"` nothing is put back or dropped: the
/// model did not finish its command, the action stays unclosed (`unclosed_tag`) and is never
/// run.
pub fn with_closing_stop<'a>(
    format: crate::render::Format,
    text: &'a str,
    finish_reason: Option<&str>,
    matched_stop: Option<&str>,
    tools: &ResolvedProfile,
) -> (std::borrow::Cow<'a, str>, Option<String>) {
    use std::borrow::Cow;
    let closers = format.action_closers(tools);
    if closers.is_empty() {
        return (Cow::Borrowed(text), None);
    }
    if let Some(matched) = matched_stop {
        return match closers.iter().find(|c| c.as_str() == matched) {
            Some(closer) => (
                Cow::Owned(format!("{}{closer}", without_fragment(text, closer))),
                Some(closer.clone()),
            ),
            None => (Cow::Borrowed(text), None),
        };
    }
    if finish_reason != Some("stop") {
        return (Cow::Borrowed(text), None);
    }
    let unclosed =
        |p: &Parsed| matches!(&p.outcome, Err(f) if f.class == FailureClass::UnclosedTag);
    if !unclosed(&parse_for(format, text, tools)) {
        return (Cow::Borrowed(text), None);
    }
    let base = format
        .step_end_stops()
        .iter()
        .map(|stop| without_fragment(text, stop))
        .filter(|rest| text.len() - rest.len() >= 2)
        .min_by_key(|rest| rest.len())
        .unwrap_or(text);
    // A fragment of another tool's closer (`…</str_replace_ed` inside `<bash>`) is not
    // this action's end: no closer is inferred and the action stays unclosed.
    let fragment_in = |base: &str, closer: &str| base.len() - without_fragment(base, closer).len();
    // Any other unfinished or malformed closing tag at the very end (`</sub`, `</Bas`,
    // `</bash >`, `</bash` then a line break) is not part of the command either.
    let base = if closers.iter().all(|c| fragment_in(base, c) == 0) {
        without_trailing_tag(base, &closers)
    } else {
        base
    };
    let fragment = |closer: &str| fragment_in(base, closer);
    let longest = closers.iter().map(|c| fragment(c)).max().unwrap_or(0);
    for closer in closers.iter().filter(|c| fragment(c) == longest) {
        let candidate = format!("{}{closer}", without_fragment(base, closer));
        let parsed = parse_for(format, &candidate, tools);
        if !unclosed(&parsed)
            && !matches!(&parsed.outcome, Err(f) if f.class == FailureClass::NoAction)
        {
            return (Cow::Owned(candidate), Some(closer.clone()));
        }
    }
    (Cow::Borrowed(text), None)
}

/// `text` without a closing tag it ends with that no closer matched, followed only by
/// whitespace: an unfinished one (`</NAME` with no `>`: `</sub`, `</Bas`), or a finished one
/// whose NAME is an action closer's in another case or spacing (`</Bash>`, `</bash >`). NAME
/// is letters, digits, `_` or `-` (possibly empty). A parameter's own closing tag (`</path>`
/// inside an editor action) is kept.
fn without_trailing_tag<'a>(text: &'a str, closers: &[String]) -> &'a str {
    let trimmed = text.trim_end();
    let Some(i) = trimmed.rfind("</") else {
        return text;
    };
    let tail = &trimmed[i + 2..];
    let (name, finished) = match tail.strip_suffix('>') {
        Some(inner) => (inner.trim_end(), true),
        None => (tail, false),
    };
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return text;
    }
    let an_action_closer = closers.iter().any(|c| {
        c.strip_prefix("</")
            .and_then(|c| c.strip_suffix('>'))
            .is_some_and(|tag| tag.eq_ignore_ascii_case(name))
    });
    if !finished || an_action_closer {
        &text[..i]
    } else {
        text
    }
}

/// `text` without the longest proper prefix of `stop` it ends with (a stop string the backend
/// cut only partly).
fn without_fragment<'a>(text: &'a str, stop: &str) -> &'a str {
    (1..stop.len())
        .rev()
        .filter(|&i| stop.is_char_boundary(i))
        .find_map(|i| text.strip_suffix(&stop[..i]))
        .unwrap_or(text)
}

/// Checks that the visible required parameters are present (and a shell command not blank).
///
/// Errors: a message naming the first missing parameter.
pub fn check_required(spec: &ToolSpec, arguments: &Map<String, Value>) -> Result<(), String> {
    for p in spec.visible_params().filter(|p| p.required) {
        let empty = match arguments.get(&p.name) {
            None => true,
            Some(Value::String(s)) => {
                s.trim().is_empty() && matches!(spec.role, ToolRole::Shell { .. })
            }
            Some(_) => false,
        };
        if empty {
            return Err(format!("`<{}>` needs `{}`", spec.tag, p.name));
        }
    }
    Ok(())
}

/// Parses a Markdown+XML completion against the request's tools. Pure and synchronous.
pub fn parse_completion(text: &str, tools: &ResolvedProfile) -> Parsed {
    let mut fence: Option<(char, usize)> = None;
    let mut first_unknown: Option<String> = None;
    let mut offset = 0;
    let mut end_of_step = text.len();
    let mut thought_end = text.len();
    while offset < text.len() {
        let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
        let line = &text[offset..line_end];
        let trimmed = line.trim_start_matches([' ', '\t']);
        let indent = line.len() - trimmed.len();
        if let Some((ch, len, rest)) = crate::util::fence_marker(trimmed) {
            // CommonMark: a fence closes only with the same character, at least as many of
            // them, and nothing else on the line.
            fence = match fence {
                None => Some((ch, len)),
                Some((open_ch, open_len))
                    if ch == open_ch && len >= open_len && rest.trim().is_empty() =>
                {
                    None
                }
                still_open => still_open,
            };
        } else if fence.is_none() {
            if offset > 0 && heading_is_step(trimmed) {
                end_of_step = offset;
                break;
            }
            match line_tag(trimmed) {
                Some(LineTag::Observation) => {
                    end_of_step = offset;
                    break;
                }
                Some(LineTag::Open(name)) => {
                    if let Some(spec) = lookup(tools, name) {
                        return parse_action(text, offset, offset + indent, name, spec);
                    }
                    if first_unknown.is_none() {
                        first_unknown = Some(name.to_string());
                        // The thought of an unparsable turn stops where the bad action starts.
                        thought_end = offset;
                    }
                }
                None => {}
            }
        }
        offset = line_end + 1;
    }
    let failure = match first_unknown {
        Some(name) => ParseFailure {
            class: FailureClass::UnknownTool,
            detail: format!("`<{name}>` is not a tool here; tools: {}", tag_list(tools)),
        },
        None => ParseFailure {
            class: FailureClass::NoAction,
            detail: "no action tag at the start of a line".to_string(),
        },
    };
    Parsed {
        thought: thought_of(&text[..end_of_step.min(thought_end)]),
        outcome: Err(failure),
        dropped_bytes: text.len().saturating_sub(end_of_step),
        notes: Vec::new(),
    }
}

/// The tool a tag names: its neutral tag, case-insensitively, or the scaffold's own tool name
/// (`<terminal>`, `<finish>`), which a model that has seen the scaffold's prompt may write.
pub(crate) fn lookup<'a>(tools: &'a ResolvedProfile, name: &str) -> Option<&'a ToolSpec> {
    tools
        .tools
        .iter()
        .find(|t| t.tag.eq_ignore_ascii_case(name))
        .or_else(|| {
            tools.tools.iter().find(|t| {
                t.scaffold_name
                    .as_deref()
                    .is_some_and(|n| n.eq_ignore_ascii_case(name))
            })
        })
}

fn tag_list(tools: &ResolvedProfile) -> String {
    tools
        .tools
        .iter()
        .map(|t| format!("<{}>", t.tag))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The thought: trimmed, without a repeated `## Thinking` heading, without the `### Action`
/// heading that ends it, and without lines that are only a stray closing tag (`</bash>`),
/// which are markup, not prose.
fn thought_of(text: &str) -> String {
    let kept: Vec<&str> = text
        .split('\n')
        .filter(|line| !scan::is_stray_closing_tag(line.trim()))
        .collect();
    let joined = kept.join("\n");
    let t = joined.trim();
    let t = match t.strip_prefix("## Thinking") {
        Some(rest) if rest.is_empty() || rest.starts_with('\n') || rest.starts_with("\r\n") => {
            rest.trim()
        }
        _ => t,
    };
    // The Markdown+XML document puts an `### Action` heading between thought and action.
    let t = match t.rsplit_once('\n') {
        Some((before, last)) if is_action_heading(last) => before.trim_end(),
        None if is_action_heading(t) => "",
        _ => t,
    };
    t.to_string()
}

fn is_action_heading(line: &str) -> bool {
    line.trim().eq_ignore_ascii_case("### action")
}

/// Parses the action whose tag starts at `tag_start` (line starts at `line_start`).
fn parse_action(
    text: &str,
    line_start: usize,
    tag_start: usize,
    name: &str,
    spec: &ToolSpec,
) -> Parsed {
    let thought = thought_of(&text[..line_start]);
    let mut notes = Vec::new();
    let fail = |class, detail: String, dropped: usize, notes: Vec<String>| Parsed {
        thought: thought.clone(),
        outcome: Err(ParseFailure { class, detail }),
        dropped_bytes: dropped,
        notes,
    };
    // The start tag ends at the first '>' on its line.
    let line_end = text[tag_start..]
        .find('\n')
        .map_or(text.len(), |i| tag_start + i);
    let Some(gt) = text[tag_start..line_end].find('>').map(|i| tag_start + i) else {
        return fail(
            FailureClass::UnclosedTag,
            format!("the start tag `<{name}` is never closed with `>`"),
            0,
            notes,
        );
    };
    let inner = &text[tag_start + 1..gt];
    let self_closing = inner.ends_with('/');
    let attrs_text = inner[name.len()..].trim_end_matches('/');
    let mut raw: Vec<(String, String)> = match scan::attributes(attrs_text) {
        Ok(a) => a,
        Err(e) => {
            return fail(
                FailureClass::InvalidParameter,
                format!("attributes of `<{name}>`: {e}"),
                0,
                notes,
            )
        }
    };
    let (body, end) = if self_closing {
        (None, gt + 1)
    } else {
        match find_close(text, gt + 1, name) {
            Some((close_start, close_end)) => (Some(&text[gt + 1..close_start]), close_end),
            None => {
                return fail(
                    FailureClass::UnclosedTag,
                    format!("`<{name}>` is never closed with `</{name}>`"),
                    0,
                    notes,
                )
            }
        }
    };
    let dropped = text.len() - end;
    if let Some(body) = body {
        match body_arguments(body, spec) {
            Ok(mut args) => raw.append(&mut args),
            Err(e) => return fail(FailureClass::UnclosedTag, e, dropped, notes),
        }
    }

    if spec.role == ToolRole::Submit {
        let message = raw
            .into_iter()
            .next()
            .map(|(_, v)| v.trim().to_string())
            .filter(|m| !m.is_empty());
        return Parsed {
            thought,
            outcome: Ok(Action::Submit { message }),
            dropped_bytes: dropped,
            notes,
        };
    }

    let mut arguments = Map::new();
    for (key, value) in raw {
        let Some(param) = spec.param(&key) else {
            notes.push(format!("ignored unknown parameter `{key}` of `<{name}>`"));
            continue;
        };
        // The shell's command stays the command line, whatever the schema's type (Codex's
        // argument vector is made from it when the call goes out).
        if matches!(&spec.role, ToolRole::Shell { command_parameter } if *command_parameter == key)
        {
            arguments.insert(key, Value::String(value));
            continue;
        }
        match coerce(&value, param) {
            Ok(v) => {
                arguments.insert(key, v);
            }
            Err(e) => {
                return fail(
                    FailureClass::InvalidParameter,
                    format!("`<{name}>`: {e}"),
                    dropped,
                    notes,
                )
            }
        }
    }
    if let Err(detail) = check_required(spec, &arguments) {
        return fail(FailureClass::MissingParameter, detail, dropped, notes);
    }
    Parsed {
        thought,
        outcome: Ok(Action::Call {
            tag: spec.tag.clone(),
            arguments: arguments.into(),
        }),
        dropped_bytes: dropped,
        notes,
    }
}

/// The (name, text) pairs of an action body: child tags, or the whole body for the shell's
/// command, a one-parameter tool, or a submit message.
fn body_arguments(body: &str, spec: &ToolSpec) -> Result<Vec<(String, String)>, String> {
    let names: Vec<&str> = spec.params.iter().map(|p| p.name.as_str()).collect();
    let children = scan::children(body, &names)?;
    if !children.is_empty() {
        return Ok(children);
    }
    let value = strip_pad(body);
    let single = match &spec.role {
        ToolRole::Shell { command_parameter } => Some(command_parameter.clone()),
        ToolRole::Submit => Some("message".to_string()),
        _ => {
            let mut visible = spec.visible_params();
            match (visible.next(), visible.next()) {
                (Some(only), None) => Some(only.name.clone()),
                _ => None,
            }
        }
    };
    Ok(match single {
        Some(param) if !value.trim().is_empty() || matches!(spec.role, ToolRole::Shell { .. }) => {
            vec![(param, value.to_string())]
        }
        _ => Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::without_fragment;

    #[test]
    fn fragment_is_the_longest_proper_prefix_at_the_end() {
        let cmd = "pytest x.py::test_total";
        for fragment in ["</bash", "</bas", "</ba", "</b", "</", "<"] {
            assert_eq!(
                without_fragment(&format!("{cmd}{fragment}"), "</bash>"),
                cmd
            );
        }
        // The whole stop string, or text that is not a prefix of it, stays.
        assert_eq!(without_fragment("ls</bash>", "</bash>"), "ls</bash>");
        assert_eq!(without_fragment("ls</bx", "</bash>"), "ls</bx");
        assert_eq!(without_fragment("a < b", "</bash>"), "a < b");
        assert_eq!(without_fragment("ls\n<obs", "\n<observation>"), "ls");
        // Multi-byte stop strings are cut on character boundaries only.
        assert_eq!(without_fragment("x</é", "</é>"), "x");
        assert_eq!(without_fragment("", "</bash>"), "");
    }
}
