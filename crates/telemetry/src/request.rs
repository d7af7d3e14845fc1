//! What a request hands on to the work it starts: its id (`X-Request-Id`) and the trace
//! context of its span. The server scopes each request's handler with [`scope`]; code deeper
//! down (run creation in the runtime) reads [`current`] without knowing HTTP, and stores
//! what a worker — on this node or another — needs to name the request in its logs and to
//! continue its trace.

use std::sync::Arc;

/// The longest `X-Request-Id` accepted from a client; longer ones are replaced.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// One request's ids.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// The client's `X-Request-Id` (sanitised) or one generated for it.
    pub id: Arc<str>,
    /// The W3C `traceparent` of the request's span, when tracing is on.
    pub traceparent: Option<String>,
    /// The request carried a valid `traceparent` of its own: work it starts belongs to
    /// the caller's trace (else it starts a trace of its own, linked to the request).
    pub continued: bool,
}

tokio::task_local! {
    static REQUEST: RequestInfo;
}

/// Runs `fut` as the handling of the request `info`.
pub async fn scope<F: std::future::Future>(info: RequestInfo, fut: F) -> F::Output {
    REQUEST.scope(info, fut).await
}

/// The request being handled by the current task, if any.
pub fn current() -> Option<RequestInfo> {
    REQUEST.try_with(Clone::clone).ok()
}

/// A client's `X-Request-Id` if it is usable as it is (printable ASCII without spaces or
/// quotes, at most [`MAX_REQUEST_ID_LEN`] bytes), else `None` (the server generates one).
pub fn sanitize(raw: &[u8]) -> Option<String> {
    if raw.is_empty() || raw.len() > MAX_REQUEST_ID_LEN {
        return None;
    }
    let ok = raw
        .iter()
        .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b'\\' | b'\'' | b'`'));
    ok.then(|| String::from_utf8_lossy(raw).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_bounded_and_printable() {
        assert_eq!(sanitize(b"abc-123_X.y:z").as_deref(), Some("abc-123_X.y:z"));
        assert_eq!(sanitize(b""), None);
        assert_eq!(sanitize(b"has space"), None);
        assert_eq!(sanitize(b"new\nline"), None);
        assert_eq!(sanitize("é".as_bytes()), None);
        assert_eq!(sanitize(b"quote\"d"), None);
        assert_eq!(
            sanitize(&[b'a'; MAX_REQUEST_ID_LEN]).map(|s| s.len()),
            Some(128)
        );
        assert_eq!(sanitize(&[b'a'; MAX_REQUEST_ID_LEN + 1]), None);
    }

    #[tokio::test]
    async fn the_scope_is_seen_inside_and_not_outside() {
        assert_eq!(current(), None);
        let info = RequestInfo {
            id: Arc::from("r1"),
            traceparent: None,
            continued: false,
        };
        let seen = scope(info.clone(), async { current() }).await;
        assert_eq!(seen, Some(info));
    }
}
