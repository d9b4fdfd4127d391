//! The network audit (issue 21; the paper audited 24,000 trajectories: 0.60 % attempted any
//! external access, 0.07 % sought a gold solution, at most 0.23 points of Pass@1). Per
//! trajectory, the executed shell commands (accepted turns: not nudged, not replaced by a
//! termination) are matched against the rules below; docs/report.md "Network audit" lists them
//! with their false positives.
//!
//! - `download`: a command word `curl`, `wget`, `aria2c`, `http`/`https` (HTTPie), `fetch`.
//! - `package_install`: `pip`/`pip3`/`uv pip`/`python -m pip` `install` (also `download`),
//!   `npm`/`yarn`/`pnpm` `install`/`add`/`i`, `apt`/`apt-get` `install`, `conda`/`mamba`
//!   `install`, `gem install`, `cargo install`, `go get`/`go install`.
//! - `git_remote`: `git clone` (any source), `git fetch`, `git pull`, `git ls-remote`.
//! - `code_url`: the command's text (here-documents included) opens a URL from code:
//!   `urlopen(`, `urllib.request`, `requests.get(`/`.post(`/`.Session(`, `http.client`,
//!   `httpx.`, `aiohttp`, `socket.create_connection`.
//! - **Gold-seeking** (`gold`): the task's upstream repository is known from a SWE-bench
//!   `instance_id` (`owner__repo-1234` → `owner/repo`), and a command names it on a code host
//!   (`github.com/owner/repo`, `api.github.com/repos/owner/repo`,
//!   `raw.githubusercontent.com/owner/repo`), runs `gh` about it (`gh issue`/`gh pr`/`gh api`
//!   with `owner/repo`), or installs or downloads the package named like the repository
//!   (a released version may hold the fix).

use serde::Serialize;

use super::shell::simple_commands;
use super::Trajectory;

/// What one trajectory did that can reach the network.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NetworkFlags {
    /// The rule names that matched (`download`, `package_install`, `git_remote`, `code_url`),
    /// sorted, each once.
    pub kinds: Vec<String>,
    /// A command sought the task's upstream repository (see the module docs).
    pub gold: bool,
    /// The matching commands, in order, each once.
    pub commands: Vec<String>,
}

impl NetworkFlags {
    /// Whether any rule matched.
    pub fn any(&self) -> bool {
        !self.kinds.is_empty() || self.gold
    }
}

/// The upstream repository `owner/repo` of a SWE-bench instance id (`owner__repo-1234`).
pub fn upstream_repo(instance_id: &str) -> Option<(String, String)> {
    let (owner, rest) = instance_id.split_once("__")?;
    let (repo, number) = rest.rsplit_once('-')?;
    (!owner.is_empty() && !repo.is_empty() && number.chars().all(|c| c.is_ascii_digit()))
        .then(|| (owner.to_lowercase(), repo.to_lowercase()))
}

const CODE_URL: [&str; 9] = [
    "urlopen(",
    "urllib.request",
    "requests.get(",
    "requests.post(",
    "requests.session(",
    "http.client",
    "httpx.",
    "aiohttp",
    "socket.create_connection",
];

/// The rule kinds one simple command matches (its words, quotes removed); `bash -c`/`sh -c`
/// scripts are read too.
fn command_kinds(words: &[String]) -> Vec<&'static str> {
    let w = crate::policy::command_words(words);
    let Some(tool) = w.first() else {
        return Vec::new();
    };
    let tool = tool.rsplit('/').next().unwrap_or(tool);
    let arg = |i: usize| w.get(i).map(String::as_str).unwrap_or("");
    let mut kinds = Vec::new();
    if ["bash", "sh", "zsh", "dash"].contains(&tool) {
        if let Some(at) = w.iter().position(|a| a == "-c" || a == "-lc") {
            for inner in simple_commands(arg(at + 1)) {
                kinds.extend(command_kinds(&inner));
            }
        }
        return kinds;
    }
    let sub = arg(1);
    let fetches = match tool {
        "curl" | "wget" | "aria2c" | "http" | "https" | "fetch" | "ssh" | "scp" | "rsync"
        | "ping" | "nc" | "ncat" | "telnet" | "ftp" | "sftp" | "gh" => true,
        "docker" | "podman" => sub == "pull",
        _ => false,
    };
    if fetches {
        kinds.push("download");
    }
    if package_command(w).is_some() {
        kinds.push("package_install");
    }
    if tool == "git" {
        let sub = git_subcommand(&w[1..]);
        let submodule = sub == Some("submodule") && w.iter().any(|a| a == "update");
        if matches!(sub, Some("clone" | "fetch" | "pull" | "ls-remote")) || submodule {
            kinds.push("git_remote");
        }
    }
    kinds
}

