//! Building the [`ModelRegistry`] from `config.yaml`: DeerFlow `use:` class paths mapped to
//! Fawn providers, with readable, key-pathed issues for anything that cannot work.

use crate::anthropic::Anthropic;
use crate::gemini::Gemini;
use crate::ollama::Ollama;
use crate::openai::OpenAiCompatible;
use crate::openai::request::{Quirks, ReasoningReplay, ReasoningSource};
use crate::retry::{RetryObserver, RetryPolicy};
use crate::settings::ModelSettings;
use crate::{ChatModel, ModelInfo, ModelRegistry};
use fawn_config::{AppConfig, ConfigIssue, ModelConfig};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Which provider a `use:` value maps to.
#[derive(Clone, Debug, PartialEq)]
pub enum ProviderKind {
    /// OpenAI-compatible chat completions with the class's quirks.
    OpenAi(Quirks),
    /// Anthropic Messages.
    Anthropic,
    /// Gemini's native Generative Language API.
    Gemini,
    /// Ollama's native `/api/chat`.
    Ollama,
}

const OPENAI: Quirks = Quirks::openai("langchain_openai:ChatOpenAI");

const DEEPSEEK_BASE: Quirks = Quirks {
    provider: "deepseek",
    collapse_text_parts: true,
    default_base_url: "https://api.deepseek.com/v1",
    api_key_env: &["DEEPSEEK_API_KEY"],
    max_tokens_field: "max_tokens",
    ..Quirks::openai("langchain_deepseek:ChatDeepSeek")
};

const REPLAY: Quirks = Quirks {
    replay: ReasoningReplay::ReasoningContent,
    ..Quirks::openai("")
};

/// Every supported `use:` value and its provider, in the order they are listed to users.
pub fn supported_classes() -> Vec<(&'static str, ProviderKind)> {
    let with_class = |q: Quirks, class: &'static str| ProviderKind::OpenAi(Quirks { class, ..q });
    vec![
        ("langchain_openai:ChatOpenAI", ProviderKind::OpenAi(OPENAI)),
        (
            "langchain_deepseek:ChatDeepSeek",
            ProviderKind::OpenAi(DEEPSEEK_BASE),
        ),
        ("langchain_anthropic:ChatAnthropic", ProviderKind::Anthropic),
        (
            "langchain_google_genai:ChatGoogleGenerativeAI",
            ProviderKind::Gemini,
        ),
        ("langchain_ollama:ChatOllama", ProviderKind::Ollama),
        (
            "deerflow.models.patched_deepseek:PatchedChatDeepSeek",
            with_class(
                Quirks {
                    replay: ReasoningReplay::ReasoningContent,
                    deepseek_history: true,
                    ..DEEPSEEK_BASE
                },
                "deerflow.models.patched_deepseek:PatchedChatDeepSeek",
            ),
        ),
        (
            "deerflow.models.patched_openai:PatchedChatOpenAI",
            with_class(
                Quirks {
                    replay_tool_call_extras: true,
                    collapse_text_parts: true,
                    ..REPLAY
                },
                "deerflow.models.patched_openai:PatchedChatOpenAI",
            ),
        ),
        (
            "deerflow.models.patched_mimo:PatchedChatMiMo",
            with_class(
                Quirks {
                    drop_unreasoned_turns: true,
                    ..REPLAY
                },
                "deerflow.models.patched_mimo:PatchedChatMiMo",
            ),
        ),
        (
            "deerflow.models.patched_mimo:PatchedMimoChatModel",
            with_class(
                Quirks {
                    drop_unreasoned_turns: true,
                    ..REPLAY
                },
                "deerflow.models.patched_mimo:PatchedMimoChatModel",
            ),
        ),
        (
            "deerflow.models.patched_minimax:PatchedChatMiniMax",
            with_class(
                Quirks {
                    reasoning_source: ReasoningSource::MiniMax,
                    strip_user_names: true,
                    reasoning_split: true,
                    api_key_env: &["MINIMAX_API_KEY"],
                    ..OPENAI
                },
                "deerflow.models.patched_minimax:PatchedChatMiniMax",
            ),
        ),
        (
            "deerflow.models.patched_stepfun:PatchedChatStepFun",
            with_class(
                Quirks {
                    api_key_env: &["STEPFUN_API_KEY"],
                    ..REPLAY
                },
                "deerflow.models.patched_stepfun:PatchedChatStepFun",
            ),
        ),
        (
            "deerflow.models.patched_siliconflow:PatchedChatSiliconFlow",
            with_class(
                REPLAY,
                "deerflow.models.patched_siliconflow:PatchedChatSiliconFlow",
            ),
        ),
        (
            "deerflow.models.patched_kimi:PatchedKimiK2",
            with_class(
                Quirks {
                    default_base_url: "https://api.siliconflow.cn/v1",
                    ..REPLAY
                },
                "deerflow.models.patched_kimi:PatchedKimiK2",
            ),
        ),
        (
            "deerflow.models.vllm_provider:VllmChatModel",
            with_class(
                Quirks {
                    replay: ReasoningReplay::VllmReasoning,
                    reasoning_source: ReasoningSource::Vllm,
                    vllm_template_kwargs: true,
                    provider: "openai",
                    ..OPENAI
                },
                "deerflow.models.vllm_provider:VllmChatModel",
            ),
        ),
    ]
}

