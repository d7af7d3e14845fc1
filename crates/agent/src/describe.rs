//! `/assistants/{id}/graph` and `/schemas` for `lead_agent`: the drawable graph and
//! hand-written JSON Schemas matching `ThreadState` and the runtime options.

use crate::contract::GraphDescription;
use crate::graph::Topology;
use serde_json::{Value, json};

pub(crate) fn describe(topology: &Topology) -> GraphDescription {
    GraphDescription {
        graph: topology.drawable(),
        input_schema: state_schema("LeadAgentInput"),
        output_schema: state_schema("LeadAgentOutput"),
        state_schema: state_schema("ThreadState"),
        config_schema: options_schema("Configurable"),
        context_schema: options_schema("Context"),
    }
}

fn message_schema() -> Value {
    json!({
        "type": "object",
        "description": "A LangChain message (`{type|role, content, …}`).",
        "properties": {
            "type": {"type": "string"},
            "role": {"type": "string"},
            "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}]},
            "id": {"type": ["string", "null"]},
            "name": {"type": ["string", "null"]},
            "additional_kwargs": {"type": "object"},
            "response_metadata": {"type": "object"},
            "tool_calls": {"type": "array", "items": {"type": "object"}},
            "tool_call_id": {"type": "string"},
        },
        "additionalProperties": true,
    })
}

/// `ThreadState`: DeerFlow's channels.
pub(crate) fn state_schema(title: &str) -> Value {
    json!({
        "title": title,
        "type": "object",
        "properties": {
            "messages": {"title": "Messages", "type": "array", "items": message_schema()},
            "sandbox": {"title": "Sandbox", "type": ["object", "null"],
                "properties": {"sandbox_id": {"type": ["string", "null"]}}},
            "thread_data": {"title": "Thread Data", "type": ["object", "null"],
                "properties": {
                    "workspace_path": {"type": ["string", "null"]},
                    "uploads_path": {"type": ["string", "null"]},
                    "outputs_path": {"type": ["string", "null"]},
                }},
            "title": {"title": "Title", "type": ["string", "null"]},
            "artifacts": {"title": "Artifacts", "type": "array", "items": {"type": "string"}},
            "todos": {"title": "Todos", "type": ["array", "null"], "items": {
                "type": "object",
                "properties": {
                    "content": {"type": "string"},
                    "status": {"enum": ["pending", "in_progress", "completed"]},
                },
                "required": ["content", "status"],
            }},
            "uploaded_files": {"title": "Uploaded Files", "type": ["array", "null"], "items": {"type": "object"}},
            "viewed_images": {"title": "Viewed Images", "type": "object"},
            "summary_text": {"title": "Summary Text", "type": ["string", "null"]},
        },
        "additionalProperties": true,
    })
}

/// The runtime options DeerFlow reads from `configurable` / `context`.
pub(crate) fn options_schema(title: &str) -> Value {
    json!({
        "title": title,
        "type": "object",
        "properties": {
            "thread_id": {"type": "string"},
            "model_name": {"type": ["string", "null"], "description": "A configured model name; unknown names fall back to the default model."},
            "model": {"type": ["string", "null"], "description": "Alias of model_name."},
            "mode": {"type": ["string", "null"], "enum": ["flash", "thinking", "pro", "ultra", null]},
            "thinking_enabled": {"type": "boolean", "default": true},
            "reasoning_effort": {"type": ["string", "null"], "enum": ["minimal", "low", "medium", "high", null]},
            "is_plan_mode": {"type": "boolean", "default": false},
            "subagent_enabled": {"type": "boolean", "default": false},
            "max_concurrent_subagents": {"type": "integer", "minimum": 1, "maximum": 4, "default": 3},
            "max_total_subagents": {"type": "integer", "minimum": 1, "maximum": 50, "default": 6},
            "agent_name": {"type": ["string", "null"], "pattern": "^[A-Za-z0-9-]+$"},
            "is_bootstrap": {"type": "boolean", "default": false},
            "non_interactive": {"type": "boolean", "default": false},
            "disable_clarification": {"type": "boolean", "default": false},
        },
        "additionalProperties": true,
    })
}
