//! Property tests of the reducers against small reference models written from the LangGraph
//! and DeerFlow sources (`add_messages`, `merge_artifacts`, `merge_viewed_images`,
//! `merge_sandbox`, `merge_todos`, last-value channels).

use fawn_state::state::normalize_messages;
use fawn_state::{
    Message, MessageKind, Messages, REMOVE_ALL_MESSAGES, StateUpdate, ThreadState, add_messages,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

// ---------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------

const IDS: [&str; 6] = ["m0", "m1", "m2", "m3", "m4", "m5"];

/// One message in a `messages` write, as client JSON.
fn message_json() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => (prop::option::of(prop::sample::select(&IDS[..])), "[a-z]{0,4}", 0..3u8).prop_map(
            |(id, text, kind)| {
                let mut m = match kind {
                    0 => json!({"type": "human", "content": text}),
                    1 => json!({"role": "assistant", "content": text}),
                    _ => json!({"type": "AIMessageChunk", "content": text}),
                };
                if let Some(id) = id {
                    m["id"] = json!(id);
                }
                m
            }
        ),
        2 => prop::sample::select(&IDS[..]).prop_map(|id| json!({"type": "remove", "id": id})),
        1 => Just(json!({"type": "remove", "id": REMOVE_ALL_MESSAGES})),
    ]
}

fn small_json() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (0..100i64).prop_map(Value::from),
        "[a-z]{0,3}".prop_map(Value::String),
        prop::collection::vec((0..10i64).prop_map(Value::from), 0..3).prop_map(Value::Array),
    ]
}

fn strings(pool: &'static [&'static str]) -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(prop::sample::select(pool).prop_map(str::to_string), 0..4)
}

/// A random state update as client JSON; absent keys are not written.
fn update_json() -> impl Strategy<Value = Value> {
    let artifacts = prop_oneof![
        1 => Just(Value::Null),
        3 => strings(&["/a", "/b", "/c", "/d"]).prop_map(|v| json!(v)),
    ];
    let viewed = prop_oneof![
        1 => Just(Value::Null),
        1 => Just(json!({})),
        3 => prop::collection::vec((prop::sample::select(&["p1", "p2", "p3"][..]), 0..5i64), 1..3)
            .prop_map(|kv| {
                let mut m = Map::new();
                for (k, size) in kv {
                    m.insert(k.to_string(), json!({"mime_type": "image/png", "size": size, "actual_path": k}));
                }
                Value::Object(m)
            }),
    ];
    let sandbox = prop_oneof![
        Just(Value::Null),
        Just(json!({"sandbox_id": "sb-1"})),
        Just(json!({"sandbox_id": "sb-2"})),
        Just(json!({})),
    ];
    let todos = prop_oneof![
        Just(Value::Null),
        Just(json!([])),
        "[a-z]{1,3}".prop_map(|c| json!([{"content": c, "status": "pending"}])),
    ];
    let last_value = prop_oneof![Just(Value::Null), "[a-z]{0,3}".prop_map(Value::String)];
    let goal = prop_oneof![
        Just(Value::Null),
        ("[a-z]{1,3}", 0..3u32).prop_map(|(o, n)| json!({"objective": o, "status": "active",
            "created_at": "t0", "updated_at": "t1", "continuation_count": n, "max_continuations": 8,
            "no_progress_count": 0, "max_no_progress_continuations": 2})),
    ];
    (
        prop::option::of(prop::collection::vec(message_json(), 0..5)),
        prop::option::of(artifacts),
        prop::option::of(viewed),
        prop::option::of(sandbox),
        prop::option::of(todos),
        prop::option::of(last_value.clone()),
        prop::option::of(last_value),
        prop::option::of(prop_oneof![
            Just(Value::Null),
            Just(json!({"workspace_path": "/w", "outputs_path": "/o"}))
        ]),
        prop::option::of(prop_oneof![
            Just(Value::Null),
            Just(json!([{"filename": "a.txt"}]))
        ]),
        prop::option::of(goal),
        prop::option::of(small_json()),
    )
        .prop_map(
            |(
                msgs,
                artifacts,
                viewed,
                sandbox,
                todos,
                title,
                summary,
                thread_data,
                uploads,
                goal,
                custom,
            )| {
                let mut o = Map::new();
                let mut put = |k: &str, v: Option<Value>| {
                    if let Some(v) = v {
                        o.insert(k.to_string(), v);
                    }
                };
                put("messages", msgs.map(Value::Array));
                put("artifacts", artifacts);
                put("viewed_images", viewed);
                put("sandbox", sandbox);
                put("todos", todos);
                put("title", title);
                put("summary_text", summary);
                put("thread_data", thread_data);
                put("uploaded_files", uploads);
                put("goal", goal);
                put("custom_key", custom);
                Value::Object(o)
            },
        )
}

