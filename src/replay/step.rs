//! Replaying one `step` or `side_call` record: rebuild its request, render it again (nudged
//! attempts and side calls as the pipeline renders them, old observations elided with the
//! recorded cut), parse its completion again, and feed the session index as the pipeline does.

use std::path::Path;
use std::sync::Arc;

use super::{diff, Replayer};
use crate::config::PromptConfig;
use crate::context;
use crate::openai::chat::{AsapHeaders, ChatCompletionRequest};
use crate::pipeline::{self, Attempts, Prepared};
use crate::prefix::PrefixStore;
use crate::session::{NudgeKind, SessionId, SessionIndex};
use crate::side_call;
use crate::trace::read::{Record, TraceReader};
use crate::trace::StepRecord;
use crate::util::sha256_hex;

/// One file's settings and state.
pub(super) struct FileReplay<'a> {
    pub(super) path: &'a Path,
    /// The recorded format, profile (forced) and prefix K.
    pub(super) config: PromptConfig,
    /// The prefix store for the recorded K.
    pub(super) store: Arc<PrefixStore>,
    /// A passthrough session: prompts are checked, completions (chat replies) not parsed.
    pub(super) passthrough: bool,
    /// The recorded session id (the file's stem), under which turns are remembered.
    pub(super) session: SessionId,
    /// This file's index of turns answered without a tool call.
    pub(super) sessions: SessionIndex,
    /// The request of the last `step` record (for a `nudge` record that follows it).
    pub(super) current: Option<Attempts>,
    /// Nudged requests waiting for their next attempt: (step, attempt nudged, the request,
    /// the nudge). A `nudge` record directly follows its step record, but the next attempt
    /// need not: when one session has two requests in flight, the other request's record can
    /// land in between (records are written in the order their deltas were taken).
    pub(super) nudged: Vec<(u64, u64, Option<Attempts>, NudgeKind)>,
    /// The prefix id recorded in the session record, checked against the first step.
    pub(super) recorded_prefix: Option<String>,
    pub(super) prefix_checked: bool,
}

impl Replayer {
    /// Re-renders and re-parses one `step` or `side_call` record.
    ///
    /// Errors: the record cannot be replayed from what was stored (a message).
    pub(super) fn step(
        &self,
        file: &mut FileReplay<'_>,
        reader: &TraceReader,
        record: &Record,
    ) -> Result<Check, String> {
        let call = record.call().ok_or("not a completion call")?;
        let recorded_sha = call
            .prompt
            .as_ref()
            .map(|p| p.sha256.as_str())
            .filter(|sha| !sha.is_empty())
            .ok_or("the record has no prompt sha256")?;
        let attempt = call.attempt as u64;
        let side = record.kind() == "side_call";
        let cut = recorded_cut(call);
        let rendered = if side {
            Rendered::Prompt(side_call::prompt(&request(reader)?.0))
        } else if attempt == 0 {
            let (request, headers) = request(reader)?;
            let prepared = pipeline::prepare(
                &request,
                &headers,
                &self.profiles,
                &self.renderer,
                &file.config,
                &file.sessions,
                &file.store,
            )
            .map_err(|e| e.to_string())
            .and_then(|mut prepared| {
                self.elide(&file.config, &mut prepared, cut)?;
                Ok(prepared)
            });
            match prepared {
                Ok(prepared) => {
                    let prompt = prepared.prompt.to_string();
                    file.current = Some(Attempts::new(prepared));
                    Rendered::Prompt(prompt)
                }
                Err(e) => {
                    file.current = None;
                    Rendered::Failed(e)
                }
            }
        } else {
            let step = call.step as u64;
            let at = file
                .nudged
                .iter()
                .rposition(|(s, a, _, _)| *s == step && *a + 1 == attempt)
                .ok_or_else(|| format!("attempt {attempt} follows no nudge record"))?;
            let (_, _, current, kind) = file.nudged.remove(at);
            file.current = current;
            match file.current.as_mut() {
                // The first attempt already failed to render (reported there).
                None => Rendered::Failed("the request's first attempt did not render".into()),
                Some(current) => {
                    // As the pipeline's attempt machine does; then the context check again,
                    // on the conversation already elided for the earlier attempt.
                    current.push_nudge(kind);
                    let rendered = current
                        .render(&self.renderer, file.config.format)
                        .map_err(|e| e.to_string())
                        .and_then(|()| self.elide(&file.config, &mut current.prepared, cut));
                    match rendered {
                        Ok(()) => Rendered::Prompt(current.prepared.prompt.to_string()),
                        Err(e) => Rendered::Failed(e),
                    }
                }
            }
        };

        let mut check = Check::default();
        match &rendered {
            Rendered::Failed(e) => check.prompt = Some(format!("prompt not rendered: {e}")),
            Rendered::Prompt(prompt) => {
                let sha = sha256_hex(prompt.as_bytes());
                check.same = format!("prompt {}", &sha[..12]);
                if sha != recorded_sha {
                    check.prompt = Some(prompt_difference(reader.prompt(), prompt));
                }
            }
        }
        if side {
            return Ok(check);
        }
        let Some(current) = file.current.as_ref() else {
            return Ok(check);
        };
        if !file.prefix_checked {
            file.prefix_checked = true;
            let now = current.prepared.prefix.as_ref().map(|p| p.id.clone());
            if now != file.recorded_prefix {
                check.note = Some(format!(
                    "{}: note: recorded prefix {}, chosen now {} (pass the recorded --prefixes?)",
                    file.path.display(),
                    file.recorded_prefix.as_deref().unwrap_or("none"),
                    now.as_deref().unwrap_or("none"),
                ));
            }
        }
        if let (Some(completion), false) = (&call.completion, file.passthrough) {
            let (parsed, _) = pipeline::parse_completion(
                file.config.format,
                &completion.text,
                completion.finish_reason.as_deref(),
                completion.matched_stop.as_deref(),
                &current.prepared,
            );
            let replayed = diff::replayed_outcome(&parsed);
            let recorded = diff::recorded_outcome(call.parse.as_ref());
            if replayed != recorded {
                check.parse = Some(format!(
                    "parse differs: recorded {}, replayed {}",
                    diff::describe(&recorded),
                    diff::describe(&replayed)
                ));
            } else {
                check
                    .same
                    .push_str(&format!(", {}", diff::describe(&replayed)));
            }
        }
        // A turn answered without a tool call has no id to carry its session: the pipeline
        // remembers it by content and prompt, and so does the replay.
        if let Some(response) = &call.response {
            if response.tool_call.is_none() {
                let content = response.content.as_deref().unwrap_or_default();
                current.prepared.remember_turn(
                    &file.sessions,
                    content,
                    &file.session,
                    &current.nudges,
                );
            }
        }
        Ok(check)
    }

