//! Result rows (JSONL and CSV): `instance_id`, `resolved`, and optional `run`, `label`,
//! `empty_patch`, `error`, `applied` (or `patch_applied`, `patch_successfully_applied`,
//! `applicable_patch`); an optional column left out or empty means "not said".

use serde_json::Value;

use super::results::{Entry, Outcome};

/// Parses JSONL rows (blank lines skipped).
///
/// Errors: a line that is not a JSON object, a missing `instance_id` or `resolved`, or a value
/// of the wrong kind; the message names the line.
pub fn jsonl(text: &str) -> Result<Vec<Entry>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |m: String| format!("line {}: {m}", i + 1);
        let value: Value = serde_json::from_str(line).map_err(|e| at(e.to_string()))?;
        let object = value
            .as_object()
            .ok_or_else(|| at("not a JSON object".into()))?;
        let get = |key: &str| -> Result<Option<String>, String> {
            match object.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(Value::Bool(b)) => Ok(Some(b.to_string())),
                Some(Value::Number(n)) => Ok(Some(n.to_string())),
                Some(_) => Err(at(format!("`{key}` is not a string, number or boolean"))),
            }
        };
        let row = Row {
            instance_id: get("instance_id")?,
            run: get("run")?,
            resolved: get("resolved")?,
            label: get("label")?,
            empty_patch: get("empty_patch")?,
            error: get("error")?,
            applied: APPLIED
                .iter()
                .map(|k| get(k))
                .find(|v| !matches!(v, Ok(None)))
                .unwrap_or(Ok(None))?,
        };
        out.push(row.entry().map_err(at)?);
    }
    Ok(out)
}

/// Parses CSV with a header row (column names case-insensitive, any order; RFC 4180 quoting).
///
/// Errors: no header, a header without `instance_id` or `resolved`, a row with a bad value.
pub fn csv(text: &str) -> Result<Vec<Entry>, String> {
    let records = records(text)?;
    let mut rows = records.into_iter().filter(|(_, r)| !is_blank(r));
    let Some((_, header)) = rows.next() else {
        return Err("empty CSV (no header row)".into());
    };
    let header: Vec<String> = header
        .iter()
        .map(|h| h.trim().trim_start_matches('\u{feff}').to_ascii_lowercase())
        .collect();
    let column = |name: &str| header.iter().position(|h| h == name);
    let (Some(id_col), Some(resolved_col)) = (column("instance_id"), column("resolved")) else {
        return Err(format!(
            "the header needs `instance_id` and `resolved` columns (got: {})",
            header.join(", ")
        ));
    };
    let cols = [
        column("run"),
        column("label"),
        column("empty_patch"),
        column("error"),
        APPLIED.iter().find_map(|name| column(name)),
    ];
    let mut out = Vec::new();
    for (line, record) in rows {
        let field = |c: Option<usize>| {
            c.and_then(|c| record.get(c))
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        };
        let row = Row {
            instance_id: field(Some(id_col)),
            resolved: field(Some(resolved_col)),
            run: field(cols[0]),
            label: field(cols[1]),
            empty_patch: field(cols[2]),
            error: field(cols[3]),
            applied: field(cols[4]),
        };
        out.push(row.entry().map_err(|m| format!("line {line}: {m}"))?);
    }
    Ok(out)
}

fn is_blank(record: &[String]) -> bool {
    record.iter().all(|f| f.trim().is_empty())
}

/// CSV records with the 1-based line each starts on.
fn records(text: &str) -> Result<Vec<(usize, Vec<String>)>, String> {
    let mut out = Vec::new();
    let mut record = Vec::new();
    let mut field = String::new();
    let mut line = 1;
    let mut start_line = 1;
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        if quoted {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => quoted = false,
                '\n' => {
                    line += 1;
                    field.push(c);
                }
                _ => field.push(c),
            }
            continue;
        }
        match c {
            '"' if field.trim().is_empty() => {
                field.clear();
                quoted = true;
            }
            ',' => record.push(std::mem::take(&mut field)),
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => {
                record.push(std::mem::take(&mut field));
                out.push((start_line, std::mem::take(&mut record)));
                line += 1;
                start_line = line;
            }
            _ => field.push(c),
        }
    }
    if quoted {
        return Err(format!("line {start_line}: unclosed quote"));
    }
    if !field.is_empty() || !record.is_empty() {
        record.push(field);
        out.push((start_line, record));
    }
    Ok(out)
}

struct Row {
    instance_id: Option<String>,
    run: Option<String>,
    resolved: Option<String>,
    label: Option<String>,
    empty_patch: Option<String>,
    error: Option<String>,
    applied: Option<String>,
}

/// Column names for "the patch applied", first found wins.
const APPLIED: [&str; 4] = [
    "applied",
    "patch_applied",
    "patch_successfully_applied",
    "applicable_patch",
];

impl Row {
    fn entry(self) -> Result<Entry, String> {
        let instance_id = self
            .instance_id
            .filter(|s| !s.is_empty())
            .ok_or("missing `instance_id`")?;
        let resolved = boolean(
            self.resolved.as_deref().ok_or("missing `resolved`")?,
            "resolved",
        )?;
        let run = match self.run.as_deref() {
            None | Some("") => None,
            Some(r) => Some(
                r.parse::<usize>()
                    .map_err(|_| format!("`run` is not a non-negative integer: {r:?}"))?,
            ),
        };
        let optional = |v: Option<&str>, name| v.map(|v| boolean(v, name)).transpose();
        Ok(Entry {
            label: self.label.filter(|s| !s.is_empty()),
            instance_id,
            run,
            outcome: Outcome {
                resolved,
                empty_patch: optional(self.empty_patch.as_deref(), "empty_patch")?,
                error: optional(self.error.as_deref(), "error")?,
                applied: optional(self.applied.as_deref(), "applied")?,
            },
        })
    }
}

/// `true|false|1|0|yes|no|y|n|t|f|resolved|unresolved`, case-insensitive.
fn boolean(value: &str, name: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "y" | "t" | "resolved" => Ok(true),
        "false" | "0" | "no" | "n" | "f" | "unresolved" | "" => Ok(false),
        other => Err(format!("`{name}` is not a boolean: {other:?}")),
    }
}
