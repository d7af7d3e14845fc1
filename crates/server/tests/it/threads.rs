//! Threads: CRUD, search, copy, prune, delete with files, state, history.

use crate::helpers::*;
use serde_json::{Value, json};

backends!(
    thread_crud_search_copy_prune,
    thread_state_and_history,
    deerflow_thread_ids_work_under_api_only,
);

async fn thread_crud_search_copy_prune(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let id = uuid::Uuid::new_v4().to_string();
    let (s, t) = app
        .post_json(
            "/threads",
            json!({"thread_id": id, "metadata": {"owner": "ann", "n": 1}}),
        )
        .await;
    assert_eq!(s, 200, "{t}");
    assert_eq!(t["status"], "idle");
    assert_eq!(t["values"], Value::Null);
    assert!(t["created_at"].as_str().unwrap().ends_with("+00:00"));
    let (s, v) = app.post_json("/threads", json!({"thread_id": id})).await;
    assert_eq!(s, 409);
    assert_eq!(v["detail"], format!("Thread with ID {id} already exists"));
    let (s, v) = app
        .post_json(
            "/threads",
            json!({"thread_id": id, "if_exists": "do_nothing", "metadata": {"owner": "bob"}}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        v["metadata"]["owner"], "ann",
        "do_nothing leaves it unchanged"
    );
    let (s, v) = app
        .patch_json(
            &format!("/threads/{id}"),
            json!({"metadata": {"n": 2, "tag": "x"}}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(v["metadata"], json!({"owner": "ann", "n": 2, "tag": "x"}));
    let r = app
        .client
        .patch(app.u(&format!("/threads/{id}")))
        .header("prefer", "return=minimal")
        .json(&json!({"metadata": {"m": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert!(r.text().await.unwrap().is_empty());
    let (_, v) = app.get_json(&format!("/threads/{id}?include=ttl")).await;
    assert_eq!(v["metadata"]["m"], true);
    assert!(v.get("ttl").is_some());
    // More threads for search.
    let mut ids = vec![id.clone()];
    for i in 0..3 {
        let (_, t) = app
            .post_json("/threads", json!({"metadata": {"owner": "cat", "i": i}}))
            .await;
        ids.push(t["thread_id"].as_str().unwrap().to_string());
    }
    let r = app
        .post(
            "/threads/search",
            json!({"metadata": {"owner": "cat"}, "limit": 2}),
        )
        .await;
    assert_eq!(r.headers()["x-pagination-total"], "3");
    assert_eq!(r.headers()["x-pagination-next"], "2");
    let page: Value = r.json().await.unwrap();
    assert_eq!(page.as_array().unwrap().len(), 2);
    assert_eq!(page[0]["metadata"]["i"], 2, "newest first");
    let r = app
        .post(
            "/threads/search",
            json!({"metadata": {"owner": "cat"}, "limit": 2, "offset": 2}),
        )
        .await;
    assert!(r.headers().get("x-pagination-next").is_none());
    let (_, v) = app
        .post_json(
            "/threads/search",
            json!({"ids": [ids[1], ids[2]], "select": ["thread_id", "status"], "sort_by": "created_at", "sort_order": "asc"}),
        )
        .await;
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(v[0]["thread_id"], ids[1].as_str());
    assert_eq!(v[0].as_object().unwrap().len(), 2);
    let (_, v) = app
        .post_json("/threads/search", json!({"status": "idle", "limit": 100}))
        .await;
    assert_eq!(v.as_array().unwrap().len(), 4);
    let (s, _) = app
        .post_json("/threads/search", json!({"status": "sleepy"}))
        .await;
    assert_eq!(s, 422);
    let (s, _) = app
        .post_json("/threads/search", json!({"select": ["nope"]}))
        .await;
    assert_eq!(s, 422);
    let (_, n) = app
        .post_json("/threads/count", json!({"metadata": {"owner": "cat"}}))
        .await;
    assert_eq!(n, json!(3));
    // A run gives the thread values; search by values and extract.
    let (s, _) = app
        .post_json(
            &format!("/threads/{id}/runs/wait"),
            json!({"assistant_id": "lead_agent", "input": user_input("hello")}),
        )
        .await;
    assert_eq!(s, 200);
    let (_, v) = app
        .post_json(
            "/threads/search",
            json!({"values": {"messages": [{"content": "hello"}]},
                   "extract": {"last": "values.messages[-1].content"}}),
        )
        .await;
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v[0]["extracted"]["last"], "hello");
    // Copy keeps metadata and history.
    let (s, c) = app
        .post_json(&format!("/threads/{id}/copy"), Value::Null)
        .await;
    assert_eq!(s, 200, "{c}");
    let cid = c["thread_id"].as_str().unwrap().to_string();
    assert_ne!(cid, id);
    assert_eq!(c["metadata"]["owner"], "ann");
    let (_, h) = app
        .post_json(&format!("/threads/{cid}/history"), json!({}))
        .await;
    assert!(!h.as_array().unwrap().is_empty());
    // Delete removes the thread and its files.
    let files = app
        .home
        .join("users")
        .join("default")
        .join("threads")
        .join(&id);
    std::fs::create_dir_all(files.join("user-data").join("outputs")).unwrap();
    std::fs::write(files.join("user-data").join("outputs").join("a.txt"), "x").unwrap();
    assert_eq!(app.delete(&format!("/threads/{id}")).await, 204);
    assert!(!files.exists(), "thread files are deleted with the thread");
    let (s, v) = app.get_json(&format!("/threads/{id}")).await;
    assert_eq!(
        (s, v["detail"].as_str().unwrap()),
        (404, format!("Thread with ID {id} not found").as_str())
    );
    assert_eq!(app.delete(&format!("/threads/{id}")).await, 404);
    // Prune.
    let (s, v) = app
        .post_json("/threads/prune", json!({"thread_ids": [ids[1], ids[2]]}))
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["pruned_count"], 2);
    let (_, n) = app.post_json("/threads/count", json!({})).await;
    assert_eq!(n, json!(2));
    app.stop().await;
}

async fn thread_state_and_history(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    let (s, st) = app.get_json(&format!("/threads/{tid}/state")).await;
    assert_eq!(s, 200);
    assert_eq!(
        st,
        json!({"values": {}, "next": [], "tasks": [], "metadata": null, "created_at": null,
               "checkpoint": null, "parent_checkpoint": null, "interrupts": [],
               "checkpoint_id": null, "parent_checkpoint_id": null})
    );
    let (_, h) = app
        .post_json(&format!("/threads/{tid}/history"), json!({"limit": 10}))
        .await;
    assert_eq!(h, json!([]));
    // A state update on a fresh thread leaves `next` set: the thread is interrupted.
    let (s, v) = app
        .post_json(
            &format!("/threads/{tid}/state"),
            json!({"values": {"messages": [{"role": "user", "content": "from update"}]}}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let first_cp = v["checkpoint"]["checkpoint_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(v["checkpoint"]["thread_id"], tid.as_str());
    let (_, st) = app.get_json(&format!("/threads/{tid}/state")).await;
    assert_eq!(st["next"], json!(["agent"]));
    assert_eq!(st["metadata"]["source"], "update");
    assert_eq!(st["checkpoint_id"], first_cp.as_str());
    assert_eq!(st["values"]["messages"][0]["type"], "human");
    assert!(st["values"]["messages"][0]["id"].is_string());
    let (_, t) = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(t["status"], "interrupted");
    // Unknown node.
    let (s, v) = app
        .post_json(
            &format!("/threads/{tid}/state"),
            json!({"values": {"title": "x"}, "as_node": "nope"}),
        )
        .await;
    assert_eq!(
        (s, v["detail"].as_str().unwrap()),
        (400, "Node nope does not exist")
    );
    // As the agent with a final answer: nothing next, the thread is idle.
    let (s, v) = app
        .post_json(
            &format!("/threads/{tid}/state"),
            json!({"values": {"messages": [{"type": "ai", "content": "answer"}], "title": "T"}, "as_node": "agent"}),
        )
        .await;
    assert_eq!(s, 200);
    let second_cp = v["checkpoint_id"].as_str().unwrap().to_string();
    let (_, st) = app.get_json(&format!("/threads/{tid}/state")).await;
    assert_eq!(st["next"], json!([]));
    assert_eq!(st["values"]["title"], "T");
    assert_eq!(st["parent_checkpoint"]["checkpoint_id"], first_cp.as_str());
    assert_eq!(st["parent_checkpoint_id"], first_cp.as_str());
    let (_, t) = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(t["status"], "idle");
    assert_eq!(t["values"]["title"], "T");
    // State at a checkpoint, both spellings.
    let (s, st) = app
        .get_json(&format!("/threads/{tid}/state/{first_cp}"))
        .await;
    assert_eq!(s, 200);
    assert_eq!(st["values"]["messages"].as_array().unwrap().len(), 1);
    let (s, st) = app
        .post_json(
            &format!("/threads/{tid}/state/checkpoint"),
            json!({"checkpoint": {"checkpoint_id": second_cp, "checkpoint_ns": ""}}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(st["values"]["messages"].as_array().unwrap().len(), 2);
    let (s, _) = app
        .get_json(&format!("/threads/{tid}/state/{}", uuid::Uuid::new_v4()))
        .await;
    assert_eq!(s, 404);
    // Fork an update from the first checkpoint.
    let (s, v) = app
        .post_json(
            &format!("/threads/{tid}/state"),
            json!({"values": {"title": "fork"}, "checkpoint_id": first_cp, "as_node": "tools"}),
        )
        .await;
    assert_eq!(s, 200);
    let fork_cp = v["checkpoint_id"].as_str().unwrap().to_string();
    let (_, st) = app.get_json(&format!("/threads/{tid}/state")).await;
    assert_eq!(st["checkpoint_id"], fork_cp.as_str());
    assert_eq!(st["parent_checkpoint_id"], first_cp.as_str());
    assert_eq!(st["values"]["messages"].as_array().unwrap().len(), 1);
    // History: newest first across branches; `before` in three spellings.
    let (_, h) = app
        .post_json(&format!("/threads/{tid}/history"), json!({}))
        .await;
    let ids: Vec<&str> = h
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["checkpoint"]["checkpoint_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        vec![fork_cp.as_str(), second_cp.as_str(), first_cp.as_str()]
    );
    for before in [
        json!(second_cp),
        json!({"checkpoint_id": second_cp, "thread_id": tid, "checkpoint_ns": ""}),
        json!({"configurable": {"checkpoint_id": second_cp}}),
    ] {
        let (s, h) = app
            .post_json(
                &format!("/threads/{tid}/history"),
                json!({"before": before, "limit": 5}),
            )
            .await;
        assert_eq!(s, 200);
        assert_eq!(h.as_array().unwrap().len(), 1, "{h}");
        assert_eq!(h[0]["checkpoint"]["checkpoint_id"], first_cp.as_str());
    }
    let (_, h) = app
        .get_json(&format!("/threads/{tid}/history?limit=1"))
        .await;
    assert_eq!(h.as_array().unwrap().len(), 1);
    let (_, h) = app
        .post_json(
            &format!("/threads/{tid}/history"),
            json!({"metadata": {"source": "update"}, "limit": 10}),
        )
        .await;
    assert_eq!(h.as_array().unwrap().len(), 3);
    // PATCH state merges metadata into the latest checkpoint.
    let r = app
        .client
        .patch(app.u(&format!("/threads/{tid}/state")))
        .json(&json!({"metadata": {"starred": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let (_, st) = app.get_json(&format!("/threads/{tid}/state")).await;
    assert_eq!(st["metadata"]["starred"], true);
    app.stop().await;
}

/// DeerFlow's plain thread ids (`^[A-Za-z0-9_-]{1,64}$`) work on every thread route under
/// `/api` and `/api/langgraph`; at `/` the LangGraph contract (UUIDs) holds.
async fn deerflow_thread_ids_work_under_api_only(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let (s, v) = app
        .post_json("/threads", json!({"thread_id": "my_thread-1"}))
        .await;
    assert_eq!(
        (s, &v["detail"]),
        (422, &json!("Invalid thread ID: must be a UUID"))
    );
    let (s, t) = app
        .post_json("/api/threads", json!({"thread_id": "my_thread-1"}))
        .await;
    assert_eq!((s, &t["thread_id"]), (200, &json!("my_thread-1")), "{t}");
    weather_script(&app.mock);
    let (s, out) = app
        .post_json(
            "/api/threads/my_thread-1/runs/wait",
            json!({"assistant_id": "lead_agent", "input": user_input("weather?")}),
        )
        .await;
    assert_eq!(s, 200, "{out}");
    for base in ["/api", "/api/langgraph"] {
        let (s, st) = app
            .get_json(&format!("{base}/threads/my_thread-1/state"))
            .await;
        assert_eq!(s, 200, "{st}");
        let msgs = st["values"]["messages"].as_array().unwrap();
        assert_eq!(
            msgs.last().unwrap()["content"],
            "The weather in Paris is sunny."
        );
        let (s, runs) = app
            .get_json(&format!("{base}/threads/my_thread-1/runs"))
            .await;
        assert_eq!((s, runs.as_array().map(Vec::len)), (200, Some(1)));
    }
    let (s, v) = app.get_json("/threads/my_thread-1").await;
    assert_eq!(
        (s, &v["detail"]),
        (422, &json!("Invalid thread ID: must be a UUID"))
    );
    for bad in ["a.b", "x%2Fy", &"x".repeat(65)] {
        let (s, v) = app.get_json(&format!("/api/threads/{bad}")).await;
        assert_eq!(s, 422, "{bad}: {v}");
        assert_eq!(
            v["detail"],
            "Invalid thread ID: must be a UUID or match ^[A-Za-z0-9_-]{1,64}$"
        );
    }
    assert_eq!(app.delete("/api/threads/my_thread-1").await, 204);
    let (s, _) = app.get_json("/api/threads/my_thread-1").await;
    assert_eq!(s, 404);
    app.stop().await;
}
