//! Golden trajectories for the behaviour definitions of `docs/report.md` ("Behaviour
//! definitions", "Successful edit", "Files the trajectory created", "How the run ended", the
//! test-command and failed-test rules), written from the document alone: every expected value
//! is computed by hand in a comment beside it, then checked against `Behaviour::of` and
//! `Report::build`.
//!
//! Turns are built the way the report builds them: the action's edit flag, write targets,
//! submit flag and shell command come from the real classifiers (`policy::is_edit`,
//! `policy::edit_targets`, `policy::is_submit`) over the tools of a real scaffold request
//! (`tests/fixtures/requests/*.json`), and the observations are the texts the scaffolds send
//! back (SWE-agent's `str_replace_editor`, bash output, mini-swe-agent's tool output). A few
//! trajectories are recorded through the real proxy over loopback and read back with
//! `report::load::trajectory`.

use std::sync::OnceLock;

use serde_json::{json, Value};

use asap_proxy::openai::chat::ChatCompletionRequest;
use asap_proxy::policy::{self, edit_targets};
use asap_proxy::profile::Action;
use asap_proxy::profile::{Profiles, ResolvedProfile, ToolRole};
use asap_proxy::report::behaviour::Ending;
use asap_proxy::report::{load, Attempt, Behaviour, Report, Trajectory};
use asap_proxy::session::NudgeKind;

use crate::util::backend::Scripted;
use crate::util::proxy::{serve, serve_with};
use crate::util::turns::{call, nudged, numbered, terminated, trajectory, unparsed};
use crate::util::{continue_with, fixture_json, request};

// ---------------------------------------------------------------------------------------------
// Tools of real scaffold requests, built like `src/policy/mod.rs`'s tests build them

fn toolset(fixture: &str) -> ResolvedProfile {
    let path = crate::util::fixture_path(&format!("requests/{fixture}"));
    let request = ChatCompletionRequest::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let profiles = Profiles::builtin().unwrap();
    ResolvedProfile::build(
        profiles.detect(&request.tools, &request.detection_text()),
        &request.tools,
    )
}

/// SWE-agent: `bash`, `str_replace_editor`, `submit`.
fn swe() -> &'static ResolvedProfile {
    static TOOLS: OnceLock<ResolvedProfile> = OnceLock::new();
    TOOLS.get_or_init(|| toolset("swe-agent-1.json"))
}

/// mini-swe-agent: `bash` only; `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` ends the run.
fn mini() -> &'static ResolvedProfile {
    static TOOLS: OnceLock<ResolvedProfile> = OnceLock::new();
    TOOLS.get_or_init(|| toolset("mini-swe-agent-1.json"))
}

// ---------------------------------------------------------------------------------------------
// Observation texts as the scaffolds write them

/// SWE-agent's `str_replace_editor` after a successful `str_replace`.
fn edited(path: &str, line: &str) -> String {
    format!(
        "The file {path} has been edited. Here's the result of running `cat -n` on a snippet of \
         {path}:\n     1\tdef add(a, b):\n     2\t    {line}\n     3\t\nReview the changes and \
         make sure they are as expected. Edit the file again if necessary."
    )
}

/// SWE-agent's `str_replace_editor` when `old_str` is not in the file.
fn not_replaced(path: &str, old: &str) -> String {
    format!("No replacement was performed, old_str `{old}` did not appear verbatim in {path}.")
}

/// SWE-agent's `str_replace_editor` after `create`.
fn created(path: &str) -> String {
    format!("File created successfully at: {path}")
}

/// SWE-agent's bash tool when a command prints nothing.
const QUIET: &str = "Your command ran successfully and did not produce any output.";

/// `python reproduce.py` before the fix.
const REPRO_TRACEBACK: &str =
    "Traceback (most recent call last):\n  File \"/testbed/reproduce.py\", \
line 3, in <module>\n    assert add(2, 3) == 5, add(2, 3)\nAssertionError: -1";

/// pytest with one failing test (the summary line "1 failed, 2 passed in 0.12s").
const PYTEST_FAILED: &str = "============================= test session starts ==============================\n\
platform linux -- Python 3.11.9, pytest-8.2.0, pluggy-1.5.0\nrootdir: /testbed\ncollected 3 items\n\n\
tests/test_calc.py .F.                                                   [100%]\n\n\
=================================== FAILURES ===================================\n\
_________________________________ test_add_neg _________________________________\n\n    \
def test_add_neg():\n>       assert add(-2, 3) == 1\nE       assert 5 == 1\nE        +  where 5 = add(-2, 3)\n\n\
tests/test_calc.py:9: AssertionError\n\
=========================== short test summary info ============================\n\
FAILED tests/test_calc.py::test_add_neg - assert 5 == 1\n\
========================= 1 failed, 2 passed in 0.12s ==========================";

/// pytest with every test passing.
const PYTEST_PASSED: &str = "============================= test session starts ==============================\n\
collected 3 items\n\ntests/test_calc.py ...                                                   [100%]\n\n\
============================== 3 passed in 0.05s ===============================";

/// The task statement of the hand-built SWE-agent trajectories. It names no file, so a file
/// is "seen" only through the trajectory's own commands.
const TASK: &str = "<uploaded_files>\n/testbed\n</uploaded_files>\nI've uploaded a python code \
repository in the directory /testbed. Consider the following PR description:\n\n<pr_description>\n\
`add(2, 3)` returns -1: the function subtracts instead of adding.\n</pr_description>\n\n\
Can you help me implement the necessary changes to the repository so that the requirements \
specified in the <pr_description> are met?";

// ---------------------------------------------------------------------------------------------
// Turns from real actions

/// A turn whose flags come from the real classifiers over `tools`, as `report::load` fills
/// them.
fn turn_with(tools: &ResolvedProfile, action: Action, observation: Option<&str>) -> Attempt {
    let shell_command = match &action {
        Action::Call { tag, arguments } => match tools.get(tag).map(|t| &t.role) {
            Some(ToolRole::Shell { command_parameter }) => arguments
                .get(command_parameter)
                .and_then(Value::as_str)
                .map(str::to_string),
            _ => None,
        },
        Action::Submit { .. } => None,
    };
    Attempt {
        is_edit: policy::is_edit(&action, tools),
        edit_targets: edit_targets(&action, tools),
        is_submit: policy::is_submit(&action, tools),
        shell_command,
        observation: observation.map(str::to_string),
        action: Some(action),
        ..Attempt::default()
    }
}

/// SWE-agent bash command and its output.
fn bash(command: &str, observation: &str) -> Attempt {
    turn_with(
        swe(),
        call("bash", &[("command", command)]),
        Some(observation),
    )
}

/// SWE-agent bash command whose output the scaffold never sent (the run's last action).
fn bash_unanswered(command: &str) -> Attempt {
    turn_with(swe(), call("bash", &[("command", command)]), None)
}

/// mini-swe-agent bash command and its output.
fn mini_bash(command: &str, observation: &str) -> Attempt {
    turn_with(
        mini(),
        call("bash", &[("command", command)]),
        Some(observation),
    )
}

fn str_replace(path: &str, old: &str, new: &str, observation: &str) -> Attempt {
    turn_with(
        swe(),
        call(
            "str_replace_editor",
            &[
                ("command", "str_replace"),
                ("path", path),
                ("old_str", old),
                ("new_str", new),
            ],
        ),
        Some(observation),
    )
}

fn create(path: &str, text: &str, observation: &str) -> Attempt {
    turn_with(
        swe(),
        call(
            "str_replace_editor",
            &[("command", "create"), ("path", path), ("file_text", text)],
        ),
        Some(observation),
    )
}

fn view(path: &str, observation: &str) -> Attempt {
    turn_with(
        swe(),
        call("str_replace_editor", &[("command", "view"), ("path", path)]),
        Some(observation),
    )
}

/// The model's `<submit/>`, its flags from the classifiers (the last action: no observation).
fn submit() -> Attempt {
    turn_with(swe(), Action::Submit { message: None }, None)
}

/// The golden SWE-agent trajectory of `calc-1` on `task`, numbered as the proxy numbers it.
fn golden(task: &str, turns: Vec<Attempt>) -> Trajectory {
    Trajectory {
        task_text: task.into(),
        ..trajectory("golden", "golden", "calc-1", numbered(turns))
    }
}

fn of(turns: Vec<Attempt>) -> Behaviour {
    Behaviour::of(&golden(TASK, turns), None)
}

fn ended(turns: Vec<Attempt>, termination: Option<&str>, error: Option<&str>) -> Behaviour {
    let mut t = golden(TASK, turns);
    t.termination = termination.map(str::to_string);
    t.error = error.map(str::to_string);
    Behaviour::of(&t, None)
}

const SRC: &str = "/testbed/src/calc.py";
const REPRO: &str = "/testbed/reproduce.py";
const REPRO_TEXT: &str =
    "from src.calc import add\n\nassert add(2, 3) == 5, add(2, 3)\nprint('ok')\n";
const PYTEST: &str = "cd /testbed && python -m pytest tests/test_calc.py -q";

