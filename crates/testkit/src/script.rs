//! What the mock answers: scripted [`Turn`]s (with optional [`Fault`]s) and the stateless
//! [`Behavior`]s used when the script is empty.

use serde_json::{Map, Value};
use std::time::Duration;

/// One tool call the mock will make.
#[derive(Clone, Debug, PartialEq)]
pub struct MockToolCall {
    /// Call id; generated (`call_…` / `toolu_…`) when `None`.
    pub id: Option<String>,
    pub name: String,
    /// The raw `arguments` text sent on the wire (normally a JSON object).
    pub arguments: String,
}

impl MockToolCall {
    /// A call with JSON arguments.
    pub fn new(name: impl Into<String>, args: Value) -> Self {
        MockToolCall {
            id: None,
            name: name.into(),
            arguments: args.to_string(),
        }
    }

    /// A call whose argument text is sent verbatim (may be invalid JSON on purpose).
    pub fn raw(name: impl Into<String>, arguments: impl Into<String>) -> Self {
        MockToolCall {
            id: None,
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }
}

/// How streamed text is cut into chunks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Chunking {
    /// One chunk per word (each keeps its trailing whitespace).
    Words,
    /// Chunks of at most this many characters.
    Chars(usize),
    /// The whole text in one chunk.
    Whole,
}

impl Chunking {
    /// Splits `text` into pieces according to the strategy. Empty text yields no pieces.
    pub fn split(&self, text: &str) -> Vec<String> {
        if text.is_empty() {
            return Vec::new();
        }
        match self {
            Chunking::Whole => vec![text.to_string()],
            Chunking::Chars(n) => {
                let n = (*n).max(1);
                let chars: Vec<char> = text.chars().collect();
                chars.chunks(n).map(|c| c.iter().collect()).collect()
            }
            Chunking::Words => {
                let mut out = Vec::new();
                let mut cur = String::new();
                for ch in text.chars() {
                    cur.push(ch);
                    if ch.is_whitespace() {
                        out.push(std::mem::take(&mut cur));
                    }
                }
                if !cur.is_empty() {
                    out.push(cur);
                }
                out
            }
        }
    }
}

/// Token counts reported by the mock. When a turn has none, counts are estimated from the
/// request and answer lengths (about four characters per token).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MockUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Reported as `prompt_tokens_details.cached_tokens` / `cache_read_input_tokens`.
    pub cached_tokens: Option<u64>,
    /// Reported as `completion_tokens_details.reasoning_tokens`.
    pub reasoning_tokens: Option<u64>,
}

/// A failure the mock injects instead of (or in the middle of) an answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// HTTP 429 with a rate-limit error body and, when given, `Retry-After: <secs>`.
    RateLimit { retry_after_secs: Option<u64> },
    /// HTTP 429 `insufficient_quota` (Anthropic: 400 "credit balance is too low").
    InsufficientQuota,
    /// HTTP 401 with an invalid-key error body.
    Unauthorized,
    /// HTTP 500 with a server-error body.
    ServerError,
    /// Any status with a custom JSON body.
    Status {
        status: u16,
        body: Value,
        retry_after_secs: Option<u64>,
    },
    /// A stream that sends `after_chunks` good chunks, then an SSE data line that is not JSON
    /// (non-streaming: a 200 whose body is not JSON).
    MalformedChunk { after_chunks: usize },
    /// A stream that sends `after_chunks` good chunks, then closes the socket without
    /// `[DONE]` (non-streaming: a body cut short).
    DropConnection { after_chunks: usize },
    /// Accept the request and never answer (until the mock stops).
    Hang,
}

/// Where [`Turn::recording`] finds recorded provider responses: `recordings/` of this
/// crate, one file per case, grouped by provider (see `recordings/README.md`).
pub const RECORDINGS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/recordings");

/// One scripted answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Turn {
    /// Streamed first, as `reasoning_content` (or [`Turn::reasoning_field`]) deltas, or as an
    /// Anthropic `thinking` block.
    pub reasoning: Option<String>,
    pub text: String,
    /// Several calls are streamed as parallel tool calls (distinct `index`).
    pub tool_calls: Vec<MockToolCall>,
    pub fault: Option<Fault>,
    /// `None`: the mock's default chunking.
    pub chunking: Option<Chunking>,
    /// `None`: the mock's default delay between chunks.
    pub chunk_delay: Option<Duration>,
    /// How many fragments each tool call's arguments are streamed in.
    pub args_fragments: usize,
    pub usage: Option<MockUsage>,
    /// The delta field that carries reasoning (`reasoning_content`; vLLM uses `reasoning`).
    pub reasoning_field: String,
    /// Extra vendor fields put on the first streamed delta (and on the non-streamed message).
    pub delta_extra: Map<String, Value>,
    /// Overrides the finish reason (`stop` / `tool_calls`; Anthropic `end_turn` / `tool_use`).
    pub finish_reason: Option<String>,
    /// Signature of the Anthropic thinking block.
    pub thinking_signature: Option<String>,
    /// A provider response body replayed verbatim instead of one built from the fields
    /// above (see [`Turn::recorded`]).
    pub recording: Option<String>,
}

