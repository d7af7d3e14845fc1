use fawn_config::Settings;
use fawn_llm::scripted::{ScriptedModel, ScriptedTurn};
use fawn_llm::{ChatModel, LlmError, ModelRegistry};
use fawn_memory::{
    Fact, GateConfig, LlmMemoryUpdater, Memory, MemoryError, MemorySink, MemoryStore,
    MemoryUpdater, PendingUpdate, UpdateReport,
};
use fawn_state::Message;
use std::sync::Arc;
use std::time::Duration;

const ANSWER: &str = r#"Here is the update:
```json
{"user": {"workContext": {"summary": "Ports DeerFlow to Rust", "shouldUpdate": true}},
 "newFacts": [
   {"content": "Prefers uv over pip", "category": "correction", "confidence": 0.95, "sourceError": "used pip"},
   {"content": "Might like tea", "category": "preference", "confidence": 0.3}
 ],
 "factsToRemove": ["fact_old"]}
```"#;

fn pending(user: &str, agent: Option<&str>) -> PendingUpdate {
    PendingUpdate {
        thread_id: "thread-1".into(),
        user_id: user.into(),
        agent_name: agent.map(str::to_string),
        messages: vec![
            Message::human("Use uv, not pip, please."),
            Message::ai("Understood, switching to uv."),
        ],
    }
}

#[tokio::test]
async fn llm_update_goes_through_the_gate_into_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(MemoryStore::new(dir.path()));
    store
        .update("u1", |m| {
            m.facts.push(Fact {
                id: "fact_old".into(),
                content: "Uses pip".into(),
                category: "knowledge".into(),
                confidence: 0.8,
                ..Default::default()
            });
            true
        })
        .await
        .unwrap();
    let model = Arc::new(ScriptedModel::new([ScriptedTurn::text(ANSWER)]));
    let updater = LlmMemoryUpdater::new(store.clone(), model.clone(), GateConfig::default());
    let report = updater.update(&pending("u1", None)).await.unwrap();
    assert_eq!(
        report,
        UpdateReport {
            facts_added: 1,
            facts_removed: 1,
            summaries_updated: 1
        }
    );
    // What the memory model was asked.
    let reqs = model.requests();
    assert_eq!(reqs.len(), 1);
    let prompt = reqs[0].messages[0].text();
    assert!(prompt.contains("User: Use uv, not pip, please."));
    assert!(prompt.contains("Assistant: Understood, switching to uv."));
    assert!(
        prompt.contains("\"id\": \"fact_old\""),
        "existing facts are shown with ids"
    );
    // What was stored.
    let m = store.load("u1").await.unwrap();
    assert_eq!(m.user.work_context.summary, "Ports DeerFlow to Rust");
    assert_eq!(m.facts.len(), 1);
    let f = &m.facts[0];
    assert_eq!(f.content, "Prefers uv over pip");
    assert_eq!(f.category, "correction");
    assert_eq!(f.source, "thread-1");
    assert_eq!(f.source_error.as_deref(), Some("used pip"));
    assert!(f.id.starts_with("fact_"));
    assert_eq!(m.revision, 2);
}

#[tokio::test]
async fn model_failure_and_garbage_leave_memory_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(MemoryStore::new(dir.path()));
    let model = Arc::new(ScriptedModel::new([
        ScriptedTurn::Error(LlmError::Server {
            status: 500,
            retry_after: None,
            message: "down".into(),
        }),
        ScriptedTurn::text("I cannot do that."),
    ]));
    let updater = LlmMemoryUpdater::new(store.clone(), model, GateConfig::default());
    assert!(matches!(
        updater.update(&pending("u", None)).await,
        Err(MemoryError::Llm(_))
    ));
    assert!(matches!(
        updater.update(&pending("u", None)).await,
        Err(MemoryError::BadResponse(_))
    ));
    assert!(!store.path_for("u").unwrap().exists());
}

#[tokio::test]
async fn memory_start_wires_queue_updater_and_injection() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings::with_home(dir.path());
    settings.app.memory.debounce_seconds = 0;
    let model: Arc<dyn ChatModel> = Arc::new(ScriptedModel::new([ScriptedTurn::text(ANSWER)]));
    let memory = Memory::start(&settings, &ModelRegistry::from_models(vec![model])).unwrap();
    memory.queue.enqueue(
        "thread-1",
        "u2",
        Some("coder"),
        &[Message::human("Use uv."), Message::ai("OK.")],
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while memory.queue.stats().processed == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(memory.queue.stats().processed, 1);
    // The fact belongs to the custom agent's bucket.
    let for_coder = memory.context("u2", Some("coder")).await.unwrap();
    assert!(for_coder.contains("- [correction | 0.95] Prefers uv over pip (avoid: used pip)"));
    assert!(for_coder.contains("- Work: Ports DeerFlow to Rust"));
    let for_default = memory.context("u2", None).await.unwrap();
    assert!(!for_default.contains("Prefers uv"), "{for_default}");
    assert!(memory.context("nobody", None).await.is_none());
    assert_eq!(memory.queue.shutdown().await, 0);
}

#[test]
fn no_model_is_an_error() {
    let settings = Settings::with_home("/tmp/unused");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        assert!(matches!(
            Memory::start(&settings, &ModelRegistry::default()),
            Err(MemoryError::NoModel)
        ));
    });
}