/// A successful fix of `src/calc.py` with the editor.
fn fix() -> Attempt {
    str_replace(
        SRC,
        "return a - b",
        "return a + b",
        &edited(SRC, "return a + b"),
    )
}

// ---------------------------------------------------------------------------------------------
// Parsable turns and valid tool calls: shares of ALL turns

#[test]
fn parsable_and_valid_turns_are_shares_of_all_turns() {
    // 10 turns:
    //  0 ls                       parsed            parsable, valid
    //  1 no_action                                  —
    //  2 unknown_tool             (<grep> tag)      parsable
    //  3 missing_parameter                          parsable
    //  4 invalid_parameter                          parsable
    //  5 unclosed_tag                               —
    //  6 submit, nudged           parsed            parsable, valid (nudged turns count)
    //  7 fix                      parsed            parsable, valid
    //  8 cat                      parsed            parsable, valid
    //  9 submit                   parsed            parsable, valid
    // parsable = 1 + 3 + 1 + 1 + 1 + 1 = 8; valid = 1 + 1 + 1 + 1 + 1 = 5; turns = 10.
    let b = of(vec![
        bash("ls /testbed", "README.md\nsrc\ntests"),
        unparsed("no_action"),
        unparsed("unknown_tool"),
        unparsed("missing_parameter"),
        unparsed("invalid_parameter"),
        unparsed("unclosed_tag"),
        nudged(submit(), NudgeKind::SubmitBeforeEdit),
        fix(),
        bash(
            "cat /testbed/src/calc.py",
            "def add(a, b):\n    return a + b\n",
        ),
        submit(),
    ]);
    assert_eq!(
        (b.turns, b.parsable_turns, b.valid_tool_calls),
        (10, 8, 5),
        "{b:?}"
    );

    // A terminating turn is a turn too: 2 unparsable outputs then the proxy's streak
    // termination on a third → turns 3, parsable 0, valid 0.
    let b = ended(
        vec![
            unparsed("no_action"),
            unparsed("no_action"),
            terminated(unparsed("no_action")),
        ],
        Some("unparsable"),
        None,
    );
    assert_eq!((b.turns, b.parsable_turns, b.valid_tool_calls), (3, 0, 0));

    // A terminating turn that parsed (the third `cat` the loop rule replaced) is parsable and
    // valid: 3 turns, 3 parsable, 3 valid.
    let cat = || {
        bash(
            "cat /testbed/src/calc.py",
            "def add(a, b):\n    return a - b\n",
        )
    };
    let b = ended(
        vec![cat(), cat(), terminated(cat())],
        Some("degenerate_loop"),
        None,
    );
    assert_eq!((b.turns, b.parsable_turns, b.valid_tool_calls), (3, 3, 3));

    // The doc's worked example: 10 turns, 7 parsed, 1 unknown_tool, 2 no_action → 8/10 and
    // 7/10, pooled over the label through `Report::build`.
    let mut turns: Vec<Attempt> = (0..7)
        .map(|i| bash(&format!("sed -n '{i},+5p' src/calc.py"), "x"))
        .collect();
    turns.extend([
        unparsed("unknown_tool"),
        unparsed("no_action"),
        unparsed("no_action"),
    ]);
    let report = Report::build(&[golden(TASK, turns)], None, &[1]);
    let rates = report.labels[0].behaviour.rates(false);
    let rate = |key: &str| {
        let r = rates.iter().find(|r| r.key == key).unwrap();
        (r.count, r.total)
    };
    assert_eq!(rate("parsable_turns"), (8, 10));
    assert_eq!(rate("valid_tool_calls"), (7, 10), "over all turns, not 7/8");
}

// ---------------------------------------------------------------------------------------------
// Autonomous edit

#[test]
fn autonomous_edit_is_a_successful_edit_of_a_file_the_run_did_not_create() {
    // Editor `create` of the reproduction script, then running it: one edit (any edit), no
    // repository edit → no autonomous edit.
    let b = of(vec![
        create(REPRO, REPRO_TEXT, &created(REPRO)),
        bash("cd /testbed && python reproduce.py", REPRO_TRACEBACK),
    ]);
    assert_eq!((b.edits, b.repo_edits, b.autonomous_edit), (1, 0, false));

    // `cat > reproduce.py <<EOF` (never seen before: a new file) → created, not an edit of
    // the repository.
    let heredoc = format!("cd /testbed && cat > reproduce.py <<'EOF'\n{REPRO_TEXT}EOF");
    let b = of(vec![
        bash(&heredoc, QUIET),
        bash("cd /testbed && python reproduce.py", REPRO_TRACEBACK),
    ]);
    assert_eq!((b.edits, b.repo_edits, b.autonomous_edit), (1, 0, false));

    // Editing the created file later, with the editor or `sed -i`, is still not the
    // repository: 3 edits, 0 repository edits.
    let b = of(vec![
        create(REPRO, REPRO_TEXT, &created(REPRO)),
        str_replace(
            REPRO,
            "print('ok')",
            "print('ok', add(2, 3))",
            &edited(REPRO, "print('ok', add(2, 3))"),
        ),
        bash("cd /testbed && sed -i 's/ok/fine/' reproduce.py", QUIET),
    ]);
    assert_eq!((b.edits, b.repo_edits, b.autonomous_edit), (3, 0, false));

    // The doc's example: `cat > reproduce.py <<EOF` (created), `python reproduce.py`,
    // `sed -i 's/x/y/' reproduce.py` (a created file), `sed -i 's/a/b/' src/a.py` (the
    // repository) → autonomous edit, 1 repository edit, 3 edits.
    let b = of(vec![
        bash(&heredoc, QUIET),
        bash("cd /testbed && python reproduce.py", REPRO_TRACEBACK),
        bash("cd /testbed && sed -i 's/x/y/' reproduce.py", QUIET),
        bash("cd /testbed && sed -i 's/a - b/a + b/' src/calc.py", QUIET),
    ]);
    assert_eq!((b.edits, b.repo_edits, b.autonomous_edit), (3, 1, true));

    // `sed -i` on a repository file, first thing (in place: the file existed) → yes.
    let b = of(vec![bash(
        "sed -i 's/return a - b/return a + b/' /testbed/src/calc.py",
        QUIET,
    )]);
    assert_eq!((b.repo_edits, b.autonomous_edit), (1, true));

    // `cat > src/calc.py` after `ls src` showed calc.py: an overwrite of a seen file → the
    // repository → yes.
    let rewrite = "cd /testbed && cat > src/calc.py <<'EOF'\ndef add(a, b):\n    return a + b\nEOF";
    let b = of(vec![
        bash("ls /testbed/src", "__init__.py\ncalc.py"),
        bash(rewrite, QUIET),
    ]);
    assert_eq!((b.repo_edits, b.autonomous_edit), (1, true));
    // The same write with nothing showing calc.py before it: a new file → no.
    let b = of(vec![bash(rewrite, QUIET)]);
    assert_eq!((b.edits, b.repo_edits, b.autonomous_edit), (1, 0, false));
    // The task statement naming the file is enough → yes.
    let task = format!("{TASK}\nThe function is in src/calc.py.");
    let b = Behaviour::of(&golden(&task, vec![bash(rewrite, QUIET)]), None);
    assert_eq!((b.repo_edits, b.autonomous_edit), (1, true));
    // A name that only appeared in a turn whose observation reports an error was not seen:
    // `cat src/calc.py` → "No such file or directory", then the write creates it → no.
    let b = of(vec![
        bash(
            "cat src/calc.py",
            "cat: src/calc.py: No such file or directory",
        ),
        bash(rewrite, QUIET),
    ]);
    assert_eq!((b.repo_edits, b.autonomous_edit), (0, false));

    // Failed edits do not count: "No replacement was performed" → an edit (1), not a
    // successful one → no.
    let b = of(vec![str_replace(
        SRC,
        "return a-b",
        "return a + b",
        &not_replaced(SRC, "return a-b"),
    )]);
    assert_eq!((b.edits, b.repo_edits, b.autonomous_edit), (1, 0, false));
    // `sed -i` on a missing path → sed's error → no.
    let b = of(vec![bash(
        "sed -i 's/a - b/a + b/' /testbed/calc.py",
        "sed: can't read /testbed/calc.py: No such file or directory",
    )]);
    assert_eq!((b.edits, b.autonomous_edit), (1, false));
    // An edit whose observation the scaffold never sent is not known to have happened → no.
    let b = of(vec![bash_unanswered(
        "sed -i 's/a - b/a + b/' /testbed/src/calc.py",
    )]);
    assert_eq!((b.edits, b.autonomous_edit), (1, false));
    // mini-swe-agent's JSON output: returncode 1 → an error → no; returncode 0 → yes.
    let sed = "cd /repo && sed -i 's/a - b/a + b/' src/calc.py";
    let b = of(vec![mini_bash(
        sed,
        "{\"returncode\": 1, \"output\": \"sed: -e expression #1, char 9: unterminated `s' command\\n\"}",
    )]);
    assert_eq!((b.edits, b.autonomous_edit), (1, false));
    let b = of(vec![mini_bash(
        sed,
        "{\"returncode\": 0, \"output\": \"\"}",
    )]);
    assert_eq!((b.edits, b.autonomous_edit), (1, true));

    // Creating a new source module with the editor is a creation, never an edit of the
    // repository, even where the fix needs it (doc: "create … the file is new; it joins the
    // trajectory's created files") → no.
    let b = of(vec![create(
        "/testbed/src/helpers.py",
        "def plus(a, b):\n    return a + b\n",
        &created("/testbed/src/helpers.py"),
    )]);
    assert_eq!((b.edits, b.autonomous_edit), (1, false));
}

