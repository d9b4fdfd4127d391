//! The two text rules behind "active testing" and "valid re-edit after a failed test":
//! [`is_test_command`] (does a shell command run tests?) and [`shows_test_failure`] (does a
//! test command's output show a failure?). Both are documented in `docs/report.md`.

/// Whether a shell command runs tests.
///
/// The command is split into simple commands (at `;`, `&&`, `||`, `|`, `&`, newlines,
/// parentheses and backquotes, outside quotes; here-document bodies and `#` comments are
/// skipped). A simple command runs tests when, after leading `VAR=value` words and wrappers
/// (`sudo`, `env`, `time`, `timeout DURATION`, `nohup`, `nice`, `xvfb-run`, `stdbuf`,
/// `command`, `exec`, `uv|poetry|pipenv|pdm|hatch|rye run`, `conda run -n ENV`), its program is
/// a test runner (`pytest`, `py.test`, `tox`, `nox`, `nosetests`, `nose2`, `trial`, `jest`,
/// `mocha`, `vitest`, `rspec`, `phpunit`, `ctest`), a Python interpreter running a test module
/// (`-m pytest|unittest|nose|nose2|tox|nox|trial|twisted.trial|doctest`, `-m django … test`,
/// `-m coverage run …`) or a test script (see [`is_test_script`]; `manage.py test`, `setup.py
/// test`), a build tool's test goal (`npm|yarn|pnpm|bun test` or `run test…`, `npx
/// jest|mocha|vitest`, `go test`, `cargo test|nextest`, `make test|tests|check`, `mvn
/// test|verify`, `gradle`/`gradlew test|check`, `dotnet test`, `mix test`, `rake test|spec`,
/// `bundle exec …` of one of these), `coverage run` of a Python test, `bash|sh -c` of a test
/// command, `bash|sh SCRIPT` of a test script, or a test script run by path (a word with a `/`,
/// e.g. `./runtests.sh`, `bin/test`). Reading or searching test files (`cat test_x.py`, `grep
/// test`, `ls tests`) is not testing; nor is the shell builtin `test`.
pub fn is_test_command(command: &str) -> bool {
    simple_commands(command)
        .iter()
        .any(|words| runs_tests(words, 0))
}

/// Whether a file path names a test or reproduction script: its base name, without a `.py`
/// or `.sh` extension, is `test`, `tests`, `runtests`, `run_tests`, `run-tests` or
/// `run_test`, starts with `test_` or `reproduce`/`repro`, or ends with `_test`/`_tests`; or
/// it is a `.py` file inside a directory named `test`, `tests` or `testing`.
pub fn is_test_script(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    let (stem, ext) = match base.rsplit_once('.') {
        Some((s, e)) if e == "py" || e == "sh" => (s, Some(e)),
        Some(_) => return false,
        None => (base, None),
    };
    let named = matches!(
        stem,
        "test" | "tests" | "runtests" | "run_tests" | "run-tests" | "run_test"
    ) || stem.starts_with("test_")
        || stem.starts_with("repro")
        || stem.ends_with("_test")
        || stem.ends_with("_tests");
    let in_test_dir = ext == Some("py")
        && path
            .split('/')
            .rev()
            .skip(1)
            .any(|d| matches!(d, "test" | "tests" | "testing"));
    named || in_test_dir
}

/// Whether the output of a test command shows a failure. Any of:
/// - a count `N failed|failures|errors|error|failing` with `N > 0` (pytest, jest, mocha
///   summaries), or `failures=N` / `errors=N` with `N > 0` (unittest);
/// - the words `FAILED` or `FAIL` in capitals (pytest, unittest, go, cargo), or a line
///   starting with the word `ERROR` (pytest collection errors, unittest);
/// - `Traceback (most recent call last)`, or a line (after an optional pytest `E` prefix)
///   starting with a Python exception name (`…Error` or `…Exception`, possibly dotted)
///   followed by `:` or the end of the line, e.g. `AssertionError`;
/// - a line starting with `Error:`, `error:` or `error[` (node, cargo, compilers);
/// - a non-zero exit status marker: `exit code N`, `exit status N`, `exit_code=N`,
///   `returncode: N`, `return code N`, `<returncode>N</returncode>` (`:`, `=`, `>` and spaces
///   between), with `N ≠ 0`.
///
/// `0 failed`, `failures=0` and `exit code 0` are not failures.
pub fn shows_test_failure(output: &str) -> bool {
    word_rules(output) || output.lines().any(line_rule)
}

