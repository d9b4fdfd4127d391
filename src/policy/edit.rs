//! Classifies an agent's shell command (a `bash` tool call) as editing files or not, for the
//! nudge "a submit before any file edit is rejected once with a hint".
//!
//! - A list or pipeline (`;`, `&&`, `||`, `|`, `&`, newlines) writes if any segment writes.
//! - Writes: redirection to a real path; `tee FILE`; `sed -i`, `perl -i`, `awk -i inplace`;
//!   `cp`, `mv`, `rm`, `touch`, `ln`, `truncate`, `install`, `dd of=`, `ed`/`ex`; `patch`;
//!   tree-changing `git` subcommands; `find -delete`/`-exec`; Python opening a file for writing.
//! - Not writes: redirection to `/dev/null` or to another fd, `>` inside quotes, `[[ ]]`,
//!   `(( ))`, `$(( ))`, `mkdir`, `chmod`, package installs, running scripts.

use serde_json::Value;

use crate::profile::Action;
use crate::profile::{ResolvedProfile, ToolRole, EDITOR_TAG};

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
    !shell_write_targets(command).is_empty()
}

/// How a write treats its target, for telling an edit of the repository from a file the
/// trajectory made itself (`report`'s "autonomous edit", docs/report.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// Makes a new file and fails on an existing one: the editor's `create` (SWE-agent's and
    /// OpenHands' editors refuse to overwrite).
    Create,
    /// Writes the whole file, making it when missing: `>`, `>>`, `tee`, `touch`, the target
    /// of `cp`/`mv`/`install`/`ln`, `dd of=`.
    Overwrite,
    /// Changes a file that must exist: `sed -i`, editor `str_replace`/`insert`, `rm`, the
    /// source of `mv`; also every write whose target the text does not show (`patch`,
    /// `git apply`, Python, `perl -i`).
    InPlace,
}

/// One file a command writes: its path as written (`None` when the text does not show it)
/// and the [`WriteKind`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteTarget {
    /// The path as the command wrote it (relative or absolute); `None` when not shown.
    pub path: Option<String>,
    /// How the write treats the file.
    pub kind: WriteKind,
}

impl WriteTarget {
    fn new(path: &str, kind: WriteKind) -> Self {
        let path = (path != "{}" && !path.is_empty()).then(|| path.to_string());
        Self { path, kind }
    }

    fn unknown() -> Self {
        Self {
            path: None,
            kind: WriteKind::InPlace,
        }
    }
}