#[test]
fn an_edit_then_a_failing_test_in_one_command_is_a_successful_edit() {
    // docs/report.md, "Successful edit": only the write's own failure counts, not the exit
    // status or the tests that ran after it. With `&&` pytest only ran because sed succeeded.
    let b = of(vec![bash(
        "cd /testbed && sed -i 's/a - b/a + b/' src/calc.py && python -m pytest tests -q",
        PYTEST_FAILED,
    )]);
    // 1 edit (successful, of the repository), 1 test run that failed.
    assert_eq!((b.edits, b.test_runs, b.failed_test), (1, 1, true));
    assert_eq!((b.repo_edits, b.autonomous_edit), (1, true), "{b:?}");
    // The same with mini-swe-agent's JSON output and its non-zero return code.
    let b = of(vec![bash(
        "cd /testbed && sed -i 's/a - b/a + b/' src/calc.py && python -m pytest tests -q",
        &format!(
            "{{\"returncode\": 1, \"output\": {}}}",
            serde_json::to_string(PYTEST_FAILED).unwrap()
        ),
    )]);
    assert_eq!((b.repo_edits, b.autonomous_edit), (1, true), "{b:?}");
    // The write itself failed: no edit, whatever ran after it.
    let b = of(vec![bash(
        "cd /testbed && sed -i 's/a - b/a + b/' src/calcs.py; python -m pytest tests -q",
        &format!("sed: can't read src/calcs.py: No such file or directory\n{PYTEST_FAILED}"),
    )]);
    assert_eq!(
        (b.edits, b.repo_edits, b.autonomous_edit),
        (1, 0, false),
        "{b:?}"
    );

    // Edit and test in one command, then another successful edit: edit → failed test → edit,
    // in that order, so a re-edit.
    let b = of(vec![
        bash(
            "cd /testbed && sed -i 's/a - b/a + b/' src/calc.py && python -m pytest tests -q",
            PYTEST_FAILED,
        ),
        str_replace(
            SRC,
            "return a + b",
            "return int(a) + int(b)",
            &edited(SRC, "return int(a) + int(b)"),
        ),
    ]);
    assert_eq!((b.repo_edits, b.failed_test), (2, true));
    assert!(b.re_edit_after_failed_test, "{b:?}");
}

// ---------------------------------------------------------------------------------------------
// Active testing and failed test seen

#[test]
fn active_testing_and_failed_test_seen() {
    // (turn, active testing, failed test seen), each alone in its trajectory.
    let cases: Vec<(Attempt, bool, bool, &str)> = vec![
        (
            bash("cd /testbed && python reproduce.py", REPRO_TRACEBACK),
            true,
            true,
            "reproduction script with a traceback",
        ),
        (
            bash("python /testbed/reproduce.py", "ok"),
            true,
            false,
            "reproduction script that passes",
        ),
        (bash(PYTEST, PYTEST_FAILED), true, true, "1 failed, 2 passed"),
        (bash(PYTEST, PYTEST_PASSED), true, false, "3 passed"),
        (
            bash(
                "cd /testbed && python -m pytest -q tests",
                "4 passed, 1 xfailed in 0.21s",
            ),
            true,
            false,
            "xfailed is not a failure",
        ),
        (
            bash(
                "cd /testbed && python -m unittest tests.test_calc",
                "F..\n======================================================================\n\
                 FAIL: test_add_neg (tests.test_calc.CalcTest)\n----------------------------------------------------------------------\n\
                 Ran 3 tests in 0.001s\n\nFAILED (failures=1)",
            ),
            true,
            true,
            "unittest FAILED (failures=1)",
        ),
        (
            mini_bash(
                "cd /repo && python reproduce_issue.py",
                "{\"returncode\": 1, \"output\": \"Traceback (most recent call last):\\n  File \\\"/repo/reproduce_issue.py\\\", line 2, in <module>\\n    assert slugify('a  b') == 'a-b'\\nAssertionError\\n\"}",
            ),
            true,
            true,
            "mini-swe-agent JSON, returncode 1",
        ),
        (
            mini_bash(
                "cd /repo && python reproduce_issue.py",
                "{\"returncode\": 0, \"output\": \"a-b\\n\"}",
            ),
            true,
            false,
            "mini-swe-agent JSON, returncode 0",
        ),
        (
            bash_unanswered(PYTEST),
            true,
            false,
            "a test run without an observation runs tests, shows nothing",
        ),
        (
            bash(
                "cat /testbed/tests/test_calc.py",
                "def test_add_neg():\n    assert add(-2, 3) == 1  # FAIL before the fix\n",
            ),
            false,
            false,
            "reading a test file is not testing (its FAIL is never looked at)",
        ),
        (
            bash("grep -rn 'def test' /testbed/tests", "tests/test_calc.py:3:def test_add():"),
            false,
            false,
            "searching tests",
        ),
        (
            bash("pip install pytest", "Requirement already satisfied: pytest"),
            false,
            false,
            "installing",
        ),
        (
            bash(
                "cd /testbed && python -c 'from src.calc import add; print(add(2, 3))'",
                "-1",
            ),
            false,
            false,
            "python -c",
        ),
        (
            bash("test -f /testbed/reproduce.py && echo yes", "yes"),
            false,
            false,
            "the shell builtin test",
        ),
        (
            create(REPRO, REPRO_TEXT, &created(REPRO)),
            false,
            false,
            "writing a reproduction script does not run it",
        ),
    ];
    for (turn, active, failed, what) in cases {
        let b = of(vec![turn]);
        assert_eq!(
            (b.active_testing, b.failed_test),
            (active, failed),
            "{what}: {b:?}"
        );
        assert_eq!(b.test_runs, usize::from(active), "{what}");
    }

    // A test command the proxy rejected (nudged as a repeat) never ran: 2 pytest outputs, the
    // second nudged → 1 test run.
    let b = of(vec![
        bash(PYTEST, PYTEST_PASSED),
        nudged(bash_unanswered(PYTEST), NudgeKind::RepeatedAction),
        bash("git diff", ""),
    ]);
    assert_eq!(b.test_runs, 1);
}

// ---------------------------------------------------------------------------------------------
// Valid re-edit after a failed test

#[test]
fn valid_re_edit_after_a_failed_test() {
    // The audit's case: a failing reproduction script, then the first fix, then it passes.
    // Failure before any autonomous edit → the first fix is not a re-edit → no; yet autonomous
    // edit, active testing and failed test all yes.
    let b = of(vec![
        create(REPRO, REPRO_TEXT, &created(REPRO)),
        bash("python /testbed/reproduce.py", REPRO_TRACEBACK),
        fix(),
        bash("python /testbed/reproduce.py", "ok"),
        submit(),
    ]);
    assert!(
        b.autonomous_edit && b.active_testing && b.failed_test,
        "{b:?}"
    );
    assert!(!b.re_edit_after_failed_test, "{b:?}");

    // Edit → failing test → edit answered "No replacement was performed" → no.
    let b = of(vec![
        fix(),
        bash(PYTEST, PYTEST_FAILED),
        str_replace(
            SRC,
            "return a + b ",
            "return b + a",
            &not_replaced(SRC, "return a + b "),
        ),
    ]);
    assert!(b.failed_test && !b.re_edit_after_failed_test, "{b:?}");

    // Edit → failing test → successful edit → yes.
    let b = of(vec![
        fix(),
        bash(PYTEST, PYTEST_FAILED),
        str_replace(
            SRC,
            "return a + b",
            "return int(a) + int(b)",
            &edited(SRC, "return int(a) + int(b)"),
        ),
        bash(PYTEST, PYTEST_PASSED),
        submit(),
    ]);
    assert!(b.re_edit_after_failed_test, "{b:?}");

    // A model that never re-edits: edit → failing test → submit → no.
    let b = of(vec![fix(), bash(PYTEST, PYTEST_FAILED), submit()]);
    assert!(b.failed_test && !b.re_edit_after_failed_test, "{b:?}");

    // Edit → passing test → edit: no failure between → no.
    let b = of(vec![
        fix(),
        bash(PYTEST, PYTEST_PASSED),
        str_replace(SRC, "a + b", "b + a", &edited(SRC, "return b + a")),
    ]);
    assert!(!b.failed_test && !b.re_edit_after_failed_test, "{b:?}");

    // Edit → failing test → the second edit only touches the created reproduce.py → not an
    // autonomous edit → no.
    let b = of(vec![
        create(REPRO, REPRO_TEXT, &created(REPRO)),
        fix(),
        bash("python /testbed/reproduce.py", REPRO_TRACEBACK),
        str_replace(
            REPRO,
            "assert add(2, 3) == 5",
            "assert add(2, 3) == -1",
            &edited(REPRO, "assert add(2, 3) == -1"),
        ),
    ]);
    assert!(b.failed_test && !b.re_edit_after_failed_test, "{b:?}");

    // Order matters: failing test → edit → edit (the failure precedes both) → no.
    let b = of(vec![
        bash(PYTEST, PYTEST_FAILED),
        fix(),
        str_replace(SRC, "a + b", "b + a", &edited(SRC, "return b + a")),
    ]);
    assert!(!b.re_edit_after_failed_test, "{b:?}");
}