/// The subcommand of `git`, after its global options (`-C dir`, `-c k=v`, `--no-pager`, ...).
fn git_subcommand(args: &[String]) -> Option<&str> {
    let mut i = 0;
    while let Some(a) = args.get(i) {
        match a.as_str() {
            "-C" | "-c" | "--git-dir" | "--work-tree" | "--namespace" => i += 2,
            a if a.starts_with('-') => i += 1,
            a => return Some(a),
        }
    }
    None
}

/// When the words (after wrappers) install or fetch packages: the index of the first word
/// after the install subcommand (the package arguments start there).
fn package_command(w: &[String]) -> Option<usize> {
    let tool = w.first()?.rsplit('/').next()?;
    let arg = |i: usize| w.get(i).map(String::as_str).unwrap_or("");
    let pip_at = match tool {
        "pip" | "pip3" => Some(1),
        "uv" if arg(1) == "pip" => Some(2),
        t if t.starts_with("python") && arg(1) == "-m" && arg(2).starts_with("pip") => Some(3),
        _ => None,
    };
    if let Some(at) = pip_at {
        return ["install", "download", "index"]
            .contains(&arg(at))
            .then_some(at + 1);
    }
    if tool.starts_with("python")
        && arg(1) == "setup.py"
        && ["install", "develop"].contains(&arg(2))
    {
        return Some(3);
    }
    let at = match (tool, arg(1)) {
        ("npm" | "yarn" | "pnpm", "install" | "add" | "i" | "ci") => 2,
        ("apt" | "apt-get", "install" | "update") => 2,
        ("conda" | "mamba" | "gem" | "cargo" | "poetry" | "pipenv", "install" | "add") => 2,
        ("go", "get" | "install") => 2,
        ("go", "mod") if arg(2) == "download" => 3,
        _ => return None,
    };
    Some(at)
}

/// Whether `text` holds `needle` followed by the end or a character that ends a path segment
/// (so `github.com/django/django` does not match `github.com/django/djangoproject.com`).
fn holds_segment(text: &str, needle: &str) -> bool {
    text.match_indices(needle).any(|(at, _)| {
        let rest = &text[at + needle.len()..];
        rest.is_empty()
            || rest.starts_with(".git")
            || rest.starts_with(|c: char| "/?#'\"` \t\n)".contains(c))
    })
}

/// Whether a command seeks the upstream repository `owner/repo`.
fn seeks(command: &str, words: &[Vec<String>], (owner, repo): &(String, String)) -> bool {
    let text = command.to_lowercase();
    let path = format!("{owner}/{repo}");
    let hosts = [
        format!("github.com/{path}"),
        format!("api.github.com/repos/{path}"),
        format!("raw.githubusercontent.com/{path}"),
    ];
    if hosts.iter().any(|h| holds_segment(&text, h)) {
        return true;
    }
    let norm = |x: &str| x.to_lowercase().replace('_', "-");
    words.iter().any(|words| {
        let w = crate::policy::command_words(words);
        let gh = w.first().is_some_and(|t| t == "gh")
            && w.iter().any(|x| holds_segment(&x.to_lowercase(), &path));
        // `pip install django==4.2`: the released package of the repository (its arguments
        // only, not the installer's own name: `python -m pip install six` on pypa/pip is not).
        let package = package_command(w).is_some_and(|at| {
            w.iter().skip(at).filter(|x| !x.starts_with('-')).any(|x| {
                let name = x
                    .split(['=', '<', '>', '[', '~', '!', ' '])
                    .next()
                    .unwrap_or("");
                norm(name) == norm(repo)
            })
        });
        gh || package
    })
}

