//! `POST /v1/responses` (OpenAI Responses API), converted to and from the chat form.
//!
//! A request becomes a chat completion request ([`ResponsesRequest::from_slice`]) so that the
//! lenient decoding, the session lookup and the pipeline stay in one place; the step's
//! reply becomes `output` items in [`crate::respond`]. Input items: `message` (string or
//! `input_text`/`output_text` parts; roles user, system, developer, assistant), `function_call`
//! (joined to the assistant message before it, so our own echoed output round-trips),
//! `function_call_output`, `reasoning` (ignored). The proxy stores nothing, so
//! `previous_response_id` is refused: clients send the whole `input`.

use serde_json::{json, Map, Value};

use crate::error::ProxyError;
use crate::openai::chat::ChatCompletionRequest;

/// Top-level fields converted or echoed; every other field is kept in the chat form's `extra`
/// (listed as ignored in the trace).
const HANDLED: [&str; 11] = [
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "max_output_tokens",
    "temperature",
    "top_p",
    "stream",
    "metadata",
    "previous_response_id",
];

/// The one parameter a `custom` tool (free-form input, Codex's `apply_patch`) has in the chat
/// form: its raw input text.
pub const CUSTOM_INPUT: &str = "input";

/// A decoded Responses request.
#[derive(Debug, Clone)]
pub struct ResponsesRequest {
    /// Names of the request's `custom` tools, whose calls go back as `custom_tool_call`.
    pub custom_tools: Vec<String>,
    /// The same request in the chat form.
    pub chat: ChatCompletionRequest,
    /// The chat form as a JSON body, without the Responses-only fields (what passthrough mode
    /// forwards to a chat backend).
    pub chat_body: Vec<u8>,
    /// Request fields echoed on the response object.
    pub echo: Map<String, Value>,
    /// The input ends its history with a `compaction_trigger` item (Codex's remote compaction
    /// with OpenAI's own provider): the answer is one `compaction` item holding the summary.
    pub compaction: bool,
}

/// What a `compaction_trigger` input item becomes: the last user message, asking for the
/// summary (the marker of a compaction side call, [`crate::side_call::MARKERS`]).
pub const COMPACTION_REQUEST: &str = "Summarize the work on this task so far for the agent that will continue it: what was asked, what was found, what was changed, and what is left to do.";

/// What opens the user message a `compaction` input item becomes, its summary after it (the
/// proxy puts the summary's text in the item's `encrypted_content`, which the client keeps
/// without reading).
pub const COMPACTED_HISTORY: &str =
    "The work on this task so far, as summarized when the context was compacted:";

fn invalid(message: impl Into<String>, param: impl Into<String>) -> ProxyError {
    ProxyError::InvalidRequest {
        message: message.into(),
        param: Some(param.into()),
    }
}

/// An assistant chat message being assembled from a `message` item and the `function_call`
/// items after it.
#[derive(Default)]
struct PendingAssistant {
    content: Option<Value>,
    tool_calls: Vec<Value>,
}

impl PendingAssistant {
    fn into_message(self) -> Value {
        let mut m = Map::new();
        m.insert("role".into(), json!("assistant"));
        m.insert("content".into(), self.content.unwrap_or(Value::Null));
        if !self.tool_calls.is_empty() {
            m.insert("tool_calls".into(), Value::Array(self.tool_calls));
        }
        Value::Object(m)
    }
}

