//! Durable runs: a run whose server died mid-run resumes from its last checkpoint on the
//! next start (attempt 2), completes, and its stream can be joined again.

use crate::helpers::*;
use crate::sse_reader::SseReader;
use fawn_runtime::hooks::Point;
use fawn_testkit::Turn;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

backends!(a_run_survives_a_crash);

fn options(db: Db) -> Tweak {
    Box::new(move |o| {
        o.queue.lease = Duration::from_millis(900);
        if db == Db::Postgres {
            // Several processes may share Postgres: only expired leases are reaped.
            o.recover_all_on_startup = Some(false);
        }
    })
}

async fn a_run_survives_a_crash(db: Db) {
    let Some(mut first) = spawn_with(Spawn {
        tweak: Some(options(db)),
        ..Spawn::new(db)
    })
    .await
    else {
        return;
    };
    let mock = first.mock.clone();
    mock.push(Turn::tool_call("get_weather", json!({"city": "Oslo"})));
    mock.push(Turn::text("Done after the crash."));
    // The run stops after its tool ran, before the tools step is stored: the crash comes
    // there.
    let mut tools_step = first.hooks().pause(Point::Step, 3);
    let tid = first.create_thread().await;
    let r = first
        .post(
            &format!("/threads/{tid}/runs/stream"),
            json!({"assistant_id": "lead_agent", "input": user_input("work"),
                   "stream_resumable": true, "stream_mode": ["values", "updates"]}),
        )
        .await;
    let rid = r.headers()["content-location"]
        .to_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    let mut reader = SseReader::new(r);
    assert_eq!(tools_step.reached().await, rid);
    // metadata, values(input), updates(agent), values(after agent); the tool's result is
    // not stored.
    let mut last_id = String::new();
    for _ in 0..4 {
        let e = reader.next(Duration::from_secs(10)).await.unwrap();
        last_id = e.id.clone().unwrap();
    }
    drop(reader);
    // Under the default `durability: async` a step's checkpoint is written while the next
    // step runs, so it may land just after its events: wait for it before the crash.
    first
        .eventually("the input and agent checkpoints are stored", || async {
            let (_, hist) = first
                .post_json(&format!("/threads/{tid}/history"), json!({"limit": 10}))
                .await;
            hist.as_array().map(Vec::len) == Some(2)
        })
        .await;
    first.crash();
    drop(tools_step);

    let second = spawn_with(Spawn {
        tweak: Some(options(db)),
        mock: Some(Arc::clone(&mock)),
        existing_db: Some(first.db.clone()),
        ..Spawn::new(db)
    })
    .await
    .unwrap();
    // Join again with the cursor from the dead server: the new attempt's events follow.
    let r = second
        .client
        .get(second.u(&format!("/threads/{tid}/runs/{rid}/stream")))
        .header("last-event-id", last_id)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let events = SseReader::new(r).rest(Duration::from_secs(20)).await;
    let n = names(&events);
    assert_eq!(n.first(), Some(&"metadata"), "{n:?}");
    assert_eq!(events[0].data["attempt"], 2);
    let last = events.last().unwrap();
    assert_eq!(last.event, "values");
    let msgs = last.data["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4, "{last:?}");
    assert_eq!(msgs[2]["content"], "It is sunny in Oslo.");
    assert_eq!(msgs[3]["content"], "Done after the crash.");
    let run = second.wait_run(&tid, &rid).await;
    assert_eq!(run["status"], "success", "{run}");
    assert_eq!(run["attempt"], 2);
    // Resumed from the last stored checkpoint (the agent's, which scheduled the tool): the
    // first model call was not made again.
    assert_eq!(mock.chat_requests().len(), 2);
    let (_, hist) = second
        .post_json(&format!("/threads/{tid}/history"), json!({"limit": 10}))
        .await;
    assert_eq!(hist.as_array().unwrap().len(), 4);
    let (_, t) = second.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(t["status"], "idle");
    second.stop().await;
}