impl Default for Turn {
    fn default() -> Self {
        Turn {
            reasoning: None,
            text: String::new(),
            tool_calls: Vec::new(),
            fault: None,
            chunking: None,
            chunk_delay: None,
            args_fragments: 3,
            usage: None,
            reasoning_field: "reasoning_content".to_string(),
            delta_extra: Map::new(),
            finish_reason: None,
            thinking_signature: None,
            recording: None,
        }
    }
}

impl Turn {
    /// A plain text answer.
    pub fn text(text: impl Into<String>) -> Turn {
        Turn {
            text: text.into(),
            ..Turn::default()
        }
    }

    /// One tool call with JSON arguments.
    pub fn tool_call(name: impl Into<String>, args: Value) -> Turn {
        Turn {
            tool_calls: vec![MockToolCall::new(name, args)],
            ..Turn::default()
        }
    }

    /// Several tool calls in one answer (parallel tool calls).
    pub fn tool_calls(calls: impl IntoIterator<Item = MockToolCall>) -> Turn {
        Turn {
            tool_calls: calls.into_iter().collect(),
            ..Turn::default()
        }
    }

    /// Reasoning, then text.
    pub fn reasoning(reasoning: impl Into<String>, text: impl Into<String>) -> Turn {
        Turn {
            reasoning: Some(reasoning.into()),
            text: text.into(),
            ..Turn::default()
        }
    }

    /// Replays `body` byte for byte: a response body exactly as a provider sends it — SSE
    /// events for OpenAI, Anthropic and Gemini streams (the recording carries its own
    /// `[DONE]`, CRLF line ends, …), NDJSON lines for Ollama, one JSON document when the
    /// request does not stream. A streamed body is written one SSE event (up to and including
    /// its blank line) or one NDJSON line at a time, with the turn's chunk delay between
    /// writes; `MalformedChunk` and `DropConnection` faults count those writes. The other
    /// answer fields of the turn are ignored; the request is recorded as usual.
    pub fn recorded(body: impl Into<String>) -> Turn {
        Turn {
            recording: Some(body.into()),
            ..Turn::default()
        }
    }

    /// [`Turn::recorded`] with the file `name` under [`RECORDINGS_DIR`]
    /// (`"anthropic/usage_in_final_message_delta.sse"`).
    pub fn recording(name: &str) -> std::io::Result<Turn> {
        let path = std::path::Path::new(RECORDINGS_DIR).join(name);
        let body = std::fs::read_to_string(&path).map_err(|e| {
            std::io::Error::new(e.kind(), format!("recording {}: {e}", path.display()))
        })?;
        Ok(Turn::recorded(body))
    }

    /// A turn that only injects `fault`.
    pub fn fault(fault: Fault) -> Turn {
        Turn {
            fault: Some(fault),
            ..Turn::default()
        }
    }

    pub fn with_text(mut self, text: impl Into<String>) -> Turn {
        self.text = text.into();
        self
    }

    pub fn with_reasoning(mut self, reasoning: impl Into<String>) -> Turn {
        self.reasoning = Some(reasoning.into());
        self
    }

    pub fn with_fault(mut self, fault: Fault) -> Turn {
        self.fault = Some(fault);
        self
    }

    pub fn with_chunking(mut self, chunking: Chunking) -> Turn {
        self.chunking = Some(chunking);
        self
    }

    pub fn with_chunk_delay(mut self, delay: Duration) -> Turn {
        self.chunk_delay = Some(delay);
        self
    }

    pub fn with_args_fragments(mut self, n: usize) -> Turn {
        self.args_fragments = n.max(1);
        self
    }

    pub fn with_usage(mut self, usage: MockUsage) -> Turn {
        self.usage = Some(usage);
        self
    }

    pub fn with_reasoning_field(mut self, field: impl Into<String>) -> Turn {
        self.reasoning_field = field.into();
        self
    }

