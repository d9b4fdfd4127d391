//! The tools of one request in the model's neutral vocabulary, and the mapping both ways.
//!
//! Whatever the scaffold, the model sees `<bash>` for the shell (also an unknown scaffold's
//! shell-like tool, profile `shell_names`), `<str_replace_editor>` for the file editor,
//! `<submit/>` to finish, and other tools under their own names. That keeps a reference
//! prefix recorded with one scaffold valid for another (docs/architecture.md, "Profiles are data").

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{Hints, Profile};
use crate::openai::chat::Tool;
use crate::profile::Action;

/// Tag the model writes for the shell tool.
pub const SHELL_TAG: &str = "bash";
/// Tag the model writes for the file editor.
pub const EDITOR_TAG: &str = "str_replace_editor";
/// Tag the model writes to finish (self-closing).
pub const SUBMIT_TAG: &str = "submit";

/// Longest tool or parameter name, characters (OpenAI's own limit for function names).
pub const MAX_NAME_LEN: usize = 64;

/// Tool names that would collide with the continuation document's own tags (the
/// observation, and the XML format's step markup).
pub const RESERVED_TOOL_NAMES: &[&str] = &["observation", "step", "thought"];

/// Parameter names that would collide with the document's tags: a child tag
/// `<observation>` at the start of a line is a stop sequence.
pub const RESERVED_PARAMETER_NAMES: &[&str] = &["observation"];

/// Whether `name` can be written as a tag: `^[A-Za-z_][A-Za-z0-9_.-]{0,63}$`. Tool names are
/// the model's action tags (`<name>…</name>`) and parameter names their child tags, so the
/// name rule of XML (no markup, no space, no leading digit, `.` or `-`) applies. OpenAI
/// itself allows `^[a-zA-Z0-9_-]{1,64}$` for tool names; the only names it accepts and this
/// refuses start with a digit or `-`.
pub fn is_tag_name(name: &str) -> bool {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    first_ok
        && name.len() <= MAX_NAME_LEN
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// A tool definition the proxy cannot render into a prompt safely (HTTP 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolDefinitionError {
    /// JSON path of the offending field, e.g. `tools[2].function.name`.
    pub param: String,
    /// What is wrong and the rule, naming the tool.
    pub message: String,
}

