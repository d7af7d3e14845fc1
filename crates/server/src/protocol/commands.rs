//! The protocol's commands, over `POST /threads/{id}/commands` and over a WebSocket.
//!
//! | method | does | result |
//! |---|---|---|
//! | `run.start` | a run on the thread (created when the client minted its id), streaming every mode the protocol projects; a fork when `config.configurable.checkpoint_id` is set | `{run_id}` |
//! | `input.respond` | resumes the thread's pending interrupt(s) with the response(s) (`command.resume` keyed by interrupt id, with `update`/`goto`) | `{}` |
//! | `input.inject` | the message as a new run's input, queued after the current run (`enqueue`) | `{}` |
//! | `subscription.subscribe` / `unsubscribe` / `reconnect` | a WebSocket's subscriptions; over HTTP every `POST …/stream/events` is a subscription, so these are validated and answered `not_supported` (`unsubscribe`: `no_such_subscription`) | |
//! | `state.get` | the thread's latest values (only `keys` when given) | `{values, checkpoint?}` |
//! | `state.listCheckpoints` | the thread's checkpoints, newest first | `{checkpoints: [{id, timestamp, step, metadata, node_name?}]}` |
//! | `state.fork` | a run from an older checkpoint | `{run_id, thread_id}` |
//! | `agent.getTree` | the run (the latest, or `run_id`) and the subagents it started | `{tree}` |
//!
//! Anything else is `unknown_command`; bad params are `invalid_argument` (or the `no_such_*`
//! code naming what is missing). Only the root namespace (`[]`) has state and interrupts:
//! the lead agent's subagents keep none on the thread.

use super::wire::{Code, Command, Filter, ProtoEvent, ProtocolError, success};
use crate::app::AppState;
use crate::auth::Principal;
use crate::authz::run_user;
use fawn_checkpoint::{HistoryQuery, Run, RunQuery, RunStatus};
use fawn_runtime::create::{RunCreate, RunTarget, create_run};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// Who sends a command, to which thread.
pub struct Ctx<'a> {
    pub app: &'a AppState,
    pub principal: &'a Principal,
    pub thread_id: &'a str,
    /// Request headers copied into a run's `configurable` (`x-*`, `user-agent`).
    pub headers: &'a [(String, String)],
}

/// A WebSocket's subscriptions and what it sent (for replays).
#[derive(Default)]
pub struct Socket {
    pub subs: Vec<Sub>,
    /// The connection's events so far (bounded), and whether each was sent.
    pub buffer: std::collections::VecDeque<(Arc<ProtoEvent>, bool)>,
    /// Bytes of the events in `buffer`.
    buffered_bytes: usize,
}

/// One subscription of a socket.
pub struct Sub {
    pub id: String,
    pub filter: Filter,
    /// Events at or below this `seq` are not sent to it.
    pub since: Option<u64>,
}

impl Sub {
    pub fn wants(&self, e: &ProtoEvent) -> bool {
        self.filter.matches(e) && self.since.is_none_or(|s| e.seq > s)
    }
}

/// How many events a socket keeps for subscriptions made after them…
pub const SOCKET_BUFFER: usize = 10_000;
/// …and how many bytes of them (state snapshots can be large).
pub const SOCKET_BUFFER_BYTES: usize = 16 * 1024 * 1024;

impl Socket {
    /// Keeps `e`; returns whether a subscription wants it (it is then marked sent).
    pub fn offer(&mut self, e: Arc<ProtoEvent>) -> bool {
        let send = self.subs.iter().any(|s| s.wants(&e));
        self.buffered_bytes += e.json.len();
        self.buffer.push_back((e, send));
        while self.buffer.len() > SOCKET_BUFFER || self.buffered_bytes > SOCKET_BUFFER_BYTES {
            match self.buffer.pop_front() {
                Some((old, _)) => self.buffered_bytes -= old.json.len(),
                None => break,
            }
        }
        send
    }
}

type CmdResult = Result<Value, ProtocolError>;

