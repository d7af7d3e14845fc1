//! Typed sections of DeerFlow's `config.yaml` and `extensions_config.json`, with DeerFlow's
//! defaults. Unknown keys inside a section are kept in `extra` maps where DeerFlow passes them
//! through (models, tools); elsewhere the loader reports them as warnings.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The whole `config.yaml`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AppConfig {
    pub config_version: Option<u32>,
    pub log_level: Option<String>,
    /// Ceiling for a client-supplied `config.recursion_limit` (DeerFlow default 1000).
    pub max_recursion_limit: u32,
    pub models: Vec<ModelConfig>,
    pub tool_groups: Vec<ToolGroupConfig>,
    pub tools: Vec<ToolConfig>,
    pub sandbox: SandboxConfig,
    pub skills: SkillsConfig,
    pub title: TitleConfig,
    pub summarization: SummarizationConfig,
    pub memory: MemoryConfig,
    pub subagents: SubagentsConfig,
    pub loop_detection: LoopDetectionConfig,
    pub uploads: UploadsConfig,
    pub database: Option<DatabaseConfig>,
    /// Legacy spelling of `database` (`{type, connection_string}`).
    pub checkpointer: Option<CheckpointerConfig>,
    pub llm_call: LlmCallConfig,
    pub circuit_breaker: CircuitBreakerConfig,
    pub token_usage: TokenUsageConfig,
    pub read_before_write: ReadBeforeWriteConfig,
    pub agents_api: AgentsApiConfig,
    pub suggestions: SuggestionsConfig,
    pub input_polish: InputPolishConfig,
    pub scheduler: SchedulerConfig,
    pub web: WebConfig,
    pub run_ownership: RunOwnershipConfig,
    pub stream_bridge: StreamBridgeConfig,
    pub run_events: RunEventsConfig,
    /// Fawn's own: who may scrape `/metrics` besides admins.
    pub metrics: MetricsConfig,
    /// Fawn's own: how log lines are written.
    pub log: LogConfig,
    /// Fawn's own: how many runs this node executes at once.
    pub queue: QueueSettings,
}

impl Default for AppConfig {
    fn default() -> Self {
        AppConfig {
            config_version: None,
            log_level: None,
            max_recursion_limit: 1000,
            models: Vec::new(),
            tool_groups: Vec::new(),
            tools: Vec::new(),
            sandbox: SandboxConfig::default(),
            skills: SkillsConfig::default(),
            title: TitleConfig::default(),
            summarization: SummarizationConfig::default(),
            memory: MemoryConfig::default(),
            subagents: SubagentsConfig::default(),
            loop_detection: LoopDetectionConfig::default(),
            uploads: UploadsConfig::default(),
            database: None,
            checkpointer: None,
            llm_call: LlmCallConfig::default(),
            circuit_breaker: CircuitBreakerConfig::default(),
            token_usage: TokenUsageConfig::default(),
            read_before_write: ReadBeforeWriteConfig::default(),
            agents_api: AgentsApiConfig::default(),
            suggestions: SuggestionsConfig::default(),
            input_polish: InputPolishConfig::default(),
            scheduler: SchedulerConfig::default(),
            run_ownership: RunOwnershipConfig::default(),
            stream_bridge: StreamBridgeConfig::default(),
            web: WebConfig::default(),
            run_events: RunEventsConfig::default(),
            metrics: MetricsConfig::default(),
            log: LogConfig::default(),
            queue: QueueSettings::default(),
        }
    }
}

