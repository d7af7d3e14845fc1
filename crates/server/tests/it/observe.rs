//! `/metrics` and the request id: who may scrape, what the families say after load, and
//! the `X-Request-Id` every response carries. (The trace export is tested on the binary, in
//! `crates/fawn/tests/it/observability.rs`: tracing is process-wide.)

use crate::auth::{Cred, admin_and_users, call};
use crate::helpers::*;
use serde_json::{Value, json};
use std::collections::HashMap;

backends!(metrics_move_with_load);

const TOKEN: &str = "scrape-token-0123456789abcdef";

/// Samples of the text format: `name{labels}` → value. Also checks every sample's family
/// has HELP and TYPE lines before it.
fn samples(text: &str) -> HashMap<String, f64> {
    let mut typed = std::collections::HashSet::new();
    let mut helped = std::collections::HashSet::new();
    let mut out = HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            typed.insert(rest.split(' ').next().unwrap().to_string());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.insert(rest.split(' ').next().unwrap().to_string());
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line.rsplit_once(' ').expect("a sample line");
        let name = key.split('{').next().unwrap();
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| typed.contains(*f)))
            .unwrap_or(name);
        assert!(typed.contains(family), "{family} has no TYPE line");
        assert!(helped.contains(family), "{family} has no HELP line");
        out.insert(key.to_string(), value.parse::<f64>().expect("a number"));
    }
    out
}

fn value(s: &HashMap<String, f64>, key: &str) -> f64 {
    s.get(key).copied().unwrap_or(0.0)
}