/// Runs `cmd`; the response to send. `socket` is the WebSocket's state (None over HTTP);
/// events it must replay for a new subscription are appended to `replay`.
pub async fn handle(
    ctx: &Ctx<'_>,
    cmd: Command,
    socket: Option<&mut Socket>,
    replay: &mut Vec<Arc<ProtoEvent>>,
) -> Value {
    let id = cmd.id;
    let result = match cmd.method.as_str() {
        "run.start" => run_start(ctx, &cmd.params).await,
        "input.respond" => input_respond(ctx, &cmd.params).await,
        "input.inject" => input_inject(ctx, &cmd.params).await,
        "subscription.subscribe" => subscribe(&cmd.params, socket, replay),
        "subscription.unsubscribe" => unsubscribe(&cmd.params, socket),
        "subscription.reconnect" => reconnect(ctx, &cmd.params, socket, replay).await,
        "state.get" => state_get(ctx, &cmd.params).await,
        "state.listCheckpoints" => list_checkpoints(ctx, &cmd.params).await,
        "state.fork" => state_fork(ctx, &cmd.params).await,
        "agent.getTree" => get_tree(ctx, &cmd.params).await,
        other => Err(ProtocolError::new(
            Code::UnknownCommand,
            format!("Unknown protocol command: {other}"),
        )),
    };
    match result {
        Ok(v) => success(id, v, 0),
        Err(e) => e.response(Some(id)),
    }
}

fn opt_object(p: &Map<String, Value>, key: &str) -> Result<Option<Value>, ProtocolError> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Object(_)) => Ok(Some(v.clone())),
        Some(_) => Err(ProtocolError::invalid(format!(
            "`{key}` must be an object."
        ))),
    }
}

fn opt_string<'a>(p: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, ProtocolError> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ProtocolError::invalid(format!("`{key}` must be a string."))),
    }
}

fn namespace(p: &Map<String, Value>, key: &str) -> Result<Vec<String>, ProtocolError> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|s| {
                s.as_str().map(str::to_string).ok_or_else(|| {
                    ProtocolError::invalid(format!("`{key}` must be a list of strings."))
                })
            })
            .collect(),
        Some(_) => Err(ProtocolError::invalid(format!(
            "`{key}` must be a list of strings."
        ))),
    }
}

fn root_only(ns: &[String]) -> Result<(), ProtocolError> {
    if ns.is_empty() {
        Ok(())
    } else {
        Err(ProtocolError::new(
            Code::NoSuchNamespace,
            format!("No agent at namespace {ns:?}: only the root namespace [] has state."),
        ))
    }
}

/// A run body for this thread, by the caller.
fn body(ctx: &Ctx<'_>, assistant_id: &str) -> RunCreate {
    RunCreate {
        assistant_id: Some(json!(assistant_id)),
        owner: ctx.principal.scope().map(str::to_string),
        protocol: true,
        ..RunCreate::default()
    }
}

async fn start(ctx: &Ctx<'_>, body: RunCreate) -> Result<Run, ProtocolError> {
    let created = create_run(
        &ctx.app.rt,
        body,
        RunTarget::Thread(ctx.thread_id.to_string()),
        ctx.headers,
    )
    .await?;
    Ok(created.run)
}

async fn run_start(ctx: &Ctx<'_>, p: &Map<String, Value>) -> CmdResult {
    let assistant_id = match p.get("assistant_id") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        _ => {
            return Err(ProtocolError::invalid(
                "run.start requires an assistant_id.",
            ));
        }
    };
    let config = opt_object(p, "config")?;
    let checkpoint_id = config
        .as_ref()
        .and_then(|c| c.pointer("/configurable/checkpoint_id"))
        .filter(|v| !v.is_null())
        .cloned();
    let multitask = match p
        .get("multitask_strategy")
        .or_else(|| p.get("multitaskStrategy"))
    {
        None | Some(Value::Null) => None,
        Some(v @ Value::String(_)) => Some(v.clone()),
        Some(_) => {
            return Err(ProtocolError::invalid(
                "`multitask_strategy` must be a string.",
            ));
        }
    };
    let body = RunCreate {
        input: p.get("input").filter(|v| !v.is_null()).cloned(),
        config,
        metadata: opt_object(p, "metadata")?,
        checkpoint_id,
        multitask_strategy: multitask,
        if_not_exists: Some(json!("create")),
        ..body(ctx, &assistant_id)
    };
    let run = start(ctx, body).await?;
    Ok(json!({"run_id": run.run_id}))
}

/// The thread, when it exists and is the caller's.
async fn thread(ctx: &Ctx<'_>) -> Result<Option<fawn_checkpoint::Thread>, ProtocolError> {
    let t = ctx.app.store().get_thread(ctx.thread_id).await?;
    Ok(t.filter(|t| ctx.principal.owns_thread(&t.metadata)))
}

