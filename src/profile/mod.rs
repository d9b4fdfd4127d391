//! Scaffold dialects: which tool is the shell, the editor and the end of the run, how to
//! recognise a scaffold from its `tools`, and what metadata it needs filled in.
//!
//! Profiles are data (`profiles/*.toml`, compiled in) so that a new scaffold is a file, not
//! code. Detection tries them in [`PROFILE_ORDER`] and falls back to `generic`.

mod action;
mod dialect;
mod toolset;

pub use action::Action;
pub use dialect::{
    read_mini, tools_from_prompt, Dialect, MiniBlock, MiniFormat, MINI_SUBMIT, MINI_SUBMIT_PATCH,
    TERMINUS_DURATION_S,
};

pub use toolset::{
    check_tools, is_tag_name, neutralise_description, ParamSpec, ResolvedProfile, ScaffoldReply,
    SubmitTarget, ToolDefinitionError, ToolRole, ToolSpec, EDITOR_TAG, MAX_NAME_LEN,
    RESERVED_PARAMETER_NAMES, RESERVED_TOOL_NAMES, SHELL_TAG, STRUCTURAL_TAGS, SUBMIT_TAG,
};

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::openai::chat::Tool;

/// Built-in profiles in detection order: the most specific tool sets first.
pub const PROFILE_ORDER: [(&str, &str); 15] = [
    (
        "claude-code",
        include_str!("../../profiles/claude-code.toml"),
    ),
    ("codex", include_str!("../../profiles/codex.toml")),
    ("qwen-code", include_str!("../../profiles/qwen-code.toml")),
    ("opencode", include_str!("../../profiles/opencode.toml")),
    (
        "openhands-sdk-text",
        include_str!("../../profiles/openhands-sdk-text.toml"),
    ),
    (
        "openhands-codeact-text",
        include_str!("../../profiles/openhands-codeact-text.toml"),
    ),
    (
        "terminus-2-xml",
        include_str!("../../profiles/terminus-2-xml.toml"),
    ),
    ("terminus-2", include_str!("../../profiles/terminus-2.toml")),
    (
        "mini-swe-agent-text",
        include_str!("../../profiles/mini-swe-agent-text.toml"),
    ),
    (
        "openhands-sdk",
        include_str!("../../profiles/openhands-sdk.toml"),
    ),
    (
        "openhands-codeact",
        include_str!("../../profiles/openhands-codeact.toml"),
    ),
    ("swe-agent", include_str!("../../profiles/swe-agent.toml")),
    (
        "mini-swe-agent",
        include_str!("../../profiles/mini-swe-agent.toml"),
    ),
    (
        "browsecomp-plus",
        include_str!("../../profiles/browsecomp-plus.toml"),
    ),
    ("generic", include_str!("../../profiles/generic.toml")),
];

/// One scaffold dialect, as written in its TOML file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    pub description: String,
    #[serde(default)]
    pub detect: Detect,
    #[serde(default)]
    pub shell: Option<ShellSpec>,
    /// Names of a shell tool whose scaffold is not known (the `generic` profile): without a
    /// `[shell]`, the first offered tool named one of these (case-insensitively) that takes
    /// exactly one required parameter, a string (`command`, `cmd`), is the shell: the model
    /// writes `<bash>COMMAND</bash>` and the call goes back under the tool's own name and
    /// parameter. Not when another tool is itself named `bash`.
    #[serde(default)]
    pub shell_names: Vec<String>,
    #[serde(default)]
    pub editor: Option<EditorSpec>,
    /// Tools that write one file named by a parameter (Claude Code's `Edit`, `Write`): each
    /// call is an edit of that file, as the editor's modifying commands are.
    #[serde(default)]
    pub writes: Vec<WriteSpec>,
    /// Tools that hand work to a subagent (Claude Code's `Agent`/`Task`, qwen-code's `agent`,
    /// opencode's `task`): the subagent may have changed files, so for the submit-before-edit
    /// nudge a call of one counts as an attempt to edit (not as an edit in `report`).
    #[serde(default)]
    pub delegates: Vec<String>,
    #[serde(default)]
    pub submit: SubmitSpec,
    /// Scaffold metadata parameters never shown to the model (e.g. `security_risk`).
    #[serde(default)]
    pub hidden_parameters: Vec<String>,
    /// Values filled in for these parameters wherever a tool schema declares them and the
    /// model gave none.
    #[serde(default)]
    pub parameter_defaults: Map<String, Value>,
    /// Hint observations of the nudges (ASAP failure recovery).
    pub hints: Hints,
    /// Content dialect of a scaffold that sends no tools (`mini_text`, `terminus_json`): the
    /// model gets a shell and `<submit/>`, the reply is written in the scaffold's format.
    #[serde(default)]
    pub dialect: Option<crate::profile::Dialect>,
    /// Built-in demonstration rendered when no task prefix matches (`prefix::BUILTIN`).
    #[serde(default)]
    pub default_prefix: Option<String>,
    /// How many leading user messages form the task; later ones before the first assistant
    /// message are scaffold feedback. Absent: all of them are the task.
    #[serde(default)]
    pub task_user_messages: Option<usize>,
    /// How the scaffold wraps command output in its tool messages; decoded before rendering
    /// so that live observations read like the prefix's plain-text ones.
    #[serde(default)]
    pub tool_output: ToolOutput,
}

