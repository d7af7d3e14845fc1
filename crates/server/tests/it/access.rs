//! Browsers cannot reach the server from a foreign page: a `Host` it does not serve (DNS
//! rebinding) and a state-changing request from a foreign `Origin` are refused before any
//! route runs, and CORS answers only loopback and trusted origins.

use crate::helpers::*;
use serde_json::{Value, json};

backends!(foreign_hosts_and_origins_change_nothing);

async fn count_threads(app: &TestApp) -> u64 {
    app.post_json("/threads/count", json!({}))
        .await
        .1
        .as_u64()
        .unwrap()
}

async fn send(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Value, reqwest::header::HeaderMap) {
    let mut req = app.client.request(method, app.u(path)).json(&json!({}));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let h = r.headers().clone();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
        h,
    )
}

async fn foreign_hosts_and_origins_change_nothing(db: Db) {
    let Some(app) = spawn_with(Spawn {
        tweak: Some(Box::new(|o| {
            o.access.trusted_origins = vec!["https://ui.example.com".into()];
            o.access.allowed_hosts = vec!["fawn.example.com".into()];
        })),
        ..Spawn::new(db)
    })
    .await
    else {
        return;
    };
    let before = count_threads(&app).await;
    let post = reqwest::Method::POST;

    // DNS rebinding: a page on evil.example reaches 127.0.0.1 under its own name.
    for path in ["/threads", "/api/threads", "/api/langgraph/threads"] {
        let (s, v, _) = send(&app, post.clone(), path, &[("host", "evil.example:2024")]).await;
        assert_eq!(s, 403, "{path}: {v}");
        assert!(
            v["detail"].as_str().unwrap().contains("FAWN_ALLOWED_HOSTS"),
            "{v}"
        );
    }
    let (s, _, _) = send(
        &app,
        reqwest::Method::GET,
        "/api/models",
        &[("host", "evil.example")],
    )
    .await;
    assert_eq!(s, 403, "reads are refused too under a foreign host");

    // A foreign page posting to the server (its Origin is not ours).
    for origin in [
        "https://evil.example",
        "null",
        "http://127.0.0.1.evil.example",
    ] {
        let (s, v, _) = send(&app, post.clone(), "/threads", &[("origin", origin)]).await;
        assert_eq!(s, 403, "{origin}: {v}");
    }
    let (s, _, _) = send(
        &app,
        reqwest::Method::DELETE,
        "/api/mcp/cache/reset",
        &[("origin", "https://evil.example")],
    )
    .await;
    assert_eq!(s, 403);
    assert_eq!(count_threads(&app).await, before, "nothing was created");

    // Allowed: no Origin (SDKs, curl), the same origin, a UI on this machine, a trusted
    // origin, and a configured host name.
    let same = format!("http://127.0.0.1:{}", app.port);
    for headers in [
        vec![],
        vec![("origin", same.as_str())],
        vec![("origin", "http://localhost:3000")],
        vec![("origin", "https://ui.example.com")],
        vec![("host", "fawn.example.com")],
    ] {
        let (s, v, _) = send(&app, post.clone(), "/threads", &headers).await;
        assert_eq!(s, 200, "{headers:?}: {v}");
    }
    assert_eq!(count_threads(&app).await, before + 5);

    // CORS: never `*`; trusted and loopback origins are answered with credentials, foreign
    // ones are not answered at all.
    let preflight = |origin: &'static str| {
        app.client
            .request(reqwest::Method::OPTIONS, app.u("/threads"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "content-type,x-csrf-token",
            )
            .send()
    };
    let r = preflight("https://ui.example.com").await.unwrap();
    let h = r.headers();
    assert_eq!(h["access-control-allow-origin"], "https://ui.example.com");
    assert_eq!(h["access-control-allow-credentials"], "true");
    let r = preflight("https://evil.example").await.unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());
    let (_, _, h) = send(
        &app,
        reqwest::Method::GET,
        "/ok",
        &[("origin", "https://evil.example")],
    )
    .await;
    assert!(h.get("access-control-allow-origin").is_none());
    let (_, _, h) = send(
        &app,
        reqwest::Method::GET,
        "/ok",
        &[("origin", "http://localhost:3000")],
    )
    .await;
    assert_eq!(h["access-control-allow-origin"], "http://localhost:3000");
    app.stop().await;
}