impl ResponsesRequest {
    /// Decodes a Responses request body. Errors are 400s naming the offending field
    /// (`input[2].call_id`).
    /// Lone surrogate escapes (`\udce9`) are read as U+FFFD ([`super::lenient`]).
    pub fn from_slice(body: &[u8]) -> Result<Self, ProxyError> {
        let body = super::lenient::replace_lone_surrogates(body);
        let value: Value = serde_json::from_slice(&body)
            .map_err(|e| ProxyError::invalid(format!("invalid request body: {e}")))?;
        let Value::Object(request) = value else {
            return Err(ProxyError::invalid("request body must be a JSON object"));
        };
        if request
            .get("previous_response_id")
            .is_some_and(|v| !v.is_null())
        {
            return Err(invalid(
                "`previous_response_id` is not supported: asap-proxy stores no responses; send the whole conversation in `input`",
                "previous_response_id",
            ));
        }
        let mut messages = Vec::new();
        match request.get("instructions") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.is_empty() => {}
            Some(Value::String(s)) => messages.push(json!({"role": "system", "content": s})),
            Some(_) => return Err(invalid("`instructions` must be a string", "instructions")),
        }
        let mut compaction = false;
        match request.get("input") {
            Some(Value::String(s)) => messages.push(json!({"role": "user", "content": s})),
            Some(Value::Array(items)) => {
                compaction = items
                    .iter()
                    .any(|i| i.get("type").and_then(Value::as_str) == Some("compaction_trigger"));
                messages.extend(input_messages(items)?)
            }
            _ => {
                return Err(invalid(
                    "`input` must be a string or a list of input items",
                    "input",
                ))
            }
        }
        if messages.is_empty() {
            return Err(invalid("`input` must contain at least one item", "input"));
        }

        let mut chat = Map::new();
        chat.insert("messages".into(), Value::Array(messages));
        for key in ["model", "temperature", "top_p", "stream", "metadata"] {
            if let Some(v) = request.get(key).filter(|v| !v.is_null()) {
                chat.insert(key.into(), v.clone());
            }
        }
        match request.get("max_output_tokens") {
            None | Some(Value::Null) => {}
            Some(v)
                if v.as_u64()
                    .is_some_and(|n| n >= 1 && n <= u64::from(u32::MAX)) =>
            {
                chat.insert("max_tokens".into(), v.clone());
            }
            Some(_) => {
                return Err(invalid(
                    "`max_output_tokens` must be a positive integer",
                    "max_output_tokens",
                ))
            }
        }
        let no_tools = Vec::new();
        let tools = match request.get("tools") {
            None | Some(Value::Null) => &no_tools,
            Some(Value::Array(tools)) => tools,
            Some(_) => return Err(invalid("`tools` must be a list", "tools")),
        };
        let chat_tools: Vec<Value> = tools
            .iter()
            .enumerate()
            .map(|(i, t)| chat_tool(i, t))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .flatten()
            .collect();
        let custom_tools = tools
            .iter()
            .filter(|t| t.get("type").and_then(Value::as_str) == Some("custom"))
            .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_string))
            .collect();
        if !chat_tools.is_empty() {
            chat.insert("tools".into(), Value::Array(chat_tools));
        }
        if let Some(choice) = request.get("tool_choice").filter(|v| !v.is_null()) {
            chat.insert("tool_choice".into(), chat_tool_choice(choice));
        }
        let (chat, chat_body) = ChatCompletionRequest::from_converted(chat, &request, &HANDLED)?;

        match request.get("truncation") {
            None | Some(Value::Null) => {}
            Some(Value::String(t)) if t == "auto" || t == "disabled" => {}
            Some(_) => {
                return Err(invalid(
                    "`truncation` must be \"auto\" or \"disabled\"",
                    "truncation",
                ))
            }
        }
        let echo = echo_fields(&request, tools);
        Ok(Self {
            custom_tools,
            chat,
            chat_body,
            echo,
            compaction,
        })
    }
}