/// The shape of a scaffold's tool-message content.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolOutput {
    /// Plain text, rendered as it is.
    #[default]
    Text,
    /// A JSON object `{"returncode": N, "output": "…"}` (mini-swe-agent 2.x `mini.yaml`; long
    /// outputs as `output_head`/`output_tail`/`elided_chars`, plus `exception_info`). Rendered
    /// as the output text, a non-zero return code as a last line `[exit status N]`; content
    /// that is not such an object is rendered as it is.
    ReturncodeJson,
}

/// Hint observations the proxy shows the model with a nudge. Written in the neutral
/// vocabulary (`<submit/>`), never task-specific.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hints {
    /// After a submit before any file edit.
    pub submit_before_edit: String,
    /// After an action identical to the previous one.
    pub repeated_action: String,
}

/// Detection rule over the request's tool names. Empty rule: matches any request.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Detect {
    /// All of these tool names are offered.
    #[serde(default)]
    pub all_of: Vec<String>,
    /// Exactly these tool names are offered (any order).
    #[serde(default)]
    pub only: Option<Vec<String>>,
    /// The request offers no tools at all.
    #[serde(default)]
    pub no_tools: bool,
    /// One of these strings occurs in the system or first user message (format instructions).
    #[serde(default)]
    pub text_any: Vec<String>,
}

/// The scaffold's shell tool; the model writes it as `<bash>command</bash>`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellSpec {
    pub tool: String,
    pub command_parameter: String,
}

/// The scaffold's file editor; the model writes it as `<str_replace_editor>`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditorSpec {
    pub tool: String,
    /// Values of the editor's `command` parameter that modify files.
    #[serde(default)]
    pub modifying_commands: Vec<String>,
}

/// A tool that writes the file its `path_parameter` names (none: files its input names in its
/// own form, such as Codex's `apply_patch`; an in-place write of an unknown file, as `git
/// apply` is).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteSpec {
    pub tool: String,
    #[serde(default)]
    pub path_parameter: Option<String>,
    /// How it writes: `in_place` (the file must exist: a string replacement), `overwrite`
    /// (writes the whole file, making it when missing) or `create` (fails on an existing file).
    pub kind: WritesAs,
}

/// How a [`WriteSpec`] tool writes its file (the policy's `WriteKind`, which decides whether
/// the file was the repository's or one the trajectory made).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WritesAs {
    InPlace,
    Overwrite,
    Create,
}

/// How `<submit/>` reaches the scaffold: the first of `tools` the request offers; else the
/// shell `command`; else a plain content reply.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitSpec {
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub message_parameter: Option<String>,
    #[serde(default)]
    pub default_message: Option<String>,
    /// The shell command that ends the run (mini-swe-agent's sentinel): a shell command that
    /// starts with it reads back as `<submit/>`.
    #[serde(default)]
    pub command: Option<String>,
    /// Appended to `command` when the proxy sends `<submit/>` (mini-swe-agent: print the
    /// repository's patch after the sentinel, see `profiles/mini-swe-agent.toml`).
    #[serde(default)]
    pub command_suffix: Option<String>,
}

/// Profile load or selection failure.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("profile file {file}: {source}")]
    Parse {
        file: String,
        source: Box<toml::de::Error>,
    },
    #[error("unknown profile `{0}` (known: {1})")]
    Unknown(String, String),
}

/// The loaded profiles, in detection order.
#[derive(Debug, Clone)]
pub struct Profiles {
    profiles: Vec<Profile>,
}

