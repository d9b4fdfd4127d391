//! `POST {base}/completions` client with timeouts and bounded retries.

use std::time::Duration;

use tokio::sync::OnceCell;

use super::{BackendCompletion, GenerationParams};
use crate::error::ProxyError;
use crate::openai::completions::{CompletionRequest, CompletionResponse};

/// First retry delay; doubled on each further retry.
const BACKOFF_START: Duration = Duration::from_millis(250);

/// Client for one OpenAI-compatible completions backend.
#[derive(Debug)]
pub struct OpenAiCompletions {
    client: reqwest::Client,
    base: String,
    model: Option<String>,
    api_key: Option<String>,
    timeout_s: u64,
    retries: u32,
    discovered: OnceCell<String>,
    /// The context length the backend reports (`None`: it reports none); set once a
    /// discovery request got an answer.
    context_length: OnceCell<Option<u32>>,
    /// Cleared when `POST /tokenize` turns out not to exist.
    tokenize_works: std::sync::atomic::AtomicBool,
}

impl OpenAiCompletions {
    /// `base` is the URL including `/v1`, without a trailing slash.
    pub fn new(
        base: String,
        model: Option<String>,
        api_key: Option<String>,
        timeout_s: u64,
        retries: u32,
    ) -> Result<Self, ProxyError> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(timeout_s))
            .build()
            .map_err(|e| ProxyError::Internal(format!("building HTTP client: {e}")))?;
        Ok(Self {
            client,
            base,
            model,
            api_key,
            timeout_s,
            retries,
            discovered: OnceCell::new(),
            context_length: OnceCell::new(),
            tokenize_works: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// The server root: `base` without its trailing `/v1`.
    fn root(&self) -> &str {
        self.base.strip_suffix("/v1").unwrap_or(&self.base)
    }

    async fn get_json(&self, url: &str) -> Result<Option<serde_json::Value>, ()> {
        let mut req = self.client.get(url).timeout(Duration::from_secs(10));
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key);
        }
        let resp = req.send().await.map_err(|_| ())?;
        if !resp.status().is_success() {
            return Ok(None);
        }
        Ok(resp.json().await.ok())
    }

    /// The context length the backend reports, tokens: `max_model_len` of the first model in
    /// `GET {base}/models` (vLLM, SGLang), `n_ctx` in `GET {root}/props` (llama-server, per
    /// slot), `max_total_tokens` in `GET {root}/info` (TGI). Cached once the backend answered;
    /// `None` when it reports none or cannot be reached.
    pub async fn context_length(&self) -> Option<u32> {
        let as_u32 = |v: Option<&serde_json::Value>| {
            v.and_then(serde_json::Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n > 0)
        };
        self.context_length
            .get_or_try_init(|| async {
                let models = self.get_json(&format!("{}/models", self.base)).await?;
                if let Some(n) = as_u32(
                    models
                        .as_ref()
                        .and_then(|m| m.pointer("/data/0/max_model_len")),
                ) {
                    return Ok(Some(n));
                }
                let props = self.get_json(&format!("{}/props", self.root())).await?;
                let props = props.as_ref();
                if let Some(n) = as_u32(
                    props
                        .and_then(|p| p.pointer("/default_generation_settings/n_ctx"))
                        .or_else(|| props.and_then(|p| p.get("n_ctx"))),
                ) {
                    return Ok(Some(n));
                }
                let info = self.get_json(&format!("{}/info", self.root())).await?;
                Ok::<_, ()>(as_u32(
                    info.as_ref().and_then(|i| i.get("max_total_tokens")),
                ))
            })
            .await
            .ok()
            .copied()
            .flatten()
    }

    /// Tokens of `prompt` by the backend's `POST {root}/tokenize` (vLLM: `prompt` → `count`;
    /// llama-server: `content` → `tokens`; TGI: `inputs` → a list); `None` when the backend
    /// has no such endpoint (remembered) or the call fails.
    pub async fn tokenize(&self, prompt: &str, request_model: Option<&str>) -> Option<usize> {
        use std::sync::atomic::Ordering;
        if !self.tokenize_works.load(Ordering::Relaxed) {
            return None;
        }
        let model = match self.resolved_model().await {
            Some(m) => m,
            None => request_model.unwrap_or("default").to_string(),
        };
        let body = serde_json::json!({
            "model": model,
            "prompt": prompt,
            "content": prompt,
            "inputs": prompt,
            "add_special_tokens": true,
        });
        let mut req = self
            .client
            .post(format!("{}/tokenize", self.root()))
            .json(&body);
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key);
        }
        let resp = req.send().await.ok()?;
        if matches!(resp.status().as_u16(), 404 | 405 | 501) {
            self.tokenize_works.store(false, Ordering::Relaxed);
            tracing::info!("backend has no /tokenize; prompt tokens are estimated");
            return None;
        }
        let value: serde_json::Value = resp.json().await.ok()?;
        value
            .get("count")
            .and_then(serde_json::Value::as_u64)
            .map(|n| n as usize)
            .or_else(|| value.get("tokens").and_then(|t| t.as_array()).map(Vec::len))
            .or_else(|| value.as_array().map(Vec::len))
    }

    /// Configured model, else the first model listed by `GET {base}/models` (cached once found).
    pub async fn resolved_model(&self) -> Option<String> {
        if let Some(m) = &self.model {
            return Some(m.clone());
        }
        self.discovered
            .get_or_try_init(|| async {
                let mut req = self.client.get(format!("{}/models", self.base));
                if let Some(key) = &self.api_key {
                    req = req.bearer_auth(key);
                }
                let body: serde_json::Value = req
                    .timeout(Duration::from_secs(10))
                    .send()
                    .await
                    .map_err(|_| ())?
                    .json()
                    .await
                    .map_err(|_| ())?;
                body.pointer("/data/0/id")
                    .and_then(|v| v.as_str())
                    .map(str::to_string)
                    .ok_or(())
            })
            .await
            .ok()
            .cloned()
    }

    /// See [`super::Backend::complete`].
    pub async fn complete(
        &self,
        prompt: &str,
        params: &GenerationParams,
        stop: &[&str],
        request_model: Option<&str>,
    ) -> Result<BackendCompletion, ProxyError> {
        let model = match self.resolved_model().await {
            Some(m) => m,
            None => request_model.unwrap_or("default").to_string(),
        };
        let body = CompletionRequest {
            model: model.clone(),
            prompt: prompt.to_string(),
            max_tokens: params.max_tokens,
            temperature: params.temperature,
            top_p: params.top_p,
            seed: params.seed,
            stop: stop.iter().map(|s| s.to_string()).collect(),
            stream: false,
            cache_prompt: true,
        };
        let (text, attempts) = self.post("completions", &body).await?;
        decode(&text, model, attempts)
    }

    /// `POST {base}/chat/completions` with `body` as given (passthrough mode, recording
    /// reference trajectories with an instruction-tuned model). Returns the response JSON and
    /// the attempts made.
    pub async fn chat(
        &self,
        body: &serde_json::Value,
    ) -> Result<(serde_json::Value, u32), ProxyError> {
        let (text, attempts) = self.post("chat/completions", body).await?;
        let value = serde_json::from_str(&text).map_err(|e| {
            ProxyError::Backend(format!(
                "response is not JSON ({e}): {}",
                truncate(&text, 200)
            ))
        })?;
        Ok((value, attempts))
    }

    /// POSTs JSON to `{base}/{path}` with bounded retries on connect errors and 5xx; returns
    /// the body of the first success and the attempts made.
    async fn post<T: serde::Serialize + ?Sized>(
        &self,
        path: &str,
        body: &T,
    ) -> Result<(String, u32), ProxyError> {
        let url = format!("{}/{path}", self.base);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut req = self.client.post(&url).json(body);
            if let Some(key) = &self.api_key {
                req = req.bearer_auth(key);
            }
            let retryable = match req.send().await {
                Err(e) if e.is_timeout() => return Err(ProxyError::BackendTimeout(self.timeout_s)),
                Err(e) => ProxyError::BackendUnavailable(format!("{url}: {}", error_chain(&e))),
                Ok(resp) => {
                    let status = resp.status();
                    let text = match resp.text().await {
                        Ok(t) => t,
                        Err(e) if e.is_timeout() => {
                            return Err(ProxyError::BackendTimeout(self.timeout_s))
                        }
                        Err(e) => {
                            return Err(ProxyError::Backend(format!("reading response: {e}")))
                        }
                    };
                    if status.is_success() {
                        return Ok((text, attempt));
                    }
                    let message = backend_message(&text);
                    if status.is_server_error() {
                        ProxyError::BackendUnavailable(format!("HTTP {status}: {message}"))
                    } else if is_context_error(&message) {
                        return Err(ProxyError::ContextLengthExceeded(format!(
                            "prompt does not fit the backend's context window: {message}"
                        )));
                    } else {
                        return Err(ProxyError::Backend(format!("HTTP {status}: {message}")));
                    }
                }
            };
            if attempt > self.retries {
                return Err(retryable);
            }
            let delay = BACKOFF_START * 2u32.saturating_pow(attempt - 1);
            tracing::warn!(attempt, error = %retryable, delay_ms = delay.as_millis() as u64, "backend call failed, retrying");
            tokio::time::sleep(delay).await;
        }
    }
}

