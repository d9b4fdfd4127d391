//! `asap-proxy replay`: re-render and re-parse recorded steps with the current code.

/// Runs `asap-proxy replay`.
///
/// Errors: `(exit code, message)`.
pub fn run(args: &crate::cli::ReplayArgs) -> Result<(), (u8, String)> {
    let _ = args;
    Err((1, "replay: not implemented yet".into()))
}
