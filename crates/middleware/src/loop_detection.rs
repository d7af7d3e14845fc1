//! `LoopDetectionMiddleware` (`before_agent`, `wrap_model_call`, `after_model`,
//! `after_agent`): two guards against a model stuck calling tools.
//!
//! * Hash layer: each AI message with tool calls gets an order-independent hash of its calls
//!   (name + a stable key of the salient arguments), kept per thread in a window of
//!   `window_size`. The `warn_threshold`-th occurrence queues a `[LOOP DETECTED]` warning that
//!   is appended to the **next** model request (never to the state, so tool-call/result pairs
//!   stay valid); the `hard_limit`-th occurrence strips the message's tool calls and appends
//!   `[FORCED STOP] …` (`stop_reason = loop_capped`).
//! * Frequency layer: calls per tool name in a window of `max(window_size, hard limits)`
//!   calls; `tool_freq_warn` (or a per-tool override) warns, `tool_freq_hard_limit` stops.
//!
//! The per-thread history lives in a process-wide LRU ([`LoopTracker`]) of
//! `max_tracked_threads` threads, shared by every run.

use crate::util::{append_text, hidden_human, last_ai, with_tool_calls};
use crate::{
    Hook, HookOutcome, Middleware, MiddlewareError, ModelCall, ModelRequest, ModelResponse,
    RunContext,
};
use async_trait::async_trait;
use fawn_config::LoopDetectionConfig;
use fawn_state::{Message, StateUpdate, ThreadState, ToolCall};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

pub const STOP_REASON: &str = "loop_capped";
pub const WARNING_TEXT: &str = "[LOOP DETECTED] You are repeating the same tool calls. Stop calling tools and produce your final answer now. If the task cannot be completed, summarize what you have done so far.";
pub const HARD_STOP_TEXT: &str = "[FORCED STOP] Repeated tool calls exceeded the safety limit. Answering with the results collected so far.";
pub const WARNING_NAME: &str = "loop_warning";
/// Warnings queued per run at most (older ones are dropped).
const MAX_PENDING_WARNINGS: usize = 4;

pub fn frequency_warning_text(tool: &str, count: usize) -> String {
    format!(
        "[LOOP DETECTED] You have called {tool} {count} times without producing a final answer. Stop calling tools and produce your final answer now. If the task cannot be completed, summarize what you have done so far."
    )
}

pub fn frequency_stop_text(tool: &str, count: usize) -> String {
    format!(
        "[FORCED STOP] Tool {tool} called {count} times — exceeded the per-tool safety limit. Answering with the results collected so far."
    )
}

const SALIENT_ARGS: &[&str] = &["path", "url", "query", "command", "pattern", "glob", "cmd"];

fn as_line(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Canonical JSON (object keys sorted) so equal arguments hash equally.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", Value::String((*k).clone()), canonical(&o[*k])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// The part of a call's arguments that identifies "the same call".
pub fn stable_key(name: &str, args: &Map<String, Value>) -> String {
    if name == "read_file" {
        let path = args.get("path").and_then(Value::as_str).unwrap_or_default();
        let start = as_line(args.get("start_line")).unwrap_or(1);
        let end = as_line(args.get("end_line")).unwrap_or(start);
        let (lo, hi) = (start.min(end).max(1), start.max(end).max(1));
        return format!("{path}:{}-{}", (lo - 1) / 200, (hi - 1) / 200);
    }
    if name == "write_file" || name == "str_replace" {
        return canonical(&Value::Object(args.clone()));
    }
    let salient: Map<String, Value> = SALIENT_ARGS
        .iter()
        .filter_map(|k| {
            args.get(*k)
                .filter(|v| !v.is_null())
                .map(|v| (k.to_string(), v.clone()))
        })
        .collect();
    if salient.is_empty() {
        canonical(&Value::Object(args.clone()))
    } else {
        canonical(&Value::Object(salient))
    }
}

/// Order-independent hash of a set of tool calls.
pub fn hash_tool_calls(calls: &[ToolCall]) -> String {
    let mut parts: Vec<String> = calls
        .iter()
        .map(|c| format!("{}:{}", c.name, stable_key(&c.name, &c.args)))
        .collect();
    parts.sort();
    let digest = Sha256::digest(parts.join("\n").as_bytes());
    hex::encode(&digest[..6])
}

#[derive(Debug, Default)]
struct ThreadLoops {
    hashes: VecDeque<String>,
    warned_hashes: HashSet<String>,
    tool_window: VecDeque<String>,
    warned_tools: HashSet<String>,
}

/// What one AI message triggered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoopVerdict {
    Ok,
    Warn(String),
    Stop(String),
}

/// Process-wide per-thread loop history with LRU eviction.
#[derive(Debug)]
pub struct LoopTracker {
    max_threads: usize,
    inner: Mutex<(HashMap<String, ThreadLoops>, VecDeque<String>)>,
}

