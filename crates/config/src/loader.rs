//! Finding the files, reading them section by section, and building [`Settings`].

use crate::ConfigIssue;
use crate::keypath;
use crate::options::LoadOptions;
use crate::source::{self, Unset};
use crate::typed::{self, Report, fix_and_parse, list_entries, parse_section, parse_typed};
use crate::types::*;
use crate::validate;
use crate::{ConfigErrors, Loaded, Settings};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Top-level `config.yaml` sections DeerFlow knows and Fawn does not implement. Each gets one
/// warning saying it is ignored; any other unknown key gets an "unknown key" warning.
pub const IGNORED_DEERFLOW_SECTIONS: &[&str] = &[
    "a2a",
    "acp_agents",
    "agent_storage",
    "audio_input",
    "auth",
    "authorization",
    "browser",
    "cache",
    "channel_connections",
    "channels",
    "compaction",
    "content_safety",
    "context_management",
    "conversation_sharing",
    "cost",
    "dedupe_storage",
    "deployment",
    "evaluation",
    "extensions",
    "goal",
    "guardrails",
    "image_generation",
    "knowledge_base",
    "logging",
    "mcp_tasks",
    "model_feedback",
    "multi_tenant",
    "pii_redaction",
    "plugins",
    "rag",
    "rate_limit",
    "redaction",
    "safety_finish_reason",
    "session_memory",
    "skill_evolution",
    "skill_scan",
    "task_continuity",
    "token_budget",
    "tool_output",
    "tool_progress",
    "tool_search",
    "tool_streaming",
    "tracing",
    "verification",
    "webhooks",
];

const CONFIG_NAME: &str = "config.yaml";

/// How problems of the file at `path` are reported: its own name (`deerflow.yaml`), so a
/// message never names a file the user does not have; `default` when it has none.
fn file_label(path: &Path, default: &str) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| default.to_string())
}
const EXTENSIONS_NAME: &str = "extensions_config.json";

/// Where the config file is, if any. An explicitly named file must exist.
fn resolve_config_path(opts: &LoadOptions, report: &mut Report) -> Option<PathBuf> {
    let explicit = [
        (
            opts.config_path.as_ref().map(|p| opts.absolute(p)),
            "--config",
        ),
        (opts.path_var("FAWN_CONFIG"), "FAWN_CONFIG"),
        (
            opts.path_var("DEER_FLOW_CONFIG_PATH"),
            "DEER_FLOW_CONFIG_PATH",
        ),
    ];
    for (path, source) in explicit {
        if let Some(p) = path {
            if p.is_file() {
                return Some(p);
            }
            report.error(
                CONFIG_NAME,
                format!("config file {} (from {source}) does not exist", p.display()),
            );
            return None;
        }
    }
    let local = opts.cwd.join(CONFIG_NAME);
    local.is_file().then_some(local)
}

/// Where the extensions file is, if any.
fn resolve_extensions_path(
    opts: &LoadOptions,
    config_path: Option<&Path>,
    report: &mut Report,
) -> Option<PathBuf> {
    for source in ["FAWN_EXTENSIONS_CONFIG", "DEER_FLOW_EXTENSIONS_CONFIG_PATH"] {
        if let Some(p) = opts.path_var(source) {
            if p.is_file() {
                return Some(p);
            }
            report.error(
                EXTENSIONS_NAME,
                format!(
                    "extensions file {} (from {source}) does not exist",
                    p.display()
                ),
            );
            return None;
        }
    }
    let dir = config_path
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| opts.cwd.clone());
    // `mcp_config.json` is DeerFlow's legacy name.
    [EXTENSIONS_NAME, "mcp_config.json"]
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file())
}

