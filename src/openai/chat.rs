//! `POST /v1/chat/completions` request body, decoded leniently as real clients send it.
//!
//! Tolerated shapes (observed from LiteLLM, the `openai` SDK, SWE-agent, OpenHands and
//! mini-swe-agent): `content` as a string, `null`, absent, `""` or a list of parts; unknown keys
//! at top level and on messages (kept in `extra` so they can be logged); tool-call
//! `arguments` as a JSON string, an object, `""` or absent; tool-call ids of any format.

use std::sync::Arc;

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::split::{BodySplit, MessageCache, ToolsCache};

use crate::error::ProxyError;

/// A chat completion request. Fields the proxy does not use are kept in `extra`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatCompletionRequest {
    #[serde(default)]
    pub model: Option<String>,
    /// Shared: a message of an earlier request with the same JSON text is taken from
    /// [`MessageCache`], not decoded again.
    pub messages: Vec<Arc<ChatMessage>>,
    /// Shared: the tools of an earlier request with the same JSON text are taken from
    /// [`ToolsCache`], not decoded again (a scaffold sends the same tools each turn).
    #[serde(default, deserialize_with = "null_as_default")]
    pub tools: Arc<[Tool]>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub seed: Option<i64>,
    /// Legacy name of `max_completion_tokens`; either bounds the completion length (tokens).
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub max_completion_tokens: Option<u32>,
    #[serde(default)]
    pub n: Option<u32>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// The body as received, for the trace (set by [`ChatCompletionRequest::from_slice`]).
    #[serde(skip)]
    pub raw_body: bytes::Bytes,
    /// Where the parts of `raw_body` are (set with it by [`ChatCompletionRequest::from_bytes`]
    /// when the body split: the trace's request delta reads it instead of parsing again).
    #[serde(skip)]
    pub split: Option<Arc<BodySplit>>,
}

/// Where a request names its task ([`ChatCompletionRequest::explicit_task`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskSource {
    /// The `X-ASAP-Task` header.
    Header,
    /// `metadata.instance_id` in the body.
    Metadata,
}

/// The `X-ASAP-Task` and `X-ASAP-Run` headers of a request (docs/recipes.md): they travel
/// beside the decoded body, which holds only what the client sent in it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AsapHeaders {
    /// `X-ASAP-Task`: the task (SWE-bench `instance_id`) the request belongs to.
    pub task: Option<String>,
    /// `X-ASAP-Run`: the run index (ASAP protocol: n runs per task).
    pub run: Option<String>,
}

impl ChatCompletionRequest {
    /// The run index this request names (ASAP protocol: n runs per task): the `X-ASAP-Run`
    /// header, else `metadata.run`; `None` when absent or not a non-negative integer.
    pub fn explicit_run(&self, headers: &AsapHeaders) -> Option<usize> {
        if let Some(run) = headers.run.as_deref() {
            return run.trim().parse().ok();
        }
        let run = self.extra.get("metadata")?.get("run")?;
        run.as_u64()
            .map(|r| r as usize)
            .or_else(|| run.as_str()?.trim().parse().ok())
    }

    /// The task this request names explicitly, and how: the `X-ASAP-Task` header, else
    /// `metadata.instance_id` in the body (LiteLLM forwards `metadata`; `extra_body` works too).
    pub fn explicit_task(&self, headers: &AsapHeaders) -> Option<(String, TaskSource)> {
        if let Some(id) = headers.task.as_deref().filter(|t| !t.trim().is_empty()) {
            return Some((id.trim().to_string(), TaskSource::Header));
        }
        self.extra
            .get("metadata")
            .and_then(|m| m.get("instance_id"))
            .and_then(Value::as_str)
            .map(|id| (id.to_string(), TaskSource::Metadata))
    }

    /// System text and the first user message: where a scaffold states its reply format
    /// (used to detect content dialects).
    pub fn detection_text(&self) -> String {
        format!("{}\n{}", self.system_text(), self.first_user_text())
    }

    /// Text of the system and developer messages, joined by newlines.
    pub fn system_text(&self) -> String {
        self.messages
            .iter()
            .filter(|m| matches!(m.role, Role::System | Role::Developer))
            .map(|m| &*m.content)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The task as the scaffold opened the conversation: the user messages before the first
    /// assistant message, each without the context blocks of [`CONTEXT_BLOCKS`] (what the
    /// agent attached about its workspace: Claude Code's and qwen-code's `<system-reminder>`,
    /// Codex's `<environment_context>` and AGENTS.md, OpenHands' `<RUNTIME_INFORMATION>`,
    /// which change with the date and the checkout and name no task), joined by a blank line;
    /// a message that is nothing else is left out; a text wrapped whole in double quotes
    /// (opencode's) without them. A request of one plain user message gets that message
    /// unchanged. It is the session record's `task_text` (whose hash is the
    /// task's id when none is named) and the text searched for a task's statement.
    pub fn task_text(&self) -> String {
        let opening = self
            .messages
            .iter()
            .take_while(|m| m.role != Role::Assistant)
            .filter(|m| m.role == Role::User);
        let parts: Vec<std::borrow::Cow<'_, str>> = opening
            .map(|m| without_context_blocks(&m.content))
            .filter(|t| !t.trim().is_empty())
            .collect();
        let text = match parts.as_slice() {
            [] => return self.first_user_text().to_string(),
            [one] => one.to_string(),
            _ => parts.join("\n\n"),
        };
        // opencode 1.18 sends the message it was given wrapped in double quotes.
        match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
            Some(inner) if !inner.is_empty() => inner.to_string(),
            _ => text,
        }
    }

    /// Whether a subagent sent the request: its system text holds one of
    /// [`SUBAGENT_MARKERS`]. A subagent's session is its own trajectory, marked `subagent`
    /// in the trace; `report` leaves it out of every number (its parent's trajectory is the
    /// one measured).
    pub fn is_subagent(&self) -> bool {
        static FINDERS: std::sync::LazyLock<crate::util::Markers> =
            std::sync::LazyLock::new(|| crate::util::Markers::new(&SUBAGENT_MARKERS));
        FINDERS.first_in(&self.system_text()).is_some()
    }