// ---------------------------------------------------------------------------------------------
// Explicit submission

#[test]
fn explicit_submission() {
    // Fix, submit → yes.
    assert!(of(vec![fix(), submit()]).explicit_submission);
    // No submit, the scaffold stops → no.
    assert!(!of(vec![fix(), bash(PYTEST, PYTEST_PASSED)]).explicit_submission);
    // A submit rejected by the submit-before-edit nudge, then the run stops → no.
    let b = of(vec![
        bash("ls /testbed", "README.md\nsrc\ntests"),
        nudged(submit(), NudgeKind::SubmitBeforeEdit),
        bash(
            "cat /testbed/src/calc.py",
            "def add(a, b):\n    return a - b\n",
        ),
    ]);
    assert!(!b.explicit_submission, "{b:?}");
    assert_eq!(b.ending, Ending::StoppedWithoutSubmission);
    // A submit the proxy terminated (the second submit before edit) → no.
    let b = ended(
        vec![
            nudged(submit(), NudgeKind::SubmitBeforeEdit),
            terminated(submit()),
        ],
        Some("submit_before_edit_again"),
        None,
    );
    assert!(!b.explicit_submission, "{b:?}");

    // mini-swe-agent: the finish command written as a shell command is its submit; another
    // echo is not.
    let finish = mini_bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "");
    assert!(finish.is_submit);
    let b = of(vec![
        mini_bash(
            "cd /repo && sed -i 's/a - b/a + b/' src/calc.py",
            "{\"returncode\": 0, \"output\": \"\"}",
        ),
        finish,
    ]);
    assert!(
        b.explicit_submission && b.ending == Ending::Submitted,
        "{b:?}"
    );
    let b = of(vec![mini_bash(
        "echo done",
        "{\"returncode\": 0, \"output\": \"done\\n\"}",
    )]);
    assert!(!b.explicit_submission, "{b:?}");
    // SWE-agent has a `submit` tool: its shell echoing mini's sentence is not a submit.
    assert!(!bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "").is_submit);
}

// ---------------------------------------------------------------------------------------------
// Repetitive command loop

/// fix, pytest (fails), edit, pytest (fails), edit, pytest (passes): three different
/// successful edits, each followed by the same test command.
fn edit_test_cycle() -> Vec<Attempt> {
    vec![
        fix(),
        bash(PYTEST, PYTEST_FAILED),
        str_replace(
            SRC,
            "return a + b",
            "return int(a) + int(b)",
            &edited(SRC, "return int(a) + int(b)"),
        ),
        bash(PYTEST, PYTEST_FAILED),
        str_replace(
            SRC,
            "return int(a) + int(b)",
            "return a + b  # noqa",
            &edited(SRC, "return a + b  # noqa"),
        ),
        bash(PYTEST, PYTEST_PASSED),
    ]
}

#[test]
fn repetitive_command_loop() {
    let ls = || bash("ls /testbed", "README.md\nsrc\ntests");
    let cat = || {
        bash(
            "cat /testbed/src/calc.py",
            "def add(a, b):\n    return a - b\n",
        )
    };

    // `ls`, `ls` (nudged), edit, submit: 2 occurrences → no (one nudged repeat is a nudge).
    let b = of(vec![
        ls(),
        nudged(ls(), NudgeKind::RepeatedAction),
        fix(),
        submit(),
    ]);
    assert!(!b.repetitive_loop, "{b:?}");

    // `cat` three times with other reads between and no edit → yes.
    let b = of(vec![
        cat(),
        ls(),
        cat(),
        bash("grep -n add /testbed/src/calc.py", "1:def add(a, b):"),
        cat(),
    ]);
    assert!(b.repetitive_loop, "{b:?}");

    // The same command three times with only a failed edit between → yes.
    let b = of(vec![
        cat(),
        str_replace(SRC, "a-b", "a+b", &not_replaced(SRC, "a-b")),
        cat(),
        ls(),
        cat(),
    ]);
    assert!(b.repetitive_loop, "{b:?}");

    // Test after each of three different successful edits: edit, test, edit, test, edit,
    // test → the test occurs 3 times but successful edits lie between → no.
    let b = of(edit_test_cycle());
    assert!(!b.repetitive_loop, "{b:?}");

    // A successful edit between the first and second occurrence only: cat, edit, cat, cat →
    // from the 1st cat the edit intervenes; from the 2nd only 2 occurrences → no.
    let b = of(vec![cat(), fix(), cat(), cat()]);
    assert!(!b.repetitive_loop, "{b:?}");
    // …and a third cat after that → cat at 2, 3, 4 with no edit between → yes.
    let b = of(vec![cat(), fix(), cat(), ls(), cat(), cat()]);
    assert!(b.repetitive_loop, "{b:?}");

    // The same edit three times: it landed once, then was refused twice ("No replacement") →
    // no successful edit strictly between the first and the third → yes.
    let b = of(vec![
        fix(),
        str_replace(
            SRC,
            "return a - b",
            "return a + b",
            &not_replaced(SRC, "return a - b"),
        ),
        str_replace(
            SRC,
            "return a - b",
            "return a + b",
            &not_replaced(SRC, "return a - b"),
        ),
    ]);
    assert!(b.repetitive_loop, "{b:?}");

    // Issued counts nudged and terminating outputs: `ls`, `ls` (nudged), `ls` (terminated:
    // repeated_action_again) → 3 issued → yes; the ending is the nudge rule's.
    let b = ended(
        vec![
            ls(),
            nudged(ls(), NudgeKind::RepeatedAction),
            terminated(ls()),
        ],
        Some("repeated_action_again"),
        None,
    );
    assert!(b.repetitive_loop, "{b:?}");
    assert_eq!(b.ending, Ending::NudgeRuleViolatedTwice);

    // Unparsable outputs are not issued actions: ls, 3 × no_action, … never 3 of one action.
    let b = of(vec![
        ls(),
        unparsed("no_action"),
        unparsed("no_action"),
        unparsed("no_action"),
        cat(),
    ]);
    assert!(!b.repetitive_loop, "{b:?}");

    // A run ended by the loop rule is a loop whatever its actions: two different reads, then
    // the proxy's `degenerate_loop` (also `same_action_thrice`/`alternation` of older traces).
    for reason in ["degenerate_loop", "same_action_thrice", "alternation"] {
        let b = ended(vec![ls(), terminated(cat())], Some(reason), None);
        assert!(b.repetitive_loop, "{reason}: {b:?}");
        assert_eq!(b.ending, Ending::DegenerateLoop, "{reason}");
    }
}

// ---------------------------------------------------------------------------------------------
// How the run ended