/// The assistant a follow-up run of the thread uses: the thread's.
fn thread_assistant(t: &fawn_checkpoint::Thread) -> Option<String> {
    ["assistant_id", "graph_id"]
        .iter()
        .find_map(|k| t.metadata.get(*k).and_then(Value::as_str))
        .map(str::to_string)
}

async fn input_respond(ctx: &Ctx<'_>, p: &Map<String, Value>) -> CmdResult {
    let mut entries: Vec<(String, Vec<String>, Value)> = Vec::new();
    let entry = |o: &Map<String, Value>| -> Result<(String, Vec<String>, Value), ProtocolError> {
        let id = match o.get("interrupt_id") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => {
                return Err(ProtocolError::invalid(
                    "input.respond requires an interrupt_id.",
                ));
            }
        };
        Ok((
            id,
            namespace(o, "namespace")?,
            o.get("response").cloned().unwrap_or(Value::Null),
        ))
    };
    match p.get("responses") {
        Some(Value::Array(list)) if !list.is_empty() => {
            for r in list {
                let Value::Object(o) = r else {
                    return Err(ProtocolError::invalid(
                        "`responses` must be a list of {interrupt_id, namespace, response}.",
                    ));
                };
                entries.push(entry(o)?);
            }
        }
        Some(_) => {
            return Err(ProtocolError::invalid(
                "`responses` must be a non-empty list of {interrupt_id, namespace, response}.",
            ));
        }
        None => entries.push(entry(p)?),
    }
    let update = opt_object(p, "update")?;
    let goto = p.get("goto").filter(|g| !g.is_null()).cloned();
    let Some(t) = thread(ctx).await? else {
        return Err(ProtocolError::new(
            Code::NoSuchRun,
            "No interrupted run is bound to this thread.",
        ));
    };
    let pending: Vec<String> = t
        .interrupts
        .values()
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(|i| i.get("id").and_then(Value::as_str))
        .map(str::to_string)
        .collect();
    let mut resume = Map::new();
    for (id, ns, response) in entries {
        if !ns.is_empty() || !pending.contains(&id) {
            return Err(ProtocolError::new(
                Code::NoSuchInterrupt,
                format!("Unknown or already-consumed interrupt: {id}"),
            ));
        }
        resume.insert(id, response);
    }
    let Some(assistant) = thread_assistant(&t) else {
        return Err(ProtocolError::new(
            Code::NoSuchRun,
            "No interrupted run is bound to this thread.",
        ));
    };
    let mut command = Map::new();
    command.insert("resume".into(), Value::Object(resume));
    if let Some(u) = update {
        command.insert("update".into(), u);
    }
    if let Some(g) = goto {
        command.insert("goto".into(), g);
    }
    let body = RunCreate {
        command: Some(Value::Object(command)),
        config: opt_object(p, "config")?,
        metadata: opt_object(p, "metadata")?,
        ..body(ctx, &assistant)
    };
    start(ctx, body).await?;
    Ok(json!({}))
}

async fn input_inject(ctx: &Ctx<'_>, p: &Map<String, Value>) -> CmdResult {
    root_only(&namespace(p, "namespace")?)?;
    let Some(Value::Object(m)) = p.get("message") else {
        return Err(ProtocolError::invalid(
            "input.inject requires a message {role, content}.",
        ));
    };
    let kind = match m.get("role").and_then(Value::as_str) {
        Some("user") => "human",
        Some("system") => "system",
        _ => {
            return Err(ProtocolError::invalid(
                "`message.role` must be \"user\" or \"system\".",
            ));
        }
    };
    let Some(content) = m.get("content").and_then(Value::as_str) else {
        return Err(ProtocolError::invalid(
            "`message.content` must be a string.",
        ));
    };
    let mut message = json!({"type": kind, "content": content});
    if let Some(name) = opt_string(m, "name")? {
        message["name"] = json!(name);
    }
    let Some(t) = thread(ctx).await? else {
        return Err(ProtocolError::new(
            Code::NoSuchRun,
            "The thread has no run to inject into; start one with run.start.",
        ));
    };
    let Some(assistant) = thread_assistant(&t) else {
        return Err(ProtocolError::new(
            Code::NoSuchRun,
            "The thread has no run to inject into; start one with run.start.",
        ));
    };
    let body = RunCreate {
        input: Some(json!({"messages": [message]})),
        multitask_strategy: Some(json!("enqueue")),
        ..body(ctx, &assistant)
    };
    start(ctx, body).await?;
    Ok(json!({}))
}

