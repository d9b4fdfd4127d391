//! Conversation → one continuation document, through a minijinja template per format.
//!
//! The environment is built once with strict undefined behaviour, so a template that names a
//! missing variable fails at startup validation instead of rendering an empty string.
//! Rendering is deterministic and append-only (docs/architecture.md "Append-only rendering"): the prompt
//! of turn n+1 starts with the prompt of turn n minus the trailing cue ([`Format::cue`]).
//! The templates are embedded from `templates/`; `--templates DIR` replaces any of them with
//! `DIR/<format>.jinja` at start-up ([`Renderer::with_templates`]).

mod cache;
mod escape;
mod json;
mod markdown;
mod xml;

pub use cache::{HeldPrompt, PromptLineage, RenderCacheStats, RENDER_CACHE_MIB};
pub use json::CUE as JSON_CUE;

use std::sync::Arc;

use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;

use crate::conversation::Conversation;
use crate::profile::ResolvedProfile;
use crate::util::JsonFrames;

/// The cue of the default format (Markdown+XML): the model continues with its thought.
pub const CUE: &str = "## Thinking\n";

/// Interaction formats (the paper's ablation: Markdown+XML 33.0, XML 27.0, Markdown 21.7,
/// JSON 4.3 Pass@1 for one model). Markdown+XML is the default and the best.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// `## Thinking` Markdown for thoughts, XML tags for actions and observations.
    #[default]
    #[value(name = "markdown_xml", alias = "markdown-xml")]
    MarkdownXml,
    /// Everything in tags: `<step>`, `<thought>`, the action tag, `<observation>`.
    Xml,
    /// Headings and fenced code blocks only: the action is a block named after the tool.
    Markdown,
    /// One JSON object per line: `{"thought", "action": {"tool", "arguments"}, "observation"}`.
    Json,
}

/// Every format, for validation and tests.
pub const FORMATS: [Format; 4] = [
    Format::MarkdownXml,
    Format::Xml,
    Format::Markdown,
    Format::Json,
];

impl Format {
    /// The name used in flags, config files and traces.
    pub fn name(self) -> &'static str {
        match self {
            Self::MarkdownXml => "markdown_xml",
            Self::Xml => "xml",
            Self::Markdown => "markdown",
            Self::Json => "json",
        }
    }

    /// Template name under `templates/`.
    pub fn template(self) -> &'static str {
        match self {
            Self::MarkdownXml => "markdown_xml.jinja",
            Self::Xml => "xml.jinja",
            Self::Markdown => "markdown.jinja",
            Self::Json => "json.jinja",
        }
    }

    fn source(self) -> &'static str {
        match self {
            Self::MarkdownXml => include_str!("../../templates/markdown_xml.jinja"),
            Self::Xml => include_str!("../../templates/xml.jinja"),
            Self::Markdown => include_str!("../../templates/markdown.jinja"),
            Self::Json => include_str!("../../templates/json.jinja"),
        }
    }

    /// The text every prompt of this format ends with; the model continues with its thought.
    pub fn cue(self) -> &'static str {
        match self {
            Self::MarkdownXml | Self::Markdown => CUE,
            Self::Xml => "<step>\n<thought>\n",
            Self::Json => json::CUE,
        }
    }

    /// The stop sequences that end a step (named apart from [`Format::stops`], a request's
    /// whole list): the model's step is over where a line starts the environment's reply
    /// (or closes one it imagined, as small base models do right after a command) or a new
    /// step. They follow a complete action, so an action is not cut at its own closing tag
    /// (heredocs may contain `</bash>`); anchoring them at a line start keeps
    /// `grep '<observation>'` inside a command intact. Backends that ignore `stop` are handled
    /// by the parser, which drops everything after the first action.
    pub fn step_end_stops(self) -> &'static [&'static str] {
        match self {
            Self::MarkdownXml => &["\n<observation>", "\n</observation>", "\n## Thinking"],
            Self::Xml => &[
                "\n<observation>",
                "\n</observation>",
                "\n</step>",
                "\n<step>",
            ],
            Self::Markdown => &["\n### Observation", "\n## Thinking"],
            Self::Json => &json::STOP,
        }
    }

    /// The stop sequences of a request: [`Format::step_end_stops`] plus, in the tag formats, the closing
    /// tag of every tool that takes a body ([`Format::action_closers`]), so that generation
    /// ends at the end of the action instead of running on into prose, an imagined
    /// observation or invented prompt sections (what small base models do most). Backends
    /// drop a matched stop string from the text; the parser gets it back from
    /// [`crate::parse::with_closing_stop`]. A heredoc whose body holds the action's own
    /// closing tag at a line start is cut there (rare; the command then fails visibly).
    pub fn stops(self, tools: &ResolvedProfile) -> Vec<String> {
        let mut stops: Vec<String> = self
            .step_end_stops()
            .iter()
            .map(|s| s.to_string())
            .collect();
        stops.extend(self.action_closers(tools));
        stops
    }

    /// Closing tags of the tools that take a body (`</bash>`, `</str_replace_editor>`), in
    /// the tag formats (Markdown+XML, XML); none in Markdown and JSON, whose stops already
    /// follow the action. `<submit/>` closes itself and is not a stop.
    pub fn action_closers(self, tools: &ResolvedProfile) -> Vec<String> {
        match self {
            Self::MarkdownXml | Self::Xml => tools
                .tools
                .iter()
                .filter(|t| t.role != crate::profile::ToolRole::Submit)
                .map(|t| format!("</{}>", t.tag))
                .collect(),
            Self::Markdown | Self::Json => Vec::new(),
        }
    }

    /// An action written in this format.
    pub fn action(self, action: &crate::profile::Action, tools: &ResolvedProfile) -> String {
        match self {
            Self::MarkdownXml | Self::Xml => xml::action(action, tools),
            Self::Markdown => markdown::action(action, tools),
            Self::Json => json::action(action, tools),
        }
    }

    /// An example call of a tool in this format, for the tool documentation.
    pub fn usage(self, spec: &crate::profile::ToolSpec) -> String {
        match self {
            Self::MarkdownXml | Self::Xml => xml::usage(spec),
            Self::Markdown => markdown::usage(spec),
            Self::Json => json::usage(spec),
        }
    }
}