#[test]
fn one_ending_per_trajectory() {
    let ls = || bash("ls /testbed", "README.md\nsrc\ntests");
    let abnormal = |e: Ending| {
        matches!(
            e,
            Ending::NudgeRuleViolatedTwice
                | Ending::DegenerateLoop
                | Ending::UnparsableStreak
                | Ending::Error
        )
    };
    // (behaviour, expected ending).
    let cases: Vec<(Behaviour, Ending, &str)> = vec![
        (of(vec![fix(), submit()]), Ending::Submitted, "fix, submit"),
        (
            ended(vec![ls(), terminated(ls())], Some("step_cap"), None),
            Ending::StepCap,
            "the proxy's step cap",
        ),
        (
            of(vec![ls(), fix()]),
            Ending::StoppedWithoutSubmission,
            "the scaffold stopped",
        ),
        (
            ended(
                vec![
                    nudged(submit(), NudgeKind::SubmitBeforeEdit),
                    terminated(submit()),
                ],
                Some("submit_before_edit_again"),
                None,
            ),
            Ending::NudgeRuleViolatedTwice,
            "submit before edit twice",
        ),
        (
            ended(
                vec![
                    ls(),
                    nudged(ls(), NudgeKind::RepeatedAction),
                    terminated(ls()),
                ],
                Some("repeated_action_again"),
                None,
            ),
            Ending::NudgeRuleViolatedTwice,
            "repeated action twice",
        ),
        (
            ended(
                vec![ls(), ls(), terminated(ls())],
                Some("degenerate_loop"),
                None,
            ),
            Ending::DegenerateLoop,
            "degenerate loop",
        ),
        (
            ended(
                vec![unparsed("no_action"), terminated(unparsed("no_action"))],
                Some("unparsable"),
                None,
            ),
            Ending::UnparsableStreak,
            "unparsable streak",
        ),
        (
            ended(
                vec![ls(), fix()],
                None,
                Some("context window exceeded: 32768 tokens"),
            ),
            Ending::Error,
            "the last request failed",
        ),
        (
            ended(vec![ls()], Some("some_future_rule"), None),
            Ending::Error,
            "another termination reason",
        ),
        // First match wins: a proxy step cap before an error of the same run → step_cap.
        (
            ended(
                vec![ls(), terminated(ls())],
                Some("step_cap"),
                Some("timeout"),
            ),
            Ending::StepCap,
            "step cap wins over error",
        ),
        // An error after the model's submit is still an error (error is above submitted).
        (
            ended(vec![fix(), submit()], None, Some("backend failure")),
            Ending::Error,
            "error wins over submitted",
        ),
    ];
    for (b, ending, what) in cases {
        assert_eq!(b.ending, ending, "{what}: {b:?}");
        assert_eq!(b.abnormal, abnormal(ending), "{what}");
    }

    // The scaffold's own step limit (`--step-limit N`): requests are turns with attempt 0.
    // ls, ls, fix, pytest: 4 requests.
    let t = golden(
        TASK,
        vec![ls(), cat_src(), fix(), bash(PYTEST, PYTEST_PASSED)],
    );
    let with = |n| Behaviour::of(&t, n).ending;
    assert_eq!(with(None), Ending::StoppedWithoutSubmission);
    assert_eq!(with(Some(4)), Ending::StepCap, "4 ≥ 4");
    assert_eq!(with(Some(3)), Ending::StepCap, "4 ≥ 3");
    assert_eq!(with(Some(5)), Ending::StoppedWithoutSubmission, "4 < 5");
    assert!(
        !Behaviour::of(&t, Some(4)).abnormal,
        "a step cap is not abnormal"
    );
    // A nudged output and its re-generation are one request: ls, submit (nudged) + cat
    // (attempt 1), fix → 3 requests, 4 turns → --step-limit 4: stopped, 3: step cap.
    let t = golden(
        TASK,
        vec![
            ls(),
            nudged(submit(), NudgeKind::SubmitBeforeEdit),
            cat_src(),
            fix(),
        ],
    );
    assert_eq!(t.attempts[2].attempt, 1);
    assert_eq!(
        Behaviour::of(&t, Some(4)).ending,
        Ending::StoppedWithoutSubmission
    );
    assert_eq!(Behaviour::of(&t, Some(3)).ending, Ending::StepCap);
    // A submit at the scaffold's limit is a submission (submitted is above the step limit).
    let t = golden(TASK, vec![ls(), fix(), submit()]);
    assert_eq!(Behaviour::of(&t, Some(3)).ending, Ending::Submitted);
}

fn cat_src() -> Attempt {
    bash(
        "cat /testbed/src/calc.py",
        "def add(a, b):\n    return a - b\n",
    )
}

// ---------------------------------------------------------------------------------------------
// Exploration only and steps before the first edit

#[test]
fn exploration_only_and_steps_before_the_first_edit() {
    let ls = || bash("ls /testbed", "README.md\nsrc\ntests");
    let grep = || {
        bash(
            "grep -rn 'def add' /testbed",
            "/testbed/src/calc.py:1:def add(a, b):",
        )
    };

    // ls, cat, grep, submit (no edit, no test) → exploration only; no first edit.
    let b = of(vec![ls(), cat_src(), grep(), submit()]);
    assert!(b.exploration_only, "{b:?}");
    assert_eq!(b.steps_before_first_edit, None);

    // One failed str_replace is an edit → not exploration; 1 accepted action before it.
    let b = of(vec![
        ls(),
        str_replace(SRC, "a-b", "a+b", &not_replaced(SRC, "a-b")),
    ]);
    assert!(!b.exploration_only);
    assert_eq!(b.steps_before_first_edit, Some(1));

    // Running a reproduction script, without any edit → not exploration; no first edit.
    let b = of(vec![
        ls(),
        bash("python /testbed/reproduce.py", REPRO_TRACEBACK),
    ]);
    assert!(!b.exploration_only);
    assert_eq!(b.steps_before_first_edit, None);

    // A scratch file is an edit too ("any edit"): create reproduce.py first → 0.
    let b = of(vec![
        create(REPRO, REPRO_TEXT, &created(REPRO)),
        ls(),
        fix(),
    ]);
    assert_eq!(b.steps_before_first_edit, Some(0));

    // Nudged and unparsable outputs are not accepted actions: ls, submit (nudged), cat,
    // no_action, view, fix → ls, cat, view → 3.
    let b = of(vec![
        ls(),
        nudged(submit(), NudgeKind::SubmitBeforeEdit),
        cat_src(),
        unparsed("no_action"),
        view(SRC, "     1\tdef add(a, b):\n     2\t    return a - b\n"),
        fix(),
    ]);
    assert_eq!(b.steps_before_first_edit, Some(3), "{b:?}");
    // An edit the proxy rejected is not the first edit: ls, fix (terminated by the step
    // cap) → no accepted edit; the run explored only.
    let b = ended(vec![ls(), terminated(fix())], Some("step_cap"), None);
    assert_eq!(b.steps_before_first_edit, None);
    assert!(b.exploration_only);

    // The label's median over trajectories that edit: first edits at steps 2, 5, 9 and one
    // trajectory without an edit → median 5 over 3 trajectories.
    let first_edit_at = |n: usize| {
        let mut turns: Vec<Attempt> = (0..n)
            .map(|i| {
                bash(
                    &format!("sed -n '{},{}p' /testbed/src/calc.py", i + 1, i + 9),
                    "x",
                )
            })
            .collect();
        turns.push(fix());
        turns
    };
    let mut runs = vec![
        golden(TASK, first_edit_at(9)),
        golden(TASK, first_edit_at(2)),
        golden(TASK, vec![ls(), submit()]),
        golden(TASK, first_edit_at(5)),
    ];
    for (i, t) in runs.iter_mut().enumerate() {
        t.session = format!("s{i}");
        t.start_ms = i as u64;
    }
    let report = Report::build(&runs, None, &[1]);
    let label = &report.labels[0].behaviour;
    assert_eq!(label.median_steps_before_first_edit(), Some(5.0));
    assert_eq!(
        label.steps_before_first_edit.len(),
        3,
        "3 trajectories edit"
    );
    // A fourth editing trajectory at 10 → 2, 5, 9, 10 → (5 + 9) / 2 = 7.
    let mut t = golden(TASK, first_edit_at(10));
    t.session = "s4".into();
    t.start_ms = 4;
    runs.push(t);
    let report = Report::build(&runs, None, &[1]);
    assert_eq!(
        report.labels[0].behaviour.median_steps_before_first_edit(),
        Some(7.0)
    );
}

// ---------------------------------------------------------------------------------------------
// Trajectories recorded by the real proxy over loopback

/// Drives the proxy like a scaffold: posts the fixture's request, answers each response with
/// the next observation (as a tool result), and posts once more after the last one. The
/// backend answers from `script` (a nudge costs one more script entry in the same request).
async fn record(
    fixture: &str,
    script: Vec<String>,
    observations: &[&str],
    tweak: impl FnOnce(&mut asap_proxy::config::ServeArgs),
) -> Trajectory {
    let (_backend, proxy) =
        serve_with(script.iter().map(|s| Scripted::text(s)).collect(), tweak).await;
    let mut body = fixture_json(&format!("requests/{fixture}"));
    for observation in observations {
        let (status, resp) = proxy.post(&body).await;
        assert_eq!(status, 200, "{resp}");
        continue_with(&mut body, &resp, observation);
    }
    let (status, resp) = proxy.post(&body).await;
    assert_eq!(status, 200, "{resp}");
    let files = proxy.trace_files();
    assert_eq!(files.len(), 1, "{files:?}");
    load::trajectory(&files[0]).unwrap().unwrap()
}

/// SWE-agent's action block around a bash command.
fn swe_bash(thought: &str, command: &str) -> String {
    format!("{thought}\n\n### Action\n\n<bash>{command}</bash>\n")
}

fn swe_editor(thought: &str, fields: &[(&str, &str)]) -> String {
    let inner: String = fields
        .iter()
        .map(|(k, v)| format!("<{k}>{v}</{k}>\n"))
        .collect();
    format!("{thought}\n\n### Action\n\n<str_replace_editor>\n{inner}</str_replace_editor>\n")
}