/// One entry of `models:`.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelConfig {
    /// Id used by `model_name` in runs and by the API.
    pub name: String,
    pub display_name: Option<String>,
    pub description: Option<String>,
    /// LangChain class path, e.g. `langchain_openai:ChatOpenAI`; mapped to a Fawn provider.
    #[serde(rename = "use")]
    pub use_: String,
    /// Provider model id.
    pub model: Option<String>,
    /// `api_base` is accepted as an alias.
    #[serde(alias = "api_base", alias = "openai_api_base")]
    pub base_url: Option<String>,
    #[serde(alias = "openai_api_key")]
    pub api_key: Option<String>,
    /// Seconds. `request_timeout` (OpenAI) and `default_request_timeout` (Anthropic) are
    /// accepted as aliases.
    #[serde(alias = "request_timeout", alias = "default_request_timeout")]
    pub timeout: Option<f64>,
    pub max_retries: Option<u32>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub reasoning_effort: Option<String>,
    /// Only used for the UI context gauge and `fraction` summarization triggers; never sent.
    pub context_window: Option<u64>,
    pub supports_thinking: bool,
    pub supports_reasoning_effort: bool,
    pub supports_vision: bool,
    /// Constructor overrides merged in when thinking is on, e.g. `{extra_body: {thinking: …}}`.
    pub when_thinking_enabled: Option<Map<String, Value>>,
    pub when_thinking_disabled: Option<Map<String, Value>>,
    /// Shortcut for `when_thinking_enabled.extra_body.thinking`.
    pub thinking: Option<Value>,
    #[serde(alias = "default_headers")]
    pub headers: BTreeMap<String, String>,
    pub extra_body: Option<Map<String, Value>>,
    /// Seconds without a streamed chunk before the call fails.
    pub stream_chunk_timeout: Option<f64>,
    /// Every other key: passed to the provider as a request parameter.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolGroupConfig {
    pub name: String,
}

/// One entry of `tools:`. (`name` and `use` are required; the loader reports them missing.)
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolConfig {
    pub name: String,
    #[serde(default)]
    pub group: Option<String>,
    /// DeerFlow reflection path, e.g. `deerflow.sandbox.tools:bash_tool`.
    #[serde(rename = "use")]
    pub use_: String,
    /// Every other key (`max_results`, `timeout`, `api_key`, …) reaches the tool.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MountConfig {
    pub host_path: String,
    pub container_path: String,
    #[serde(default)]
    pub read_only: bool,
}

/// `sandbox:`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SandboxConfig {
    #[serde(rename = "use")]
    pub use_: Option<String>,
    /// Run bash on the host when no OS sandbox is available. Off by default.
    pub allow_host_bash: bool,
    /// Give bash network access inside the OS sandbox.
    pub network: bool,
    pub bash_output_max_chars: usize,
    pub read_file_output_max_chars: usize,
    pub ls_output_max_chars: usize,
    /// Seconds.
    pub bash_command_timeout: u64,
    pub write_file_max_bytes: usize,
    pub glob_max_results: usize,
    pub grep_max_results: usize,
    pub mounts: Vec<MountConfig>,
    pub environment: BTreeMap<String, String>,
    /// Data memory (heap and private writable mappings) one bash command may use, in MiB;
    /// `0` = no limit. `RLIMIT_DATA`, so runtimes that reserve large address ranges (V8)
    /// still start.
    pub memory_limit_mb: u64,
    /// Largest file one bash command may write, in MiB; `0` = no limit.
    pub file_size_limit_mb: u64,
    /// CPU seconds one bash command may use (all its threads); `0` = no limit.
    pub cpu_time_limit_seconds: u64,
    /// Disk space one thread's files (`/mnt/user-data`) may take, in MiB; `0` = no limit.
    /// A write that would pass it is refused, and so is a command once it is passed.
    pub workspace_quota_mb: u64,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            use_: None,
            allow_host_bash: false,
            network: false,
            bash_output_max_chars: 20_000,
            read_file_output_max_chars: 50_000,
            ls_output_max_chars: 20_000,
            bash_command_timeout: 600,
            write_file_max_bytes: 80 * 1024,
            glob_max_results: 1000,
            grep_max_results: 500,
            mounts: Vec::new(),
            environment: BTreeMap::new(),
            memory_limit_mb: 2048,
            file_size_limit_mb: 1024,
            cpu_time_limit_seconds: 600,
            workspace_quota_mb: 10 * 1024,
        }
    }
}

/// `skills:`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SkillsConfig {
    /// Host directory holding `public/` and `custom/`; default `./skills`.
    pub path: Option<String>,
    pub container_path: String,
    pub deferred_discovery: bool,
}

impl Default for SkillsConfig {
    fn default() -> Self {
        SkillsConfig {
            path: None,
            container_path: "/mnt/skills".to_string(),
            deferred_discovery: false,
        }
    }
}

