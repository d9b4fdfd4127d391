//! The viewer's routes: `GET /ui` (session list), `GET /ui/session/{id}` (one trajectory),
//! `GET /ui/session/{id}/step/{n}/prompt` (call `n`'s full prompt as `text/plain`).
//!
//! Pages are HTML with a Content-Security-Policy that allows no script at all (the pages need
//! none), a second line of defence behind the templates' escaping; prompts are plain text
//! with `nosniff`, so a browser never reads model text as HTML. Nothing is cached: the pages
//! follow the trace files and can hold sensitive prompts.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::{ViewError, Viewer};

/// `Content-Security-Policy` of the HTML pages: inline styles, nothing else.
pub const PAGE_CSP: &str =
    "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The viewer's routes, with their state, ready to merge into any router (`serve` mounts them
/// next to the API; `view` serves them alone). Reading runs on the blocking pool.
pub fn router<S>(viewer: Arc<Viewer>) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    Router::new()
        .route("/ui", get(list))
        .route("/ui/", get(list))
        .route("/ui/session/{id}", get(session))
        .route("/ui/session/{id}/step/{n}/prompt", get(prompt))
        .with_state(viewer)
}

async fn list(State(viewer): State<Arc<Viewer>>) -> Response {
    let html = blocking(move || viewer.list_html()).await;
    page(html)
}

async fn session(State(viewer): State<Arc<Viewer>>, Path(id): Path<String>) -> Response {
    let html = blocking(move || viewer.session_html(&id)).await;
    page(html)
}

async fn prompt(
    State(viewer): State<Arc<Viewer>>,
    Path((id, n)): Path<(String, usize)>,
) -> Response {
    match blocking(move || viewer.prompt(&id, n)).await {
        Ok(text) => text_response(StatusCode::OK, text),
        Err(e) => error(e),
    }
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ViewError> + Send + 'static,
) -> Result<T, ViewError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ViewError::Read(format!("reading traces failed: {e}")))?
}

fn page(html: Result<String, ViewError>) -> Response {
    match html {
        Ok(html) => {
            let mut response = (StatusCode::OK, html).into_response();
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            headers.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(PAGE_CSP),
            );
            common_headers(&mut response);
            response
        }
        Err(e) => error(e),
    }
}

fn error(e: ViewError) -> Response {
    let status = match e {
        ViewError::NotFound(_) => StatusCode::NOT_FOUND,
        ViewError::Read(_) | ViewError::Render(_) => {
            tracing::error!(error = %e, "viewer page failed");
            StatusCode::INTERNAL_SERVER_ERROR
        }
    };
    text_response(status, format!("{e}\n"))
}

fn text_response(status: StatusCode, text: String) -> Response {
    let mut response = (status, text).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; sandbox"),
    );
    common_headers(&mut response);
    response
}

fn common_headers(response: &mut Response) {
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}
