//! The single normalisation of every run-creating request (thread runs, stateless runs,
//! batch items, cron ticks): validation into typed field errors, graph-id → assistant mapping,
//! config/context merge, checkpoint forks, multitask strategy, then the atomic
//! `RunStore::create_run` and the cancellation of in-flight runs it reports.

use crate::error::{Result, RuntimeError};
use crate::kwargs::{CheckpointTarget, Durability, OnDisconnect, RunConfig, RunKwargs};
use crate::runtime::RuntimeHandle;
use fawn_agent::Breakpoints;
use fawn_checkpoint::{
    Assistant, CancelAction, JsonMap, MultitaskStrategy, NewRun, Run, StoreError,
};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// A run as asked for: the LangGraph `RunCreate` shape, which is also what a cron stores as
/// its payload (the scheduler here reads it back). Fields are read leniently (`null` =
/// absent) and validated by hand, so that every problem is a [`RuntimeError::InvalidField`]
/// naming its field.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct RunCreate {
    pub assistant_id: Option<Value>,
    pub input: Option<Value>,
    pub command: Option<Value>,
    pub metadata: Option<Value>,
    pub config: Option<Value>,
    pub context: Option<Value>,
    pub stream_mode: Option<Value>,
    pub stream_subgraphs: Option<Value>,
    pub stream_resumable: Option<Value>,
    pub on_disconnect: Option<Value>,
    pub interrupt_before: Option<Value>,
    pub interrupt_after: Option<Value>,
    pub checkpoint: Option<Value>,
    pub checkpoint_id: Option<Value>,
    pub multitask_strategy: Option<Value>,
    pub if_not_exists: Option<Value>,
    pub on_completion: Option<Value>,
    pub after_seconds: Option<Value>,
    pub webhook: Option<Value>,
    pub feedback_keys: Option<Value>,
    pub durability: Option<Value>,
    pub checkpoint_during: Option<Value>,
    /// The authenticated user the run acts for (never read from the body): it becomes the
    /// run's `configurable.user_id` and the `owner` of a thread the run creates. `None`
    /// when authentication is off.
    #[serde(skip)]
    pub owner: Option<String>,
    /// Started by the thread-centric protocol (`POST /threads/{id}/commands`, never read
    /// from a body): the run streams [`PROTOCOL_STREAM_MODES`], resumably, whatever
    /// `stream_mode` says, since its protocol events are projected from them.
    #[serde(skip)]
    pub protocol: bool,
}

/// The thread metadata key naming the user a thread belongs to.
pub const OWNER_KEY: &str = "owner";

/// Where the run goes.
#[derive(Debug, Clone)]
pub enum RunTarget {
    /// `POST /threads/{id}/runs*`.
    Thread(String),
    /// `POST /runs*`: a temporary thread.
    Stateless,
    /// A cron tick on a fresh thread; `keep` keeps it afterwards.
    CronStateless { keep: bool },
}

/// Every stream mode a run may ask for on these routes.
pub const STREAM_MODES: &[&str] = &[
    "values",
    "updates",
    "messages",
    "messages-tuple",
    "custom",
    "debug",
    "events",
    "tasks",
    "checkpoints",
];

/// What a run started by the thread-centric protocol streams: every mode the protocol's
/// channels are projected from, `tools` (tool call starts and ends) included, which no
/// `RunCreate` body may ask for.
pub const PROTOCOL_STREAM_MODES: &[&str] = &[
    "values",
    "updates",
    "messages-tuple",
    "custom",
    "tasks",
    "checkpoints",
    "tools",
];

/// A created run and how its creator should treat it.
#[derive(Debug, Clone)]
pub struct CreatedRun {
    pub run: Run,
    pub resumable: bool,
    pub cancel_on_disconnect: bool,
    pub stateless: bool,
}

fn present(v: &Option<Value>) -> Option<&Value> {
    v.as_ref().filter(|v| !v.is_null())
}

fn object(field: &str, v: &Option<Value>) -> Result<JsonMap> {
    match present(v) {
        None => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(_) => Err(RuntimeError::invalid_field(field, "must be an object")),
    }
}

fn boolean(field: &str, v: &Option<Value>) -> Result<bool> {
    match present(v) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(RuntimeError::invalid_field(field, "must be a boolean")),
    }
}