/// `title:`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TitleConfig {
    pub enabled: bool,
    pub max_words: usize,
    pub max_chars: usize,
    /// `None`: no LLM call, local fallback title.
    pub model_name: Option<String>,
    pub prompt_template: Option<String>,
}

impl Default for TitleConfig {
    fn default() -> Self {
        TitleConfig {
            enabled: true,
            max_words: 6,
            max_chars: 60,
            model_name: None,
            prompt_template: None,
        }
    }
}

/// `{type: tokens|messages|fraction, value}` used by summarization triggers and keep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContextSize {
    #[serde(rename = "type")]
    pub kind: ContextSizeKind,
    pub value: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContextSizeKind {
    Tokens,
    Messages,
    Fraction,
}

/// A single trigger or a list of triggers (OR semantics).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

impl<T: Clone> OneOrMany<T> {
    pub fn to_vec(&self) -> Vec<T> {
        match self {
            OneOrMany::One(t) => vec![t.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

/// `summarization:`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SummarizationConfig {
    pub enabled: bool,
    pub model_name: Option<String>,
    pub trigger: Option<OneOrMany<ContextSize>>,
    pub keep: ContextSize,
    pub trim_tokens_to_summarize: Option<u64>,
    pub summary_prompt: Option<String>,
    /// Tool names whose reads of `SKILL.md` files count as loading a skill.
    pub skill_file_read_tool_names: Vec<String>,
}

impl Default for SummarizationConfig {
    fn default() -> Self {
        SummarizationConfig {
            enabled: false,
            model_name: None,
            trigger: None,
            keep: ContextSize {
                kind: ContextSizeKind::Messages,
                value: 20.0,
            },
            trim_tokens_to_summarize: Some(4000),
            summary_prompt: None,
            skill_file_read_tool_names: ["read_file", "read", "view", "cat"]
                .map(String::from)
                .to_vec(),
        }
    }
}

/// `memory:`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryConfig {
    pub enabled: bool,
    pub injection_enabled: bool,
    /// `middleware` (passive) or `tool`.
    pub mode: String,
    pub manager_class: String,
    pub shutdown_flush_timeout_seconds: u64,
    pub debounce_seconds: u64,
    pub max_facts: usize,
    pub fact_confidence_threshold: f64,
    pub max_injection_tokens: usize,
    pub storage_path: Option<String>,
    pub model_name: Option<String>,
    pub backend_config: Map<String, Value>,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            enabled: true,
            injection_enabled: true,
            mode: "middleware".to_string(),
            manager_class: "deermem".to_string(),
            shutdown_flush_timeout_seconds: 30,
            debounce_seconds: 30,
            max_facts: 100,
            fact_confidence_threshold: 0.7,
            max_injection_tokens: 2000,
            storage_path: None,
            model_name: None,
            backend_config: Map::new(),
        }
    }
}

/// A custom subagent type from `subagents.custom_agents`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CustomSubagentConfig {
    pub description: String,
    pub system_prompt: String,
    /// `None`: every tool the parent has (minus task/ask_clarification/present_files).
    pub tools: Option<Vec<String>>,
    pub skills: Option<Vec<String>>,
    /// `inherit` or a model name.
    pub model: Option<String>,
    pub max_turns: Option<u32>,
    pub timeout_seconds: Option<u64>,
}

/// Per-built-in overrides (`subagents.agents.general-purpose.timeout_seconds`, …).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SubagentOverride {
    pub timeout_seconds: Option<u64>,
    pub max_turns: Option<u32>,
    pub model: Option<String>,
    /// Skill allowlist (`None`: all enabled skills, `[]`: none).
    pub skills: Option<Vec<String>>,
}

/// `subagents:`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SubagentsConfig {
    pub timeout_seconds: u64,
    /// Default max-turn override for every subagent (`None`: built-in defaults).
    pub max_turns: Option<u32>,
    pub max_total_per_run: u32,
    pub max_concurrent: u32,
    pub agents: BTreeMap<String, SubagentOverride>,
    pub custom_agents: BTreeMap<String, CustomSubagentConfig>,
}

