//! asap-proxy's own trace logs (proxy and passthrough mode), read through the typed trace
//! schema ([`crate::trace::read::TraceReader`], docs/trace-format.md).

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::*;
use crate::trace::read::{Body, ReadError, TraceReader};
use crate::trace::{StepDecision, StepRecord};

// ---------------------------------------------------------------------------------------------
// asap-proxy traces

/// Whether an input's first JSON value is a trace record: a `type` of the schema, with `data`
/// (versioned, or the unversioned first layout).
pub(super) fn is_trace_record(v: &Value) -> bool {
    #[derive(Deserialize)]
    struct Envelope {
        r#type: String,
        #[serde(rename = "data")]
        _data: IgnoredAny,
    }
    Envelope::deserialize(v).is_ok_and(|e| {
        matches!(
            e.r#type.as_str(),
            "session" | "step" | "side_call" | "nudge" | "terminate"
        )
    })
}

/// One trajectory from a trace file's bytes: steps from the `step` records (side calls are
/// not steps of the trajectory), the task from the session record.
///
/// Errors: a record of a newer schema version, or a `step`/`side_call` record whose prompt
/// or request delta does not apply.
pub(super) fn read_trace(path: &Path, bytes: &[u8], stem: &str) -> Result<Trajectory, BuildError> {
    let invalid = |e: ReadError| match e {
        ReadError::Io { path, source } => PrefixError::Read { path, source },
        ReadError::Invalid {
            path,
            line,
            message,
        } => PrefixError::Parse {
            path: path.display().to_string(),
            message: format!("line {line}: {message}"),
        },
    };
    let mut reader = TraceReader::from_bytes_with_unversioned(path, bytes).map_err(invalid)?;
    // The completion calls of the trajectory that carry a prompt, in file order.
    let mut steps: Vec<StepRecord> = Vec::new();
    while let Some(record) = reader.next_record() {
        if let Body::Step(step) = record.map_err(invalid)?.body {
            if step.prompt.is_some() {
                steps.push(*step);
            }
        }
    }
    let session = reader.session();
    // The session record keeps the first user message (`task_text`); traces without it (the
    // unversioned first layout, version 1 before it was recorded) only have the rendered
    // `# Task` section of the first prompt, which mixes in the system text.
    let task_text = session
        .map(|s| s.task_text.as_str())
        .filter(|t| !t.trim().is_empty())
        .map(|t| statement_or_whole(t.to_string()))
        .or_else(|| {
            steps
                .first()
                .map(|s| statement_or_whole(task_section(delta(s))))
        })
        .unwrap_or_default();
    let model = steps
        .iter()
        .find_map(|s| s.completion.as_ref())
        .map(|c| c.model.clone());
    let date = reader
        .session_time_ms()
        .filter(|&ms| ms > 0)
        .map(date_of_unix_ms);
    let instance_id = session
        .and_then(|s| {
            s.instance_id
                .clone()
                .or_else(|| Some(s.task.clone()).filter(|t| !t.is_empty()))
        })
        .unwrap_or_else(|| stem.to_string());
    let mut out = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        match s.decision {
            StepDecision::Terminate => break,
            StepDecision::Nudge | StepDecision::Error => continue,
            StepDecision::Accept | StepDecision::Aborted | StepDecision::Unknown => {}
        }
        let Some(parse) = &s.parse else { continue };
        // A reply with several tool calls (passthrough `--tool-calls all`) is several steps
        // whose observations the next prompt interleaves: the cut ends before it, as a prefix
        // is one action a step.
        if !parse.more_actions.is_empty() {
            break;
        }
        let (tool, arguments) = match &parse.action {
            None => continue,
            Some(Action::Submit { .. }) => (SUBMIT_TAG.to_string(), Map::new()),
            Some(Action::Call { tag, arguments }) => (tag.clone(), (**arguments).clone()),
        };
        // The observation is in the prompt of the next call that is a later step.
        let observation = steps[i + 1..]
            .iter()
            .find(|n| n.step > s.step)
            .and_then(|n| last_observation(delta(n)))
            .unwrap_or_default();
        out.push(RawStep {
            thought: parse.thought.clone(),
            tool,
            arguments,
            observation,
        });
    }
    Ok(Trajectory {
        instance_id,
        task_text,
        model,
        date,
        steps: out,
    })
}

/// A step record's prompt delta (empty without a prompt).
fn delta(s: &StepRecord) -> &str {
    s.prompt.as_ref().map_or("", |p| p.delta.as_str())
}

/// The rendered document's text between `# Task` and `# Tools`.
pub(super) fn task_section(prompt: &str) -> String {
    let Some(start) = prompt
        .strip_prefix("# Task\n")
        .map(|_| "# Task\n".len())
        .or_else(|| prompt.find("\n# Task\n").map(|i| i + "\n# Task\n".len()))
    else {
        return String::new();
    };
    let rest = &prompt[start..];
    let end = rest.find("\n# Tools\n").unwrap_or(rest.len());
    rest[..end].trim().to_string()
}

/// The last `<observation>` block of a rendered prompt, with the rendering's escapes undone.
pub(super) fn last_observation(prompt: &str) -> Option<String> {
    let close = prompt.rfind("\n</observation>")?;
    let open_tag = "<observation>\n";
    let open = prompt[..close].rfind(open_tag)? + open_tag.len();
    let text = prompt.get(open..close)?;
    Some(unescape_observation(text))
}

pub(super) fn unescape_observation(text: &str) -> String {
    text.split('\n')
        .map(|line| {
            let trimmed = line.trim_start_matches([' ', '\t']);
            match trimmed.strip_prefix('\\') {
                Some(rest) if rest.starts_with("## Thinking") => {
                    format!("{}{rest}", &line[..line.len() - trimmed.len()])
                }
                _ => line.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        .replace("&lt;/observation", "</observation")
        .replace("&lt;observation", "<observation")
        .replace("&lt;submit", "<submit")
}