#[tokio::test]
async fn recorded_swe_agent_run_with_a_re_edit_after_a_failed_test() {
    const INV: &str = "/testbed/inventory.py";
    const REPRO: &str = "/testbed/reproduce.py";
    let script = vec![
        swe_bash("Look around.", "ls /testbed"),
        swe_bash("Read the source.", &format!("cat {INV}")),
        swe_editor(
            "Write a reproduction.",
            &[
                ("command", "create"),
                ("path", REPRO),
                (
                    "file_text",
                    "from inventory import Inventory, Line\nprint(Inventory([Line('bolt', 3, 0.5)]).total())\nassert Inventory([Line('bolt', 3, 0.5)]).total() == 1.5",
                ),
            ],
        ),
        swe_bash("Run it.", &format!("python {REPRO}")),
        swe_editor(
            "Multiply by the price.",
            &[
                ("command", "str_replace"),
                ("path", INV),
                ("old_str", "return sum(l.quantity for l in self.lines)"),
                (
                    "new_str",
                    "return sum(l.quantity * l.unit_price for l in self.lines)",
                ),
            ],
        ),
        swe_bash("Run it again.", &format!("python {REPRO}")),
        swe_bash("Run the tests.", "cd /testbed && python -m pytest tests -q"),
        swe_editor(
            "Empty inventories must total 0.0, not 0.",
            &[
                ("command", "str_replace"),
                ("path", INV),
                (
                    "old_str",
                    "return sum(l.quantity * l.unit_price for l in self.lines)",
                ),
                (
                    "new_str",
                    "return sum((l.quantity * l.unit_price for l in self.lines), 0.0)",
                ),
            ],
        ),
        swe_bash("Run the tests again.", "cd /testbed && python -m pytest tests -q"),
        "The fix is complete.\n\n### Action\n\n<submit/>\n".to_string(),
    ];
    let source = "class Inventory:\n    def total(self):\n        return sum(l.quantity for l in self.lines)\n";
    let failing =
        "F..                                                                      [100%]\n\
=================================== FAILURES ===================================\n\
______________________________ test_empty_total ________________________________\n\
E       assert 0 == 0.0 and isinstance(0, float)\n\
FAILED tests/test_inventory.py::test_empty_total - assert False\n\
1 failed, 2 passed in 0.12s";
    let edited_inv = format!(
        "The file {INV} has been edited. Here's the result of running `cat -n` on a snippet of \
         {INV}:\n     2\t    def total(self):\n     3\t        return sum(...)\nReview the \
         changes and make sure they are as expected. Edit the file again if necessary."
    );
    let traceback = "3\nTraceback (most recent call last):\n  File \"/testbed/reproduce.py\", line 3, in <module>\n    assert Inventory([Line('bolt', 3, 0.5)]).total() == 1.5\nAssertionError";
    let created_repro = created(REPRO);
    let observations = [
        "README.md\ninventory.py\ntests",
        source,
        &created_repro,
        traceback,
        &edited_inv,
        "1.5",
        failing,
        &edited_inv,
        "...                                                                      [100%]\n3 passed in 0.05s",
    ];
    let t = record("swe-agent-1.json", script, &observations, |_| {}).await;
    assert_eq!(t.attempts.len(), 10);
    assert_eq!(t.attempts[6].observation.as_deref(), Some(failing));
    let b = Behaviour::of(&t, None);
    // By hand:
    //  0 ls            1 cat           2 create reproduce.py (edit, created)
    //  3 python repro (test, fails)    4 str_replace inventory.py (edit, repository)
    //  5 python repro (test, passes)   6 pytest (test, fails)
    //  7 str_replace inventory.py (edit, repository)   8 pytest (passes)   9 submit
    // turns 10, parsable 10, valid 10; edits 3, repository edits 2; test runs 4; failed test
    // yes; re-edit: edit 4 → failing test 6 → edit 7 → yes (the failing reproduction at 3
    // came before any repository edit); submission yes; no action thrice → no loop;
    // ending submitted; first edit after 2 accepted actions.
    assert_eq!(
        (b.turns, b.parsable_turns, b.valid_tool_calls),
        (10, 10, 10)
    );
    assert_eq!((b.edits, b.repo_edits, b.test_runs), (3, 2, 4), "{b:?}");
    assert!(b.autonomous_edit && b.active_testing && b.failed_test);
    assert!(b.re_edit_after_failed_test, "{b:?}");
    assert!(b.explicit_submission && !b.repetitive_loop && !b.exploration_only);
    assert_eq!(b.steps_before_first_edit, Some(2));
    assert_eq!((b.ending, b.abnormal), (Ending::Submitted, false));
}

#[tokio::test]
async fn recorded_mini_swe_agent_run_fixed_after_a_failing_reproduction() {
    let script: Vec<String> = [
        "Read the code.\n<bash>cd /repo && cat textutil/slug.py</bash>\n",
        "Reproduce.\n<bash>cd /repo && cat <<'EOF' > reproduce.py\nfrom textutil.slug import slugify\nassert slugify('Hello  World') == 'hello-world', slugify('Hello  World')\nEOF</bash>\n",
        "Run it.\n<bash>cd /repo && python reproduce.py</bash>\n",
        "Split on any whitespace.\n<bash>cd /repo && sed -i \"s/split(' ')/split()/\" textutil/slug.py</bash>\n",
        "Run it again.\n<bash>cd /repo && python reproduce.py</bash>\n",
        "Done.\n<bash>echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT</bash>\n",
    ]
    .map(String::from)
    .to_vec();
    let observations = [
        "<returncode>0</returncode>\n<output>\ndef slugify(text):\n    return '-'.join(text.lower().split(' '))\n</output>",
        "<returncode>0</returncode>\n<output>\n</output>",
        "<returncode>1</returncode>\n<output>\nTraceback (most recent call last):\n  File \"/repo/reproduce.py\", line 2, in <module>\n    assert slugify('Hello  World') == 'hello-world', slugify('Hello  World')\nAssertionError: hello--world\n</output>",
        "<returncode>0</returncode>\n<output>\n</output>",
        "<returncode>0</returncode>\n<output>\n</output>",
    ];
    let t = record("mini-swe-agent-1.json", script, &observations, |_| {}).await;
    assert_eq!(t.attempts.len(), 6);
    let b = Behaviour::of(&t, None);
    // By hand: 0 cat; 1 heredoc into reproduce.py (edit; never seen → created); 2 python
    // reproduce.py (test, returncode 1 + traceback → fails); 3 sed -i slug.py (edit in place
    // → repository); 4 python reproduce.py (test, passes); 5 the finish command (submit).
    // edits 2, repository edits 1, test runs 2, failed test yes, re-edit no (no repository
    // edit before the failure), submission yes, first edit after 1 accepted action.
    assert_eq!((b.edits, b.repo_edits, b.test_runs), (2, 1, 2), "{b:?}");
    assert!(b.autonomous_edit && b.failed_test && !b.re_edit_after_failed_test);
    assert!(b.explicit_submission, "{b:?}");
    assert_eq!(b.steps_before_first_edit, Some(1));
    assert_eq!(b.ending, Ending::Submitted);
}

#[tokio::test]
async fn recorded_mini_swe_agent_json_output_is_read_decoded() {
    // mini-swe-agent 2's tool output is JSON (`{"returncode", "output"}`); the report reads it
    // decoded as the proxy does, so a file `ls` listed on its second line was seen, and the
    // heredoc that rewrites it edits the repository (not a new scratch file).
    let script: Vec<String> = [
        "List.\n<bash>cd /repo && ls textutil</bash>\n",
        "Rewrite it.\n<bash>cd /repo && cat > textutil/helpers.py <<'EOF'\ndef strip(s):\n    return s.strip()\nEOF</bash>\n",
        "Done.\n<bash>echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT</bash>\n",
    ]
    .map(String::from)
    .to_vec();
    let observations = [
        "{\"returncode\": 0, \"output\": \"__init__.py\\nhelpers.py\\n\"}",
        "{\"returncode\": 0, \"output\": \"\"}",
    ];
    let t = record("mini-swe-agent-1.json", script, &observations, |_| {}).await;
    assert_eq!(
        t.attempts[0].observation.as_deref(),
        Some("__init__.py\nhelpers.py"),
        "decoded"
    );
    let b = Behaviour::of(&t, None);
    // 1 edit (overwrite of helpers.py, seen in the ls output) → a repository edit.
    assert_eq!((b.edits, b.repo_edits), (1, 1), "{b:?}");
    assert!(b.autonomous_edit && b.explicit_submission, "{b:?}");
}

#[test]
fn only_the_writes_own_failure_makes_an_edit_unsuccessful() {
    // The script run after the edit fails with a FileNotFoundError about another file: the
    // edit of src/config.py happened.
    let repro_fails = "Traceback (most recent call last):\n  File \"reproduce.py\", line 2\n\
                       FileNotFoundError: [Errno 2] No such file or directory: '/etc/app.yml'";
    let b = of(vec![
        bash("python reproduce.py", repro_fails),
        bash(
            "sed -i 's/a/b/' src/config.py && python reproduce.py",
            repro_fails,
        ),
    ]);
    assert_eq!((b.edits, b.repo_edits), (1, 1), "{b:?}");
    // `sed …; cat other` where only the cat fails: the edit happened.
    let b = of(vec![bash(
        "sed -i 's/a/b/' src/x.py; cat src/y.py",
        "cat: src/y.py: No such file or directory",
    )]);
    assert_eq!((b.edits, b.repo_edits), (1, 1), "{b:?}");
    // The sed's own file error: no edit.
    let b = of(vec![bash(
        "sed -i 's/a/b/' src/x.py; cat src/y.py",
        "sed: can't read src/x.py: No such file or directory\nprint(1)",
    )]);
    assert_eq!((b.edits, b.repo_edits), (1, 0), "{b:?}");
}

