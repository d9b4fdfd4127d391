//! `asap-proxy report`: the paper's metrics over trace logs (ASAP §4: Pass@k with the unbiased
//! estimator, Intersection@n, and the behaviour breakdown per trajectory).
//!
//! Input is a list of [`Trajectory`] values (one per session), built from trace files by
//! [`load`]; everything else here is pure and works on those values.

pub mod load;

use crate::conversation::Action;
use crate::session::NudgeKind;

/// One session's trajectory as the report sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Trajectory {
    /// The session id (the trace file's stem).
    pub session: String,
    /// Model or checkpoint label (`--label` of `serve`, else the request's `model`).
    pub label: String,
    /// Task key: the `instance_id` when known, else `task-<12 hex of sha256(task text)>`.
    pub instance_id: String,
    /// Run index given by the client (`X-ASAP-Run` header); `None` when the proxy only knew
    /// the order of sessions (the report then numbers runs by start time).
    pub run: Option<usize>,
    /// Unix milliseconds of the session's first record (orders runs without an index).
    pub start_ms: u64,
    pub profile: String,
    pub format: String,
    /// Prefix id and K, when a prefix was rendered.
    pub prefix: Option<(String, usize)>,
    /// One entry per completion call of the model, in order (side calls excluded).
    pub turns: Vec<Turn>,
    /// Why the proxy ended the trajectory (`Termination`'s snake_case `reason`), if it did.
    pub termination: Option<String>,
    /// The last error returned to the client (backend failure, bad request), if the
    /// trajectory's last step failed.
    pub error: Option<String>,
}

/// One completion call of the model within a trajectory.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Turn {
    /// 0-based step (actions before it in the history).
    pub step: usize,
    /// Completion call within the request: 0, then 1 and 2 after nudges.
    pub attempt: usize,
    /// `None` when the completion parsed into an action; else the parse failure class
    /// (`no_action`, `unknown_tool`, `unclosed_tag`, `missing_parameter`,
    /// `invalid_parameter`).
    pub parse_error: Option<String>,
    /// The parsed action in neutral form, when parsing succeeded.
    pub action: Option<Action>,
    /// The shell command, when the action is a call of the profile's shell tool.
    pub shell_command: Option<String>,
    /// The action modifies a file (the policy's edit rule: an editor command that writes, or
    /// a shell command that writes files).
    pub is_edit: bool,
    /// The action is the finish action (`<submit/>`).
    pub is_submit: bool,
    /// The output was rejected with this nudge (not sent to the scaffold).
    pub nudge: Option<NudgeKind>,
    /// The proxy ended the trajectory with this output.
    pub terminated: bool,
    /// What the scaffold sent back for this action (the tool result in the next request),
    /// when there was a next request.
    pub observation: Option<String>,
}

/// Runs `asap-proxy report`: reads the traces, computes, prints to standard output.
///
/// Errors: `(exit code, message)`: 2 for bad arguments or unreadable inputs, 1 otherwise.
pub fn run(args: &crate::cli::ReportArgs) -> Result<(), (u8, String)> {
    let _ = args;
    Err((1, "report: not implemented yet".into()))
}