impl Default for SubagentsConfig {
    fn default() -> Self {
        SubagentsConfig {
            timeout_seconds: 1800,
            max_turns: None,
            max_total_per_run: 6,
            max_concurrent: 3,
            agents: BTreeMap::new(),
            custom_agents: BTreeMap::new(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolFreqOverride {
    pub warn: Option<u32>,
    pub hard_limit: Option<u32>,
}

/// `loop_detection:`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LoopDetectionConfig {
    pub enabled: bool,
    pub warn_threshold: u32,
    pub hard_limit: u32,
    pub window_size: usize,
    pub max_tracked_threads: usize,
    pub tool_freq_warn: u32,
    pub tool_freq_hard_limit: u32,
    pub tool_freq_overrides: BTreeMap<String, ToolFreqOverride>,
}

impl Default for LoopDetectionConfig {
    fn default() -> Self {
        LoopDetectionConfig {
            enabled: true,
            warn_threshold: 3,
            hard_limit: 5,
            window_size: 20,
            max_tracked_threads: 100,
            tool_freq_warn: 30,
            tool_freq_hard_limit: 50,
            tool_freq_overrides: BTreeMap::new(),
        }
    }
}

/// `uploads:`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UploadsConfig {
    pub max_files: usize,
    pub max_file_size: u64,
    pub max_total_size: u64,
    pub auto_convert_documents: bool,
    pub pdf_converter: String,
}

impl Default for UploadsConfig {
    fn default() -> Self {
        UploadsConfig {
            max_files: 10,
            max_file_size: 50 * 1024 * 1024,
            max_total_size: 100 * 1024 * 1024,
            auto_convert_documents: false,
            pdf_converter: "auto".to_string(),
        }
    }
}

/// `database:`.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DatabaseConfig {
    /// `sqlite` (default), `postgres`, or `memory` (treated as a temporary SQLite file).
    pub backend: Option<String>,
    pub sqlite_path: Option<String>,
    /// DeerFlow's spelling: the directory holding the database file.
    pub sqlite_dir: Option<String>,
    #[serde(alias = "postgres_url", alias = "connection_string")]
    pub url: Option<String>,
    pub postgres_schema: Option<String>,
    pub checkpoint_channel_mode: Option<String>,
}

/// `checkpointer:`: the legacy spelling of `database` (`type`, `connection_string`), and
/// retention: the official LangGraph server's `ttl` and Fawn's own `retention`.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckpointerConfig {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub connection_string: Option<String>,
    pub ttl: Option<CheckpointerTtlConfig>,
    pub retention: Option<RetentionConfig>,
}

/// `checkpointer.ttl`, the official LangGraph server's shape: threads without activity for
/// `default_ttl` minutes are removed (`strategy`), checked every `sweep_interval_minutes`
/// (which also paces `checkpointer.retention`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckpointerTtlConfig {
    /// `delete` (the thread and everything it owns) or `keep_latest` (only its latest
    /// checkpoint stays).
    pub strategy: String,
    pub sweep_interval_minutes: f64,
    /// Minutes; unset: threads do not expire for lack of activity.
    pub default_ttl: Option<f64>,
}

impl Default for CheckpointerTtlConfig {
    fn default() -> Self {
        CheckpointerTtlConfig {
            strategy: "delete".to_string(),
            sweep_interval_minutes: CheckpointerTtlConfig::DEFAULT_SWEEP_MINUTES,
            default_ttl: None,
        }
    }
}

impl CheckpointerTtlConfig {
    pub const DEFAULT_SWEEP_MINUTES: f64 = 60.0;
}

/// `checkpointer.retention` (Fawn's): intermediate step checkpoints are pruned once they are
/// outside the newest `keep_turns` turns of their thread and older than `keep_days`
/// (either alone when only one is set; pruning is off when neither is); finished runs and
/// their journal rows expire after `runs_days`. Work goes in transactions of `batch` rows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RetentionConfig {
    pub keep_turns: Option<u32>,
    pub keep_days: Option<f64>,
    pub runs_days: Option<f64>,
    pub batch: u32,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            keep_turns: None,
            keep_days: None,
            runs_days: None,
            batch: RetentionConfig::DEFAULT_BATCH,
        }
    }
}