fn choice<'a>(
    field: &str,
    v: &'a Option<Value>,
    allowed: &[&'a str],
    default: &'a str,
) -> Result<&'a str> {
    match present(v) {
        None => Ok(default),
        Some(Value::String(s)) => allowed
            .iter()
            .find(|a| **a == s.as_str())
            .copied()
            .ok_or_else(|| {
                RuntimeError::invalid_field(field, format!("'{s}' is not one of {allowed:?}"))
            }),
        Some(_) => Err(RuntimeError::invalid_field(
            field,
            format!("must be one of {allowed:?}"),
        )),
    }
}

/// `stream_mode`: a string or a list; empty/absent → `["values"]`.
pub fn stream_modes(v: &Option<Value>) -> Result<Vec<String>> {
    let items: Vec<&Value> = match present(v) {
        None => Vec::new(),
        Some(Value::Array(a)) => a.iter().collect(),
        Some(other) => vec![other],
    };
    let mut out: Vec<String> = Vec::new();
    for item in items {
        let Some(s) = item.as_str() else {
            return Err(RuntimeError::invalid_field(
                "stream_mode",
                "must be a string or a list of strings",
            ));
        };
        if !STREAM_MODES.contains(&s) {
            return Err(RuntimeError::invalid(format!(
                "Invalid stream_mode '{s}'. Expected one of {STREAM_MODES:?}"
            )));
        }
        if !out.iter().any(|o| o == s) {
            out.push(s.to_string());
        }
    }
    if out.is_empty() {
        out.push("values".to_string());
    }
    Ok(out)
}

fn breakpoints(field: &str, v: &Option<Value>) -> Result<Breakpoints> {
    match present(v) {
        None => Ok(Breakpoints::None),
        Some(Value::String(s)) if s == "*" => Ok(Breakpoints::All),
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => Ok(Breakpoints::Nodes(
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
        )),
        Some(_) => Err(RuntimeError::invalid_field(
            field,
            "must be \"*\" or a list of node names",
        )),
    }
}

/// `command` → the `fawn_state::Command` JSON (goto normalised to node names).
fn command(v: &Option<Value>) -> Result<Option<Value>> {
    let Some(v) = present(v) else {
        return Ok(None);
    };
    let Value::Object(m) = v else {
        return Err(RuntimeError::invalid_field("command", "must be an object"));
    };
    let mut out = Map::new();
    if let Some(r) = m.get("resume").filter(|r| !r.is_null()) {
        out.insert("resume".into(), r.clone());
    }
    if let Some(u) = m.get("update").filter(|u| !u.is_null()) {
        match u {
            Value::Object(_) => {}
            Value::Array(pairs)
                if pairs.iter().all(|p| {
                    p.as_array()
                        .is_some_and(|p| p.len() == 2 && p[0].is_string())
                }) => {}
            _ => {
                return Err(RuntimeError::invalid_field(
                    "command.update",
                    "must be an object or a list of [key, value] pairs",
                ));
            }
        }
        if let Value::Object(_) = u {
            let update = fawn_state::StateUpdate::from_value(u.clone())
                .map_err(|e| RuntimeError::invalid_field("command.update", e.to_string()))?;
            check_message_types(&update)
                .map_err(|e| RuntimeError::invalid_field("command.update", e.to_string()))?;
        }
        out.insert("update".into(), u.clone());
    }
    if let Some(g) = m.get("goto").filter(|g| !g.is_null()) {
        let items: Vec<&Value> = match g {
            Value::Array(a) => a.iter().collect(),
            other => vec![other],
        };
        let mut nodes = Vec::new();
        for i in items {
            match i {
                Value::String(s) => nodes.push(Value::String(s.clone())),
                Value::Object(o) if o.get("node").is_some_and(Value::is_string) => {
                    nodes.push(o["node"].clone())
                }
                _ => {
                    return Err(RuntimeError::invalid_field(
                        "command.goto",
                        "must be a node name, a Send {node, input}, or a list of them",
                    ));
                }
            }
        }
        out.insert("goto".into(), Value::Array(nodes));
    }
    Ok(Some(Value::Object(out)))
}

/// Messages a client writes must have a type LangChain knows (`convert_to_messages` raises
/// on anything else). Stored as they are, they would reach the model on every later turn of
/// the thread and fail each of them.
pub fn check_message_types(update: &fawn_state::StateUpdate) -> Result<(), String> {
    for (i, m) in update.messages.iter().flatten().enumerate() {
        if let fawn_state::MessageKind::Other(t) = &m.kind
            && !m.is_chunk()
        {
            return Err(format!(
                "`messages[{i}]`: unexpected message type '{t}'; use one of 'human', 'user', \
                 'ai', 'assistant', 'function', 'tool', 'system', or 'developer'"
            ));
        }
    }
    Ok(())
}