    /// Adds a vendor field to the first streamed delta.
    pub fn with_delta_extra(mut self, key: impl Into<String>, value: Value) -> Turn {
        self.delta_extra.insert(key.into(), value);
        self
    }

    pub fn with_finish_reason(mut self, reason: impl Into<String>) -> Turn {
        self.finish_reason = Some(reason.into());
        self
    }

    pub fn with_thinking_signature(mut self, signature: impl Into<String>) -> Turn {
        self.thinking_signature = Some(signature.into());
        self
    }
}

/// Rules for the stateless [`Behavior::Rules`] mode, which answers every request from the
/// request alone, so any number of concurrent runs can share one mock.
#[derive(Clone, Debug, PartialEq)]
pub struct Rules {
    /// When the request offers this tool and its last message is a user message, call it
    /// with these arguments.
    pub call_tool: Option<(String, Value)>,
    /// Answer when the last message is a tool result. `None`: "Tool result: <result>".
    pub after_tool: Option<String>,
    /// Reasoning streamed before every answer.
    pub reasoning: Option<String>,
}

impl Rules {
    pub fn new() -> Rules {
        Rules {
            call_tool: None,
            after_tool: None,
            reasoning: None,
        }
    }

    pub fn call_tool(mut self, name: impl Into<String>, args: Value) -> Rules {
        self.call_tool = Some((name.into(), args));
        self
    }

    pub fn after_tool(mut self, text: impl Into<String>) -> Rules {
        self.after_tool = Some(text.into());
        self
    }

    pub fn with_reasoning(mut self, reasoning: impl Into<String>) -> Rules {
        self.reasoning = Some(reasoning.into());
        self
    }
}

impl Default for Rules {
    fn default() -> Self {
        Rules::new()
    }
}

/// What the mock answers when its script is empty.
#[derive(Clone, Debug, PartialEq)]
pub enum Behavior {
    /// Repeat the last user text.
    Echo,
    /// The demo model the server starts when no real model is configured: says what it is
    /// and echoes the user.
    Demo,
    /// Stateless rules (see [`Rules`]).
    Rules(Rules),
    /// Echo, unless the last user message carries a [`DIRECTIVE_MARKER`] directive saying
    /// what to answer (see [`Directive`]). Stateless, so concurrent runs can share one mock
    /// and each test message picks its own behaviour.
    Directives,
    /// Answer HTTP 500 "mock LLM script exhausted".
    Fail,
}

/// Who spoke last in a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LastRole {
    User,
    Tool,
    Assistant,
    System,
    None,
}

/// A protocol-independent view of a chat request, enough to pick an answer.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestView {
    pub model: String,
    pub stream: bool,
    pub include_usage: bool,
    /// Names of the tools offered.
    pub tools: Vec<String>,
    pub last_role: LastRole,
    /// Text of the last user message.
    pub last_user_text: String,
    /// Text of the last tool result (when the last message is one).
    pub last_tool_result: String,
    /// Characters of message text in the request (for usage estimates).
    pub prompt_chars: usize,
}

/// Starts a directive in a user message: `@mock {"tool": "calc", "args": {"x": 1}}`.
pub const DIRECTIVE_MARKER: &str = "@mock";

/// What a user message asks the [`Behavior::Directives`] mock to do: the JSON object that
/// follows [`DIRECTIVE_MARKER`] (anything after the object is ignored).
///
/// * `tool` (+ `args`, default `{}`): while the last message is not a tool result, call it;
/// * `after_tool`: the answer once the last message is a tool result (default
///   `Tool result: <result>`);
/// * `text`: the answer instead of echoing the user;
/// * `delay_ms` / `chunk_chars`: delay between streamed chunks / characters per chunk;
/// * `reasoning`: streamed before the answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Directive {
    pub tool: Option<(String, Value)>,
    pub after_tool: Option<String>,
    pub text: Option<String>,
    pub delay: Option<Duration>,
    pub chunk_chars: Option<usize>,
    pub reasoning: Option<String>,
}