/// The supported `use:` values.
pub fn supported_use_values() -> Vec<&'static str> {
    supported_classes().into_iter().map(|(c, _)| c).collect()
}

/// Why some known DeerFlow classes are refused, with what to use instead.
fn unsupported_hint(use_: &str) -> Option<&'static str> {
    Some(match use_ {
        "deerflow.models.openai_codex_provider:CodexChatModel" => {
            "the Codex CLI (Responses API with ChatGPT credentials) provider is not supported"
        }
        "deerflow.models.claude_provider:ClaudeChatModel" => {
            "Claude Code OAuth credentials are not supported; use langchain_anthropic:ChatAnthropic with an api_key"
        }
        _ => return None,
    })
}

/// Looks up a `use:` value.
pub fn provider_for(use_: &str) -> Option<ProviderKind> {
    let use_ = use_.trim();
    supported_classes()
        .into_iter()
        .find(|(c, _)| *c == use_)
        .map(|(_, k)| k)
}

/// Options for building providers (shared HTTP client, retry hooks and delays).
#[derive(Clone, Default)]
pub struct ProviderOptions {
    /// Called before every retry of every model.
    pub retry_observer: Option<RetryObserver>,
    /// Replaces the backoff delays (`max_retries` still comes from each model's config).
    pub retry_delays: Option<RetryPolicy>,
    /// The HTTP client to share; one is built when absent.
    pub http_client: Option<reqwest::Client>,
}

impl std::fmt::Debug for ProviderOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderOptions")
            .field("retry_observer", &self.retry_observer.is_some())
            .field("retry_delays", &self.retry_delays)
            .finish()
    }
}

/// Idle model connections kept per provider host. A burst of concurrent calls opens a
/// connection each (HTTP/1.1); when it is over, those past this many close at once instead
/// of each holding its socket, buffers and TLS state for the idle timeout (90 s). Steady
/// load reuses the kept ones; only concurrency above this number reconnects.
pub const MODEL_POOL_MAX_IDLE: usize = 256;

/// The shared HTTP client for model calls: pooled connections, `TCP_NODELAY`, HTTP/1.1.
pub fn default_http_client() -> Result<reqwest::Client, String> {
    model_http_builder()
        .build()
        .map_err(|e| format!("could not build the HTTP client: {e}"))
}

/// How [`default_http_client`] is configured, for callers that add to it (a test's root
/// certificate).
///
/// HTTP/1.1 only, one pooled connection per model call in flight. Offered HTTP/2 (TLS
/// ALPN), a provider behind a CDN would carry every call of the process on one
/// connection, and the client never opens a second one when that connection's
/// `SETTINGS_MAX_CONCURRENT_STREAMS` (often 100 to 256) is reached: the calls past it
/// would wait for a free stream however many runs the node executes at once. The Python
/// stack Fawn replaces (the OpenAI and Anthropic SDKs over httpx) speaks HTTP/1.1 too.
/// Idle connections are bounded per provider ([`MODEL_POOL_MAX_IDLE`]) and by time.
pub fn model_http_builder() -> reqwest::ClientBuilder {
    fawn_net::client_builder()
        .http1_only()
        .pool_max_idle_per_host(MODEL_POOL_MAX_IDLE)
        .connect_timeout(Duration::from_secs(30))
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(90))
}