/// Loads the configuration the way `fawn serve` and `fawn check-config` do.
///
/// Config file: `opts.config_path` > `FAWN_CONFIG` > `DEER_FLOW_CONFIG_PATH` >
/// `./config.yaml` if it exists > none (all defaults, no models). Extensions:
/// `FAWN_EXTENSIONS_CONFIG` > `DEER_FLOW_EXTENSIONS_CONFIG_PATH` > `extensions_config.json`
/// beside the config file > none. Data dir: `FAWN_HOME` > `DEER_FLOW_HOME` > `./.fawn`.
/// Skills: `skills.path` (relative to the config file's directory) >
/// `DEER_FLOW_SKILLS_PATH` > `./skills`. `DATABASE_URL` overrides `database`.
///
/// Every problem found is returned, one [`ConfigIssue`] each. Reads files synchronously:
/// call it before starting the runtime or from `spawn_blocking`.
pub fn load(opts: &LoadOptions) -> Result<Loaded, ConfigErrors> {
    let mut report = Report::default();
    let config_path = resolve_config_path(opts, &mut report);
    let extensions_path = resolve_extensions_path(opts, config_path.as_deref(), &mut report);
    if !report.errors.is_empty() {
        return Err(ConfigErrors(report.errors, report.warnings));
    }
    let config_text = config_path
        .as_deref()
        .and_then(|p| source::read_file(p, &file_label(p, CONFIG_NAME), &mut report));
    let extensions_text = extensions_path
        .as_deref()
        .and_then(|p| source::read_file(p, &file_label(p, EXTENSIONS_NAME), &mut report));
    build(
        config_text.as_deref(),
        config_path,
        extensions_text.as_deref(),
        extensions_path,
        opts,
        report,
    )
}

/// Loads from text (tests, API-provided config). Paths resolve as if the files lived in
/// `opts.cwd`; `opts.config_path` is ignored.
pub fn load_str(
    config_yaml: &str,
    extensions_json: Option<&str>,
    opts: &LoadOptions,
) -> Result<Loaded, ConfigErrors> {
    build(
        Some(config_yaml),
        None,
        extensions_json,
        None,
        opts,
        Report::default(),
    )
}

fn build(
    config_text: Option<&str>,
    config_path: Option<PathBuf>,
    extensions_text: Option<&str>,
    extensions_path: Option<PathBuf>,
    opts: &LoadOptions,
    mut report: Report,
) -> Result<Loaded, ConfigErrors> {
    let mut app = AppConfig::default();
    let mut origins = Origins::default();
    let config_name = config_path
        .as_deref()
        .map_or_else(|| CONFIG_NAME.to_string(), |p| file_label(p, CONFIG_NAME));
    let extensions_name = extensions_path.as_deref().map_or_else(
        || EXTENSIONS_NAME.to_string(),
        |p| file_label(p, EXTENSIONS_NAME),
    );
    if let Some(text) = config_text
        && let Some(root) = source::parse_yaml(text, &config_name, &mut report)
        && let Some(map) = source::top_level(root, &config_name, &mut report)
    {
        parse_app(map, opts, &mut app, &mut origins, &mut report);
    }
    let mut extensions = ExtensionsConfig::default();
    if let Some(text) = extensions_text
        && let Some(root) = source::parse_json(text, &extensions_name, &mut report)
        && let Some(map) = source::top_level(root, &extensions_name, &mut report)
    {
        extensions = parse_extensions(map, opts, &mut report);
    }
    apply_database_url(opts, &mut app, &mut report);
    apply_concurrency_env(opts, &mut app, &mut report);
    validate::app(&mut app, &origins, &mut report);
    validate::extensions(&extensions, &mut report);
    let issues: Vec<ConfigIssue> = opts
        .validators()
        .iter()
        .flat_map(|check| check(&app))
        .collect();
    // Entries naming an implementation Fawn does not have are skipped with a warning
    // (DeerFlow's example config enables some), unless loading is strict.
    let mut skipped: Vec<(&'static str, usize)> = Vec::new();
    if !opts.is_strict() {
        for issue in issues.iter().filter(|i| i.unsupported) {
            if let Some(entry) = list_entry(&issue.path)
                && !skipped.contains(&entry)
            {
                skipped.push(entry);
            }
        }
    }
    let in_skipped =
        |typed_path: &str| list_entry(typed_path).is_some_and(|e| skipped.contains(&e));
    let skipped_file_paths: Vec<String> = skipped
        .iter()
        .map(|(list, i)| origins.remap(&format!("{list}[{i}]")))
        .collect();
    // What the loader itself found wrong in a skipped entry (an unset `$VAR` of a provider
    // Fawn does not have) does not count either.
    report.errors.retain(|e| {
        !skipped_file_paths
            .iter()
            .any(|p| e.path == *p || e.path.starts_with(&format!("{p}.")))
    });
    for issue in issues {
        let path = origins.remap(&issue.path);
        if issue.unsupported && !opts.is_strict() {
            let what = if list_entry(&issue.path).is_some() {
                "the entry is skipped"
            } else {
                "it is not used"
            };
            report.warn(
                path,
                format!("{}; {what} (--strict makes this an error)", issue.message),
            );
        } else if !in_skipped(&issue.path) {
            report.error(path, issue.message);
        }
    }
    skipped.sort_unstable();
    for (list, i) in skipped.into_iter().rev() {
        match list {
            "models" if i < app.models.len() => {
                app.models.remove(i);
                if i < origins.models.len() {
                    origins.models.remove(i);
                }
            }
            "tools" if i < app.tools.len() => {
                app.tools.remove(i);
                if i < origins.tools.len() {
                    origins.tools.remove(i);
                }
            }
            _ => {}
        }
    }

    let config_dir = config_path
        .as_deref()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| opts.cwd.clone());
    let home = opts
        .path_var("FAWN_HOME")
        .or_else(|| opts.path_var("DEER_FLOW_HOME"))
        .unwrap_or_else(|| opts.cwd.join(".fawn"));
    let skills_dir = match app.skills.path.as_deref().filter(|p| !p.trim().is_empty()) {
        Some(p) if Path::new(p).is_absolute() => PathBuf::from(p),
        Some(p) => config_dir.join(p),
        None => opts
            .path_var("DEER_FLOW_SKILLS_PATH")
            .unwrap_or_else(|| config_dir.join("skills")),
    };

    if !report.errors.is_empty() {
        return Err(ConfigErrors(report.errors, report.warnings));
    }
    Ok(Loaded {
        settings: Settings {
            app,
            extensions,
            home,
            skills_dir,
            config_path,
            extensions_path,
        },
        warnings: report.warnings,
    })
}