    /// Text of the first user message (where scaffolds state their format; see
    /// [`ChatCompletionRequest::task_text`] for the task).
    pub fn first_user_text(&self) -> &str {
        self.messages
            .iter()
            .find(|m| m.role == Role::User)
            .map_or("", |m| &*m.content)
    }

    /// [`ChatCompletionRequest::from_slice`], keeping `body` (shared, not copied) as
    /// `raw_body` for the trace.
    /// `raw_body` is the body after [`super::lenient::replace_lone_surrogates`].
    ///
    /// The search for lone surrogates skips the messages a running session's previous body
    /// had ([`BodySplit::of_extending_unsearched`]); a body that has one elsewhere is
    /// replaced and decoded again.
    pub fn from_bytes(body: bytes::Bytes) -> Result<Self, ProxyError> {
        // The replacement strips the mark itself: from the body as received, so that one mark
        // only is ever dropped (a second is the decoder's error, as before the search).
        let unmarked = super::lenient::without_byte_order_mark(body.clone());
        let (mut request, split, body) = match Self::decode_split(&unmarked, false)? {
            Some((request, split)) => (request, split, unmarked),
            None => {
                let body = super::lenient::replace_lone_surrogates_bytes(body);
                let (request, split) = Self::decode_split(&body, true)?.ok_or_else(|| {
                    ProxyError::Internal("a replaced body still has lone surrogates".into())
                })?;
                (request, split, body)
            }
        };
        request.raw_body = body;
        request.split = split;
        Ok(request)
    }

    /// A request of another API converted to the chat form (`chat`, a chat request body), with
    /// `original`'s fields that no conversion `handled` kept as extras (listed as ignored in the
    /// trace): the decoded request, and the chat body alone (what passthrough forwards to a
    /// chat backend). Used by the Responses and Messages APIs.
    ///
    /// Errors: the chat form does not decode (a 400 naming the field).
    pub fn from_converted(
        chat: Map<String, Value>,
        original: &Map<String, Value>,
        handled: &[&str],
    ) -> Result<(Self, Vec<u8>), ProxyError> {
        let chat_body =
            serde_json::to_vec(&chat).map_err(|e| ProxyError::Internal(e.to_string()))?;
        let mut decoded = chat;
        for (key, value) in original {
            if !handled.contains(&key.as_str()) && !decoded.contains_key(key) {
                decoded.insert(key.clone(), value.clone());
            }
        }
        let decoded =
            serde_json::to_vec(&decoded).map_err(|e| ProxyError::Internal(e.to_string()))?;
        Ok((Self::from_slice(&decoded)?, chat_body))
    }

    /// Decodes a request body (`raw_body` stays empty). Errors carry the JSON path of the bad field (`messages[1].role`)
    /// so the 400 tells the client exactly what is wrong.
    /// Lone surrogate escapes (`\udce9`) are read as U+FFFD ([`super::lenient`]).
    pub fn from_slice(body: &[u8]) -> Result<Self, ProxyError> {
        Self::decode(&super::lenient::replace_lone_surrogates(body))
    }

    /// [`ChatCompletionRequest::from_slice`] of a body whose lone surrogates were replaced.
    fn decode(body: &[u8]) -> Result<Self, ProxyError> {
        Self::decode_split(body, true)?
            .map(|(request, _)| request)
            .ok_or_else(|| ProxyError::Internal("a replaced body still has lone surrogates".into()))
    }

    /// The request, and the split of `body` when it was decoded through one.
    ///
    /// Errors: a body nested deeper than [`super::split::MAX_DEPTH`] levels (its trace record
    /// could not be read back), or one that does not decode or validate.
    /// `searched`: the body's lone surrogates were replaced. Otherwise `Ok(None)` when it has
    /// one (searched only where needed: [`BodySplit::of_extending_unsearched`]).
    #[allow(clippy::type_complexity)]
    fn decode_split(
        body: &[u8],
        searched: bool,
    ) -> Result<Option<(Self, Option<Arc<BodySplit>>)>, ProxyError> {
        let too_deep = |depth: usize| ProxyError::InvalidRequest {
            message: format!(
                "request body nested {depth} levels deep; at most {} are accepted",
                super::split::MAX_DEPTH
            ),
            param: None,
        };
        match Self::decode_cached(body, searched) {
            Err(super::split::LoneSurrogates) => return Ok(None),
            Ok(Some((_, split))) if split.depth > super::split::MAX_DEPTH => {
                return Err(too_deep(split.depth));
            }
            Ok(Some((request, split))) => {
                return Ok(Some((Self::validate(request)?, Some(Arc::new(split)))));
            }
            Ok(None) => {}
        }
        if !searched && super::lenient::has_lone_surrogates_outside(body, 0..0) {
            return Ok(None);
        }
        let depth = super::split::nesting_depth(body);
        if depth > super::split::MAX_DEPTH {
            return Err(too_deep(depth));
        }
        // Path tracking costs an allocation per key; bodies are valid almost always, so decode
        // plainly first and decode again with tracking only to word an error.
        let request: Self = match serde_json::from_slice(body) {
            Ok(request) => request,
            Err(_) => Self::decode_error(body)?,
        };
        Ok(Some((Self::validate(request)?, None)))
    }

    /// `body` decoded through its [`BodySplit`]: the fields other than `messages` decoded
    /// alone, each message taken from [`MessageCache`] or decoded and remembered. `None`
    /// when anything does not decode (the plain decoder then words the error) or the cache's
    /// lock is poisoned. `searched`: as [`ChatCompletionRequest::decode_split`]; errors: a
    /// lone surrogate where the unsearched body was searched.
    fn decode_cached(
        body: &[u8],
        searched: bool,
    ) -> Result<Option<(Self, BodySplit)>, super::split::LoneSurrogates> {
        let Ok(text) = std::str::from_utf8(body) else {
            return Ok(None);
        };
        let split = match searched {
            true => BodySplit::of_extending(text),
            false => BodySplit::of_extending_unsearched(text)?,
        };
        Ok(split.and_then(|split| Self::decode_split_messages(text, split)))
    }