impl RetentionConfig {
    pub const DEFAULT_BATCH: u32 = 100;
    pub const MAX_BATCH: u32 = 5000;
}

/// `llm_call:` — retry policy of the LLM error-handling middleware.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LlmCallConfig {
    pub retry_max_attempts: u32,
    pub retry_base_delay_ms: u64,
    pub retry_cap_delay_ms: u64,
    pub burst_retry_base_delay_ms: u64,
    pub max_concurrent_calls: usize,
}

impl Default for LlmCallConfig {
    fn default() -> Self {
        LlmCallConfig {
            retry_max_attempts: 3,
            retry_base_delay_ms: 1000,
            retry_cap_delay_ms: 8000,
            burst_retry_base_delay_ms: 5000,
            max_concurrent_calls: 0,
        }
    }
}

/// `circuit_breaker:`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CircuitBreakerConfig {
    pub failure_threshold: u32,
    pub recovery_timeout_sec: u64,
}

impl Default for CircuitBreakerConfig {
    fn default() -> Self {
        CircuitBreakerConfig {
            failure_threshold: 5,
            recovery_timeout_sec: 60,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TokenUsageConfig {
    pub enabled: bool,
}

impl Default for TokenUsageConfig {
    fn default() -> Self {
        TokenUsageConfig { enabled: true }
    }
}

/// `read_before_write:` (DeerFlow): changing an existing file needs a read of its current
/// version first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReadBeforeWriteConfig {
    pub enabled: bool,
}

impl Default for ReadBeforeWriteConfig {
    fn default() -> Self {
        ReadBeforeWriteConfig { enabled: true }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentsApiConfig {
    pub enabled: bool,
}

/// `suggestions:` (DeerFlow): follow-up questions offered after an answer. On by default;
/// `max_suggestions` is 1..=[`SuggestionsConfig::MAX_LIMIT`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SuggestionsConfig {
    pub enabled: bool,
    pub max_suggestions: u32,
}

impl SuggestionsConfig {
    /// DeerFlow's `MAX_SUGGESTIONS_LIMIT`.
    pub const MAX_LIMIT: u32 = 5;
}

impl Default for SuggestionsConfig {
    fn default() -> Self {
        SuggestionsConfig {
            enabled: true,
            max_suggestions: 3,
        }
    }
}

/// `input_polish:` (DeerFlow): `POST /api/input-polish` rewrites the composer's draft with a
/// model (`model_name`, else the default one). On by default; drafts longer than
/// `max_chars` (at least 1) are refused.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct InputPolishConfig {
    pub enabled: bool,
    pub max_chars: u64,
    pub model_name: Option<String>,
}

impl Default for InputPolishConfig {
    fn default() -> Self {
        InputPolishConfig {
            enabled: true,
            max_chars: 4000,
            model_name: None,
        }
    }
}

/// `run_events:` (DeerFlow): the run-event journal behind the history routes. Fawn keeps it
/// in its own database (SQLite or Postgres) whatever `backend` says: `db` is exactly that,
/// `memory` (DeerFlow's default, lost on restart) gets the durable journal instead, and
/// `jsonl` is not implemented (a warning; the database is used). `max_trace_content` bounds
/// DeerFlow's `trace` events, which Fawn does not record (its subagent step rows are capped
/// by the `task` tool), so it is accepted and has no effect; so is `track_token_usage`:
/// Fawn keeps no per-run token totals (token usage is read from the messages).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunEventsConfig {
    pub backend: RunEventsBackend,
    pub max_trace_content: usize,
    pub track_token_usage: bool,
}

impl Default for RunEventsConfig {
    fn default() -> Self {
        RunEventsConfig {
            backend: RunEventsBackend::Memory,
            max_trace_content: 10240,
            track_token_usage: true,
        }
    }
}

/// `metrics:` (Fawn's own). `/metrics` answers admins, and scrapers presenting `token` as a
/// bearer token (`Authorization: Bearer …`; also `FAWN_METRICS_TOKEN`). With
/// authentication off it answers anyone.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MetricsConfig {
    pub token: Option<String>,
}