/// `DATABASE_URL` in the environment overrides `database` (the value itself is a secret and
/// never appears in a message).
fn apply_database_url(opts: &LoadOptions, app: &mut AppConfig, report: &mut Report) {
    let Some(url) = opts.var("DATABASE_URL").filter(|u| !u.trim().is_empty()) else {
        return;
    };
    let scheme = url
        .split(':')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let backend = match scheme.as_str() {
        "postgres" | "postgresql" => "postgres",
        "sqlite" => "sqlite",
        _ => {
            report.error(
                "DATABASE_URL",
                "unsupported URL scheme; expected postgres://, postgresql:// or sqlite:",
            );
            return;
        }
    };
    let db = app.database.get_or_insert_with(DatabaseConfig::default);
    db.backend = Some(backend.to_string());
    db.url = Some(url);
}

/// `FAWN_MAX_CONCURRENT_RUNS`, else `N_JOBS_PER_WORKER`, overrides
/// `queue.max_concurrent_runs` (an empty value counts as unset).
fn apply_concurrency_env(opts: &LoadOptions, app: &mut AppConfig, report: &mut Report) {
    let Some((name, raw)) = QueueSettings::ENV_VARS.iter().find_map(|name| {
        opts.var(name)
            .filter(|v| !v.trim().is_empty())
            .map(|v| (*name, v))
    }) else {
        return;
    };
    let max = QueueSettings::MAX_CONCURRENT_RUNS;
    match raw.trim().parse::<u64>() {
        Ok(n) if (1..=max).contains(&n) => app.queue.max_concurrent_runs = Some(n),
        _ => report.error(
            name,
            format!(
                "must be a whole number between 1 and {max}, got {:?}",
                raw.trim()
            ),
        ),
    }
}