/// The files a shell command writes (see [`shell_writes_files`] for the rule), in order;
/// empty when it writes none. A writing command whose targets the text does not show gives
/// one target with path `None`.
pub fn shell_write_targets(command: &str) -> Vec<WriteTarget> {
    let segments = Lexer {
        chars: command.chars().collect(),
        ..Lexer::default()
    }
    .run();
    segments
        .iter()
        .flat_map(|seg| {
            let redirects = seg
                .targets
                .iter()
                .map(|t| WriteTarget::new(t, WriteKind::Overwrite));
            redirects
                .chain(words_targets(&seg.words, &seg.bodies))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The files an action writes: a shell command's [`shell_write_targets`]; an editor command
/// listed as modifying in the profile, its `path` ([`WriteKind::Create`] for `create`, else
/// [`WriteKind::InPlace`]). Empty for an action that is not an edit ([`super::is_edit`]).
pub fn edit_targets(action: &Action, tools: &ResolvedProfile) -> Vec<WriteTarget> {
    let Action::Call { tag, arguments } = action else {
        return Vec::new();
    };
    let text = |key: &str| arguments.get(key).and_then(Value::as_str);
    let editor = |modifies: bool| {
        if !modifies {
            return Vec::new();
        }
        let kind = if text("command") == Some("create") {
            WriteKind::Create
        } else {
            WriteKind::InPlace
        };
        vec![WriteTarget::new(text("path").unwrap_or_default(), kind)]
    };
    match tools.get(tag).map(|t| &t.role) {
        Some(ToolRole::Shell { command_parameter }) => {
            text(command_parameter).map_or_else(Vec::new, shell_write_targets)
        }
        Some(ToolRole::Editor) => editor(
            text("command").is_some_and(|c| tools.modifying_commands().iter().any(|m| m == c)),
        ),
        _ if tag == EDITOR_TAG => editor(text("command").is_some_and(|c| c != "view")),
        _ => tools.write_tool(tag).map_or_else(Vec::new, |w| {
            let kind = match w.kind {
                crate::profile::WritesAs::InPlace => WriteKind::InPlace,
                crate::profile::WritesAs::Overwrite => WriteKind::Overwrite,
                crate::profile::WritesAs::Create => WriteKind::Create,
            };
            let path = w.path_parameter.as_deref().and_then(text);
            vec![WriteTarget::new(path.unwrap_or_default(), kind)]
        }),
    }
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
    /// Files it redirects output to (`>`, `>>`, `&>`), sinks excluded.
    targets: Vec<String>,
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
                if !fd && !is_sink(&w) {
                    self.cur.targets.push(w);
                }
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

/// The words of the command a simple command runs: after shell keywords (`if`, `do`, `!`,
/// ...), wrappers (`sudo`, `env`, `timeout 5m`, `xargs -n1`, `nice`, ...) with their options,
/// and `NAME=value` assignments. Shared by the edit rule and the report's network audit.
pub fn command_words(words: &[String]) -> &[String] {
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
    rest
}

/// The files the simple command `words` (fed heredoc `bodies`) writes; empty when none.
fn words_targets(words: &[String], bodies: &[String]) -> Vec<WriteTarget> {
    let rest = command_words(words);
    let Some((first, args)) = rest.split_first() else {
        return Vec::new();
    };
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let operands = || args.iter().filter(|a| !a.starts_with('-'));
    // Operands may come from stdin (`| xargs rm`), so these write even without any.
    let each = |kind| {
        let mut targets: Vec<WriteTarget> = operands().map(|a| WriteTarget::new(a, kind)).collect();
        if targets.is_empty() {
            targets.push(WriteTarget::unknown());
        }
        targets
    };
    let unknown = |writes: bool| {
        if writes {
            vec![WriteTarget::unknown()]
        } else {
            Vec::new()
        }
    };
    match first.rsplit('/').next().unwrap_or(first) {
        "tee" => operands()
            .filter(|a| !is_sink(a))
            .map(|a| WriteTarget::new(a, WriteKind::Overwrite))
            .collect(),
        "rm" | "unlink" | "truncate" | "ed" | "ex" => each(WriteKind::InPlace),
        "touch" => each(WriteKind::Overwrite),
        // `cp`, `install` and `ln` only read their sources; `mv` takes them away.
        "cp" | "install" | "ln" => {
            each(WriteKind::Overwrite).split_off(operands().count().max(1) - 1)
        }
        "mv" => {
            let mut targets = each(WriteKind::InPlace);
            if let Some(last) = targets.last_mut().filter(|t| t.path.is_some()) {
                last.kind = WriteKind::Overwrite;
            }
            targets
        }
        "sed"
            if args
                .iter()
                .any(|a| a.starts_with("--in-place") || short_flag(a, 'i', "efl")) =>
        {
            sed_files(args)
        }
        "sed" => Vec::new(),
        "perl" => unknown(args.iter().any(|a| short_flag(a, 'i', "eEMmIxdDFlC0"))),
        "awk" | "gawk" => unknown(has("inplace") || has("-iinplace") || has("--include=inplace")),
        "dd" => args
            .iter()
            .filter_map(|a| a.strip_prefix("of="))
            .filter(|p| !is_sink(p))
            .map(|p| WriteTarget::new(p, WriteKind::Overwrite))
            .collect(),
        "patch" => unknown(!has("--dry-run")),
        "git" => unknown(git_writes(args)),
        "find" => {
            let exec = args
                .iter()
                .position(|a| a.starts_with("-exec") || a.starts_with("-ok"));
            let mut targets = exec.map_or_else(Vec::new, |i| {
                let command = &args[i + 1..];
                let end = command
                    .iter()
                    .position(|a| a == "+" || a == ";")
                    .unwrap_or(command.len());
                words_targets(&command[..end], &[])
            });
            if targets.is_empty() && has("-delete") {
                targets.push(WriteTarget::unknown());
            }
            targets
        }
        "bash" | "sh" | "zsh" | "dash" => match args.iter().position(|a| short_flag(a, 'c', "")) {
            Some(i) => args
                .get(i + 1)
                .map_or_else(Vec::new, |script| shell_write_targets(script)),
            None => bodies.iter().flat_map(|b| shell_write_targets(b)).collect(),
        },
        cmd if cmd.starts_with("python") || cmd.starts_with("pypy") => words
            .iter()
            .chain(bodies)
            .flat_map(|code| python_targets(code))
            .collect(),
        _ => Vec::new(),
    }
}

/// The files of `sed -i`: its operands after the script (the first operand unless `-e`,
/// `-f` or `--expression` gives it). BSD's `sed -i '' …` suffix word is skipped.
fn sed_files(args: &[String]) -> Vec<WriteTarget> {
    let mut files = Vec::new();
    let mut script_given = false;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "-e" || a == "-f" || a == "--expression" || a == "--file" {
            script_given = true;
            i += 2;
            continue;
        }
        if a.starts_with("--expression=") || a.starts_with("--file=") {
            script_given = true;
        } else if a.starts_with('-') {
            // `-i ''` (BSD): the empty word is the backup suffix.
            if a == "-i" && args.get(i + 1).is_some_and(String::is_empty) {
                i += 1;
            }
        } else if !script_given {
            script_given = true;
        } else {
            files.push(WriteTarget::new(a, WriteKind::InPlace));
        }
        i += 1;
    }
    if files.is_empty() {
        files.push(WriteTarget::unknown());
    }
    files
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

/// Python calls that write or remove files (besides a writing `open`).
const PYTHON_WRITE_CALLS: &[&str] = &[
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

/// Python code that writes files: a write-mode `open(...)` or a known writing call.
fn python_writes(code: &str) -> bool {
    PYTHON_WRITE_CALLS.iter().any(|call| code.contains(call))
        || code
            .match_indices("open(")
            .any(|(i, m)| open_mode_writes(&code[i + m.len()..]))
}

/// Given the text after `open(`, whether a string literal after the first top-level comma is a
/// writing mode (`'w'`, `"a"`, `'wb'`, `'r+'`, `mode='x'`). The first argument is the path, so
/// a file named `a` is not taken for a mode.
fn open_mode_writes(args: &str) -> bool {
    open_write_mode(args).is_some()
}

/// The writing mode of an `open(` call ([`open_mode_writes`]), given the text after `open(`.
fn open_write_mode(args: &str) -> Option<String> {
    let (mut depth, mut past_path) = (0usize, false);
    let mut chars = args.chars();
    while let Some(c) = chars.next() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' if depth == 0 => return None,
            ')' | ']' => depth -= 1,
            ',' if depth == 0 => past_path = true,
            '\'' | '"' => {
                let lit: String = chars.by_ref().take_while(|&n| n != c).collect();
                let mode = !lit.is_empty() && lit.chars().all(|m| "rwaxbt+".contains(m));
                if past_path && mode && lit.contains(['w', 'a', 'x', '+']) {
                    return Some(lit);
                }
            }
            _ => {}
        }
    }
    None
}

/// The files Python code writes: each writing `open('path', mode)` whose path is a string
/// literal (`r+` in place, other modes overwrite); one unknown target for any other write
/// ([`python_writes`]: `write_text(`, `os.remove(`, an `open` of a computed path, …).
fn python_targets(code: &str) -> Vec<WriteTarget> {
    if !python_writes(code) {
        return Vec::new();
    }
    let mut targets = Vec::new();
    let mut other = false;
    for (i, m) in code.match_indices("open(") {
        let args = &code[i + m.len()..];
        let Some(mode) = open_write_mode(args) else {
            continue;
        };
        let literal = args
            .trim_start()
            .chars()
            .next()
            .filter(|q| *q == '\'' || *q == '"');
        let path = literal.and_then(|q| {
            let rest = &args.trim_start()[1..];
            rest.find(q).map(|end| &rest[..end])
        });
        match path {
            Some(path) if !path.is_empty() => {
                let kind = if mode.contains('r') {
                    WriteKind::InPlace
                } else {
                    WriteKind::Overwrite
                };
                targets.push(WriteTarget::new(path, kind));
            }
            _ => other = true,
        }
    }
    if other || targets.is_empty() || PYTHON_WRITE_CALLS.iter().any(|c| code.contains(c)) {
        targets.push(WriteTarget::unknown());
    }
    targets
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
    fn write_targets_name_the_files_and_how_they_are_written() {
        use super::{shell_write_targets, WriteKind::*, WriteTarget};
        let t = |p: Option<&str>, kind| WriteTarget {
            path: p.map(str::to_string),
            kind,
        };
        let cases = [
            (
                "cat > reproduce.py <<'EOF'\nprint(1)\nEOF",
                vec![t(Some("reproduce.py"), Overwrite)],
            ),
            (
                "echo x >> notes.md 2>/dev/null",
                vec![t(Some("notes.md"), Overwrite)],
            ),
            (
                "sed -i 's/a/b/' src/a.py src/b.py",
                vec![t(Some("src/a.py"), InPlace), t(Some("src/b.py"), InPlace)],
            ),
            (
                "sed -i -e 's/a/b/' -e 's/c/d/' f.py",
                vec![t(Some("f.py"), InPlace)],
            ),
            ("sed -i '' 's/a/b/' f.py", vec![t(Some("f.py"), InPlace)]),
            (
                "echo x | tee -a log.txt /dev/null",
                vec![t(Some("log.txt"), Overwrite)],
            ),
            ("cp a.py b.py", vec![t(Some("b.py"), Overwrite)]),
            (
                "mv a.py b.py",
                vec![t(Some("a.py"), InPlace), t(Some("b.py"), Overwrite)],
            ),
            ("rm -f x.pyc", vec![t(Some("x.pyc"), InPlace)]),
            ("find . -name '*.pyc' | xargs rm", vec![t(None, InPlace)]),
            ("git apply fix.diff", vec![t(None, InPlace)]),
            ("python3 -c \"open('a', 'w')\"", vec![t(Some("a"), Overwrite)]),
            (
                "python - <<'EOF'\nwith open('reproduce_issue.py', 'w') as f:\n    f.write('x')\nEOF",
                vec![t(Some("reproduce_issue.py"), Overwrite)],
            ),
            ("python -c \"open('src/a.py', 'r+').write('x')\"", vec![t(Some("src/a.py"), InPlace)]),
            ("python -c \"open(p, 'w')\"", vec![t(None, InPlace)]),
            ("python -c \"Path('a').write_text('')\"", vec![t(None, InPlace)]),
            ("find . -exec sed -i 's/a/b/' {} +", vec![t(None, InPlace)]),
            (
                "bash -c 'echo hi > out.txt'",
                vec![t(Some("out.txt"), Overwrite)],
            ),
            ("cat f.py", vec![]),
            ("sed -n 1,5p f.py", vec![]),
        ];
        for (command, expected) in cases {
            assert_eq!(
                shell_write_targets(command),
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
