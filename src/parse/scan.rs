//! Low-level scanning helpers: line-start tags, heredoc-aware closing tags, child tags.

use quick_xml::events::BytesStart;

/// What a line starts with, as far as the scanner cares.
#[derive(Debug, PartialEq, Eq)]
pub enum LineTag<'a> {
    /// `<observation…` or `</observation…`: the model is inventing the environment's reply.
    Observation,
    /// `<name>`, `<name/>`, `<name attr="…">`.
    Open(&'a str),
}

/// Classifies a line (already stripped of leading blanks) that starts with a tag.
pub fn line_tag(line: &str) -> Option<LineTag<'_>> {
    if line.starts_with("</observation") {
        return Some(LineTag::Observation);
    }
    let rest = line.strip_prefix('<')?;
    let len = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'))
        .unwrap_or(rest.len());
    let name = &rest[..len];
    if name.is_empty() || !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        return None;
    }
    if name == "observation" {
        return Some(LineTag::Observation);
    }
    match rest[len..].chars().next() {
        Some('>' | '/' | ' ' | '\t') => Some(LineTag::Open(name)),
        _ => None,
    }
}

/// Whether a line is nothing but a closing tag (`</bash>`, `</old_str>`).
pub fn is_stray_closing_tag(line: &str) -> bool {
    line.strip_prefix("</")
        .and_then(|r| r.strip_suffix('>'))
        .is_some_and(|name| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
}

/// Whether a line is a `## Thinking` heading, i.e. the start of a new step.
pub fn heading_is_step(line: &str) -> bool {
    line.strip_prefix("## Thinking")
        .is_some_and(|rest| rest.trim().is_empty())
}

/// Finds `</name>` after `from`, skipping the bodies of heredocs opened in between.
/// Gives up (None) at a line-start `<observation`, `</observation` or `## Thinking` outside a
/// heredoc. A heredoc ends at its delimiter line, also when the closing tag follows the
/// delimiter directly (`EOF</bash>`). On a line with several closing tags and no new start
/// tag between them, one that ends the line wins (`echo "</bash>"</bash>`).
/// If the heredoc-aware search finds nothing, a plain search is tried, so a heredoc the model
/// forgot to terminate does not hide an otherwise complete action.
/// Returns the byte range of the closing tag.
pub fn find_close(text: &str, from: usize, name: &str) -> Option<(usize, usize)> {
    let close = format!("</{name}>");
    let open = format!("<{name}>");
    let mut pending: Vec<(String, bool)> = Vec::new();
    let mut offset = from;
    let mut first = true;
    let mut limit = text.len();
    while offset <= text.len() {
        let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
        let line = &text[offset..line_end];
        if let Some((delim, strip_tabs)) = pending.first() {
            let candidate = if *strip_tabs {
                line.trim_start_matches('\t')
            } else {
                line
            };
            let indent = line.len() - candidate.len();
            if candidate.trim_end_matches('\r') == delim {
                pending.remove(0);
            } else if let Some(rest) = candidate.strip_prefix(delim.as_str()) {
                if rest.trim_start_matches([' ', '\t']).starts_with(&close) && pending.len() == 1 {
                    let k = indent
                        + delim.len()
                        + (rest.len() - rest.trim_start_matches([' ', '\t']).len());
                    return Some((offset + k, offset + k + close.len()));
                }
            }
        } else {
            if let Some(k) = pick_close(line, &close, &open) {
                return Some((offset + k, offset + k + close.len()));
            }
            let trimmed = line.trim_start_matches([' ', '\t']);
            if !first
                && (heading_is_step(trimmed)
                    || matches!(line_tag(trimmed), Some(LineTag::Observation)))
            {
                limit = offset;
                break;
            }
            pending.extend(heredoc_delimiters(line));
        }
        first = false;
        if line_end == text.len() {
            break;
        }
        offset = line_end + 1;
    }
    if pending.is_empty() {
        return None;
    }
    text[from..limit]
        .find(&close)
        .map(|k| (from + k, from + k + close.len()))
}

/// The closing tag on one line: the first, unless a later one ends the line and no start
/// tag lies between them.
fn pick_close(line: &str, close: &str, open: &str) -> Option<usize> {
    let first = line.find(close)?;
    let last = line.rfind(close).unwrap_or(first);
    let ends_line = line[last + close.len()..].trim().is_empty();
    if last > first && ends_line && !line[first..last].contains(open) {
        Some(last)
    } else {
        Some(first)
    }
}

/// Delimiters of the heredocs a shell line opens: `<<EOF`, `<<'EOF'`, `<<"EOF"`, `<<-EOF`,
/// `<< \EOF`. The bool says whether leading tabs are stripped (`<<-`). `<<<` is a
/// here-string, not a heredoc.
fn heredoc_delimiters(line: &str) -> Vec<(String, bool)> {
    let bytes = line.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while let Some(k) = line[i..].find("<<") {
        let at = i + k;
        i = at + 2;
        // A here-string `<<<`, or the tail of a longer run of `<`: search on after these two
        // (`at + 2` stays within the line and on a character boundary; `at + 3` did not).
        if bytes.get(at + 2) == Some(&b'<') || (at > 0 && bytes[at - 1] == b'<') {
            continue;
        }
        let mut j = at + 2;
        let strip_tabs = bytes.get(j) == Some(&b'-');
        if strip_tabs {
            j += 1;
        }
        while bytes.get(j).is_some_and(|b| *b == b' ' || *b == b'\t') {
            j += 1;
        }
        if bytes.get(j) == Some(&b'\\') {
            j += 1;
        }
        let (delim, next) = match bytes.get(j) {
            Some(q @ (b'\'' | b'"')) => {
                let q = *q as char;
                match line[j + 1..].find(q) {
                    Some(end) => (line[j + 1..j + 1 + end].to_string(), j + 2 + end),
                    None => continue,
                }
            }
            Some(b) if !(b.is_ascii_alphabetic() || *b == b'_') => continue,
            _ => {
                let end = line[j..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .map_or(line.len(), |e| j + e);
                (line[j..end].to_string(), end)
            }
        };
        if !delim.is_empty() {
            found.push((delim, strip_tabs));
        }
        i = next.max(i);
    }
    found
}

/// Removes one leading newline and, only then, one trailing newline: the padding of a value
/// written on its own lines. `\r\n` counts as one newline.
pub fn strip_pad(value: &str) -> &str {
    if let Some(rest) = value.strip_prefix("\r\n") {
        return rest.strip_suffix("\r\n").unwrap_or(rest);
    }
    match value.strip_prefix('\n') {
        Some(rest) => rest.strip_suffix('\n').unwrap_or(rest),
        None => value,
    }
}

/// Decodes `a="1" b='x &amp; y'` with quick-xml (entities unescaped).
pub fn attributes(text: &str) -> Result<Vec<(String, String)>, String> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let start = BytesStart::from_content(format!("x {}", text.trim()), 1);
    start
        .attributes()
        .map(|a| {
            let a = a.map_err(|e| e.to_string())?;
            let key = String::from_utf8_lossy(a.key.as_ref()).into_owned();
            let value = a.unescape_value().map_err(|e| e.to_string())?.into_owned();
            Ok((key, value))
        })
        .collect()
}

/// Child parameter tags `<p>…</p>` of an action body, for the parameter names given, in
/// order of appearance. A value's closing tag is the first `</p>` followed (after blanks) by
/// the end of the body or another parameter's start tag; failing that, the first `</p>`.
/// `<p/>` is an empty value. Text between children is ignored.
///
/// Errors: a parameter start tag without its closing tag.
pub fn children(body: &str, names: &[&str]) -> Result<Vec<(String, String)>, String> {
    // Tag names match case-insensitively; ASCII lower-casing keeps byte offsets.
    let lower = body.to_ascii_lowercase();
    let starts_param = |at: usize| -> Option<(String, usize, bool)> {
        let rest = lower[at..].strip_prefix('<')?;
        names.iter().find_map(|n| {
            let after = rest.strip_prefix(n.to_ascii_lowercase().as_str())?;
            if after.starts_with('>') {
                Some((n.to_string(), n.len() + 2, false))
            } else if after.starts_with("/>") {
                Some((n.to_string(), n.len() + 3, true))
            } else if after.starts_with(" />") {
                Some((n.to_string(), n.len() + 4, true))
            } else {
                None
            }
        })
    };
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(k) = lower[i..].find('<') {
        let at = i + k;
        let Some((name, open_len, empty)) = starts_param(at) else {
            i = at + 1;
            continue;
        };
        let value_start = at + open_len;
        if empty {
            out.push((name, String::new()));
            i = value_start;
            continue;
        }
        let close = format!("</{}>", name.to_ascii_lowercase());
        let mut candidates = lower[value_start..]
            .match_indices(&close)
            .map(|(j, _)| value_start + j)
            .peekable();
        let Some(&first) = candidates.peek() else {
            return Err(format!(
                "parameter `<{name}>` is never closed with `</{name}>`"
            ));
        };
        let chosen = candidates
            .find(|&c| {
                let after_at = c + close.len();
                let blank = lower[after_at..].len() - lower[after_at..].trim_start().len();
                after_at + blank == lower.len() || starts_param(after_at + blank).is_some()
            })
            .unwrap_or(first);
        out.push((name, strip_pad(&body[value_start..chosen]).to_string()));
        i = chosen + close.len();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heredoc_delimiter_forms() {
        assert_eq!(
            heredoc_delimiters("cat <<EOF > f"),
            vec![("EOF".into(), false)]
        );
        assert_eq!(
            heredoc_delimiters("cat << 'END'"),
            vec![("END".into(), false)]
        );
        assert_eq!(
            heredoc_delimiters("cat <<-\"X_1\""),
            vec![("X_1".into(), true)]
        );
        assert_eq!(
            heredoc_delimiters("cat <<\\EOF"),
            vec![("EOF".into(), false)]
        );
        assert!(heredoc_delimiters("grep x <<< \"$v\"").is_empty());
        assert!(heredoc_delimiters("echo $((1 << 3))").is_empty());
    }

    #[test]
    fn strip_pad_is_symmetric() {
        assert_eq!(strip_pad("\na\n"), "a");
        assert_eq!(strip_pad("\na\n\n"), "a\n");
        assert_eq!(strip_pad("a\n"), "a\n");
        assert_eq!(strip_pad("\r\n  x\r\n"), "  x");
        assert_eq!(strip_pad("\na\nb\r\n"), "a\nb\r");
        assert_eq!(strip_pad("\n"), "");
    }

    #[test]
    fn close_right_after_heredoc_delimiter() {
        let text = "cat > a.sh <<EOF\necho '</bash>'\nEOF</bash>\n";
        let (s, _) = find_close(text, 0, "bash").unwrap();
        assert_eq!(&text[..s], "cat > a.sh <<EOF\necho '</bash>'\nEOF");
        let text = "echo \"</bash>\"</bash>\n";
        let (s, _) = find_close(text, 0, "bash").unwrap();
        assert_eq!(&text[..s], "echo \"</bash>\"");
        let text = "ls</bash> then <bash>pwd</bash>";
        let (s, _) = find_close(text, 0, "bash").unwrap();
        assert_eq!(&text[..s], "ls");
    }

    #[test]
    fn close_skips_heredoc_body() {
        let text = "cat <<'EOF' > a.html\n</bash>\nEOF\n</bash>\nrest";
        let (s, _) = find_close(text, 0, "bash").unwrap();
        assert_eq!(&text[..s], "cat <<'EOF' > a.html\n</bash>\nEOF\n");
    }
}
