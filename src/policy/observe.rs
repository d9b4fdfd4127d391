//! Reading an action's observation for two facts (issue 17; docs/report.md "Successful
//! edit"): did an edit fail ([`edit_failed`]), and did the command report any error at all
//! ([`reports_error`])? An edit that failed changed nothing we can count on, so it neither
//! ends a degenerate loop nor counts as an autonomous edit in `report`.

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

/// Phrases by which an editor tool or the shell says that a write did not happen, anywhere in
/// the observation (case-sensitive): editor refusals (SWE-agent, OpenHands), the shell's and
/// `sed`'s file errors, `patch` and `git apply` failures.
pub const EDIT_FAILURE_PHRASES: &[&str] = &[
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
    // patch, git apply
    "saving rejects to file",
    "can't find file to patch",
    "patch failed",
    "patch does not apply",
    "corrupt patch",
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

/// Whether an edit's observation says the write did not happen: none of [`EDITOR_SUCCESS`] on
/// its first line, and a phrase of [`EDIT_FAILURE_PHRASES`].
///
/// Only the write's own failure counts, not the exit status or a traceback: a command that
/// edits and then runs the tests (`sed -i … && pytest`) has a failing exit status and a
/// traceback whenever the tests fail, while its edit happened (with `&&` the tests only run
/// when the edit succeeded). A failed write says so (`sed: can't read …: No such file or
/// directory`, `No replacement was performed`).
pub fn edit_failed(observation: &str) -> bool {
    let first = observation.lines().next().unwrap_or_default();
    !EDITOR_SUCCESS.iter().any(|p| first.contains(p))
        && EDIT_FAILURE_PHRASES.iter().any(|p| observation.contains(p))
}

/// Whether an observation reports any error: none of [`EDITOR_SUCCESS`] on its first line,
/// and any of: a phrase of [`EDIT_FAILURE_PHRASES`]; a Python traceback; a line starting
/// (after spaces) with `ERROR`, `Error:`, `error:` or `E: `; a non-zero exit status after one
/// of the exit markers (separators ` :="'>-` and tabs between marker and number). `report`
/// reads a command that reported no error as showing that the files it names exist.
pub fn reports_error(observation: &str) -> bool {
    let first = observation.lines().next().unwrap_or_default();
    if EDITOR_SUCCESS.iter().any(|p| first.contains(p)) {
        return false;
    }
    EDIT_FAILURE_PHRASES.iter().any(|p| observation.contains(p))
        || observation.contains("Traceback (most recent call last)")
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
    use super::{edit_failed, reports_error};

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
    fn an_edit_fails_only_when_the_write_says_so() {
        // The write failed.
        for text in [
            "No replacement was performed, old_str `x` did not appear verbatim in /a.py.",
            "sed: can't read src/x.py: No such file or directory",
            "{\"returncode\": 2, \"output\": \"sed: -e expression #1, char 9: unterminated `s' command\"}",
            "1 out of 1 hunk FAILED -- saving rejects to file a.py.rej",
            "error: patch failed: src/a.py:10\nerror: src/a.py: patch does not apply",
        ] {
            assert!(edit_failed(text), "{text}");
        }
        // The write happened; what ran after it failed.
        for text in [
            "===== 1 failed, 2 passed in 0.1s =====",
            "{\"returncode\": 1, \"output\": \"FAILED tests/test_a.py::test_x\"}",
            "Traceback (most recent call last):\n  File \"reproduce.py\", line 3\nValueError: x",
            "[The command completed with exit code 1.]",
            "The file /a.py has been edited. Here's the result of running `cat -n`:\n 3\tNo such file or directory",
        ] {
            assert!(!edit_failed(text), "{text}");
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
