//! Checks that need more than types: required names, uniqueness, ranges DeerFlow enforces
//! (errors) or clamps (warnings, value clamped). `use:` values of models and tools are not
//! checked here: the llm and tools crates own those registries.

use crate::keypath;
use crate::loader::Origins;
use crate::typed::Report;
use crate::types::*;
use std::collections::HashMap;

fn blank(s: &str) -> bool {
    s.trim().is_empty()
}

fn opt_blank(s: &Option<String>) -> bool {
    s.as_deref().is_none_or(blank)
}

pub(crate) fn app(app: &mut AppConfig, origins: &Origins, r: &mut Report) {
    models(app, &origins.models, r);
    tools(app, origins, r);
    let model_names: Vec<String> = app.models.iter().map(|m| m.name.clone()).collect();
    let known_model = |name: &str| model_names.iter().any(|m| m == name);
    let check_model_ref = |path: &str, name: &Option<String>, r: &mut Report| {
        if let Some(n) = name
            && !known_model(n)
        {
            r.warn(
                path,
                format!("no model named \"{n}\" is configured; the run's model is used"),
            );
        }
    };

    // sandbox
    if app.sandbox.bash_command_timeout == 0 {
        r.error("sandbox.bash_command_timeout", "must be greater than 0");
    }
    for (i, m) in app.sandbox.mounts.iter().enumerate() {
        let base = keypath::index("sandbox.mounts", i);
        if blank(&m.host_path) {
            r.error(keypath::key(&base, "host_path"), "is required");
        }
        if !m.container_path.starts_with('/') {
            r.error(
                keypath::key(&base, "container_path"),
                "must be an absolute path",
            );
        }
    }

    // title (DeerFlow: 1 <= max_words <= 20, 10 <= max_chars <= 200)
    let t = &app.title;
    if !(1..=20).contains(&t.max_words) {
        r.error("title.max_words", "must be between 1 and 20");
    }
    if !(10..=200).contains(&t.max_chars) {
        r.error("title.max_chars", "must be between 10 and 200");
    }
    check_model_ref("title.model_name", &t.model_name, r);

    // summarization
    // (trigger entries are checked as they are read, with their own index)
    let s = &app.summarization;
    if s.trigger.is_none() && s.enabled {
        r.warn(
            "summarization.trigger",
            "summarization is enabled but has no trigger, so it never runs",
        );
    }
    context_size("summarization.keep", &s.keep, r);
    check_model_ref("summarization.model_name", &s.model_name, r);

    // memory
    let m = &app.memory;
    if !matches!(m.mode.as_str(), "middleware" | "tool") {
        r.error(
            "memory.mode",
            format!("expected one of middleware, tool, got \"{}\"", m.mode),
        );
    }
    if !(0.0..=1.0).contains(&m.fact_confidence_threshold) {
        r.error(
            "memory.fact_confidence_threshold",
            "must be between 0 and 1",
        );
    }
    check_model_ref("memory.model_name", &m.model_name, r);

    // subagents
    let sa = &mut app.subagents;
    if sa.timeout_seconds == 0 {
        r.error("subagents.timeout_seconds", "must be at least 1");
    }
    if sa.max_turns == Some(0) {
        r.error("subagents.max_turns", "must be at least 1");
    }
    if sa.max_total_per_run == 0 {
        r.error("subagents.max_total_per_run", "must be at least 1");
    } else if sa.max_total_per_run > 50 {
        r.warn("subagents.max_total_per_run", "above 50; clamped to 50");
        sa.max_total_per_run = 50;
    }
    if !(1..=4).contains(&sa.max_concurrent) {
        let clamped = sa.max_concurrent.clamp(1, 4);
        r.warn(
            "subagents.max_concurrent",
            format!("outside 1..=4; clamped to {clamped}"),
        );
        sa.max_concurrent = clamped;
    }
    let subagent_refs: Vec<(String, Option<String>)> = sa
        .agents
        .iter()
        .map(|(name, o)| {
            (
                keypath::key(&keypath::key("subagents.agents", name), "model"),
                o.model.clone(),
            )
        })
        .chain(sa.custom_agents.iter().map(|(name, c)| {
            (
                keypath::key(&keypath::key("subagents.custom_agents", name), "model"),
                c.model.clone().filter(|m| m != "inherit"),
            )
        }))
        .collect();
    for (name, o) in &sa.agents {
        let base = keypath::key("subagents.agents", name);
        if o.timeout_seconds == Some(0) {
            r.error(keypath::key(&base, "timeout_seconds"), "must be at least 1");
        }
        if o.max_turns == Some(0) {
            r.error(keypath::key(&base, "max_turns"), "must be at least 1");
        }
        if o.model.as_deref().is_some_and(blank) {
            r.error(keypath::key(&base, "model"), "must not be empty");
        }
    }
    for (name, c) in &sa.custom_agents {
        let base = keypath::key("subagents.custom_agents", name);
        if blank(&c.description) {
            r.error(keypath::key(&base, "description"), "is required");
        }
        if blank(&c.system_prompt) {
            r.error(keypath::key(&base, "system_prompt"), "is required");
        }
        if c.max_turns == Some(0) {
            r.error(keypath::key(&base, "max_turns"), "must be at least 1");
        }
        if c.timeout_seconds == Some(0) {
            r.error(keypath::key(&base, "timeout_seconds"), "must be at least 1");
        }
    }
    for (path, model) in subagent_refs {
        if model.as_deref().is_some_and(|m| !blank(m)) {
            check_model_ref(&path, &model, r);
        }
    }

    // loop detection (DeerFlow: every threshold >= 1, hard limits >= warnings)
    let l = &app.loop_detection;
    for (key, v) in [
        ("warn_threshold", l.warn_threshold as usize),
        ("hard_limit", l.hard_limit as usize),
        ("window_size", l.window_size),
        ("max_tracked_threads", l.max_tracked_threads),
        ("tool_freq_warn", l.tool_freq_warn as usize),
        ("tool_freq_hard_limit", l.tool_freq_hard_limit as usize),
    ] {
        if v == 0 {
            r.error(keypath::key("loop_detection", key), "must be at least 1");
        }
    }
    if l.hard_limit < l.warn_threshold {
        r.error(
            "loop_detection.hard_limit",
            "must be greater than or equal to warn_threshold",
        );
    }
    if l.tool_freq_hard_limit < l.tool_freq_warn {
        r.error(
            "loop_detection.tool_freq_hard_limit",
            "must be greater than or equal to tool_freq_warn",
        );
    }
    for (tool, o) in &l.tool_freq_overrides {
        let base = keypath::key("loop_detection.tool_freq_overrides", tool);
        match (o.warn, o.hard_limit) {
            (None, _) => r.error(keypath::key(&base, "warn"), "is required"),
            (Some(0), _) => r.error(keypath::key(&base, "warn"), "must be at least 1"),
            _ => {}
        }
        match (o.warn, o.hard_limit) {
            (_, None) => r.error(keypath::key(&base, "hard_limit"), "is required"),
            (_, Some(0)) => r.error(keypath::key(&base, "hard_limit"), "must be at least 1"),
            (Some(w), Some(h)) if h < w => r.error(
                keypath::key(&base, "hard_limit"),
                "must be greater than or equal to warn",
            ),
            _ => {}
        }
    }

    // database
    if let Some(db) = &app.database {
        let backend = db.backend.as_deref().unwrap_or("sqlite");
        if !matches!(backend, "sqlite" | "postgres" | "memory") {
            r.error(
                "database.backend",
                format!("expected one of sqlite, postgres, memory, got \"{backend}\""),
            );
        }
        if backend == "postgres" && opt_blank(&db.url) {
            r.error(
                "database.postgres_url",
                "is required when backend is postgres (or set DATABASE_URL)",
            );
        }
        if let Some(mode) = &db.checkpoint_channel_mode
            && !matches!(mode.as_str(), "full" | "delta")
        {
            r.error(
                "database.checkpoint_channel_mode",
                format!("expected one of full, delta, got \"{mode}\""),
            );
        }
    }
    if let Some(cp) = &app.checkpointer
        && let Some(kind) = &cp.kind
        && !matches!(kind.as_str(), "memory" | "sqlite" | "postgres")
    {
        r.error(
            "checkpointer.type",
            format!("expected one of memory, sqlite, postgres, got \"{kind}\""),
        );
    }
    if let Some(cp) = &app.checkpointer {
        retention(cp, r);
    }

    // llm_call
    if app.llm_call.retry_max_attempts == 0 {
        r.error("llm_call.retry_max_attempts", "must be at least 1");
    }
    if app.max_recursion_limit == 0 {
        r.error("max_recursion_limit", "must be at least 1");
    }
}

