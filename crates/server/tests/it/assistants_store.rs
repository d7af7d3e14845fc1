//! Assistants and the store.

use crate::helpers::*;
use serde_json::{Value, json};

backends!(assistants_crud_versions_search, store_items_and_namespaces);

async fn assistants_crud_versions_search(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let sys = fawn_server::system_assistant_id("lead_agent");
    let (s, a) = app.get_json(&format!("/assistants/{sys}")).await;
    assert_eq!(s, 200);
    assert_eq!(a["graph_id"], "lead_agent");
    assert_eq!(a["name"], "lead_agent");
    assert_eq!(a["metadata"], json!({"created_by": "system"}));
    assert_eq!(a["version"], 1);
    assert_eq!(a["description"], Value::Null);
    let (s, _) = app.get_json("/assistants/lead_agent").await;
    assert_eq!(s, 200, "a graph id works in paths too");
    // Create with configurable only: context mirrors it.
    let (s, a) = app
        .post_json(
            "/assistants",
            json!({"graph_id": "lead_agent", "config": {"configurable": {"model_name": "mock"}},
                   "metadata": {"team": "a"}}),
        )
        .await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(a["name"], "Untitled");
    assert_eq!(a["context"], json!({"model_name": "mock"}));
    let aid = a["assistant_id"].as_str().unwrap().to_string();
    let (s, _) = app
        .post_json(
            "/assistants",
            json!({"graph_id": "lead_agent", "assistant_id": aid}),
        )
        .await;
    assert_eq!(s, 409);
    let (s, same) = app
        .post_json(
            "/assistants",
            json!({"graph_id": "lead_agent", "assistant_id": aid, "if_exists": "do_nothing", "name": "other"}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(same["name"], "Untitled");
    let (s, v) = app
        .post_json("/assistants", json!({"graph_id": "nope"}))
        .await;
    assert_eq!(s, 404);
    assert_eq!(
        v["detail"],
        "Graph 'nope' not found. Expected one of: ['lead_agent']"
    );
    // Patch: a new version, metadata merged.
    let (s, p) = app
        .patch_json(
            &format!("/assistants/{aid}"),
            json!({"metadata": {"env": "prod"}, "name": "Named"}),
        )
        .await;
    assert_eq!(s, 200, "{p}");
    assert_eq!(p["version"], 2);
    assert_eq!(p["metadata"], json!({"team": "a", "env": "prod"}));
    let (_, versions) = app
        .post_json(&format!("/assistants/{aid}/versions"), json!({}))
        .await;
    let versions = versions.as_array().unwrap();
    assert_eq!(versions.len(), 2);
    assert_eq!(versions[0]["version"], 2);
    assert!(versions[0].get("updated_at").is_none());
    let (s, l) = app
        .post_json(&format!("/assistants/{aid}/latest"), json!({"version": 1}))
        .await;
    assert_eq!(s, 200);
    assert_eq!(l["version"], 1);
    assert_eq!(l["name"], "Untitled");
    // Search and count.
    let r = app
        .post(
            "/assistants/search",
            json!({"graph_id": "lead_agent", "limit": 1}),
        )
        .await;
    assert_eq!(r.headers()["x-pagination-total"], "2");
    assert_eq!(r.headers()["x-pagination-next"], "1");
    let (_, v) = app
        .post_json(
            "/assistants/search",
            json!({"metadata": {"team": "a"}, "select": ["assistant_id"]}),
        )
        .await;
    assert_eq!(v, json!([{"assistant_id": aid}]));
    let (_, n) = app.post_json("/assistants/count", json!({})).await;
    assert_eq!(n, json!(2));
    let (s, _) = app
        .post_json("/assistants/search", json!({"sort_by": "bogus"}))
        .await;
    assert_eq!(s, 422);
    // Graph and schemas.
    let (s, g) = app
        .get_json(&format!("/assistants/{aid}/graph?xray=false"))
        .await;
    assert_eq!(s, 200);
    assert!(
        g["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["id"] == "agent")
    );
    let (s, _) = app
        .get_json(&format!("/assistants/{aid}/graph?xray=maybe"))
        .await;
    assert_eq!(s, 422);
    let (_, sc) = app.get_json(&format!("/assistants/{aid}/schemas")).await;
    assert_eq!(sc["graph_id"], "lead_agent");
    assert!(sc.get("input_schema").is_some() && sc.get("context_schema").is_some());
    let (_, sub) = app
        .get_json(&format!("/assistants/{aid}/subgraphs?recurse=true"))
        .await;
    assert_eq!(sub, json!({}));
    // A run through the user assistant carries its config.
    let tid = app.create_thread().await;
    let (s, run) = app
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": aid, "input": user_input("x")}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        run["kwargs"]["config"]["configurable"]["model_name"],
        "mock"
    );
    assert_eq!(run["assistant_id"], aid.as_str());
    app.wait_run(&tid, run["run_id"].as_str().unwrap()).await;
    // Delete with its threads.
    let r = app
        .client
        .delete(app.u(&format!("/assistants/{aid}?delete_threads=true")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let (s, _) = app.get_json(&format!("/assistants/{aid}")).await;
    assert_eq!(s, 404);
    let (s, _) = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(s, 404, "the assistant's threads went with it");
    app.stop().await;
}

async fn store_items_and_namespaces(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let put = |ns: Value, key: &str, value: Value| {
        let c = app.client.clone();
        let u = app.u("/store/items");
        let body = json!({"namespace": ns, "key": key, "value": value});
        async move { c.put(u).json(&body).send().await.unwrap().status().as_u16() }
    };
    assert_eq!(
        put(json!(["users", "u1"]), "prefs", json!({"theme": "dark"})).await,
        204
    );
    assert_eq!(
        put(json!(["users", "u2"]), "prefs", json!({"theme": "light"})).await,
        204
    );
    assert_eq!(
        put(json!(["users", "u1", "x"]), "k", json!({"a": 1})).await,
        204
    );
    assert_eq!(put(json!(["bad.label"]), "k", json!({})).await, 422);
    assert_eq!(put(json!(["a"]), "k", json!(3)).await, 422);
    let (s, item) = app
        .get_json("/store/items?namespace=users.u1&key=prefs")
        .await;
    assert_eq!(s, 200);
    assert_eq!(item["value"], json!({"theme": "dark"}));
    assert_eq!(item["namespace"], json!(["users", "u1"]));
    assert!(item["created_at"].is_string());
    let (s, miss) = app
        .get_json("/store/items?namespace=users.u9&key=prefs")
        .await;
    assert_eq!((s, miss), (200, Value::Null));
    let (s, _) = app.get_json("/store/items?namespace=users.u1").await;
    assert_eq!(s, 422);
    let (_, found) = app
        .post_json(
            "/store/items/search",
            json!({"namespace_prefix": ["users"], "filter": {"theme": "light"}}),
        )
        .await;
    let items = found["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["key"], "prefs");
    assert_eq!(items[0]["score"], Value::Null);
    let (_, ns) = app
        .post_json(
            "/store/namespaces",
            json!({"prefix": ["users"], "max_depth": 2}),
        )
        .await;
    assert_eq!(ns["namespaces"], json!([["users", "u1"], ["users", "u2"]]));
    let r = app
        .client
        .delete(app.u("/store/items"))
        .json(&json!({"namespace": ["users", "u1"], "key": "prefs"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let (_, miss) = app
        .get_json("/store/items?namespace=users.u1&key=prefs")
        .await;
    assert_eq!(miss, Value::Null);
    app.stop().await;
}