/// Checks the parts of `tools` that become markup in the prompt, before anything is
/// rendered: every tool name and every required top-level parameter name must be a tag name
/// ([`is_tag_name`]) and not reserved ([`RESERVED_TOOL_NAMES`],
/// [`RESERVED_PARAMETER_NAMES`]); an optional parameter whose name is not is hidden from
/// the model, not refused; a parameter's `type` (and its `items.type`) and its string
/// `enum` values must not contain `<`, `>`, `"` or a line break (they are written into
/// attributes and one-line lists). Descriptions are free text and are not checked here:
/// [`ResolvedProfile::build`] neutralises them ([`neutralise_description`]).
///
/// Errors: the first offending field, with its JSON path and the tool's name.
pub fn check_tools(tools: &[Tool]) -> Result<(), ToolDefinitionError> {
    let rule = format!(
        "names are written as XML tags in the prompt, so they must match \
         ^[A-Za-z_][A-Za-z0-9_.-]{{0,{}}}$ (letters, digits, `_`, `.`, `-`; not starting with a \
         digit, `.` or `-`; at most {MAX_NAME_LEN} characters)",
        MAX_NAME_LEN - 1
    );
    let markup = |text: &str| text.contains(['<', '>', '"', '\n', '\r']);
    for (i, tool) in tools.iter().enumerate() {
        let name = &tool.function.name;
        if !is_tag_name(name) {
            return Err(ToolDefinitionError {
                param: format!("tools[{i}].function.name"),
                message: format!("invalid tool name {name:?}: {rule}"),
            });
        }
        if RESERVED_TOOL_NAMES.contains(&name.as_str()) {
            return Err(ToolDefinitionError {
                param: format!("tools[{i}].function.name"),
                message: format!(
                    "tool name {name:?} is reserved: it is a tag of the prompt format ({})",
                    RESERVED_TOOL_NAMES.join(", ")
                ),
            });
        }
        let Some(props) = tool
            .function
            .parameters
            .as_ref()
            .and_then(|p| p.get("properties"))
            .and_then(Value::as_object)
        else {
            continue;
        };
        let required: Vec<&str> = tool
            .function
            .parameters
            .as_ref()
            .and_then(|p| p.get("required"))
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (param, schema) in props {
            let path = format!("tools[{i}].function.parameters.properties");
            // An optional parameter that cannot be a tag is hidden from the model instead
            // (Claude Code's Grep has `-A`, `-B`, `-C`, `-i`, `-n`, `-o`): see `params_of`.
            let tag_safe =
                is_tag_name(param) && !RESERVED_PARAMETER_NAMES.contains(&param.as_str());
            if !tag_safe && !required.contains(&param.as_str()) {
                continue;
            }
            if !is_tag_name(param) {
                return Err(ToolDefinitionError {
                    param: path,
                    message: format!(
                        "tool {name:?} has an invalid parameter name {param:?}: {rule}"
                    ),
                });
            }
            if RESERVED_PARAMETER_NAMES.contains(&param.as_str()) {
                return Err(ToolDefinitionError {
                    param: path,
                    message: format!(
                        "tool {name:?} has a parameter named {param:?}, which is reserved: \
                         `<{param}>` is a tag of the prompt format"
                    ),
                });
            }
            let types = [schema.get("type"), schema.pointer("/items/type")];
            if let Some(ty) = types
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .find(|t| markup(t))
            {
                return Err(ToolDefinitionError {
                    param: format!("{path}.{param}.type"),
                    message: format!(
                        "tool {name:?}, parameter {param:?}: type {ty:?} contains markup or a \
                         line break (<, >, \" or a newline)"
                    ),
                });
            }
            let values = schema.get("enum").and_then(Value::as_array);
            if let Some(value) = values
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .find(|v| markup(v))
            {
                return Err(ToolDefinitionError {
                    param: format!("{path}.{param}.enum"),
                    message: format!(
                        "tool {name:?}, parameter {param:?}: enum value {value:?} contains \
                         markup or a line break (<, >, \" or a newline)"
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Tag names of the continuation documents' own structure (all formats): a description may
/// not open or close one of these.
pub const STRUCTURAL_TAGS: &[&str] = &[
    "observation",
    "submit",
    "step",
    "thought",
    "task",
    "tools",
    "tool",
    "description",
    "parameter",
    "example",
    "example_trajectory",
    "trajectory",
    "instructions",
];

/// Line starts that begin a section or a step in the Markdown formats.
const STRUCTURAL_HEADINGS: &[&str] = &["## Thinking", "### Action", "### Observation"];

/// A tool's or parameter's description made safe to write into the prompt, in every format,
/// while real scaffold descriptions (Markdown sub-headings, `<response clipped>`) stay as
/// they are:
/// - `<` becomes `&lt;` where it opens or closes one of the document's own tags
///   ([`STRUCTURAL_TAGS`]: `</observation>`, `<submit/>`, `</description>`, `<step>`, ...),
///   so no description can close the element it is written in or forge an observation or
///   an action;
/// - a line whose first non-blank text is a level-1 heading (`# Trajectory`) or a step
///   heading (`## Thinking`, `### Action`, `### Observation`) gets a backslash
///   (`\# Trajectory`), so no description can start a section or a step.
pub fn neutralise_description(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let trimmed = line.trim_start_matches([' ', '\t']);
        out.push_str(&line[..line.len() - trimmed.len()]);
        let level_one = trimmed == "#" || trimmed.starts_with("# ");
        if level_one || STRUCTURAL_HEADINGS.iter().any(|h| trimmed.starts_with(h)) {
            out.push('\\');
        }
        let mut rest = trimmed;
        while let Some(at) = rest.find('<') {
            out.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            let name_start = after.strip_prefix('/').unwrap_or(after);
            let name_len = name_start
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
                .unwrap_or(name_start.len());
            if STRUCTURAL_TAGS.contains(&&name_start[..name_len]) {
                out.push_str("&lt;");
            } else {
                out.push('<');
            }
            rest = after;
        }
        out.push_str(rest);
    }
    out
}

/// A profile resolved for one request: the tools it offers, in the neutral vocabulary (the
/// request's tool set: `tools`, `submit`), and what the profile says of the scaffold (hints,
/// dialect, tool output, default prefix). Functions that need only the tool list still name
/// their parameter `tools`.
#[derive(Debug, Clone)]
pub struct ResolvedProfile {
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
    pub dialect: Option<crate::profile::Dialect>,
    /// mini-swe-agent text mode: the block form and completion command its prompt asks for
    /// (set from the request; the default is 2.x's text config).
    pub mini: crate::profile::MiniFormat,
    /// Profile `tool_output`: how tool messages wrap command output.
    pub tool_output: super::ToolOutput,
    /// The shell is an unknown scaffold's (profile `shell_names`, not a known profile's
    /// `shell`): its optional parameters are documented and, when a call uses them, written as
    /// child tags ([`ResolvedProfile::shell_command`]). Known scaffolds' shells are written
    /// `<bash>COMMAND</bash>` as they always were.
    pub generic_shell: bool,
    defaults: Map<String, Value>,
    modifying_commands: Vec<String>,
    writes: Vec<super::WriteSpec>,
    delegates: Vec<String>,
}

/// One tool as the model sees it.
#[derive(Debug, Clone, PartialEq)]
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
#[derive(Debug, Clone, PartialEq)]
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
    /// Run a shell command: `send` is what the proxy sends for `<submit/>` (the sentinel and
    /// the profile's `command_suffix`); a command starting with `sentinel` reads back as
    /// `<submit/>` (mini-swe-agent's `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`).
    Command { sentinel: String, send: String },
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

impl ResolvedProfile {
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
                (Some(cmd), Some(shell)) if offered(&shell.tool) => SubmitTarget::Command {
                    sentinel: cmd.clone(),
                    send: format!(
                        "{cmd}{}",
                        profile.submit.command_suffix.as_deref().unwrap_or_default()
                    ),
                },
                _ => SubmitTarget::Content,
            },
        };
        let submit_tool = match &submit {
            SubmitTarget::Tool { name, .. } => Some(name.as_str()),
            _ => None,
        };

        let shell_spec = profile
            .shell
            .clone()
            .or_else(|| shell_like(&profile.shell_names, tools, &profile.hidden_parameters));
        let shell_spec_found = shell_spec.is_some();

        let mut shell = Vec::new();
        let mut editor = Vec::new();
        let mut others = Vec::new();
        let mut finish = None;
        for tool in tools {
            let name = tool.function.name.as_str();
            // The server refuses such names (`check_tools`); tools read from a system prompt
            // (OpenHands text mode) or from old traces may still have them: they are left
            // out rather than written into the prompt as broken markup.
            if !is_tag_name(name) || RESERVED_TOOL_NAMES.contains(&name) {
                tracing::warn!(tool = ?name, "tool left out: its name is not a valid tag name");
                continue;
            }
            let params = params_of(tool, &profile.hidden_parameters);
            let (tag, role) = match (&shell_spec, &profile.editor) {
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
                description: neutralise_description(tool.function.description.trim()),
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
            mini: crate::profile::MiniFormat::default(),
            tool_output: profile.tool_output,
            generic_shell: profile.shell.is_none() && shell_spec_found,
            defaults: profile.parameter_defaults.clone(),
            modifying_commands: profile
                .editor
                .as_ref()
                .map(|e| e.modifying_commands.clone())
                .unwrap_or_default(),
            writes: profile.writes.clone(),
            delegates: profile.delegates.clone(),
        }
    }

    /// A set with only the synthetic `<submit/>` (no tools offered, generic profile).
    pub fn empty() -> Self {
        Self {
            hints: Hints::default(),
            default_prefix: None,
            dialect: None,
            mini: crate::profile::MiniFormat::default(),
            tool_output: super::ToolOutput::Text,
            generic_shell: false,
            profile: "generic".to_string(),
            tools: vec![synthetic_submit()],
            submit: SubmitTarget::Content,
            task_user_messages: None,
            defaults: Map::new(),
            modifying_commands: Vec::new(),
            writes: Vec::new(),
            delegates: Vec::new(),
        }
    }

    /// The command of a shell call written `<bash>COMMAND</bash>`; `None` when the call is
    /// written with child tags instead: not a shell, no string command, or a generic shell
    /// ([`ResolvedProfile::generic_shell`]) called with other visible arguments beside the command (a
    /// `timeout`), so none is lost.
    pub fn shell_command<'a>(
        &self,
        spec: &ToolSpec,
        arguments: &'a Map<String, Value>,
    ) -> Option<&'a str> {
        let ToolRole::Shell { command_parameter } = &spec.role else {
            return None;
        };
        let others = self.generic_shell
            && arguments
                .keys()
                .any(|k| k != command_parameter && spec.param(k).is_none_or(|p| !p.hidden));
        match arguments.get(command_parameter) {
            Some(Value::String(command)) if !others => Some(command),
            _ => None,
        }
    }

    /// A reference prefix's action (neutral vocabulary, where the shell's command is
    /// `command`) in this set's terms: for a shell whose command parameter is named otherwise
    /// (a generic `run_command {cmd}`), a lone `command` becomes that parameter, so the prefix
    /// renders as `<bash>ls</bash>` like the live steps.
    pub fn adapt_neutral(&self, action: &Action) -> Action {
        if let Action::Call { tag, arguments } = action {
            if let Some(ToolSpec {
                role: ToolRole::Shell { command_parameter },
                ..
            }) = self.get(tag)
            {
                if command_parameter != "command"
                    && arguments.len() == 1
                    && arguments.contains_key("command")
                {
                    let value = arguments["command"].clone();
                    return Action::Call {
                        tag: tag.clone(),
                        arguments: Map::from_iter([(command_parameter.clone(), value)]).into(),
                    };
                }
            }
        }
        action.clone()
    }

    /// The tool the model writes as `<tag>`.
    pub fn get(&self, tag: &str) -> Option<&ToolSpec> {
        self.tools.iter().find(|t| t.tag == tag)
    }

    /// Whether the tools can change files (a shell or an editor): only then does a submit
    /// before any edit count as premature.
    pub fn can_edit(&self) -> bool {
        self.tools.iter().any(|t| {
            matches!(t.role, ToolRole::Shell { .. } | ToolRole::Editor)
                || self.write_tool(&t.tag).is_some()
        })
    }

    /// Editor commands that modify files (profile `editor.modifying_commands`).
    pub fn modifying_commands(&self) -> &[String] {
        &self.modifying_commands
    }

    /// Whether `tag` is one of the profile's subagent tools (profile `delegates`).
    pub fn is_delegate(&self, tag: &str) -> bool {
        self.delegates.iter().any(|d| d == tag)
    }

    /// The profile's write tool named `tag` (its tag is its own name), if it is one.
    pub fn write_tool(&self, tag: &str) -> Option<&super::WriteSpec> {
        self.writes.iter().find(|w| w.tool == tag)
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
                    SubmitTarget::Command { send, .. } => match self.shell() {
                        Some((spec, param)) => {
                            let arguments = Map::from_iter([(param, Value::String(send.clone()))]);
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
                let mut arguments = (**arguments).clone();
                // The sentinel alone, as the scaffold's own prompt tells the model to write it,
                // is the submit: it goes out as `<submit/>` would (mini-swe-agent: with the patch
                // after it, else the submission is empty). More after it is the model's own.
                if let (
                    SubmitTarget::Command { sentinel, send },
                    Some(ToolRole::Shell { command_parameter }),
                ) = (&self.submit, self.get(tag).map(|t| &t.role))
                {
                    if let Some(Value::String(command)) = arguments.get_mut(command_parameter) {
                        if command.trim() == sentinel.as_str() {
                            *command = send.clone();
                        }
                    }
                }
                self.call(&name, arguments)
            }
        }
    }

    /// Maps a call from the scaffold's history to the neutral action it stands for. Hidden
    /// parameters are dropped so the rendered history is the same whatever the scaffold.
    /// `arguments` are shared with the action when none is dropped or rewritten.
    pub fn from_scaffold(&self, name: &str, arguments: &Arc<Map<String, Value>>) -> Action {
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
        let shown = |k: &String| spec.param(k).is_none_or(|p| !p.hidden);
        // A shell that takes its command as an argument vector (Codex's `shell`): the neutral
        // action holds the command line, as every other shell's does.
        let argv_line = match &spec.role {
            ToolRole::Shell { command_parameter } => match arguments.get(command_parameter) {
                Some(Value::Array(argv)) => command_line(&argv[..]).map(|l| (command_parameter, l)),
                _ => None,
            },
            _ => None,
        };
        let visible: Arc<Map<String, Value>> = if argv_line.is_none() && arguments.keys().all(shown)
        {
            arguments.clone()
        } else {
            let mut visible: Map<String, Value> = arguments
                .iter()
                .filter(|(k, _)| shown(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if let Some((parameter, line)) = argv_line {
                if visible.contains_key(parameter) {
                    visible.insert(parameter.clone(), Value::String(line));
                }
            }
            Arc::new(visible)
        };
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
            (ToolRole::Shell { command_parameter }, SubmitTarget::Command { sentinel, .. })
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
            // A shell whose command is an argument vector gets `["bash", "-lc", LINE]`.
            if let ToolRole::Shell { command_parameter } = &spec.role {
                let argv = spec
                    .param(command_parameter)
                    .is_some_and(|p| p.schema.get("type").and_then(Value::as_str) == Some("array"));
                if let (true, Some(Value::String(line))) = (argv, arguments.get(command_parameter))
                {
                    let vector = serde_json::json!(["bash", "-lc", line]);
                    arguments.insert(command_parameter.clone(), vector);
                }
            }
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

/// The shell among tools of an unknown scaffold (profile `shell_names`): the first tool named
/// like a shell (`bash`, `run_command`, …, case-insensitively) whose schema has exactly one
/// required parameter, a visible string (`command`, `cmd`); optional parameters may follow
/// (they stay child tags). None when no tool qualifies, or when another tool is itself named
/// `bash`, the neutral tag.
fn shell_like(names: &[String], tools: &[Tool], hidden: &[String]) -> Option<super::ShellSpec> {
    let (index, tool, command_parameter) = tools.iter().enumerate().find_map(|(index, tool)| {
        let name = &tool.function.name;
        if !names.iter().any(|n| n.eq_ignore_ascii_case(name)) || !is_tag_name(name) {
            return None;
        }
        let params = params_of(tool, hidden);
        let mut required = params.iter().filter(|p| p.required);
        // A string, or an argument vector of strings (Codex's `shell`: `["bash", "-lc", …]`).
        let command_like = |schema: &Value| match schema.get("type").and_then(Value::as_str) {
            Some("string") => true,
            Some("array") => {
                schema.pointer("/items/type").and_then(Value::as_str) == Some("string")
            }
            _ => false,
        };
        match (required.next(), required.next()) {
            (Some(only), None) if !only.hidden && command_like(&only.schema) => {
                Some((index, tool, only.name.clone()))
            }
            _ => None,
        }
    })?;
    let tag_taken = tools
        .iter()
        .enumerate()
        .any(|(i, t)| i != index && t.function.name.eq_ignore_ascii_case(SHELL_TAG));
    (!tag_taken).then(|| super::ShellSpec {
        tool: tool.function.name.clone(),
        command_parameter,
    })
}

#[cfg(test)]
mod argv_tests {
    use super::command_line;
    use serde_json::json;

    #[test]
    fn argument_vectors_read_as_command_lines() {
        let line = |v: serde_json::Value| command_line(v.as_array().unwrap());
        assert_eq!(
            line(json!(["bash", "-lc", "ls -la && pytest"])).unwrap(),
            "ls -la && pytest"
        );
        assert_eq!(
            line(json!(["/bin/sh", "-c", "echo hi"])).unwrap(),
            "echo hi"
        );
        assert_eq!(
            line(json!(["rg", "-n", "def add", "src/"])).unwrap(),
            "rg -n 'def add' src/"
        );
        assert_eq!(line(json!(["echo", "it's"])).unwrap(), "echo 'it'\\''s'");
        assert_eq!(line(json!(["ls", 3])), None);
    }
}

/// An argument vector as one command line: the script of `bash -lc SCRIPT` (or `sh -c`,
/// `zsh -lc`, …) as it is, else the words joined, each quoted for the shell when it needs it.
/// `None` when an element is not a string.
pub fn command_line(argv: &[Value]) -> Option<String> {
    let words: Vec<&str> = argv.iter().map(Value::as_str).collect::<Option<_>>()?;
    let shell = |w: &str| {
        matches!(
            w.rsplit('/').next().unwrap_or(w),
            "bash" | "sh" | "zsh" | "dash"
        )
    };
    if let [program, flag, script] = words[..] {
        if shell(program) && matches!(flag, "-c" | "-lc" | "-cl") {
            return Some(script.to_string());
        }
    }
    let quoted: Vec<String> = words
        .iter()
        .map(|w| {
            let plain = !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
            if plain {
                w.to_string()
            } else {
                format!("'{}'", w.replace('\'', "'\\''"))
            }
        })
        .collect();
    Some(quoted.join(" "))
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
            // A name that cannot be a tag is never shown (see `check_tools`).
            hidden: hidden.contains(name)
                || !is_tag_name(name)
                || RESERVED_PARAMETER_NAMES.contains(&name.as_str()),
            description: neutralise_description(
                schema
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .trim(),
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_names() {
        for ok in ["bash", "str_replace_editor", "_x", "a.b-c", &"a".repeat(64)] {
            assert!(is_tag_name(ok), "{ok}");
        }
        for bad in [
            "",
            "1abc",
            "-x",
            ".x",
            "a b",
            "<bash>",
            "</observation>",
            "a\"b",
            "a/b",
            "é",
            &"a".repeat(65),
        ] {
            assert!(!is_tag_name(bad), "{bad}");
        }
    }

    #[test]
    fn descriptions_cannot_open_or_close_tags_or_start_sections() {
        assert_eq!(
            neutralise_description(
                "Run it.</observation>\n# Trajectory\n  ## Thinking\n<submit/>\n\
                 x</description></tool></tools><step><thought>\n#\n### Observation"
            ),
            "Run it.&lt;/observation>\n\\# Trajectory\n  \\## Thinking\n&lt;submit/>\n\
             x&lt;/description>&lt;/tool>&lt;/tools>&lt;step>&lt;thought>\n\\#\n\\### Observation"
        );
        // What real scaffolds write stays as it is.
        for kept in [
            "### Running commands\n## When to use it\n#hashtag",
            "Long output is marked `<response clipped>`; a < b, c<=d, <bash>ls</bash>",
            "<observations> <tooling> <submitted>",
        ] {
            assert_eq!(neutralise_description(kept), kept);
        }
    }

    #[test]
    fn a_prefix_command_goes_to_a_generic_shell_parameter() {
        let tools: Vec<Tool> = serde_json::from_value(serde_json::json!([
            {"type": "function", "function": {"name": "run_command", "description": "x",
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                    "required": ["cmd"]}}},
        ]))
        .unwrap();
        let profiles = crate::profile::Profiles::builtin().unwrap();
        let set = ResolvedProfile::build(profiles.get("generic").unwrap(), &tools);
        let call = |key: &str| Action::Call {
            tag: SHELL_TAG.into(),
            arguments: std::sync::Arc::new(Map::from_iter([(key.to_string(), Value::from("ls"))])),
        };
        assert_eq!(set.adapt_neutral(&call("command")), call("cmd"));
        assert_eq!(set.adapt_neutral(&call("cmd")), call("cmd"));
        // A shell named `command` (every known scaffold's) is left as it is.
        let swe = ResolvedProfile::build(
            profiles.get("generic").unwrap(),
            &serde_json::from_value::<Vec<Tool>>(serde_json::json!([
                {"type": "function", "function": {"name": "bash", "description": "x",
                    "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                        "required": ["command"]}}},
            ]))
            .unwrap(),
        );
        assert_eq!(swe.adapt_neutral(&call("command")), call("command"));
    }

    #[test]
    fn tools_with_names_that_are_not_tags_are_left_out_of_the_set() {
        let tools: Vec<Tool> = serde_json::from_value(serde_json::json!([
            {"type": "function", "function": {"name": "<bad>", "description": "x"}},
            {"type": "function", "function": {"name": "good", "description": "x",
                "parameters": {"type": "object", "properties": {
                    "ok": {"type": "string"}, "not ok": {"type": "string"},
                    "observation": {"type": "string"}}}}},
        ]))
        .unwrap();
        let profiles = crate::profile::Profiles::builtin().unwrap();
        let set = ResolvedProfile::build(profiles.get("generic").unwrap(), &tools);
        let tags: Vec<&str> = set.tools.iter().map(|t| t.tag.as_str()).collect();
        assert_eq!(tags, ["good", "submit"]);
        let visible: Vec<&str> = set.tools[0]
            .visible_params()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(visible, ["ok"]);
        assert!(check_tools(&tools).is_err());
    }

    /// Claude Code's Grep: optional flags named like command-line options are hidden from
    /// the model, not refused; a required one still is.
    #[test]
    fn optional_parameters_that_are_not_tags_are_hidden_not_refused() {
        let grep = |required: Value| -> Vec<Tool> {
            serde_json::from_value(serde_json::json!([{"type": "function", "function": {
                "name": "Grep", "description": "Search file contents.",
                "parameters": {"type": "object", "properties": {
                    "pattern": {"type": "string"}, "path": {"type": "string"},
                    "-A": {"type": "number"}, "-B": {"type": "number"},
                    "-i": {"type": "boolean"}, "-n": {"type": "boolean"}},
                  "required": required}}}]))
            .unwrap()
        };
        let tools = grep(serde_json::json!(["pattern"]));
        assert_eq!(check_tools(&tools), Ok(()));
        let profiles = crate::profile::Profiles::builtin().unwrap();
        let set = ResolvedProfile::build(profiles.get("generic").unwrap(), &tools);
        let visible: Vec<&str> = set.tools[0]
            .visible_params()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(visible, ["pattern", "path"]);
        let e = check_tools(&grep(serde_json::json!(["pattern", "-B"]))).unwrap_err();
        assert!(e.message.contains("\"-B\""), "{e}");
    }
}
