//! A small real graph for development, tests and benchmarks until (and beside) the lead
//! agent: `agent` (one streamed model call with the run's model, offered a few in-process
//! tools) ⇄ `tools` (runs the calls), with checkpoints after every step, static breakpoints,
//! a dynamic `interrupt()` (`ask_human`), recursion limit and prompt cancellation (the model
//! stream is dropped, which aborts the HTTP request).
//!
//! It is a faithful stand-in for the contract, not for DeerFlow's behaviour: no middlewares,
//! no sandbox, no memory.

use async_trait::async_trait;
use fawn_agent::{
    Breakpoints, CheckpointSource, GraphDescription, GraphRunner, PendingTask, RunObserver,
    RunOutcome, RunSpec, StepCheckpoint, UnknownNode,
};
use fawn_llm::{ChatModel, ChatRequest, ModelRegistry, ToolSpec};
use fawn_state::{ChunkAccumulator, Interrupt, Message, StateUpdate, StreamEvent, ThreadState};
use futures::StreamExt;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The mini agent graph.
pub struct MiniAgent {
    graph_id: String,
    models: ModelRegistry,
}

impl std::fmt::Debug for MiniAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MiniAgent")
            .field("graph_id", &self.graph_id)
            .finish()
    }
}

impl MiniAgent {
    pub fn new(graph_id: impl Into<String>, models: ModelRegistry) -> MiniAgent {
        MiniAgent {
            graph_id: graph_id.into(),
            models,
        }
    }

    fn model(&self, spec: &RunSpec) -> Option<Arc<dyn ChatModel>> {
        let name = spec
            .configurable
            .get("model_name")
            .or_else(|| spec.context.get("model_name"))
            .or_else(|| spec.configurable.get("model"))
            .and_then(Value::as_str);
        match name {
            Some(n) => self.models.get(n).or_else(|| self.models.default_model()),
            None => self.models.default_model(),
        }
    }
}

fn tool_specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "get_weather".into(),
            description: "Get the weather of a city.".into(),
            parameters: json!({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}).into(),
        },
        ToolSpec {
            name: "ask_human".into(),
            description: "Ask the human a question and wait for the answer.".into(),
            parameters: json!({"type":"object","properties":{"question":{"type":"string"}},"required":["question"]}).into(),
        },
        ToolSpec {
            name: "sleep".into(),
            description: "Wait for `ms` milliseconds.".into(),
            parameters: json!({"type":"object","properties":{"ms":{"type":"integer"}},"required":["ms"]}).into(),
        },
        ToolSpec {
            name: "fail".into(),
            description: "Raise an error.".into(),
            parameters: json!({"type":"object","properties":{"message":{"type":"string"}}}).into(),
        },
    ]
}

fn recursion_limit(v: &Option<Value>) -> i64 {
    match v {
        Some(Value::Number(n)) => n.as_i64().filter(|n| *n > 0).unwrap_or(25),
        _ => 25,
    }
}

/// What a node run produced.
enum Step {
    Next(Vec<String>),
    Interrupted(Vec<Interrupt>),
    Stop(RunOutcome),
}

struct Ctx<'a> {
    spec: &'a RunSpec,
    observer: &'a Arc<dyn RunObserver>,
    cancel: &'a CancellationToken,
    state: ThreadState,
    step: i64,
    resume: Option<Value>,
}

impl Ctx<'_> {
    fn meta(&self, node: &str, task_id: &str) -> Map<String, Value> {
        let mut m = self.spec.metadata.clone();
        let ns = fawn_agent::insert_node_context(&mut m, self.step, node, task_id);
        m.insert("checkpoint_ns".into(), json!(ns));
        m.insert("thread_id".into(), json!(self.spec.thread_id));
        m.insert("run_id".into(), json!(self.spec.run_id));
        m.insert("tags".into(), json!(self.spec.tags));
        m
    }

    async fn checkpoint(
        &mut self,
        source: CheckpointSource,
        writes: Vec<(String, StateUpdate)>,
        next: Vec<String>,
        tasks: Vec<PendingTask>,
    ) -> Result<(), RunOutcome> {
        let tasks = if tasks.is_empty() {
            next.iter()
                .map(|n| PendingTask {
                    id: uuid::Uuid::new_v4().to_string(),
                    name: n.clone(),
                    interrupts: Vec::new(),
                })
                .collect()
        } else {
            tasks
        };
        let cp = StepCheckpoint {
            step: self.step,
            source,
            writes,
            state: Arc::new(self.state.clone()),
            next,
            tasks,
        };
        self.step += 1;
        match self.observer.checkpoint(cp).await {
            Ok(_) => Ok(()),
            Err(e) => Err(RunOutcome::Error {
                error: "CheckpointError".into(),
                message: e.to_string(),
            }),
        }
    }

    fn apply(&mut self, update: &mut StateUpdate) -> Result<(), RunOutcome> {
        self.state.apply(update).map_err(|e| RunOutcome::Error {
            error: "InvalidUpdateError".into(),
            message: e.to_string(),
        })
    }
}

