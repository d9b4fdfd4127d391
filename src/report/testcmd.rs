//! The rule behind "active testing": [`is_test_command`] (does a shell command run tests?).
//! Its companion for "valid re-edit after a failed test" is [`super::failure`]. Both are
//! documented in `docs/report.md`.

use super::shell::simple_commands;

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

fn skip_options(mut words: &[String]) -> &[String] {
    while words.first().is_some_and(|x| x.starts_with('-')) {
        words = &words[1..];
    }
    words
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
        let after = args
            .get(i + if word == "-m" { 2 } else { 1 }..)
            .unwrap_or(&[]);
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
}
