//! The real binary: running a subcommand to its end, or serving until dropped.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
    command()
        .args(args.iter().map(|a| a.as_ref()))
        .output()
        .unwrap()
        .into()
}

/// [`run`] with `input` on standard input.
pub fn run_with_input(args: &[&dyn AsRef<OsStr>], input: &[u8]) -> Ran {
    let mut child = command()
        .args(args.iter().map(|a| a.as_ref()))
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

/// `asap-proxy` without `RUST_LOG` in its environment.
pub fn command() -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("RUST_LOG");
    cmd
}

/// A running `asap-proxy serve` (or `view`), its standard error kept; killed on drop.
pub struct Served {
    pub child: Child,
    /// What the binary announced it listens on (`http://127.0.0.1:PORT/v1` for `serve`).
    pub base: String,
    stderr: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

impl Served {
    /// `asap-proxy serve --listen 127.0.0.1:0 ARGS` with `envs`, once it listens.
    pub fn start(args: &[&str], envs: &[(&str, &str)]) -> Self {
        Self::start_until(args, envs, |line| {
            line.strip_prefix("asap-proxy listening on ")
                .map(str::to_string)
        })
    }

    /// The same, ready at the first standard-error line `ready` takes a base from. The
    /// environment holds none of `RUST_LOG`, the keys or the log format but what `envs` sets.
    pub fn start_until(
        args: &[&str],
        envs: &[(&str, &str)],
        ready: impl Fn(&str) -> Option<String> + Send + 'static,
    ) -> Self {
        let mut cmd = command();
        cmd.arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .args(args);
        for unset in ["ASAP_API_KEY", "ASAP_BACKEND_API_KEY", "ASAP_LOG_FORMAT"] {
            cmd.env_remove(unset);
        }
        for (k, v) in envs {
            cmd.env(k, v);
        }
        Self::spawn_until(cmd, ready)
    }

    /// Spawns `cmd` and waits for the standard-error line starting with `ready`; `base` is
    /// the rest of that line (the URL the binary announced).
    pub fn spawn(cmd: Command, ready: &'static str) -> Self {
        Self::spawn_until(cmd, move |line| {
            line.strip_prefix(ready).map(str::to_string)
        })
    }

    /// Spawns `cmd`, keeps every line of its standard error, and waits (20 s at most) for the
    /// first line `ready` takes a base from.
    pub fn spawn_until(
        mut cmd: Command,
        ready: impl Fn(&str) -> Option<String> + Send + 'static,
    ) -> Self {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pipe = child.stderr.take().unwrap();
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&stderr);
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(base) = ready(&line) {
                    let _ = tx.send(base);
                }
                sink.lock().unwrap().push(line);
            }
        });
        let base = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no ready line within 20 s: the binary did not start"));
        Self {
            child,
            base,
            stderr,
            reader: Some(reader),
        }
    }

    /// The port of `base`.
    pub fn port(&self) -> u16 {
        self.base
            .trim_start_matches("http://127.0.0.1:")
            .trim_end_matches("/v1")
            .parse()
            .unwrap()
    }

    /// Sends SIGTERM.
    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the exit and for the last of its standard error.
    pub fn wait(&mut self) -> ExitStatus {
        let status = self.child.wait().unwrap();
        self.read_to_end();
        status
    }

    /// Waits for the exit, at most `limit`, and for the last of its standard error; returns
    /// the status and how long the exit took.
    pub async fn wait_exit(&mut self, limit: Duration) -> (ExitStatus, Duration) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let took = started.elapsed();
                self.read_to_end();
                return (status, took);
            }
            assert!(started.elapsed() < limit, "no exit within {limit:?}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    fn read_to_end(&mut self) {
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
    }

    /// The lines written to standard error so far.
    pub fn stderr_lines(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// Everything written to standard error so far, a newline after each line.
    pub fn stderr(&self) -> String {
        self.stderr_lines()
            .iter()
            .map(|line| format!("{line}\n"))
            .collect()
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
    crate::util::json_of(reqwest::Client::new().post(url).json(body)).await
}