impl LoopTracker {
    pub fn new(max_tracked_threads: usize) -> Self {
        LoopTracker {
            max_threads: max_tracked_threads.max(1),
            inner: Mutex::new((HashMap::new(), VecDeque::new())),
        }
    }

    /// Number of threads currently tracked.
    pub fn tracked(&self) -> usize {
        match self.inner.lock() {
            Ok(g) => g.0.len(),
            Err(p) => p.into_inner().0.len(),
        }
    }

    /// Forgets one thread (or all).
    pub fn reset(&self, thread: Option<&str>) {
        let mut g = match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        match thread {
            Some(t) => {
                g.0.remove(t);
                g.1.retain(|x| x != t);
            }
            None => {
                g.0.clear();
                g.1.clear();
            }
        }
    }

    /// Records `calls` for `thread` and says what to do.
    pub fn check(
        &self,
        config: &LoopDetectionConfig,
        thread: &str,
        calls: &[ToolCall],
    ) -> LoopVerdict {
        let mut g = match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let (map, order) = &mut *g;
        // LRU touch.
        if let Some(pos) = order.iter().position(|t| t == thread) {
            order.remove(pos);
        }
        order.push_back(thread.to_string());
        while order.len() > self.max_threads {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
        let t = map.entry(thread.to_string()).or_default();

        // Hash layer.
        let h = hash_tool_calls(calls);
        t.hashes.push_back(h.clone());
        while t.hashes.len() > config.window_size.max(1) {
            t.hashes.pop_front();
        }
        let count = t.hashes.iter().filter(|x| **x == h).count() as u32;
        if count >= config.hard_limit.max(1) {
            return LoopVerdict::Stop(HARD_STOP_TEXT.to_string());
        }
        let mut warning = None;
        if count >= config.warn_threshold.max(1) && t.warned_hashes.insert(h) {
            warning = Some(WARNING_TEXT.to_string());
        }

        // Frequency layer.
        let freq_window = config
            .tool_freq_overrides
            .values()
            .filter_map(|o| o.hard_limit)
            .chain([config.hard_limit, config.tool_freq_hard_limit])
            .map(|x| x as usize)
            .chain([config.window_size])
            .max()
            .unwrap_or(50)
            .max(1);
        for c in calls {
            t.tool_window.push_back(c.name.clone());
        }
        while t.tool_window.len() > freq_window {
            t.tool_window.pop_front();
        }
        let mut names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
        names.sort();
        names.dedup();
        for name in names {
            let n = t.tool_window.iter().filter(|x| *x == name).count();
            let o = config.tool_freq_overrides.get(name);
            let warn = o
                .and_then(|o| o.warn)
                .unwrap_or(config.tool_freq_warn)
                .max(1) as usize;
            let hard = o
                .and_then(|o| o.hard_limit)
                .unwrap_or(config.tool_freq_hard_limit)
                .max(1) as usize;
            if n >= hard {
                return LoopVerdict::Stop(frequency_stop_text(name, n));
            }
            if n >= warn && warning.is_none() && t.warned_tools.insert(name.to_string()) {
                warning = Some(frequency_warning_text(name, n));
            }
        }
        match warning {
            Some(w) => LoopVerdict::Warn(w),
            None => LoopVerdict::Ok,
        }
    }
}

pub struct LoopDetectionMiddleware {
    config: LoopDetectionConfig,
    tracker: Arc<LoopTracker>,
    /// Thread key in the tracker (subagent chains use their own key).
    key: Option<String>,
    pending: Mutex<Vec<String>>,
}

impl std::fmt::Debug for LoopDetectionMiddleware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopDetectionMiddleware")
            .field("config", &self.config)
            .field("key", &self.key)
            .finish()
    }
}

impl LoopDetectionMiddleware {
    pub fn new(config: LoopDetectionConfig, tracker: Arc<LoopTracker>) -> Self {
        LoopDetectionMiddleware {
            config,
            tracker,
            key: None,
            pending: Mutex::new(Vec::new()),
        }
    }

    /// Tracks under `key` instead of the run's thread id.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        match self.pending.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn thread_key<'a>(&'a self, ctx: &'a RunContext) -> &'a str {
        match &self.key {
            Some(k) => k,
            None if ctx.thread_id.is_empty() => "default",
            None => &ctx.thread_id,
        }
    }
}

#[async_trait]
impl Middleware for LoopDetectionMiddleware {
    fn name(&self) -> &str {
        "LoopDetectionMiddleware"
    }

