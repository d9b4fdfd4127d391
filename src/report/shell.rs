//! A small shell lexer: enough of POSIX sh to find the simple commands of a command line.

/// Splits a shell command into simple commands (lists of words, quotes removed).
pub fn simple_commands(command: &str) -> Vec<Vec<String>> {
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
