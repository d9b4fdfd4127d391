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
        })
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
