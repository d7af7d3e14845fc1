//! Meta routes, prefixes, fallbacks, CORS, sockets, first contact.

use crate::helpers::*;
use axum::serve::Listener;
use fawn_config::Settings;
use fawn_server::{AppOptions, Application, BuildError, bind_listener};
use serde_json::json;

backends!(meta_routes_on_every_prefix);

async fn meta_routes_on_every_prefix(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    for prefix in ["", "/api/langgraph", "/api"] {
        let (s, v) = app.get_json(&format!("{prefix}/ok")).await;
        assert_eq!((s, v["ok"].clone()), (200, json!(true)), "{prefix}");
        let (s, v) = app.get_json(&format!("{prefix}/info")).await;
        assert_eq!(s, 200);
        assert!(v["version"].is_string());
        assert_eq!(v["flags"]["assistants"], true);
        assert_eq!(v["flags"]["crons"], true);
        let (s, v) = app.get_json(&format!("{prefix}/health")).await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["status"], "healthy", "{v}");
        assert_eq!(v["service"], "deer-flow-gateway", "{v}");
        assert_eq!(v["database"]["ok"], true);
        let expected = if db == Db::Sqlite {
            "sqlite"
        } else {
            "postgres"
        };
        assert_eq!(v["database"]["backend"], expected);
    }
    // Unknown route and wrong method: JSON errors, never an empty body.
    let (s, v) = app.get_json("/nope/nothing").await;
    assert_eq!((s, v), (404, json!({"detail": "Not Found"})));
    let (s, v) = app.get_json("/api/langgraph/threads/search").await;
    assert_eq!(s, 405);
    assert!(v["detail"].is_string());
    app.stop().await;
}

#[tokio::test]
async fn cors_exposes_the_headers_browsers_need() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let r = app
        .client
        .request(reqwest::Method::OPTIONS, app.u("/threads/x"))
        .header("origin", "http://localhost:3000")
        .header("access-control-request-method", "PATCH")
        .header(
            "access-control-request-headers",
            "x-api-key,last-event-id,content-type",
        )
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let methods = r.headers()["access-control-allow-methods"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        methods.contains("PATCH") && methods.contains("DELETE"),
        "{methods}"
    );
    let r = app
        .client
        .get(app.u("/ok"))
        .header("origin", "http://localhost:3000")
        .send()
        .await
        .unwrap();
    // Never `*`: the (loopback) origin itself, with credentials.
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "http://localhost:3000"
    );
    assert_eq!(r.headers()["access-control-allow-credentials"], "true");
    let exposed = r.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    for h in [
        "content-location",
        "location",
        "x-pagination-total",
        "x-pagination-next",
    ] {
        assert!(exposed.contains(h), "{exposed} lacks {h}");
    }
    app.stop().await;
}

#[tokio::test]
async fn accepted_connections_have_tcp_nodelay() {
    let mut listener = bind_listener("127.0.0.1", 0).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client = tokio::spawn(async move { tokio::net::TcpStream::connect(addr).await });
    let (io, _) = listener.accept().await;
    assert!(
        io.nodelay().unwrap(),
        "TCP_NODELAY must be set on accepted sockets"
    );
    drop(client.await);
}

#[tokio::test]
async fn without_auth_a_non_loopback_address_is_refused_unless_asked_for() {
    // Refused before anything binds or opens (the database is never touched).
    for host in ["0.0.0.0", "::", "192.0.2.10", "fawn.example.com"] {
        let err = Application::build(
            Settings::with_home(std::env::temp_dir().join("fawn-never-created")),
            AppOptions {
                host: host.into(),
                port: 0,
                ..AppOptions::default()
            },
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err, BuildError::Unauthenticated { .. }),
            "{host}: {err}"
        );
        assert!(err.to_string().contains("--insecure-no-auth"), "{err}");
    }
    assert!(!std::env::temp_dir().join("fawn-never-created").exists());
    for host in ["127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"] {
        assert!(fawn_server::app::is_loopback_host(host), "{host}");
    }
}

#[tokio::test]
async fn a_busy_port_is_an_error_not_a_silent_switch() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(Db::Sqlite).unwrap();
    let options = AppOptions {
        port,
        backend: Some(db.config.clone()),
        ..AppOptions::default()
    };
    let err = Application::build(fawn_config::Settings::with_home(dir.path()), options)
        .await
        .unwrap_err();
    assert!(matches!(err, BuildError::PortInUse { .. }), "{err}");
    assert!(err.to_string().contains(&port.to_string()));
}

#[tokio::test]
async fn without_models_the_demo_model_answers_and_is_announced() {
    let Some(app) = spawn_with(Spawn {
        no_models: true,
        ..Spawn::new(Db::Sqlite)
    })
    .await
    else {
        return;
    };
    let (_, info) = app.get_json("/info").await;
    assert_eq!(info["fawn"]["demo_model"]["name"], "fawn-demo", "{info}");
    assert!(
        info["fawn"]["demo_model"]["warning"]
            .as_str()
            .unwrap()
            .contains("demo")
    );
    let (_, ok) = app.get_json("/ok").await;
    assert_eq!(ok["demo_model"], true);
    let (s, v) = app
        .post_json(
            "/runs/wait",
            json!({"assistant_id": "lead_agent", "input": user_input("hello there")}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let last = v["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["type"], "ai");
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .starts_with(fawn_testkit::DEMO_PREFIX),
        "{last}"
    );
    app.stop().await;
}

#[tokio::test]
async fn with_models_configured_there_is_no_demo_model() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let (_, info) = app.get_json("/info").await;
    assert!(info["fawn"]["demo_model"].is_null(), "{info}");
    assert_eq!(info["fawn"]["models"], json!(["mock"]));
    app.stop().await;
}