/// The keys serde knows for a type whose unknown keys go to a flattened `extra` map: its
/// serialized default's keys plus the given aliases.
fn known_keys<T: Serialize + Default>(aliases: &[&str]) -> Vec<String> {
    let mut keys: Vec<String> = match serde_json::to_value(T::default()) {
        Ok(Value::Object(o)) => o.keys().cloned().collect(),
        _ => Vec::new(),
    };
    keys.extend(aliases.iter().map(|a| a.to_string()));
    keys
}

/// Parses a type with a flattened `extra` map. serde loses error paths through `flatten`,
/// so each known key is checked on its own first; unknown keys go to `extra` untouched.
fn parse_flat<T: DeserializeOwned + Serialize + Default>(
    base: &str,
    value: Value,
    aliases: &[&str],
    report: &mut Report,
) -> Option<T> {
    let Value::Object(entries) = value else {
        report.error(
            base,
            format!("expected a mapping, got {}", typed::describe(&value)),
        );
        return None;
    };
    let known = known_keys::<T>(aliases);
    let mut kept = Map::new();
    for (k, v) in entries {
        if !known.contains(&k) {
            kept.insert(k, v);
            continue;
        }
        let mut single = Map::new();
        single.insert(k.clone(), v);
        if let Some((_, Value::Object(mut fixed))) =
            fix_and_parse::<T>(base, Value::Object(single), Some(&k), report)
            && let Some(v) = fixed.shift_remove(&k)
        {
            kept.insert(k, v);
        }
    }
    parse_typed(base, Value::Object(kept), report)
}

/// Keeps one spelling of a setting given under several (`base_url` / `api_base`); the
/// others are dropped with a warning.
fn dedupe_aliases(entry: &mut Value, base: &str, groups: &[&[&str]], report: &mut Report) {
    let Value::Object(o) = entry else {
        return;
    };
    for group in groups {
        let present: Vec<&str> = group
            .iter()
            .copied()
            .filter(|k| o.get(*k).is_some_and(|v| !v.is_null()))
            .collect();
        // A null spelling would also collide with the one in use.
        for k in group.iter() {
            if o.get(*k).is_some_and(Value::is_null) && !present.is_empty() {
                o.shift_remove(*k);
            }
        }
        if let Some((keep, others)) = present.split_first() {
            for other in others {
                o.shift_remove(*other);
                report.warn(
                    keypath::key(base, other),
                    format!("ignored: `{keep}` is also set"),
                );
            }
        }
    }
}

const MODEL_ALIASES: &[&[&str]] = &[
    &["base_url", "api_base", "openai_api_base"],
    &["api_key", "openai_api_key"],
    &["timeout", "request_timeout", "default_request_timeout"],
    &["headers", "default_headers"],
];

/// The `models[i]` / `tools[i]` entry a typed key path is in.
fn list_entry(path: &str) -> Option<(&'static str, usize)> {
    for list in ["models", "tools"] {
        let Some(rest) = path.strip_prefix(list).and_then(|r| r.strip_prefix('[')) else {
            continue;
        };
        let end = rest.find(']')?;
        return rest[..end].parse().ok().map(|i| (list, i));
    }
    None
}

/// Original list positions of the entries that parsed (a dropped entry must not shift the
/// index in later messages).
#[derive(Debug, Default)]
pub(crate) struct Origins {
    pub models: Vec<usize>,
    pub tools: Vec<usize>,
    pub tool_groups: Vec<usize>,
}

impl Origins {
    /// Maps `models[pos]…` / `tools[pos]…` / `tool_groups[pos]…` (a position in the typed list)
    /// to the entry's index in the file.
    pub(crate) fn remap(&self, path: &str) -> String {
        for (name, list) in [
            ("models", &self.models),
            ("tool_groups", &self.tool_groups),
            ("tools", &self.tools),
        ] {
            let Some(rest) = path.strip_prefix(name).and_then(|r| r.strip_prefix('[')) else {
                continue;
            };
            let Some(end) = rest.find(']') else { continue };
            let Ok(pos) = rest[..end].parse::<usize>() else {
                continue;
            };
            let index = list.get(pos).copied().unwrap_or(pos);
            return format!("{name}[{index}]{}", &rest[end + 1..]);
        }
        path.to_string()
    }
}