#[test]
fn a_scratch_file_written_from_python_is_not_a_repository_edit() {
    // `open('reproduce_issue.py', 'w')` names a file never seen: the run created it.
    let b = of(vec![
        bash(
            "python - <<'EOF'\nwith open('reproduce_issue.py', 'w') as f:\n    f.write('import calc')\nEOF",
            "",
        ),
        bash("python reproduce_issue.py", "ok"),
    ]);
    assert_eq!(
        (b.edits, b.repo_edits, b.active_testing),
        (1, 0, true),
        "{b:?}"
    );
    // Opening a listed repository file for writing edits it.
    let b = of(vec![
        bash("ls src", "calc.py\n__init__.py"),
        bash("python -c \"open('src/calc.py', 'w').write('x = 1')\"", ""),
    ]);
    assert_eq!((b.edits, b.repo_edits), (1, 1), "{b:?}");
}

#[tokio::test]
async fn a_run_with_no_accepted_action_did_not_stay_in_exploration() {
    // Every output unparsable until the proxy's streak rule ends the run: no action ran, so
    // the run did not explore either (it would inflate "stayed in exploration").
    let t = record(
        "swe-agent-1.json",
        vec!["I think.".to_string(); 5],
        &[],
        |a| a.max_unparsable = Some(1),
    )
    .await;
    let b = Behaviour::of(&t, None);
    assert_eq!(b.ending, Ending::UnparsableStreak, "{b:?}");
    assert!(!b.exploration_only, "{b:?}");
}

#[tokio::test]
async fn recorded_endings_degenerate_loop_and_submit_before_edit_twice() {
    // Nudges off: the same read three times with the same output → the proxy ends the run
    // with `degenerate_loop` on the third output (replaced by a submit).
    let cat = swe_bash("Read.", "cat /testbed/inventory.py");
    let source = "class Inventory:\n    pass\n";
    let t = record(
        "swe-agent-1.json",
        vec![cat.clone(), cat.clone(), cat],
        &[source, source],
        |a| a.nudges = Some(false),
    )
    .await;
    assert_eq!(t.termination.as_deref(), Some("degenerate_loop"));
    let b = Behaviour::of(&t, None);
    // 3 turns, all parsed; the third is terminating: not accepted, never a submission; loop
    // yes (ended by the rule, and issued 3 times); abnormal; no edit, no test → exploration.
    assert_eq!((b.turns, b.valid_tool_calls), (3, 3));
    assert!(b.repetitive_loop && !b.explicit_submission && b.exploration_only);
    assert_eq!((b.ending, b.abnormal), (Ending::DegenerateLoop, true));

    // Nudges on: submit at once (nudged), submit again (terminated) in one request.
    let submit = "Done.\n\n### Action\n\n<submit/>\n".to_string();
    let t = record(
        "swe-agent-1.json",
        vec![submit.clone(), submit],
        &[],
        |_| {},
    )
    .await;
    assert_eq!(t.termination.as_deref(), Some("submit_before_edit_again"));
    let b = Behaviour::of(&t, None);
    // 2 turns (attempts 0 and 1), 1 nudge, no accepted submit, 2 issued submits < 3 → no loop.
    assert_eq!(
        (b.turns, b.nudges_submit_before_edit, b.explicit_submission),
        (2, 1, false)
    );
    assert!(!b.repetitive_loop);
    assert_eq!(
        (b.ending, b.abnormal),
        (Ending::NudgeRuleViolatedTwice, true)
    );

    // The proxy's step cap (`--max-steps 2`): ls, cat, then the third action is replaced.
    let t = record(
        "swe-agent-1.json",
        vec![
            swe_bash("Look.", "ls /testbed"),
            swe_bash("Read.", "cat /testbed/inventory.py"),
            swe_bash("Test.", "cd /testbed && python -m pytest tests -q"),
        ],
        &["README.md\ninventory.py\ntests", source],
        |a| a.max_steps = Some(2),
    )
    .await;
    let b = Behaviour::of(&t, None);
    // The replaced pytest never ran: 3 turns, 0 test runs; ending step_cap, not abnormal.
    assert_eq!((b.turns, b.test_runs), (3, 0), "{b:?}");
    assert_eq!((b.ending, b.abnormal), (Ending::StepCap, false));
}

// ---------------------------------------------------------------------------------------------
// One label, twelve trajectories, every rate by hand

#[test]
fn every_rate_of_a_label_by_hand() {
    let ls = || bash("ls /testbed", "README.md\nsrc\ntests");
    let runs: Vec<(Vec<Attempt>, Option<&str>, Option<&str>)> = vec![
        // T1: ls, create repro, run (fails), fix, run (passes), submit.
        //   turns 6, parsable 6, valid 6; autonomous, testing, failed; no re-edit; submitted.
        (
            vec![
                ls(),
                create(REPRO, REPRO_TEXT, &created(REPRO)),
                bash("python /testbed/reproduce.py", REPRO_TRACEBACK),
                fix(),
                bash("python /testbed/reproduce.py", "ok"),
                submit(),
            ],
            None,
            None,
        ),
        // T2: fix, pytest (fails), second fix, pytest (passes), submit.
        //   turns 5 (5, 5); autonomous, testing, failed, re-edit; submitted.
        (
            vec![
                fix(),
                bash(PYTEST, PYTEST_FAILED),
                str_replace(
                    SRC,
                    "return a + b",
                    "return int(a) + int(b)",
                    &edited(SRC, "return int(a) + int(b)"),
                ),
                bash(PYTEST, PYTEST_PASSED),
                submit(),
            ],
            None,
            None,
        ),
        // T3: fix, pytest (fails), refused edit ("No replacement"), submit.
        //   turns 4 (4, 4); autonomous, testing, failed; no re-edit; submitted.
        (
            vec![
                fix(),
                bash(PYTEST, PYTEST_FAILED),
                str_replace(SRC, "a+b", "b+a", &not_replaced(SRC, "a+b")),
                submit(),
            ],
            None,
            None,
        ),
        // T4: ls, cat, grep, submit (nudged), ls (attempt 1), submit (terminated: second
        //   submit before edit). turns 6, parsable 6, valid 6; nothing else; explicit no;
        //   nudge submit-before-edit; ls issued 2 times → no loop; abnormal
        //   (nudge_rule_violated_twice); exploration only.
        (
            vec![
                ls(),
                cat_src(),
                bash(
                    "grep -rn 'def add' /testbed/src",
                    "src/calc.py:1:def add(a, b):",
                ),
                nudged(submit(), NudgeKind::SubmitBeforeEdit),
                ls(),
                terminated(submit()),
            ],
            Some("submit_before_edit_again"),
            None,
        ),
        // T5: cat, ls, cat, ls, cat (terminated by the proxy's loop rule).
        //   turns 5 (5, 5); loop; abnormal (degenerate_loop); exploration only.
        (
            vec![cat_src(), ls(), cat_src(), ls(), terminated(cat_src())],
            Some("degenerate_loop"),
            None,
        ),
        // T6: no_action ×4, then a terminating no_action (unparsable streak).
        //   turns 5, parsable 0, valid 0; abnormal (unparsable_streak); not exploration
        //   (no accepted action at all).
        (
            vec![
                unparsed("no_action"),
                unparsed("no_action"),
                unparsed("no_action"),
                unparsed("no_action"),
                terminated(unparsed("no_action")),
            ],
            Some("unparsable"),
            None,
        ),
        // T7: ls, fix, then the backend fails (context window exceeded).
        //   turns 2 (2, 2); autonomous; abnormal (error).
        (vec![ls(), fix()], None, Some("context window exceeded")),
        // T8: ls, unknown_tool, missing_parameter, fix, pytest (passes), then the proxy's
        //   step cap replaces the next action (ls). turns 6, parsable 6, valid 4; autonomous,
        //   testing; step_cap (not abnormal).
        (
            vec![
                ls(),
                unparsed("unknown_tool"),
                unparsed("missing_parameter"),
                fix(),
                bash(PYTEST, PYTEST_PASSED),
                terminated(ls()),
            ],
            Some("step_cap"),
            None,
        ),
        // T9: heredoc reproduce.py, run it (fails), the scaffold stops.
        //   turns 2 (2, 2); no autonomous edit (a created file); testing, failed; stopped
        //   without submission; not exploration (an edit and a test).
        (
            vec![
                bash(
                    &format!("cd /testbed && cat > reproduce.py <<'EOF'\n{REPRO_TEXT}EOF"),
                    QUIET,
                ),
                bash("cd /testbed && python reproduce.py", REPRO_TRACEBACK),
            ],
            None,
            None,
        ),
        // T10: ls, ls (nudged: repeated action), cat, fix, submit.
        //   turns 5 (5, 5); autonomous; ls issued 2 times → no loop; nudge repeated-action;
        //   submitted.
        (
            vec![
                ls(),
                nudged(ls(), NudgeKind::RepeatedAction),
                cat_src(),
                fix(),
                submit(),
            ],
            None,
            None,
        ),
        // T11: fix, pytest (fails), edit, pytest (fails), edit, pytest (passes), submit —
        //   three different successful edits: re-edit yes, the pytest thrice with edits
        //   between → no loop. turns 7 (7, 7); autonomous, testing, failed, re-edit;
        //   submitted.
        ([edit_test_cycle(), vec![submit()]].concat(), None, None),
        // T12: cat, grep, cat, invalid_parameter, cat — the scaffold stops (no proxy rule).
        //   turns 5, parsable 5, valid 4; cat issued 3 times with no edit → loop; stopped
        //   without submission; exploration only.
        (
            vec![
                cat_src(),
                bash("grep -n add /testbed/src/calc.py", "1:def add(a, b):"),
                cat_src(),
                unparsed("invalid_parameter"),
                cat_src(),
            ],
            None,
            None,
        ),
    ];
    let trajectories: Vec<Trajectory> = runs
        .into_iter()
        .enumerate()
        .map(|(i, (turns, termination, error))| Trajectory {
            session: format!("s{i:02}"),
            instance_id: format!("calc-{}", i % 4),
            start_ms: i as u64,
            termination: termination.map(str::to_string),
            error: error.map(str::to_string),
            ..golden(TASK, turns)
        })
        .collect();
    let report = Report::build(&trajectories, None, &[1]);
    assert_eq!(report.labels.len(), 1);
    let label = &report.labels[0].behaviour;
    assert_eq!(label.trajectories, 12);

    // Computed by hand from docs/report.md, per trajectory T1…T12 as commented above:
    // turns        = 6+5+4+6+5+5+2+6+2+5+7+5 = 58
    // parsable     = 6+5+4+6+5+0+2+6+2+5+7+5 = 53
    // valid        = 6+5+4+6+5+0+2+4+2+5+7+4 = 50
    // autonomous edit          T1 T2 T3 T7 T8 T10 T11            = 7
    // active testing           T1 T2 T3 T8 T9 T11                = 6
    // failed test seen         T1 T2 T3 T9 T11                   = 5
    // re-edit after failure    T2 T11                            = 2
    // explicit submission      T1 T2 T3 T10 T11                  = 5
    // repetitive loop          T5 (rule) T12 (cat ×3)            = 2
    // abnormal                 T4 T5 T6 T7                       = 4
    // step cap                 T8                                = 1
    // stopped w/o submission   T9 T12                            = 2
    // exploration only         T4 T5 T12 (T6 has no accepted action) = 3
    // nudge submit before edit T4                                = 1
    // nudge repeated action    T10                               = 1
    let expected: Vec<(&str, usize, usize)> = vec![
        ("parsable_turns", 53, 58),
        ("valid_tool_calls", 50, 58),
        ("autonomous_edit", 7, 12),
        ("active_testing", 6, 12),
        ("failed_test", 5, 12),
        ("re_edit_after_failed_test", 2, 12),
        ("explicit_submission", 5, 12),
        ("repetitive_loop", 2, 12),
        ("abnormal_termination", 4, 12),
        ("step_cap", 1, 12),
        ("stopped_without_submission", 2, 12),
        ("exploration_only", 3, 12),
        ("nudge_submit_before_edit", 1, 12),
        ("nudge_repeated_action", 1, 12),
    ];
    let got: Vec<(&str, usize, usize)> = label
        .rates(false)
        .iter()
        .map(|r| (r.key, r.count, r.total))
        .collect();
    assert_eq!(got, expected);
    for r in label.rates(false) {
        assert_eq!(r.unknown, 0, "{}", r.key);
        let (_, count, total) = expected.iter().find(|e| e.0 == r.key).copied().unwrap();
        assert_eq!(r.value(), Some(count as f64 / total as f64), "{}", r.key);
    }
    // Endings: submitted T1 T2 T3 T10 T11 = 5; step cap 1; stopped 2; nudge twice T4;
    // degenerate loop T5; unparsable T6; error T7 → 5+1+2+1+1+1+1 = 12.
    let endings: Vec<(Ending, usize)> = Ending::ALL.iter().map(|&e| (e, label.ending(e))).collect();
    assert_eq!(
        endings,
        vec![
            (Ending::Submitted, 5),
            (Ending::StepCap, 1),
            (Ending::StoppedWithoutSubmission, 2),
            (Ending::NudgeRuleViolatedTwice, 1),
            (Ending::DegenerateLoop, 1),
            (Ending::UnparsableStreak, 1),
            (Ending::Error, 1),
        ]
    );
    // Steps before the first edit, trajectories that edit: T1 1 (create), T2 0, T3 0, T7 1,
    // T8 1 (ls; unparsable turns are not accepted), T9 0, T10 2 (ls, cat; the nudged ls is
    // not), T11 0 → sorted 0 0 0 0 1 1 1 2 → 8 values, median (0 + 1) / 2 = 0.5.
    let mut steps = label.steps_before_first_edit.clone();
    steps.sort_unstable();
    assert_eq!(steps, vec![0, 0, 0, 0, 1, 1, 1, 2]);
    assert_eq!(label.median_steps_before_first_edit(), Some(0.5));
}

