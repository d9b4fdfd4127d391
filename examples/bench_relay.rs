//! The transport floor of the load benchmark (`bench/load.sh`, `relay` rows; BENCHMARKS.md):
//! a relay built from the proxy's own HTTP parts that does no work.
//!
//! It accepts connections with the proxy's accept loop (`server::conn::serve`: hyper's
//! HTTP/1 server, the same read-buffer bound, `TCP_NODELAY`), reads each request body whole
//! (as the proxy does), posts it unchanged to the same path on `--backend` with a `reqwest`
//! client built as the proxy's backend client is (a connection pool, rustls), and answers with
//! the backend's status, `content-type` and body, passed through as it arrives (an SSE answer
//! streams). The runtime is tokio's multi-threaded one, as the proxy's. What it costs per
//! request is what any proxy of this design pays before decoding, rendering or logging
//! anything: a second loopback hop, hyper on both sides and the task hand-offs between them.
//! `bench/load.sh` sends it the direct baseline's `/v1/completions` body, so its added
//! latency and CPU rows are the floor under the proxy's.
//!
//! `cargo run --release --example bench_relay -- --listen 127.0.0.1:19003 --backend http://127.0.0.1:19001`

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode, Uri};
use axum::response::Response;
use clap::Parser;

#[derive(Parser)]
#[command(about = "A relay with the proxy's HTTP stack and no work (the benchmark's floor)")]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:19003")]
    listen: SocketAddr,
    /// Base URL every request is posted to, with the request's own path appended.
    #[arg(long)]
    backend: String,
}

struct Relay {
    client: reqwest::Client,
    backend: String,
}

async fn relay(State(relay): State<std::sync::Arc<Relay>>, uri: Uri, body: Bytes) -> Response {
    let url = format!("{}{}", relay.backend, uri.path());
    let sent = relay
        .client
        .post(url)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await;
    let answer = match sent {
        Ok(answer) => answer,
        Err(e) => {
            let mut response = Response::new(Body::from(format!("relay: {e}")));
            *response.status_mut() = StatusCode::BAD_GATEWAY;
            return response;
        }
    };
    let status = answer.status();
    let content_type = answer.headers().get(header::CONTENT_TYPE).cloned();
    let mut response = Response::new(Body::from_stream(answer.bytes_stream()));
    *response.status_mut() = status;
    if let Some(value) = content_type {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
}

fn main() -> Result<(), String> {
    let args = Args::parse();
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        // As `backend::openai_completions::CompletionsClient::new` builds its client.
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(600))
            .build()
            .map_err(|e| e.to_string())?;
        let state = std::sync::Arc::new(Relay {
            client,
            backend: args.backend.trim_end_matches('/').to_string(),
        });
        let router = axum::Router::new()
            .route("/health", axum::routing::get(|| async { "ok" }))
            .fallback(axum::routing::post(relay))
            .layer(axum::extract::DefaultBodyLimit::disable())
            .with_state(state);
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .map_err(|e| format!("bench_relay: bind {}: {e}", args.listen))?;
        eprintln!("bench_relay: {} -> {}", args.listen, args.backend);
        asap_proxy::server::conn::serve(listener, router, std::future::pending()).await;
        Ok(())
    })
}