fn is_uuid(s: &str) -> bool {
    uuid::Uuid::parse_str(s).is_ok()
}

/// Resolves `assistant_id` (a UUID or a graph id) to an assistant.
pub async fn resolve_assistant(rt: &RuntimeHandle, v: &Option<Value>) -> Result<Assistant> {
    let id = match present(v) {
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
        Some(_) => {
            return Err(RuntimeError::invalid_field(
                "assistant_id",
                "must be a string",
            ));
        }
        None => {
            return Err(RuntimeError::missing_field("assistant_id"));
        }
    };
    let uuid = if is_uuid(&id) {
        uuid::Uuid::parse_str(&id)
            .map(|u| u.hyphenated().to_string())
            .map_err(|_| RuntimeError::invalid("Invalid assistant ID: must be a UUID"))?
    } else if let Some(u) = rt.graphs.assistant_for_graph(&id) {
        u
    } else {
        return Err(RuntimeError::invalid(format!(
            "Invalid assistant: '{id}'. Must be either a valid assistant UUID or one of the registered graphs: {}",
            rt.graphs.list_text()
        )));
    };
    match rt.assistant(&uuid).await {
        Ok(Some(a)) => Ok(a),
        Ok(None) => Err(RuntimeError::not_found("Thread or assistant not found.")),
        Err(e) => Err(RuntimeError::store("loading the assistant", e)),
    }
}

/// Headers the caller copies into `configurable` (which ones is the caller's rule: the
/// server's `config_headers`); the first value of a name wins.
fn header_config(headers: &[(String, String)], into: &mut JsonMap) {
    for (name, value) in headers {
        into.entry(name.clone())
            .or_insert_with(|| Value::String(value.clone()));
    }
}

/// A validated run, ready to be written.
#[derive(Debug, Clone)]
pub struct PreparedRun {
    new_run: NewRun,
    resumable: bool,
    cancel_on_disconnect: bool,
    stateless: bool,
    multitask: MultitaskStrategy,
    after_seconds: f64,
}

/// Validates and creates a run.
pub async fn create_run(
    rt: &RuntimeHandle,
    body: RunCreate,
    target: RunTarget,
    headers: &[(String, String)],
) -> Result<CreatedRun> {
    let prepared = prepare_run(rt, body, target, headers).await?;
    commit_run(rt, prepared).await
}