struct Plan {
    info: ModelInfo,
    settings: ModelSettings,
    kind: ProviderKind,
    betas: Option<String>,
}

fn plan(cfg: &ModelConfig, index: usize) -> Result<Plan, Vec<ConfigIssue>> {
    let at = |key: &str| format!("models[{index}].{key}");
    let mut issues = Vec::new();
    if cfg.name.trim().is_empty() {
        issues.push(ConfigIssue::new(at("name"), "is required"));
    }
    let kind = if cfg.use_.trim().is_empty() {
        issues.push(ConfigIssue::new(
            at("use"),
            format!(
                "is required; supported: {}",
                supported_use_values().join(", ")
            ),
        ));
        None
    } else {
        match provider_for(&cfg.use_) {
            Some(k) => Some(k),
            None => {
                let hint = unsupported_hint(cfg.use_.trim())
                    .map(|h| format!(" ({h})"))
                    .unwrap_or_default();
                issues.push(ConfigIssue::unsupported(
                    at("use"),
                    format!(
                        "unsupported model class '{}'{hint}; supported: {}",
                        cfg.use_.trim(),
                        supported_use_values().join(", ")
                    ),
                ));
                None
            }
        }
    };
    let key_env: &[&str] = match &kind {
        Some(ProviderKind::OpenAi(q)) => q.api_key_env,
        Some(ProviderKind::Anthropic) => &["ANTHROPIC_API_KEY"],
        Some(ProviderKind::Gemini) => crate::gemini::API_KEY_ENV,
        Some(ProviderKind::Ollama) => crate::ollama::API_KEY_ENV,
        None => &[],
    };
    let mut settings = match ModelSettings::from_config(cfg, index, key_env) {
        Ok(s) => Some(s),
        Err(mut more) => {
            issues.append(&mut more);
            None
        }
    };
    let betas = match cfg.extra.get("betas") {
        Some(serde_json::Value::Array(items)) => Some(
            items
                .iter()
                .filter_map(|v| v.as_str())
                .collect::<Vec<_>>()
                .join(","),
        ),
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    if matches!(kind, Some(ProviderKind::Anthropic))
        && let Some(s) = settings.as_mut()
    {
        let mut extra_issues = Vec::new();
        if s.base_url.is_none()
            && let Some(url) = cfg.extra.get("anthropic_api_url").and_then(|v| v.as_str())
        {
            crate::settings::check_url(at("anthropic_api_url"), url, &mut extra_issues);
            s.base_url = Some(url.to_string());
        }
        if s.api_key.is_none() {
            s.api_key = cfg
                .extra
                .get("anthropic_api_key")
                .and_then(|v| v.as_str())
                .map(str::to_string);
        }
        issues.append(&mut extra_issues);
    }
    if matches!(kind, Some(ProviderKind::Gemini))
        && let Some(s) = settings.as_mut()
    {
        // langchain's `google_api_key` (and DeerFlow's example `gemini_api_key`) beat the
        // environment; `api_key` beats both.
        if cfg.api_key.as_deref().is_none_or(str::is_empty)
            && let Some(key) = ["google_api_key", "gemini_api_key"].iter().find_map(|k| {
                cfg.extra
                    .get(*k)
                    .and_then(|v| v.as_str())
                    .filter(|v| !v.is_empty())
            })
        {
            if http::HeaderValue::from_str(key).is_err() {
                issues.push(ConfigIssue::new(
                    at("google_api_key"),
                    "contains characters that cannot be sent in an HTTP header",
                ));
            }
            s.api_key = Some(key.to_string());
        }
        if s.base_url.is_none()
            && let Some(url) = cfg
                .extra
                .get("client_options")
                .and_then(|o| o.get("api_endpoint"))
                .and_then(|v| v.as_str())
        {
            let url = if url.contains("://") {
                url.to_string()
            } else {
                format!("https://{url}")
            };
            crate::settings::check_url(at("client_options.api_endpoint"), &url, &mut issues);
            s.base_url = Some(url);
        }
    }
    if matches!(kind, Some(ProviderKind::Ollama))
        && let Some(s) = settings.as_mut()
        && s.base_url.is_none()
    {
        s.base_url = std::env::var("OLLAMA_HOST")
            .ok()
            .and_then(|h| crate::ollama::base_url_from_host(&h));
    }
    match (kind, settings) {
        (Some(kind), Some(settings)) if issues.is_empty() => {
            let provider = match &kind {
                ProviderKind::OpenAi(q) => q.provider,
                ProviderKind::Anthropic => "anthropic",
                ProviderKind::Gemini => crate::gemini::PROVIDER,
                ProviderKind::Ollama => crate::ollama::PROVIDER,
            };
            Ok(Plan {
                info: ModelInfo {
                    name: cfg.name.trim().to_string(),
                    model: settings.model.clone(),
                    provider: provider.to_string(),
                    display_name: cfg.display_name.clone(),
                    description: cfg.description.clone(),
                    supports_thinking: cfg.supports_thinking,
                    supports_reasoning_effort: cfg.supports_reasoning_effort,
                    supports_vision: cfg.supports_vision,
                    context_window: cfg.context_window,
                },
                settings,
                kind,
                betas,
            })
        }
        _ => Err(issues),
    }
}

fn duplicate_names(models: &[ModelConfig]) -> Vec<ConfigIssue> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut issues = Vec::new();
    for (i, m) in models.iter().enumerate() {
        let name = m.name.trim();
        if name.is_empty() {
            continue;
        }
        if let Some(first) = seen.get(name) {
            issues.push(ConfigIssue::new(
                format!("models[{i}].name"),
                format!("duplicate model name '{name}' (already used by models[{first}])"),
            ));
        } else {
            seen.insert(name, i);
        }
    }
    issues
}