fn update() -> impl Strategy<Value = StateUpdate> {
    update_json().prop_map(|v| StateUpdate::from_value(v).expect("generated updates parse"))
}

/// A state reached by applying random updates (failing ones skipped).
fn state() -> impl Strategy<Value = ThreadState> {
    prop::collection::vec(update(), 0..5).prop_map(|ups| {
        let mut s = ThreadState::default();
        for mut u in ups {
            let _ = s.apply(&mut u);
        }
        s
    })
}

// ---------------------------------------------------------------------------------------
// Reference models
// ---------------------------------------------------------------------------------------

/// LangGraph's `add_messages` over (id, message) pairs, written the naive way; the messages
/// after a remove-all go through the usual rules (Fawn's documented choice).
fn model_add_messages(left: &[Message], right: &[Message]) -> Result<Vec<Message>, String> {
    let (mut merged, right): (Vec<Message>, &[Message]) =
        match right.iter().rposition(Message::is_remove_all) {
            Some(p) => (Vec::new(), &right[p + 1..]),
            None => (left.to_vec(), right),
        };
    let mut to_remove: Vec<String> = Vec::new();
    for m in right {
        let id = m.id.clone().unwrap();
        match merged
            .iter()
            .position(|e| e.id.as_deref() == Some(id.as_str()))
        {
            Some(i) if m.kind == MessageKind::Remove => {
                if !to_remove.contains(&id) {
                    to_remove.push(id);
                }
                let _ = i;
            }
            Some(i) => {
                to_remove.retain(|r| r != &id);
                merged[i] = m.clone();
            }
            None if m.kind == MessageKind::Remove => return Err(id),
            None => merged.push(m.clone()),
        }
    }
    merged.retain(|m| !to_remove.contains(m.id.as_ref().unwrap()));
    Ok(merged)
}

fn model_artifacts(existing: Option<&Vec<String>>, new: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in existing.into_iter().flatten().chain(new) {
        if !out.contains(a) {
            out.push(a.clone());
        }
    }
    out
}

