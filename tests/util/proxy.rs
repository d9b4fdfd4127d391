//! Starting the proxy: in-process on port 0 (fast), or as the real binary (wiring).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use asap_proxy::config::Config;
use asap_proxy::config::ServeArgs;
use asap_proxy::server::{app, AppState};

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
        tokio::spawn(async move { axum::serve(listener, app(state)).await.unwrap() });
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
        format!("http://{}/v1/chat/completions", self.addr)
    }

    /// Posts a JSON body; returns status and JSON.
    pub async fn post(&self, body: &serde_json::Value) -> (u16, serde_json::Value) {
        let resp = self
            .client
            .post(self.url())
            .json(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap())
    }

    /// Posts a streaming request; returns status and the `data:` payloads in order.
    pub async fn post_stream(&self, body: &serde_json::Value) -> (u16, Vec<String>) {
        let resp = self
            .client
            .post(self.url())
            .json(body)
            .send()
            .await
            .unwrap();
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
}