impl Directive {
    /// The directive in `text`: `Ok(None)` without a marker, `Err` when what follows the
    /// marker is not a JSON object of the known fields.
    pub fn parse(text: &str) -> Result<Option<Directive>, String> {
        let Some(at) = text.find(DIRECTIVE_MARKER) else {
            return Ok(None);
        };
        let rest = &text[at + DIRECTIVE_MARKER.len()..];
        let value = serde_json::Deserializer::from_str(rest)
            .into_iter::<Value>()
            .next()
            .ok_or_else(|| "no JSON object after @mock".to_string())?
            .map_err(|e| format!("the @mock directive is not JSON: {e}"))?;
        let Value::Object(o) = value else {
            return Err("the @mock directive must be a JSON object".to_string());
        };
        let string = |key: &str| -> Result<Option<String>, String> {
            match o.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(format!("@mock {key} must be a string, got {other}")),
            }
        };
        let number = |key: &str| -> Result<Option<u64>, String> {
            match o.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_u64()
                    .map(Some)
                    .ok_or_else(|| format!("@mock {key} must be a non-negative integer, got {v}")),
            }
        };
        for key in o.keys() {
            if ![
                "tool",
                "args",
                "after_tool",
                "text",
                "delay_ms",
                "chunk_chars",
                "reasoning",
            ]
            .contains(&key.as_str())
            {
                return Err(format!("unknown @mock field {key:?}"));
            }
        }
        let tool = match string("tool")? {
            Some(name) => {
                let args = o
                    .get("args")
                    .cloned()
                    .unwrap_or_else(|| Value::Object(Map::new()));
                if !args.is_object() {
                    return Err("@mock args must be a JSON object".to_string());
                }
                Some((name, args))
            }
            None => None,
        };
        Ok(Some(Directive {
            tool,
            after_tool: string("after_tool")?,
            text: string("text")?,
            delay: number("delay_ms")?.map(Duration::from_millis),
            chunk_chars: number("chunk_chars")?.map(|n| n.max(1) as usize),
            reasoning: string("reasoning")?,
        }))
    }

    /// The answer to `view` under this directive.
    pub fn answer(&self, view: &RequestView) -> Turn {
        let mut turn = match (&self.tool, view.last_role) {
            (_, LastRole::Tool) => Turn::text(match &self.after_tool {
                Some(t) => t.clone(),
                None => format!("Tool result: {}", view.last_tool_result),
            }),
            (Some((name, args)), _) => Turn::tool_call(name.clone(), args.clone()),
            (None, _) => Turn::text(self.text.clone().unwrap_or_else(|| echo_text(view))),
        };
        turn.reasoning = self.reasoning.clone();
        turn.chunk_delay = self.delay;
        turn.chunking = self.chunk_chars.map(Chunking::Chars);
        turn
    }
}

/// The sentence the demo model starts every answer with.
pub const DEMO_PREFIX: &str = "This is the Fawn demo model: no language model is configured, so this answer is generated locally.";

/// The user's own words: servers that wrap user input between boundary lines
/// (`--- BEGIN USER INPUT ---` … `--- END USER INPUT ---`, a prompt-injection defence) get
/// only the text between them echoed back.
fn quoted_user_text(text: &str) -> &str {
    const BEGIN: &str = "--- BEGIN USER INPUT ---";
    const END: &str = "--- END USER INPUT ---";
    match (text.find(BEGIN), text.rfind(END)) {
        (Some(b), Some(e)) if b + BEGIN.len() <= e => text[b + BEGIN.len()..e].trim(),
        _ => text,
    }
}

impl Behavior {
    /// The answer this behaviour gives to `view`.
    pub fn answer(&self, view: &RequestView) -> Turn {
        match self {
            Behavior::Echo => Turn::text(echo_text(view)),
            Behavior::Demo => {
                let text = if view.last_role == LastRole::Tool {
                    format!(
                        "{DEMO_PREFIX} The tool returned: {}",
                        truncate(&view.last_tool_result, 500)
                    )
                } else if view.last_user_text.trim().is_empty() {
                    format!("{DEMO_PREFIX} Configure a model in config.yaml to get real answers.")
                } else {
                    format!(
                        "{DEMO_PREFIX} You said: {}",
                        quoted_user_text(&view.last_user_text)
                    )
                };
                Turn::text(text)
            }
            Behavior::Rules(rules) => {
                let mut turn = match (&rules.call_tool, view.last_role) {
                    (Some((name, args)), LastRole::User)
                        if view.tools.iter().any(|t| t == name) =>
                    {
                        Turn::tool_call(name.clone(), args.clone())
                    }
                    (_, LastRole::Tool) => Turn::text(match &rules.after_tool {
                        Some(t) => t.clone(),
                        None => format!("Tool result: {}", view.last_tool_result),
                    }),
                    _ => Turn::text(echo_text(view)),
                };
                turn.reasoning = rules.reasoning.clone();
                turn
            }
            Behavior::Directives => match Directive::parse(&view.last_user_text) {
                Ok(Some(d)) => d.answer(view),
                Ok(None) => Turn::text(echo_text(view)),
                Err(e) => Turn::text(format!("mock directive error: {e}")),
            },
            Behavior::Fail => Turn::fault(Fault::Status {
                status: 500,
                body: serde_json::json!({"error": {
                    "message": "mock LLM script exhausted",
                    "type": "server_error",
                    "param": null,
                    "code": null
                }}),
                retry_after_secs: None,
            }),
        }
    }
}