/// The override templates found in `dir`, by format (see [`Renderer::with_templates`]).
fn read_overrides(dir: &std::path::Path) -> Result<Vec<(Format, String)>, RenderError> {
    let fail = |template: &'static str, message: String| RenderError {
        template,
        source: minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, message),
    };
    if !dir.is_dir() {
        return Err(fail(
            "(override directory)",
            format!("{} is not a directory", dir.display()),
        ));
    }
    let mut out = Vec::new();
    for format in FORMATS {
        let path = dir.join(format.template());
        if !path.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(|e| {
            fail(
                format.template(),
                format!("reading {}: {e}", path.display()),
            )
        })?;
        tracing::info!(path = %path.display(), "template override loaded");
        out.push((format, text));
    }
    if out.is_empty() {
        let names: Vec<&str> = FORMATS.iter().map(|f| f.template()).collect();
        return Err(fail(
            "(override directory)",
            format!("{} holds none of {}", dir.display(), names.join(", ")),
        ));
    }
    Ok(out)
}

/// Render failure: a template error with its full chain.
#[derive(Debug, thiserror::Error)]
#[error("rendering template {template}: {source:#}")]
pub struct RenderError {
    template: &'static str,
    #[source]
    source: minijinja::Error,
}

/// Holds the compiled templates and the prompts rendered last ([`Renderer::render_shared`]).
#[derive(Debug)]
pub struct Renderer {
    env: Environment<'static>,
    /// `None`: every prompt is rendered whole (`--render-cache-mib 0`).
    cache: Option<cache::RenderCache>,
    /// Formats always rendered whole: those of override templates (`--templates`), whose
    /// step blocks may depend on each other or on the step count in ways no sample shows,
    /// and any embedded template that failed the start-up check (none should).
    whole: Vec<Format>,
    /// Per format (in [`FORMATS`] order), the length of the document with no header content
    /// and no steps, less its cue: where the step blocks of a [`Header::Bare`] render start.
    bare_header_len: Vec<usize>,
}

/// What a render writes before the steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Header {
    /// The conversation's system, task, tool documentation and example.
    Whole,
    /// The template's fixed text only: the render cache's extensions keep the step blocks
    /// and the cue, and writing the header (its Markdown quoting, the tools' documentation)
    /// cost more than a step's block.
    Bare,
}

