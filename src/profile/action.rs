//! The neutral action vocabulary every stage shares: what the parser produces, the renderer
//! writes, the policy judges and a profile maps to and from a scaffold's tool calls.

use serde_json::{Map, Value};

/// An action in the neutral vocabulary. Serialised in traces as
/// `{"kind": "call", "tag": …, "arguments": {…}}` or `{"kind": "submit", "message": …}`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Action {
    /// A tool call written as `<tag>…</tag>`; `arguments` are already coerced to the schema.
    /// Shared: a call read from the history holds its message's decoded arguments, not a copy,
    /// when the profile keeps them as they are (every long history's actions, kept while its
    /// completion call waits).
    Call {
        tag: String,
        arguments: std::sync::Arc<Map<String, Value>>,
    },
    /// `<submit/>`, with an optional message (`<submit>message</submit>`).
    Submit { message: Option<String> },
}