/// The shortest `metrics.token` accepted.
pub const MIN_METRICS_TOKEN_LEN: usize = 16;

/// `log:` (Fawn's own). `format: json` writes one JSON object per line (also
/// `FAWN_LOG_FORMAT`); the level is `log_level`, `FAWN_LOG` or `RUST_LOG`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LogConfig {
    pub format: LogFormat,
}

/// `queue:` (Fawn's own). `max_concurrent_runs` caps the runs this node executes at once
/// (a run waiting on a model holds a slot); past it, new runs wait `pending` in the
/// database queue until a slot frees here or another node claims them. `None` (the
/// default) lets the runtime size it from the memory it may use. The environment overrides
/// it: `FAWN_MAX_CONCURRENT_RUNS`, else `N_JOBS_PER_WORKER` (the official LangGraph
/// server's name).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct QueueSettings {
    pub max_concurrent_runs: Option<u64>,
}

impl QueueSettings {
    /// The largest `max_concurrent_runs` accepted.
    pub const MAX_CONCURRENT_RUNS: u64 = 1_000_000;
    /// The environment variables that set `max_concurrent_runs`, the first set one wins.
    pub const ENV_VARS: [&'static str; 2] = ["FAWN_MAX_CONCURRENT_RUNS", "N_JOBS_PER_WORKER"];
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Where DeerFlow would keep run events (see [`RunEventsConfig`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunEventsBackend {
    Memory,
    Db,
    Jsonl,
}

/// `scheduler:` (DeerFlow): scheduled tasks (`/api/scheduled-tasks`). They are crons of
/// Fawn's one cron scheduler; `enabled` (off by default, as in DeerFlow) decides whether
/// they fire on their own (they can always be managed and triggered by hand; plain
/// LangGraph crons fire either way). At most `max_concurrent_runs` runs of scheduled tasks
/// are active at once (a due task waits for a free slot); a one-off task must be at least
/// `min_once_delay_seconds` ahead. Fawn's scheduler claims due crons atomically in the
/// database on every node, so `multi_instance`, `poll_interval_seconds` and
/// `lease_seconds` are accepted and have no effect.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SchedulerConfig {
    pub enabled: bool,
    pub multi_instance: bool,
    pub poll_interval_seconds: u64,
    pub lease_seconds: u64,
    pub max_concurrent_runs: u64,
    pub min_once_delay_seconds: u64,
}

impl SchedulerConfig {
    /// DeerFlow's bounds of each number: `(key, min, max)`.
    pub const BOUNDS: [(&'static str, u64, u64); 4] = [
        ("poll_interval_seconds", 1, 300),
        ("lease_seconds", 5, 3600),
        ("max_concurrent_runs", 1, 32),
        ("min_once_delay_seconds", 1, 86400),
    ];

    /// The value of one of [`SchedulerConfig::BOUNDS`]' keys.
    pub fn number(&self, key: &str) -> Option<u64> {
        Some(match key {
            "poll_interval_seconds" => self.poll_interval_seconds,
            "lease_seconds" => self.lease_seconds,
            "max_concurrent_runs" => self.max_concurrent_runs,
            "min_once_delay_seconds" => self.min_once_delay_seconds,
            _ => return None,
        })
    }
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            enabled: false,
            multi_instance: false,
            poll_interval_seconds: 5,
            lease_seconds: 120,
            max_concurrent_runs: 3,
            min_once_delay_seconds: 60,
        }
    }
}

/// `run_ownership:` (DeerFlow): how long a node's claim on a running run lasts without a
/// heartbeat. Another node takes the run over (from its last checkpoint) once the lease
/// plus the grace period passed. Fawn always heartbeats (at a third of the lease).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunOwnershipConfig {
    pub lease_seconds: u64,
    pub grace_seconds: u64,
    /// DeerFlow's switch; Fawn's leases always heartbeat, so `false` only warns.
    pub heartbeat_enabled: bool,
}

impl Default for RunOwnershipConfig {
    fn default() -> Self {
        RunOwnershipConfig {
            lease_seconds: 10,
            grace_seconds: 0,
            heartbeat_enabled: true,
        }
    }
}

/// `stream_bridge:` (DeerFlow): how live events travel between nodes. `type: redis` with a
/// `redis_url` makes Redis Streams the event bus (as `REDIS_URL` does); `memory` (the
/// default) keeps events in the executing node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StreamBridgeConfig {
    #[serde(rename = "type")]
    pub type_: Option<String>,
    pub redis_url: Option<String>,
    /// DeerFlow's per-run queue bound; Fawn's streams keep about 10 000 events per run.
    pub queue_maxsize: Option<u64>,
}