fn last_ai_tool_calls(state: &ThreadState) -> Vec<fawn_state::ToolCall> {
    state
        .messages
        .iter()
        .rev()
        .find(|m| m.kind.is_ai())
        .map(|m| m.tool_calls.clone())
        .unwrap_or_default()
}

#[async_trait]
impl GraphRunner for MiniAgent {
    fn graph_id(&self) -> &str {
        &self.graph_id
    }

    fn describe(&self) -> GraphDescription {
        GraphDescription {
            graph: json!({
                "nodes": [
                    {"id": "__start__", "type": "runnable", "data": {"name": "__start__"}},
                    {"id": "agent", "type": "runnable", "data": {"name": "agent"}},
                    {"id": "tools", "type": "runnable", "data": {"name": "tools"},
                     "metadata": {"__tools": ["get_weather", "ask_human", "sleep", "fail"]}},
                    {"id": "__end__"},
                ],
                "edges": [
                    {"source": "__start__", "target": "agent"},
                    {"source": "agent", "target": "tools", "conditional": true},
                    {"source": "agent", "target": "__end__", "conditional": true},
                    {"source": "tools", "target": "agent"},
                ],
            }),
            input_schema: json!({"type": "object", "properties": {"messages": {"type": "array"}}}),
            output_schema: json!({"type": "object", "properties": {"messages": {"type": "array"}}}),
            state_schema: json!({"type": "object", "properties": {"messages": {"type": "array"}}}),
            config_schema: json!({"type": "object", "properties": {"model_name": {"type": "string"}}}),
            context_schema: Value::Null,
        }
    }

    fn next_after_update(
        &self,
        as_node: Option<&str>,
        state: &ThreadState,
    ) -> Result<Vec<String>, UnknownNode> {
        match as_node {
            None | Some("__start__") | Some("__input__") => Ok(vec!["agent".into()]),
            Some("agent") => Ok(if last_ai_tool_calls(state).is_empty() {
                vec![]
            } else {
                vec!["tools".into()]
            }),
            Some("tools") => Ok(vec!["agent".into()]),
            Some(other) => Err(UnknownNode(other.to_string())),
        }
    }

    async fn run(
        &self,
        spec: RunSpec,
        observer: Arc<dyn RunObserver>,
        cancel: CancellationToken,
    ) -> RunOutcome {
        let limit = recursion_limit(&spec.recursion_limit);
        let mut next = spec.start.next.clone();
        let mut ctx = Ctx {
            spec: &spec,
            observer: &observer,
            cancel: &cancel,
            state: spec.start.state.clone(),
            step: spec.start.step + 1,
            resume: spec.command.as_ref().and_then(|c| c.resume.clone()),
        };
        // New input from an older checkpoint goes under it as an `input` checkpoint; only a
        // run without input copies the fork point first.
        if spec.start.is_fork
            && spec.input.is_none()
            && let Err(o) = ctx
                .checkpoint(CheckpointSource::Fork, Vec::new(), next.clone(), Vec::new())
                .await
        {
            return o;
        }
        let mut resuming = spec.input.is_none();
        if let Some(cmd) = &spec.command {
            if let Some(update) = &cmd.update {
                let update = match update {
                    Value::Array(pairs) => {
                        let mut m = Map::new();
                        for p in pairs {
                            if let Some([k, v]) = p.as_array().map(Vec::as_slice)
                                && let Some(k) = k.as_str()
                            {
                                m.insert(k.to_string(), v.clone());
                            }
                        }
                        Value::Object(m)
                    }
                    other => other.clone(),
                };
                let mut u = match StateUpdate::from_value(update) {
                    Ok(u) => u,
                    Err(e) => {
                        return RunOutcome::Error {
                            error: "InvalidUpdateError".into(),
                            message: e.to_string(),
                        };
                    }
                };
                if let Err(o) = ctx.apply(&mut u) {
                    return o;
                }
                if !cmd.goto.is_empty() {
                    next = cmd.goto.clone();
                }
                if let Err(o) = ctx
                    .checkpoint(
                        CheckpointSource::Input,
                        vec![("__start__".into(), u)],
                        next.clone(),
                        Vec::new(),
                    )
                    .await
                {
                    return o;
                }
            } else if !cmd.goto.is_empty() {
                next = cmd.goto.clone();
            }
        }
        if let Some(input) = &spec.input {
            let mut u = input.clone();
            if let Err(o) = ctx.apply(&mut u) {
                return o;
            }
            next = vec!["agent".into()];
            resuming = false;
            if let Err(o) = ctx
                .checkpoint(
                    CheckpointSource::Input,
                    vec![("__start__".into(), u)],
                    next.clone(),
                    Vec::new(),
                )
                .await
            {
                return o;
            }
        }
        let mut steps = 0i64;
        let mut first = true;
        while let Some(node) = next.first().cloned() {
            if cancel.is_cancelled() {
                return RunOutcome::Cancelled;
            }
            let skip_before = first && resuming;
            first = false;
            if !skip_before && spec.interrupt_before.contains(&node) {
                return RunOutcome::Success {
                    interrupts: Vec::new(),
                    stop_reason: None,
                };
            }
            steps += 1;
            if steps > limit {
                return RunOutcome::Error {
                    error: "GraphRecursionError".into(),
                    message: format!(
                        "Recursion limit of {limit} reached without hitting a stop condition. \
                         You can increase the limit by setting the `recursion_limit` config key."
                    ),
                };
            }
            let result = match node.as_str() {
                "agent" => self.agent_node(&mut ctx).await,
                "tools" => tools_node(&mut ctx).await,
                other => Step::Stop(RunOutcome::Error {
                    error: "InvalidUpdateError".into(),
                    message: format!("Node {other} does not exist"),
                }),
            };
            match result {
                Step::Next(n) => next = n,
                Step::Interrupted(interrupts) => {
                    return RunOutcome::Success {
                        interrupts,
                        stop_reason: None,
                    };
                }
                Step::Stop(o) => return o,
            }
            if !next.is_empty() && breakpoint_after(&spec.interrupt_after, &node) {
                return RunOutcome::Success {
                    interrupts: Vec::new(),
                    stop_reason: None,
                };
            }
        }
        RunOutcome::Success {
            interrupts: Vec::new(),
            stop_reason: None,
        }
    }
}

