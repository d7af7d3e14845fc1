//! Attribute names: OpenTelemetry's GenAI semantic conventions (`gen_ai.*`), OpenInference
//! (`openinference.span.kind`, `llm.*`, `input.value`, … — what Arize Phoenix renders), and
//! the few keys LangSmith and Langfuse read beyond those. Spans set both families, so every
//! viewer renders them without configuration.

/// Longest attribute value kept (longer ones are cut at a character boundary and marked).
pub const MAX_VALUE_BYTES: usize = 32 * 1024;

// OpenTelemetry GenAI semantic conventions.
pub const GEN_AI_OPERATION: &str = "gen_ai.operation.name";
pub const GEN_AI_SYSTEM: &str = "gen_ai.system";
pub const GEN_AI_PROVIDER: &str = "gen_ai.provider.name";
pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
pub const GEN_AI_RESPONSE_MODEL: &str = "gen_ai.response.model";
pub const GEN_AI_REQUEST_TEMPERATURE: &str = "gen_ai.request.temperature";
pub const GEN_AI_REQUEST_MAX_TOKENS: &str = "gen_ai.request.max_tokens";
pub const GEN_AI_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
pub const GEN_AI_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
pub const GEN_AI_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
pub const GEN_AI_TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
pub const GEN_AI_AGENT_NAME: &str = "gen_ai.agent.name";
pub const GEN_AI_CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// Message role/content pairs as LangSmith reads them (`gen_ai.prompt.{n}.role`, …).
pub const GEN_AI_PROMPT: &str = "gen_ai.prompt";
pub const GEN_AI_COMPLETION: &str = "gen_ai.completion";

// OpenInference.
pub const OI_SPAN_KIND: &str = "openinference.span.kind";
pub const LLM_MODEL_NAME: &str = "llm.model_name";
pub const LLM_PROVIDER: &str = "llm.provider";
pub const LLM_SYSTEM: &str = "llm.system";
pub const LLM_PROMPT_TOKENS: &str = "llm.token_count.prompt";
pub const LLM_COMPLETION_TOKENS: &str = "llm.token_count.completion";
pub const LLM_TOTAL_TOKENS: &str = "llm.token_count.total";
pub const LLM_INPUT_MESSAGES: &str = "llm.input_messages";
pub const LLM_OUTPUT_MESSAGES: &str = "llm.output_messages";
pub const TOOL_NAME: &str = "tool.name";
pub const INPUT_VALUE: &str = "input.value";
pub const INPUT_MIME: &str = "input.mime_type";
pub const OUTPUT_VALUE: &str = "output.value";
pub const OUTPUT_MIME: &str = "output.mime_type";
pub const SESSION_ID: &str = "session.id";
pub const USER_ID: &str = "user.id";

// LangSmith and Langfuse.
pub const LANGSMITH_SPAN_KIND: &str = "langsmith.span.kind";
pub const LANGFUSE_OBSERVATION_TYPE: &str = "langfuse.observation.type";
pub const LANGFUSE_TRACE_NAME: &str = "langfuse.trace.name";

// Generic.
pub const ERROR_TYPE: &str = "error.type";
pub const HTTP_METHOD: &str = "http.request.method";
pub const HTTP_ROUTE: &str = "http.route";
pub const HTTP_STATUS: &str = "http.response.status_code";
pub const URL_PATH: &str = "url.path";

// Fawn's own.
pub const THREAD_ID: &str = "fawn.thread_id";
pub const RUN_ID: &str = "fawn.run_id";
pub const RUN_ATTEMPT: &str = "fawn.run.attempt";
pub const RUN_STATUS: &str = "fawn.run.status";
pub const ASSISTANT_ID: &str = "fawn.assistant_id";
pub const GRAPH_ID: &str = "fawn.graph_id";
pub const REQUEST_ID: &str = "fawn.request_id";
pub const MODEL_PURPOSE: &str = "fawn.model.purpose";
pub const TOKENS_ESTIMATED: &str = "fawn.usage.estimated";
pub const TOOL_ARGS_BYTES: &str = "fawn.tool.arguments_bytes";
pub const TOOL_OUTCOME: &str = "fawn.tool.outcome";
/// Set on a span whose parent is a request span: destinations that do not receive
/// request spans make it a root.
pub const PARENT_LAYER: &str = "fawn.parent.layer";

/// What a span is, in each vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanKind {
    Agent,
    Chain,
    Llm,
    Tool,
}

impl SpanKind {
    /// `openinference.span.kind`.
    pub fn openinference(self) -> &'static str {
        match self {
            SpanKind::Agent => "AGENT",
            SpanKind::Chain => "CHAIN",
            SpanKind::Llm => "LLM",
            SpanKind::Tool => "TOOL",
        }
    }

    /// `langsmith.span.kind` (LangSmith's run type).
    pub fn langsmith(self) -> &'static str {
        match self {
            SpanKind::Agent | SpanKind::Chain => "chain",
            SpanKind::Llm => "llm",
            SpanKind::Tool => "tool",
        }
    }

    /// `langfuse.observation.type`.
    pub fn langfuse(self) -> &'static str {
        match self {
            SpanKind::Agent => "agent",
            SpanKind::Chain => "chain",
            SpanKind::Llm => "generation",
            SpanKind::Tool => "tool",
        }
    }

    /// The three kind attributes.
    pub fn attrs(self, out: &mut Vec<opentelemetry::KeyValue>) {
        use opentelemetry::KeyValue;
        out.push(KeyValue::new(OI_SPAN_KIND, self.openinference()));
        out.push(KeyValue::new(LANGSMITH_SPAN_KIND, self.langsmith()));
        out.push(KeyValue::new(LANGFUSE_OBSERVATION_TYPE, self.langfuse()));
    }
}

/// `s` cut to [`MAX_VALUE_BYTES`] at a character boundary.
pub fn clip(mut s: String) -> String {
    if s.len() <= MAX_VALUE_BYTES {
        return s;
    }
    let mut end = MAX_VALUE_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s.push_str("…[truncated]");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_cut_on_a_char_boundary() {
        let s = "é".repeat(MAX_VALUE_BYTES);
        let c = clip(s);
        assert!(c.len() <= MAX_VALUE_BYTES + "…[truncated]".len());
        assert!(c.ends_with("…[truncated]"));
        assert_eq!(clip("short".into()), "short");
    }
}
