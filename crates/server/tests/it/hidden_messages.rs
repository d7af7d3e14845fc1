//! DeerFlow's hidden messages (`additional_kwargs.hide_from_ui`: the lead agent's date
//! reminder, which takes the first turn's place at the head of the thread) stay out of the
//! thread values a LangGraph-native client reads at `/`, so LangChain's Agent Chat UI neither
//! shows them nor labels a thread with one (it labels a thread from
//! `threads.search(...)[i].values.messages[0]`). Under `/api/langgraph` the values are whole:
//! DeerFlow's UI hides them itself, and its history features read them.

use crate::helpers::*;
use serde_json::{Value, json};

backends!(langgraph_native_values_leave_hidden_messages_out);

fn messages(values: &Value) -> &Vec<Value> {
    values["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("no messages in {values}"))
}

fn hidden(m: &Value) -> bool {
    m["additional_kwargs"]["hide_from_ui"] == json!(true)
}

/// No hidden message, and the conversation starts with the user's words.
#[track_caller]
fn as_a_user_sees_it(values: &Value, first_words: &str, what: &str) {
    let msgs = messages(values);
    assert!(!msgs.iter().any(hidden), "{what}: {values}");
    assert_eq!(msgs[0]["type"], "human", "{what}: {values}");
    assert!(
        msgs[0]["content"].to_string().contains(first_words),
        "{what}: {values}"
    );
}

async fn langgraph_native_values_leave_hidden_messages_out(db: Db) {
    let Some(app) = spawn_with(Spawn {
        lead_agent: true,
        ..Spawn::new(db)
    })
    .await
    else {
        return;
    };
    let words = "What is the tallest mountain?";
    // What Agent Chat UI's `useStream` sends: a new thread, then the run.
    let (s, t) = app.post_json("/threads", json!({})).await;
    assert_eq!(s, 200, "{t}");
    let tid = t["thread_id"].as_str().unwrap().to_string();
    let first_id = uuid::Uuid::new_v4().to_string();
    let r = app
        .post(
            &format!("/threads/{tid}/runs/stream"),
            json!({
                "assistant_id": "lead_agent",
                "input": {"messages": [{"type": "human", "id": first_id,
                                        "content": [{"type": "text", "text": words}]}]},
                "stream_mode": ["values", "messages-tuple", "updates"],
                "stream_resumable": true,
            }),
        )
        .await;
    assert_eq!(r.status(), 200);
    let events = parse_sse(&r.text().await.unwrap());
    assert!(!names(&events).contains(&"error"), "{events:?}");
    let values: Vec<&Value> = events
        .iter()
        .filter(|e| e.event == "values")
        .map(|e| &e.data)
        .collect();
    assert!(!values.is_empty(), "{events:?}");
    for v in &values {
        as_a_user_sees_it(v, words, "a streamed values event");
    }
    let answer = messages(values[values.len() - 1]).last().unwrap().clone();
    assert_eq!(answer["type"], "ai", "{answer}");

    // Under DeerFlow's mount the thread is whole: the reminder took the first message's id
    // and heads the thread, the user's message moved to `{id}__user`.
    let (s, whole) = app
        .get_json(&format!("/api/langgraph/threads/{tid}/state"))
        .await;
    assert_eq!(s, 200, "{whole}");
    let all = messages(&whole["values"]);
    assert!(hidden(&all[0]), "{whole}");
    assert_eq!(all[0]["id"], first_id.as_str());
    assert!(
        all.iter()
            .any(|m| m["id"] == format!("{first_id}__user").as_str()),
        "{whole}"
    );

    // The sidebar: Agent Chat UI searches the graph's threads and labels each with its
    // first message.
    let (s, found) = app
        .post_json(
            "/threads/search",
            json!({"metadata": {"graph_id": "lead_agent"}, "limit": 100}),
        )
        .await;
    assert_eq!(s, 200, "{found}");
    let thread = found
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["thread_id"] == tid.as_str())
        .unwrap_or_else(|| panic!("the thread is not found by its graph: {found}"));
    as_a_user_sees_it(&thread["values"], words, "threads.search");
    let (_, thread) = app.get_json(&format!("/threads/{tid}")).await;
    as_a_user_sees_it(&thread["values"], words, "threads.get");
    let (_, state) = app.get_json(&format!("/threads/{tid}/state")).await;
    as_a_user_sees_it(&state["values"], words, "threads.getState");
    assert_eq!(&state["values"], values[values.len() - 1]);
    let (s, history) = app
        .post_json(&format!("/threads/{tid}/history"), json!({"limit": 1000}))
        .await;
    assert_eq!(s, 200, "{history}");
    for h in history.as_array().unwrap() {
        assert!(
            !messages(&h["values"]).iter().any(hidden),
            "a history state: {h}"
        );
    }

    // The next turn through `/wait`, and the finished run joined: no hidden message either.
    let r = app
        .post(
            &format!("/threads/{tid}/runs/wait"),
            json!({"assistant_id": "lead_agent",
                   "input": {"messages": [{"role": "user", "content": "And the deepest lake?"}]}}),
        )
        .await;
    let rid = r
        .headers()
        .get("content-location")
        .and_then(|v| v.to_str().ok())
        .and_then(|l| l.rsplit('/').next())
        .unwrap()
        .to_string();
    let out: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    as_a_user_sees_it(&out, words, "runs.wait");
    let (s, joined) = app
        .get_json(&format!("/threads/{tid}/runs/{rid}/join"))
        .await;
    assert_eq!(s, 200, "{joined}");
    as_a_user_sees_it(&joined, words, "runs.join");
    // And DeerFlow's own view of the conversation is whole and in order.
    let (s, page) = app
        .get_json(&format!("/api/threads/{tid}/messages/page"))
        .await;
    assert_eq!(s, 200, "{page}");
    let kinds: Vec<&str> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["content"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["human", "ai", "human", "ai"], "{page}");
    app.stop().await;
}
