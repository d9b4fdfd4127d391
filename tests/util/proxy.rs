//! Starting the proxy: in-process on port 0 (fast), or as the real binary (wiring).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use asap_proxy::config::Config;
use asap_proxy::config::ServeArgs;
use asap_proxy::server::{app, conn, AppState};
use serde_json::Value;

use crate::util::backend::{FakeBackend, Scripted};
use crate::util::read_trace;

const CHAT: &str = "/v1/chat/completions";

/// A proxy served in-process, with its own temporary log directory.
pub struct Proxy {
    pub addr: SocketAddr,
    pub log_dir: tempfile::TempDir,
    pub client: reqwest::Client,
}

impl Proxy {
    /// Starts a proxy in front of `backend_url` with default settings plus `tweak`.
    pub async fn start_with(backend_url: &str, tweak: impl FnOnce(&mut ServeArgs)) -> Self {
        let log_dir = tempfile::tempdir().unwrap();
        let mut args = ServeArgs {
            backend: Some(backend_url.to_string()),
            log_dir: Some(log_dir.path().to_path_buf()),
            backend_retries: Some(2),
            ..ServeArgs::default()
        };
        tweak(&mut args);
        let config = Config::resolve(&args).unwrap();
        let state = Arc::new(AppState::from_config(&config).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // The production accept loop (hyper with the proxy's read buffer), never shut down.
        tokio::spawn(conn::serve(listener, app(state), std::future::pending()));
        Self {
            addr,
            log_dir,
            client: reqwest::Client::new(),
        }
    }

    /// Starts a proxy with default settings.
    pub async fn start(backend_url: &str) -> Self {
        Self::start_with(backend_url, |_| {}).await
    }

    /// `http://addr/v1/chat/completions`.
    pub fn url(&self) -> String {
        self.url_of(CHAT)
    }

    /// `http://addr{path}`.
    pub fn url_of(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Posts a JSON body to `path`; the raw answer.
    pub async fn send(&self, path: &str, body: &Value) -> reqwest::Response {
        self.client
            .post(self.url_of(path))
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// Posts a chat completion request; the raw answer.
    pub async fn send_chat(&self, body: &Value) -> reqwest::Response {
        self.send(CHAT, body).await
    }

    /// Posts a JSON body to `path`; returns status and JSON.
    pub async fn post_to(&self, path: &str, body: &Value) -> (u16, Value) {
        let resp = self.send(path, body).await;
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap())
    }

    /// Posts a chat completion request; returns status and JSON.
    pub async fn post(&self, body: &Value) -> (u16, Value) {
        self.post_to(CHAT, body).await
    }

    /// Posts a JSON body with extra headers; asserts a 200 and returns the JSON answer.
    pub async fn post_with_headers(&self, body: &Value, headers: &[(&str, &str)]) -> Value {
        crate::util::post_with_headers(&self.url(), body, headers).await
    }

    /// GETs `path`; the raw answer.
    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client.get(self.url_of(path)).send().await.unwrap()
    }

    /// GETs `path`; the JSON answer, whatever the status.
    pub async fn get_json(&self, path: &str) -> Value {
        crate::util::json_of(self.client.get(self.url_of(path))).await
    }

    /// Posts a streaming request; returns status and the `data:` payloads in order.
    pub async fn post_stream(&self, body: &Value) -> (u16, Vec<String>) {
        let resp = self.send(CHAT, body).await;
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let data = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
            .map(str::to_string)
            .collect();
        (status, data)
    }

    /// The trace files written so far.
    pub fn trace_files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.log_dir.path())
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        files.sort();
        files
    }

    /// The first trace file's entries, as [`read_trace`] merges them.
    pub fn first_trace(&self) -> Vec<Value> {
        read_trace(&self.trace_files()[0])
    }

    /// The session id of the first trace file (its name without `.jsonl`).
    pub fn first_session_id(&self) -> String {
        self.trace_files()[0]
            .file_stem()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    /// The `data` of each entry after the session record of the proxy's only trace file.
    pub fn steps(&self) -> Vec<Value> {
        let files = self.trace_files();
        assert_eq!(files.len(), 1, "{files:?}");
        read_trace(&files[0])[1..]
            .iter()
            .map(|r| r["data"].clone())
            .collect()
    }
}

/// A fake backend playing `script` and an in-process proxy with default settings in front.
pub async fn serve(script: Vec<Scripted>) -> (FakeBackend, Proxy) {
    serve_with(script, |_| {}).await
}

/// The same with default settings plus `tweak`.
pub async fn serve_with(
    script: Vec<Scripted>,
    tweak: impl FnOnce(&mut ServeArgs),
) -> (FakeBackend, Proxy) {
    let backend = FakeBackend::start(script).await;
    let proxy = Proxy::start_with(&backend.url(), tweak).await;
    (backend, proxy)
}