/// The request fields the response object repeats (OpenAI's Response object), as sent, or
/// the API's documented default when not sent (`null` sent is `null`): `instructions`,
/// `max_output_tokens`, `previous_response_id` and `user` `null`, `metadata` `{}`,
/// `parallel_tool_calls` `true`, `reasoning` `{"effort": null, "summary": null}`, `text`
/// `{"format": {"type": "text"}}`, `tool_choice` `"auto"`, `tools` `[]` (also for `null`), `truncation`
/// `"disabled"`. Two differ from OpenAI's defaults so as not to claim what did not happen:
/// `temperature` and `top_p` are `null` when not sent (the proxy sends none, so the backend's
/// own default applies, not necessarily OpenAI's 1), and `store` is `false` (the proxy stores
/// nothing).
fn echo_fields(request: &Map<String, Value>, tools: &[Value]) -> Map<String, Value> {
    let defaults = [
        ("instructions", Value::Null),
        ("max_output_tokens", Value::Null),
        ("metadata", json!({})),
        ("parallel_tool_calls", json!(true)),
        ("previous_response_id", Value::Null),
        ("reasoning", json!({"effort": null, "summary": null})),
        ("store", json!(false)),
        ("temperature", Value::Null),
        ("text", json!({"format": {"type": "text"}})),
        ("tool_choice", json!("auto")),
        ("top_p", Value::Null),
        ("truncation", json!("disabled")),
        ("user", Value::Null),
    ];
    let mut echo: Map<String, Value> = defaults
        .into_iter()
        .map(|(key, default)| {
            let value = request.get(key).cloned().unwrap_or(default);
            (key.to_string(), value)
        })
        .collect();
    echo.insert("tools".into(), Value::Array(tools.to_vec()));
    echo
}

/// Chat messages of the `input` items.
fn input_messages(items: &[Value]) -> Result<Vec<Value>, ProxyError> {
    let mut out = Vec::new();
    let mut pending: Option<PendingAssistant> = None;
    for (i, item) in items.iter().enumerate() {
        let Value::Object(item) = item else {
            return Err(invalid(
                "an input item must be an object",
                format!("input[{i}]"),
            ));
        };
        let kind = match item.get("type") {
            Some(Value::String(t)) => t.as_str(),
            None | Some(Value::Null) if item.contains_key("role") => "message",
            _ => {
                return Err(invalid(
                    "input item without a `type`",
                    format!("input[{i}].type"),
                ))
            }
        };
        let string = |key: &str| -> Result<String, ProxyError> {
            match item.get(key) {
                Some(Value::String(s)) => Ok(s.clone()),
                _ => Err(invalid(
                    format!("`{key}` of a `{kind}` item must be a string"),
                    format!("input[{i}].{key}"),
                )),
            }
        };
        match kind {
            "message" => {
                let role = string("role")?;
                let content = item.get("content").cloned().unwrap_or(Value::Null);
                match role.as_str() {
                    "assistant" => {
                        out.extend(pending.take().map(PendingAssistant::into_message));
                        pending = Some(PendingAssistant {
                            content: Some(content),
                            tool_calls: Vec::new(),
                        });
                    }
                    "user" | "system" | "developer" => {
                        out.extend(pending.take().map(PendingAssistant::into_message));
                        out.push(json!({"role": role, "content": content}));
                    }
                    other => {
                        return Err(invalid(
                            format!("unknown message role `{other}`"),
                            format!("input[{i}].role"),
                        ))
                    }
                }
            }
            "function_call" => {
                let call_id = string("call_id")?;
                let name = string("name")?;
                let arguments = item.get("arguments").cloned().unwrap_or(json!(""));
                pending.get_or_insert_with(PendingAssistant::default).tool_calls.push(json!({
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }));
            }
            "function_call_output" => {
                let call_id = string("call_id")?;
                out.extend(pending.take().map(PendingAssistant::into_message));
                let output = item.get("output").cloned().unwrap_or(Value::Null);
                out.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
            }
            "custom_tool_call" => {
                let call_id = string("call_id")?;
                let name = string("name")?;
                let input = string("input")?;
                pending.get_or_insert_with(PendingAssistant::default).tool_calls.push(json!({
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json!({CUSTOM_INPUT: input}).to_string()},
                }));
            }
            "custom_tool_call_output" => {
                let call_id = string("call_id")?;
                out.extend(pending.take().map(PendingAssistant::into_message));
                let output = item.get("output").cloned().unwrap_or(Value::Null);
                out.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
            }
            "reasoning" => {}
            // Codex's remote compaction: the request for a summary, and the summary in later
            // histories (see `COMPACTION_REQUEST`, `COMPACTED_HISTORY`).
            "compaction_trigger" => {
                out.extend(pending.take().map(PendingAssistant::into_message));
                out.push(json!({"role": "user", "content": COMPACTION_REQUEST}));
            }
            "compaction" => {
                out.extend(pending.take().map(PendingAssistant::into_message));
                let summary = item
                    .get("encrypted_content")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                out.push(json!({"role": "user", "content": format!("{COMPACTED_HISTORY}\n\n{summary}")}));
            }
            other => {
                return Err(invalid(
                    format!("input items of type `{other}` are not supported (supported: message, function_call, function_call_output, custom_tool_call, custom_tool_call_output, reasoning, compaction_trigger, compaction)"),
                    format!("input[{i}].type"),
                ))
            }
        }
    }
    out.extend(pending.take().map(PendingAssistant::into_message));
    Ok(out)
}

