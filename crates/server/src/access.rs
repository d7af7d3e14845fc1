//! Who may reach the server from a browser: the `Host` a request names, the `Origin` a
//! state-changing request comes from, and which origins get CORS answers. Binding to
//! 127.0.0.1 does not keep a web page away from the server: a page on any site can send
//! requests to it (a foreign `Origin`), and a name the attacker controls can be rebound to
//! 127.0.0.1 (DNS rebinding: a foreign `Host`). Both are refused here, before any route runs.
//!
//! * **Host** must be a loopback name (`localhost`, `127.0.0.1`, `[::1]`, any port), the
//!   address the server was bound to, or a name in `FAWN_ALLOWED_HOSTS` (comma-separated
//!   `host` or `host:port`; `*` turns the check off) → 403 otherwise.
//! * **Origin** of a POST/PUT/PATCH/DELETE or of a WebSocket handshake, when a browser sends
//!   one, must be the request's own (same host and port), a loopback origin (a UI served on this machine, e.g. DeerFlow's
//!   on `localhost:3000`), or a trusted origin (`GATEWAY_CORS_ORIGINS` or
//!   `FAWN_TRUSTED_ORIGINS`, comma-separated `scheme://host[:port]`) → 403 otherwise, and the
//!   request changes nothing. `Origin: null` is foreign. Clients that are not browsers (the
//!   SDKs, curl) send no `Origin`.
//! * **CORS** answers only loopback and trusted origins, with credentials; never `*`.

use crate::app::AppState;
use crate::error::ApiError;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The environment variable naming extra allowed hosts.
pub const ALLOWED_HOSTS_VAR: &str = "FAWN_ALLOWED_HOSTS";
/// DeerFlow's list of origins allowed cross-origin (also honoured here).
pub const CORS_ORIGINS_VAR: &str = "GATEWAY_CORS_ORIGINS";
/// Fawn's name for the same list.
pub const TRUSTED_ORIGINS_VAR: &str = "FAWN_TRUSTED_ORIGINS";

/// Which hosts and origins the server answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessPolicy {
    /// Besides loopback names: `host` or `host:port`, lower-case; `*` = any host.
    pub allowed_hosts: Vec<String>,
    /// Besides loopback origins: `scheme://host[:port]`, lower-case, no trailing slash.
    pub trusted_origins: Vec<String>,
}