/// Validates a run request and builds what `create_run` stores; writes nothing.
pub async fn prepare_run(
    rt: &RuntimeHandle,
    body: RunCreate,
    target: RunTarget,
    headers: &[(String, String)],
) -> Result<PreparedRun> {
    let assistant = resolve_assistant(rt, &body.assistant_id).await?;
    let owner = body.owner.clone();
    let graph_id = assistant.graph_id.clone();
    if !rt.graphs.contains(&graph_id) {
        return Err(RuntimeError::not_found(format!(
            "Graph '{graph_id}' not found. Expected one of: {}",
            rt.graphs.list_text()
        )));
    }
    let stateless = !matches!(target, RunTarget::Thread(_));
    let user_meta = object("metadata", &body.metadata)?;
    let config = object("config", &body.config)?;
    let user_context = object("context", &body.context)?;
    let user_configurable = match config.get("configurable") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => {
            return Err(RuntimeError::invalid_field(
                "config.configurable",
                "must be an object",
            ));
        }
    };
    if !user_configurable.is_empty() && !user_context.is_empty() {
        return Err(RuntimeError::rejected(
            "Cannot specify both configurable and context. Prefer setting context alone. \
             Context was introduced in LangGraph 0.6.0 and is the long term planned \
             replacement for configurable.",
        ));
    }
    let tags = match config.get("tags") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect::<Vec<_>>(),
        Some(_) => {
            return Err(RuntimeError::invalid_field(
                "config.tags",
                "must be a list of strings",
            ));
        }
    };
    let recursion_limit = config
        .get("recursion_limit")
        .cloned()
        .filter(|v| !v.is_null())
        .or_else(|| assistant.config.get("recursion_limit").cloned());
    let modes = if body.protocol {
        PROTOCOL_STREAM_MODES
            .iter()
            .map(|m| m.to_string())
            .collect()
    } else {
        stream_modes(&body.stream_mode)?
    };
    let subgraphs = boolean("stream_subgraphs", &body.stream_subgraphs)?;
    let resumable = body.protocol || boolean("stream_resumable", &body.stream_resumable)?;
    let on_disconnect = OnDisconnect::from(Some(
        choice(
            "on_disconnect",
            &body.on_disconnect,
            &OnDisconnect::NAMES,
            "continue",
        )?
        .to_string(),
    ));
    let interrupt_before = breakpoints("interrupt_before", &body.interrupt_before)?;
    let interrupt_after = breakpoints("interrupt_after", &body.interrupt_after)?;
    let command = command(&body.command)?;
    let multitask = match choice(
        "multitask_strategy",
        &body.multitask_strategy,
        &["reject", "interrupt", "rollback", "enqueue"],
        "enqueue",
    )? {
        "reject" => MultitaskStrategy::Reject,
        "interrupt" => MultitaskStrategy::Interrupt,
        "rollback" => MultitaskStrategy::Rollback,
        _ => MultitaskStrategy::Enqueue,
    };
    let if_not_exists = choice(
        "if_not_exists",
        &body.if_not_exists,
        &["create", "reject"],
        "reject",
    )?;
    let on_completion = choice(
        "on_completion",
        &body.on_completion,
        &["delete", "keep"],
        "delete",
    )?;
    let after_seconds = match present(&body.after_seconds) {
        None => 0.0,
        Some(Value::Number(n)) => match n.as_f64() {
            Some(f) if f >= 0.0 && f.is_finite() && f <= 31_536_000.0 => f,
            _ => {
                return Err(RuntimeError::invalid_field(
                    "after_seconds",
                    "must be a number between 0 and 31536000",
                ));
            }
        },
        Some(_) => {
            return Err(RuntimeError::invalid_field(
                "after_seconds",
                "must be a number",
            ));
        }
    };
    let webhook = match present(&body.webhook) {
        None => None,
        Some(Value::String(s)) => Some(rt.webhook_policy.validate_url(s)?),
        Some(_) => {
            return Err(RuntimeError::invalid_field(
                "webhook",
                "must be a URL string",
            ));
        }
    };
    let durability = Durability::from(Some(
        choice("durability", &body.durability, &Durability::NAMES, "async")?.to_string(),
    ));
    let checkpoint_during = match present(&body.checkpoint_during) {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(RuntimeError::invalid_field(
                "checkpoint_during",
                "must be a boolean",
            ));
        }
    };
    let feedback_keys = present(&body.feedback_keys).cloned();
    // Input must be a state update the graph can read.
    let input = present(&body.input).cloned();
    if let Some(i) = &input {
        let update = fawn_state::StateUpdate::from_value(i.clone())
            .map_err(|e| RuntimeError::invalid_field("input", e.to_string()))?;
        check_message_types(&update)
            .map_err(|e| RuntimeError::invalid_field("input", e.to_string()))?;
    }
    // Checkpoint to start from.
    let mut checkpoint = object("checkpoint", &body.checkpoint)?;
    checkpoint.remove("thread_id");
    match present(&body.checkpoint_id) {
        None => {}
        Some(Value::String(s)) => {
            checkpoint.insert("checkpoint_id".into(), Value::String(s.clone()));
        }
        Some(_) => return Err(RuntimeError::invalid("Invalid checkpoint ID")),
    }
    if let Some(id) = checkpoint.get("checkpoint_id").filter(|v| !v.is_null()) {
        match id.as_str() {
            Some(s) if is_uuid(s) => {}
            _ => return Err(RuntimeError::invalid("Invalid checkpoint ID")),
        }
    } else {
        checkpoint.remove("checkpoint_id");
    }
    let checkpoint_ns = checkpoint
        .get("checkpoint_ns")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();

    let (thread_id, create_thread) = match &target {
        RunTarget::Thread(tid) => {
            if !stateless && !checkpoint.is_empty() {
                // A stateless run never sees these fields; a thread run may fork.
            }
            (
                tid.clone(),
                (if_not_exists == "create")
                    .then(|| thread_create_meta(&graph_id, &assistant, owner.as_deref())),
            )
        }
        RunTarget::Stateless | RunTarget::CronStateless { .. } => {
            if command.as_ref().is_some_and(|c| c.get("resume").is_some()) {
                return Err(RuntimeError::rejected(
                    "You must provide a thread_id when resuming.",
                ));
            }
            (
                uuid::Uuid::now_v7().to_string(),
                Some(thread_create_meta(&graph_id, &assistant, owner.as_deref())),
            )
        }
    };
    let temporary = match &target {
        RunTarget::Thread(_) => false,
        RunTarget::Stateless => on_completion != "keep",
        RunTarget::CronStateless { keep } => !keep,
    };
    if let (RunTarget::Thread(tid), Some(cid)) = (
        &target,
        checkpoint.get("checkpoint_id").and_then(Value::as_str),
    ) {
        match rt
            .store
            .get_checkpoint(tid, &checkpoint_ns, Some(cid))
            .await
        {
            Ok(Some(_)) => {}
            Ok(None) => {
                if rt.store.get_thread(tid).await.ok().flatten().is_none() {
                    return Err(RuntimeError::not_found("Thread or assistant not found."));
                }
                return Err(RuntimeError::not_found(format!(
                    "Checkpoint {cid} not found"
                )));
            }
            Err(e) => return Err(RuntimeError::store("loading the checkpoint", e)),
        }
    }

    let run_id = uuid::Uuid::now_v7().to_string();
    // configurable = assistant's ⊕ run's ⊕ what the server adds.
    let mut configurable = match assistant.config.get("configurable") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    configurable.extend(user_configurable.clone());
    let mut context = assistant.context.clone();
    context.extend(user_context);
    // Graphs that read `configurable` see the context too (as the reference servers do).
    for (k, v) in &context {
        configurable.entry(k.clone()).or_insert_with(|| v.clone());
    }
    header_config(headers, &mut configurable);
    configurable.insert("run_id".into(), json!(run_id));
    configurable.insert("thread_id".into(), json!(thread_id));
    configurable.insert("graph_id".into(), json!(graph_id));
    configurable.insert("assistant_id".into(), json!(assistant.assistant_id));
    match &owner {
        // The server's identity wins over anything the client sent.
        Some(u) => {
            configurable.insert(crate::kwargs::USER_ID.into(), json!(u));
        }
        None => {
            configurable
                .entry(crate::kwargs::USER_ID.to_string())
                .or_insert_with(|| json!(""));
        }
    }
    if let Some(cid) = checkpoint.get("checkpoint_id") {
        configurable.insert("checkpoint_id".into(), cid.clone());
        configurable.insert("checkpoint_ns".into(), json!(checkpoint_ns));
    }
    let mut metadata = assistant.metadata.clone();
    metadata.extend(user_meta);
    metadata.insert("graph_id".into(), json!(graph_id));
    metadata.insert("assistant_id".into(), json!(assistant.assistant_id));

    let checkpoint = match checkpoint.remove("checkpoint_id") {
        Some(Value::String(checkpoint_id)) => Some(CheckpointTarget {
            checkpoint_id,
            checkpoint_ns: match checkpoint.remove("checkpoint_ns") {
                Some(Value::String(ns)) => Some(ns),
                _ => None,
            },
            extra: checkpoint,
        }),
        _ => None,
    };
    let kwargs = RunKwargs {
        input,
        command,
        config: RunConfig {
            configurable,
            tags,
            recursion_limit,
            extra: JsonMap::new(),
        },
        context,
        stream_mode: modes,
        interrupt_before,
        interrupt_after,
        webhook,
        feedback_keys,
        temporary,
        subgraphs,
        resumable,
        checkpoint_during,
        durability,
        on_disconnect,
        checkpoint,
        graph_id: Some(graph_id.clone()),
        origin: crate::kwargs::RunOrigin::current(),
        extra: JsonMap::new(),
    }
    .to_map();

    let new_run = NewRun {
        run_id: Some(run_id.clone()),
        thread_id: thread_id.clone(),
        assistant_id: assistant.assistant_id.clone(),
        metadata,
        kwargs,
        multitask_strategy: if stateless {
            MultitaskStrategy::Enqueue
        } else {
            multitask
        },
        after_seconds,
        create_thread_if_missing: create_thread,
        claim: None,
    };
    Ok(PreparedRun {
        new_run,
        resumable,
        cancel_on_disconnect: on_disconnect == OnDisconnect::Cancel,
        stateless,
        multitask,
        after_seconds,
    })
}