impl Profiles {
    /// Parses the built-in profiles. Fails only if a compiled-in file is broken.
    pub fn builtin() -> Result<Self, ProfileError> {
        let profiles = PROFILE_ORDER
            .iter()
            .map(|(file, text)| {
                toml::from_str::<Profile>(text).map_err(|e| ProfileError::Parse {
                    file: format!("profiles/{file}.toml"),
                    source: Box::new(e),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { profiles })
    }

    /// Names of all profiles, in detection order.
    pub fn names(&self) -> Vec<&str> {
        self.profiles.iter().map(|p| p.name.as_str()).collect()
    }

    /// Profile by name.
    pub fn get(&self, name: &str) -> Result<&Profile, ProfileError> {
        self.profiles
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| ProfileError::Unknown(name.to_string(), self.names().join(", ")))
    }

    /// The first profile whose rule matches the offered tools and the prompt `text` (system
    /// and first user message); `generic` matches everything.
    pub fn detect(&self, tools: &[Tool], text: &str) -> &Profile {
        let names: Vec<&str> = tools.iter().map(|t| t.function.name.as_str()).collect();
        self.profiles
            .iter()
            .find(|p| p.detect.matches(&names, text))
            .unwrap_or_else(|| &self.profiles[self.profiles.len() - 1])
    }
}

impl Detect {
    fn matches(&self, names: &[&str], text: &str) -> bool {
        if self.no_tools && !names.is_empty() {
            return false;
        }
        if !self.text_any.is_empty() && !self.text_any.iter().any(|t| text.contains(t.as_str())) {
            return false;
        }
        let all = self.all_of.iter().all(|n| names.contains(&n.as_str()));
        let only = self.only.as_ref().is_none_or(|only| {
            names.len() == only.len() && only.iter().all(|n| names.contains(&n.as_str()))
        });
        all && only
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::chat::ChatCompletionRequest;

    fn fixture_tools(name: &str) -> Vec<Tool> {
        let path = format!(
            "{}/tests/fixtures/requests/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let body = std::fs::read(path).unwrap();
        ChatCompletionRequest::from_slice(&body)
            .unwrap()
            .tools
            .to_vec()
    }

    fn fixture_text(name: &str) -> String {
        let path = format!(
            "{}/tests/fixtures/requests/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let r = ChatCompletionRequest::from_slice(&std::fs::read(path).unwrap()).unwrap();
        r.detection_text()
    }

    #[test]
    fn detects_each_fixture_scaffold() {
        let profiles = Profiles::builtin().unwrap();
        for (file, want) in [
            ("swe-agent-1.json", "swe-agent"),
            ("openhands-sdk-1.json", "openhands-sdk"),
            ("openhands-codeact-1.json", "openhands-codeact"),
            ("mini-swe-agent-1.json", "mini-swe-agent"),
            ("browsecomp-plus-1.json", "browsecomp-plus"),
            ("terminus-2-1.json", "terminus-2"),
            ("openhands-codeact-text-1.json", "openhands-codeact-text"),
            ("openhands-sdk-text-1.json", "openhands-sdk-text"),
            ("claude-code-1.json", "claude-code"),
            ("qwen-code-1.json", "qwen-code"),
            ("opencode-1.json", "opencode"),
        ] {
            assert_eq!(
                profiles
                    .detect(&fixture_tools(file), &fixture_text(file))
                    .name,
                want,
                "{file}"
            );
        }
    }

    /// Codex 0.171's unified exec (`exec_command` with `cmd`, `write_stdin`) is the `codex`
    /// profile: `exec_command` is the shell and gets the demonstration.
    #[test]
    fn codex_is_detected_by_its_unified_exec() {
        let tools: Vec<Tool> = serde_json::from_value(serde_json::json!([
            {"type": "function", "function": {"name": "exec_command", "parameters": {"type": "object",
                "properties": {"cmd": {"type": "string"}, "workdir": {"type": "string"}}, "required": ["cmd"]}}},
            {"type": "function", "function": {"name": "write_stdin", "parameters": {"type": "object",
                "properties": {"session_id": {"type": "number"}, "chars": {"type": "string"}}, "required": ["session_id"]}}},
            {"type": "function", "function": {"name": "view_image", "parameters": {"type": "object",
                "properties": {"path": {"type": "string"}}, "required": ["path"]}}}
        ]))
        .unwrap();
        let profiles = Profiles::builtin().unwrap();
        let codex = profiles.detect(&tools, "");
        assert_eq!(codex.name, "codex");
        assert_eq!(codex.default_prefix.as_deref(), Some("shell-demo"));
        let set = ResolvedProfile::build(codex, &tools);
        assert_eq!(
            set.to_scaffold(
                &crate::profile::Action::Call {
                    tag: "bash".into(),
                    arguments: std::sync::Arc::new(serde_json::Map::from_iter([(
                        "cmd".to_string(),
                        serde_json::json!("ls")
                    )])),
                },
                ""
            ),
            ScaffoldReply::ToolCall {
                name: "exec_command".into(),
                arguments: serde_json::Map::from_iter([(
                    "cmd".to_string(),
                    serde_json::json!("ls")
                )]),
            }
        );
    }

    /// The SDK's text mode is told from V0's by its `terminal` function, wherever the SDK
    /// lists it (an agent may order its tools differently).
    #[test]
    fn sdk_text_mode_is_detected_whatever_the_order_of_its_functions() {
        let profiles = Profiles::builtin().unwrap();
        let text = fixture_text("openhands-sdk-text-1.json")
            .replace("#1: terminal ----", "#9: terminal ----")
            .replace("#2: file_editor ----", "#1: file_editor ----");
        assert_eq!(profiles.detect(&[], &text).name, "openhands-sdk-text");
    }

    #[test]
    fn unknown_profile_lists_known_ones() {
        let profiles = Profiles::builtin().unwrap();
        let err = profiles.get("nope").unwrap_err().to_string();
        assert!(
            err.contains("swe-agent") && err.contains("generic"),
            "{err}"
        );
    }
}
