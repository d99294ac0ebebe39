//! The debug UI (`/ui` on the debug port): one page, its script and its style, compiled into
//! the binary (no CDN, nothing to install; it works offline). The page draws what the JSON
//! endpoints of [`super::http`] answer — connected proxies and their sync state, one proxy's
//! resources in Envoy's JSON, its history with a diff between any two epochs, `explain` as a
//! graph (input objects → resource → the proxies holding it), config errors and analysis,
//! and the convergence histogram of `/metrics` — so the UI shows exactly what the CLI and
//! the API show.

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

const PAGE: &str = include_str!("ui/index.html");
const SCRIPT: &str = include_str!("ui/app.js");
const STYLE: &str = include_str!("ui/style.css");

/// `/ui` (the page; views are chosen by the URL fragment), `/ui/app.js`, `/ui/style.css`.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/ui",
            get(|| async { asset("text/html; charset=utf-8", PAGE) }),
        )
        .route(
            "/ui/",
            get(|| async { asset("text/html; charset=utf-8", PAGE) }),
        )
        .route(
            "/ui/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/ui/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
}

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            // The page only talks to the port it came from.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; style-src 'self'; img-src 'self' data:",
            ),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}