fn parse_app(
    map: Map<String, Value>,
    opts: &LoadOptions,
    app: &mut AppConfig,
    origins: &mut Origins,
    r: &mut Report,
) {
    for (key, mut value) in map {
        let path = keypath::key("", &key);
        // DeerFlow treats a present-but-null section (everything below it commented out)
        // as absent.
        if value.is_null() {
            continue;
        }
        let known = matches!(
            key.as_str(),
            "config_version"
                | "log_level"
                | "max_recursion_limit"
                | "models"
                | "tool_groups"
                | "tools"
                | "sandbox"
                | "skills"
                | "title"
                | "summarization"
                | "memory"
                | "subagents"
                | "loop_detection"
                | "uploads"
                | "database"
                | "checkpointer"
                | "llm_call"
                | "circuit_breaker"
                | "token_usage"
                | "read_before_write"
                | "agents_api"
                | "suggestions"
                | "input_polish"
                | "scheduler"
                | "web"
                | "run_ownership"
                | "stream_bridge"
                | "run_events"
                | "metrics"
                | "log"
                | "queue"
        );
        if !known {
            if IGNORED_DEERFLOW_SECTIONS.contains(&key.as_str()) {
                r.warn(
                    path,
                    "DeerFlow setting that Fawn does not implement; ignored",
                );
            } else {
                r.warn(path, "unknown key; ignored");
            }
            continue;
        }
        source::resolve_env(&mut value, &path, opts, Unset::Error, r);
        match key.as_str() {
            "config_version" => app.config_version = parse_typed(&path, value, r),
            "log_level" => app.log_level = parse_typed(&path, value, r),
            "max_recursion_limit" => {
                if let Some(v) = parse_typed(&path, value, r) {
                    app.max_recursion_limit = v;
                }
            }
            "models" => {
                for (i, mut entry) in list_entries(&path, value, r).into_iter().enumerate() {
                    let base = keypath::index(&path, i);
                    dedupe_aliases(&mut entry, &base, MODEL_ALIASES, r);
                    if let Some(m) = parse_flat::<ModelConfig>(
                        &base,
                        entry,
                        &[
                            "api_base",
                            "openai_api_base",
                            "openai_api_key",
                            "request_timeout",
                            "default_request_timeout",
                            "default_headers",
                        ],
                        r,
                    ) {
                        app.models.push(m);
                        origins.models.push(i);
                    }
                }
            }
            "tools" => {
                for (i, entry) in list_entries(&path, value, r).into_iter().enumerate() {
                    let base = keypath::index(&path, i);
                    if let Some(t) = parse_flat::<ToolConfig>(&base, entry, &[], r) {
                        app.tools.push(t);
                        origins.tools.push(i);
                    }
                }
            }
            "tool_groups" => {
                for (i, entry) in list_entries(&path, value, r).into_iter().enumerate() {
                    let base = keypath::index(&path, i);
                    // A bare string is accepted as the group's name.
                    let entry = match entry {
                        Value::String(name) => serde_json::json!({ "name": name }),
                        other => other,
                    };
                    if let Some(g) = parse_typed::<ToolGroupConfig>(&base, entry, r) {
                        app.tool_groups.push(g);
                        origins.tool_groups.push(i);
                    }
                }
            }
            "sandbox" => app.sandbox = parse_section(&path, value, r),
            "skills" => app.skills = parse_section(&path, value, r),
            "title" => app.title = parse_section(&path, value, r),
            "summarization" => app.summarization = parse_summarization(&path, value, r),
            "memory" => {
                lift_memory_backend_config(&mut value);
                app.memory = parse_section(&path, value, r);
            }
            "subagents" => app.subagents = parse_section(&path, value, r),
            "loop_detection" => app.loop_detection = parse_section(&path, value, r),
            "uploads" => app.uploads = parse_section(&path, value, r),
            "database" => app.database = Some(parse_section(&path, value, r)),
            "checkpointer" => app.checkpointer = Some(parse_section(&path, value, r)),
            "llm_call" => app.llm_call = parse_section(&path, value, r),
            "circuit_breaker" => app.circuit_breaker = parse_section(&path, value, r),
            "token_usage" => app.token_usage = parse_section(&path, value, r),
            "read_before_write" => app.read_before_write = parse_section(&path, value, r),
            "agents_api" => app.agents_api = parse_section(&path, value, r),
            "suggestions" => {
                let s: SuggestionsConfig = parse_section(&path, value, r);
                if (1..=SuggestionsConfig::MAX_LIMIT).contains(&s.max_suggestions) {
                    app.suggestions = s;
                } else {
                    r.error(
                        keypath::key(&path, "max_suggestions"),
                        format!(
                            "must be between 1 and {}, got {}",
                            SuggestionsConfig::MAX_LIMIT,
                            s.max_suggestions
                        ),
                    );
                }
            }
            "run_events" => {
                let e: RunEventsConfig = parse_section(&path, value, r);
                if e.backend == RunEventsBackend::Jsonl {
                    r.warn(
                        keypath::key(&path, "backend"),
                        "jsonl run events are not implemented; Fawn keeps the journal in its database",
                    );
                }
                if e.max_trace_content >= 1 {
                    app.run_events = e;
                } else {
                    r.error(
                        keypath::key(&path, "max_trace_content"),
                        "must be at least 1",
                    );
                }
            }
            "metrics" => {
                let m: MetricsConfig = parse_section(&path, value, r);
                match &m.token {
                    Some(t) if t.trim().len() < MIN_METRICS_TOKEN_LEN => r.error(
                        keypath::key(&path, "token"),
                        format!("must be at least {MIN_METRICS_TOKEN_LEN} characters"),
                    ),
                    _ => app.metrics = m,
                }
            }
            "log" => app.log = parse_section(&path, value, r),
            "queue" => {
                let q: QueueSettings = parse_section(&path, value, r);
                match q.max_concurrent_runs {
                    Some(n) if !(1..=QueueSettings::MAX_CONCURRENT_RUNS).contains(&n) => r.error(
                        keypath::key(&path, "max_concurrent_runs"),
                        format!(
                            "must be between 1 and {}, got {n}",
                            QueueSettings::MAX_CONCURRENT_RUNS
                        ),
                    ),
                    _ => app.queue = q,
                }
            }
            "input_polish" => {
                let p: InputPolishConfig = parse_section(&path, value, r);
                if p.max_chars >= 1 {
                    app.input_polish = p;
                } else {
                    r.error(keypath::key(&path, "max_chars"), "must be at least 1");
                }
            }
            "scheduler" => {
                let s: SchedulerConfig = parse_section(&path, value, r);
                let mut ok = true;
                for (key, min, max) in SchedulerConfig::BOUNDS {
                    let v = s.number(key).unwrap_or(min);
                    if !(min..=max).contains(&v) {
                        ok = false;
                        r.error(
                            keypath::key(&path, key),
                            format!("must be between {min} and {max}, got {v}"),
                        );
                    }
                }
                if ok {
                    app.scheduler = s;
                }
            }
            "web" => app.web = parse_section(&path, value, r),
            "run_ownership" => app.run_ownership = parse_section(&path, value, r),
            "stream_bridge" => app.stream_bridge = parse_section(&path, value, r),
            _ => {}
        }
    }
}

