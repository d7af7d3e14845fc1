//! `GET /threads/{id}/storage`: what a thread's checkpoints occupy, in the official server's
//! shape, growing with the thread.

use crate::helpers::*;
use fawn_testkit::Turn;
use serde_json::{Value, json};

backends!(storage_is_measured_per_part_and_channel);

fn n(v: &Value, path: &str) -> u64 {
    v.pointer(path)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{path} in {v}"))
}

async fn storage_is_measured_per_part_and_channel(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let (s, _) = app
        .get_json(&format!("/threads/{}/storage", uuid::Uuid::new_v4()))
        .await;
    assert_eq!(s, 404);
    let (s, _) = app.get_json("/threads/nope/storage").await;
    assert_eq!(s, 422);
    let tid = app.create_thread().await;
    let (s, empty) = app.get_json(&format!("/threads/{tid}/storage")).await;
    assert_eq!(s, 200, "{empty}");
    assert_eq!(
        empty,
        json!({"thread_id": tid, "total_bytes": 0,
               "checkpoints": {"count": 0, "bytes": 0},
               "channel_values": {"count": 0, "bytes": 0, "by_channel": {}},
               "pending_writes": {"count": 0, "bytes": 0}})
    );
    app.mock.push(Turn::text("first answer"));
    run_to_success(&app, &tid, "hello").await;
    let (_, one) = app.get_json(&format!("/threads/{tid}/storage")).await;
    let (_, history) = app
        .post_json(&format!("/threads/{tid}/history"), json!({"limit": 100}))
        .await;
    assert_eq!(
        n(&one, "/checkpoints/count"),
        history.as_array().unwrap().len() as u64
    );
    assert!(n(&one, "/checkpoints/bytes") > 0);
    let messages = &one["channel_values"]["by_channel"]["messages"];
    assert!(n(messages, "/versions") >= 2, "{one}");
    let per_channel: u64 = one["channel_values"]["by_channel"]
        .as_object()
        .unwrap()
        .values()
        .map(|c| n(c, "/bytes"))
        .sum();
    assert_eq!(per_channel, n(&one, "/channel_values/bytes"));
    assert_eq!(
        n(&one, "/total_bytes"),
        n(&one, "/checkpoints/bytes")
            + n(&one, "/channel_values/bytes")
            + n(&one, "/pending_writes/bytes")
    );
    app.mock
        .push(Turn::text("a second, longer answer than the first one"));
    run_to_success(&app, &tid, "again").await;
    let (_, two) = app.get_json(&format!("/threads/{tid}/storage")).await;
    assert!(n(&two, "/checkpoints/count") > n(&one, "/checkpoints/count"));
    assert!(
        n(&two, "/channel_values/by_channel/messages/bytes")
            > n(&one, "/channel_values/by_channel/messages/bytes")
    );
    app.stop().await;
}