/// A flat Responses tool as a chat tool: a `function` tool as it is; a `custom` tool (free-form
/// input, Codex's `apply_patch`) as a function of one string parameter, [`CUSTOM_INPUT`], its
/// grammar (when it has one) appended to its description; `None` for the built-in tools
/// (`web_search`, `local_shell`, `file_search`, …), which a base model behind the proxy cannot
/// run: left out, as the Messages API's server tools are.
fn chat_tool(i: usize, tool: &Value) -> Result<Option<Value>, ProxyError> {
    let kind = tool.get("type").and_then(Value::as_str);
    if !matches!(kind, Some("function" | "custom")) {
        return Ok(None);
    }
    let Some(name) = tool.get("name").and_then(Value::as_str) else {
        return Err(invalid(
            "a function tool needs a `name`",
            format!("tools[{i}].name"),
        ));
    };
    if kind == Some("custom") {
        let mut description = tool
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let format = tool.get("format");
        if let Some(definition) = format
            .and_then(|f| f.get("definition"))
            .and_then(Value::as_str)
        {
            let syntax = format
                .and_then(|f| f.get("syntax"))
                .and_then(Value::as_str)
                .unwrap_or("grammar");
            description.push_str(&format!(
                "\n\nThe input must follow this {syntax} grammar:\n{definition}"
            ));
        }
        return Ok(Some(json!({"type": "function", "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object",
                "properties": {CUSTOM_INPUT: {"type": "string", "description": "The raw input."}},
                "required": [CUSTOM_INPUT], "additionalProperties": false},
        }})));
    }
    let mut function = Map::new();
    function.insert("name".into(), json!(name));
    for key in ["description", "parameters", "strict"] {
        if let Some(v) = tool.get(key) {
            function.insert(key.into(), v.clone());
        }
    }
    Ok(Some(json!({"type": "function", "function": function})))
}