#[derive(Serialize)]
struct ToolDoc {
    tag: String,
    description: String,
    params: Vec<ParamDoc>,
    usage: String,
}

#[derive(Serialize)]
struct ParamDoc {
    name: String,
    r#type: String,
    required: bool,
    r#enum: Vec<String>,
    description: String,
}

#[derive(Serialize)]
struct StepDoc {
    thought: String,
    action: Option<String>,
    observation: Option<String>,
}

impl Renderer {
    /// Compiles the built-in templates and checks each renders a sample conversation.
    pub fn new() -> Result<Self, RenderError> {
        Self::with_templates(None)
    }

    /// As [`Renderer::new`], with `<format>.jinja` files from `dir` (`markdown_xml.jinja`,
    /// `xml.jinja`, `markdown.jinja`, `json.jinja`) in place of the embedded templates of
    /// those formats; formats without a file there keep the embedded one. Overrides get the
    /// same environment (strict undefined variables, the `tojson_line` filter) and the same
    /// start-up check (each renders a sample and ends with its format's cue). Used by
    /// `--templates` to try a template change without rebuilding, and by `replay --check` to
    /// see which recorded prompts it would change.
    ///
    /// Errors: `dir` cannot be read or holds none of those files, a file cannot be read, a
    /// template does not compile or fails the check.
    pub fn with_templates(dir: Option<&std::path::Path>) -> Result<Self, RenderError> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(true);
        env.set_debug(true);
        // Continuation documents are not HTML: texts are neutralised by `escape`, never
        // entity-escaped wholesale (minijinja would for names that look like `.xml`).
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
        env.add_filter(
            "tojson_line",
            |v: minijinja::Value| -> Result<String, minijinja::Error> {
                serde_json::to_string(&v).map_err(|e| {
                    minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, e.to_string())
                })
            },
        );
        // The scaffold's own instructions are quoted as the task (a Markdown blockquote), so a
        // continuation model reads them as the brief it was given, not as text to go on with
        // (its example replies and fenced commands would otherwise be imitated).
        env.add_filter("blockquote", |text: String| -> String {
            text.lines()
                .map(|l| {
                    if l.is_empty() {
                        ">".to_string()
                    } else {
                        format!("> {l}")
                    }
                })
                .collect::<Vec<_>>()
                .join("\n")
        });
        let overrides = match dir {
            Some(dir) => read_overrides(dir)?,
            None => Vec::new(),
        };
        for format in FORMATS {
            let error = |source| RenderError {
                template: format.template(),
                source,
            };
            match overrides.iter().find(|(f, _)| *f == format) {
                Some((_, text)) => env
                    .add_template_owned(format.template(), text.clone())
                    .map_err(error)?,
                None => env
                    .add_template(format.template(), format.source())
                    .map_err(error)?,
            }
        }
        let mut renderer = Self {
            env,
            cache: None,
            whole: overrides.iter().map(|(format, _)| *format).collect(),
            bare_header_len: Vec::new(),
        };
        for format in FORMATS {
            let bare = renderer.render_document(
                format,
                &Conversation::default(),
                &[],
                &ResolvedProfile::empty(),
                Header::Bare,
            )?;
            renderer
                .bare_header_len
                .push(bare.len().saturating_sub(format.cue().len()));
        }
        for format in FORMATS {
            let prompt =
                renderer.render(format, &Conversation::default(), &ResolvedProfile::empty())?;
            if !prompt.ends_with(format.cue()) {
                return Err(RenderError {
                    template: format.template(),
                    source: minijinja::Error::new(
                        minijinja::ErrorKind::InvalidOperation,
                        "the document must end with the format's cue",
                    ),
                });
            }
        }
        for format in FORMATS {
            if renderer.whole.contains(&format) {
                continue;
            }
            if let Err(reason) = renderer.check_incremental(format) {
                tracing::error!(%reason, "rendering this format whole (a template bug)");
                renderer.whole.push(format);
            }
        }
        Ok(renderer.with_render_cache(RENDER_CACHE_MIB << 20))
    }

    /// Keeps up to `capacity` bytes of rendered prompts (0: none), so that a conversation that
    /// extends a rendered one renders only its new steps ([`Renderer::render_shared`]). Formats
    /// of override templates are rendered whole all the same.
    pub fn with_render_cache(mut self, capacity: usize) -> Self {
        self.cache = (capacity > 0).then(|| cache::RenderCache::with_capacity(capacity));
        self
    }

    /// What the render cache has answered (zeros without one).
    pub fn render_cache_stats(&self) -> RenderCacheStats {
        self.cache
            .as_ref()
            .map(cache::RenderCache::stats)
            .unwrap_or_default()
    }

    /// Start-up self-test of an embedded template (whose step blocks are written from their
    /// step alone by design; `tests/props.rs` checks it on random histories): a sample
    /// conversation rendered whole equals its first steps rendered whole followed by the rest
    /// rendered apart, in every split.
    fn check_incremental(&self, format: Format) -> Result<(), String> {
        let conversation = sample_conversation();
        let tools = ResolvedProfile::empty();
        let steps = all_steps(&conversation);
        let render = |steps: &[&crate::conversation::Step]| {
            self.render_steps(format, &conversation, steps, &tools)
                .map_err(|e| e.to_string())
        };
        let whole = render(&steps)?;
        for split in 0..steps.len() {
            let tail = self
                .render_document(format, &conversation, &steps[split..], &tools, Header::Bare)
                .map_err(|e| e.to_string())?;
            let head = render(&steps[..split])?;
            let joined = head
                .strip_suffix(format.cue())
                .zip(self.blocks(format, &tail))
                .map(|(head, blocks)| concat(head, blocks));
            if joined.as_deref() != Some(whole.as_str()) {
                return Err(format!(
                    "{}: steps {split}.. rendered apart differ",
                    format.template()
                ));
            }
        }
        Ok(())
    }

    /// As [`Renderer::render`], shared, and from the render cache where it can: a
    /// conversation rendered before is answered whole; one whose steps extend a rendered one
    /// (the next turn of a session, a retry after a nudge) renders its new steps only. The
    /// result is byte-identical to [`Renderer::render`]'s (property-tested).
    pub fn render_shared(
        &self,
        format: Format,
        conversation: &Conversation,
        tools: &ResolvedProfile,
    ) -> Result<Arc<String>, RenderError> {
        let Some(cache) = self
            .cache
            .as_ref()
            .filter(|_| !self.whole.contains(&format))
        else {
            return self.render(format, conversation, tools).map(Arc::new);
        };
        let lookup = cache::Lookup::of(format, conversation);
        let steps = all_steps(conversation);
        if let Some(found) = cache.find(&lookup, tools) {
            if found.steps == steps.len() {
                cache.count(cache::Outcome::Hit, found.prompt.len());
                return Ok(found.prompt);
            }
            let tail = self.render_document(
                format,
                conversation,
                &steps[found.steps..],
                tools,
                Header::Bare,
            )?;
            let cue = format.cue();
            if let Some(blocks) = self
                .blocks(format, &tail)
                .filter(|_| found.prompt.ends_with(cue))
            {
                let shared = found.prompt.len() - cue.len();
                let len = shared + blocks.len();
                cache.count(cache::Outcome::Extended, len);
                if !cache.admits(&lookup, len, lookup.steps.len(), true) {
                    return Ok(Arc::new(concat(&found.prompt[..shared], blocks)));
                }
                // Only the new blocks are escaped when the older prompt's frames are kept;
                // without them, the whole prompt, if its frames would stay.
                let new = &blocks.as_bytes()[..blocks.len() - cue.len()];
                let escaped = match &found.escaped {
                    Some(older) => Some(older.extended(new, cue.as_bytes())),
                    None => cache.frames_fit(len, lookup.steps.len()).then(|| {
                        JsonFrames::of(&found.prompt.as_bytes()[..shared], b"")
                            .extended(new, cue.as_bytes())
                    }),
                };
                // Escaping is byte by byte: without frames, the older prompt's escaped length
                // plus the new blocks' (both end with the cue).
                let json_len = match &escaped {
                    Some(escaped) => escaped.len(),
                    None => found.json_len + crate::util::json_escaped_len(new),
                };
                // The older prompt grows in place when only the cache and this render hold it
                // (the next turn of a session: its last prompt was sent and released);
                // otherwise it is copied, and the copy replaces its entry.
                return match cache.extend_in_place(
                    lookup,
                    found.prompt,
                    blocks,
                    cue.len(),
                    json_len,
                    escaped,
                ) {
                    Ok(prompt) => Ok(prompt),
                    Err((lookup, older, escaped)) => {
                        let prompt = Arc::new(concat(&older[..shared], blocks));
                        cache.insert(
                            lookup,
                            tools,
                            prompt.clone(),
                            json_len,
                            escaped,
                            Some((&older, shared)),
                        );
                        Ok(prompt)
                    }
                };
            }
        }
        let prompt = Arc::new(self.render_steps(format, conversation, &steps, tools)?);
        cache.count(cache::Outcome::Miss, prompt.len());
        if cache.admits(&lookup, prompt.len(), lookup.steps.len(), false) {
            // No frames yet: most conversations rendered whole are not continued in this
            // process (a request that opens a session after a restart or on another replica,
            // a history the client rewrote), and frames made for them would be dropped
            // unused once the cache is full, leaving their memory to the allocator. The next
            // turn escapes this prompt into frames, which its later turns extend.
            let json_len = crate::util::json_escaped_len(prompt.as_bytes());
            cache.insert(lookup, tools, prompt.clone(), json_len, None, None);
        }
        Ok(prompt)
    }

    /// What the render cache knows of `prompt` when it holds it (the same allocation, as
    /// [`Renderer::render_shared`] returned it): its escaped length and frames for the backend
    /// body (no pass over the prompt), its [`PromptLineage`] for the trace.
    pub fn prompt_held(&self, prompt: &Arc<String>) -> Option<HeldPrompt> {
        self.cache.as_ref()?.held(prompt)
    }

    /// The blocks of `tail` (a [`Header::Bare`] render of a conversation's later steps): its
    /// text from its first block on, which ends with the cue. `None` when it lacks the cue.
    /// The prompt of the whole conversation is the prompt of its first steps less its cue,
    /// then these.
    fn blocks<'t>(&self, format: Format, tail: &'t str) -> Option<&'t str> {
        let start = self.bare_header_len[FORMATS.iter().position(|f| *f == format)?];
        tail.get(start..).filter(|b| b.ends_with(format.cue()))
    }

    /// Renders the continuation document whole; it always ends with [`Format::cue`].
    pub fn render(
        &self,
        format: Format,
        conversation: &Conversation,
        tools: &ResolvedProfile,
    ) -> Result<String, RenderError> {
        let steps = all_steps(conversation);
        self.render_steps(format, conversation, &steps, tools)
    }

    /// The document of `conversation`'s header (system, task, example) with `steps` as its
    /// trajectory.
    fn render_steps(
        &self,
        format: Format,
        conversation: &Conversation,
        steps: &[&crate::conversation::Step],
        tools: &ResolvedProfile,
    ) -> Result<String, RenderError> {
        self.render_document(format, conversation, steps, tools, Header::Whole)
    }

    /// The document with `steps` as its trajectory, after the header `header` says.
    fn render_document(
        &self,
        format: Format,
        conversation: &Conversation,
        steps: &[&crate::conversation::Step],
        tools: &ResolvedProfile,
        header: Header,
    ) -> Result<String, RenderError> {
        let bare = header == Header::Bare;
        let tags: Vec<&str> = tools.tools.iter().map(|t| t.tag.as_str()).collect();
        let tool_docs: Vec<ToolDoc> = tools
            .tools
            .iter()
            .filter(|_| !bare)
            .map(|t| ToolDoc {
                tag: t.tag.clone(),
                description: t.description.clone(),
                params: {
                    // A shell documents its optional parameters beside the command (a generic
                    // shell's `timeout`); the command itself is the tag's text.
                    let shown = |p: &&crate::profile::ParamSpec| match &t.role {
                        crate::profile::ToolRole::Shell { command_parameter } => {
                            tools.generic_shell && &p.name != command_parameter
                        }
                        crate::profile::ToolRole::Other | crate::profile::ToolRole::Editor => true,
                        _ => false,
                    };
                    t.visible_params()
                        .filter(shown)
                        .map(|p| ParamDoc {
                            name: p.name.clone(),
                            r#type: p.type_label(),
                            required: p.required,
                            r#enum: p.enum_values(),
                            description: p.description.clone(),
                        })
                        .collect()
                },
                usage: format.usage(t),
            })
            .collect();
        // JSON strings need no neutralising: the template writes them with `tojson_line`.
        let raw = format == Format::Json;
        let doc = |steps: &mut dyn Iterator<Item = &crate::conversation::Step>| -> Vec<StepDoc> {
            steps
                .map(|s| StepDoc {
                    thought: if raw {
                        s.thought.to_string()
                    } else {
                        escape::thought(&s.thought, &tags, format)
                    },
                    action: s.action.as_ref().map(|a| format.action(a, tools)),
                    observation: s.observation.as_deref().map(|o| match format {
                        Format::Json => o.trim_end().to_string(),
                        // A fence longer than any backtick run keeps the output inside it.
                        Format::Markdown => markdown::fenced("", o.trim_end()),
                        _ => escape::observation(o.trim_end(), format),
                    }),
                })
                .collect()
        };
        let steps = doc(&mut steps.iter().copied());
        let example = conversation.example.as_ref().filter(|_| !bare);
        let example_steps = example.map(|e| doc(&mut e.steps.iter()));
        // The document is the texts plus a little markup per step and the fixed parts: size
        // the output once instead of growing it by doubling (long prompts are mostly text).
        let text_bytes = |steps: &[StepDoc]| -> usize {
            steps
                .iter()
                .map(|s| {
                    s.thought.len()
                        + s.action.as_ref().map_or(0, String::len)
                        + s.observation.as_ref().map_or(0, String::len)
                        + 64
                })
                .sum()
        };
        let capacity = text_bytes(&steps)
            + example_steps.as_deref().map_or(0, text_bytes)
            + tool_docs
                .iter()
                .map(|t| t.description.len() + t.usage.len() + 256 * (t.params.len() + 1))
                .sum::<usize>()
            + if bare {
                0
            } else {
                conversation.system.len() + conversation.task.len()
            }
            + 4096;
        let example = example.map(|e| {
            minijinja::context! {
                task => e.task.trim(),
                steps => example_steps,
            }
        });
        let error = |source| RenderError {
            template: format.template(),
            source,
        };
        let template = self.env.get_template(format.template()).map_err(error)?;
        let mut out = Vec::with_capacity(capacity);
        template
            .render_captured_to(
                minijinja::context! {
                    system => if bare { "" } else { conversation.system.trim() },
                    task => if bare { "" } else { conversation.task.trim() },
                    tools => tool_docs,
                    example => example,
                    steps => steps,
                },
                &mut out,
            )
            .map_err(error)?;
        // minijinja writes `str`s only, so this never fails.
        String::from_utf8(out).map_err(|e| {
            error(minijinja::Error::new(
                minijinja::ErrorKind::InvalidOperation,
                e.to_string(),
            ))
        })
    }
}