    /// Elides, as the pipeline's context check did, the long observations of the steps
    /// before `cut` ([`context::candidates`], [`context::with_elided`]) and renders the
    /// prompt again; nothing when `cut` is 0 (the prompt fitted).
    ///
    /// Errors: the elided conversation does not render.
    fn elide(
        &self,
        config: &PromptConfig,
        prepared: &mut Prepared,
        cut: usize,
    ) -> Result<(), String> {
        if cut == 0 {
            return Ok(());
        }
        let candidates = context::candidates(&prepared.conversation);
        let (conversation, _, _) = context::with_elided(&prepared.conversation, &candidates, cut);
        prepared.prompt = std::sync::Arc::new(
            self.renderer
                .render(config.format, &conversation, &prepared.tools)
                .map_err(|e| e.to_string())?,
        );
        prepared.conversation = conversation;
        Ok(())
    }
}

/// The context cut recorded in a step record (`context.elided_before_step`): the long
/// observations of the steps before it were elided; 0 (or no `context`) when none were.
fn recorded_cut(call: &StepRecord) -> usize {
    call.context.as_ref().map_or(0, |c| c.elided_before_step)
}

/// A re-rendered prompt, or why there is none.
pub(super) enum Rendered {
    Prompt(String),
    Failed(String),
}

/// What replaying one record found.
#[derive(Debug, Default)]
pub(super) struct Check {
    /// The prompt difference, if any.
    pub(super) prompt: Option<String>,
    /// The parse difference, if any.
    pub(super) parse: Option<String>,
    /// What matched (for `--verbose`).
    pub(super) same: String,
    /// A remark about the file, printed once.
    pub(super) note: Option<String>,
}

/// The request of the last record, as the server decoded it, and its headers.
fn request(reader: &TraceReader) -> Result<(ChatCompletionRequest, AsapHeaders), String> {
    let state = reader.request();
    if !state.is_known() {
        return Err("no request stored before this record".into());
    }
    let body = serde_json::to_vec(&state.body()).map_err(|e| e.to_string())?;
    let request = ChatCompletionRequest::from_slice(&body).map_err(|e| format!("request: {e}"))?;
    let headers = AsapHeaders {
        task: state.header("x-asap-task").map(str::to_string),
        run: state.header("x-asap-run").map(str::to_string),
    };
    Ok((request, headers))
}

/// `prompt differs at byte N: recorded "…" replayed "…"`.
fn prompt_difference(recorded: &str, replayed: &str) -> String {
    let at = diff::first_difference(recorded.as_bytes(), replayed.as_bytes()).unwrap_or(0);
    format!(
        "prompt differs at byte {at} (recorded {} bytes, replayed {}): recorded {} replayed {}",
        recorded.len(),
        replayed.len(),
        diff::context(recorded, at),
        diff::context(replayed, at)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_difference_names_the_offset_and_both_sides() {
        let line = prompt_difference("# Task\nFix it.\n", "# Task\nFix that.\n");
        assert!(line.starts_with("prompt differs at byte 11 "), "{line}");
        assert!(line.contains("recorded \"# Task\\nFix it.\\n\""), "{line}");
        assert!(
            line.contains("replayed \"# Task\\nFix that.\\n\""),
            "{line}"
        );
    }
}