fn subscribe(
    p: &Map<String, Value>,
    socket: Option<&mut Socket>,
    replay: &mut Vec<Arc<ProtoEvent>>,
) -> CmdResult {
    let filter = Filter::parse(p)?;
    let since = match p.get("since") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .ok_or_else(|| ProtocolError::invalid("since must be a non-negative integer"))?,
        ),
    };
    let Some(socket) = socket else {
        return Err(not_over_http());
    };
    let sub = Sub {
        id: uuid::Uuid::new_v4().to_string(),
        filter,
        since,
    };
    let mut replayed = 0u64;
    for (e, sent) in socket.buffer.iter_mut() {
        if !*sent && sub.wants(e) {
            *sent = true;
            replayed += 1;
            replay.push(e.clone());
        }
    }
    let id = sub.id.clone();
    socket.subs.push(sub);
    Ok(json!({"subscription_id": id, "replayed_events": replayed}))
}

fn not_over_http() -> ProtocolError {
    ProtocolError::new(
        Code::NotSupported,
        "Subscriptions live on a WebSocket (GET /threads/{thread_id}/stream/events); over HTTP \
         each POST /threads/{thread_id}/stream/events is one subscription.",
    )
}

fn unsubscribe(p: &Map<String, Value>, socket: Option<&mut Socket>) -> CmdResult {
    let Some(id) = opt_string(p, "subscription_id")?.filter(|s| !s.is_empty()) else {
        return Err(ProtocolError::invalid(
            "subscription.unsubscribe requires a subscription_id.",
        ));
    };
    let found = socket.is_some_and(|s| {
        let before = s.subs.len();
        s.subs.retain(|sub| sub.id != id);
        s.subs.len() != before
    });
    if found {
        Ok(json!({}))
    } else {
        Err(ProtocolError::new(
            Code::NoSuchSubscription,
            format!("Unknown subscription: {id}"),
        ))
    }
}

/// The run `run_id` of this thread, when the caller may see it.
async fn thread_run(ctx: &Ctx<'_>, run_id: &str) -> Result<Run, ProtocolError> {
    let run = ctx.app.store().get_run(run_id).await?;
    run.filter(|r| r.thread_id == ctx.thread_id && ctx.principal.owns(run_user(r)))
        .ok_or_else(|| {
            ProtocolError::new(Code::NoSuchRun, format!("No run {run_id} on this thread."))
        })
}

async fn reconnect(
    ctx: &Ctx<'_>,
    p: &Map<String, Value>,
    socket: Option<&mut Socket>,
    replay: &mut Vec<Arc<ProtoEvent>>,
) -> CmdResult {
    let Some(run_id) = opt_string(p, "run_id")?.filter(|s| !s.is_empty()) else {
        return Err(ProtocolError::invalid(
            "subscription.reconnect requires a run_id.",
        ));
    };
    let last = opt_string(p, "last_event_id")?;
    let wanted: Vec<String> = match p.get("subscriptions") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|s| {
                s.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| ProtocolError::invalid("`subscriptions` must be a list of ids."))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(ProtocolError::invalid(
                "`subscriptions` must be a list of ids.",
            ));
        }
    };
    thread_run(ctx, run_id).await?;
    let Some(socket) = socket else {
        return Err(not_over_http());
    };
    let restored = wanted
        .iter()
        .all(|w| socket.subs.iter().any(|s| s.id == *w));
    // Events after `last_event_id` the restored subscriptions want and were not sent.
    let after = last.and_then(|l| {
        socket
            .buffer
            .iter()
            .find(|(e, _)| e.event_id == l)
            .map(|(e, _)| e.seq)
    });
    let mut missed = 0u64;
    if restored {
        for (e, sent) in socket.buffer.iter_mut() {
            let wanted_by = socket
                .subs
                .iter()
                .any(|s| (wanted.is_empty() || wanted.contains(&s.id)) && s.wants(e));
            if wanted_by && after.is_none_or(|a| e.seq > a) && !*sent {
                *sent = true;
                missed += 1;
                replay.push(e.clone());
            }
        }
    }
    Ok(json!({"restored": restored, "missed_events": missed}))
}