fn breakpoint_after(b: &Breakpoints, node: &str) -> bool {
    b.contains(node)
}

impl MiniAgent {
    async fn agent_node(&self, ctx: &mut Ctx<'_>) -> Step {
        let task_id = uuid::Uuid::new_v4().to_string();
        let meta = ctx.meta("agent", &task_id);
        ctx.observer.emit(StreamEvent::NodeStart {
            step: ctx.step,
            task_id: task_id.clone(),
            node: "agent".into(),
            input: json!({"messages": ctx.state.messages.len()}),
            triggers: vec!["branch:to:agent".into()],
        });
        let Some(model) = self.model(ctx.spec) else {
            return Step::Stop(RunOutcome::Error {
                error: "ValueError".into(),
                message: "no model is configured".into(),
            });
        };
        let mut chunk_meta = meta.clone();
        chunk_meta.insert("ls_provider".into(), json!(model.info().provider));
        chunk_meta.insert("ls_model_name".into(), json!(model.info().model));
        chunk_meta.insert("ls_model_type".into(), json!("chat"));
        let chunk_meta = std::sync::Arc::new(chunk_meta);
        let request = ChatRequest {
            messages: ctx.state.messages.clone(),
            tools: tool_specs().into(),
            ..Default::default()
        };
        let msg_id = format!("lc_run--{}", uuid::Uuid::now_v7());
        ctx.observer.emit(StreamEvent::ModelStart {
            message_id: msg_id.clone(),
            messages: request.messages.clone(),
            metadata: chunk_meta.clone(),
        });
        let stream = tokio::select! {
            s = model.stream(request) => s,
            _ = ctx.cancel.cancelled() => return Step::Stop(RunOutcome::Cancelled),
        };
        let mut stream = match stream {
            Ok(s) => s,
            Err(e) => {
                return Step::Stop(RunOutcome::Error {
                    error: "LlmError".into(),
                    message: e.to_string(),
                });
            }
        };
        let mut acc = ChunkAccumulator::new();
        loop {
            let item = tokio::select! {
                i = stream.next() => i,
                _ = ctx.cancel.cancelled() => {
                    drop(stream);
                    return Step::Stop(RunOutcome::Cancelled);
                }
            };
            let Some(item) = item else { break };
            match item {
                Ok(mut chunk) => {
                    chunk.id = Some(msg_id.clone());
                    acc.push(&chunk);
                    ctx.observer.emit(StreamEvent::MessageChunk {
                        chunk,
                        metadata: chunk_meta.clone(),
                    });
                }
                Err(e) => {
                    return Step::Stop(RunOutcome::Error {
                        error: "LlmError".into(),
                        message: e.to_string(),
                    });
                }
            }
        }
        let mut ai = acc.finish();
        ai.id = Some(msg_id);
        let has_calls = !ai.tool_calls.is_empty();
        let mut update = StateUpdate::messages(vec![ai]);
        if let Err(o) = ctx.apply(&mut update) {
            return Step::Stop(o);
        }
        ctx.observer.emit(StreamEvent::NodeEnd {
            step: ctx.step,
            task_id,
            node: "agent".into(),
            update: update.to_value(),
            error: None,
            interrupts: Vec::new(),
        });
        let next = if has_calls {
            vec!["tools".to_string()]
        } else {
            Vec::new()
        };
        if let Err(o) = ctx
            .checkpoint(
                CheckpointSource::Loop,
                vec![("agent".into(), update)],
                next.clone(),
                Vec::new(),
            )
            .await
        {
            return Step::Stop(o);
        }
        Step::Next(next)
    }
}