/// The audit of one trajectory.
pub fn audit(t: &Trajectory) -> NetworkFlags {
    let upstream = upstream_repo(&t.instance_id);
    let mut flags = NetworkFlags::default();
    for a in &t.attempts {
        let executed = a.nudge.is_none() && !a.terminated;
        let Some(command) = a.shell_command.as_deref().filter(|_| executed) else {
            continue;
        };
        let words = simple_commands(command);
        let mut kinds: Vec<&str> = words.iter().flat_map(|w| command_kinds(w)).collect();
        let lower = command.to_lowercase();
        if CODE_URL.iter().any(|p| lower.contains(p)) {
            kinds.push("code_url");
        }
        let gold = upstream.as_ref().is_some_and(|u| seeks(command, &words, u));
        if kinds.is_empty() && !gold {
            continue;
        }
        flags.gold |= gold;
        for k in kinds {
            if !flags.kinds.iter().any(|x| x == k) {
                flags.kinds.push(k.to_string());
            }
        }
        if !flags.commands.iter().any(|c| c == command) {
            flags.commands.push(command.to_string());
        }
    }
    flags.kinds.sort();
    flags
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(command: &str) -> Vec<&'static str> {
        let mut k: Vec<&str> = simple_commands(command)
            .iter()
            .flat_map(|w| command_kinds(w))
            .collect();
        k.sort_unstable();
        k
    }

    #[test]
    fn rules_match_commands_not_mentions() {
        assert_eq!(kinds("curl -s https://example.com | head"), ["download"]);
        assert_eq!(kinds("sudo timeout 60 wget x"), ["download"]);
        assert_eq!(kinds("python -m pip install requests"), ["package_install"]);
        assert_eq!(kinds("uv pip install -e ."), ["package_install"]);
        assert_eq!(kinds("cd /testbed && git fetch origin"), ["git_remote"]);
        assert_eq!(
            kinds("apt-get install -y jq && npm i left-pad"),
            ["package_install", "package_install"]
        );
        // Mentions, reads and local git are not access.
        assert!(kinds("grep -rn curl src/ && cat README.md").is_empty());
        assert!(kinds("git diff && git log -3 && pip list").is_empty());
        assert!(kinds("echo 'pip install x'").is_empty());
        // Keywords, wrappers, `bash -c` and git's global options do not hide a command.
        assert_eq!(
            kinds("for p in six attrs; do pip install $p; done"),
            ["package_install"]
        );
        assert_eq!(kinds("if true; then curl -s x; fi"), ["download"]);
        assert_eq!(kinds("timeout 5m pip install six"), ["package_install"]);
        assert_eq!(kinds("nice -n 10 curl x"), ["download"]);
        assert_eq!(kinds("bash -c 'pip install requests'"), ["package_install"]);
        assert_eq!(kinds("git -C /testbed fetch origin"), ["git_remote"]);
        assert_eq!(kinds("git --no-pager pull"), ["git_remote"]);
        assert_eq!(kinds("git -C /testbed log --oneline"), Vec::<&str>::new());
        assert_eq!(kinds("gh pr view 11099"), ["download"]);
        assert_eq!(
            kinds("npm ci && poetry install"),
            ["package_install", "package_install"]
        );
        assert_eq!(kinds("python setup.py develop"), ["package_install"]);
        assert!(kinds("npm test && apt list --installed && python setup.py test").is_empty());
    }

    #[test]
    fn the_upstream_repository_comes_from_the_instance_id() {
        assert_eq!(
            upstream_repo("astropy__astropy-12907"),
            Some(("astropy".into(), "astropy".into()))
        );
        assert_eq!(
            upstream_repo("scikit-learn__scikit-learn-10297"),
            Some(("scikit-learn".into(), "scikit-learn".into()))
        );
        assert_eq!(upstream_repo("slugify"), None);
        let u = upstream_repo("django__django-11099").unwrap();
        let seek = |c: &str| seeks(c, &simple_commands(c), &u);
        assert!(seek(
            "curl https://api.github.com/repos/django/django/pulls?q=11099"
        ));
        assert!(seek("gh pr list -R django/django --search ticket"));
        assert!(seek("pip install --upgrade django==4.2"));
        assert!(!seek("pip install pytest"));
        // The repository's own name, not one that starts with it.
        assert!(!seek(
            "git clone https://github.com/django/djangoproject.com"
        ));
        assert!(!seek(
            "curl https://github.com/django/django-contrib-comments/raw/master/x"
        ));
        assert!(!seek("gh repo view django/django-filter"));
        assert!(seek(
            "git clone https://github.com/django/django.git /tmp/dj"
        ));
        // The installer's own name is no package argument (a task of pypa/pip).
        let pip = upstream_repo("pypa__pip-12345").unwrap();
        let seek_pip = |c: &str| seeks(c, &simple_commands(c), &pip);
        assert!(!seek_pip("python -m pip install six"));
        assert!(seek_pip("python -m pip install pip==24.0"));
        assert!(!seek("python -c 'import django; print(django.VERSION)'"));
    }
}