/// `checkpointer.ttl` and `checkpointer.retention`.
fn retention(cp: &crate::CheckpointerConfig, r: &mut Report) {
    // Ten years, in minutes: the bound of thread TTLs.
    const MAX_MINUTES: f64 = 5_256_000.0;
    let positive_minutes = |path: &str, v: f64, r: &mut Report| {
        if !(v > 0.0 && v <= MAX_MINUTES) {
            r.error(
                path,
                format!("must be a number of minutes above 0 and at most {MAX_MINUTES}, got {v}"),
            );
        }
    };
    if let Some(ttl) = &cp.ttl {
        if !matches!(ttl.strategy.as_str(), "delete" | "keep_latest") {
            r.error(
                "checkpointer.ttl.strategy",
                format!(
                    "expected one of delete, keep_latest, got \"{}\"",
                    ttl.strategy
                ),
            );
        }
        positive_minutes(
            "checkpointer.ttl.sweep_interval_minutes",
            ttl.sweep_interval_minutes,
            r,
        );
        if let Some(d) = ttl.default_ttl {
            positive_minutes("checkpointer.ttl.default_ttl", d, r);
        }
    }
    if let Some(ret) = &cp.retention {
        if ret.keep_turns == Some(0) {
            r.error(
                "checkpointer.retention.keep_turns",
                "must be at least 1 (the latest turn keeps its steps); leave it unset to prune by age alone",
            );
        }
        for (key, v) in [("keep_days", ret.keep_days), ("runs_days", ret.runs_days)] {
            if let Some(v) = v
                && !(0.0..=MAX_MINUTES / 1440.0).contains(&v)
            {
                r.error(
                    format!("checkpointer.retention.{key}"),
                    format!("must be a number of days from 0 to 3650, got {v}"),
                );
            }
        }
        if ret.runs_days == Some(0.0) {
            r.error(
                "checkpointer.retention.runs_days",
                "must be above 0 (finished runs would go as soon as they end)",
            );
        }
        if !(1..=crate::RetentionConfig::MAX_BATCH).contains(&ret.batch) {
            r.error(
                "checkpointer.retention.batch",
                format!(
                    "must be between 1 and {}, got {}",
                    crate::RetentionConfig::MAX_BATCH,
                    ret.batch
                ),
            );
        }
    }
}