/// DeerFlow keeps DeerMem's knobs under `memory.backend_config`; when the typed top-level
/// field is not given, the value there is used (it also stays in `backend_config`).
fn lift_memory_backend_config(memory: &mut Value) {
    let Value::Object(m) = memory else {
        return;
    };
    let Some(Value::Object(backend)) = m.get("backend_config") else {
        return;
    };
    let lifted: Vec<(String, Value)> = [
        "debounce_seconds",
        "max_facts",
        "fact_confidence_threshold",
        "max_injection_tokens",
        "storage_path",
    ]
    .iter()
    .filter(|k| !m.contains_key(**k))
    .filter_map(|k| backend.get(*k).map(|v| (k.to_string(), v.clone())))
    .filter(|(_, v)| !v.is_null() && v.as_str() != Some(""))
    .collect();
    m.extend(lifted);
}

/// `summarization`, with `trigger` (one size or a list) read entry by entry so that each bad
/// entry is reported with its own path.
fn parse_summarization(path: &str, mut value: Value, r: &mut Report) -> SummarizationConfig {
    let trigger = typed::take(&mut value, "trigger");
    let mut cfg: SummarizationConfig = parse_section(path, value, r);
    let tpath = keypath::key(path, "trigger");
    cfg.trigger = match trigger {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => Some(OneOrMany::Many(
            items
                .into_iter()
                .enumerate()
                .filter_map(|(i, item)| {
                    let p = keypath::index(&tpath, i);
                    let size = parse_typed(&p, item, r)?;
                    validate::context_size(&p, &size, r);
                    Some(size)
                })
                .collect(),
        )),
        Some(one) => parse_typed(&tpath, one, r)
            .inspect(|size| {
                validate::context_size(&tpath, size, r);
            })
            .map(OneOrMany::One),
    };
    cfg
}

