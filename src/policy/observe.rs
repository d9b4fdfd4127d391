//! Reading an action's observation for one fact: did the environment report an error? Used
//! for "successful edit" (issue 17): an edit whose observation reports an error changed
//! nothing we can count on, so it neither ends a degenerate loop nor counts as an autonomous
//! edit in `report`. The rule is documented in `docs/report.md` ("Successful edit").

/// Phrases that open an editor tool's success message (SWE-agent's and OpenHands'
/// `str_replace_editor`/`file_editor`, which share Anthropic's reference wording). When the
/// observation's first line holds one, the edit happened, whatever the snippet after it shows
/// (a snippet is file content and may hold any text).
pub const EDITOR_SUCCESS: &[&str] = &[
    "has been edited",
    "File created successfully",
    "has been inserted",
    "Last edit to",
];

/// Phrases that report a failed command or a rejected edit, anywhere in the observation
/// (case-sensitive): editor refusals (SWE-agent, OpenHands), shell and `sed` errors, a Python
/// traceback.
pub const ERROR_PHRASES: &[&str] = &[
    // str_replace_editor / file_editor refusals
    "No replacement was performed",
    "did not appear verbatim",
    "Multiple occurrences of old_str",
    "Please provide a valid path",
    "Cannot overwrite files",
    "File already exists at",
    "is required for command",
    "Invalid `",
    "No edit history found",
    "Your proposed edit has introduced new syntax error",
    "Your edit was not applied",
    // shell
    "No such file or directory",
    "Permission denied",
    "command not found",
    "syntax error",
    "Read-only file system",
    "Is a directory",
    "can't read",
    "cannot open",
    "unterminated `s' command",
    "unknown option to `s'",
    "sed: -e expression",
    "Traceback (most recent call last)",
];

/// Words after which a number is an exit status (case-insensitive): `exit code 1`,
/// `exit status 2`, `return code 1`, `"returncode": 1` (mini-swe-agent's JSON),
/// `<returncode>1</returncode>`, `exit_code=1`, OpenHands' `[The command completed with exit
/// code 1.]`.
const EXIT_MARKERS: &[&str] = &[
    "exit code",
    "exit status",
    "return code",
    "returncode",
    "return_code",
    "exit_code",
    "exitcode",
];

/// Whether an observation reports an error: none of [`EDITOR_SUCCESS`] on its first line, and
/// any of: a phrase of [`ERROR_PHRASES`]; a line starting with `ERROR`, `Error:`, `error:` or
/// `E: `; a non-zero exit status after one of the exit markers (separators ` :="'>-` and tabs
/// between marker and number).
///
/// The whole observation counts: a command that edits and then runs a failing test
/// (`sed -i … && pytest`) reports an error too when its output shows a non-zero exit status
/// (mini-swe-agent, OpenHands) or a traceback. A test report alone (SWE-agent's bash output:
/// `1 failed, 2 passed`) is not an error here; `report` treats an edit whose own test run
/// failed as unsuccessful itself (`report::behaviour`).
pub fn reports_error(observation: &str) -> bool {
    let first = observation.lines().next().unwrap_or_default();
    if EDITOR_SUCCESS.iter().any(|p| first.contains(p)) {
        return false;
    }
    ERROR_PHRASES.iter().any(|p| observation.contains(p))
        || observation.lines().any(|line| {
            let line = line.trim_start();
            line.starts_with("ERROR")
                || line.starts_with("Error:")
                || line.starts_with("error:")
                || line.starts_with("E: ")
        })
        || nonzero_exit(observation)
}

/// A non-zero number right after an exit marker (see [`EXIT_MARKERS`]).
fn nonzero_exit(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    EXIT_MARKERS.iter().any(|marker| {
        lower.match_indices(marker).any(|(i, m)| {
            let rest =
                lower[i + m.len()..].trim_start_matches([' ', '\t', ':', '=', '"', '\'', '>', '-']);
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            !digits.is_empty() && digits.chars().any(|d| d != '0')
        })
    })
}

#[cfg(test)]
mod tests {
    use super::reports_error;

    #[test]
    fn editor_and_shell_errors_are_reported() {
        let errors = [
            "No replacement was performed, old_str `x = 1` did not appear verbatim in /testbed/a.py.",
            "ERROR:\nInvalid `path` parameter: /testbed/b.py. The path /testbed/b.py does not exist.",
            "File already exists at: /testbed/r.py. Cannot overwrite files using command `create`.",
            "sed: can't read src/x.py: No such file or directory",
            "bash: line 1: /testbed/a.py: Permission denied",
            "{\"returncode\": 1, \"output\": \"\"}",
            "<returncode>2</returncode>\n<output>\n</output>",
            "[The command completed with exit code 1.]",
            "  File \"x.py\", line 3\nTraceback (most recent call last):\n",
            "Your proposed edit has introduced new syntax error(s).",
        ];
        for text in errors {
            assert!(reports_error(text), "{text}");
        }
    }

    #[test]
    fn successes_are_not_errors() {
        let fine = [
            "",
            "The file /testbed/a.py has been edited. Here's the result of running `cat -n`:\n    12\traise ValueError: no\n",
            "File created successfully at: /testbed/reproduce.py",
            "{\"returncode\": 0, \"output\": \"\"}",
            "[The command completed with exit code 0.]",
            "exit status 0",
            "Your command ran successfully and did not produce any output.",
        ];
        for text in fine {
            assert!(!reports_error(text), "{text}");
        }
    }
}