#[tokio::test]
async fn recorded_parse_failures_count_as_turns() {
    const INV: &str = "/testbed/inventory.py";
    // SWE-agent re-queries after a format error with the bad output and its error message
    // appended, and drops both once an output parses.
    const FORMAT_ERROR: &str = "Your output was not formatted correctly. You must always include \
one discussion and one command as part of your response. Make sure you do not have multiple \
discussion/command tags.";
    let script = [
        "The total ignores the unit price; I should look at the code first.".to_string(),
        "### Action\n\n<grep>total /testbed</grep>\n".to_string(),
        swe_editor(
            "Edit it.",
            &[("command", "str_replace"), ("old_str", "quantity")],
        ),
        swe_bash("List the files.", "ls /testbed"),
        swe_editor(
            "Multiply by the price.",
            &[
                ("command", "str_replace"),
                ("path", INV),
                ("old_str", "l.quantity for"),
                ("new_str", "l.quantity * l.unit_price for"),
            ],
        ),
        "Done.\n\n### Action\n\n<submit/>\n".to_string(),
    ];
    let (_backend, proxy) = serve(script.iter().map(|s| Scripted::text(s)).collect()).await;
    let mut body = request("swe-agent-1");
    let edited_inv = format!(
        "The file {INV} has been edited. Here's the result of running `cat -n` on a snippet of \
         {INV}:\n     3\t        return sum(l.quantity * l.unit_price for l in self.lines)\n\
         Review the changes and make sure they are as expected. Edit the file again if necessary."
    );
    let mut observations = vec!["README.md\ninventory.py\ntests", edited_inv.as_str()].into_iter();
    let mut next = body.clone();
    for _ in 0..script.len() {
        let (status, resp) = proxy.post(&next).await;
        assert_eq!(status, 200, "{resp}");
        if resp["choices"][0]["message"]["tool_calls"].is_array() {
            if let Some(observation) = observations.next() {
                continue_with(&mut body, &resp, observation);
            }
            next = body.clone();
        } else {
            next = body.clone();
            let messages = next["messages"].as_array_mut().unwrap();
            messages.push(resp["choices"][0]["message"].clone());
            messages.push(json!({"role": "user", "content": FORMAT_ERROR}));
        }
    }
    let files = proxy.trace_files();
    let t = load::trajectory(&files[0]).unwrap().unwrap();
    let classes: Vec<Option<&str>> = t
        .attempts
        .iter()
        .map(|t| t.parse_error.as_deref())
        .collect();
    assert_eq!(
        classes,
        vec![
            Some("no_action"),
            Some("unknown_tool"),
            Some("missing_parameter"),
            None,
            None,
            None
        ]
    );
    assert_eq!(
        t.attempts[3].observation.as_deref(),
        Some("README.md\ninventory.py\ntests")
    );
    let b = Behaviour::of(&t, None);
    // 6 turns; parsable: unknown_tool, missing_parameter, ls, edit, submit = 5; valid: ls,
    // edit, submit = 3; one successful in-place edit of inventory.py → autonomous edit; the
    // only accepted action before it is ls → 1; submitted.
    assert_eq!((b.turns, b.parsable_turns, b.valid_tool_calls), (6, 5, 3));
    assert!(b.autonomous_edit && b.explicit_submission, "{b:?}");
    assert_eq!(b.steps_before_first_edit, Some(1));
    assert_eq!(b.ending, Ending::Submitted);
}

#[tokio::test]
async fn recorded_backend_failure_ends_in_error() {
    // ls, then the backend fails on the next request (HTTP 400, context window exceeded):
    // the last request returned an error to the scaffold → ending error, abnormal. The
    // failed call is no turn: 1 turn.
    let (_backend, proxy) = serve(vec![
        Scripted::text(&swe_bash("Look.", "ls /testbed")),
        Scripted::Error {
            status: 400,
            message: "This model's maximum context length is 32768 tokens.".into(),
        },
    ])
    .await;
    let mut body = request("swe-agent-1");
    let (status, resp) = proxy.post(&body).await;
    assert_eq!(status, 200, "{resp}");
    continue_with(&mut body, &resp, "README.md\ninventory.py\ntests");
    let (status, resp) = proxy.post(&body).await;
    assert_ne!(status, 200, "{resp}");
    let t = load::trajectory(&proxy.trace_files()[0]).unwrap().unwrap();
    assert!(t.error.is_some(), "{t:?}");
    let b = Behaviour::of(&t, None);
    assert_eq!(b.turns, 1);
    assert_eq!((b.ending, b.abnormal), (Ending::Error, true), "{b:?}");
}
