//! The memory document, in DeerMem's JSON shape (`memory.json`, the API's `MemoryResponse`).
//! Unknown fields are kept so documents written by DeerFlow round-trip.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Fact categories DeerMem knows.
pub const CATEGORIES: &[&str] = &[
    "preference",
    "knowledge",
    "context",
    "behavior",
    "goal",
    "correction",
];

/// One summary slot (`{summary, updatedAt}`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Section {
    pub summary: String,
    pub updated_at: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `user`: what the user is working on, who they are, what is on their mind now.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UserContext {
    pub work_context: Section,
    pub personal_context: Section,
    pub top_of_mind: Section,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `history`: recent months, earlier context, long-term background.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct History {
    pub recent_months: Section,
    pub earlier_context: Section,
    pub long_term_background: Section,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One remembered fact.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Fact {
    pub id: String,
    pub content: String,
    pub category: String,
    pub confidence: f64,
    pub created_at: String,
    /// The thread the fact was learned in.
    pub source: String,
    /// For corrections: what the agent did wrong.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    /// `{"agent": name}` for facts learned by a custom agent (per-agent bucket).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Fact {
    /// The custom agent this fact belongs to (`None`: the default agent).
    pub fn agent(&self) -> Option<&str> {
        self.scope.as_ref()?.get("agent")?.as_str()
    }
}

/// The whole memory of one user.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MemoryData {
    pub version: String,
    pub revision: u64,
    pub last_updated: String,
    pub user: UserContext,
    pub history: History,
    pub facts: Vec<Fact>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Default for MemoryData {
    fn default() -> Self {
        MemoryData {
            version: "1.0".to_string(),
            revision: 0,
            last_updated: String::new(),
            user: UserContext::default(),
            history: History::default(),
            facts: Vec::new(),
            extra: Map::new(),
        }
    }
}

impl MemoryData {
    /// The facts visible to `agent` (`None`: the default agent's bucket).
    pub fn facts_for<'a>(&'a self, agent: Option<&'a str>) -> impl Iterator<Item = &'a Fact> + 'a {
        self.facts.iter().filter(move |f| f.agent() == agent)
    }

    /// The six summary slots, by their JSON names.
    pub fn section_mut(&mut self, group: &str, key: &str) -> Option<&mut Section> {
        match (group, key) {
            ("user", "workContext") => Some(&mut self.user.work_context),
            ("user", "personalContext") => Some(&mut self.user.personal_context),
            ("user", "topOfMind") => Some(&mut self.user.top_of_mind),
            ("history", "recentMonths") => Some(&mut self.history.recent_months),
            ("history", "earlierContext") => Some(&mut self.history.earlier_context),
            ("history", "longTermBackground") => Some(&mut self.history.long_term_background),
            _ => None,
        }
    }
}

/// The summary slot names per group, in display order.
pub const SECTIONS: &[(&str, &str)] = &[
    ("user", "workContext"),
    ("user", "personalContext"),
    ("user", "topOfMind"),
    ("history", "recentMonths"),
    ("history", "earlierContext"),
    ("history", "longTermBackground"),
];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn deermem_shape_round_trips() {
        let v = json!({
            "version": "1.0", "revision": 7, "lastUpdated": "2026-01-01T00:00:00Z",
            "user": {"workContext": {"summary": "Rust", "updatedAt": "x"},
                     "personalContext": {"summary": "", "updatedAt": ""},
                     "topOfMind": {"summary": "", "updatedAt": ""}},
            "history": {"recentMonths": {"summary": "", "updatedAt": ""},
                        "earlierContext": {"summary": "", "updatedAt": ""},
                        "longTermBackground": {"summary": "", "updatedAt": ""}},
            "facts": [{"id": "fact_1", "content": "Prefers uv over pip", "category": "correction",
                       "confidence": 0.95, "createdAt": "t", "source": "th", "sourceError": "used pip",
                       "topics": ["python"]}]
        });
        let m: MemoryData = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(m.facts[0].source_error.as_deref(), Some("used pip"));
        assert_eq!(m.user.work_context.summary, "Rust");
        assert_eq!(serde_json::to_value(&m).unwrap(), v);
    }
}