fn echo_text(view: &RequestView) -> String {
    if view.last_user_text.is_empty() {
        "(no user message)".to_string()
    } else {
        view.last_user_text.clone()
    }
}

fn truncate(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max_chars).collect();
        out.push('…');
        out
    }
}

/// Splits `s` into `n` fragments on character boundaries (fewer when `s` is short).
pub(crate) fn fragments(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    let n = n.clamp(1, chars.len());
    let size = chars.len().div_ceil(n);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn view(last_role: LastRole, tools: &[&str]) -> RequestView {
        RequestView {
            model: "m".into(),
            stream: true,
            include_usage: true,
            tools: tools.iter().map(|s| s.to_string()).collect(),
            last_role,
            last_user_text: "hello".into(),
            last_tool_result: "42".into(),
            prompt_chars: 5,
        }
    }

    #[test]
    fn chunking_splits() {
        assert_eq!(Chunking::Words.split("a bc d"), vec!["a ", "bc ", "d"]);
        assert_eq!(Chunking::Chars(2).split("abcde"), vec!["ab", "cd", "e"]);
        assert_eq!(Chunking::Whole.split("abc"), vec!["abc"]);
        assert!(Chunking::Words.split("").is_empty());
        assert_eq!(fragments("{\"a\":1}", 3).concat(), "{\"a\":1}");
        assert_eq!(fragments("", 3), vec![String::new()]);
    }

    #[test]
    fn rules_pick_tool_then_answer_then_echo() {
        let b = Behavior::Rules(
            Rules::new()
                .call_tool("calc", json!({"x": 1}))
                .after_tool("done"),
        );
        let t = b.answer(&view(LastRole::User, &["calc"]));
        assert_eq!(t.tool_calls[0].name, "calc");
        let t = b.answer(&view(LastRole::User, &["other"]));
        assert_eq!(t.text, "hello");
        let t = b.answer(&view(LastRole::Tool, &["calc"]));
        assert_eq!(t.text, "done");
        let mut wrapped = view(LastRole::User, &[]);
        wrapped.last_user_text =
            "--- BEGIN USER INPUT ---\nhello\n--- END USER INPUT ---".to_string();
        let t = Behavior::Demo.answer(&wrapped);
        assert!(t.text.ends_with("You said: hello"), "{}", t.text);
        let t = Behavior::Demo.answer(&view(LastRole::User, &[]));
        assert!(t.text.starts_with(DEMO_PREFIX) && t.text.ends_with("hello"));
    }

    #[test]
    fn directives_pick_the_answer_from_the_user_message() {
        let mut v = view(LastRole::User, &[]);
        v.last_user_text =
            r#"please @mock {"tool": "calc", "args": {"x": 1}, "after_tool": "done", "delay_ms": 7} thanks"#
                .into();
        let t = Behavior::Directives.answer(&v);
        assert_eq!(t.tool_calls[0].name, "calc");
        assert_eq!(t.tool_calls[0].arguments, r#"{"x":1}"#);
        assert_eq!(t.chunk_delay, Some(Duration::from_millis(7)));
        v.last_role = LastRole::Tool;
        assert_eq!(Behavior::Directives.answer(&v).text, "done");

        v.last_role = LastRole::User;
        v.last_user_text =
            r#"@mock {"text": "a b c", "chunk_chars": 2, "reasoning": "hmm"}"#.into();
        let t = Behavior::Directives.answer(&v);
        assert_eq!(t.text, "a b c");
        assert_eq!(t.chunking, Some(Chunking::Chars(2)));
        assert_eq!(t.reasoning.as_deref(), Some("hmm"));
        assert!(t.tool_calls.is_empty());

        v.last_user_text = "no directive".into();
        assert_eq!(Behavior::Directives.answer(&v).text, "no directive");
        for bad in [
            "@mock",
            "@mock [1]",
            "@mock {\"tool\": 3}",
            "@mock {\"delay_ms\": -1}",
            "@mock {\"tool\": \"t\", \"args\": []}",
            "@mock {\"sleep\": 1}",
        ] {
            v.last_user_text = bad.into();
            let t = Behavior::Directives.answer(&v);
            assert!(
                t.text.starts_with("mock directive error: "),
                "{bad}: {}",
                t.text
            );
        }
    }
}