fn written_messages(v: &Value) -> Vec<Message> {
    let mut msgs: Vec<Message> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|m| Message::from_value(m.clone()).unwrap())
        .collect();
    normalize_messages(&mut msgs);
    msgs
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// `add_messages` equals the reference model; on error the list is untouched.
    #[test]
    fn add_messages_matches_model(
        base in prop::collection::vec(message_json(), 0..80),
        write in prop::collection::vec(message_json(), 0..6),
    ) {
        // A base the reducer could have produced: apply it to an empty list first. Up to 80
        // messages, so that the list spans several of `Messages`' chunks.
        let mut left = Messages::new();
        let base_msgs: Vec<Message> = written_messages(&Value::Array(base))
            .into_iter()
            .filter(|m| m.kind != MessageKind::Remove)
            .collect();
        add_messages(&mut left, &base_msgs).unwrap();
        let right = written_messages(&Value::Array(write));
        let expected = model_add_messages(&left.to_vec(), &right);
        let before = left.clone();
        match (add_messages(&mut left, &right), expected) {
            (Ok(()), Ok(want)) => prop_assert_eq!(left, want),
            (Err(e), Err(id)) => {
                prop_assert_eq!(&left, &before);
                prop_assert_eq!(
                    e.to_string(),
                    format!("Attempting to delete a message with an ID that doesn't exist ('{id}')")
                );
            }
            (got, want) => prop_assert!(false, "got {:?}, model {:?}", got, want),
        }
    }

    /// Same id replaces in place and keeps its position; new ids append in order.
    #[test]
    fn same_id_replaces_in_place(n in 1..6usize, pick in 0..6usize, text in "[a-z]{1,5}") {
        let mut left: Messages =
            (0..n).map(|i| Message::human(format!("m{i}")).with_id(format!("id{i}"))).collect();
        let pick = pick % n;
        let replacement = Message::ai(text.as_str()).with_id(format!("id{pick}"));
        let fresh = Message::human("new").with_id("fresh");
        add_messages(&mut left, &[replacement.clone(), fresh.clone()]).unwrap();
        prop_assert_eq!(left.len(), n + 1);
        prop_assert_eq!(&left[pick], &replacement);
        prop_assert_eq!(&left[n], &fresh);
        for (i, m) in left.iter().take(n).enumerate() {
            prop_assert_eq!(m.id.clone(), Some(format!("id{i}")));
        }
    }

    /// Writes without ids get them assigned in the write itself: replaying the persisted
    /// writes on the same base gives an identical state.
    #[test]
    fn replaying_persisted_writes_is_deterministic(
        base in state(),
        writes in prop::collection::vec(update(), 1..4),
    ) {
        let mut first = base.clone();
        let mut applied = writes.clone();
        let result = first.apply_writes(&mut applied);
        if result.is_ok() {
            for w in &applied {
                for m in w.messages.iter().flatten() {
                    prop_assert!(m.id.as_deref().is_some_and(|id| !id.is_empty()));
                    prop_assert!(!m.is_chunk());
                }
            }
            let persisted = serde_json::to_string(&applied.iter().map(StateUpdate::to_value).collect::<Vec<_>>()).unwrap();
            let mut replayed: Vec<StateUpdate> = serde_json::from_str::<Vec<Value>>(&persisted)
                .unwrap()
                .into_iter()
                .map(|v| StateUpdate::from_value(v).unwrap())
                .collect();
            let mut second = base.clone();
            second.apply_writes(&mut replayed).unwrap();
            prop_assert_eq!(&second, &first);
            // Replaying does not assign anything new.
            prop_assert_eq!(
                replayed.iter().map(StateUpdate::to_value).collect::<Vec<_>>(),
                applied.iter().map(StateUpdate::to_value).collect::<Vec<_>>()
            );
        } else {
            prop_assert_eq!(&first, &base);
        }
    }

    /// Every channel follows its reducer, write by write.
    #[test]
    fn channels_follow_their_reducers(base in state(), u in update_json()) {
        let mut s = base.clone();
        let mut up = StateUpdate::from_value(u.clone()).unwrap();
        let sandbox_before = s.sandbox.clone();
        if s.apply(&mut up).is_err() {
            prop_assert_eq!(&s, &base);
            return Ok(());
        }
        let o = u.as_object().unwrap();
        // artifacts: ordered dedupe of old ++ new; null or absent keeps.
        match o.get("artifacts") {
            Some(Value::Array(a)) => {
                let new: Vec<String> = a.iter().map(|x| x.as_str().unwrap().to_string()).collect();
                prop_assert_eq!(s.artifacts.clone(), Some(model_artifacts(base.artifacts.as_ref(), &new)));
            }
            _ => prop_assert_eq!(&s.artifacts, &base.artifacts),
        }
        // viewed_images: {} clears, otherwise merge (new values win, old keys keep position).
        match o.get("viewed_images") {
            Some(Value::Object(v)) if v.is_empty() => prop_assert_eq!(s.viewed_images.clone(), Some(Map::new())),
            Some(Value::Object(v)) => {
                let mut want = base.viewed_images.clone().unwrap_or_default();
                for (k, x) in v {
                    want.insert(k.clone(), x.clone());
                }
                prop_assert_eq!(s.viewed_images.clone(), Some(want));
            }
            _ => prop_assert_eq!(&s.viewed_images, &base.viewed_images),
        }
        // sandbox: one write in a step replaces; null keeps.
        match o.get("sandbox") {
            Some(v) if !v.is_null() => {
                prop_assert_eq!(
                    s.sandbox.as_ref().and_then(|x| x.sandbox_id.clone()),
                    v.get("sandbox_id").and_then(Value::as_str).map(str::to_string)
                );
            }
            _ => prop_assert_eq!(&s.sandbox, &sandbox_before),
        }
        // todos: null keeps, any list (even []) replaces.
        match o.get("todos") {
            Some(Value::Array(t)) => prop_assert_eq!(s.todos.as_ref().map(Vec::len), Some(t.len())),
            _ => prop_assert_eq!(&s.todos, &base.todos),
        }
        // Last-value channels: a written null clears; absent keeps.
        for (key, got, old) in [
            ("title", s.title.clone().map(Value::String), base.title.clone().map(Value::String)),
            ("summary_text", s.summary_text.clone().map(Value::String), base.summary_text.clone().map(Value::String)),
            ("thread_data", s.thread_data.as_ref().map(|t| serde_json::to_value(t).unwrap()), base.thread_data.as_ref().map(|t| serde_json::to_value(t).unwrap())),
            ("uploaded_files", s.uploaded_files.clone().map(Value::Array), base.uploaded_files.clone().map(Value::Array)),
            ("goal", s.goal.as_ref().map(|g| serde_json::to_value(g).unwrap()), base.goal.as_ref().map(|g| serde_json::to_value(g).unwrap())),
        ] {
            match o.get(key) {
                Some(Value::Null) => prop_assert_eq!(got, None, "{}", key),
                Some(v) => prop_assert_eq!(got, Some(v.clone()), "{}", key),
                None => prop_assert_eq!(got, old, "{}", key),
            }
        }
        // Unknown keys: last value, explicit null kept as null.
        for key in ["custom_key"] {
            match o.get(key) {
                Some(v) => prop_assert_eq!(s.extra.get(key), Some(v)),
                None => prop_assert_eq!(s.extra.get(key), base.extra.get(key)),
            }
        }
    }

    /// Two different sandbox ids in one step are an error and leave the state untouched;
    /// equal ids are idempotent.
    #[test]
    fn sandbox_conflict_in_one_step(base in state(), a in 1..3u8, b in 1..3u8, others in prop::collection::vec(update(), 0..2)) {
        let mut writes = others;
        for w in &mut writes {
            w.sandbox = None;
        }
        writes.push(StateUpdate::from_value(json!({"sandbox": {"sandbox_id": format!("sb-{a}")}})).unwrap());
        writes.push(StateUpdate::from_value(json!({"sandbox": {"sandbox_id": format!("sb-{b}")}, "title": "t"})).unwrap());
        let mut s = base.clone();
        let r = s.apply_writes(&mut writes);
        if a == b {
            if r.is_ok() {
                prop_assert_eq!(s.sandbox.and_then(|x| x.sandbox_id), Some(format!("sb-{a}")));
                prop_assert_eq!(s.title.as_deref(), Some("t"));
            } else {
                // Only a message write can fail here.
                prop_assert_eq!(&s, &base);
            }
        } else {
            prop_assert!(r.is_err());
            prop_assert!(r.unwrap_err().to_string().contains("conflicting sandbox ids"));
            prop_assert_eq!(&s, &base);
        }
    }

    /// `ThreadState` survives JSON, unknown keys included.
    #[test]
    fn thread_state_json_round_trip(s in state()) {
        let v = s.to_value();
        let text = serde_json::to_string(&v).unwrap();
        let back: ThreadState = serde_json::from_str(&text).unwrap();
        // An empty always-present channel reads back as never written: both show the same.
        let mut expected = s.clone();
        if expected.artifacts.as_ref().is_some_and(Vec::is_empty) {
            expected.artifacts = None;
        }
        if expected.viewed_images.as_ref().is_some_and(|m| m.is_empty()) {
            expected.viewed_images = None;
        }
        for key in ["delegations", "skill_context"] {
            if expected.extra.get(key).and_then(|v| v.as_array()).is_some_and(Vec::is_empty) {
                expected.extra.remove(key);
            }
        }
        prop_assert_eq!(&back, &expected);
        prop_assert_eq!(serde_json::to_string(&back.to_value()).unwrap(), text);
        for key in fawn_state::state::ALWAYS_PRESENT {
            prop_assert!(v.get(key).is_some(), "{} missing from {}", key, v);
        }
        // The snapshot write recreates it too.
        let mut fresh = ThreadState::default();
        fresh.apply(&mut s.to_update()).unwrap();
        prop_assert_eq!(&fresh, &s);
    }

    /// `StateUpdate` survives JSON, explicit nulls and unknown keys included.
    #[test]
    fn state_update_json_round_trip(u in update()) {
        let v = u.to_value();
        let back = StateUpdate::from_value(v.clone()).unwrap();
        prop_assert_eq!(&back, &u);
        prop_assert_eq!(back.to_value(), v);
    }

    /// Applying `a.merge(b)` equals applying `a` then `b`, except for the four cases
    /// `StateUpdate::merge` documents (checked separately below).
    #[test]
    fn merge_equals_sequential_application(base in state(), a in update(), b in update()) {
        let (mut a, mut b) = (a, b);
        for u in [&mut a, &mut b] {
            if let Some(m) = u.messages.as_mut() {
                normalize_messages(m);
            }
        }
        prop_assume!(!readds_removed_id(&base, &a, &b));
        prop_assume!(!clears_then_adds_images(&a, &b));
        let mut seq = base.clone();
        let seq_result = seq.apply(&mut a.clone()).and_then(|_| seq.apply(&mut b.clone()));
        let b_removes_all = b.messages.iter().flatten().any(Message::is_remove_all);
        prop_assume!(!(seq_result.is_err() && b_removes_all));
        prop_assume!(!(seq_result.is_err() && removes_an_id_twice(&a, &b)));
        let mut merged_update = a.clone();
        merged_update.merge(b.clone());
        let mut merged = base.clone();
        let merged_result = merged.apply(&mut merged_update);
        prop_assert_eq!(seq_result.is_ok(), merged_result.is_ok());
        if seq_result.is_ok() {
            prop_assert_eq!(&merged, &seq);
        }
    }
}