fn word_rules(text: &str) -> bool {
    let words = words(text);
    for (i, &(start, end)) in words.iter().enumerate() {
        let w = &text[start..end];
        if w == "FAILED" || w == "FAIL" {
            return true;
        }
        let Some(&(nstart, nend)) = words.get(i + 1) else {
            continue;
        };
        let next = &text[nstart..nend];
        let between = &text[end..nstart];
        let lower = w.to_ascii_lowercase();
        let next_lower = next.to_ascii_lowercase();
        if nonzero(w)
            && between.chars().all(|c| c == ' ')
            && matches!(
                next_lower.as_str(),
                "failed" | "failures" | "errors" | "error" | "failing"
            )
        {
            return true;
        }
        if matches!(lower.as_str(), "failures" | "errors") && between == "=" && nonzero(next) {
            return true;
        }
        let marker_then_number = |j: usize| {
            words.get(j).is_some_and(|&(s, e)| {
                let sep = &text[words[j - 1].1..s];
                sep.chars().all(|c| " \t:=>-".contains(c)) && nonzero(&text[s..e])
            })
        };
        let two_word = matches!(
            (lower.as_str(), next_lower.as_str()),
            ("exit", "code") | ("exit", "status") | ("return", "code")
        ) && between.chars().all(|c| c == ' ');
        if two_word && marker_then_number(i + 2) {
            return true;
        }
        if matches!(
            lower.as_str(),
            "returncode" | "exit_code" | "exitcode" | "return_code"
        ) && marker_then_number(i + 1)
        {
            return true;
        }
    }
    false
}

fn line_rule(line: &str) -> bool {
    let line = line.trim_start();
    if line.contains("Traceback (most recent call last)") {
        return true;
    }
    if line.starts_with("Error:") || line.starts_with("error:") || line.starts_with("error[") {
        return true;
    }
    let first_word_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(line.len());
    if &line[..first_word_end] == "ERROR" {
        return true;
    }
    // pytest prefixes assertion details with "E   ".
    let body = match line.strip_prefix("E ") {
        Some(rest) => rest.trim_start(),
        None => line,
    };
    let name_end = body
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .unwrap_or(body.len());
    let name = &body[..name_end];
    let after = &body[name_end..];
    (name.ends_with("Error") || name.ends_with("Exception"))
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && (after.starts_with(':') || after.trim().is_empty())
}

/// Byte spans of the runs of ASCII letters, digits and `_`.
fn words(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        let inside = c.is_ascii_alphanumeric() || c == '_';
        match (inside, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, text.len()));
    }
    out
}

fn nonzero(word: &str) -> bool {
    !word.is_empty() && word.bytes().all(|b| b.is_ascii_digit()) && word.bytes().any(|b| b != b'0')
}

