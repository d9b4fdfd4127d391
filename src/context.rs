//! Context window: the prompt plus the completion's `max_tokens` must fit the backend's
//! context length (docs/architecture.md "Append-only rendering").
//!
//! Rule (deterministic, so every replica and every later turn makes the same choice):
//! 1. The context length is `--context-length`, else what the backend reports (vLLM and
//!    SGLang `max_model_len` in `GET /v1/models`, llama-server `n_ctx` in `GET /props`, TGI
//!    `max_total_tokens` in `GET /info`); unknown means no check (the backend will say).
//! 2. A prompt of at most `context_length - max_tokens` bytes always fits (a token is at least
//!    one byte), so most requests are never counted. Longer ones are counted with the
//!    `--tokenizer` file, else the backend's `POST /tokenize` (vLLM, llama-server, TGI), else
//!    the conservative estimate of one token per [`ESTIMATE_BYTES_PER_TOKEN`] bytes.
//! 3. If it does not fit, the observations at least [`ELIDE_MIN_BYTES`] long of the live
//!    steps before a cut are replaced by a short marker keeping their first and last lines.
//!    The cut moves in blocks of [`ELIDE_BLOCK_STEPS`] steps: it is the smallest multiple of
//!    the block, up to the latest step, that makes the prompt fit; the latest step's
//!    observation is never elided. As the history grows the cut only moves forward, and a
//!    block frees room for several turns, so prompts stay append-only (prefix-cache friendly)
//!    between the turns where the cut moves; those turns are logged in the trace's `context`
//!    field. When the window cannot hold a block of recent steps, the cut falls back to the
//!    latest step and moves on every turn (each such turn re-reads the prompt from the newly
//!    elided observation on).
//! 4. If even eliding all of them does not fit, the request fails with HTTP 400
//!    `context_length_exceeded` worded as OpenAI words it ("This model's maximum context
//!    length is …"), which LiteLLM maps to `ContextWindowExceededError` and scaffolds handle
//!    as for any model (SWE-agent and OpenHands end or condense the history).

use std::path::Path;
#[cfg(feature = "tokenizer")]
use std::sync::Arc;

use serde::Serialize;

use crate::backend::Backend;
use crate::conversation::Conversation;
use crate::error::ProxyError;

/// Observations shorter than this (bytes) are never elided.
pub const ELIDE_MIN_BYTES: usize = 1024;
/// The elision cut moves in blocks of this many steps, so that one move frees room for
/// several turns instead of breaking the prompt's prefix on every turn.
pub const ELIDE_BLOCK_STEPS: usize = 10;
/// Lines kept from the start and from the end of an elided observation.
pub const KEEP_LINES: usize = 3;
/// A kept line is cut to this many bytes (at a character boundary).
const KEEP_LINE_BYTES: usize = 200;
/// Bytes per token assumed when nothing can count tokens: a conservative estimate (code and
/// English run at 3–4 bytes per token in common tokenizers), so the estimate errs towards
/// eliding early rather than overflowing.
pub const ESTIMATE_BYTES_PER_TOKEN: usize = 2;

/// How a prompt's tokens were counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CountedBy {
    /// Prompt bytes: an upper bound, enough to show the prompt fits.
    Bytes,
    /// The `--tokenizer` file.
    Tokenizer,
    /// The backend's `/tokenize` endpoint.
    Backend,
    /// [`ESTIMATE_BYTES_PER_TOKEN`].
    Estimate,
}

/// What the context check did (the trace's `context` field).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ContextRecord {
    /// The backend's context length, tokens.
    pub context_length: u32,
    /// Prompt tokens as counted (bytes when the byte bound sufficed).
    pub prompt_tokens: usize,
    pub counted_by: CountedBy,
    /// The cut: observations of steps before this index are elided when long (0: none).
    pub elided_before_step: usize,
    /// Observations elided (the long ones before the cut).
    pub elided_observations: usize,
    /// Bytes removed from them.
    pub elided_bytes: usize,
}

/// Counts a prompt's tokens; `None` when the counter cannot (fall back to the estimate).
pub trait CountTokens {
    /// Tokens of `prompt`, and how they were counted.
    fn count(&self, prompt: &str) -> impl std::future::Future<Output = (usize, CountedBy)> + Send;
}

