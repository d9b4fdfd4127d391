//! The accept loop: HTTP/1.1 connections served by hyper with a bounded read buffer, and
//! graceful shutdown (the listener closes, each connection finishes its request in flight).
//!
//! Our own loop rather than `axum::serve` for one setting: hyper's read buffer per connection
//! ([`READ_BUFFER_BYTES`]). With hyper's default (~400 KiB) a connection that has read a long
//! body keeps a buffer of that size reserved for its next request while the turn waits on the
//! backend: 200 MiB of the proxy's peak with 256 in-flight 100-turn requests (heaptrack,
//! BENCHMARKS.md "Issue 23").

use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Largest read buffer of a connection, bytes: hyper's minimum is 8 KiB and its default
/// ~400 KiB. 16 KiB saved another 12 MiB at 256 in flight but cost 0.07–0.1 ms of CPU per
/// 20-turn request (a 60 KB body read in four reads and joined); 64 KiB costs what ~400 KiB
/// did (BENCHMARKS.md, "Issue 23, second session"). A request head (line and headers) of up to
/// this size is always read; hyper checks the bound between reads, so a longer head may pass
/// and a much longer one is answered 431 (Node.js and h11, under vLLM's server, refuse heads
/// past 16 KiB). A body of any size streams through the buffer in reads of at most this size.
pub const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Serves `router` on `listener` until `shutdown` resolves, then stops accepting, lets every
/// open connection finish its request in flight (idle keep-alive connections close at once)
/// and returns when all have closed. Each accepted socket gets `TCP_NODELAY` (SSE answers are
/// several small writes; with Nagle's algorithm and the client's delayed ACK each stream
/// would wait ~40 ms).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    // Every connection task holds a receiver; all dropped = all connections closed.
    let (open_tx, open_rx) = watch::channel(());
    let mut stopping = stop_rx.clone();
    loop {
        let (tcp, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    accept_failed(&e).await;
                    continue;
                }
            },
            () = stopped(&mut stopping) => break,
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "could not set TCP_NODELAY");
        }
        let service = TowerToHyperService::new(router.clone());
        let mut stopping = stop_rx.clone();
        let open = open_rx.clone();
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .max_buf_size(READ_BUFFER_BYTES)
                .serve_connection(TokioIo::new(tcp), service);
            tokio::pin!(connection);
            let mut shutting_down = false;
            loop {
                tokio::select! {
                    result = connection.as_mut() => {
                        if let Err(e) = result {
                            tracing::trace!(%remote, error = %e, "connection ended with an error");
                        }
                        break;
                    }
                    () = stopped(&mut stopping), if !shutting_down => {
                        shutting_down = true;
                        connection.as_mut().graceful_shutdown();
                    }
                }
            }
            drop(open);
        });
    }
    drop(listener);
    drop(open_rx);
    open_tx.closed().await;
}

/// Resolves once `stop` holds true (or its sender is gone). The guard `wait_for` returns is
/// dropped here, so the futures that select on this stay `Send`.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Accept errors: a connection reset before it was accepted is the client's and is skipped;
/// anything else (out of file descriptors) is logged and retried after a second, as
/// `axum::serve` does, rather than spinning or ending the server.
async fn accept_failed(e: &std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accepting a connection failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
