//! Long-term memory: what the agent remembers about a user across threads.
//!
//! Owns: memory storage (DeerMem's `memory.json` shape, one file per user under
//! `{home}/users/{user_id}/`), the debounced extraction queue fed by finished turns
//! ([`MemoryQueue`], the agent's [`MemorySink`]), the LLM updater with its deterministic gate,
//! and the formatted `<memory>` block injected into prompts
//! ([`format_memory_for_injection`]). Must never know about HTTP or the agent loop; the agent
//! hands it turns through a trait.
//!
//! Left out of DeerMem: one Markdown file per fact (schema v2) and its FTS5 retrieval index,
//! journaled writes across processes, staleness review and consolidation, the correction /
//! reinforcement pattern files, the `tool` memory mode and the mem0/openviking/honcho
//! backends. Facts are bucketed per custom agent (`scope.agent`); summaries are per user.

pub mod conversation;
pub mod format;
pub mod model;
pub mod queue;
pub mod store;
pub mod updater;

pub use format::{InjectionOptions, format_memory_for_injection, memory_block};
pub use model::{Fact, History, MemoryData, Section, UserContext};
pub use queue::{MemoryQueue, QueueConfig, QueueStats};
pub use store::MemoryStore;
pub use updater::{GateConfig, LlmMemoryUpdater, MemoryUpdater, UpdateReport};

use fawn_state::Message;
use std::sync::Arc;

/// Long-term memory as the agent sees it: a queue that takes finished turns.
pub trait MemorySink: Send + Sync {
    /// Hands a finished conversation to the (debounced) memory queue. Never blocks.
    fn enqueue(
        &self,
        thread_id: &str,
        user_id: &str,
        agent_name: Option<&str>,
        messages: &[Message],
    );
}

/// Reads the memory block a prompt should carry (what `DynamicContextMiddleware` injects).
#[async_trait::async_trait]
pub trait MemoryReader: Send + Sync {
    /// `<memory>\n…\n</memory>` for a user (and custom agent), or `None` when there is
    /// nothing to inject. Never fails a run: read errors are logged and give `None`.
    async fn memory_block(&self, user_id: &str, agent_name: Option<&str>) -> Option<String>;
}

/// One conversation waiting to be learned from (already filtered to the user's messages
/// and the final answers).
#[derive(Clone, Debug, PartialEq)]
pub struct PendingUpdate {
    pub thread_id: String,
    pub user_id: String,
    pub agent_name: Option<String>,
    pub messages: Vec<Message>,
}

/// Why a memory operation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MemoryError {
    #[error("invalid user id '{0}'")]
    InvalidUser(String),
    #[error("memory storage error: {0}")]
    Io(String),
    #[error("memory file cannot be read: {0}")]
    Corrupt(String),
    #[error("memory model failed: {0}")]
    Llm(String),
    #[error("memory model answer unusable: {0}")]
    BadResponse(String),
    #[error("no model available for memory updates")]
    NoModel,
}

/// Everything a process needs for memory, built from the settings: the store, the queue
/// (with the LLM updater on `memory.model_name` or the default model) and the injection
/// options.
#[derive(Debug)]
pub struct Memory {
    pub store: Arc<MemoryStore>,
    pub queue: Arc<MemoryQueue>,
    pub injection: InjectionOptions,
}

impl Memory {
    /// Starts memory for a process (inside a tokio runtime).
    pub fn start(
        settings: &fawn_config::Settings,
        models: &fawn_llm::ModelRegistry,
    ) -> Result<Memory, MemoryError> {
        let cfg = &settings.app.memory;
        let model = cfg
            .model_name
            .as_deref()
            .and_then(|n| models.get(n))
            .or_else(|| models.default_model())
            .ok_or(MemoryError::NoModel)?;
        let store = Arc::new(MemoryStore::from_settings(settings));
        let updater = LlmMemoryUpdater::new(
            store.clone(),
            model,
            GateConfig {
                max_facts: cfg.max_facts,
                confidence_threshold: cfg.fact_confidence_threshold,
            },
        );
        let queue = Arc::new(MemoryQueue::start(
            QueueConfig::from_config(cfg),
            Arc::new(updater),
        ));
        Ok(Memory {
            store,
            queue,
            injection: InjectionOptions::from_config(cfg),
        })
    }

    /// The `<memory>` block for a user (and custom agent), or `None` when memory is empty
    /// or unreadable (a read failure is logged, never fatal to a run).
    pub async fn context(&self, user_id: &str, agent_name: Option<&str>) -> Option<String> {
        self.store
            .memory_block(user_id, agent_name, &self.injection)
            .await
    }
}

#[async_trait::async_trait]
impl MemoryReader for Memory {
    async fn memory_block(&self, user_id: &str, agent_name: Option<&str>) -> Option<String> {
        self.context(user_id, agent_name).await
    }
}
