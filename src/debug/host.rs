//! Which `Host` the debug port answers to: IP addresses, `localhost`, and the names the
//! operator gives (`serve --debug-host`). A page in a browser on the machine could
//! otherwise point a name it controls at 127.0.0.1 (DNS rebinding) and read every proxy's
//! config and history through the browser, which sends that name as `Host`.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// Whether a request naming `host` (`name`, `name:port`, `[v6]:port`) may be answered.
pub fn allowed(host: &str, names: &[String]) -> bool {
    let name = match host.strip_prefix('[') {
        // `[::1]:15014`
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => match host.rsplit_once(':') {
            Some((n, port)) if port.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => host,
        },
    };
    name.parse::<std::net::IpAddr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || names.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// Refuses a request whose `Host` (HTTP/1) or authority (HTTP/2) names another host, with
/// 421 Misdirected Request and why. A request naming none (HTTP/1.0) is answered: browsers
/// always send one.
pub async fn check(State(names): State<Arc<Vec<String>>>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.to_string()));
    match host {
        Some(h) if !allowed(&h, &names) => {
            tracing::debug!(host = %h, "debug port: request for another host refused");
            (
                StatusCode::MISDIRECTED_REQUEST,
                format!(
                    "this debug port answers to IP addresses, localhost and the names given \
                     with --debug-host, not {h:?}\n"
                ),
            )
                .into_response()
        }
        _ => next.run(req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::allowed;

    #[test]
    fn ip_literals_localhost_and_given_names_only() {
        let names = vec!["meshflow.istio-system.svc".to_string()];
        for ok in [
            "127.0.0.1",
            "127.0.0.1:15014",
            "[::1]:15014",
            "10.1.2.3:80",
            "localhost:15014",
            "LOCALHOST",
            "meshflow.istio-system.svc:15014",
        ] {
            assert!(allowed(ok, &names), "{ok}");
        }
        for bad in [
            "evil.example.com",
            "evil.example.com:15014",
            "127.0.0.1.nip.io",
            "localhost.evil.com",
            "",
        ] {
            assert!(!allowed(bad, &names), "{bad}");
        }
    }
}