    /// [`ChatCompletionRequest::decode_cached`] once `text` is split.
    fn decode_split_messages(text: &str, split: BodySplit) -> Option<(Self, BodySplit)> {
        // Tools (one member: a repeated one is the plain decoder's error) from their cache.
        let mut tools = split.rest.iter().filter(|(key, _)| key == "tools");
        let cached_tools = match (tools.next(), tools.next()) {
            (Some((_, range)), None) => Some(ToolsCache::decode(&text[range.clone()])?),
            _ => None,
        };
        let leave_out = cached_tools.is_some().then_some("tools");
        let mut request: Self =
            serde_json::from_str(&split.without_messages_and(text, leave_out)).ok()?;
        if let Some(tools) = cached_tools {
            request.tools = tools;
        }
        let mut messages: Vec<Option<Arc<ChatMessage>>> = {
            let mut cache = MessageCache::global().lock().ok()?;
            split
                .messages
                .iter()
                .map(|m| cache.get(m.digest, m.range.len()))
                .collect()
        };
        let mut decoded = Vec::new();
        let mut at = 0;
        while at < messages.len() {
            if messages[at].is_some() {
                at += 1;
                continue;
            }
            let from = at;
            while at < messages.len() && messages[at].is_none() {
                at += 1;
            }
            let run = &split.messages[from..at];
            for ((slot, raw), message) in messages[from..at]
                .iter_mut()
                .zip(run)
                .zip(decode_run(text, run)?)
            {
                let message = Arc::new(message);
                *slot = Some(message.clone());
                decoded.push((raw, message));
            }
        }
        if !decoded.is_empty() {
            let mut cache = MessageCache::global().lock().ok()?;
            for (raw, message) in decoded {
                cache.insert(raw.digest, raw.range.len(), message);
            }
        }
        request.messages = messages.into_iter().collect::<Option<Vec<_>>>()?;
        Some((request, split))
    }

    /// Decodes `body` with path tracking: the error names the JSON path of the bad field.
    fn decode_error(body: &[u8]) -> Result<Self, ProxyError> {
        let de = &mut serde_json::Deserializer::from_slice(body);
        let request = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            // `.`: the top level; `?`: no path (the body is not JSON at all).
            let param = (path != "." && path != "?").then_some(path);
            let message = match &param {
                Some(p) => format!("invalid request body at `{p}`: {inner}"),
                None => format!("invalid request body: {inner}"),
            };
            ProxyError::InvalidRequest { message, param }
        })?;
        // What follows the object (`{…}}`, a second object): the plain decode refused it,
        // so this one must too.
        de.end().map_err(|e| ProxyError::InvalidRequest {
            message: format!("invalid request body: {e}"),
            param: None,
        })?;
        Ok(request)
    }

    /// The checks serde cannot express.
    fn validate(request: Self) -> Result<Self, ProxyError> {
        if request.messages.is_empty() {
            return Err(ProxyError::InvalidRequest {
                message: "`messages` must contain at least one message".into(),
                param: Some("messages".into()),
            });
        }
        if request.max_tokens() == Some(0) {
            return Err(ProxyError::InvalidRequest {
                message: "`max_tokens` must be at least 1".into(),
                param: Some(
                    if request.max_completion_tokens.is_some() {
                        "max_completion_tokens"
                    } else {
                        "max_tokens"
                    }
                    .into(),
                ),
            });
        }
        if request.n.is_some_and(|n| n > 1) {
            return Err(ProxyError::InvalidRequest {
                message: "`n` > 1 is not supported: each step is one completion".into(),
                param: Some("n".into()),
            });
        }
        Ok(request)
    }

    /// Whether the client asked for SSE.
    pub fn is_stream(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    /// Whether the final SSE chunk should carry `usage` (`stream_options.include_usage`).
    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage.unwrap_or(false))
    }

    /// The client's completion-length bound, whichever name it used.
    pub fn max_tokens(&self) -> Option<u32> {
        self.max_completion_tokens.or(self.max_tokens)
    }

    /// Names of the top-level fields the proxy does not interpret, sorted (for the trace).
    /// A `tool_choice` other than `auto`/`none` is listed: forcing a named or `required` tool
    /// is not enforced (the model's own action is parsed as usual).
    pub fn ignored_fields(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.extra.keys().cloned().collect();
        if self.tool_choice.is_some() && !self.tool_choice_is_auto() && !self.tool_choice_is_none()
        {
            keys.push("tool_choice".to_string());
        }
        keys.sort();
        keys
    }

    /// `tool_choice: "none"`: the client wants a message, not a tool call.
    pub fn tool_choice_is_none(&self) -> bool {
        self.tool_choice.as_ref().and_then(Value::as_str) == Some("none")
    }

    fn tool_choice_is_auto(&self) -> bool {
        self.tool_choice.as_ref().and_then(Value::as_str) == Some("auto")
    }
}

/// `stream_options` of a streaming request.
#[derive(Debug, Clone, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// Message author. `developer` is the newer name of `system`; `function` is the legacy tool role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
    Function,
}

/// One chat message.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    /// Flattened text of `content` (string, or the text parts of a list joined by `\n`);
    /// empty for `null`, absent and `""`.
    #[serde(default, deserialize_with = "content_text")]
    pub content: std::sync::Arc<str>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default)]
    pub tool_call_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// Members no stage reads (`refusal`, `annotations`, `function_call: null`, …): accepted
    /// and dropped while decoding, not held. A history's messages stay decoded in the message
    /// cache and in every turn in flight, and a map of them per message and per tool call
    /// (`"type": "function"`) held 12–14 MiB of the RSS with 256 in-flight 100-turn requests
    /// (BENCHMARKS.md, issue 23, thirteenth session). Flattened, so a message is still a JSON
    /// object only, as before.
    #[serde(flatten)]
    pub other: Unread,
    /// A later stage's reading of this message, kept while the message is cached (the
    /// conversation's reading of a text dialect's reply); empty when decoded or cloned.
    #[serde(skip)]
    pub read: crate::util::Memo,
    /// The digest of `content`, worked out once while the message is cached (the render
    /// cache's key of an observation read from it); empty when decoded or cloned.
    #[serde(skip)]
    pub content_digest: crate::util::DigestMemo,
}

