//! Turning a finished conversation into memory changes: the memory model is shown the
//! current memory and the conversation and answers with a JSON update (summaries to rewrite,
//! facts to add and to remove); a deterministic gate then decides what is stored
//! (confidence threshold, known categories, de-duplication, `max_facts` with
//! lowest-confidence eviction).

use crate::conversation::transcript;
use crate::model::{CATEGORIES, Fact, MemoryData, SECTIONS};
use crate::store::{MemoryStore, now_iso};
use crate::{MemoryError, PendingUpdate};
use async_trait::async_trait;
use fawn_llm::{ChatModel, ChatRequest};
use fawn_state::Message;
use serde_json::{Map, Value, json};
use std::collections::HashSet;
use std::sync::Arc;

/// Longest fact kept (characters).
pub const MAX_FACT_CHARS: usize = 1000;
/// Longest summary kept (characters).
pub const MAX_SUMMARY_CHARS: usize = 3000;

/// Applies one queued conversation to memory.
#[async_trait]
pub trait MemoryUpdater: Send + Sync {
    async fn update(&self, item: &PendingUpdate) -> Result<UpdateReport, MemoryError>;
}

/// What an update changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpdateReport {
    pub facts_added: usize,
    pub facts_removed: usize,
    pub summaries_updated: usize,
}

/// The deterministic gate's knobs.
#[derive(Clone, Debug, PartialEq)]
pub struct GateConfig {
    pub max_facts: usize,
    pub confidence_threshold: f64,
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            max_facts: 100,
            confidence_threshold: 0.7,
        }
    }
}

const UPDATE_PROMPT: &str = r#"You maintain the long-term memory an AI assistant keeps about one user. Read the current memory and the latest conversation, then decide what to change.

Rules:
- Remember only durable information about the user: preferences, knowledge, context, recurring behaviour, goals, and corrections of the assistant's mistakes. Ignore one-off task details, small talk and anything the assistant said about itself.
- Never store secrets (passwords, API keys, tokens) or sensitive data the user did not ask you to remember.
- A "correction" fact records something the user corrected; put what the assistant did wrong in "sourceError".
- Confidence is between 0 and 1: 0.9 or more for explicit statements, around 0.7 for strong inferences, lower for guesses.
- Do not repeat facts that are already stored. Remove facts the conversation shows to be wrong or outdated (by id).
- Update a summary only when the conversation adds something to it; rewrite it as a whole, briefly.

Current memory (JSON):
{memory}

Conversation:
{conversation}

Answer with one JSON object and nothing else, in this shape:
{"user": {"workContext": {"summary": "...", "shouldUpdate": false}, "personalContext": {"summary": "...", "shouldUpdate": false}, "topOfMind": {"summary": "...", "shouldUpdate": false}},
 "history": {"recentMonths": {"summary": "...", "shouldUpdate": false}, "earlierContext": {"summary": "...", "shouldUpdate": false}, "longTermBackground": {"summary": "...", "shouldUpdate": false}},
 "newFacts": [{"content": "...", "category": "preference|knowledge|context|behavior|goal|correction", "confidence": 0.9, "sourceError": "only for corrections"}],
 "factsToRemove": ["fact id", "..."]}"#;

/// The memory as the model sees it: summaries and this agent's facts with their ids.
fn memory_for_prompt(memory: &MemoryData, agent: Option<&str>) -> Value {
    let section = |s: &crate::model::Section| json!(s.summary);
    json!({
        "user": {
            "workContext": section(&memory.user.work_context),
            "personalContext": section(&memory.user.personal_context),
            "topOfMind": section(&memory.user.top_of_mind),
        },
        "history": {
            "recentMonths": section(&memory.history.recent_months),
            "earlierContext": section(&memory.history.earlier_context),
            "longTermBackground": section(&memory.history.long_term_background),
        },
        "facts": memory.facts_for(agent).map(|f| json!({
            "id": f.id, "content": f.content, "category": f.category, "confidence": f.confidence,
        })).collect::<Vec<_>>(),
    })
}

/// The prompt sent to the memory model.
pub fn update_prompt(memory: &MemoryData, agent: Option<&str>, conversation: &[Message]) -> String {
    let mem = serde_json::to_string_pretty(&memory_for_prompt(memory, agent)).unwrap_or_default();
    UPDATE_PROMPT
        .replace("{memory}", &mem)
        .replace("{conversation}", &transcript(conversation))
}

