//! Model settings read from a `models[]` entry of `config.yaml`, and DeerFlow's thinking
//! toggles (`when_thinking_enabled`, the `thinking:` shortcut, `when_thinking_disabled`,
//! auto-disable) resolved per request.

use crate::retry::RetryPolicy;
use fawn_config::{ConfigIssue, ModelConfig};
use serde_json::{Map, Value};
use std::time::Duration;

/// Request timeout when the config gives none (the OpenAI SDK's default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// Longest gap between two streamed chunks when the config gives none.
pub const DEFAULT_STREAM_CHUNK_TIMEOUT: Duration = Duration::from_secs(120);

/// Keys of a model entry that configure the client (LangChain constructor arguments) and
/// are never sent as request parameters.
pub(crate) const CLIENT_ONLY_KEYS: &[&str] = &[
    "stream_usage",
    "streaming",
    "disable_streaming",
    "use_responses_api",
    "output_version",
    "pricing",
    "request_admission",
    "cumulative_stream_usage",
    "default_request_timeout",
    "read_timeout",
    "connect_timeout",
    "write_timeout",
    "pool_timeout",
    "http_client",
    "http_async_client",
    "organization",
    "openai_organization",
    "openai_proxy",
    "tiktoken_model_name",
    "default_query",
    "callbacks",
    "verbose",
    "tags",
    "metadata",
    "cache",
    "rate_limiter",
    "disabled_params",
    "include_response_headers",
    "profile",
    "model_name",
    "anthropic_api_url",
    "anthropic_api_key",
    "betas",
    "google_api_key",
    "gemini_api_key",
    "client_options",
    "transport",
    "validate_model_on_init",
    "client_kwargs",
    "async_client_kwargs",
    "sync_client_kwargs",
];

/// DeerFlow's declarative `reasoning:` contract (a mapping with `thinking`, `dialect`,
/// `history`, `effort`, … keys) describes the model; it is not a request parameter.
fn is_reasoning_contract(v: &Value) -> bool {
    v.as_object().is_some_and(|o| {
        ["thinking", "dialect", "history", "on_disable_request"]
            .iter()
            .any(|k| o.contains_key(*k))
            || o.get("effort").is_some_and(Value::is_object)
    })
}

/// Thinking settings of one model, as configured.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ThinkingConfig {
    pub when_enabled: Option<Map<String, Value>>,
    pub when_disabled: Option<Map<String, Value>>,
    pub shortcut: Option<Value>,
}

/// Everything a provider needs from a `models[]` entry, validated.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ModelSettings {
    pub model: String,
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    pub timeout: Duration,
    pub stream_chunk_timeout: Duration,
    pub retry: RetryPolicy,
    /// Constructor arguments that become request parameters (`max_tokens`, `temperature`,
    /// `reasoning_effort`, `extra_body`, any unknown key, …).
    pub params: Map<String, Value>,
    pub thinking: ThinkingConfig,
    pub streaming: bool,
    pub stream_usage: bool,
    pub supports_thinking: bool,
    pub supports_reasoning_effort: bool,
    pub supports_vision: bool,
}

fn seconds(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn check_seconds(path: String, secs: f64, issues: &mut Vec<ConfigIssue>) -> Option<Duration> {
    if secs.is_finite() && secs > 0.0 && secs < 1.0e9 {
        Some(Duration::from_secs_f64(secs))
    } else {
        issues.push(ConfigIssue::new(
            path,
            format!("must be a positive number of seconds, got {secs}"),
        ));
        None
    }
}

/// Checks an `http(s)` base URL.
pub(crate) fn check_url(path: String, raw: &str, issues: &mut Vec<ConfigIssue>) {
    match url::Url::parse(raw) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {}
        Ok(u) => issues.push(ConfigIssue::new(
            path,
            format!(
                "invalid URL '{raw}': expected an http:// or https:// URL with a host, got scheme '{}'",
                u.scheme()
            ),
        )),
        Err(e) => issues.push(ConfigIssue::new(path, format!("invalid URL '{raw}': {e}"))),
    }
}

