//! Classifies an agent's shell command (a `bash` tool call) as editing files or not, for the
//! nudge "a submit before any file edit is rejected once with a hint".
//!
//! - A list or pipeline (`;`, `&&`, `||`, `|`, `&`, newlines) writes if any segment writes.
//! - Writes: redirection to a real path; `tee FILE`; `sed -i`, `perl -i`, `awk -i inplace`;
//!   `cp`, `mv`, `rm`, `touch`, `ln`, `truncate`, `install`, `dd of=`, `ed`/`ex`; `patch`;
//!   tree-changing `git` subcommands; `find -delete`/`-exec`; Python opening a file for writing.
//! - Not writes: redirection to `/dev/null` or to another fd, `>` inside quotes, `[[ ]]`,
//!   `(( ))`, `$(( ))`, `mkdir`, `chmod`, package installs, running scripts.

/// Whether a shell command writes or modifies a file in the working tree.
///
/// Writes: `>`, `>>`, `>|`, `1>`, `&>` to a path other than `/dev/null`, `/dev/stdout`,
/// `/dev/stderr`, `/dev/tty` (not fd duplication: `2>&1`, `>&2`), heredocs included; `tee FILE`;
/// `sed -i`; `perl -i`; `awk -i inplace`; `cp`, `mv`, `rm`, `touch`, `ln`, `truncate`, `install`,
/// `unlink`, `ed`, `ex`; `dd of=FILE`; `patch` (not `--dry-run`); `git apply` (not `--check`,
/// `--stat`), `am`, `restore`, `checkout` (not just `-b NAME`), `reset --hard`, `merge`, ...;
/// `find -delete`/`-exec WRITER`; Python `-c` code or heredocs that `open(..)` a file in a
/// `w`/`a`/`x`/`+` mode or call `write_text(`, `write_bytes(`, `os.remove(`, `shutil.move(`, ...;
/// `bash -c`/`sh -c` scripts and heredocs fed to a shell, checked the same way.
///
/// Not writes: `mkdir`/`rmdir` (an empty directory is not a file edit), `chmod`/`chown` (only
/// metadata), `pip`/`npm` installs (they change the environment, not the task's files), and
/// running scripts (`python3 repro.py`: the command text says nothing of what they do). An
/// unescaped `>` in `[ ]` or `test` is a real redirection in shell, so it counts; `\>` does not.
///
/// This is a heuristic over the text, not a shell parser: it honours quotes, backslash escapes,
/// `#` comments, heredoc bodies (never read as commands), `[[ ]]` and arithmetic, nothing more.
pub fn shell_writes_files(command: &str) -> bool {
    let segments = Lexer {
        chars: command.chars().collect(),
        ..Lexer::default()
    }
    .run();
    segments
        .iter()
        .any(|seg| seg.redirects_to_file || words_write(&seg.words, &seg.bodies))
}

/// Redirection targets that are not files in the working tree.
fn is_sink(path: &str) -> bool {
    matches!(
        path,
        "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty"
    )
}

/// One simple command of a list or pipeline, after quote removal.
#[derive(Default)]
struct Segment {
    words: Vec<String>,
    /// Bodies of the heredocs fed to this command.
    bodies: Vec<String>,
    redirects_to_file: bool,
}

/// What the next completed word is.
#[derive(Clone, Copy, Default)]
enum Next {
    #[default]
    Word,
    /// Target of `>`; after `>&` a number or `-` is an fd (`2>&1`, `>&2`), not a file.
    OutTarget {
        dup: bool,
    },
    HeredocDelim,
}