    fn hooks(&self) -> &'static [Hook] {
        &[
            Hook::BeforeAgent,
            Hook::WrapModelCall,
            Hook::AfterModel,
            Hook::AfterAgent,
        ]
    }

    async fn before_agent(
        &self,
        _state: &ThreadState,
        _ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        self.pending().clear();
        Ok(HookOutcome::none())
    }

    async fn wrap_model_call(
        &self,
        mut request: ModelRequest,
        _state: &ThreadState,
        _ctx: &RunContext,
        next: &dyn ModelCall,
    ) -> Result<ModelResponse, MiddlewareError> {
        let warnings = std::mem::take(&mut *self.pending());
        for w in warnings {
            request.messages.push(hidden_human(w, WARNING_NAME));
        }
        next.call(request).await
    }

    async fn after_model(
        &self,
        state: &ThreadState,
        ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        if !self.config.enabled {
            return Ok(HookOutcome::none());
        }
        let Some(ai) = last_ai(&state.messages).filter(|m| !m.tool_calls.is_empty()) else {
            return Ok(HookOutcome::none());
        };
        match self
            .tracker
            .check(&self.config, self.thread_key(ctx), &ai.tool_calls)
        {
            LoopVerdict::Ok => Ok(HookOutcome::none()),
            LoopVerdict::Warn(w) => {
                tracing::warn!(thread_id = %ctx.thread_id, "repeated tool calls; warning queued");
                let mut p = self.pending();
                p.push(w);
                if p.len() > MAX_PENDING_WARNINGS {
                    p.remove(0);
                }
                Ok(HookOutcome::none())
            }
            LoopVerdict::Stop(text) => {
                tracing::error!(thread_id = %ctx.thread_id, "tool-call loop limit reached; forcing a final answer");
                let mut m: Message = with_tool_calls(ai, Vec::new());
                m.content = append_text(&ai.content, &text);
                m.response_metadata
                    .insert("finish_reason".into(), Value::String("stop".into()));
                ctx.set_stop_reason(STOP_REASON);
                Ok(HookOutcome::update(StateUpdate::messages(vec![m])))
            }
        }
    }

    async fn after_agent(
        &self,
        _state: &ThreadState,
        _ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        self.pending().clear();
        Ok(HookOutcome::none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, args: Value) -> ToolCall {
        ToolCall::new(name, args, "x")
    }

    #[test]
    fn hash_is_order_independent_and_salient() {
        let a = call("bash", json!({"command": "ls", "timeout": 5}));
        let b = call("web_search", json!({"query": "rust"}));
        let a2 = call("bash", json!({"command": "ls", "timeout": 9}));
        assert_eq!(
            hash_tool_calls(&[a.clone(), b.clone()]),
            hash_tool_calls(&[b.clone(), a2])
        );
        assert_ne!(hash_tool_calls(&[a]), hash_tool_calls(&[b]));
        // read_file buckets by 200 lines.
        assert_eq!(
            stable_key(
                "read_file",
                &call(
                    "read_file",
                    json!({"path": "/a", "start_line": 1, "end_line": 150})
                )
                .args
            ),
            stable_key(
                "read_file",
                &call(
                    "read_file",
                    json!({"path": "/a", "start_line": 10, "end_line": 199})
                )
                .args
            )
        );
        assert_ne!(
            stable_key(
                "write_file",
                &call("write_file", json!({"path": "/a", "content": "1"})).args
            ),
            stable_key(
                "write_file",
                &call("write_file", json!({"path": "/a", "content": "2"})).args
            )
        );
    }

    #[test]
    fn thresholds_and_lru() {
        let cfg = LoopDetectionConfig::default();
        let t = LoopTracker::new(2);
        let c = [call("bash", json!({"command": "ls"}))];
        assert_eq!(t.check(&cfg, "a", &c), LoopVerdict::Ok);
        assert_eq!(t.check(&cfg, "a", &c), LoopVerdict::Ok);
        assert_eq!(
            t.check(&cfg, "a", &c),
            LoopVerdict::Warn(WARNING_TEXT.into())
        );
        assert_eq!(t.check(&cfg, "a", &c), LoopVerdict::Ok);
        assert_eq!(
            t.check(&cfg, "a", &c),
            LoopVerdict::Stop(HARD_STOP_TEXT.into())
        );
        t.check(&cfg, "b", &c);
        t.check(&cfg, "c", &c);
        assert_eq!(t.tracked(), 2);
        // "a" was evicted: counting starts over.
        assert_eq!(t.check(&cfg, "a", &c), LoopVerdict::Ok);
    }

    #[test]
    fn frequency_layer() {
        let cfg = LoopDetectionConfig::default();
        let t = LoopTracker::new(10);
        let mut verdicts = Vec::new();
        for i in 0..50 {
            let c = [call("read_file", json!({"path": format!("/f{i}")}))];
            verdicts.push(t.check(&cfg, "th", &c));
        }
        assert_eq!(verdicts[28], LoopVerdict::Ok);
        assert_eq!(
            verdicts[29],
            LoopVerdict::Warn(frequency_warning_text("read_file", 30))
        );
        assert_eq!(verdicts[48], LoopVerdict::Ok);
        assert_eq!(
            verdicts[49],
            LoopVerdict::Stop(frequency_stop_text("read_file", 50))
        );
    }
}