impl ModelSettings {
    /// Reads and validates entry `index` of `models:`. Problems are reported with key paths
    /// such as `models[1].base_url`.
    pub(crate) fn from_config(
        cfg: &ModelConfig,
        index: usize,
        default_api_key_env: &[&str],
    ) -> Result<ModelSettings, Vec<ConfigIssue>> {
        let at = |key: &str| format!("models[{index}].{key}");
        let mut issues = Vec::new();
        let model = match cfg.model.as_deref().map(str::trim) {
            Some(m) if !m.is_empty() => m.to_string(),
            _ => {
                issues.push(ConfigIssue::new(
                    at("model"),
                    "is required (the provider's model id)",
                ));
                String::new()
            }
        };
        let base_url = cfg
            .base_url
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty());
        if let Some(u) = base_url {
            check_url(at("base_url"), u, &mut issues);
        }
        let mut headers = Vec::new();
        for (k, v) in &cfg.headers {
            match (
                http::HeaderName::from_bytes(k.as_bytes()),
                http::HeaderValue::from_str(v),
            ) {
                (Ok(name), Ok(value)) => headers.push((name, value)),
                (Err(_), _) => issues.push(ConfigIssue::new(
                    at(&format!("headers.{k}")),
                    "is not a valid HTTP header name",
                )),
                (_, Err(_)) => issues.push(ConfigIssue::new(
                    at(&format!("headers.{k}")),
                    "is not a valid HTTP header value",
                )),
            }
        }
        if let Some(Value::Object(extra_headers)) = cfg.extra.get("default_headers") {
            for (k, v) in extra_headers {
                if let (Ok(name), Some(Ok(value))) = (
                    http::HeaderName::from_bytes(k.as_bytes()),
                    v.as_str().map(http::HeaderValue::from_str),
                ) {
                    headers.push((name, value));
                }
            }
        }
        let timeout_value = cfg.timeout.map(|t| (at("timeout"), t)).or_else(|| {
            ["default_request_timeout", "read_timeout"]
                .iter()
                .find_map(|k| cfg.extra.get(*k).and_then(seconds).map(|t| (at(k), t)))
        });
        let timeout = match timeout_value {
            Some((path, secs)) => check_seconds(path, secs, &mut issues).unwrap_or(DEFAULT_TIMEOUT),
            None => DEFAULT_TIMEOUT,
        };
        let stream_chunk_timeout = match cfg.stream_chunk_timeout {
            Some(secs) => check_seconds(at("stream_chunk_timeout"), secs, &mut issues)
                .unwrap_or(DEFAULT_STREAM_CHUNK_TIMEOUT),
            None => DEFAULT_STREAM_CHUNK_TIMEOUT,
        };
        let retry = RetryPolicy {
            max_retries: cfg.max_retries.unwrap_or(2),
            ..RetryPolicy::default()
        };
        let api_key = cfg.api_key.clone().filter(|k| !k.is_empty()).or_else(|| {
            default_api_key_env
                .iter()
                .find_map(|var| std::env::var(var).ok().filter(|k| !k.is_empty()))
        });
        if let Some(k) = &api_key
            && http::HeaderValue::from_str(k).is_err()
        {
            issues.push(ConfigIssue::new(
                at("api_key"),
                "contains characters that cannot be sent in an HTTP header",
            ));
        }