#[derive(Default)]
struct Lexer {
    chars: Vec<char>,
    pos: usize,
    done: Vec<Segment>,
    cur: Segment,
    word: String,
    /// Whether a word has started, so that an empty quoted word (`''`) still counts.
    in_word: bool,
    next: Next,
    /// Inside `[[ ]]`, where `>`, `<`, `&&` and `||` belong to the test.
    in_test: bool,
    /// Heredocs whose bodies start after the next newline: (segment index, delimiter).
    heredocs: Vec<(usize, String)>,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek(0);
        self.pos += 1;
        c
    }

    fn push(&mut self, c: char) {
        self.word.push(c);
        self.in_word = true;
    }

    fn run(mut self) -> Vec<Segment> {
        while let Some(c) = self.bump() {
            match c {
                '\\' => match self.bump() {
                    Some('\n') | None => {}  // line continuation
                    Some(n) => self.push(n), // `\>` is a literal character
                },
                '\'' => {
                    self.in_word = true;
                    while let Some(n) = self.bump().filter(|&n| n != '\'') {
                        self.word.push(n);
                    }
                }
                '"' => {
                    self.in_word = true;
                    while let Some(n) = self.bump().filter(|&n| n != '"') {
                        let escaped =
                            n == '\\' && self.peek(0).is_some_and(|e| "\"\\$`".contains(e));
                        let n = if escaped { self.bump().unwrap_or(n) } else { n };
                        self.word.push(n);
                    }
                }
                '#' if !self.in_word => {
                    while self.peek(0).is_some_and(|n| n != '\n') {
                        self.pos += 1;
                    }
                }
                ' ' | '\t' => self.finish_word(),
                '\n' => {
                    self.end_segment();
                    self.read_heredocs();
                }
                '>' | '<' | '&' | '|' if self.in_test => self.push(c),
                '>' => self.redirect_out(),
                '&' if self.peek(0) == Some('>') => {
                    self.pos += 1; // `&>` and `&>>` redirect both streams
                    self.redirect_out();
                }
                '<' => self.redirect_in(),
                '(' if self.peek(0) == Some('(') => self.skip_arithmetic(),
                // `(`, `)` and backquotes also split out `$(cmd)`, `>(cmd)` and `` `cmd` ``.
                ';' | '&' | '|' | '(' | ')' | '`' => self.end_segment(),
                _ => self.push(c),
            }
        }
        self.end_segment();
        self.done
    }

    /// Skips `(( ... ))` or the tail of `$(( ... ))`, whose `<` and `>` are operators.
    fn skip_arithmetic(&mut self) {
        let mut depth = 1usize;
        while let Some(c) = self.bump() {
            match c {
                '(' => depth += 1,
                ')' if depth <= 1 => break,
                ')' => depth -= 1,
                _ => {}
            }
        }
    }

    fn redirect_out(&mut self) {
        // A bare number right before `>` names the fd being redirected (`2>`), not an argument.
        if !self.word.is_empty() && self.word.chars().all(|c| c.is_ascii_digit()) {
            self.word.clear();
            self.in_word = false;
        }
        self.finish_word();
        let dup = self.peek(0) == Some('&');
        if matches!(self.peek(0), Some('>' | '|' | '&')) {
            self.pos += 1; // `>>`, `>|`, `>&`
        }
        self.next = Next::OutTarget { dup };
    }

    fn redirect_in(&mut self) {
        self.finish_word();
        // `< file` and `<<< word` only read; their word stays an ordinary argument.
        match (self.peek(0), self.peek(1)) {
            (Some('<'), Some('<')) => self.pos += 2,
            (Some('<'), dash) => {
                self.pos += if dash == Some('-') { 2 } else { 1 };
                self.next = Next::HeredocDelim;
            }
            _ => {}
        }
    }

    fn finish_word(&mut self) {
        if !std::mem::take(&mut self.in_word) {
            return;
        }
        let w = std::mem::take(&mut self.word);
        match std::mem::take(&mut self.next) {
            Next::OutTarget { dup } => {
                let fd = dup && (w == "-" || w.chars().all(|c| c.is_ascii_digit()));
                self.cur.redirects_to_file |= !fd && !is_sink(&w);
            }
            Next::HeredocDelim => self.heredocs.push((self.done.len(), w)),
            Next::Word => {
                self.in_test =
                    (self.in_test || (w == "[[" && self.cur.words.is_empty())) && w != "]]";
                self.cur.words.push(w);
            }
        }
    }

    /// Ends the current segment; empty ones are kept too, so heredoc indices stay valid.
    fn end_segment(&mut self) {
        self.finish_word();
        self.next = Next::Word;
        self.done.push(std::mem::take(&mut self.cur));
    }

    fn read_heredocs(&mut self) {
        for (idx, delim) in std::mem::take(&mut self.heredocs) {
            let mut body = String::new();
            while self.pos < self.chars.len() {
                let line: String = self.chars[self.pos..]
                    .iter()
                    .take_while(|&&c| c != '\n')
                    .collect();
                self.pos += line.chars().count() + 1;
                if line.trim() == delim {
                    break;
                }
                body.push_str(&line);
                body.push('\n');
            }
            if let Some(seg) = self.done.get_mut(idx) {
                seg.bodies.push(body);
            }
        }
    }
}

