//! Trajectory viewer: server-rendered HTML over trace logs (`asap-proxy view DIR...`, and
//! `/ui` on a running proxy). `docs/viewer.md` describes the pages.
//!
//! - [`sessions`]: the session list (task, label/model, run, outcome, behaviour flags), from
//!   the report's trajectory and behaviour computation.
//! - [`steps`]: one trajectory step by step, with each call's exact prompt.
//! - [`pages`]: the minijinja templates (`templates/view/`), HTML auto-escaped.
//! - [`routes`]: the axum routes, mountable on any router.
//!
//! Trace files are read again on every page load (the list only reads files that changed),
//! so the pages follow a running proxy's log directory.

mod args;
pub mod pages;
pub mod routes;
pub mod sessions;
pub mod steps;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::error::CliError;
use crate::report::Results;
use crate::trace::read::trace_files;

pub use args::ViewArgs;
pub use routes::router;
pub use sessions::{SessionList, SessionSummary};
pub use steps::{StepView, Steps};

/// Errors of the viewer's pages.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// No trace file for this session id, or no such call in it (HTTP 404).
    #[error("{0}")]
    NotFound(String),
    /// A trace file that cannot be read (HTTP 500).
    #[error("{0}")]
    Read(String),
    /// A template failed (HTTP 500).
    #[error("rendering the page: {0}")]
    Render(String),
}

/// The session page's data: the list entry, the session record, the calls.
#[derive(Debug, Clone, Serialize)]
pub struct SessionPage {
    pub summary: SessionSummary,
    /// Fields of the session record not in the summary: `backend`, `mode`, `prefix_k`,
    /// `prefix_source`, `rules`, `config_sha256`, `proxy_version`, `proxy_build` (those the record has).
    pub record: Vec<(String, String)>,
    /// Other trace files with the same session id (copies, or split log directories).
    pub duplicates: Vec<String>,
    pub steps: Steps,
    /// [`steps::INLINE_PROMPT_BYTES`], for the page's explanation.
    pub inline_prompt_bytes: usize,
}

/// Reads trace directories for the pages; cheap to share.
#[derive(Debug)]
pub struct Viewer {
    dirs: Vec<PathBuf>,
    results: Option<Results>,
    cache: Mutex<sessions::Cache>,
}

impl Viewer {
    /// A viewer of the `*.jsonl` and `*.jsonl.zst` traces under `dirs` (directories searched recursively,
    /// files taken as given; a directory that does not exist yet lists no sessions), with
    /// resolution `results` when given.
    pub fn new(dirs: Vec<PathBuf>, results: Option<Results>) -> Self {
        Self {
            dirs,
            results,
            cache: Mutex::default(),
        }
    }

    /// The trace files now under the directories, and the directories that cannot be read.
    fn files(&self) -> (Vec<PathBuf>, Vec<String>) {
        let mut files = Vec::new();
        let mut problems = Vec::new();
        for dir in &self.dirs {
            if !dir.exists() {
                problems.push(format!("{}: does not exist (yet)", dir.display()));
                continue;
            }
            match trace_files(std::slice::from_ref(dir)) {
                Ok(found) => files.extend(found),
                Err(e) => problems.push(e.to_string()),
            }
        }
        files.sort();
        files.dedup();
        (files, problems)
    }

    /// Every session, newest first.
    pub fn sessions(&self) -> SessionList {
        let (files, problems) = self.files();
        let mut list = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .list(&files, self.results.as_ref());
        list.skipped.extend(problems);
        list.dirs = self.dirs.iter().map(|d| d.display().to_string()).collect();
        list
    }

    /// The trace files of session `id` (file stem), in path order.
    fn session_files(&self, id: &str) -> Vec<PathBuf> {
        self.files()
            .0
            .into_iter()
            .filter(|p| crate::trace::read::trace_stem(p) == id)
            .collect()
    }

