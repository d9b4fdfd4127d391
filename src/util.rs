//! Small helpers shared by modules that must not depend on each other (see the module map in
//! docs/architecture.md); nothing here imports from the crate.

/// A Markdown code fence at the start of a (blank-stripped) line: its character, its length
/// (at least 3) and the rest of the line (CommonMark 0.31, "Fenced code blocks": three or more
/// backticks or tildes).
pub fn fence_marker(line: &str) -> Option<(char, usize, &str)> {
    let ch = line.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let len = line.len() - line.trim_start_matches(ch).len();
    (len >= 3).then(|| (ch, len, &line[len..]))
}