/// The estimate used when nothing better is available.
pub fn estimate_tokens(prompt: &str) -> usize {
    prompt.len().div_ceil(ESTIMATE_BYTES_PER_TOKEN)
}

/// `text` with its middle replaced by a marker: the first and last [`KEEP_LINES`] lines
/// (each cut to 200 bytes) around `[… N lines (B bytes) elided to fit the model's context
/// window …]`.
pub fn elide(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let cut = |l: &str| -> String {
        if l.len() <= KEEP_LINE_BYTES {
            return l.to_string();
        }
        let mut end = KEEP_LINE_BYTES;
        while !l.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &l[..end])
    };
    let (head, tail) = if lines.len() > 2 * KEEP_LINES {
        (&lines[..KEEP_LINES], &lines[lines.len() - KEEP_LINES..])
    } else {
        (&lines[..lines.len().min(1)], &lines[..0])
    };
    let kept: usize = head.len() + tail.len();
    let mut out: Vec<String> = head.iter().map(|l| cut(l)).collect();
    out.push(format!(
        "[… {} lines ({} bytes) elided to fit the model's context window …]",
        lines.len() - kept,
        text.len()
    ));
    out.extend(tail.iter().map(|l| cut(l)));
    out.join("\n")
}

/// Indexes of the live steps whose observations may be elided, oldest first.
pub fn candidates(conversation: &Conversation) -> Vec<usize> {
    let last = conversation.steps.len().saturating_sub(1);
    conversation
        .steps
        .iter()
        .enumerate()
        .filter(|(i, s)| {
            *i < last
                && s.nudge.is_none()
                && s.observation
                    .as_ref()
                    .is_some_and(|o| o.len() >= ELIDE_MIN_BYTES)
        })
        .map(|(i, _)| i)
        .collect()
}

/// The conversation with the candidates before step index `cut` elided: the conversation,
/// how many were elided and the bytes removed.
pub fn with_elided(
    conversation: &Conversation,
    candidates: &[usize],
    cut: usize,
) -> (Conversation, usize, usize) {
    let mut out = conversation.clone();
    let mut removed = 0;
    let mut count = 0;
    for &i in candidates.iter().take_while(|i| **i < cut) {
        if let Some(obs) = out.steps[i].observation.as_mut() {
            let short = elide(obs);
            removed += obs.len().saturating_sub(short.len());
            *obs = short.into();
            count += 1;
        }
    }
    (out, count, removed)
}

/// The 400 for a prompt that cannot fit, in OpenAI's wording.
pub fn too_long(context_length: u32, prompt_tokens: usize, max_tokens: u32) -> ProxyError {
    ProxyError::ContextLengthExceeded(crate::error::too_long_message(
        context_length,
        prompt_tokens,
        max_tokens,
    ))
}

