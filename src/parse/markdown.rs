//! Parser of the pure Markdown format: the first fenced block whose info string names a tool
//! (outside other fenced blocks) is the action; the thought is the text before it (without a
//! `### Action` heading). A `### Observation` or a later `## Thinking` line ends the step.
//!
//! Classification: no tool block → `no_action` (or `unknown_tool` when a block right after
//! `### Action` names something else); a tool block never closed → `unclosed_tag`; parameter
//! errors as in every format.

use serde_json::Map;

use super::{check_required, coerce, lookup, FailureClass, ParseFailure, Parsed};
use crate::profile::Action;
use crate::profile::{ResolvedProfile, ToolRole, ToolSpec};
use crate::util::fence_marker;

fn failure(thought: &str, class: FailureClass, detail: String, dropped: usize) -> Parsed {
    Parsed {
        thought: clean_thought(thought),
        outcome: Err(ParseFailure { class, detail }),
        dropped_bytes: dropped,
        notes: Vec::new(),
    }
}

fn clean_thought(text: &str) -> String {
    let t = text.trim();
    let t = t.strip_suffix("### Action").unwrap_or(t).trim_end();
    let t = match t.strip_prefix("## Thinking") {
        Some(rest) if rest.is_empty() || rest.starts_with('\n') => rest.trim(),
        _ => t,
    };
    t.to_string()
}

/// Parses a Markdown-format completion (the text after `## Thinking\n`).
pub fn parse(text: &str, tools: &ResolvedProfile) -> Parsed {
    let mut offset = 0;
    let mut other_fence: Option<(char, usize)> = None;
    let mut after_action_heading = false;
    let mut unknown: Option<(usize, String)> = None;
    while offset < text.len() {
        let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
        let line = &text[offset..line_end];
        let trimmed = line.trim_start_matches([' ', '\t']);
        if let Some((open_ch, open_len)) = other_fence {
            if let Some((ch, len, rest)) = fence_marker(trimmed) {
                if ch == open_ch && len >= open_len && rest.trim().is_empty() {
                    other_fence = None;
                }
            }
        } else if let Some((ch, len, info)) = fence_marker(trimmed) {
            let name = info.trim();
            if let Some(spec) = (!name.is_empty()).then(|| lookup(tools, name)).flatten() {
                return parse_block(text, offset, line_end, (ch, len), spec);
            }
            if after_action_heading && !name.is_empty() && unknown.is_none() {
                unknown = Some((offset, name.to_string()));
            }
            other_fence = Some((ch, len));
        } else if offset > 0
            && (trimmed.starts_with("### Observation")
                || (trimmed.starts_with("## Thinking") && trimmed[11..].trim().is_empty()))
        {
            let end = unknown.as_ref().map_or(offset, |(o, _)| *o);
            return no_action(text, end, offset, unknown, tools);
        } else if trimmed.starts_with("### Action") {
            after_action_heading = true;
        }
        offset = line_end + 1;
    }
    let end = unknown.as_ref().map_or(text.len(), |(o, _)| *o);
    no_action(text, end, text.len(), unknown, tools)
}

fn no_action(
    text: &str,
    thought_end: usize,
    step_end: usize,
    unknown: Option<(usize, String)>,
    tools: &ResolvedProfile,
) -> Parsed {
    let dropped = text.len().saturating_sub(step_end);
    match unknown {
        Some((_, name)) => {
            let known: Vec<String> = tools.tools.iter().map(|t| t.tag.clone()).collect();
            failure(
                &text[..thought_end],
                FailureClass::UnknownTool,
                format!("`{name}` is not a tool here; tools: {}", known.join(", ")),
                dropped,
            )
        }
        None => failure(
            &text[..thought_end.min(step_end)],
            FailureClass::NoAction,
            "no fenced block naming a tool".into(),
            dropped,
        ),
    }
}

