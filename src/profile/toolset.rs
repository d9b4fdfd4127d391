//! The tools of one request in the model's neutral vocabulary, and the mapping both ways.
//!
//! Whatever the scaffold, the model sees `<bash>` for the shell, `<str_replace_editor>` for the
//! file editor, `<submit/>` to finish, and other tools under their own names. That keeps a
//! reference prefix recorded with one scaffold valid for another (DESIGN.md, "Profiles").

use serde_json::{Map, Value};

use super::{Hints, Profile};
use crate::conversation::Action;
use crate::openai::chat::Tool;

/// Tag the model writes for the shell tool.
pub const SHELL_TAG: &str = "bash";
/// Tag the model writes for the file editor.
pub const EDITOR_TAG: &str = "str_replace_editor";
/// Tag the model writes to finish (self-closing).
pub const SUBMIT_TAG: &str = "submit";

/// The neutral tool set of one request.
#[derive(Debug, Clone)]
pub struct ToolSet {
    /// Name of the profile this set was built with.
    pub profile: String,
    /// Tools in documentation order: shell, editor, others in request order, submit last.
    pub tools: Vec<ToolSpec>,
    /// How `<submit/>` is delivered.
    pub submit: SubmitTarget,
    /// Profile `task_user_messages`: leading user messages that form the task (None: all).
    pub task_user_messages: Option<usize>,
    /// Profile hints for the nudges.
    pub hints: Hints,
    /// Profile `default_prefix`.
    pub default_prefix: Option<String>,
    /// Content dialect (no tools offered; the reply is written in the scaffold's format).
    pub dialect: Option<crate::dialect::Dialect>,
    defaults: Map<String, Value>,
    modifying_commands: Vec<String>,
}

/// One tool as the model sees it.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// XML tag name the model writes.
    pub tag: String,
    pub role: ToolRole,
    /// The scaffold's own tool name; `None` for a synthetic `submit`.
    pub scaffold_name: Option<String>,
    pub description: String,
    /// Every parameter of the scaffold's schema, in schema order.
    pub params: Vec<ParamSpec>,
}

/// What a tool is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolRole {
    /// Body of `<bash>` is the value of `command_parameter`.
    Shell {
        command_parameter: String,
    },
    Editor,
    Submit,
    Other,
}

/// One parameter of a tool.
#[derive(Debug, Clone)]
pub struct ParamSpec {
    pub name: String,
    /// The parameter's JSON schema (`{"type": "integer"}`, `{"enum": [...]}`, ...).
    pub schema: Value,
    pub required: bool,
    /// Scaffold metadata the model is not shown (profile `hidden_parameters`).
    pub hidden: bool,
    pub description: String,
}

/// How `<submit/>` reaches the scaffold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmitTarget {
    /// Call this tool; `message_parameter` gets the message (thought or default).
    Tool {
        name: String,
        message_parameter: Option<String>,
        default_message: Option<String>,
    },
    /// Run this shell command (mini-swe-agent's sentinel).
    Command(String),
    /// Answer with plain content and `finish_reason: "stop"`.
    Content,
}

/// An action in the scaffold's own terms.
#[derive(Debug, Clone, PartialEq)]
pub enum ScaffoldReply {
    ToolCall {
        name: String,
        arguments: Map<String, Value>,
    },
    Content(String),
}

impl ParamSpec {
    /// Human label of the schema type: `string`, `integer`, `array of integer`, ...
    pub fn type_label(&self) -> String {
        let ty = self.schema.get("type").and_then(Value::as_str);
        match ty {
            Some("array") => match self
                .schema
                .get("items")
                .and_then(|i| i.get("type"))
                .and_then(Value::as_str)
            {
                Some(item) => format!("array of {item}"),
                None => "array".to_string(),
            },
            Some(t) => t.to_string(),
            None if self.schema.get("enum").is_some() => "string".to_string(),
            None => "any".to_string(),
        }
    }