/// `{type, value}` as LangChain's summarization middleware accepts it.
pub(crate) fn context_size(path: &str, c: &ContextSize, r: &mut Report) {
    let v = c.value;
    match c.kind {
        ContextSizeKind::Fraction => {
            if !(v > 0.0 && v <= 1.0) {
                r.error(
                    keypath::key(path, "value"),
                    format!("a fraction must be greater than 0 and at most 1, got {v}"),
                );
            }
        }
        ContextSizeKind::Tokens | ContextSizeKind::Messages => {
            if !(v > 0.0 && v.fract() == 0.0 && v.is_finite()) {
                r.error(
                    keypath::key(path, "value"),
                    format!("must be a whole number greater than 0, got {v}"),
                );
            }
        }
    }
}

/// The original list index of parsed entry `pos`.
fn origin(origins: &[usize], pos: usize) -> usize {
    origins.get(pos).copied().unwrap_or(pos)
}

fn models(app: &AppConfig, origins: &[usize], r: &mut Report) {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (pos, m) in app.models.iter().enumerate() {
        let i = origin(origins, pos);
        let base = keypath::index("models", i);
        if blank(&m.name) {
            r.error(keypath::key(&base, "name"), "is required");
        } else if let Some(first) = seen.get(m.name.as_str()) {
            r.error(
                keypath::key(&base, "name"),
                format!("duplicate model name \"{}\" (also models[{first}])", m.name),
            );
        } else {
            seen.insert(&m.name, i);
        }
        if blank(&m.use_) {
            r.error(keypath::key(&base, "use"), "is required");
        }
        if opt_blank(&m.model) {
            r.error(keypath::key(&base, "model"), "is required");
        }
        if let Some(t) = m.timeout
            && !(t > 0.0 && t.is_finite())
        {
            r.error(keypath::key(&base, "timeout"), "must be greater than 0");
        }
        if !m.supports_thinking && m.when_thinking_enabled.is_some() {
            r.warn(
                keypath::key(&base, "when_thinking_enabled"),
                "ignored unless supports_thinking is true",
            );
        }
    }
}

