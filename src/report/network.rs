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

/// The rule kinds one simple command matches (its words, quotes removed).
fn command_kinds(words: &[String]) -> Vec<&'static str> {
    // Skip leading assignments and wrappers: `FOO=1 sudo timeout 60 curl …`.
    let mut w: Vec<&str> = words.iter().map(String::as_str).collect();
    while let Some(first) = w.first() {
        let wrapper = ["sudo", "env", "timeout", "nohup", "time"].contains(first)
            || (first.contains('=') && !first.starts_with('-'))
            || first.parse::<f64>().is_ok();
        if !wrapper {
            break;
        }
        w.remove(0);
    }
    let Some(&tool) = w.first() else {
        return Vec::new();
    };
    let tool = tool.rsplit('/').next().unwrap_or(tool);
    let sub = w.get(1).copied().unwrap_or("");
    let mut kinds = Vec::new();
    if ["curl", "wget", "aria2c", "http", "https", "fetch"].contains(&tool) {
        kinds.push("download");
    }
    let pip = match tool {
        "pip" | "pip3" => Some(sub),
        "uv" if sub == "pip" => w.get(2).copied(),
        t if t.starts_with("python") && sub == "-m" && w.get(2) == Some(&"pip") => {
            w.get(3).copied()
        }
        _ => None,
    };
    let installs = match tool {
        "npm" | "yarn" | "pnpm" => ["install", "add", "i"].contains(&sub),
        "apt" | "apt-get" | "conda" | "mamba" | "gem" | "cargo" => sub == "install",
        "go" => sub == "get" || sub == "install",
        _ => false,
    };
    if installs || pip.is_some_and(|s| s == "install" || s == "download") {
        kinds.push("package_install");
    }
    if tool == "git" && ["clone", "fetch", "pull", "ls-remote"].contains(&sub) {
        kinds.push("git_remote");
    }
    kinds
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
    if hosts.iter().any(|h| text.contains(h.as_str())) {
        return true;
    }
    words.iter().any(|w| {
        let lower: Vec<String> = w.iter().map(|x| x.to_lowercase()).collect();
        let gh =
            lower.first().is_some_and(|t| t == "gh") && lower.iter().any(|x| x.contains(&path));
        // `pip install astropy`, `pip install astropy==5.0`: the released package of the repo.
        let package = command_kinds(w).contains(&"package_install")
            && lower.iter().skip(1).any(|x| {
                let name = x.split(['=', '<', '>', '[', '~', '!']).next().unwrap_or("");
                name == repo.as_str() || name.replace('_', "-") == repo.replace('_', "-")
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
        assert!(!seek("python -c 'import django; print(django.VERSION)'"));
    }
}
