//! The graphs this server runs, by graph id, and the system-assistant id mapping the SDKs
//! expect (`uuid5(6ba7b821-9dad-11d1-80b4-00c04fd430c8, graph_id)`).

use fawn_agent::GraphRunner;
use std::collections::BTreeMap;
use std::sync::Arc;
use uuid::Uuid;

/// The namespace of system-assistant ids (`uuid.NAMESPACE_DNS`... as LangGraph uses it).
pub const ASSISTANT_NAMESPACE: Uuid = Uuid::from_u128(0x6ba7b821_9dad_11d1_80b4_00c04fd430c8);

/// The graph id of DeerFlow's lead agent.
pub const LEAD_AGENT: &str = "lead_agent";

/// `uuid5(namespace, graph_id)`.
pub fn system_assistant_id(graph_id: &str) -> String {
    Uuid::new_v5(&ASSISTANT_NAMESPACE, graph_id.as_bytes())
        .hyphenated()
        .to_string()
}

/// The registry of runnable graphs: the seam where the real lead agent is plugged in.
#[derive(Clone, Default)]
pub struct Graphs {
    by_id: BTreeMap<String, Arc<dyn GraphRunner>>,
}

impl std::fmt::Debug for Graphs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.by_id.keys()).finish()
    }
}

impl Graphs {
    pub fn new() -> Graphs {
        Graphs::default()
    }

    /// Registers (or replaces) a graph under its own id.
    pub fn insert(&mut self, graph: Arc<dyn GraphRunner>) {
        self.by_id.insert(graph.graph_id().to_string(), graph);
    }

    pub fn with(mut self, graph: Arc<dyn GraphRunner>) -> Graphs {
        self.insert(graph);
        self
    }

    pub fn get(&self, graph_id: &str) -> Option<&Arc<dyn GraphRunner>> {
        self.by_id.get(graph_id)
    }

    pub fn contains(&self, graph_id: &str) -> bool {
        self.by_id.contains_key(graph_id)
    }

    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.by_id.keys().map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// `['a', 'b']` for error messages.
    pub fn list_text(&self) -> String {
        let ids: Vec<String> = self.ids().map(|i| format!("'{i}'")).collect();
        format!("[{}]", ids.join(", "))
    }

    /// A graph id used in place of an assistant id → its system assistant id.
    pub fn assistant_for_graph(&self, graph_id: &str) -> Option<String> {
        self.contains(graph_id)
            .then(|| system_assistant_id(graph_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid5_matches_the_reference() {
        assert_eq!(
            system_assistant_id("agent"),
            "fe096781-5601-53d2-b2f6-0d3403f7e9ca"
        );
    }
}
