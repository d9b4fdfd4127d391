//! Conversation → one continuation document, through a minijinja template per format.
//!
//! The environment is built once with strict undefined behaviour, so a template that names a
//! missing variable fails at startup validation instead of rendering an empty string.
//! Rendering is deterministic and append-only (DESIGN.md "Append-only rendering"): the prompt
//! of turn n+1 starts with the prompt of turn n minus the trailing [`CUE`].

mod escape;
pub mod xml;

use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;

use crate::conversation::Conversation;
use crate::profile::ToolSet;

/// The text every prompt ends with: the model continues with its thought.
pub const CUE: &str = "## Thinking\n";

/// Interaction formats (the paper's ablation). Markdown+XML is the default and the best.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    #[default]
    #[value(name = "markdown_xml", alias = "markdown-xml")]
    MarkdownXml,
}

impl Format {
    /// The name used in flags, config files and traces.
    pub fn name(self) -> &'static str {
        match self {
            Self::MarkdownXml => "markdown_xml",
        }
    }

    /// Template name under `templates/`.
    pub fn template(self) -> &'static str {
        match self {
            Self::MarkdownXml => "markdown_xml.jinja",
        }
    }
}

/// Render failure: a template error with its full chain.
#[derive(Debug, thiserror::Error)]
#[error("rendering template {template}: {source:#}")]
pub struct RenderError {
    template: &'static str,
    #[source]
    source: minijinja::Error,
}

/// Holds the compiled templates.
#[derive(Debug)]
pub struct Renderer {
    env: Environment<'static>,
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
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(true);
        env.set_debug(true);
        let format = Format::MarkdownXml;
        env.add_template(
            format.template(),
            include_str!("../../templates/markdown_xml.jinja"),
        )
        .map_err(|source| RenderError {
            template: format.template(),
            source,
        })?;
        let renderer = Self { env };
        renderer.render(format, &Conversation::default(), &ToolSet::empty())?;
        Ok(renderer)
    }

    /// Renders the continuation document; it always ends with [`CUE`].
    pub fn render(
        &self,
        format: Format,
        conversation: &Conversation,
        tools: &ToolSet,
    ) -> Result<String, RenderError> {
        let tags: Vec<&str> = tools.tools.iter().map(|t| t.tag.as_str()).collect();
        let tool_docs: Vec<ToolDoc> = tools
            .tools
            .iter()
            .map(|t| ToolDoc {
                tag: t.tag.clone(),
                description: t.description.clone(),
                params: match t.role {
                    crate::profile::ToolRole::Other | crate::profile::ToolRole::Editor => t
                        .visible_params()
                        .map(|p| ParamDoc {
                            name: p.name.clone(),
                            r#type: p.type_label(),
                            required: p.required,
                            r#enum: p.enum_values(),
                            description: p.description.clone(),
                        })
                        .collect(),
                    _ => Vec::new(),
                },
                usage: xml::usage(t),
            })
            .collect();
        let doc = |steps: &[crate::conversation::Step]| -> Vec<StepDoc> {
            steps
                .iter()
                .map(|s| StepDoc {
                    thought: escape::thought(&s.thought, &tags),
                    action: s.action.as_ref().map(|a| xml::action(a, tools)),
                    observation: s
                        .observation
                        .as_deref()
                        .map(|o| escape::observation(o.trim_end())),
                })
                .collect()
        };
        let mut steps = doc(&conversation.prefix);
        steps.extend(doc(&conversation.steps));
        let example = conversation.example.as_ref().map(|e| {
            minijinja::context! {
                task => e.task.trim(),
                steps => doc(&e.steps),
            }
        });
        let template = self
            .env
            .get_template(format.template())
            .map_err(|source| RenderError {
                template: format.template(),
                source,
            })?;
        template
            .render(minijinja::context! {
                system => conversation.system.trim(),
                task => conversation.task.trim(),
                tools => tool_docs,
                example => example,
                steps => steps,
            })
            .map_err(|source| RenderError {
                template: format.template(),
                source,
            })
    }
}