    /// Allowed values when the schema has an `enum`.
    pub fn enum_values(&self) -> Vec<String> {
        self.schema
            .get("enum")
            .and_then(Value::as_array)
            .map(|vs| {
                vs.iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl ToolSpec {
    /// Parameters the model is shown and may write (the shell body excluded).
    pub fn visible_params(&self) -> impl Iterator<Item = &ParamSpec> {
        self.params.iter().filter(|p| !p.hidden)
    }

    /// The parameter with this name.
    pub fn param(&self, name: &str) -> Option<&ParamSpec> {
        self.params.iter().find(|p| p.name == name)
    }
}

impl ToolSet {
    /// Builds the neutral set for `tools` under `profile`.
    pub fn build(profile: &Profile, tools: &[Tool]) -> Self {
        let offered = |name: &str| tools.iter().any(|t| t.function.name == name);
        let submit = match profile.submit.tools.iter().find(|n| offered(n)) {
            Some(name) => SubmitTarget::Tool {
                name: name.clone(),
                message_parameter: profile.submit.message_parameter.clone(),
                default_message: profile.submit.default_message.clone(),
            },
            None => match (&profile.submit.command, &profile.shell) {
                (Some(cmd), Some(shell)) if offered(&shell.tool) => {
                    SubmitTarget::Command(cmd.clone())
                }
                _ => SubmitTarget::Content,
            },
        };
        let submit_tool = match &submit {
            SubmitTarget::Tool { name, .. } => Some(name.as_str()),
            _ => None,
        };

        let mut shell = Vec::new();
        let mut editor = Vec::new();
        let mut others = Vec::new();
        let mut finish = None;
        for tool in tools {
            let name = tool.function.name.as_str();
            let params = params_of(tool, &profile.hidden_parameters);
            let (tag, role) = match (&profile.shell, &profile.editor) {
                (Some(s), _) if s.tool == name => (
                    SHELL_TAG.to_string(),
                    ToolRole::Shell {
                        command_parameter: s.command_parameter.clone(),
                    },
                ),
                (_, Some(e)) if e.tool == name => (EDITOR_TAG.to_string(), ToolRole::Editor),
                _ if submit_tool == Some(name) => (SUBMIT_TAG.to_string(), ToolRole::Submit),
                _ => (name.to_string(), ToolRole::Other),
            };
            let spec = ToolSpec {
                tag,
                role: role.clone(),
                scaffold_name: Some(name.to_string()),
                description: tool.function.description.trim().to_string(),
                params,
            };
            match role {
                ToolRole::Shell { .. } => shell.push(spec),
                ToolRole::Editor => editor.push(spec),
                ToolRole::Submit => finish = Some(spec),
                ToolRole::Other => others.push(spec),
            }
        }
        let finish = finish.unwrap_or_else(synthetic_submit);
        if profile.dialect.is_some() && shell.is_empty() {
            shell.push(synthetic_shell());
        }
        let mut all = shell;
        all.append(&mut editor);
        all.append(&mut others);
        all.push(finish);
        Self {
            profile: profile.name.clone(),
            tools: all,
            submit,
            task_user_messages: profile.task_user_messages,
            hints: profile.hints.clone(),
            default_prefix: profile.default_prefix.clone(),
            dialect: profile.dialect,
            defaults: profile.parameter_defaults.clone(),
            modifying_commands: profile
                .editor
                .as_ref()
                .map(|e| e.modifying_commands.clone())
                .unwrap_or_default(),
        }
    }

    /// A set with only the synthetic `<submit/>` (no tools offered, generic profile).
    pub fn empty() -> Self {
        Self {
            hints: Hints::default(),
            default_prefix: None,
            dialect: None,
            profile: "generic".to_string(),
            tools: vec![synthetic_submit()],
            submit: SubmitTarget::Content,
            task_user_messages: None,
            defaults: Map::new(),
            modifying_commands: Vec::new(),
        }
    }

    /// The tool the model writes as `<tag>`.
    pub fn get(&self, tag: &str) -> Option<&ToolSpec> {
        self.tools.iter().find(|t| t.tag == tag)
    }

    /// Whether the tools can change files (a shell or an editor): only then does a submit
    /// before any edit count as premature.
    pub fn can_edit(&self) -> bool {
        self.tools
            .iter()
            .any(|t| matches!(t.role, ToolRole::Shell { .. } | ToolRole::Editor))
    }

    /// Editor commands that modify files (profile `editor.modifying_commands`).
    pub fn modifying_commands(&self) -> &[String] {
        &self.modifying_commands
    }

    /// Maps a neutral action to the scaffold's call. `thought` is the text before the action:
    /// it becomes the finish message where the scaffold needs one and the model gave none.
    /// Declared parameters with a profile default are filled when absent.
    pub fn to_scaffold(&self, action: &Action, thought: &str) -> ScaffoldReply {
        match action {
            Action::Submit { message } => {
                let message = message
                    .clone()
                    .filter(|m| !m.trim().is_empty())
                    .or_else(|| Some(thought.trim().to_string()).filter(|t| !t.is_empty()));
                match &self.submit {
                    SubmitTarget::Tool {
                        name,
                        message_parameter,
                        default_message,
                    } => {
                        let mut arguments = Map::new();
                        if let Some(param) = message_parameter {
                            let text = message
                                .or_else(|| default_message.clone())
                                .unwrap_or_default();
                            arguments.insert(param.clone(), Value::String(text));
                        }
                        self.call(name, arguments)
                    }
                    SubmitTarget::Command(command) => match self.shell() {
                        Some((spec, param)) => {
                            let arguments =
                                Map::from_iter([(param, Value::String(command.clone()))]);
                            self.call(
                                spec.scaffold_name.as_deref().unwrap_or(SHELL_TAG),
                                arguments,
                            )
                        }
                        None => ScaffoldReply::Content(message.unwrap_or_default()),
                    },
                    SubmitTarget::Content => ScaffoldReply::Content(message.unwrap_or_default()),
                }
            }
            Action::Call { tag, arguments } => {
                let name = self
                    .get(tag)
                    .and_then(|s| s.scaffold_name.clone())
                    .unwrap_or_else(|| tag.clone());
                self.call(&name, arguments.clone())
            }
        }
    }

    /// Maps a call from the scaffold's history to the neutral action it stands for. Hidden
    /// parameters are dropped so the rendered history is the same whatever the scaffold.
    pub fn from_scaffold(&self, name: &str, arguments: &Map<String, Value>) -> Action {
        let Some(spec) = self
            .tools
            .iter()
            .find(|t| t.scaffold_name.as_deref() == Some(name))
        else {
            return Action::Call {
                tag: name.to_string(),
                arguments: arguments.clone(),
            };
        };
        let visible: Map<String, Value> = arguments
            .iter()
            .filter(|(k, _)| spec.param(k).is_none_or(|p| !p.hidden))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        match (&spec.role, &self.submit) {
            (
                ToolRole::Submit,
                SubmitTarget::Tool {
                    message_parameter, ..
                },
            ) => Action::Submit {
                message: message_parameter
                    .as_ref()
                    .and_then(|p| visible.get(p))
                    .and_then(Value::as_str)
                    .map(str::to_string),
            },
            (ToolRole::Shell { command_parameter }, SubmitTarget::Command(sentinel))
                if visible
                    .get(command_parameter)
                    .and_then(Value::as_str)
                    .is_some_and(|c| c.trim_start().starts_with(sentinel.as_str())) =>
            {
                Action::Submit { message: None }
            }
            _ => Action::Call {
                tag: spec.tag.clone(),
                arguments: visible,
            },
        }
    }

    fn shell(&self) -> Option<(&ToolSpec, String)> {
        self.tools.iter().find_map(|t| match &t.role {
            ToolRole::Shell { command_parameter } => Some((t, command_parameter.clone())),
            _ => None,
        })
    }

    fn call(&self, name: &str, mut arguments: Map<String, Value>) -> ScaffoldReply {
        if let Some(spec) = self
            .tools
            .iter()
            .find(|t| t.scaffold_name.as_deref() == Some(name))
        {
            for p in &spec.params {
                if let Some(default) = self.defaults.get(&p.name) {
                    arguments
                        .entry(p.name.clone())
                        .or_insert_with(|| default.clone());
                }
            }
        }
        ScaffoldReply::ToolCall {
            name: name.to_string(),
            arguments,
        }
    }
}

/// The shell of a content dialect: the scaffold runs the command the reply names.
fn synthetic_shell() -> ToolSpec {
    ToolSpec {
        tag: SHELL_TAG.to_string(),
        role: ToolRole::Shell {
            command_parameter: "command".to_string(),
        },
        scaffold_name: None,
        description: "Runs a command in the shell and shows what it prints.".to_string(),
        params: vec![ParamSpec {
            name: "command".to_string(),
            schema: serde_json::json!({"type": "string"}),
            required: true,
            hidden: false,
            description: "The command to run.".to_string(),
        }],
    }
}

fn synthetic_submit() -> ToolSpec {
    ToolSpec {
        tag: SUBMIT_TAG.to_string(),
        role: ToolRole::Submit,
        scaffold_name: None,
        description: "Finish: hand in the current state of the work as the final result. \
                      Nothing can be done after it."
            .to_string(),
        params: Vec::new(),
    }
}

fn params_of(tool: &Tool, hidden: &[String]) -> Vec<ParamSpec> {
    let Some(schema) = tool.function.parameters.as_ref() else {
        return Vec::new();
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    props
        .iter()
        .map(|(name, schema)| ParamSpec {
            name: name.clone(),
            schema: schema.clone(),
            required: required.contains(&name.as_str()),
            hidden: hidden.contains(name),
            description: schema
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .trim()
                .to_string(),
        })
        .collect()
}