fn parse_block(
    text: &str,
    start: usize,
    open_end: usize,
    (ch, len): (char, usize),
    spec: &ToolSpec,
) -> Parsed {
    let thought = &text[..start];
    let body_start = (open_end + 1).min(text.len());
    let mut offset = body_start;
    let mut close = None;
    while offset < text.len() {
        let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
        let line = &text[offset..line_end];
        if let Some((c, l, rest)) = fence_marker(line.trim_start_matches([' ', '\t'])) {
            if c == ch && l >= len && rest.trim().is_empty() {
                close = Some((offset, line_end));
                break;
            }
        }
        offset = line_end + 1;
    }
    let Some((close_start, close_end)) = close else {
        return failure(
            thought,
            FailureClass::UnclosedTag,
            format!("the `{}` block is never closed", spec.tag),
            0,
        );
    };
    let body = if close_start > body_start {
        &text[body_start..close_start - 1]
    } else {
        ""
    };
    let dropped = text.len() - close_end;
    let mut notes = Vec::new();
    let raw: Vec<(String, String)> = match &spec.role {
        ToolRole::Shell { command_parameter } => {
            vec![(command_parameter.clone(), body.to_string())]
        }
        ToolRole::Submit => {
            let message = Some(body.trim().to_string()).filter(|m| !m.is_empty());
            return Parsed {
                thought: clean_thought(thought),
                outcome: Ok(Action::Submit { message }),
                dropped_bytes: dropped,
                notes,
            };
        }
        _ => match param_lines(body, spec) {
            Some(pairs) => pairs,
            None => {
                let mut visible = spec.visible_params();
                match (visible.next(), visible.next()) {
                    (Some(only), None) if !body.trim().is_empty() => {
                        vec![(only.name.clone(), body.to_string())]
                    }
                    _ => Vec::new(),
                }
            }
        },
    };
    let mut arguments = Map::new();
    for (key, value) in raw {
        let Some(param) = spec.param(&key) else {
            notes.push(format!(
                "ignored unknown parameter `{key}` of `{}`",
                spec.tag
            ));
            continue;
        };
        match coerce(&value, param) {
            Ok(v) => {
                arguments.insert(key, v);
            }
            Err(e) => {
                return failure(
                    thought,
                    FailureClass::InvalidParameter,
                    format!("`{}`: {e}", spec.tag),
                    dropped,
                )
            }
        }
    }
    if let Err(detail) = check_required(spec, &arguments) {
        return failure(thought, FailureClass::MissingParameter, detail, dropped);
    }
    Parsed {
        thought: clean_thought(thought),
        outcome: Ok(Action::Call {
            tag: spec.tag.clone(),
            arguments: arguments.into(),
        }),
        dropped_bytes: dropped,
        notes,
    }
}

/// `name: value` lines and `name: |` blocks (lines indented by two spaces). `None` when the
/// body does not start with a parameter line of this tool.
fn param_lines(body: &str, spec: &ToolSpec) -> Option<Vec<(String, String)>> {
    let is_param = |line: &str| -> Option<(String, String)> {
        let (name, rest) = line.split_once(':')?;
        let param = spec
            .params
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(name.trim()))?;
        Some((
            param.name.clone(),
            rest.strip_prefix(' ').unwrap_or(rest).to_string(),
        ))
    };
    let mut lines = body.split('\n').peekable();
    is_param(lines.peek()?)?;
    let mut out = Vec::new();
    while let Some(line) = lines.next() {
        let Some((name, value)) = is_param(line) else {
            continue;
        };
        if value.trim_end() == "|" {
            let mut block = Vec::new();
            while let Some(next) = lines.peek() {
                match next.strip_prefix("  ") {
                    Some(rest) => block.push(rest),
                    None if next.is_empty() && is_param_free(&mut lines.clone(), &is_param) => {
                        block.push("")
                    }
                    None => break,
                }
                lines.next();
            }
            out.push((name, block.join("\n")));
        } else {
            out.push((name, value));
        }
    }
    Some(out)
}

/// Whether the lines ahead are still part of a block (an unindented blank line a model wrote
/// inside a block is kept when an indented line follows).
fn is_param_free<'a>(
    ahead: &mut std::iter::Peekable<std::str::Split<'a, char>>,
    _is_param: &dyn Fn(&str) -> Option<(String, String)>,
) -> bool {
    ahead.next();
    ahead.peek().is_some_and(|l| l.starts_with("  "))
}
