//! Long-term memory: what the agent remembers about a user across threads.
//!
//! Owns: memory storage, the debounced extraction queue fed by finished turns, and the
//! formatted `<memory>` block injected into prompts. Must never know about HTTP or the agent
//! loop; the agent hands it turns through a trait.

use fawn_state::Message;

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
