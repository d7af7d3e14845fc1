//! Long-term memory: what the agent remembers about a user across threads.
//!
//! Owns: memory storage, the debounced extraction queue fed by finished turns, and the
//! formatted `<memory>` block injected into prompts. Must never know about HTTP or the agent
//! loop; the agent hands it turns through a trait.