        let mut params = Map::new();
        if let Some(v) = cfg.max_tokens {
            params.insert("max_tokens".into(), Value::from(v));
        }
        if let Some(v) = cfg.temperature {
            params.insert("temperature".into(), Value::from(v));
        }
        if let Some(v) = &cfg.reasoning_effort {
            params.insert("reasoning_effort".into(), Value::String(v.clone()));
        }
        if let Some(v) = &cfg.extra_body {
            params.insert("extra_body".into(), Value::Object(v.clone()));
        }
        for (k, v) in &cfg.extra {
            if CLIENT_ONLY_KEYS.contains(&k.as_str())
                || k == "default_headers"
                || v.is_null()
                || (k == "reasoning" && is_reasoning_contract(v))
            {
                continue;
            }
            params.insert(k.clone(), v.clone());
        }
        let flag = |key: &str| cfg.extra.get(key).and_then(Value::as_bool);
        let streaming = flag("streaming").unwrap_or(true)
            && !matches!(cfg.extra.get("disable_streaming"), Some(Value::Bool(true)));
        if !issues.is_empty() {
            return Err(issues);
        }
        Ok(ModelSettings {
            model,
            base_url: base_url.map(str::to_string),
            api_key,
            headers,
            timeout,
            stream_chunk_timeout,
            retry,
            params,
            thinking: ThinkingConfig {
                when_enabled: cfg.when_thinking_enabled.clone(),
                when_disabled: cfg.when_thinking_disabled.clone(),
                shortcut: cfg.thinking.clone(),
            },
            streaming,
            stream_usage: flag("stream_usage").unwrap_or(true),
            supports_thinking: cfg.supports_thinking,
            supports_reasoning_effort: cfg.supports_reasoning_effort,
            supports_vision: cfg.supports_vision,
        })
    }

    /// The request parameters for one call, after DeerFlow's thinking rules:
    /// thinking on merges `when_thinking_enabled` (with the `thinking:` shortcut folded in);
    /// thinking off merges `when_thinking_disabled`, or when that is absent auto-disables
    /// (`extra_body.thinking.type = disabled` + `reasoning_effort = minimal` for
    /// OpenAI-compatible gateways, `chat_template_kwargs` flipped for vLLM, top-level
    /// `thinking = {type: disabled}` for Anthropic). `reasoning_effort` is dropped unless the
    /// model supports it.
    pub(crate) fn resolve_params(
        &self,
        thinking_enabled: bool,
        request_effort: Option<&str>,
        max_tokens: Option<u32>,
        temperature: Option<f64>,
    ) -> Map<String, Value> {
        let mut p = self.params.clone();
        if let Some(v) = max_tokens {
            p.insert("max_tokens".into(), Value::from(v));
        }
        if let Some(v) = temperature {
            p.insert("temperature".into(), Value::from(v));
        }
        if let Some(e) = request_effort {
            p.insert("reasoning_effort".into(), Value::String(e.to_string()));
        }
        let t = &self.thinking;
        let has_settings = t.when_enabled.is_some() || t.shortcut.is_some();
        let mut effective = t.when_enabled.clone().unwrap_or_default();
        if let Some(shortcut) = &t.shortcut {
            let merged = match (effective.get("thinking"), shortcut) {
                (Some(Value::Object(base)), Value::Object(over)) => {
                    let mut m = base.clone();
                    for (k, v) in over {
                        m.insert(k.clone(), v.clone());
                    }
                    Value::Object(m)
                }
                _ => shortcut.clone(),
            };
            effective.insert("thinking".into(), merged);
        }
        let thinking_on = thinking_enabled && self.supports_thinking;
        if thinking_on {
            if has_settings {
                deep_merge(&mut p, &effective);
            }
        } else if let Some(disabled) = &t.when_disabled {
            deep_merge(&mut p, disabled);
        } else if has_settings {
            let eb = effective.get("extra_body").and_then(Value::as_object);
            let ctk = eb
                .and_then(|e| e.get("chat_template_kwargs"))
                .and_then(Value::as_object);
            if eb
                .and_then(|e| e.get("thinking"))
                .and_then(|t| t.get("type"))
                .is_some()
            {
                let mut over = Map::new();
                over.insert(
                    "extra_body".into(),
                    serde_json::json!({"thinking": {"type": "disabled"}}),
                );
                deep_merge(&mut p, &over);
                p.insert("reasoning_effort".into(), Value::String("minimal".into()));
            } else if let Some(ctk) =
                ctk.filter(|c| c.contains_key("thinking") || c.contains_key("enable_thinking"))
            {
                let mut off = Map::new();
                for key in ["thinking", "enable_thinking"] {
                    if ctk.contains_key(key) {
                        off.insert(key.into(), Value::Bool(false));
                    }
                }
                let mut over = Map::new();
                over.insert(
                    "extra_body".into(),
                    serde_json::json!({ "chat_template_kwargs": off }),
                );
                deep_merge(&mut p, &over);
            } else if effective
                .get("thinking")
                .and_then(|t| t.get("type"))
                .is_some()
            {
                p.insert("thinking".into(), serde_json::json!({"type": "disabled"}));
            }
        }
        if !self.supports_reasoning_effort {
            p.remove("reasoning_effort");
        }
        p
    }
}

