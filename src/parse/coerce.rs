//! Coercion of an argument's text to its JSON-schema type (`integer`, `number`, `boolean`,
//! `array`, `object`, `enum`), so that `<view_range>[1, 20]</view_range>` reaches the scaffold
//! as `[1, 20]`, not `"[1, 20]"`.

use serde_json::{Number, Value};

use crate::profile::ParamSpec;

/// Converts `text` to a value of the parameter's schema type. Strings are kept byte for byte.
///
/// Errors: a message naming the expected type or the allowed enum values.
pub fn coerce(text: &str, param: &ParamSpec) -> Result<Value, String> {
    let value = coerce_schema(text, &param.schema)?;
    let allowed = param.enum_values();
    if allowed.is_empty() {
        return Ok(value);
    }
    let as_text = value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_string);
    if allowed.contains(&as_text) {
        return Ok(value);
    }
    let wanted = as_text.trim();
    match allowed.iter().find(|a| a.eq_ignore_ascii_case(wanted)) {
        Some(a) => coerce_schema(a, &param.schema),
        None => Err(format!(
            "`{}` must be one of {}, got {:?}",
            param.name,
            allowed.join(", "),
            as_text
        )),
    }
}

fn schema_type(schema: &Value) -> Option<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => Some(t.as_str()),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).find(|t| *t != "null"),
        _ => None,
    }
}

fn coerce_schema(text: &str, schema: &Value) -> Result<Value, String> {
    let t = text.trim();
    match schema_type(schema) {
        Some("string") => Ok(Value::String(text.to_string())),
        Some("integer") => {
            parse_integer(t).ok_or_else(|| format!("expected an integer, got {t:?}"))
        }
        Some("number") => parse_number(t).ok_or_else(|| format!("expected a number, got {t:?}")),
        Some("boolean") => match t.to_ascii_lowercase().as_str() {
            "true" | "yes" | "1" => Ok(Value::Bool(true)),
            "false" | "no" | "0" => Ok(Value::Bool(false)),
            _ => Err(format!("expected true or false, got {t:?}")),
        },
        Some("array") => coerce_array(t, schema.get("items").unwrap_or(&Value::Null)),
        Some("object") => match serde_json::from_str::<Value>(t) {
            Ok(v @ Value::Object(_)) => Ok(v),
            _ => Err(format!("expected a JSON object, got {t:?}")),
        },
        Some("null") => Ok(Value::Null),
        // No declared type (enum-only, anyOf, ...): JSON if it is JSON, else the text.
        _ if schema.get("enum").is_some() => Ok(Value::String(text.to_string())),
        _ => Ok(match serde_json::from_str::<Value>(t) {
            Ok(v @ (Value::Object(_) | Value::Array(_))) => v,
            _ => Value::String(text.to_string()),
        }),
    }
}

fn parse_integer(t: &str) -> Option<Value> {
    if let Ok(i) = t.parse::<i64>() {
        return Some(Value::from(i));
    }
    let f = t.parse::<f64>().ok()?;
    (f.fract() == 0.0 && f.abs() < 9.0e15).then(|| Value::from(f as i64))
}

fn parse_number(t: &str) -> Option<Value> {
    if let Ok(i) = t.parse::<i64>() {
        return Some(Value::from(i));
    }
    t.parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .map(Value::Number)
}

/// Arrays: JSON (`[1, 20]`), or bare items separated by commas or whitespace (`1, 20`, `1 20`).
fn coerce_array(t: &str, items: &Value) -> Result<Value, String> {
    let elements: Vec<Value> = match serde_json::from_str::<Value>(t) {
        Ok(Value::Array(vs)) => vs,
        _ => {
            let inner = t.trim_start_matches('[').trim_end_matches(']');
            inner
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.trim_matches(['"', '\'']).to_string()))
                .collect()
        }
    };
    if schema_type(items).is_none() {
        return Ok(Value::Array(elements));
    }
    elements
        .into_iter()
        .map(|e| match e {
            Value::String(s) => coerce_schema(&s, items),
            other if schema_type(items) == Some("string") => Ok(Value::String(match other {
                Value::String(s) => s,
                v => v.to_string(),
            })),
            other => coerce_schema(&other.to_string(), items),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
        .map_err(|e| format!("array item: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(schema: Value) -> ParamSpec {
        ParamSpec {
            name: "x".into(),
            schema,
            required: true,
            hidden: false,
            description: String::new(),
        }
    }

    #[test]
    fn scalars() {
        assert_eq!(
            coerce(" 12\n", &p(json!({"type": "integer"}))).unwrap(),
            json!(12)
        );
        assert_eq!(
            coerce("12.0", &p(json!({"type": "integer"}))).unwrap(),
            json!(12)
        );
        assert!(coerce("twelve", &p(json!({"type": "integer"}))).is_err());
        assert_eq!(
            coerce("2.5", &p(json!({"type": "number"}))).unwrap(),
            json!(2.5)
        );
        assert_eq!(
            coerce("30", &p(json!({"type": "number"}))).unwrap(),
            json!(30)
        );
        assert_eq!(
            coerce("True", &p(json!({"type": "boolean"}))).unwrap(),
            json!(true)
        );
        assert_eq!(
            coerce(" a\tb \r\n", &p(json!({"type": "string"}))).unwrap(),
            json!(" a\tb \r\n")
        );
    }

    #[test]
    fn arrays_in_every_spelling() {
        let range = p(json!({"type": "array", "items": {"type": "integer"}}));
        for text in ["[1, 20]", "1, 20", "1 20", "[1,20]", "[\"1\", \"20\"]"] {
            assert_eq!(coerce(text, &range).unwrap(), json!([1, 20]), "{text}");
        }
        assert!(coerce("[1, x]", &range).is_err());
        let objects = p(json!({"type": "array", "items": {"type": "object"}}));
        assert_eq!(
            coerce(r#"[{"title": "a"}]"#, &objects).unwrap(),
            json!([{"title": "a"}])
        );
    }

    #[test]
    fn enums_match_case_insensitively_or_fail() {
        let e = p(json!({"type": "string", "enum": ["view", "create"]}));
        assert_eq!(coerce("view", &e).unwrap(), json!("view"));
        assert_eq!(coerce(" View\n", &e).unwrap(), json!("view"));
        let err = coerce("delete", &e).unwrap_err();
        assert!(err.contains("view, create"), "{err}");
        let stringly_bool = p(json!({"type": "string", "enum": ["true", "false"]}));
        assert_eq!(coerce("TRUE", &stringly_bool).unwrap(), json!("true"));
    }
}