/// Fawn extension: network policy of the web tools.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WebConfig {
    /// Let `web_fetch` reach private/loopback addresses (off by default; tests only).
    pub allow_private_addresses: bool,
}

// ---------------------------------------------------------------------------
// extensions_config.json
// ---------------------------------------------------------------------------

/// `extensions_config.json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExtensionsConfig {
    #[serde(rename = "mcpServers", alias = "mcp_servers")]
    pub mcp_servers: BTreeMap<String, McpServerConfig>,
    pub skills: BTreeMap<String, SkillToggle>,
    pub middlewares: Vec<String>,
    #[serde(rename = "mcpInterceptors")]
    pub mcp_interceptors: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SkillToggle {
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn yes() -> bool {
    true
}

/// One MCP server.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct McpServerConfig {
    pub enabled: bool,
    /// `stdio`, `sse` or `http` (`transport` is accepted as an alias).
    #[serde(rename = "type", alias = "transport")]
    pub kind: Option<String>,
    pub command: Option<String>,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub url: Option<String>,
    pub headers: BTreeMap<String, String>,
    pub oauth: Option<McpOAuthConfig>,
    pub tool_name_prefix: bool,
    /// Seconds.
    pub session_init_timeout: f64,
    /// Seconds.
    pub tool_call_timeout: f64,
    pub description: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Default for McpServerConfig {
    fn default() -> Self {
        McpServerConfig {
            enabled: true,
            kind: None,
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            url: None,
            headers: BTreeMap::new(),
            oauth: None,
            tool_name_prefix: true,
            session_init_timeout: 60.0,
            tool_call_timeout: 60.0,
            description: None,
            extra: Map::new(),
        }
    }
}

/// OAuth token acquisition for an HTTP MCP server.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct McpOAuthConfig {
    pub enabled: bool,
    pub token_url: String,
    pub grant_type: String,
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
    pub refresh_token: Option<String>,
    pub scope: Option<String>,
    pub audience: Option<String>,
    pub token_field: String,
    pub token_type_field: String,
    pub expires_in_field: String,
    pub default_token_type: String,
    pub refresh_skew_seconds: u64,
    pub extra_token_params: BTreeMap<String, String>,
}

impl Default for McpOAuthConfig {
    fn default() -> Self {
        McpOAuthConfig {
            enabled: true,
            token_url: String::new(),
            grant_type: "client_credentials".to_string(),
            client_id: None,
            client_secret: None,
            refresh_token: None,
            scope: None,
            audience: None,
            token_field: "access_token".to_string(),
            token_type_field: "token_type".to_string(),
            expires_in_field: "expires_in".to_string(),
            default_token_type: "Bearer".to_string(),
            refresh_skew_seconds: 60,
            extra_token_params: BTreeMap::new(),
        }
    }
}

// Secrets never reach logs: these types print with their secret fields redacted.
crate::redact::redacted_debug!(ModelConfig, fields: ["api_key"], maps: ["headers"]);
crate::redact::redacted_debug!(DatabaseConfig, fields: ["url"], maps: []);
crate::redact::redacted_debug!(MetricsConfig, fields: ["token"], maps: []);
crate::redact::redacted_debug!(CheckpointerConfig, fields: ["connection_string"], maps: []);
crate::redact::redacted_debug!(
    McpServerConfig,
    fields: ["oauth.client_secret", "oauth.refresh_token"],
    maps: ["env", "headers", "oauth.extra_token_params"]
);
crate::redact::redacted_debug!(
    McpOAuthConfig,
    fields: ["client_secret", "refresh_token"],
    maps: ["extra_token_params"]
);