/// A tool call in an assistant message of the history.
#[derive(Debug, Clone, Deserialize)]
pub struct ToolCall {
    #[serde(default, deserialize_with = "id_string")]
    pub id: Option<String>,
    pub function: FunctionCall,
    /// `type` and any other member: dropped, as [`ChatMessage::other`].
    #[serde(flatten)]
    pub other: Unread,
}

/// `function` of a tool call: name and arguments.
#[derive(Debug, Clone, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    /// Arguments as a JSON object. A JSON string is decoded; `""`, `null` and absent become
    /// `{}`; a string that is not a JSON object is kept under the key `"_raw"`.
    #[serde(default, deserialize_with = "arguments_object")]
    pub arguments: Arc<Map<String, Value>>,
}

/// Members of a decoded value that no stage reads, accepted and dropped (no allocation held);
/// as a flattened field it keeps the value's form a JSON object (serde's derive without a
/// flattened field would also take an array of the members in order).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unread;

impl<'de> Deserialize<'de> for Unread {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(deserializer).map(|_| Self)
    }
}

/// A tool offered by the client (`{"type": "function", "function": {...}}`).
#[derive(Debug, Clone, Deserialize)]
pub struct Tool {
    pub function: FunctionDefinition,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Name, description and JSON-schema parameters of a tool.
#[derive(Debug, Clone, Deserialize)]
pub struct FunctionDefinition {
    pub name: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub description: String,
    #[serde(default)]
    pub parameters: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The messages of `run` (consecutive elements of one `messages` array in `text`), decoded by
/// one deserializer over a copy of their text as an array: serde_json unescapes a string into
/// a scratch buffer that starts empty for each deserializer and doubles as it fills, so one
/// deserializer per message paid that growth for every message (issue 23, the decode of a
/// session's first request). `None` when a message does not decode, or the text between two
/// of them is not one comma (the split did not come from one array).
fn decode_run(text: &str, run: &[super::split::RawMessage]) -> Option<Vec<ChatMessage>> {
    let (first, last) = (run.first()?, run.last()?);
    let joined = text.get(first.range.start..last.range.end)?;
    let separated = run.windows(2).all(|pair| {
        text.get(pair[0].range.end..pair[1].range.start)
            .map(str::trim)
            == Some(",")
    });
    if !separated {
        return None;
    }
    let mut array = String::with_capacity(joined.len() + 2);
    array.push('[');
    array.push_str(joined);
    array.push(']');
    let decoded: Vec<ChatMessage> = serde_json::from_str(&array).ok()?;
    (decoded.len() == run.len()).then_some(decoded)
}

fn content_text<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<str>, D::Error> {
    d.deserialize_any(ContentText)
}

/// [`content_text`]'s reading: a string straight into the shared text (one copy of the
/// decoder's, where a `Value` in between cost a second allocation and copy of every message's
/// content: issue 23, the decode of a session's first request); parts through a `Value`, as
/// before. Another kind is refused with the same message and path as before (the column of a
/// number or boolean may differ by one). An object is not read as serde_json's raw-value
/// marker (`{"$serde_json::private::RawValue": …}`), which a `Value` in between honoured.
struct ContentText;

impl<'de> serde::de::Visitor<'de> for ContentText {
    type Value = Arc<str>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string, null or a list of parts")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Arc<str>, E> {
        Ok(text.into())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Arc<str>, E> {
        Ok("".into())
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Arc<str>, E> {
        Ok("".into())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Arc<str>, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Arc<str>, A::Error> {
        // Through `Value`s: every member of a part is checked as JSON (a number out of range,
        // a bad escape in `cache_control` is refused with its path), as the trace's readers
        // will read it back. A single part's text is copied once, not joined first.
        let parts = Vec::<Value>::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?;
        let mut texts = parts.iter().filter_map(part_text);
        Ok(match (texts.next(), texts.next()) {
            (None, _) => "".into(),
            (Some(one), None) => one.into(),
            (Some(first), Some(second)) => {
                let mut joined = vec![first, second];
                joined.extend(texts);
                joined.join("\n").into()
            }
        })
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Arc<str>, A::Error> {
        // Read to its end first, so that a syntax error inside it is the error reported (keys
        // read as text, so that the error's path names the member).
        while map.next_entry::<String, serde::de::IgnoredAny>()?.is_some() {}
        Err(not_content("an object"))
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Arc<str>, E> {
        Err(not_content("a boolean"))
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Arc<str>, E> {
        Err(not_content("a number"))
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Arc<str>, E> {
        Err(not_content("a number"))
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Arc<str>, E> {
        Err(not_content("a number"))
    }
}

/// The error for a `content` of another JSON kind (`kind`: "a number", "an object", …).
fn not_content<E: serde::de::Error>(kind: &str) -> E {
    E::custom(format!(
        "content must be a string, null or a list of parts, not {kind}"
    ))
}

/// Text of one content part: `{"type":"text","text":…}`, a bare string, or a placeholder for
/// non-text parts (images cannot reach a text-only base model).
fn part_text(part: &Value) -> Option<String> {
    match part {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => match o.get("text") {
            Some(Value::String(s)) => Some(s.clone()),
            _ => {
                let kind = o.get("type").and_then(Value::as_str).unwrap_or("unknown");
                Some(format!("[{kind} content omitted]"))
            }
        },
        _ => None,
    }
}

fn id_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(other) => Some(other.to_string()),
    })
}

/// Key under which history `arguments` that are not a JSON object are kept.
pub const RAW_ARGUMENTS: &str = "_raw";

fn arguments_object<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<Map<String, Value>>, D::Error> {
    d.deserialize_any(ArgumentsObject)
        .map(|m| Arc::new(fitted(m)))
}

/// `map` in a map of its own length. A map read entry by entry keeps room for as many entries
/// as its hash table has slots (3 for one to three, 7 for four to seven): 224 of the ~760
/// bytes a one-argument call's arguments take, and a long history's tool calls are kept while
/// its completion call waits (heaptrack, BENCHMARKS.md "Issue 23, twentieth session").
fn fitted(map: Map<String, Value>) -> Map<String, Value> {
    let mut fitted = Map::with_capacity(map.len());
    fitted.extend(map);
    fitted
}

/// [`arguments_object`]'s reading: an object as it is; `null`, an absent or blank string as no
/// arguments; a string holding a JSON object (the usual `arguments`) as that object, read
/// straight from the decoder's text (no `Value` of the string in between: issue 23, the decode
/// of a session's first request); anything else kept whole under [`RAW_ARGUMENTS`]. An object
/// is read as the map it is, not as serde_json's raw-value marker
/// (`{"$serde_json::private::RawValue": …}`), which a `Value` in between honoured.
struct ArgumentsObject;

impl ArgumentsObject {
    fn raw(value: Value) -> Map<String, Value> {
        Map::from_iter([(RAW_ARGUMENTS.to_string(), value)])
    }
}

impl<'de> serde::de::Visitor<'de> for ArgumentsObject {
    type Value = Map<String, Value>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object, a string of one, or null")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
        if text.trim().is_empty() {
            return Ok(Map::new());
        }
        // The arguments string is JSON of its own: a lone surrogate escape inside it (Python's
        // `json.dumps` of terminal text) is read as U+FFFD, as in the body.
        let fixed = super::lenient::replace_lone_surrogates(text.as_bytes());
        Ok(serde_json::from_slice::<Map<String, Value>>(&fixed)
            .unwrap_or_else(|_| Self::raw(Value::String(text.to_string()))))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(Map::new())
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(Map::new())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        Map::deserialize(serde::de::value::MapAccessDeserializer::new(map))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let items = Vec::<Value>::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?;
        Ok(Self::raw(Value::Array(items)))
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Self::raw(Value::Bool(v)))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Self::raw(Value::from(v)))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Self::raw(Value::from(v)))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Self::raw(Value::from(v)))
    }
}

/// What marks a subagent's system text: Claude Code 2.1's billing header
/// (`cc_is_subagent=true`), qwen-code 0.24's built-in subagents, opencode 1.18's `explore`
/// (its `general` subagent has the main agent's prompt and cannot be told apart).
pub const SUBAGENT_MARKERS: [&str; 3] = [
    "cc_is_subagent=true",
    "You are a general-purpose subagent working for a parent agent.",
    "You are a file search specialist.",
];

/// Blocks an agent attaches to the task about its workspace, as (opening line start, closing
/// tag): a block runs from a line starting with the first to the end of the second. Claude Code
/// and qwen-code (`<system-reminder>`), Codex (`<environment_context>`, `<user_instructions>`,
/// and `# AGENTS.md instructions for DIR` with its `<INSTRUCTIONS>`), OpenHands
/// (`<RUNTIME_INFORMATION>`).
pub const CONTEXT_BLOCKS: [(&str, &str); 5] = [
    ("<system-reminder>", "</system-reminder>"),
    ("<environment_context>", "</environment_context>"),
    ("<user_instructions>", "</user_instructions>"),
    ("# AGENTS.md instructions for ", "</INSTRUCTIONS>"),
    ("<RUNTIME_INFORMATION>", "</RUNTIME_INFORMATION>"),
];

/// `text` without the [`CONTEXT_BLOCKS`] (borrowed when it has none); a block without its
/// closing tag is kept.
fn without_context_blocks(text: &str) -> std::borrow::Cow<'_, str> {
    let mut out = String::new();
    let mut rest = text;
    let mut cut = false;
    'scan: loop {
        let mut at = 0;
        while at < rest.len() {
            let line = &rest[at..];
            // Every block opens with `<` or `#`: most lines are passed over without a look.
            let opens = matches!(line.as_bytes().first(), Some(b'<' | b'#'));
            for (open, close) in CONTEXT_BLOCKS.iter().filter(|_| opens) {
                if line.starts_with(open) {
                    if let Some(end) = line.find(close) {
                        out.push_str(&rest[..at]);
                        rest = line[end + close.len()..].trim_start_matches(['\r', '\n']);
                        cut = true;
                        continue 'scan;
                    }
                }
            }
            at += memchr::memchr(b'\n', line.as_bytes()).map_or(line.len(), |n| n + 1);
        }
        break;
    }
    if !cut {
        return std::borrow::Cow::Borrowed(text);
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every member of a content part is read as JSON, as the trace's readers read it back:
    /// a number out of range, a bad escape or a trailing comma in a part's `cache_control` is
    /// refused with its path (found by a break-it review of a decoder that skipped the members
    /// it does not use: it took such requests and wrote traces no reader could open).
    #[test]
    fn a_content_parts_unused_members_are_checked_as_json() {
        for (part, error) in [
            (
                r#"{"type":"text","text":"x","cache_control":{"type":"ephemeral","ttl":1e400}}"#,
                "messages[0].content[1].cache_control.ttl`: number out of range",
            ),
            (
                r#"{"type":"text","text":"x","cache_control":{"type":"a\qb"}}"#,
                "messages[0].content[1].cache_control.type`: invalid escape",
            ),
            (
                r#"{"type":"text","text":"x","cache_control":{"type":"ephemeral",}}"#,
                "trailing comma",
            ),
            (r#"[[-1e400]]"#, "number out of range"),
        ] {
            let body = format!(
                r#"{{"model":"m","messages":[{{"role":"user","content":[{{"type":"text","text":"fix the bug"}},{part}]}}]}}"#
            );
            let message = match ChatCompletionRequest::from_bytes(body.clone().into()) {
                Ok(_) => panic!("accepted: {body}"),
                Err(e) => e.to_string(),
            };
            assert!(message.contains(error), "{message} ({body})");
        }
        // A list of one text part is its text; several are joined by line breaks.
        let body = r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]},{"role":"user","content":[{"type":"text","text":"b"},{"type":"image_url","image_url":{"url":"data:,"}},"c"]}]}"#;
        let request = ChatCompletionRequest::from_bytes(body.as_bytes().to_vec().into()).unwrap();
        let contents: Vec<&str> = request.messages.iter().map(|m| &*m.content).collect();
        assert_eq!(contents, ["a", "b\n[image_url content omitted]\nc"]);
    }

    /// The decoder without the split and the cache: serde_json on the whole body.
    fn plain(body: &[u8]) -> Option<ChatCompletionRequest> {
        serde_json::from_slice(body)
            .ok()
            .and_then(|r| ChatCompletionRequest::validate(r).ok())
    }

    #[test]
    fn a_body_nested_deeper_than_the_trace_can_hold_is_refused() {
        let nested = |d: usize| format!("{}1{}", "[".repeat(d), "]".repeat(d));
        // Body 1, messages 2, message 3, then `x`'s arrays.
        let in_message = |d: usize| {
            format!(
                r#"{{"messages":[{{"role":"user","content":"hi","x":{}}}]}}"#,
                nested(d)
            )
        };
        assert!(ChatCompletionRequest::from_slice(in_message(97).as_bytes()).is_ok());
        for body in [
            in_message(98),
            in_message(124),
            format!(
                r#"{{"messages":[{{"role":"user","content":"hi"}}],"x":{}}}"#,
                nested(100)
            ),
            // Does not split (not an object with messages): the depth is checked all the same.
            format!(r#"{{"x":{}}}"#, nested(100)),
        ] {
            let err = ChatCompletionRequest::from_slice(body.as_bytes()).unwrap_err();
            assert!(err.to_string().contains("levels deep"), "{err}");
        }
    }

    #[test]
    fn a_body_with_anything_after_the_object_is_refused() {
        // The decoder that words errors once let `{…}}` through (found by the property below).
        for body in [
            r#"{"messages":[{"role":"user","content":"x"}]}}"#,
            r#"{"messages":[{"role":"user","content":"x"}]} {"a":1}"#,
        ] {
            let err = ChatCompletionRequest::from_slice(body.as_bytes()).unwrap_err();
            assert!(err.to_string().contains("trailing characters"), "{err}");
        }
    }

    proptest::proptest! {
        /// Its messages decoded and remembered, a body with one byte inserted or deleted
        /// anywhere is decoded through the split and the cache exactly when serde_json
        /// decodes it whole, to the same request: the scanner's leniency never lets an
        /// invalid body through.
        #[test]
        fn a_damaged_body_decodes_as_serde_json_decodes_it(
            at in 0usize..400,
            byte in proptest::sample::select(vec![b'"', b'\\', b',', b'}', b']', b'{', b'[', b':', b' ', b'1', b'x', b'\t', b'\n', 1]),
            delete in proptest::bool::ANY,
        ) {
            let body = json!({"model": "m", "messages": [
                {"role": "system", "content": "Be \"brief\" \\ [ok]"},
                {"role": "user", "content": "Fix {it}."},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "a.py\n"},
            ], "temperature": 0.5, "tools": [{"type": "function", "function": {"name": "bash",
                "description": "Run \"it\" [now]", "parameters": {"type": "object",
                "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]});
            let mut text = serde_json::to_vec(&body).unwrap();
            proptest::prop_assert!(ChatCompletionRequest::from_slice(&text).is_ok());
            let at = at % text.len();
            if delete { text.remove(at); } else { text.insert(at, byte); }
            let ours = ChatCompletionRequest::from_slice(&text).ok();
            let theirs = plain(&text);
            proptest::prop_assert_eq!(ours.is_some(), theirs.is_some(), "{}", String::from_utf8_lossy(&text));
            if let (Some(a), Some(b)) = (ours, theirs) {
                proptest::prop_assert_eq!(format!("{:?}", a.messages), format!("{:?}", b.messages));
                proptest::prop_assert_eq!(a.extra, b.extra);
                proptest::prop_assert_eq!(a.temperature, b.temperature);
                proptest::prop_assert_eq!(format!("{:?}", a.tools), format!("{:?}", b.tools));
            }
        }
    }

    #[test]
    fn lone_surrogates_inside_tool_call_arguments_read_as_replacement_characters() {
        let body = br#"{"model": "m", "messages": [{"role": "user", "content": "t"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "bash", "arguments": "{\"command\": \"echo \\udce9 x\"}"}}]}]}"#;
        let request = ChatCompletionRequest::from_slice(body).unwrap();
        let call = &request.messages[1].tool_calls[0];
        assert_eq!(call.function.arguments["command"], json!("echo \u{fffd} x"));
    }

    /// A running session's turns, decoded as the server decodes them: the search for lone
    /// surrogates skips the messages the previous body had, and still finds one in a new
    /// message, in the fields after the messages, and in a message sent again as it was
    /// (the held body had it replaced, so that text is not trusted).
    #[test]
    fn a_running_session_finds_lone_surrogates_past_the_messages_it_shares() {
        let session = format!("{:x}", crate::util::digest(b"lone-surrogate-session"));
        let body = |outputs: &[&str], tail: &str| {
            let mut messages = vec![format!(
                r#"{{"role": "user", "content": "task {session}"}}"#
            )];
            for (i, output) in outputs.iter().enumerate() {
                messages.push(format!(
                    r#"{{"role": "assistant", "content": "step {i}", "tool_calls": [{{"id": "c{i}", "type": "function", "function": {{"name": "bash", "arguments": "{{}}"}}}}]}}"#
                ));
                messages.push(format!(
                    r#"{{"role": "tool", "tool_call_id": "c{i}", "content": "{output}"}}"#
                ));
            }
            let text = format!(
                r#"{{"model": "m", "messages": [{}]{tail}}}"#,
                messages.join(", ")
            );
            ChatCompletionRequest::from_bytes(bytes::Bytes::from(text)).unwrap()
        };
        let outputs = |request: &ChatCompletionRequest| -> Vec<String> {
            request
                .messages
                .iter()
                .filter(|m| m.role == Role::Tool)
                .map(|m| m.content.to_string())
                .collect()
        };
        let first = body(&["ok", "fine"], "");
        assert_eq!(outputs(&first), ["ok", "fine"]);
        // A lone surrogate in the new message.
        let second = body(&["ok", "fine", r"cut \ud83d"], "");
        assert_eq!(outputs(&second), ["ok", "fine", "cut \u{fffd}"]);
        assert!(std::str::from_utf8(&second.raw_body)
            .unwrap()
            .contains(r"cut \uFFFD"));
        // The same history sent again: its third message is not the text the cache holds.
        let third = body(&["ok", "fine", r"cut \ud83d", "more"], "");
        assert_eq!(outputs(&third), ["ok", "fine", "cut \u{fffd}", "more"]);
        // One in a field after the messages.
        let fourth = body(
            &["ok", "fine", r"cut \ud83d", "more"],
            r#", "user": "\udce9""#,
        );
        assert_eq!(fourth.extra["user"], json!("\u{fffd}"));
        assert_eq!(outputs(&fourth), ["ok", "fine", "cut \u{fffd}", "more"]);
        // One byte-order mark is dropped, a second is refused, a lone surrogate or not
        // (found by a review helper).
        for content in ["marked", r"marked \udce9"] {
            let text = format!(
                r#"{{"model": "m", "messages": [{{"role": "user", "content": "{content}"}}]}}"#
            );
            let once = format!("\u{feff}{text}");
            let request = ChatCompletionRequest::from_bytes(bytes::Bytes::from(once)).unwrap();
            let replaced = crate::openai::lenient::replace_lone_surrogates(text.as_bytes());
            assert_eq!(&request.raw_body[..], &*replaced);
            let twice = format!("\u{feff}\u{feff}{text}");
            assert!(ChatCompletionRequest::from_bytes(bytes::Bytes::from(twice)).is_err());
        }
    }

    fn decode(v: Value) -> Result<ChatCompletionRequest, ProxyError> {
        ChatCompletionRequest::from_slice(v.to_string().as_bytes())
    }

    /// The task is what the user asked, whatever workspace context the agent wrapped it in:
    /// the shapes Claude Code 2.1, qwen-code 0.24, Codex 0.171 and OpenHands send.
    #[test]
    fn task_text_leaves_out_the_agents_workspace_context() {
        let task = |messages: Value| decode(json!({ "messages": messages })).unwrap().task_text();
        // Claude Code: reminders as blocks before the task, in one message.
        let claude = task(json!([
            {"role": "system", "content": "You are Claude Code."},
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>\nRecent commits:\nb880ffd init\n</system-reminder>"},
                {"type": "text", "text": "<system-reminder>\nAttribution\n</system-reminder>\n"},
                {"type": "text", "text": "add() in calc.py subtracts. Fix it."}]}
        ]));
        assert_eq!(claude, "add() in calc.py subtracts. Fix it.");
        // Codex: the environment and AGENTS.md as their own messages before the task.
        let codex = task(json!([
            {"role": "developer", "content": "You are a coding agent running in the Codex CLI."},
            {"role": "user", "content": "# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>\nUse tabs.\n</INSTRUCTIONS>"},
            {"role": "user", "content": "<environment_context>\n  <cwd>/repo</cwd>\n  <current_date>2026-12-01</current_date>\n</environment_context>"},
            {"role": "user", "content": "Fix it."},
            {"role": "assistant", "content": "Looking."},
            {"role": "user", "content": "And the docs."}
        ]));
        assert_eq!(codex, "Fix it.");
        // OpenHands: the task, then the runtime's date and workspace.
        let openhands = task(json!([
            {"role": "user", "content": "The script crashes."},
            {"role": "user", "content": "<RUNTIME_INFORMATION>\nToday's date is 2025-06-01 (UTC).\n</RUNTIME_INFORMATION>"}
        ]));
        assert_eq!(openhands, "The script crashes.");
        // Two opening messages of task text are both the task; text around a block stays;
        // a block that is never closed, or one not at a line start, is text.
        let two = task(json!([
            {"role": "user", "content": "Intro\n<system-reminder>\nx\n</system-reminder>\nFix it."},
            {"role": "user", "content": "Also <system-reminder> inline </system-reminder> and\n<system-reminder>\nopen"}
        ]));
        assert_eq!(two, "Intro\nFix it.\n\nAlso <system-reminder> inline </system-reminder> and\n<system-reminder>\nopen");
        // One plain message is kept exactly (the id of earlier traces' tasks does not move);
        // a request of context only keeps its first user message.
        assert_eq!(
            task(json!([{"role": "user", "content": "  Fix it.\n"}])),
            "  Fix it.\n"
        );
        // opencode quotes the message: the task is the same as another agent's.
        assert_eq!(
            task(json!([{"role": "user", "content": "\"Fix it.\""}])),
            "Fix it."
        );
        let only = "<system-reminder>\nx\n</system-reminder>";
        assert_eq!(task(json!([{"role": "user", "content": only}])), only);
    }

    #[test]
    fn content_shapes_all_decode() {
        let r = decode(json!({"messages": [
            {"role": "system", "content": [{"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "b"}]},
            {"role": "user", "content": ""},
            {"role": "assistant", "tool_calls": [{"id": 0, "type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}]},
            {"role": "tool", "tool_call_id": "0", "content": null, "name": "bash"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "toolu_01", "function": {"name": "submit", "arguments": ""}}]},
            {"role": "assistant", "tool_calls": [{"function": {"name": "submit"}}]}
        ], "prompt_cache_key": "k", "reasoning_effort": "high"}))
        .unwrap();
        assert_eq!(&*r.messages[0].content, "a\nb");
        assert_eq!(&*r.messages[1].content, "");
        assert_eq!(r.messages[2].tool_calls[0].id.as_deref(), Some("0"));
        assert_eq!(
            r.messages[2].tool_calls[0].function.arguments["command"],
            "ls"
        );
        assert!(r.messages[4].tool_calls[0].function.arguments.is_empty());
        assert!(r.messages[5].tool_calls[0].function.arguments.is_empty());
        assert_eq!(
            r.ignored_fields(),
            vec!["prompt_cache_key", "reasoning_effort"]
        );
    }

    /// Members no stage reads are dropped while decoding, in messages and tool calls, and a
    /// message or tool call is still a JSON object only (the flattened [`Unread`] keeps
    /// serde's derive from taking an array of the members in order).
    #[test]
    fn unread_members_are_dropped_and_messages_stay_objects() {
        let r = decode(json!({"messages": [
            {"role": "user", "content": "Fix it.", "name": "u", "annotations": [{"x": 1}]},
            {"role": "assistant", "content": null, "refusal": null, "function_call": null,
             "audio": {"id": "a"}, "tool_calls": [{"id": "c1", "type": "function", "index": 0,
             "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "a.py\n", "status": "ok"}
        ]}))
        .unwrap();
        assert_eq!(r.messages.len(), 3);
        assert_eq!(r.messages[1].tool_calls[0].id.as_deref(), Some("c1"));
        assert_eq!(
            r.messages[1].tool_calls[0].function.arguments["command"],
            "ls"
        );
        assert_eq!(&*r.messages[2].content, "a.py\n");
        for messages in [
            json!([["user", "Fix it."]]),
            json!([{"role": "assistant", "tool_calls": [["c1", "function", {"name": "bash"}]]}]),
        ] {
            assert!(
                decode(json!({ "messages": messages })).is_err(),
                "{messages}"
            );
        }
    }

    /// `content` of another kind is refused with its path and kind, whichever of the visitor's
    /// branches reads it; a string with escapes decodes to its text.
    #[test]
    fn content_of_another_kind_names_its_path_and_kind() {
        for (content, kind) in [
            (json!(3), "a number"),
            (json!(-3), "a number"),
            (json!(2.5), "a number"),
            (json!(true), "a boolean"),
            (json!({"type": "text", "text": "x"}), "an object"),
        ] {
            let err = decode(json!({"messages": [
                {"role": "user", "content": "x"}, {"role": "user", "content": content}
            ]}))
            .unwrap_err();
            match err {
                ProxyError::InvalidRequest { param, message } => {
                    assert_eq!(param.as_deref(), Some("messages[1].content"), "{content}");
                    assert!(message.contains(&format!("not {kind}")), "{message}");
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        // A syntax error inside an object is reported as such, not as the object's kind.
        let body = r#"{"messages": [{"role": "user", "content": {"type": "text", "text": x}}]}"#;
        match ChatCompletionRequest::from_slice(body.as_bytes()).unwrap_err() {
            ProxyError::InvalidRequest { param, message } => {
                assert!(message.contains("expected value"), "{message}");
                assert_eq!(param.as_deref(), Some("messages[0].content.text"));
            }
            other => panic!("unexpected {other:?}"),
        }
        let r =
            decode(json!({"messages": [{"role": "user", "content": "a\n\"b\" \u{e9}"}]})).unwrap();
        assert_eq!(&*r.messages[0].content, "a\n\"b\" \u{e9}");
    }

    /// Every shape of `arguments` a history carries: a string of a JSON object (lone surrogate
    /// escapes read as U+FFFD), a blank string, and what is not an object kept under `_raw`.
    #[test]
    fn arguments_of_every_shape_decode() {
        let arguments = |arguments: Value| {
            let r = decode(json!({"messages": [{"role": "assistant", "tool_calls": [
                {"id": "c1", "function": {"name": "bash", "arguments": arguments}}
            ]}]}))
            .unwrap();
            Value::Object((*r.messages[0].tool_calls[0].function.arguments).clone())
        };
        assert_eq!(
            arguments(json!("{\"command\": \"ls\\n\", \"n\": [1, 2.5]}")),
            json!({"command": "ls\n", "n": [1, 2.5]})
        );
        assert_eq!(
            arguments(json!("{\"command\": \"echo \\udc80\"}")),
            json!({"command": "echo \u{fffd}"})
        );
        assert_eq!(arguments(json!(" \n")), json!({}));
        assert_eq!(arguments(json!(null)), json!({}));
        for raw in [
            json!("ls -la"),
            json!("[\"ls\"]"),
            json!("{\"command\": \"ls\" "),
            json!(["ls"]),
            json!(3),
            json!(-3),
            json!(2.5),
            json!(false),
        ] {
            assert_eq!(arguments(raw.clone()), json!({ "_raw": raw }));
        }
        // The order sent is kept (it is the order the action's arguments are rendered in),
        // also in the map refitted to its length.
        let order = ["path", "command", "old_str", "new_str", "insert_line"];
        let object: Map<String, Value> = order.iter().map(|k| (k.to_string(), json!(k))).collect();
        for sent in [
            Value::Object(object.clone()),
            json!(Value::Object(object).to_string()),
        ] {
            let read = arguments(sent);
            let keys: Vec<&str> = read
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(keys, order);
        }
    }

    /// A run of messages decodes as each of them alone does; ranges that are not one array's
    /// consecutive elements are refused rather than read as one.
    #[test]
    fn a_run_of_messages_decodes_as_each_alone() {
        let text = r#"{"messages": [{"role": "system", "content": "s\n"} ,
            {"role": "user", "content": [{"type": "text", "text": "t"}]},{"role": "assistant",
            "tool_calls": [{"id": "c1", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]}],
            "model": "m"}"#;
        let split = BodySplit::of(text).unwrap();
        let run = decode_run(text, &split.messages).unwrap();
        assert_eq!(run.len(), 3);
        for (message, raw) in run.iter().zip(&split.messages) {
            let alone: ChatMessage = serde_json::from_str(&text[raw.range.clone()]).unwrap();
            assert_eq!(format!("{message:?}"), format!("{alone:?}"));
        }
        let skipped = [split.messages[0].clone(), split.messages[2].clone()];
        assert!(decode_run(text, &skipped).is_none());
    }

    #[test]
    fn bad_role_names_its_path() {
        let err =
            decode(json!({"messages": [{"role": "user", "content": "x"}, {"role": "robot"}]}))
                .unwrap_err();
        match err {
            ProxyError::InvalidRequest { param, message } => {
                assert_eq!(param.as_deref(), Some("messages[1].role"));
                assert!(message.contains("robot"), "{message}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn messages_must_be_a_non_empty_list() {
        assert!(decode(json!({"messages": "hi"})).is_err());
        assert!(decode(json!({"messages": []})).is_err());
        assert!(decode(json!({"model": "m"})).is_err());
    }
}