/// Fits `conversation` (rendered by `render` as `prompt`) into `context_length` tokens with
/// room for `max_tokens`: returns the elided conversation and its prompt when elision was
/// needed (`None`: `prompt` fits as it is), and the record for the trace.
///
/// Errors: [`ProxyError::ContextLengthExceeded`] when nothing can make it fit; render errors.
pub async fn fit(
    conversation: &Conversation,
    prompt: &str,
    render: impl Fn(&Conversation) -> Result<String, ProxyError>,
    counter: &impl CountTokens,
    context_length: u32,
    max_tokens: u32,
) -> Result<(Option<(Conversation, String)>, ContextRecord), ProxyError> {
    let budget = (context_length as usize).saturating_sub(max_tokens as usize);
    let record = |tokens, counted_by| ContextRecord {
        context_length,
        prompt_tokens: tokens,
        counted_by,
        elided_before_step: 0,
        elided_observations: 0,
        elided_bytes: 0,
    };
    if prompt.len() <= budget {
        return Ok((None, record(prompt.len(), CountedBy::Bytes)));
    }
    let (tokens, counted_by) = counter.count(prompt).await;
    if tokens <= budget {
        return Ok((None, record(tokens, counted_by)));
    }
    let candidates = candidates(conversation);
    // Cuts tried: multiples of the block up to the latest step (a cut past it would elide
    // one more observation on each of the following turns), then the latest step itself as
    // a last resort. Tokens only fall as the cut moves forward, so a binary search finds
    // the smallest cut that fits.
    let latest = conversation.steps.len().saturating_sub(1);
    let mut cuts: Vec<usize> = (1..=latest / ELIDE_BLOCK_STEPS)
        .map(|k| k * ELIDE_BLOCK_STEPS)
        .collect();
    if cuts.last() != Some(&latest) && latest > 0 {
        cuts.push(latest);
    }
    let attempt = |cut: usize| {
        let (elided, count, removed) = with_elided(conversation, &candidates, cut);
        let text = render(&elided);
        async move {
            let text = text?;
            let (t, by) = counter.count(&text).await;
            Ok::<_, ProxyError>((elided, text, t, by, cut, count, removed))
        }
    };
    if candidates.is_empty() || cuts.is_empty() {
        return Err(too_long(context_length, tokens, max_tokens));
    }
    let mut best = attempt(cuts[cuts.len() - 1]).await?;
    if best.2 > budget {
        return Err(too_long(context_length, tokens, max_tokens));
    }
    // `lo` is an index into `cuts` known not to fit (or -1 as `None`), `hi` one that fits.
    let (mut lo, mut hi): (Option<usize>, usize) = (None, cuts.len() - 1);
    while hi - lo.map_or(0, |l| l + 1) > 0 {
        let mid = lo.map_or(0, |l| l + 1) + (hi - lo.map_or(0, |l| l + 1)) / 2;
        let tried = attempt(cuts[mid]).await?;
        if tried.2 <= budget {
            hi = mid;
            best = tried;
        } else {
            lo = Some(mid);
        }
    }
    let (elided, text, t, by, cut, count, removed) = best;
    Ok((
        Some((elided, text)),
        ContextRecord {
            context_length,
            prompt_tokens: t,
            counted_by: by,
            elided_before_step: cut,
            elided_observations: count,
            elided_bytes: removed,
        },
    ))
}

/// A `tokenizer.json` loaded with the Hugging Face `tokenizers` crate (cargo feature
/// `tokenizer`, on by default).
#[derive(Clone)]
pub struct LocalTokenizer {
    #[cfg(feature = "tokenizer")]
    inner: Arc<tokenizers::Tokenizer>,
}

impl std::fmt::Debug for LocalTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LocalTokenizer")
    }
}

impl LocalTokenizer {
    /// Loads `tokenizer.json`.
    ///
    /// Errors: the file cannot be read or parsed, or the binary was built without the
    /// `tokenizer` feature.
    pub fn load(path: &Path) -> Result<Self, String> {
        #[cfg(feature = "tokenizer")]
        {
            tokenizers::Tokenizer::from_file(path)
                .map(|t| Self { inner: Arc::new(t) })
                .map_err(|e| format!("loading tokenizer {}: {e}", path.display()))
        }
        #[cfg(not(feature = "tokenizer"))]
        {
            Err(format!(
                "--tokenizer {}: this binary was built without the `tokenizer` feature",
                path.display()
            ))
        }
    }

    /// Tokens of `text` (special tokens added as the model's template says).
    pub fn count(&self, text: &str) -> Option<usize> {
        #[cfg(feature = "tokenizer")]
        {
            self.inner
                .encode(text, true)
                .ok()
                .map(|e| e.get_ids().len())
        }
        #[cfg(not(feature = "tokenizer"))]
        {
            let _ = text;
            None
        }
    }
}

/// Where the context check gets its numbers (serve settings).
#[derive(Debug, Clone, Default)]
pub struct ContextSettings {
    /// `--context-length`; `None`: ask the backend.
    pub length: Option<u32>,
    /// `--tokenizer`.
    pub tokenizer: Option<LocalTokenizer>,
}

/// Counts with the tokenizer file, else the backend's `/tokenize`, else the estimate.
pub struct TokenCounter<'a> {
    pub tokenizer: Option<&'a LocalTokenizer>,
    pub backend: &'a Backend,
    /// The request's `model`, for backends that need one in `/tokenize`.
    pub model: Option<&'a str>,
    /// Where the time waiting on `/tokenize` is added.
    pub clock: Option<&'a crate::backend::RequestClock>,
}