/// `a` removes an id present in the base and `b` writes a message with that id.
/// `a` and `b` both remove the same (specific) id: sequentially the second remove fails,
/// merged they remove it once (the fourth exception of `StateUpdate::merge`).
fn removes_an_id_twice(a: &StateUpdate, b: &StateUpdate) -> bool {
    let removed = |u: &StateUpdate| -> Vec<String> {
        u.messages
            .iter()
            .flatten()
            .filter(|m| m.kind == MessageKind::Remove && !m.is_remove_all())
            .filter_map(|m| m.id.clone())
            .collect()
    };
    let in_a = removed(a);
    removed(b).iter().any(|id| in_a.contains(id))
}

fn readds_removed_id(base: &ThreadState, a: &StateUpdate, b: &StateUpdate) -> bool {
    let removed: Vec<&str> = a
        .messages
        .iter()
        .flatten()
        .filter(|m| m.kind == MessageKind::Remove)
        .filter_map(|m| m.id.as_deref())
        .collect();
    if removed.is_empty() {
        return false;
    }
    let in_play = |id: &str| {
        base.messages.iter().any(|m| m.id.as_deref() == Some(id))
            || a.messages
                .iter()
                .flatten()
                .any(|m| m.kind != MessageKind::Remove && m.id.as_deref() == Some(id))
    };
    b.messages.iter().flatten().any(|m| {
        m.kind != MessageKind::Remove
            && m.id
                .as_deref()
                .is_some_and(|id| removed.contains(&id) && in_play(id))
    })
}