/// Keywords and wrappers that run the command after them.
const WRAPPERS: &[&str] = &[
    "sudo", "env", "nice", "timeout", "xargs", "time", "nohup", "command", "exec", "stdbuf", "!",
    "if", "then", "elif", "else", "do", "while", "until", "{",
];

/// Options of those wrappers that take the next word as a value (`sudo -u me`, `xargs -I {}`).
const VALUED: &[&str] = &[
    "-u", "-g", "-n", "-s", "-k", "-I", "-P", "-L", "-d", "-a", "-E",
];

/// Whether the simple command `words` (fed heredoc `bodies`) writes files.
fn words_write(words: &[String], bodies: &[String]) -> bool {
    let mut rest = words;
    while let Some((first, tail)) = rest.split_first() {
        if WRAPPERS.contains(&first.as_str()) {
            rest = skip_options(tail, VALUED);
            if first == "timeout" {
                rest = rest.get(1..).unwrap_or_default(); // the duration
            }
        } else if is_assignment(first) {
            rest = tail;
        } else {
            break;
        }
    }
    let Some((first, args)) = rest.split_first() else {
        return false;
    };
    let has = |flag: &str| args.iter().any(|a| a == flag);
    match first.rsplit('/').next().unwrap_or(first) {
        "tee" => args.iter().any(|a| !a.starts_with('-') && !is_sink(a)),
        // Operands may come from stdin (`| xargs rm`), so these count even without any.
        "cp" | "mv" | "rm" | "touch" | "ln" | "truncate" | "install" | "unlink" | "ed" | "ex" => {
            true
        }
        "sed" => args
            .iter()
            .any(|a| a.starts_with("--in-place") || short_flag(a, 'i', "efl")),
        "perl" => args.iter().any(|a| short_flag(a, 'i', "eEMmIxdDFlC0")),
        "awk" | "gawk" => has("inplace") || has("-iinplace") || has("--include=inplace"),
        "dd" => args
            .iter()
            .any(|a| a.strip_prefix("of=").is_some_and(|p| !is_sink(p))),
        "patch" => !has("--dry-run"),
        "git" => git_writes(args),
        "find" => {
            let exec = args
                .iter()
                .position(|a| a.starts_with("-exec") || a.starts_with("-ok"));
            has("-delete") || exec.is_some_and(|i| words_write(&args[i + 1..], &[]))
        }
        "bash" | "sh" | "zsh" | "dash" => match args.iter().position(|a| short_flag(a, 'c', "")) {
            Some(i) => args
                .get(i + 1)
                .is_some_and(|script| shell_writes_files(script)),
            None => bodies.iter().any(|script| shell_writes_files(script)),
        },
        cmd if cmd.starts_with("python") || cmd.starts_with("pypy") => {
            words.iter().chain(bodies).any(|code| python_writes(code))
        }
        _ => false,
    }
}

/// Drops leading options; those listed in `valued` also take the following word.
fn skip_options<'a>(mut args: &'a [String], valued: &[&str]) -> &'a [String] {
    while let Some((a, tail)) = args.split_first().filter(|(a, _)| a.starts_with('-')) {
        args = if valued.contains(&a.as_str()) {
            tail.get(1..).unwrap_or_default()
        } else {
            tail
        };
    }
    args
}

