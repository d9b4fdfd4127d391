//! Reading fields that older traces may hold in another shape.

use serde::{Deserialize, Deserializer};

/// `deserialize_with` for a field older traces may hold in another shape (or a name this
/// build does not know): `None` (or the default) when it does not fit this build's type,
/// instead of failing the record.
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

    #[derive(Debug, Default, PartialEq, Deserialize)]
    struct Holder {
        #[serde(default, deserialize_with = "lenient")]
        on_terminate: Option<crate::config::OnTerminate>,
    }

    #[test]
    fn a_field_of_another_shape_reads_as_absent_and_a_known_one_as_itself() {
        let read = |json: &str| serde_json::from_str::<Holder>(json).unwrap().on_terminate;
        assert_eq!(
            read(r#"{"on_terminate": "error"}"#),
            Some(crate::config::OnTerminate::Error)
        );
        assert_eq!(read(r#"{"on_terminate": "a_newer_action"}"#), None);
        assert_eq!(read(r#"{"on_terminate": {"odd": 1}}"#), None);
        assert_eq!(read("{}"), None);
    }
}