/// Recursively merges `over` into `base`: objects merge key by key, anything else replaces.
pub(crate) fn deep_merge(base: &mut Map<String, Value>, over: &Map<String, Value>) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(Value::Object(b)), Value::Object(o)) => deep_merge(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings(yaml: Value) -> ModelSettings {
        let cfg: ModelConfig = serde_json::from_value(yaml).unwrap();
        ModelSettings::from_config(&cfg, 0, &[]).unwrap()
    }

    #[test]
    fn thinking_toggles_follow_deerflow() {
        let s = settings(json!({
            "name": "m", "use": "x", "model": "m",
            "supports_thinking": true, "supports_reasoning_effort": true,
            "extra_body": {"tool_stream": true},
            "when_thinking_enabled": {"extra_body": {"thinking": {"type": "enabled"}}}
        }));
        let on = s.resolve_params(true, Some("high"), None, None);
        assert_eq!(
            on["extra_body"],
            json!({"tool_stream": true, "thinking": {"type": "enabled"}})
        );
        assert_eq!(on["reasoning_effort"], "high");
        let off = s.resolve_params(false, Some("high"), None, None);
        assert_eq!(
            off["extra_body"],
            json!({"tool_stream": true, "thinking": {"type": "disabled"}})
        );
        assert_eq!(off["reasoning_effort"], "minimal");

        // vLLM chat_template_kwargs flip.
        let s = settings(json!({
            "name": "m", "use": "x", "model": "m", "supports_thinking": true,
            "when_thinking_enabled": {"extra_body": {"chat_template_kwargs": {"enable_thinking": true}}}
        }));
        let off = s.resolve_params(false, Some("high"), None, None);
        assert_eq!(
            off["extra_body"],
            json!({"chat_template_kwargs": {"enable_thinking": false}})
        );
        assert!(
            off.get("reasoning_effort").is_none(),
            "effort dropped when unsupported"
        );

        // Anthropic-style shortcut.
        let s = settings(json!({
            "name": "m", "use": "x", "model": "m", "supports_thinking": true,
            "thinking": {"type": "enabled", "budget_tokens": 2048}
        }));
        assert_eq!(
            s.resolve_params(true, None, None, None)["thinking"],
            json!({"type": "enabled", "budget_tokens": 2048})
        );
        assert_eq!(
            s.resolve_params(false, None, None, None)["thinking"],
            json!({"type": "disabled"})
        );

        // Explicit disable template wins; no settings → nothing added.
        let s = settings(json!({
            "name": "m", "use": "x", "model": "m", "supports_thinking": true,
            "when_thinking_enabled": {"extra_body": {"thinking": {"type": "enabled"}}},
            "when_thinking_disabled": {"extra_body": {"thinking": {"type": "off"}}}
        }));
        let off = s.resolve_params(false, None, Some(10), Some(0.5));
        assert_eq!(off["extra_body"], json!({"thinking": {"type": "off"}}));
        assert_eq!(off["max_tokens"], 10);
        assert_eq!(off["temperature"], 0.5);
        let s = settings(json!({"name": "m", "use": "x", "model": "m"}));
        assert!(s.resolve_params(false, None, None, None).is_empty());
        // Thinking requested on a model that does not support it: the enable template is not used.
        let s = settings(json!({
            "name": "m", "use": "x", "model": "m",
            "when_thinking_enabled": {"extra_body": {"thinking": {"type": "enabled"}}}
        }));
        assert_eq!(
            s.resolve_params(true, None, None, None)["extra_body"],
            json!({"thinking": {"type": "disabled"}})
        );
    }

    #[test]
    fn client_only_keys_and_reasoning_contract_are_not_sent() {
        let s = settings(json!({
            "name": "m", "use": "x", "model": "m",
            "pricing": {"currency": "USD"}, "stream_usage": false, "top_p": 0.5,
            "reasoning": {"thinking": "optional", "dialect": "auto"},
            "enable_thinking": true
        }));
        assert!(!s.stream_usage);
        let p = s.resolve_params(false, None, None, None);
        assert_eq!(p.get("top_p"), Some(&json!(0.5)));
        assert_eq!(p.get("enable_thinking"), Some(&json!(true)));
        assert!(p.get("pricing").is_none() && p.get("reasoning").is_none());
        let s = settings(
            json!({"name": "m", "use": "x", "model": "m", "reasoning": {"effort": "high"}}),
        );
        assert_eq!(
            s.resolve_params(false, None, None, None)["reasoning"],
            json!({"effort": "high"})
        );
    }

    #[test]
    fn reports_key_paths() {
        let cfg: ModelConfig = serde_json::from_value(json!({
            "name": "m", "use": "x", "base_url": "ftp://x", "timeout": -1.0,
            "headers": {"bad header": "v"}
        }))
        .unwrap();
        let issues = ModelSettings::from_config(&cfg, 2, &[]).unwrap_err();
        let text: Vec<String> = issues.iter().map(|i| i.to_string()).collect();
        assert!(
            text.iter()
                .any(|t| t.starts_with("models[2].model: is required")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t.starts_with("models[2].base_url: invalid URL 'ftp://x'")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t.starts_with("models[2].timeout: must be a positive")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t.starts_with("models[2].headers.bad header:")),
            "{text:?}"
        );
    }
}