/// `{"type": "function", "name": n}` becomes the chat form; strings pass through.
fn chat_tool_choice(choice: &Value) -> Value {
    match (
        choice.get("type").and_then(Value::as_str),
        choice.get("name"),
    ) {
        (Some("function"), Some(name)) => json!({"type": "function", "function": {"name": name}}),
        _ => choice.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(v: Value) -> Result<ResponsesRequest, ProxyError> {
        ResponsesRequest::from_slice(v.to_string().as_bytes())
    }

    #[test]
    fn echoed_output_becomes_one_assistant_message() {
        let r = decode(json!({
            "model": "m",
            "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": "Q?"},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
                 "content": [{"type": "output_text", "text": "Look it up.", "annotations": []}]},
                {"type": "function_call", "id": "fc_1", "call_id": "call_x", "name": "search",
                 "arguments": "{\"query\":\"q\"}", "status": "completed"},
                {"type": "function_call_output", "call_id": "call_x",
                 "output": [{"type": "input_text", "text": "hits"}]}
            ],
            "tools": [{"type": "function", "name": "search", "parameters": {"type": "object"}, "strict": true}],
            "max_output_tokens": 50,
            "store": false,
            "reasoning": {"effort": "low"}
        }))
        .unwrap();
        let m = &r.chat.messages;
        assert_eq!(m.len(), 4);
        assert_eq!(&*m[0].content, "Be brief.");
        assert_eq!(&*m[1].content, "Q?");
        assert_eq!(&*m[2].content, "Look it up.");
        assert_eq!(m[2].tool_calls[0].id.as_deref(), Some("call_x"));
        assert_eq!(m[2].tool_calls[0].function.arguments["query"], "q");
        assert_eq!(m[3].tool_call_id.as_deref(), Some("call_x"));
        assert_eq!(&*m[3].content, "hits");
        assert_eq!(r.chat.tools[0].function.name, "search");
        assert_eq!(r.chat.max_tokens(), Some(50));
        assert_eq!(r.chat.ignored_fields(), vec!["reasoning", "store"]);
        let forwarded: Value = serde_json::from_slice(&r.chat_body).unwrap();
        assert!(forwarded.get("store").is_none());
    }

    /// Codex's `apply_patch` is a custom tool with a grammar: one string parameter in the chat
    /// form, its calls read back from `custom_tool_call` items; built-in tools are left out.
    #[test]
    fn custom_tools_take_their_raw_input() {
        let r = decode(json!({
            "model": "m",
            "input": [
                {"role": "user", "content": "Fix it."},
                {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_p", "name": "apply_patch",
                 "input": "*** Begin Patch\n*** End Patch", "status": "completed"},
                {"type": "custom_tool_call_output", "call_id": "call_p", "output": "Done!"}
            ],
            "tools": [
                {"type": "custom", "name": "apply_patch", "description": "Edit files.",
                 "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch"}},
                {"type": "web_search"},
                {"type": "function", "name": "shell", "parameters": {"type": "object"}}
            ],
            "store": false, "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "k", "parallel_tool_calls": false
        }))
        .unwrap();
        assert_eq!(r.custom_tools, ["apply_patch"]);
        let names: Vec<&str> = r
            .chat
            .tools
            .iter()
            .map(|t| t.function.name.as_str())
            .collect();
        assert_eq!(names, ["apply_patch", "shell"]);
        let patch = &r.chat.tools[0].function;
        assert!(patch
            .description
            .contains("lark grammar:\nstart: begin_patch"));
        let m = &r.chat.messages;
        assert_eq!(
            m[1].tool_calls[0].function.arguments["input"],
            "*** Begin Patch\n*** End Patch"
        );
        assert_eq!(m[2].tool_call_id.as_deref(), Some("call_p"));
        assert_eq!(&*m[2].content, "Done!");
    }

    #[test]
    fn bad_inputs_name_their_field() {
        for (body, param) in [
            (json!({"model": "m"}), "input"),
            (json!({"input": []}), "input"),
            (
                json!({"input": [{"type": "function_call", "name": "x"}]}),
                "input[0].call_id",
            ),
            (
                json!({"input": [{"role": "robot", "content": "x"}]}),
                "input[0].role",
            ),
            (
                json!({"input": [{"type": "item_reference", "id": "x"}]}),
                "input[0].type",
            ),
            (
                json!({"input": "x", "max_output_tokens": 0}),
                "max_output_tokens",
            ),
            (
                json!({"input": "x", "previous_response_id": "resp_1"}),
                "previous_response_id",
            ),
        ] {
            match decode(body.clone()) {
                Err(ProxyError::InvalidRequest { param: p, .. }) => {
                    assert_eq!(p.as_deref(), Some(param), "{body}")
                }
                other => panic!("{body}: {other:?}"),
            }
        }
    }
}