fn list(var: &str) -> Vec<String> {
    std::env::var(var)
        .map(|v| {
            v.split(',')
                .map(|s| s.trim().trim_end_matches('/').to_ascii_lowercase())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// Splits `host[:port]` (IPv6 in brackets) into the host (brackets removed) and the port.
fn split_authority(authority: &str) -> (String, Option<&str>) {
    let a = authority.trim();
    if let Some(rest) = a.strip_prefix('[') {
        let (h, tail) = rest.split_once(']').unwrap_or((rest, ""));
        let port = tail.strip_prefix(':').filter(|p| !p.is_empty());
        return (h.to_ascii_lowercase(), port);
    }
    match a.rsplit_once(':') {
        // More than one colon without brackets: a bare IPv6 address, no port.
        Some((h, _)) if h.contains(':') => (a.to_ascii_lowercase(), None),
        Some((h, p)) => (h.to_ascii_lowercase(), Some(p)),
        None => (a.to_ascii_lowercase(), None),
    }
}

fn is_loopback_name(host: &str) -> bool {
    host == "localhost"
        || host.ends_with(".localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

impl AccessPolicy {
    /// From `FAWN_ALLOWED_HOSTS`, `GATEWAY_CORS_ORIGINS` and `FAWN_TRUSTED_ORIGINS`.
    pub fn from_env() -> AccessPolicy {
        let mut trusted_origins = list(CORS_ORIGINS_VAR);
        trusted_origins.extend(list(TRUSTED_ORIGINS_VAR));
        AccessPolicy {
            allowed_hosts: list(ALLOWED_HOSTS_VAR),
            trusted_origins,
        }
    }

    /// Adds the address the server is bound to (when it is one specific address).
    pub fn with_bound_host(mut self, host: &str) -> AccessPolicy {
        let h = host.trim().trim_start_matches('[').trim_end_matches(']');
        let unspecified = h
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified());
        if !h.is_empty() && !unspecified && !is_loopback_name(&h.to_ascii_lowercase()) {
            self.allowed_hosts.push(h.to_ascii_lowercase());
        }
        self
    }

    /// Whether a request naming `authority` (its `Host`) is served.
    pub fn host_allowed(&self, authority: &str) -> bool {
        if self.allowed_hosts.iter().any(|h| h == "*") {
            return true;
        }
        let (host, port) = split_authority(authority);
        if is_loopback_name(&host) {
            return true;
        }
        self.allowed_hosts.iter().any(|a| {
            let (ah, ap) = split_authority(a);
            ah == host && (ap.is_none() || ap == port)
        })
    }

    /// Whether `origin` is a loopback or trusted origin (CORS answers it).
    pub fn origin_trusted(&self, origin: &str) -> bool {
        let o = origin.trim().trim_end_matches('/').to_ascii_lowercase();
        if self.trusted_origins.contains(&o) {
            return true;
        }
        match url::Url::parse(&o) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => u
                .host_str()
                .is_some_and(|h| is_loopback_name(h.trim_start_matches('[').trim_end_matches(']'))),
            _ => false,
        }
    }

    /// Whether a state-changing request from `origin`, naming `host`, may proceed.
    pub fn origin_allowed(&self, origin: &str, host: Option<&str>) -> bool {
        if self.origin_trusted(origin) {
            return true;
        }
        // Same origin: the page was served by this server under the name it now calls.
        match (url::Url::parse(origin.trim()), host) {
            (Ok(u), Some(host)) => {
                let Some(oh) = u.host_str() else {
                    return false;
                };
                let (hh, hp) = split_authority(host);
                let oh = oh.trim_start_matches('[').trim_end_matches(']');
                // A Host without a port names the scheme's default port.
                let op = u.port_or_known_default().map(|p| p.to_string());
                let hp = hp
                    .map(str::to_string)
                    .or_else(|| default_port(u.scheme()).map(str::to_string));
                oh.eq_ignore_ascii_case(&hh) && op.is_some() && op == hp
            }
            _ => false,
        }
    }
}

fn default_port(scheme: &str) -> Option<&'static str> {
    match scheme {
        "http" => Some("80"),
        "https" => Some("443"),
        _ => None,
    }
}

fn forbidden(detail: String) -> Response {
    ApiError::new(StatusCode::FORBIDDEN, detail).into_response()
}

/// The request guard (a middleware over every route).
pub async fn guard(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let policy = &app.access;
    let host = match req.headers().get(header::HOST) {
        Some(h) => match h.to_str() {
            Ok(h) => Some(h.to_string()),
            Err(_) => return ApiError::bad_request("Invalid Host header").into_response(),
        },
        None => req.uri().authority().map(|a| a.as_str().to_string()),
    };
    if let Some(h) = &host
        && !policy.host_allowed(h)
    {
        return forbidden(format!(
            "Host '{h}' is not allowed; add it to {ALLOWED_HOSTS_VAR} to serve it"
        ));
    }
    // A WebSocket handshake is a GET, but what follows changes state (commands), and a
    // browser sends the page's cookies with it: it gets the same check.
    let safe = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
        && !is_websocket_upgrade(req.headers());
    if !safe && let Some(origin) = req.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("null");
        if !policy.origin_allowed(origin, host.as_deref()) {
            return forbidden(format!(
                "Cross-origin request from '{origin}' refused; list trusted origins in \
                 {CORS_ORIGINS_VAR}"
            ));
        }
    }
    next.run(req).await
}

/// Whether a request asks to become a WebSocket (`Upgrade: websocket`).
pub fn is_websocket_upgrade(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all(header::UPGRADE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim().eq_ignore_ascii_case("websocket"))
}

/// The CORS layer: loopback and trusted origins only, with credentials.
pub fn cors(policy: &AccessPolicy) -> tower_http::cors::CorsLayer {
    use axum::http::HeaderName;
    use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};
    let policy = policy.clone();
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(
            move |origin: &HeaderValue, _parts| {
                origin.to_str().is_ok_and(|o| policy.origin_trusted(o))
            },
        ))
        .allow_credentials(true)
        .allow_methods([
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
            Method::OPTIONS,
            Method::HEAD,
        ])
        .allow_headers(AllowHeaders::mirror_request())
        .expose_headers([
            HeaderName::from_static("content-location"),
            HeaderName::from_static("location"),
            HeaderName::from_static("x-pagination-total"),
            HeaderName::from_static("x-pagination-next"),
        ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> AccessPolicy {
        AccessPolicy {
            allowed_hosts: vec!["fawn.example.com".into(), "10.1.2.3:8080".into()],
            trusted_origins: vec!["https://ui.example.com".into()],
        }
    }

    #[test]
    fn hosts() {
        let p = policy();
        for ok in [
            "localhost",
            "localhost:2024",
            "127.0.0.1:2024",
            "[::1]:2024",
            "app.localhost:3000",
            "fawn.example.com",
            "FAWN.example.com:443",
            "10.1.2.3:8080",
        ] {
            assert!(p.host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.example.com",
            "10.1.2.3:9090",
            "127.0.0.1.evil.com",
            "",
        ] {
            assert!(!p.host_allowed(bad), "{bad}");
        }
        let any = AccessPolicy {
            allowed_hosts: vec!["*".into()],
            ..Default::default()
        };
        assert!(any.host_allowed("anything:1"));
        let bound = AccessPolicy::default().with_bound_host("192.168.1.5");
        assert!(bound.host_allowed("192.168.1.5:2024"));
        assert!(
            !AccessPolicy::default()
                .with_bound_host("0.0.0.0")
                .host_allowed("0.0.0.0")
        );
    }

    #[test]
    fn origins() {
        let p = policy();
        let host = Some("fawn.example.com");
        for ok in [
            "https://ui.example.com",
            "http://localhost:3000",
            "http://127.0.0.1:2026",
            "https://fawn.example.com",
        ] {
            assert!(p.origin_allowed(ok, host), "{ok}");
        }
        assert!(p.origin_allowed(
            "http://fawn.example.com:8000",
            Some("fawn.example.com:8000")
        ));
        for bad in [
            "https://evil.example.com",
            "null",
            "http://fawn.example.com:9999",
            "https://ui.example.com.evil.com",
            "file://",
        ] {
            assert!(!p.origin_allowed(bad, host), "{bad}");
        }
        assert!(p.origin_trusted("http://localhost:3000"));
        assert!(
            !p.origin_trusted("https://fawn.example.com"),
            "same-origin needs no CORS"
        );
    }
}