impl CountTokens for TokenCounter<'_> {
    async fn count(&self, prompt: &str) -> (usize, CountedBy) {
        if let Some(tokenizer) = self.tokenizer {
            let tokenizer = tokenizer.clone();
            let text = prompt.to_string();
            // Encoding a long prompt takes tens of milliseconds: off the async workers.
            if let Ok(Some(n)) = tokio::task::spawn_blocking(move || tokenizer.count(&text)).await {
                return (n, CountedBy::Tokenizer);
            }
        }
        let asked = std::time::Instant::now();
        let counted = self.backend.tokenize(prompt, self.model).await;
        if let Some(clock) = self.clock {
            clock.add_backend(asked.elapsed());
        }
        if let Some(n) = counted {
            return (n, CountedBy::Backend);
        }
        (estimate_tokens(prompt), CountedBy::Estimate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::Step;

    /// One token per 4 bytes, as a stand-in tokenizer.
    struct Quarter;

    impl CountTokens for Quarter {
        async fn count(&self, prompt: &str) -> (usize, CountedBy) {
            (prompt.len().div_ceil(4), CountedBy::Tokenizer)
        }
    }

    fn conversation(observations: &[usize]) -> Conversation {
        Conversation {
            task: "Fix the bug.".into(),
            steps: observations
                .iter()
                .enumerate()
                .map(|(i, n)| Step {
                    thought: format!("step {i}").into(),
                    observation: Some(
                        (0..*n / 16)
                            .map(|l| format!("line {l:03} of {i:03}\n"))
                            .collect::<String>()
                            .into(),
                    ),
                    turn: i,
                    ..Step::default()
                })
                .collect(),
            ..Conversation::default()
        }
    }

    fn render(c: &Conversation) -> Result<String, ProxyError> {
        let mut out = c.task.clone();
        for s in &c.steps {
            out.push_str(&s.thought);
            out.push_str(s.observation.as_deref().unwrap_or(""));
        }
        Ok(out)
    }

    async fn run(
        c: &Conversation,
        length: u32,
        max_tokens: u32,
    ) -> Result<ContextRecord, ProxyError> {
        let prompt = render(c)?;
        fit(c, &prompt, render, &Quarter, length, max_tokens)
            .await
            .map(|(_, r)| r)
    }

    #[tokio::test]
    async fn short_prompts_are_not_counted_and_long_ones_are_cut_a_block_at_a_time() {
        let c = conversation(&[2048; 25]);
        let fits = run(&c, 100_000, 1000).await.unwrap();
        assert_eq!(fits.counted_by, CountedBy::Bytes);
        assert_eq!(fits.elided_observations, 0);
        // About 12,800 tokens at 4 bytes per token.
        let r = run(&c, 12_000, 1000).await.unwrap();
        assert_eq!(r.counted_by, CountedBy::Tokenizer);
        assert!(r.prompt_tokens <= 11_000, "{r:?}");
        assert_eq!(
            (r.elided_before_step, r.elided_observations),
            (10, 10),
            "{r:?}"
        );
        let tighter = run(&c, 7000, 1000).await.unwrap();
        assert_eq!(
            (tighter.elided_before_step, tighter.elided_observations),
            (20, 20)
        );
        // Past the last block the cut is the latest step, whose observation stays whole.
        let tightest = run(&c, 2600, 1000).await.unwrap();
        assert_eq!(
            (tightest.elided_before_step, tightest.elided_observations),
            (24, 24)
        );
    }

    #[tokio::test]
    async fn the_latest_observation_is_kept_and_too_long_is_openai_worded() {
        let c = conversation(&[2048, 8192]);
        let err = run(&c, 1500, 1000).await.unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(
                "This model's maximum context length is 1500 tokens. However, you requested"
            ),
            "{text}"
        );
        assert_eq!(err.body().error.code, "context_length_exceeded");
    }

    #[tokio::test]
    async fn elision_is_deterministic_and_grows_with_the_history() {
        let mut history = vec![2048; 6];
        let mut previous = 0;
        for _ in 0..6 {
            history.push(2048);
            let c = conversation(&history);
            let a = run(&c, 6000, 500).await.unwrap();
            let b = run(&c, 6000, 500).await.unwrap();
            assert_eq!(a, b);
            assert!(a.elided_observations >= previous);
            previous = a.elided_observations;
        }
        assert!(previous > 0);
    }

    #[test]
    fn elided_text_keeps_head_and_tail_lines() {
        let text: String = (0..100).map(|i| format!("row {i}\n")).collect();
        let short = elide(&text);
        assert!(short.starts_with("row 0\nrow 1\nrow 2\n[… 94 lines"));
        assert!(short.ends_with("row 97\nrow 98\nrow 99"));
        assert!(short.len() < 120);
    }
}