    /// The page data of session `id`.
    ///
    /// Errors: no trace file of that session, or it cannot be read.
    pub fn session(&self, id: &str) -> Result<SessionPage, ViewError> {
        let files = self.session_files(id);
        let Some(path) = files.first() else {
            return Err(ViewError::NotFound(format!("no trace of session {id}")));
        };
        let summary = self
            .sessions()
            .sessions
            .into_iter()
            .find(|s| Path::new(&s.path) == path.as_path())
            .ok_or_else(|| ViewError::NotFound(format!("{}: not a trace", path.display())))?;
        let record = sessions::session_record(path)
            .and_then(|r| serde_json::to_value(r).ok())
            .unwrap_or_default();
        // Fields older traces lack (`prefix_source`, `rules`) are left out.
        let shown = [
            "backend",
            "mode",
            "prefix_k",
            "prefix_source",
            "rules",
            "config_sha256",
            "proxy_version",
            "proxy_build",
        ]
        .into_iter()
        .filter_map(|k| {
            let v = record.get(k).filter(|v| !v.is_null() && *v != "")?;
            Some((k.to_string(), field_text(v)))
        })
        .collect();
        let steps = steps::read(path).map_err(|e| ViewError::Read(e.to_string()))?;
        Ok(SessionPage {
            summary,
            record: shown,
            duplicates: files[1..].iter().map(|p| p.display().to_string()).collect(),
            steps,
            inline_prompt_bytes: steps::INLINE_PROMPT_BYTES,
        })
    }

    /// The full prompt of call `n` (0-based) of session `id`.
    ///
    /// Errors: no such session or call, or the file cannot be read.
    pub fn prompt(&self, id: &str, n: usize) -> Result<String, ViewError> {
        let files = self.session_files(id);
        let path = files
            .first()
            .ok_or_else(|| ViewError::NotFound(format!("no trace of session {id}")))?;
        steps::prompt(path, n)
            .map_err(|e| ViewError::Read(e.to_string()))?
            .ok_or_else(|| ViewError::NotFound(format!("session {id} has no call {n}")))
    }

    /// The list page.
    ///
    /// Errors: the template fails.
    pub fn list_html(&self) -> Result<String, ViewError> {
        render("list.html", self.sessions())
    }

    /// The session page of `id`.
    ///
    /// Errors: as [`Viewer::session`], or the template fails.
    pub fn session_html(&self, id: &str) -> Result<String, ViewError> {
        render("session.html", self.session(id)?)
    }
}

fn render<S: Serialize>(name: &str, context: S) -> Result<String, ViewError> {
    let pages = pages::pages().map_err(|e| ViewError::Render(e.to_string()))?;
    pages
        .render(name, context)
        .map_err(|e| ViewError::Render(format!("{e:#}")))
}

/// Runs `asap-proxy view`: loads `--results` (if any), binds `--listen`, prints the page's
/// URL to standard error and serves the viewer until Ctrl-C or SIGTERM.
///
/// Errors ([`CliError`], by exit code): 2 for a path that does not exist or unreadable results,
/// 1 when the address cannot be bound.
pub fn run(args: &ViewArgs) -> Result<(), CliError> {
    let (dirs, result_files) = crate::report::trace_paths_and_results(&args.dirs, &args.results)
        .map_err(CliError::Usage)?;
    for dir in &dirs {
        if !dir.exists() {
            return Err(CliError::Usage(format!(
                "{}: no such file or directory",
                dir.display()
            )));
        }
    }
    let results = if result_files.is_empty() {
        None
    } else {
        let viewer = Viewer::new(dirs.clone(), None);
        let mut labels: Vec<String> = viewer
            .sessions()
            .sessions
            .into_iter()
            .map(|s| s.label)
            .collect();
        labels.sort();
        labels.dedup();
        Some(crate::report::results::load(&result_files, &labels).map_err(CliError::input)?)
    };
    let viewer = Arc::new(Viewer::new(dirs, results));
    let runtime = tokio::runtime::Runtime::new().map_err(CliError::internal)?;
    runtime
        .block_on(serve(viewer, args.listen))
        .map_err(CliError::io(format!("serving on {}", args.listen)))
}

/// Serves only the viewer on `addr` (`/` redirects to `/ui`) until Ctrl-C or SIGTERM.
pub async fn serve(viewer: Arc<Viewer>, addr: SocketAddr) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tracing::info!(%local, "asap-proxy view listening");
    let _ = writeln!(std::io::stderr(), "asap-proxy view: http://{local}/ui");
    let app = router(viewer)
        .route(
            "/",
            axum::routing::get(|| async { axum::response::Redirect::to("/ui") }),
        )
        .layer(tower_http::trace::TraceLayer::new_for_http());
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = terminate.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

/// A session-record value as one line: a string as it is, an object as `key: value` pairs
/// (`rules`: `nudges: true, max_steps: 100, …`), anything else as JSON.
fn field_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(map) => map
            .iter()
            .map(|(k, v)| {
                format!(
                    "{k}: {}",
                    v.as_str().map_or_else(|| v.to_string(), str::to_string)
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}