fn clears_then_adds_images(a: &StateUpdate, b: &StateUpdate) -> bool {
    a.viewed_images.as_ref().is_some_and(Map::is_empty)
        && b.viewed_images.as_ref().is_some_and(|v| !v.is_empty())
}

/// The exceptions are real: merging cannot express them.
#[test]
fn merge_exceptions_differ_from_sequential_application() {
    // A bad removal in `a` fails on its own, but a remove-all in `b` discards it.
    let mut s = ThreadState::default();
    let a =
        StateUpdate::from_value(json!({"messages": [{"type": "remove", "id": "nope"}]})).unwrap();
    let b =
        StateUpdate::from_value(json!({"messages": [{"type": "remove", "id": "__remove_all__"}]}))
            .unwrap();
    assert!(s.clone().apply(&mut a.clone()).is_err());
    let mut m = a.clone();
    m.merge(b);
    assert!(s.apply(&mut m).is_ok());

    let mut base = ThreadState::default();
    base.apply(&mut StateUpdate::from_value(json!({
        "messages": [{"type": "human", "content": "a", "id": "x"}, {"type": "human", "content": "b", "id": "y"}],
        "viewed_images": {"p1": {"size": 1}}
    })).unwrap()).unwrap();
    let a = StateUpdate::from_value(
        json!({"messages": [{"type": "remove", "id": "x"}], "viewed_images": {}}),
    )
    .unwrap();
    let b = StateUpdate::from_value(json!({"messages": [{"type": "ai", "content": "A", "id": "x"}], "viewed_images": {"p2": {"size": 2}}})).unwrap();
    let mut seq = base.clone();
    seq.apply(&mut a.clone()).unwrap();
    seq.apply(&mut b.clone()).unwrap();
    let mut merged_update = a.clone();
    merged_update.merge(b);
    let mut merged = base.clone();
    merged.apply(&mut merged_update).unwrap();
    // Sequential: x removed then appended after y; images cleared then p2.
    let ids = |s: &ThreadState| {
        s.messages
            .iter()
            .map(|m| m.id.clone().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&seq), ["y", "x"]);
    assert_eq!(ids(&merged), ["x", "y"]);
    assert_eq!(seq.viewed_images.as_ref().unwrap().len(), 1);
    assert_eq!(merged.viewed_images.as_ref().unwrap().len(), 2);
}