async fn state_get(ctx: &Ctx<'_>, p: &Map<String, Value>) -> CmdResult {
    root_only(&namespace(p, "namespace")?)?;
    let keys: Option<Vec<String>> = match p.get("keys") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => Some(
            a.iter()
                .map(|k| {
                    k.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| ProtocolError::invalid("`keys` must be a list of strings."))
                })
                .collect::<Result<_, _>>()?,
        ),
        Some(_) => return Err(ProtocolError::invalid("`keys` must be a list of strings.")),
    };
    if thread(ctx).await?.is_none() {
        return Ok(json!({"values": {}}));
    }
    let Some(cp) = ctx
        .app
        .store()
        .get_checkpoint(ctx.thread_id, "", None)
        .await?
    else {
        return Ok(json!({"values": {}}));
    };
    let mut values = match serde_json::to_value(&*cp.state) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    if let Some(keys) = keys {
        values.retain(|k, _| keys.contains(k));
    }
    Ok(json!({"values": values, "checkpoint": {"id": cp.checkpoint_id, "ns": ""}}))
}

async fn list_checkpoints(ctx: &Ctx<'_>, p: &Map<String, Value>) -> CmdResult {
    root_only(&namespace(p, "namespace")?)?;
    let limit = match p.get("limit") {
        None | Some(Value::Null) => 10,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=1000).contains(&n) => n,
            _ => {
                return Err(ProtocolError::invalid(
                    "`limit` must be an integer between 1 and 1000.",
                ));
            }
        },
    };
    let before = opt_string(p, "before")?.map(str::to_string);
    if thread(ctx).await?.is_none() {
        return Ok(json!({"checkpoints": []}));
    }
    let list = ctx
        .app
        .store()
        .list_checkpoints(
            ctx.thread_id,
            &HistoryQuery {
                checkpoint_ns: String::new(),
                limit,
                before,
                metadata: None,
            },
        )
        .await?;
    let checkpoints: Vec<Value> = list
        .iter()
        .map(|c| {
            let mut s = json!({
                "id": c.checkpoint_id,
                "timestamp": crate::wire::ts(&c.created_at),
                "step": c.metadata.get("step").cloned().unwrap_or(json!(0)),
                "metadata": c.metadata,
            });
            if let [(node, _)] = c.writes.as_slice() {
                s["node_name"] = json!(node);
            }
            s
        })
        .collect();
    Ok(json!({"checkpoints": checkpoints}))
}

async fn state_fork(ctx: &Ctx<'_>, p: &Map<String, Value>) -> CmdResult {
    let Some(checkpoint_id) = opt_string(p, "checkpoint_id")?.filter(|s| !s.is_empty()) else {
        return Err(ProtocolError::invalid(
            "state.fork requires a checkpoint_id.",
        ));
    };
    let Some(t) = thread(ctx).await? else {
        return Err(ProtocolError::new(
            Code::NoSuchCheckpoint,
            format!("Checkpoint {checkpoint_id} not found"),
        ));
    };
    let Some(assistant) = thread_assistant(&t) else {
        return Err(ProtocolError::new(
            Code::NoSuchRun,
            "The thread has no assistant to fork with.",
        ));
    };
    let body = RunCreate {
        input: p.get("input").filter(|v| !v.is_null()).cloned(),
        config: opt_object(p, "config")?,
        checkpoint_id: Some(json!(checkpoint_id)),
        ..body(ctx, &assistant)
    };
    let run = start(ctx, body).await?;
    Ok(json!({"run_id": run.run_id, "thread_id": ctx.thread_id}))
}

fn status_name(run: &Run, thread_interrupted: bool) -> &'static str {
    match run.status {
        RunStatus::Pending | RunStatus::Running => "running",
        RunStatus::Success if thread_interrupted => "interrupted",
        RunStatus::Success => "completed",
        RunStatus::Interrupted => "interrupted",
        RunStatus::Error | RunStatus::Timeout => "failed",
    }
}