fn decode(text: &str, model: String, attempts: u32) -> Result<BackendCompletion, ProxyError> {
    let response: CompletionResponse = serde_json::from_str(text).map_err(|e| {
        ProxyError::Backend(format!(
            "response is not an OpenAI completions object ({e}): {}",
            truncate(text, 200)
        ))
    })?;
    let Some(choice) = response.choices.first() else {
        return Err(ProxyError::Backend("response has no choices".into()));
    };
    let matched_stop = choice
        .matched_stop()
        .or_else(|| response.stopping_word.clone().filter(|s| !s.is_empty()));
    Ok(BackendCompletion {
        text: choice.text.clone(),
        finish_reason: choice.finish_reason.clone(),
        matched_stop,
        usage: response.usage,
        model,
        attempts,
    })
}

/// The `error.message` of an OpenAI-style error body, or the body itself (shortened).
fn backend_message(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("message"))
                .or_else(|| v.get("error"))
                .and_then(|m| m.as_str().map(str::to_string))
        })
        .unwrap_or_else(|| truncate(text, 500).to_string())
}

/// Context-overflow messages of vLLM, SGLang, llama-server and TGI.
fn is_context_error(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "context length",
        "context size",
        "context window",
        "exceed_context",
        "maximum context",
        "longer than the model",
        "must be <=",
    ]
    .iter()
    .any(|needle| m.contains(needle))
}

fn truncate(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_errors_of_each_backend() {
        for m in [
            "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens",
            "the request exceeds the available context size, try increasing it",
            "The input (5000 tokens) is longer than the model's context length (4096 tokens).",
            "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096",
        ] {
            assert!(is_context_error(m), "{m}");
        }
        assert!(!is_context_error("model not found"));
    }

    #[test]
    fn error_message_extraction() {
        assert_eq!(
            backend_message(r#"{"error":{"message":"boom","code":400}}"#),
            "boom"
        );
        assert_eq!(
            backend_message(r#"{"object":"error","message":"bad"}"#),
            "bad"
        );
        assert_eq!(backend_message("plain"), "plain");
    }
}