/// `NAME=value` before a command sets its environment.
fn is_assignment(word: &str) -> bool {
    let name = word.split_once('=').map_or("", |(name, _)| name);
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether a short-option cluster such as `-pi` or `-ni.bak` holds `flag`. A letter in `stops`
/// takes the rest of the word as its value (`-Mstrict`, `-es/i/x/`), so the scan ends there.
fn short_flag(arg: &str, flag: char, stops: &str) -> bool {
    let Some(cluster) = arg.strip_prefix('-').filter(|c| !c.starts_with('-')) else {
        return false;
    };
    cluster
        .chars()
        .take_while(|c| *c == flag || (c.is_ascii_alphanumeric() && !stops.contains(*c)))
        .any(|c| c == flag)
}

/// Git subcommands that change files in the working tree.
fn git_writes(args: &[String]) -> bool {
    let Some((sub, rest)) = skip_options(args, &["-C", "-c"]).split_first() else {
        return false;
    };
    let has = |flag: &str| rest.iter().any(|a| a == flag);
    match sub.as_str() {
        "apply" => has("--apply") || !(has("--check") || has("--stat") || has("--numstat")),
        // `checkout -b NAME` only creates a branch at HEAD; other checkouts restore paths or
        // move to another commit, rewriting files either way.
        "checkout" | "switch" => {
            !(rest.len() <= 2 && ["-b", "-B", "-c", "-C"].into_iter().any(has))
        }
        "restore" | "am" | "rm" | "mv" | "merge" | "rebase" | "cherry-pick" | "pull" => true,
        "stash" => !has("list") && !has("show"),
        "reset" => has("--hard"),
        _ => false,
    }
}

/// Python code that writes files: a write-mode `open(...)` or a known writing call.
fn python_writes(code: &str) -> bool {
    const CALLS: &[&str] = &[
        "write_text(",
        "write_bytes(",
        "os.remove(",
        "os.unlink(",
        "os.rename(",
        "os.replace(",
        "shutil.copy",
        "shutil.move(",
        "shutil.rmtree(",
    ];
    CALLS.iter().any(|call| code.contains(call))
        || code
            .match_indices("open(")
            .any(|(i, m)| open_mode_writes(&code[i + m.len()..]))
}

/// Given the text after `open(`, whether a string literal after the first top-level comma is a
/// writing mode (`'w'`, `"a"`, `'wb'`, `'r+'`, `mode='x'`). The first argument is the path, so
/// a file named `a` is not taken for a mode.
fn open_mode_writes(args: &str) -> bool {
    let (mut depth, mut past_path) = (0usize, false);
    let mut chars = args.chars();
    while let Some(c) = chars.next() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' if depth == 0 => return false,
            ')' | ']' => depth -= 1,
            ',' if depth == 0 => past_path = true,
            '\'' | '"' => {
                let lit: String = chars.by_ref().take_while(|&n| n != c).collect();
                let mode = !lit.is_empty() && lit.chars().all(|m| "rwaxbt+".contains(m));
                if past_path && mode && lit.contains(['w', 'a', 'x', '+']) {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::shell_writes_files;

    #[test]
    fn classifies_commands() {
        let cases = [
            // Redirections: real files write; sinks, fd duplication and quoted `>` do not.
            ("echo hi > out.txt", true),
            ("echo hi >> log.txt", true),
            ("echo hi 1> out.txt", true),
            ("make &> build.log", true),
            ("echo hi >| out.txt", true),
            ("ls 2>/dev/null", false),
            ("ls > /dev/null", false),
            ("make &>/dev/null", false),
            ("echo x > /dev/null", false),
            ("pytest 2>&1 | tail -5", false),
            ("echo err >&2", false),
            ("cmd 2>&1 >/dev/null", false),
            ("git log --oneline > /dev/null", false),
            ("grep '>' f", false),
            ("grep -n \"a > b\" f", false),
            ("echo \"x > y\"", false),
            ("ls # > not-a-file", false),
            // Heredocs: into a file writes; to stdout does not, whatever the body says.
            ("cat <<'EOF' > f.py\nprint(1)\nEOF", true),
            ("cat > f.py <<EOF\nx = 1\nEOF", true),
            ("cat <<EOF\na > b\nEOF", false),
            // Tests and arithmetic.
            ("[[ $a > $b ]] && echo yes", false),
            ("(( a > b )) && echo yes", false),
            ("test \"$a\" \\> \"$b\"", false),
            ("[ \"$a\" \\< \"$b\" ]", false),
            ("echo $((1 << 2))", false),
            // In-place editors.
            ("echo x | tee -a notes.md", true),
            ("echo x | tee /dev/null", false),
            ("sed -i 's/a/b/' f.py", true),
            ("sed --in-place 's/a/b/' f.py", true),
            ("sed -i.bak 's/a/b/' f.py", true),
            ("sed -ie 's/a/b/' f.py", true),
            ("sed -n '1,20p' f", false),
            ("perl -pi -e 's/a/b/' f.py", true),
            ("perl -ne 'print if /i/' f", false),
            ("awk -i inplace '{print}' f", true),
            ("awk '{print $1}' f", false),
            ("ed -s f.py <<'EOF'\n1d\nw\nq\nEOF", true),
            // Python.
            ("python3 -c \"open('f.py', 'w').write('x')\"", true),
            ("python -c 'open(\"log\", \"a\").write(\"x\")'", true),
            (
                "python3 - <<'EOF'\nfrom pathlib import Path\nPath('a').write_text('')\nEOF",
                true,
            ),
            ("python3 <<EOF\nprint(open('f.py').read())\nEOF", false),
            ("python -c \"print(1 > 0)\"", false),
            ("python -m pytest", false),
            ("python3 repro.py", false),
            ("python -c \"print(open('a').read())\"", false),
            ("python -c \"open(os.path.join('a', 'w'))\"", false),
            ("python -c \"f = open('a', mode='r+')\"", true),
            // Patches and git.
            ("patch -p1 < fix.diff", true),
            ("patch --dry-run -p1 < fix.diff", false),
            ("git apply fix.diff", true),
            ("git apply --check fix.diff", false),
            ("git apply --stat fix.diff", false),
            ("git checkout -- src/a.py", true),
            ("git checkout -b feature", false),
            ("git checkout main", true),
            ("git reset --hard HEAD", true),
            ("git restore src/a.py", true),
            ("git am 0001.patch", true),
            ("git diff", false),
            ("git status", false),
            // File utilities; directories, metadata and installs are not edits.
            ("cp a.py b.py", true),
            ("mv a.py b.py", true),
            ("rm -rf build", true),
            ("touch new.py", true),
            ("ln -s a b", true),
            ("truncate -s 0 f", true),
            ("dd if=/dev/zero of=blob bs=1 count=1", true),
            ("install -m 644 a b", true),
            ("find . -name '*.pyc' -delete", true),
            ("find . -name '*.py' -exec sed -i 's/a/b/' {} +", true),
            ("find . -name '*.py' | xargs rm -f", true),
            ("find . -name '*.py'", false),
            ("mkdir -p src/new", false),
            ("chmod +x run.sh", false),
            ("pip install -e .", false),
            ("npm install", false),
            // Read-only commands, lists and wrappers.
            ("cat f", false),
            ("ls -la", false),
            ("diff a b", false),
            ("head -n 5 f | tail -1", false),
            ("cd /repo && python -m pytest -q; git status", false),
            ("cd /repo && sed -i 's/a/b/' f.py", true),
            ("ls\nrm f.py", true),
            ("x=$(sed -i s/a/b/ f)", true),
            ("timeout 10 sudo -u me cp a b", true),
            ("bash -lc \"echo hi > out.txt\"", true),
            ("sh -c 'echo hi 2>/dev/null'", false),
            ("if grep -q x f; then sed -i s/x/y/ f; fi", true),
        ];
        for (command, expected) in cases {
            assert_eq!(
                shell_writes_files(command),
                expected,
                "command: {command:?}"
            );
        }
    }

    #[test]
    fn heredoc_body_is_not_read_as_shell() {
        // The body's `rm` and `>` are text for `cat` to print; what follows `EOF` is a command.
        assert!(!shell_writes_files("cat <<'EOF'\nrm -rf / > x\nEOF\nls"));
        assert!(shell_writes_files("cat <<'EOF'\nhi\nEOF\ntouch done"));
    }
}