/// Every problem with `models:` that would stop Fawn from calling a model, each tied to its
/// key path (`models[0].use: unsupported model class 'x:Y'; supported: …`).
pub fn validate_models(config: &AppConfig) -> Vec<ConfigIssue> {
    let mut issues = Vec::new();
    for (i, m) in config.models.iter().enumerate() {
        if let Err(mut e) = plan(m, i) {
            issues.append(&mut e);
        }
    }
    issues.extend(duplicate_names(&config.models));
    issues
}

/// Builds the provider for one `models[index]` entry.
pub fn build_model(
    cfg: &ModelConfig,
    index: usize,
    options: &ProviderOptions,
) -> Result<Arc<dyn ChatModel>, Vec<ConfigIssue>> {
    let plan = plan(cfg, index)?;
    let http = match &options.http_client {
        Some(c) => c.clone(),
        None => default_http_client()
            .map_err(|e| vec![ConfigIssue::new(format!("models[{index}]"), e)])?,
    };
    build_from_plan(plan, index, options, http)
}

fn build_from_plan(
    mut plan: Plan,
    index: usize,
    options: &ProviderOptions,
    http: reqwest::Client,
) -> Result<Arc<dyn ChatModel>, Vec<ConfigIssue>> {
    if let Some(delays) = &options.retry_delays {
        plan.settings.retry = RetryPolicy {
            max_retries: plan.settings.retry.max_retries,
            ..delays.clone()
        };
    }
    let issue = |e: String| vec![ConfigIssue::new(format!("models[{index}]"), e)];
    Ok(match plan.kind {
        ProviderKind::OpenAi(q) => {
            let mut m = OpenAiCompatible::new(plan.info, plan.settings, q, http).map_err(issue)?;
            m.set_retry_observer(options.retry_observer.clone());
            Arc::new(m)
        }
        ProviderKind::Anthropic => {
            let mut m =
                Anthropic::new(plan.info, plan.settings, plan.betas, http).map_err(issue)?;
            m.set_retry_observer(options.retry_observer.clone());
            Arc::new(m)
        }
        ProviderKind::Gemini => {
            let mut m = Gemini::new(plan.info, plan.settings, http).map_err(issue)?;
            m.set_retry_observer(options.retry_observer.clone());
            Arc::new(m)
        }
        ProviderKind::Ollama => {
            let mut m = Ollama::new(plan.info, plan.settings, http).map_err(issue)?;
            m.set_retry_observer(options.retry_observer.clone());
            Arc::new(m)
        }
    })
}

impl ModelRegistry {
    /// Every model of `config.models`, in order (the first is the default). Fails with every
    /// problem found, each tied to its key path.
    pub fn from_config(config: &AppConfig) -> Result<ModelRegistry, Vec<ConfigIssue>> {
        ModelRegistry::from_config_with(config, &ProviderOptions::default())
    }