async fn get_tree(ctx: &Ctx<'_>, p: &Map<String, Value>) -> CmdResult {
    let run = match opt_string(p, "run_id")? {
        Some(id) => thread_run(ctx, id).await?,
        None => {
            let latest = ctx
                .app
                .store()
                .list_runs(
                    ctx.thread_id,
                    &RunQuery {
                        limit: 1,
                        offset: 0,
                        status: None,
                    },
                )
                .await?;
            latest
                .into_iter()
                .find(|r| ctx.principal.owns(run_user(r)))
                .ok_or_else(|| {
                    ProtocolError::new(Code::NoSuchRun, "No run is bound to this thread.")
                })?
        }
    };
    let interrupted = thread(ctx)
        .await?
        .is_some_and(|t| t.status == fawn_checkpoint::ThreadStatus::Interrupted);
    let graph_name = fawn_runtime::RunKwargs::from_map(&run.kwargs)
        .ok()
        .and_then(|k| k.graph_id)
        .unwrap_or_default();
    let children = subagents_of(ctx.app, &run);
    Ok(json!({"tree": {
        "namespace": [],
        "status": status_name(&run, interrupted),
        "graph_name": graph_name,
        "children": children,
    }}))
}

/// The subagents a run started, from its log while this node holds it.
fn subagents_of(app: &AppState, run: &Run) -> Vec<Value> {
    let Some(log) = app.run_log(&run.run_id) else {
        return Vec::new();
    };
    let mut types: Map<String, Value> = Map::new();
    let mut order: Vec<String> = Vec::new();
    let mut status: Map<String, Value> = Map::new();
    for e in log.retained_after(None) {
        let Ok(v) = serde_json::from_slice::<Value>(&e.data()) else {
            continue;
        };
        match e.base() {
            "tools" if v.get("event").and_then(Value::as_str) == Some("tool-started") => {
                if let (Some(id), Some(t)) = (
                    v.get("tool_call_id").and_then(Value::as_str),
                    v.pointer("/input/subagent_type"),
                ) {
                    types.insert(id.to_string(), t.clone());
                }
            }
            "custom" => {
                let (Some(kind), Some(id)) = (
                    v.get("type").and_then(Value::as_str),
                    v.get("task_id").and_then(Value::as_str),
                ) else {
                    continue;
                };
                let s = match kind {
                    "task_started" | "task_running" => "running",
                    "task_completed" => "completed",
                    "task_failed" | "task_cancelled" | "task_timed_out" => "failed",
                    _ => continue,
                };
                if !status.contains_key(id) {
                    order.push(id.to_string());
                }
                status.insert(id.to_string(), json!(s));
            }
            _ => {}
        }
    }
    order
        .into_iter()
        .map(|id| {
            json!({
                "namespace": [format!("tools:{id}")],
                "status": status.get(&id).cloned().unwrap_or(json!("running")),
                "graph_name": types.get(&id).cloned().unwrap_or(json!("subagent")),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, method: &'static str, size: usize) -> Arc<ProtoEvent> {
        Arc::new(ProtoEvent::new(
            seq,
            format!("r:{seq}"),
            method,
            Vec::new(),
            None,
            0,
            json!({"pad": "x".repeat(size)}),
        ))
    }

    #[test]
    fn a_socket_sends_what_its_subscriptions_want_and_keeps_a_bounded_buffer() {
        let mut s = Socket::default();
        s.subs.push(Sub {
            id: "a".into(),
            filter: Filter {
                channels: vec!["values".into()],
                namespaces: None,
                depth: None,
            },
            since: Some(1),
        });
        assert!(!s.offer(event(1, "values", 1)), "at or below since");
        assert!(s.offer(event(2, "values", 1)));
        assert!(!s.offer(event(3, "messages", 1)));
        assert_eq!(s.buffer.len(), 3);
        // A late subscription replays what it missed, once.
        let mut replay = Vec::new();
        let r = subscribe(
            json!({"channels": ["messages", "values"]})
                .as_object()
                .unwrap(),
            Some(&mut s),
            &mut replay,
        )
        .unwrap();
        assert_eq!(r["replayed_events"], 2);
        assert_eq!(replay.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 3]);
        // Big events push old ones out.
        for i in 0..20 {
            s.offer(event(10 + i, "values", SOCKET_BUFFER_BYTES / 10));
        }
        let bytes: usize = s.buffer.iter().map(|(e, _)| e.json.len()).sum();
        assert!(
            bytes <= SOCKET_BUFFER_BYTES && s.buffer.len() < 12,
            "{}",
            s.buffer.len()
        );
    }
}
