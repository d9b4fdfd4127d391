//! The real binary: running a subcommand to its end, or serving until dropped.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// The `asap-proxy` binary cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_asap-proxy");

/// What one run of the binary gave.
pub struct Ran {
    /// The exit code (`None` when a signal ended it).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// Whether it exited 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// Standard output as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap()
    }
}

/// Runs `asap-proxy ARGS` (without `RUST_LOG`) to its end; the arguments may mix strings
/// and paths: `run(&[&"report", &dir, &"--format", &"json"])`.
pub fn run(args: &[&dyn AsRef<OsStr>]) -> Ran {
    Command::new(BIN)
        .args(args.iter().map(|a| a.as_ref()))
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
        .into()
}

/// [`run`] with `input` on standard input.
pub fn run_with_input(args: &[&dyn AsRef<OsStr>], input: &[u8]) -> Ran {
    let mut child = Command::new(BIN)
        .args(args.iter().map(|a| a.as_ref()))
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap().into()
}

impl From<Output> for Ran {
    fn from(out: Output) -> Self {
        Ran {
            code: out.status.code(),
            stdout: String::from_utf8(out.stdout).unwrap(),
            stderr: String::from_utf8(out.stderr).unwrap(),
        }
    }
}

/// A path as the `&str` a command line takes.
pub fn path_str(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

/// A running `asap-proxy serve`, killed on drop.
pub struct Served {
    pub child: Child,
    pub base: String,
}

impl Served {
    /// `asap-proxy serve --listen 127.0.0.1:0 ARGS` with `envs`, once it listens.
    pub fn start(args: &[&str], envs: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .args(args);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        Self::spawn(cmd, "asap-proxy listening on ")
    }

    /// Spawns `cmd` and waits (20 s at most) for the standard-error line starting with
    /// `ready`; `base` is the rest of that line (the URL the binary announced).
    pub fn spawn(mut cmd: Command, ready: &'static str) -> Self {
        cmd.env_remove("RUST_LOG");
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix(ready) {
                    let _ = tx.send(url.to_string());
                }
            }
        });
        let base = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no `{ready}` line: the binary did not start"));
        Self { child, base }
    }

    /// Posts `body` to `BASE/chat/completions`; returns the JSON answer.
    pub async fn chat(&self, body: &Value) -> Value {
        post_json(&format!("{}/chat/completions", self.base), body).await
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Posts `body` to `url` with a fresh client; returns the JSON answer, whatever the status.
pub async fn post_json(url: &str, body: &Value) -> Value {
    reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}
