//! `POST {backend}/completions`: the legacy OpenAI completions API that vLLM, SGLang,
//! llama.cpp's llama-server, TGI and Ollama serve for base models.
//!
//! Backends report the stop string that ended generation in different places and drop it from
//! `text` (vLLM unless `include_stop_str_in_output`): vLLM `choices[0].stop_reason` (a string,
//! or a token id), SGLang `choices[0].matched_stop`, llama-server `stopping_word` (top level of
//! its native response, sometimes echoed in OpenAI-compatible mode). [`Choice::matched_stop`]
//! reads whichever is present.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Request body sent to the backend (the prompt borrowed: it is the largest part of a
/// request and only serialised once).
#[derive(Debug, Clone, Serialize)]
pub struct CompletionRequest<'a> {
    pub model: String,
    pub prompt: &'a str,
    pub max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    pub stop: Vec<String>,
    pub stream: bool,
    /// llama-server: reuse the KV cache of the previous prompt of this slot. Append-only
    /// rendering makes every turn a cache hit; other backends ignore the field.
    pub cache_prompt: bool,
}

impl CompletionRequest<'_> {
    /// The body as JSON, byte for byte what `serde_json::to_vec` writes for it, with the prompt
    /// escaped by [`crate::util::push_json_string`] (the prompt is almost all of the body).
    ///
    /// Errors: those of `serde_json::to_writer` into a `Vec` (none for these field types:
    /// a non-finite float is written as `null`, as `serde_json` writes it).
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        let (head, tail) = self.json_around_prompt()?;
        let mut out = Vec::with_capacity(head.len() + self.prompt.len() * 9 / 8 + tail.len() + 2);
        out.extend_from_slice(&head);
        crate::util::push_json_string(&mut out, self.prompt);
        out.extend_from_slice(&tail);
        Ok(out)
    }

    /// The JSON text of [`CompletionRequest::to_json`] before and after the prompt's string
    /// literal (`{"model":…,"prompt":` and `,"max_tokens":…}`), for a body that streams the
    /// prompt escaped piece by piece instead of holding it escaped whole.
    ///
    /// Errors: as [`CompletionRequest::to_json`].
    pub fn json_around_prompt(&self) -> Result<(Vec<u8>, Vec<u8>), serde_json::Error> {
        let mut head = Vec::with_capacity(self.model.len() + 32);
        head.extend_from_slice(b"{\"model\":");
        crate::util::push_json_string(&mut head, &self.model);
        head.extend_from_slice(b",\"prompt\":");
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(b",\"max_tokens\":");
        serde_json::to_writer(&mut out, &self.max_tokens)?;
        for (name, value) in [("temperature", self.temperature), ("top_p", self.top_p)] {
            if let Some(value) = value {
                out.extend_from_slice(format!(",\"{name}\":").as_bytes());
                serde_json::to_writer(&mut out, &value)?;
            }
        }
        if let Some(seed) = self.seed {
            out.extend_from_slice(b",\"seed\":");
            serde_json::to_writer(&mut out, &seed)?;
        }
        out.extend_from_slice(b",\"stop\":");
        serde_json::to_writer(&mut out, &self.stop)?;
        out.extend_from_slice(b",\"stream\":");
        serde_json::to_writer(&mut out, &self.stream)?;
        out.extend_from_slice(b",\"cache_prompt\":");
        serde_json::to_writer(&mut out, &self.cache_prompt)?;
        out.push(b'}');
        Ok((head, out))
    }
}

/// Non-streaming response body (also the shape each SSE chunk has).
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionResponse {
    #[serde(default)]
    pub choices: Vec<Choice>,
    #[serde(default)]
    pub usage: Option<Usage>,
    /// llama-server native field, when present at top level.
    #[serde(default)]
    pub stopping_word: Option<String>,
    /// llama-server's `timings` (its prompt-cache figure when `usage` has none).
    #[serde(default)]
    pub timings: Option<Timings>,
}

/// The part of llama-server's `timings` object the proxy reads.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct Timings {
    /// Prompt tokens reused from the slot's KV cache.
    #[serde(default)]
    pub cache_n: Option<u64>,
}

/// One completion choice.
#[derive(Debug, Clone, Deserialize)]
pub struct Choice {
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// vLLM: the stop string (or stop token id) that ended generation.
    #[serde(default)]
    pub stop_reason: Option<Value>,
    /// SGLang: the matched stop string or token id.
    #[serde(default)]
    pub matched_stop: Option<Value>,
    /// llama-server, when echoed per choice.
    #[serde(default)]
    pub stopping_word: Option<String>,
}

impl Choice {
    /// The stop string the backend reports as matched, whichever field carries it.
    /// Token ids are rendered as decimal strings; empty strings count as none.
    pub fn matched_stop(&self) -> Option<String> {
        let from_value = |v: &Option<Value>| match v {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        from_value(&self.stop_reason)
            .or_else(|| from_value(&self.matched_stop))
            .or_else(|| self.stopping_word.clone().filter(|s| !s.is_empty()))
    }
}

/// Token counts as the backend reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
    /// OpenAI's `prompt_tokens_details` (vLLM with `--enable-prompt-tokens-details`, SGLang,
    /// llama-server); absent when the backend reports nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

impl Usage {
    /// Prompt tokens the backend served from its prefix cache, when it says.
    pub fn cached_tokens(&self) -> Option<u64> {
        self.prompt_tokens_details.and_then(|d| d.cached_tokens)
    }
}

/// `usage.prompt_tokens_details`: only the cache figure is kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens reused from the prefix cache (`null` in some vLLM versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    proptest::proptest! {
        #[test]
        fn to_json_is_what_serde_json_writes(
            prompt in "(\\PC|[\\x00-\\x1f\"\\\\])*",
            temperature in proptest::option::of(-1e3f64..1e3),
            top_p in proptest::option::of(proptest::num::f64::ANY),
            seed in proptest::option::of(proptest::num::i64::ANY),
            stream in proptest::bool::ANY,
        ) {
            let request = CompletionRequest {
                model: "m\"1".into(),
                prompt: &prompt,
                max_tokens: 512,
                temperature,
                top_p,
                seed,
                stop: vec!["</action>".into(), "\n<obs".into()],
                stream,
                cache_prompt: true,
            };
            proptest::prop_assert_eq!(request.to_json().unwrap(), serde_json::to_vec(&request).unwrap());
        }
    }

    fn choice(v: Value) -> Choice {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn matched_stop_from_each_backend() {
        let vllm =
            choice(json!({"text": "x", "finish_reason": "stop", "stop_reason": "<observation>"}));
        assert_eq!(vllm.matched_stop().as_deref(), Some("<observation>"));
        let vllm_eos = choice(json!({"text": "x", "finish_reason": "stop", "stop_reason": null}));
        assert_eq!(vllm_eos.matched_stop(), None);
        let sglang =
            choice(json!({"text": "x", "finish_reason": "stop", "matched_stop": "\n## Thinking"}));
        assert_eq!(sglang.matched_stop().as_deref(), Some("\n## Thinking"));
        let token = choice(json!({"text": "x", "finish_reason": "stop", "matched_stop": 106}));
        assert_eq!(token.matched_stop().as_deref(), Some("106"));
        let llama = choice(json!({"text": "x", "finish_reason": "stop", "stopping_word": ""}));
        assert_eq!(llama.matched_stop(), None);
    }
}