/// The first JSON object in a model answer (code fences and prose around it ignored).
pub fn parse_update(answer: &str) -> Result<Map<String, Value>, MemoryError> {
    let start = answer.find('{');
    let end = answer.rfind('}');
    let (Some(s), Some(e)) = (start, end) else {
        return Err(MemoryError::BadResponse(
            "the memory model did not answer with a JSON object".into(),
        ));
    };
    if e < s {
        return Err(MemoryError::BadResponse(
            "unbalanced JSON in the answer".into(),
        ));
    }
    match serde_json::from_str::<Value>(&answer[s..=e]) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(MemoryError::BadResponse(
            "the answer is not a JSON object".into(),
        )),
        Err(err) => Err(MemoryError::BadResponse(format!("invalid JSON: {err}"))),
    }
}

fn normalized(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => s[..i].to_string(),
        None => s.to_string(),
    }
}

/// Applies a parsed update to `memory` through the gate. Returns what changed.
pub fn apply_update(
    memory: &mut MemoryData,
    update: &Map<String, Value>,
    gate: &GateConfig,
    thread_id: &str,
    agent: Option<&str>,
) -> UpdateReport {
    let mut report = UpdateReport::default();
    let now = now_iso();

    // Summaries.
    for (group, key) in SECTIONS {
        let Some(entry) = update.get(*group).and_then(|g| g.get(*key)) else {
            continue;
        };
        let should = entry
            .get("shouldUpdate")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let summary = entry.get("summary").and_then(Value::as_str).map(str::trim);
        if let (true, Some(s)) = (should, summary)
            && !s.is_empty()
            && let Some(section) = memory.section_mut(group, key)
        {
            let s = cut(s, MAX_SUMMARY_CHARS);
            if section.summary != s {
                section.summary = s;
                section.updated_at = now.clone();
                report.summaries_updated += 1;
            }
        }
    }

    // Removals (only within this agent's bucket).
    let remove: HashSet<String> = match update.get("factsToRemove") {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|i| match i {
                Value::String(s) => Some(s.clone()),
                Value::Object(o) => o.get("id").and_then(Value::as_str).map(str::to_string),
                _ => None,
            })
            .collect(),
        _ => HashSet::new(),
    };
    let before = memory.facts.len();
    memory
        .facts
        .retain(|f| !(f.agent() == agent && remove.contains(&f.id)));
    report.facts_removed = before - memory.facts.len();

    // Additions.
    let mut known: HashSet<String> = memory
        .facts_for(agent)
        .map(|f| normalized(&f.content))
        .collect();
    if let Some(Value::Array(items)) = update.get("newFacts") {
        for item in items {
            let Some(o) = item.as_object() else { continue };
            let content = o
                .get("content")
                .and_then(Value::as_str)
                .map(str::trim)
                .unwrap_or_default();
            if content.is_empty() || content.chars().count() > MAX_FACT_CHARS {
                continue;
            }
            let confidence = o.get("confidence").and_then(Value::as_f64).unwrap_or(0.0);
            if !confidence.is_finite() || confidence < gate.confidence_threshold {
                continue;
            }
            // DeerMem's gate: only durable, descriptive facts about the user.
            let rejected_by = |k: &str, ok: &[&str]| {
                o.get(k)
                    .and_then(Value::as_str)
                    .is_some_and(|v| !ok.contains(&v))
            };
            if rejected_by("scope", &["user"])
                || rejected_by("durability", &["durable"])
                || rejected_by("authority", &["descriptive"])
            {
                continue;
            }
            let key = normalized(content);
            if !known.insert(key) {
                continue;
            }
            let category = o
                .get("category")
                .and_then(Value::as_str)
                .map(|c| c.trim().to_lowercase())
                .filter(|c| CATEGORIES.contains(&c.as_str()))
                .unwrap_or_else(|| "context".to_string());
            let source_error = o
                .get("sourceError")
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| cut(s, MAX_FACT_CHARS));
            memory.facts.push(Fact {
                id: format!("fact_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
                content: content.to_string(),
                category,
                confidence: confidence.min(1.0),
                created_at: now.clone(),
                source: thread_id.to_string(),
                source_error,
                updated_at: None,
                scope: agent.map(|a| json!({ "agent": a })),
                extra: Map::new(),
            });
            report.facts_added += 1;
        }
    }

    // Capacity: evict the lowest-confidence (then oldest) facts of this bucket.
    let mut bucket: Vec<usize> = (0..memory.facts.len())
        .filter(|i| memory.facts[*i].agent() == agent)
        .collect();
    if bucket.len() > gate.max_facts {
        bucket.sort_by(|a, b| {
            let (fa, fb) = (&memory.facts[*a], &memory.facts[*b]);
            fa.confidence
                .partial_cmp(&fb.confidence)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| fa.created_at.cmp(&fb.created_at))
        });
        let evict: HashSet<usize> = bucket[..bucket.len() - gate.max_facts]
            .iter()
            .copied()
            .collect();
        let mut i = 0;
        memory.facts.retain(|_| {
            let keep = !evict.contains(&i);
            i += 1;
            keep
        });
        report.facts_removed += evict.len();
    }
    report
}