/// `head` then `blocks`, in a string of their length.
fn concat(head: &str, blocks: &str) -> String {
    let mut out = String::with_capacity(head.len() + blocks.len());
    out.push_str(head);
    out.push_str(blocks);
    out
}

/// The steps of a document, in order: reference prefix steps, then live ones.
fn all_steps(conversation: &Conversation) -> Vec<&crate::conversation::Step> {
    conversation
        .prefix
        .iter()
        .chain(&conversation.steps)
        .collect()
}

/// A conversation with every kind of step, for the start-up checks.
fn sample_conversation() -> Conversation {
    use crate::conversation::Step;
    use crate::profile::Action;
    let call = |command: &str| {
        Some(Action::Call {
            tag: "bash".into(),
            arguments: Arc::new(
                [("command".to_string(), serde_json::Value::from(command))]
                    .into_iter()
                    .collect(),
            ),
        })
    };
    Conversation {
        system: "You are a helpful assistant.".into(),
        task: "Fix the bug.".into(),
        prefix: vec![Step {
            thought: "Look around first.".into(),
            action: call("ls"),
            observation: Some("README.md\nsrc".into()),
            ..Step::default()
        }],
        steps: vec![
            Step {
                thought: "Read the file.".into(),
                action: call("cat src/lib.rs"),
                observation: Some("fn main() {}".into()),
                ..Step::default()
            },
            Step {
                observation: Some("Please answer with one action.".into()),
                ..Step::default()
            },
            Step {
                thought: "Done.".into(),
                action: Some(Action::Submit { message: None }),
                ..Step::default()
            },
        ],
        ..Conversation::default()
    }
}