/// Splits a shell command into simple commands (lists of words, quotes removed).
fn simple_commands(command: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = command.chars().collect();
    let mut out = Vec::new();
    let mut current: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut heredocs: Vec<(String, bool)> = Vec::new();
    let mut i = 0;
    let flush_word = |word: &mut String, in_word: &mut bool, current: &mut Vec<String>| {
        if *in_word {
            current.push(std::mem::take(word));
            *in_word = false;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        match c {
            '\'' => {
                in_word = true;
                while i < chars.len() && chars[i] != '\'' {
                    word.push(chars[i]);
                    i += 1;
                }
                i += 1;
            }
            '"' => {
                in_word = true;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        i += 1;
                    }
                    word.push(chars[i]);
                    i += 1;
                }
                i += 1;
            }
            '\\' => {
                if i < chars.len() && chars[i] != '\n' {
                    word.push(chars[i]);
                    in_word = true;
                }
                i += 1;
            }
            '#' if !in_word => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '<' if chars.get(i) == Some(&'<') && chars.get(i + 1) != Some(&'<') => {
                flush_word(&mut word, &mut in_word, &mut current);
                i += 1;
                let strip_tabs = chars.get(i) == Some(&'-');
                if strip_tabs {
                    i += 1;
                }
                while i < chars.len() && (chars[i] == ' ' || chars[i] == '\t') {
                    i += 1;
                }
                let mut delim = String::new();
                while i < chars.len() && !chars[i].is_whitespace() && !";|&<>()".contains(chars[i])
                {
                    if chars[i] != '\'' && chars[i] != '"' && chars[i] != '\\' {
                        delim.push(chars[i]);
                    }
                    i += 1;
                }
                if !delim.is_empty() {
                    heredocs.push((delim, strip_tabs));
                }
            }
            ';' | '&' | '|' | '\n' | '(' | ')' | '`' => {
                flush_word(&mut word, &mut in_word, &mut current);
                if !current.is_empty() {
                    out.push(std::mem::take(&mut current));
                }
                if c == '\n' {
                    for (delim, strip_tabs) in heredocs.drain(..) {
                        i = skip_heredoc(&chars, i, &delim, strip_tabs);
                    }
                }
            }
            c if c.is_whitespace() => flush_word(&mut word, &mut in_word, &mut current),
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    flush_word(&mut word, &mut in_word, &mut current);
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Index just after the here-document body starting at `i` (the line equal to `delim`).
fn skip_heredoc(chars: &[char], mut i: usize, delim: &str, strip_tabs: bool) -> usize {
    while i < chars.len() {
        let end = chars[i..]
            .iter()
            .position(|&c| c == '\n')
            .map_or(chars.len(), |p| i + p);
        let line: String = chars[i..end].iter().collect();
        let line = if strip_tabs {
            line.trim_start_matches('\t')
        } else {
            &line
        };
        i = end + 1;
        if line == delim {
            break;
        }
    }
    i.min(chars.len())
}

fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

fn is_python(program: &str) -> bool {
    let rest = program
        .strip_prefix("python")
        .or_else(|| program.strip_prefix("pypy"));
    rest.is_some_and(|r| r.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

/// Drops `VAR=value` words and wrapper commands from the front.
fn strip_prefixes(mut words: &[String]) -> &[String] {
    loop {
        let Some(first) = words.first() else {
            return words;
        };
        let is_assignment = first.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if is_assignment {
            words = &words[1..];
            continue;
        }
        let skip_options = |mut w: &[String]| {
            while w.first().is_some_and(|x| x.starts_with('-')) {
                w = &w[1..];
            }
            w
        };
        let second = words.get(1).map(String::as_str);
        words = match basename(first) {
            "sudo" | "env" | "time" | "nohup" | "nice" | "xvfb-run" | "stdbuf" | "command"
            | "exec" => skip_options(&words[1..]),
            "timeout" => {
                let rest = skip_options(&words[1..]);
                rest.get(1..).unwrap_or(&[])
            }
            "uv" | "poetry" | "pipenv" | "pdm" | "hatch" | "rye" if second == Some("run") => {
                skip_options(&words[2..])
            }
            "conda" | "mamba" | "micromamba" if second == Some("run") => {
                let mut rest = &words[2..];
                while let Some(opt) = rest.first().filter(|x| x.starts_with('-')) {
                    let takes_value = matches!(opt.as_str(), "-n" | "-p" | "--name" | "--prefix");
                    rest = rest.get(if takes_value { 2 } else { 1 }..).unwrap_or(&[]);
                }
                rest
            }
            _ => return words,
        };
    }
}

fn first_arg(words: &[String]) -> Option<&str> {
    words
        .iter()
        .map(String::as_str)
        .find(|w| !w.starts_with('-'))
}

fn runs_tests(words: &[String], depth: usize) -> bool {
    let words = strip_prefixes(words);
    let Some(first) = words.first() else {
        return false;
    };
    let rest = &words[1..];
    let arg = first_arg(rest);
    let program = basename(first);
    match program {
        "pytest" | "py.test" | "tox" | "nox" | "nosetests" | "nose2" | "trial" | "jest"
        | "mocha" | "vitest" | "rspec" | "phpunit" | "ctest" => true,
        p if is_python(p) => python_runs_tests(rest),
        "coverage" => arg == Some("run") && python_runs_tests(&rest[1..]),
        "bash" | "sh" | "zsh" | "dash" => {
            if let Some(pos) = rest.iter().position(|w| w == "-c" || w == "-lc") {
                depth < 3
                    && rest.get(pos + 1).is_some_and(|script| {
                        simple_commands(script)
                            .iter()
                            .any(|w| runs_tests(w, depth + 1))
                    })
            } else {
                arg.is_some_and(is_test_script)
            }
        }
        "npm" | "yarn" | "pnpm" | "bun" => {
            let mut args = rest.iter().filter(|w| !w.starts_with('-'));
            match args.next().map(String::as_str) {
                Some("test" | "t") => true,
                Some("run" | "run-script") => args.next().is_some_and(|s| s.starts_with("test")),
                _ => false,
            }
        }
        "npx" => matches!(arg, Some("jest" | "mocha" | "vitest" | "pytest")),
        "go" | "dotnet" | "mix" => arg == Some("test"),
        "cargo" => matches!(arg, Some("test" | "nextest")),
        "make" | "gmake" => rest
            .iter()
            .any(|w| matches!(w.as_str(), "test" | "tests" | "check")),
        "mvn" | "mvnw" => rest.iter().any(|w| w == "test" || w == "verify"),
        "gradle" | "gradlew" => rest.iter().any(|w| w == "test" || w == "check"),
        "rake" => matches!(arg, Some("test" | "spec")),
        "bundle" => {
            arg == Some("exec")
                && depth < 3
                && rest
                    .iter()
                    .position(|w| w == "exec")
                    .is_some_and(|p| runs_tests(&rest[p + 1..], depth + 1))
        }
        _ => first.contains('/') && is_test_script(first),
    }
}

fn python_runs_tests(args: &[String]) -> bool {
    let mut i = 0;
    while let Some(word) = args.get(i) {
        let module = if word == "-m" {
            args.get(i + 1).map(String::as_str)
        } else if let Some(m) = word.strip_prefix("-m") {
            Some(m)
        } else if word == "-c" || word.starts_with("-c") || word == "-" {
            return false;
        } else if matches!(word.as_str(), "-W" | "-X" | "-Q") {
            i += 2;
            continue;
        } else if word.starts_with('-') {
            i += 1;
            continue;
        } else {
            // A script.
            let rest = &args[i + 1..];
            return match basename(word) {
                "manage.py" | "setup.py" => first_arg(rest) == Some("test"),
                _ => is_test_script(word) && word.ends_with(".py"),
            };
        };
        let after = args.get(i + if word == "-m" { 2 } else { 1 }..).unwrap_or(&[]);
        return match module {
            Some(
                "pytest" | "unittest" | "nose" | "nose2" | "tox" | "nox" | "trial"
                | "twisted.trial" | "doctest",
            ) => true,
            Some("django") => first_arg(after) == Some("test"),
            Some("coverage") => first_arg(after) == Some("run") && python_runs_tests(&after[1..]),
            _ => false,
        };
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_commands() {
        for cmd in [
            "pytest",
            "cd /testbed && python -m pytest tests/test_x.py -x",
            "python3 -m unittest discover",
            "tox -e py39",
            "python manage.py test auth",
            "python tests/runtests.py queries",
            "./runtests.sh",
            "bin/test sympy/core",
            "npm test",
            "yarn run test:unit",
            "go test ./...",
            "cargo test --lib",
            "make check",
            "python reproduce_issue.py",
            "python test_fix.py",
            "python foo_test.py",
            "timeout 60 pytest -q",
            "PYTHONPATH=. pytest",
            "uv run pytest",
            "bash -c 'cd /repo && pytest'",
            "source venv/bin/activate; pytest -q 2>&1 | tail -5",
            "python -m coverage run -m pytest",
            "conda run -n testbed python -m pytest",
            "cat > t.py <<'EOF'\nprint(1)\nEOF\npython test_t.py",
        ] {
            assert!(is_test_command(cmd), "{cmd}");
        }
        for cmd in [
            "cat test_foo.py",
            "grep -rn test src",
            "ls tests",
            "pip install pytest",
            "test -f setup.py && echo yes",
            "echo pytest",
            "python -c 'import pytest'",
            "find . -name 'test_*.py'",
            "sed -n 1,20p tests/test_x.py",
            "python setup.py install",
            "cat > test_x.py <<EOF\npytest\nEOF",
            "# pytest later\nls",
            "python app.py",
        ] {
            assert!(!is_test_command(cmd), "{cmd}");
        }
    }

    #[test]
    fn failures() {
        for out in [
            "===== 1 failed, 3 passed in 0.2s =====",
            "FAILED tests/test_a.py::test_b - assert 1 == 2",
            "FAILED (failures=1)",
            "Ran 1 test\n\nFAILED (errors=2)",
            "Traceback (most recent call last):\n  File \"x.py\", line 1",
            "AssertionError",
            "E       AssertionError: assert 1 == 2",
            "ValueError: bad",
            "--- FAIL: TestX (0.00s)",
            "test result: FAILED. 1 passed; 1 failed",
            "[Command finished with exit code 1]",
            "<returncode>2</returncode>",
            "error[E0425]: cannot find value",
            "ERROR: file or directory not found: tests/x.py",
            "Tests:       2 failed, 5 passed",
            "==== 1 passed, 1 error in 0.1s ====",
        ] {
            assert!(shows_test_failure(out), "{out}");
        }
        for out in [
            "===== 3 passed in 0.2s =====",
            "Ran 3 tests in 0.001s\n\nOK",
            "1 passed, 0 failed",
            "exit code 0",
            "<returncode>0</returncode>",
            "1 xfailed, 2 passed",
            "test_raises_ValueError PASSED",
            "test result: ok. 3 passed; 0 failed",
        ] {
            assert!(!shows_test_failure(out), "{out}");
        }
    }
}