fn tools(app: &AppConfig, origins: &Origins, r: &mut Report) {
    let mut groups: HashMap<&str, usize> = HashMap::new();
    for (pos, g) in app.tool_groups.iter().enumerate() {
        let i = origin(&origins.tool_groups, pos);
        let base = keypath::index("tool_groups", i);
        if blank(&g.name) {
            r.error(keypath::key(&base, "name"), "is required");
        } else if let Some(first) = groups.get(g.name.as_str()) {
            r.warn(
                keypath::key(&base, "name"),
                format!(
                    "duplicate tool group \"{}\" (also tool_groups[{first}])",
                    g.name
                ),
            );
        } else {
            groups.insert(&g.name, i);
        }
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (pos, t) in app.tools.iter().enumerate() {
        let i = origin(&origins.tools, pos);
        let base = keypath::index("tools", i);
        if blank(&t.name) {
            r.error(keypath::key(&base, "name"), "is required");
        } else if let Some(first) = seen.get(t.name.as_str()) {
            r.warn(
                keypath::key(&base, "name"),
                format!(
                    "duplicate tool name \"{}\" (also tools[{first}]); the first one is used",
                    t.name
                ),
            );
        } else {
            seen.insert(&t.name, i);
        }
        if blank(&t.use_) {
            r.error(keypath::key(&base, "use"), "is required");
        }
        if let Some(g) = &t.group
            && !groups.is_empty()
            && !groups.contains_key(g.as_str())
        {
            r.warn(
                keypath::key(&base, "group"),
                format!("tool group \"{g}\" is not declared in tool_groups"),
            );
        }
    }
}

pub(crate) fn extensions(ext: &ExtensionsConfig, r: &mut Report) {
    for (name, s) in &ext.mcp_servers {
        let base = keypath::key("mcpServers", name);
        // Problems of a disabled server do not keep Fawn from starting.
        let mut issue = |path: String, msg: String| {
            if s.enabled {
                r.error(path, msg);
            } else {
                r.warn(path, format!("{msg} (server is disabled)"));
            }
        };
        let kind = s
            .kind
            .as_deref()
            .unwrap_or("stdio")
            .trim()
            .to_ascii_lowercase();
        match kind.as_str() {
            "stdio" => {
                if opt_blank(&s.command) {
                    issue(
                        keypath::key(&base, "command"),
                        "is required for a stdio server".into(),
                    );
                }
            }
            "sse" | "http" | "streamable_http" | "streamable-http" | "streamablehttp" => {
                if opt_blank(&s.url) {
                    issue(
                        keypath::key(&base, "url"),
                        format!("is required for a {kind} server"),
                    );
                }
            }
            other => issue(
                keypath::key(&base, "type"),
                format!("expected one of stdio, sse, http, got \"{other}\""),
            ),
        }
        if let Some(o) = &s.oauth
            && o.enabled
        {
            if blank(&o.token_url) {
                issue(keypath::key(&base, "oauth.token_url"), "is required".into());
            }
            if !matches!(
                o.grant_type.as_str(),
                "client_credentials" | "refresh_token"
            ) {
                issue(
                    keypath::key(&base, "oauth.grant_type"),
                    format!(
                        "expected one of client_credentials, refresh_token, got \"{}\"",
                        o.grant_type
                    ),
                );
            }
        }
        if !(s.session_init_timeout > 0.0 && s.session_init_timeout.is_finite()) {
            issue(
                keypath::key(&base, "session_init_timeout"),
                "must be greater than 0".into(),
            );
        }
        if !(s.tool_call_timeout > 0.0 && s.tool_call_timeout.is_finite()) {
            issue(
                keypath::key(&base, "tool_call_timeout"),
                "must be greater than 0".into(),
            );
        }
    }
}
