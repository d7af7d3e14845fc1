use crate::support::*;
use async_trait::async_trait;
use fawn_llm::scripted::ScriptedTurn;
use fawn_memory::{Fact, InjectionOptions, MemoryReader, MemoryStore};
use fawn_middleware::dynamic_context::date_reminder_text;
use fawn_middleware::{DynamicContextMiddleware, Middleware, SystemMessageCoalescingMiddleware};
use fawn_state::{Message, MessageKind, ThreadState};

use std::sync::Arc;

/// Memory read from a real store under the fixture's home.
pub struct StoreReader(pub MemoryStore);

#[async_trait]
impl MemoryReader for StoreReader {
    async fn memory_block(&self, user_id: &str, agent_name: Option<&str>) -> Option<String> {
        self.0
            .memory_block(user_id, agent_name, &InjectionOptions::default())
            .await
    }
}

pub async fn seeded_reader(fx: &Fx) -> Arc<StoreReader> {
    let store = MemoryStore::new(fx.dir.path());
    store
        .update(USER, |m| {
            m.facts.push(Fact {
                id: "fact_1".into(),
                content: "Prefers uv over pip".into(),
                category: "correction".into(),
                confidence: 0.95,
                source_error: Some("used pip".into()),
                ..Default::default()
            });
            true
        })
        .await
        .unwrap();
    Arc::new(StoreReader(store))
}

fn day(y: i32, m: u32, d: u32) -> chrono::NaiveDate {
    chrono::NaiveDate::from_ymd_opt(y, m, d).unwrap()
}

#[tokio::test]
async fn first_turn_swaps_in_date_and_memory() {
    let fx = Fx::new([]);
    let reader = seeded_reader(&fx).await;
    let mw = DynamicContextMiddleware::new(Some(reader)).with_today(day(2026, 5, 8));
    let mut st = state_of(vec![Message::human("hello").with_id("m1")]);
    let u = mw.before_agent(&st, &fx.ctx()).await.unwrap().update;
    apply(&mut st, u);
    assert_eq!(st.messages.len(), 3);
    let (date, memory, user) = (&st.messages[0], &st.messages[1], &st.messages[2]);
    assert_eq!(date.kind, MessageKind::System);
    assert_eq!(date.id.as_deref(), Some("m1"));
    assert_eq!(
        date.text(),
        "<system-reminder>\n<current_date>2026-05-08, Friday</current_date>\n</system-reminder>"
    );
    assert_eq!(date.additional_kwargs["hide_from_ui"], true);
    assert_eq!(date.additional_kwargs["dynamic_context_reminder"], true);
    assert_eq!(date.additional_kwargs["reminder_date"], "2026-05-08");
    assert_eq!(memory.id.as_deref(), Some("m1__memory"));
    assert_eq!(memory.additional_kwargs["hide_from_ui"], true);
    assert_eq!(
        memory.text(),
        "<memory>\nFacts:\n- [correction | 0.95] Prefers uv over pip (avoid: used pip)\n</memory>"
    );
    assert_eq!(user.id.as_deref(), Some("m1__user"));
    assert_eq!(user.text(), "hello");

    // Same day, next turn: nothing (memory stays frozen).
    apply(
        &mut st,
        Some(fawn_state::StateUpdate::messages(vec![
            Message::ai("hi").with_id("a1"),
            Message::human("more").with_id("m2"),
        ])),
    );
    assert!(
        mw.before_agent(&st, &fx.ctx())
            .await
            .unwrap()
            .update
            .is_none()
    );

    // Next day: only the date is inserted before the new message.
    let tomorrow =
        DynamicContextMiddleware::new(Some(seeded_reader(&fx).await)).with_today(day(2026, 5, 9));
    let u = tomorrow
        .before_agent(&st, &fx.ctx())
        .await
        .unwrap()
        .update
        .unwrap();
    let msgs = u.messages.unwrap();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[0].id.as_deref(), Some("m2"));
    assert_eq!(msgs[0].text(), date_reminder_text(day(2026, 5, 9)));
    assert_eq!(msgs[1].id.as_deref(), Some("m2__user"));
}

#[tokio::test]
async fn no_memory_when_disabled_or_empty() {
    let fx = Fx::with(|s| s.app.memory.injection_enabled = false, []);
    let reader = seeded_reader(&fx).await;
    let mw = DynamicContextMiddleware::new(Some(reader)).with_today(day(2026, 1, 1));
    let st = state_of(vec![Message::human("hello").with_id("m1")]);
    let msgs = mw
        .before_agent(&st, &fx.ctx())
        .await
        .unwrap()
        .update
        .unwrap()
        .messages
        .unwrap();
    assert_eq!(msgs.len(), 2, "date + user only");
    // No user message at all: nothing.
    assert!(
        mw.before_agent(&ThreadState::default(), &fx.ctx())
            .await
            .unwrap()
            .update
            .is_none()
    );
    // Empty memory: date only.
    let fx = Fx::new([]);
    let empty = Arc::new(StoreReader(MemoryStore::new(fx.dir.path())));
    let mw = DynamicContextMiddleware::new(Some(empty)).with_today(day(2026, 1, 1));
    let msgs = mw
        .before_agent(&st, &fx.ctx())
        .await
        .unwrap()
        .update
        .unwrap()
        .messages
        .unwrap();
    assert_eq!(msgs.len(), 2);
}

#[tokio::test]
async fn system_messages_are_coalesced_for_the_request() {
    let fx = Fx::new([ScriptedTurn::text("ok")]);
    let st = state_of(vec![
        Message::system(date_reminder_text(day(2026, 5, 8))).with_id("m1"),
        Message::human("hello").with_id("m1__user"),
    ]);
    SystemMessageCoalescingMiddleware::new()
        .wrap_model_call(fx.request(st.messages.clone()), &st, &fx.ctx(), &Invoke)
        .await
        .unwrap();
    let sent = &fx.model.requests()[0].messages;
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].kind, MessageKind::System);
    assert_eq!(
        sent[0].text(),
        format!("SYSTEM\n\n{}", date_reminder_text(day(2026, 5, 8)))
    );
    assert_eq!(sent[1].text(), "hello");
}