async fn tools_node(ctx: &mut Ctx<'_>) -> Step {
    let task_id = uuid::Uuid::new_v4().to_string();
    let meta = ctx.meta("tools", &task_id);
    let calls = last_ai_tool_calls(&ctx.state);
    ctx.observer.emit(StreamEvent::NodeStart {
        step: ctx.step,
        task_id: task_id.clone(),
        node: "tools".into(),
        input: json!({"tool_calls": calls.len()}),
        triggers: vec!["branch:to:tools".into()],
    });
    let mut results = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        let call_id = call.id.clone().unwrap_or_default();
        let arg = |k: &str| call.args.get(k).cloned().unwrap_or(Value::Null);
        ctx.observer.emit(StreamEvent::ToolStart {
            step: ctx.step,
            task_id: task_id.clone(),
            call_id: call_id.clone(),
            name: call.name.clone(),
            args: call.args.clone(),
        });
        let text = match call.name.as_str() {
            "get_weather" => format!(
                "It is sunny in {}.",
                arg("city").as_str().unwrap_or("somewhere")
            ),
            "sleep" => {
                let ms = arg("ms").as_u64().unwrap_or(100).min(60_000);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => format!("slept {ms} ms"),
                    _ = ctx.cancel.cancelled() => return Step::Stop(RunOutcome::Cancelled),
                }
            }
            "fail" => {
                return Step::Stop(RunOutcome::Error {
                    error: "ToolException".into(),
                    message: arg("message").as_str().unwrap_or("tool failed").to_string(),
                });
            }
            "ask_human" => match ctx.resume.take() {
                Some(answer) => {
                    let answer = match answer {
                        Value::Object(m) if m.len() == 1 => {
                            m.into_iter().next().map(|(_, v)| v).unwrap_or(Value::Null)
                        }
                        other => other,
                    };
                    match answer {
                        Value::String(s) => s,
                        other => other.to_string(),
                    }
                }
                None => {
                    let id = uuid::Uuid::new_v5(
                        &uuid::Uuid::NAMESPACE_OID,
                        format!("{call_id}:{i}").as_bytes(),
                    )
                    .simple()
                    .to_string();
                    let interrupts = vec![Interrupt {
                        id,
                        value: json!({"question": arg("question")}),
                    }];
                    ctx.observer.emit(StreamEvent::NodeEnd {
                        step: ctx.step,
                        task_id: task_id.clone(),
                        node: "tools".into(),
                        update: Value::Null,
                        error: None,
                        interrupts: interrupts.clone(),
                    });
                    let tasks = vec![PendingTask {
                        id: task_id.clone(),
                        name: "tools".into(),
                        interrupts: interrupts.clone(),
                    }];
                    if let Err(o) = ctx
                        .checkpoint(
                            CheckpointSource::Loop,
                            Vec::new(),
                            vec!["tools".into()],
                            tasks,
                        )
                        .await
                    {
                        return Step::Stop(o);
                    }
                    return Step::Interrupted(interrupts);
                }
            },
            other => format!("Error: unknown tool '{other}'"),
        };
        let msg = Message::tool(text, call_id.clone(), Some(call.name.clone()))
            .with_id(uuid::Uuid::new_v4().to_string());
        ctx.observer.emit(StreamEvent::ToolEnd {
            step: ctx.step,
            task_id: task_id.clone(),
            call_id,
            name: call.name.clone(),
            message: msg.clone(),
        });
        ctx.observer.emit(StreamEvent::Message {
            message: msg.clone(),
            metadata: meta.clone(),
        });
        results.push(msg);
    }
    let mut update = StateUpdate::messages(results);
    if let Err(o) = ctx.apply(&mut update) {
        return Step::Stop(o);
    }
    ctx.observer.emit(StreamEvent::NodeEnd {
        step: ctx.step,
        task_id,
        node: "tools".into(),
        update: update.to_value(),
        error: None,
        interrupts: Vec::new(),
    });
    let next = vec!["agent".to_string()];
    if let Err(o) = ctx
        .checkpoint(
            CheckpointSource::Loop,
            vec![("tools".into(), update)],
            next.clone(),
            Vec::new(),
        )
        .await
    {
        return Step::Stop(o);
    }
    Step::Next(next)
}