/// The memory updater backed by a chat model.
pub struct LlmMemoryUpdater {
    store: Arc<MemoryStore>,
    model: Arc<dyn ChatModel>,
    gate: GateConfig,
}

impl std::fmt::Debug for LlmMemoryUpdater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmMemoryUpdater")
            .field("model", &self.model.info().name)
            .field("gate", &self.gate)
            .finish()
    }
}

impl LlmMemoryUpdater {
    pub fn new(store: Arc<MemoryStore>, model: Arc<dyn ChatModel>, gate: GateConfig) -> Self {
        LlmMemoryUpdater { store, model, gate }
    }
}

#[async_trait]
impl MemoryUpdater for LlmMemoryUpdater {
    async fn update(&self, item: &PendingUpdate) -> Result<UpdateReport, MemoryError> {
        if !item
            .messages
            .iter()
            .any(|m| m.kind == fawn_state::MessageKind::Human)
        {
            return Ok(UpdateReport::default());
        }
        let agent = item.agent_name.as_deref();
        let current = self.store.load(&item.user_id).await?;
        let request = ChatRequest {
            messages: vec![Message::human(update_prompt(
                &current,
                agent,
                &item.messages,
            ))]
            .into(),
            temperature: Some(0.0),
            purpose: "memory",
            ..Default::default()
        };
        let answer = self
            .model
            .invoke(request)
            .await
            .map_err(|e| MemoryError::Llm(e.to_string()))?;
        let update = parse_update(&answer.text())?;
        let mut report = UpdateReport::default();
        self.store
            .update(&item.user_id, |memory| {
                report = apply_update(memory, &update, &self.gate, &item.thread_id, agent);
                report != UpdateReport::default()
            })
            .await?;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate() {
        let mut m = MemoryData::default();
        m.facts.push(Fact {
            id: "fact_old".into(),
            content: "Likes  Rust".into(),
            category: "preference".into(),
            confidence: 0.8,
            ..Default::default()
        });
        let update = parse_update(
            r#"```json
            {"newFacts": [
                {"content": "likes rust", "category": "preference", "confidence": 0.95},
                {"content": "Uses uv", "category": "correction", "confidence": 0.9, "sourceError": "used pip"},
                {"content": "Maybe tired", "category": "context", "confidence": 0.4},
                {"content": "Wants a cake", "category": "goal", "confidence": 0.9, "durability": "ephemeral"},
                {"content": "Odd", "category": "weird", "confidence": 0.75}
             ],
             "factsToRemove": [{"id": "nope"}],
             "user": {"workContext": {"summary": "Builds Fawn", "shouldUpdate": true},
                      "topOfMind": {"summary": "ignored", "shouldUpdate": false}}}
            ```"#,
        )
        .unwrap();
        let r = apply_update(&mut m, &update, &GateConfig::default(), "t1", None);
        assert_eq!(
            r,
            UpdateReport {
                facts_added: 2,
                facts_removed: 0,
                summaries_updated: 1
            }
        );
        assert_eq!(m.facts[1].source_error.as_deref(), Some("used pip"));
        assert_eq!(m.facts[1].source, "t1");
        assert_eq!(m.facts[2].category, "context");
        assert_eq!(m.user.work_context.summary, "Builds Fawn");
        assert_eq!(m.user.top_of_mind.summary, "");
    }

    #[test]
    fn eviction_and_buckets() {
        let mut m = MemoryData::default();
        let update = json!({"newFacts": [
            {"content": "a", "category": "knowledge", "confidence": 0.9},
            {"content": "b", "category": "knowledge", "confidence": 0.8},
            {"content": "c", "category": "knowledge", "confidence": 0.95}
        ]});
        let Value::Object(u) = update else {
            unreachable!()
        };
        let gate = GateConfig {
            max_facts: 2,
            confidence_threshold: 0.7,
        };
        apply_update(&mut m, &u, &gate, "t", Some("coder"));
        let kept: Vec<_> = m.facts.iter().map(|f| f.content.as_str()).collect();
        assert_eq!(kept, ["a", "c"]);
        assert!(m.facts.iter().all(|f| f.agent() == Some("coder")));
        // The default bucket is separate: the same contents are new there.
        let r = apply_update(&mut m, &u, &gate, "t", None);
        assert_eq!(r.facts_added, 3);
        assert_eq!(m.facts_for(None).count(), 2);
        assert_eq!(m.facts_for(Some("coder")).count(), 2);
    }
}
