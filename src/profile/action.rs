//! The neutral action vocabulary every stage shares: what the parser produces, the renderer
//! writes, the policy judges and a profile maps to and from a scaffold's tool calls.

use serde_json::{Map, Value};

/// An action in the neutral vocabulary. Serialised in traces as
/// `{"kind": "call", "tag": …, "arguments": {…}}` or `{"kind": "submit", "message": …}`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Action {
    /// A tool call written as `<tag>…</tag>`; `arguments` are already coerced to the schema.
    Call {
        tag: String,
        arguments: Map<String, Value>,
    },
    /// `<submit/>`, with an optional message (`<submit>message</submit>`).
    Submit { message: Option<String> },
}