async fn scrape(app: &TestApp) -> HashMap<String, f64> {
    let r = app.client.get(app.u("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    samples(&r.text().await.unwrap())
}

/// Figures move with load (other tests of this binary run alongside, so they grow by at
/// least what this one did; the SDK suite checks exact deltas against its own server).
async fn metrics_move_with_load(db: Db) {
    // The lead agent: its models are the runtime's, which every call goes through.
    let Some(app) = spawn_with(Spawn {
        lead_agent: true,
        ..Spawn::new(db)
    })
    .await
    else {
        return;
    };
    let before = scrape(&app).await;
    let n = 3;
    for i in 0..n {
        let tid = app.create_thread().await;
        run_to_success(&app, &tid, &format!("hello {i}")).await;
    }
    let after = scrape(&app).await;
    let grew = |key: &str| value(&after, key) - value(&before, key);
    assert!(grew("fawn_runs_finished_total{status=\"success\"}") >= n as f64);
    assert!(grew("fawn_runs_created_total") >= n as f64);
    assert!(grew("fawn_run_duration_seconds_count{status=\"success\"}") >= n as f64);
    assert!(grew("fawn_run_first_event_seconds_count") >= 0.0);
    assert!(grew("fawn_checkpoint_writes_total") >= n as f64);
    assert!(grew("fawn_checkpoint_written_bytes_total") > 0.0);
    assert!(grew("fawn_model_calls_total{model=\"mock\",outcome=\"ok\"}") >= n as f64);
    assert!(
        grew("fawn_model_tokens_total{direction=\"input\",model=\"mock\",source=\"provider\"}")
            > 0.0
    );
    assert!(
        grew("fawn_http_requests_total{method=\"POST\",route=\"/threads\",status=\"2xx\"}")
            >= n as f64
    );
    // Route templates, never ids.
    assert!(
        after
            .keys()
            .all(|k| !k.contains("route=\"/threads/0") && !k.contains("route=\"/threads/1"))
    );
    for family in [
        "fawn_build_info{",
        "process_resident_memory_bytes",
        "process_open_fds",
        "fawn_db_pool_connections{state=\"open\"}",
        "fawn_runs_pending",
        "fawn_runs_executing_max",
        "fawn_uptime_seconds",
    ] {
        assert!(
            after.keys().any(|k| k.starts_with(family)),
            "{family} missing"
        );
    }
    assert!(value(&after, "process_resident_memory_bytes") > 0.0);

    // The same figures as JSON, with the official server's queue and workers keys.
    let (status, body) = app.get_json("/metrics?format=json").await;
    assert_eq!(status, 200);
    assert!(body["queue"]["n_pending"].is_u64(), "{body}");
    assert!(body["workers"]["max"].as_u64().unwrap() > 0);
    let finished = &body["metrics"]["fawn_runs_finished_total"];
    assert_eq!(finished["type"], "counter");
    let success = finished["samples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["labels"]["status"] == "success")
        .unwrap();
    assert!(success["value"].as_f64().unwrap() >= n as f64);

    // A run's kwargs as clients see them carry nothing of the server's own.
    let tid = app.create_thread().await;
    let (_, run) = app
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("hi")}),
        )
        .await;
    let rid = run["run_id"].as_str().unwrap().to_string();
    assert!(run["kwargs"].get("origin").is_none(), "{run}");
    app.wait_run(&tid, &rid).await;
    let (_, got) = app.get_json(&format!("/threads/{tid}/runs/{rid}")).await;
    assert!(got["kwargs"].get("origin").is_none(), "{got}");
    assert!(got["kwargs"]["input"].is_object(), "{got}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_answer_admins_and_the_scrape_token_only() {
    let Some(app) = spawn_with(Spawn {
        tweak: Some(Box::new(|o| {
            o.auth = fawn_server::auth::AuthOptions::enabled();
        })),
        settings: Some(Box::new(|s| s.app.metrics.token = Some(TOKEN.into()))),
        ..Spawn::new(Db::Sqlite)
    })
    .await
    else {
        panic!("SQLite is always available");
    };
    let (admin, alice, _bob) = admin_and_users(&app).await;
    let token = Cred::Bearer(TOKEN.into());
    for path in ["/metrics", "/api/metrics", "/api/langgraph/metrics"] {
        assert_eq!(
            call(&app, &Cred::Anon, "GET", path, None).await.status,
            401,
            "{path}"
        );
        assert_eq!(
            call(&app, &alice, "GET", path, None).await.status,
            403,
            "{path}"
        );
        let r = call(&app, &admin, "GET", path, None).await;
        assert_eq!(r.status, 200, "{path}");
        let r = call(&app, &token, "GET", path, None).await;
        assert_eq!(r.status, 200, "{path}");
        assert!(r.body.as_str().unwrap().contains("fawn_build_info"));
    }
    // The token opens nothing else, and a wrong one is refused.
    let r = call(&app, &token, "POST", "/threads/search", Some(json!({}))).await;
    assert_eq!(r.status, 401);
    let r = call(&app, &token, "GET", "/api/models", None).await;
    assert_eq!(r.status, 401);
    let wrong = Cred::Bearer("scrape-token-0123456789abcdeX".into());
    assert_eq!(
        call(&app, &wrong, "GET", "/metrics", None).await.status,
        401
    );
    let r = call(&app, &token, "GET", "/metrics?format=json", None).await;
    assert_eq!(r.status, 200);
    assert!(r.body["workers"].is_object(), "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_carries_a_request_id() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        panic!("SQLite is always available");
    };
    let id_of = |r: &reqwest::Response| {
        r.headers()
            .get("x-request-id")
            .map(|v| v.to_str().unwrap().to_string())
    };
    // The client's own id comes back, on answers of every kind.
    for (method, path) in [
        ("GET", "/ok"),
        ("GET", "/no/such/route"),
        ("POST", "/threads/search"),
    ] {
        let r = app
            .client
            .request(method.parse().unwrap(), app.u(path))
            .header("x-request-id", "client-id_42.a:b")
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap();
        assert_eq!(
            id_of(&r).as_deref(),
            Some("client-id_42.a:b"),
            "{method} {path}"
        );
    }
    // A missing, oversized or unprintable one is replaced by a generated one.
    let long = "a".repeat(200);
    for sent in [None, Some(long.as_str()), Some("has space")] {
        let mut req = app.client.get(app.u("/ok"));
        if let Some(s) = sent {
            req = req.header("x-request-id", s);
        }
        let r = req.send().await.unwrap();
        let id = id_of(&r).expect("an id");
        assert_eq!(id.len(), 32, "{id}");
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(Some(id.as_str()), sent);
    }
    let r = app.client.get(app.u("/ok")).send().await.unwrap();
    let (a, b) = (
        id_of(&r).unwrap(),
        id_of(&app.client.get(app.u("/ok")).send().await.unwrap()).unwrap(),
    );
    assert_ne!(a, b, "each request its own id");
    let _: Value = r.json().await.unwrap();
}