/// Writes a prepared run (atomically with the thread's multitask rule), cancels the
/// in-flight runs its strategy replaces, and hands it to the queue.
pub async fn commit_run(rt: &RuntimeHandle, p: PreparedRun) -> Result<CreatedRun> {
    let run_id = p.new_run.run_id.clone().unwrap_or_default();
    let thread_id = p.new_run.thread_id.clone();
    // The log exists before the run can start, so a creator's stream sees every event.
    let log = rt.broker.open(&run_id, &thread_id, p.resumable);
    if log.begin_attempt(1) {
        crate::runs::publish_metadata(&log, &run_id, &thread_id, 1);
    }
    // A free slot here lets the creation claim the run in the same write.
    let mut new_run = p.new_run;
    let slot = crate::runs::reserve(rt, p.after_seconds).map(|(permit, claim)| {
        new_run.claim = Some(claim);
        permit
    });
    let created = match rt.store.create_run(new_run).await {
        Ok(c) => c,
        Err(e) => {
            rt.broker.remove(&run_id);
            return Err(match e {
                StoreError::Conflict(_) => RuntimeError::conflict(
                    "Thread is already running a task. Wait for it to finish or choose a different multitask strategy.",
                ),
                StoreError::NotFound(_) => {
                    RuntimeError::not_found("Thread or assistant not found.")
                }
                other => RuntimeError::store("creating the run", other),
            });
        }
    };
    if !p.stateless
        && matches!(
            p.multitask,
            MultitaskStrategy::Interrupt | MultitaskStrategy::Rollback
        )
        && !created.inflight.is_empty()
    {
        let action = if p.multitask == MultitaskStrategy::Rollback {
            CancelAction::Rollback
        } else {
            CancelAction::Interrupt
        };
        let ids: Vec<String> = created.inflight.iter().map(|r| r.run_id.clone()).collect();
        if let Err(e) = crate::runs::cancel(
            rt,
            fawn_checkpoint::CancelTarget::Runs {
                thread_id: Some(thread_id.clone()),
                run_ids: ids,
            },
            action,
        )
        .await
        {
            tracing::warn!(run_id = %run_id, error = %e, "could not cancel in-flight runs");
        }
    }
    fawn_telemetry::metrics().runs_created.inc();
    log.time_first_event();
    crate::runs::submit(rt, &created.run, p.after_seconds, created.claimed.zip(slot));
    Ok(CreatedRun {
        run: created.run,
        resumable: p.resumable,
        cancel_on_disconnect: p.cancel_on_disconnect,
        stateless: p.stateless,
    })
}