fn parse_extensions(
    map: Map<String, Value>,
    opts: &LoadOptions,
    r: &mut Report,
) -> ExtensionsConfig {
    let mut ext = ExtensionsConfig::default();
    for (key, mut value) in map {
        let path = keypath::key("", &key);
        if value.is_null() {
            continue;
        }
        match key.as_str() {
            "mcpServers" | "mcp_servers" => {
                let Value::Object(servers) = value else {
                    r.error(
                        &path,
                        format!("expected a mapping, got {}", typed::describe(&value)),
                    );
                    continue;
                };
                for (name, server) in servers {
                    let base = keypath::key(&path, &name);
                    if let Some(s) = parse_mcp_server(&base, server, opts, r) {
                        ext.mcp_servers.insert(name, s);
                    }
                }
            }
            "skills" => {
                source::resolve_env(&mut value, &path, opts, Unset::Error, r);
                ext.skills = parse_section::<BTreeMap<String, SkillToggle>>(&path, value, r);
            }
            "middlewares" | "mcpInterceptors" => {
                source::resolve_env(&mut value, &path, opts, Unset::Error, r);
                let list: Vec<String> = parse_section(&path, value, r);
                if !list.is_empty() {
                    r.warn(
                        &path,
                        "Python extension classes cannot be loaded by Fawn; ignored",
                    );
                }
                if key == "middlewares" {
                    ext.middlewares = list;
                } else {
                    ext.mcp_interceptors = list;
                }
            }
            _ => r.warn(path, "unknown key; ignored"),
        }
    }
    ext
}

/// One MCP server. `$VAR`s of a disabled server that are unset only warn: a disabled server
/// must not keep Fawn from starting.
fn parse_mcp_server(
    base: &str,
    mut server: Value,
    opts: &LoadOptions,
    r: &mut Report,
) -> Option<McpServerConfig> {
    let Value::Object(o) = &mut server else {
        r.error(
            base,
            format!("expected a mapping, got {}", typed::describe(&server)),
        );
        return None;
    };
    if let Some(enabled) = o.get_mut("enabled") {
        source::resolve_env(
            enabled,
            &keypath::key(base, "enabled"),
            opts,
            Unset::Error,
            r,
        );
    }
    let enabled = match o.get("enabled") {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => !matches!(
            s.trim().to_ascii_lowercase().as_str(),
            "false" | "0" | "no" | "off" | "f" | "n"
        ),
        _ => true,
    };
    let unset = if enabled {
        Unset::Error
    } else {
        Unset::WarnEmpty("server is disabled")
    };
    for (k, v) in o.iter_mut() {
        if k != "enabled" {
            source::resolve_env(v, &keypath::key(base, k), opts, unset, r);
        }
    }
    // DeerFlow: `transport` (MCP spec spelling) is used when `type` is not given.
    let type_given = o
        .get("type")
        .is_some_and(|t| !t.is_null() && t.as_str() != Some(""));
    if let Some(transport) = o.shift_remove("transport")
        && !type_given
    {
        o.insert("type".to_string(), transport);
    }
    parse_flat::<McpServerConfig>(base, server, &["transport"], r)
}