    /// Like [`ModelRegistry::from_config`], with provider options.
    pub fn from_config_with(
        config: &AppConfig,
        options: &ProviderOptions,
    ) -> Result<ModelRegistry, Vec<ConfigIssue>> {
        let issues = validate_models(config);
        if !issues.is_empty() {
            return Err(issues);
        }
        let http = match &options.http_client {
            Some(c) => c.clone(),
            None => default_http_client().map_err(|e| vec![ConfigIssue::new("models", e)])?,
        };
        let mut models = Vec::with_capacity(config.models.len());
        for (i, cfg) in config.models.iter().enumerate() {
            let plan = plan(cfg, i)?;
            models.push(build_from_plan(plan, i, options, http.clone())?);
        }
        Ok(ModelRegistry::from_models(models))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(models: serde_json::Value) -> AppConfig {
        serde_json::from_value(json!({ "models": models })).unwrap()
    }

    #[test]
    fn maps_classes_and_reports_unknown_use() {
        let c = config(json!([
            {"name": "a", "use": "langchain_openai:ChatOpenAI", "model": "gpt", "api_key": "k"},
            {"name": "b", "use": "x:Y", "model": "m"},
            {"name": "a", "use": "deerflow.models.vllm_provider:VllmChatModel"},
        ]));
        let issues = validate_models(&c);
        let text: Vec<String> = issues.iter().map(ToString::to_string).collect();
        assert!(text[0].starts_with("models[1].use: unsupported model class 'x:Y'; supported: langchain_openai:ChatOpenAI, "), "{text:?}");
        assert!(
            text.iter()
                .any(|t| t == "models[2].model: is required (the provider's model id)"),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t.starts_with("models[2].name: duplicate model name 'a'")),
            "{text:?}"
        );
        let Err(issues) = ModelRegistry::from_config(&c) else {
            panic!("the registry refuses these models");
        };
        let refused: Vec<String> = issues.iter().map(ToString::to_string).collect();
        assert_eq!(refused, text, "the same issues validate_models reports");
    }

    #[test]
    fn hints_for_known_unsupported_classes() {
        let c = config(
            json!([{"name": "c", "use": "deerflow.models.claude_provider:ClaudeChatModel", "model": "q"}]),
        );
        let t = validate_models(&c)[0].to_string();
        assert!(
            t.contains("Claude Code OAuth credentials are not supported"),
            "{t}"
        );
        assert!(t.contains("supported: "), "{t}");
    }

    #[test]
    fn gemini_and_ollama_build_with_their_providers() {
        let c = config(json!([
            {"name": "g", "use": "langchain_google_genai:ChatGoogleGenerativeAI",
             "model": "gemini-2.5-pro", "gemini_api_key": "gk"},
            {"name": "o", "use": "langchain_ollama:ChatOllama", "model": "qwen3:8b",
             "base_url": "http://localhost:11434"},
        ]));
        assert!(validate_models(&c).is_empty(), "{:?}", validate_models(&c));
        let r = ModelRegistry::from_config(&c).unwrap();
        assert_eq!(r.get("g").unwrap().info().provider, "google_genai");
        assert_eq!(r.get("o").unwrap().info().provider, "ollama");
        let bad = config(
            json!([{"name": "g", "use": "langchain_google_genai:ChatGoogleGenerativeAI",
             "model": "gemini-2.5-pro", "client_options": {"api_endpoint": "ftp://x"}}]),
        );
        let t = validate_models(&bad)[0].to_string();
        assert!(
            t.starts_with("models[0].client_options.api_endpoint: invalid URL"),
            "{t}"
        );
    }

    #[test]
    fn every_listed_class_builds() {
        let models: Vec<serde_json::Value> = supported_use_values()
            .into_iter()
            .enumerate()
            .map(|(i, u)| json!({"name": format!("m{i}"), "use": u, "model": "x", "api_key": "k", "base_url": "http://127.0.0.1:9/v1"}))
            .collect();
        let r = ModelRegistry::from_config(&config(json!(models))).unwrap();
        assert_eq!(r.all().len(), supported_use_values().len());
        assert_eq!(r.get("m2").unwrap().info().provider, "anthropic");
        assert_eq!(r.get("m1").unwrap().info().provider, "deepseek");
        assert_eq!(r.default_model().unwrap().info().name, "m0");
    }
}