fn thread_create_meta(graph_id: &str, assistant: &Assistant, owner: Option<&str>) -> JsonMap {
    let mut m = Map::new();
    m.insert("graph_id".into(), json!(graph_id));
    m.insert("assistant_id".into(), json!(assistant.assistant_id));
    if let Some(o) = owner {
        m.insert(OWNER_KEY.into(), json!(o));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_mode_forms() {
        assert_eq!(stream_modes(&None).unwrap(), vec!["values"]);
        assert_eq!(
            stream_modes(&Some(json!("updates"))).unwrap(),
            vec!["updates"]
        );
        assert_eq!(
            stream_modes(&Some(json!(["values", "messages-tuple", "values"]))).unwrap(),
            vec!["values", "messages-tuple"]
        );
        assert_eq!(stream_modes(&Some(json!([]))).unwrap(), vec!["values"]);
        assert!(matches!(
            stream_modes(&Some(json!(["lifecycle"]))),
            Err(RuntimeError::Invalid(_))
        ));
        assert!(matches!(
            stream_modes(&Some(json!(3))),
            Err(RuntimeError::InvalidField { path, .. }) if path == "stream_mode"
        ));
    }

    #[test]
    fn command_normalises_goto() {
        let c = command(&Some(
            json!({"resume": "yes", "goto": {"node": "a", "input": 1}}),
        ))
        .unwrap()
        .unwrap();
        assert_eq!(c, json!({"resume": "yes", "goto": ["a"]}));
        assert!(matches!(
            command(&Some(json!({"update": 3}))),
            Err(RuntimeError::InvalidField { path, .. }) if path == "command.update"
        ));
        assert!(matches!(
            command(&Some(json!("x"))),
            Err(RuntimeError::InvalidField { path, reason }) if path == "command" && reason == "must be an object"
        ));
    }
}