/// DeerFlow §11.1 items 1–4, as written in the reference.
#[test]
fn deerflow_reference_behaviours() {
    let mut s = ThreadState::default();
    let mut apply = |v: Value| {
        s.apply(&mut StateUpdate::from_value(v).unwrap())
            .map(|_| s.clone())
    };
    // 1. artifacts
    apply(json!({"artifacts": ["a", "b"]})).unwrap();
    let st = apply(json!({"artifacts": ["b", "c"]})).unwrap();
    assert_eq!(st.artifacts.unwrap(), ["a", "b", "c"]);
    let st = apply(json!({"artifacts": null})).unwrap();
    assert_eq!(st.artifacts.unwrap(), ["a", "b", "c"]);
    // 2. todos
    apply(json!({"todos": [{"content": "x", "status": "pending"}]})).unwrap();
    let st = apply(json!({"todos": null})).unwrap();
    assert_eq!(st.todos.unwrap().len(), 1);
    let st = apply(json!({"title": "t"})).unwrap();
    assert_eq!(st.todos.unwrap().len(), 1);
    let st = apply(json!({"todos": []})).unwrap();
    assert!(st.todos.unwrap().is_empty());
    // 3. viewed_images
    apply(json!({"viewed_images": {"/a.png": {"mime_type": "image/png", "size": 1, "actual_path": "/h/a.png"}}})).unwrap();
    let st = apply(json!({"viewed_images": {"/a.png": {"mime_type": "image/png", "size": 2, "actual_path": "/h/a.png"},
                                            "/b.png": {"mime_type": "image/png", "size": 3, "actual_path": "/h/b.png"}}})).unwrap();
    let vi = st.viewed_images.unwrap();
    assert_eq!(vi.len(), 2);
    assert_eq!(vi["/a.png"]["size"], 2);
    let st = apply(json!({"viewed_images": {}})).unwrap();
    assert!(st.viewed_images.unwrap().is_empty());
    apply(json!({"viewed_images": {"/a.png": {"size": 1}}})).unwrap();
    let st =
        apply(json!({"viewed_images": {"__deerflow_clear__": {"base64": "", "mime_type": ""}}}))
            .unwrap();
    assert!(st.viewed_images.unwrap().is_empty());
    // 4. sandbox: same id idempotent; different ids in one step fail.
    apply(json!({"sandbox": {"sandbox_id": "s1"}})).unwrap();
    let st = apply(json!({"sandbox": {"sandbox_id": "s1"}})).unwrap();
    assert_eq!(st.sandbox.unwrap().sandbox_id.as_deref(), Some("s1"));
    let mut writes = vec![
        StateUpdate::from_value(json!({"sandbox": {"sandbox_id": "s1"}})).unwrap(),
        StateUpdate::from_value(json!({"sandbox": {"sandbox_id": "s2"}})).unwrap(),
    ];
    let before = s.clone();
    assert!(s.apply_writes(&mut writes).is_err());
    assert_eq!(s, before);
}

#[test]
fn chunks_written_to_state_become_messages() {
    let mut s = ThreadState::default();
    let mut u = StateUpdate::from_value(json!({"messages": [{
        "type": "AIMessageChunk", "content": "hi", "id": "c1",
        "tool_call_chunks": [{"name": "ls", "args": "{\"path\": \"/\"}", "id": "t1", "index": 0}]
    }, {"type": "ToolMessageChunk", "content": "r", "tool_call_id": "t1", "id": "c2"}]}))
    .unwrap();
    s.apply(&mut u).unwrap();
    assert_eq!(s.messages[0].kind, MessageKind::Ai);
    assert_eq!(s.messages[0].tool_calls[0].args["path"], "/");
    assert!(s.messages[0].tool_call_chunks.is_empty());
    assert_eq!(s.messages[1].kind, MessageKind::Tool);
    assert_eq!(s.messages[1].tool_call_id.as_deref(), Some("t1"));
    // The write itself now holds the converted messages.
    assert_eq!(u.messages.unwrap()[0].kind, MessageKind::Ai);
}
