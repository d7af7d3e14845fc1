//! `GET|PUT|PATCH /api/mcp/config`, `POST /api/mcp/cache/reset` (reference §8, §9.4).
//!
//! The config is read from and written to `extensions_config.json` as raw JSON, so `$VAR`
//! references, skill toggles and keys Fawn does not know survive a rewrite.
//!
//! * **GET** masks secrets as `***`: every `env` and `headers` value, `oauth.client_secret`
//!   and `oauth.refresh_token`, and any other key whose name says it holds a secret
//!   (`api_key`, `token`, `password`, `clientSecret`, …). Which keys are set stays visible;
//!   an `env` key that would make the launcher run other code is also listed, with why,
//!   in `refused_env` (such a server is not started).
//! * **PUT** `{mcp_servers}` replaces the servers. A `***` sent back is replaced by the
//!   stored value of the same key (a `***` for a key that has no stored value is a 400); for
//!   OAuth secrets `null` also keeps the stored value and `""` clears it; `routing`/`tools`
//!   left out are kept. Servers whose launch settings (`type`, `command`, `args`, `env`)
//!   are new or changed must use a stdio command from the allowlist (`npx`, `uvx`, extended
//!   by `DEER_FLOW_MCP_STDIO_COMMAND_ALLOWLIST` / `FAWN_MCP_STDIO_COMMAND_ALLOWLIST`,
//!   comma-separated): a bare executable name, no inline-code flags (`-c`, `--call`, `-e`,
//!   `--eval`, `-p`, `--print`, `-r`, `--require`, `--import`) before the package argument,
//!   and no environment variable that makes a launcher run other code (`npm_config_*`,
//!   `NODE_*`, `PYTHON*`, `UV_*`, `LD_*`, `PATH`, `HOME`, …; see
//!   `fawn_tools::mcp::launch`) — 400 otherwise. The result must pass the configuration loader
//!   (422 with every problem otherwise) and is written atomically; the next run uses it.
//! * **PATCH** `{server_name, enabled}` toggles one server.
//! * **POST /api/mcp/cache/reset** closes every MCP session; the next run reconnects.
//!
//! When the settings did not come from an extensions file, the first write creates
//! `extensions_config.json` beside `config.yaml` (else in the working directory, where the
//! loader finds it at the next start) from the settings' servers as loaded (`$VAR`s already
//! resolved), and the MCP manager follows that file from then on.

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::wire::ok;
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// The mask GET puts on secrets.
pub const MASK: &str = "***";

const DEFAULT_STDIO_ALLOWLIST: [&str; 2] = ["npx", "uvx"];
const ALLOWLIST_VARS: [&str; 2] = [
    "DEER_FLOW_MCP_STDIO_COMMAND_ALLOWLIST",
    "FAWN_MCP_STDIO_COMMAND_ALLOWLIST",
];
/// Launcher flags that run inline code.
const CODE_FLAGS: [&str; 9] = [
    "-c",
    "--call",
    "-e",
    "--eval",
    "-p",
    "--print",
    "-r",
    "--require",
    "--import",
];
/// Environment variables that make a launcher load other code.
const SHELL_METACHARS: [char; 9] = [';', '|', '&', '`', '$', '<', '>', '\n', '\r'];

/// Keys of a server entry Fawn understands (others are masked by name only).
const KNOWN_KEYS: [&str; 16] = [
    "enabled",
    "type",
    "transport",
    "command",
    "args",
    "env",
    "url",
    "headers",
    "oauth",
    "description",
    "tool_name_prefix",
    "session_init_timeout",
    "tool_call_timeout",
    "routing",
    "tools",
    "cwd",
];

/// `clientSecret` / `api-key` → `client_secret` / `api_key`.
fn snake(key: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = key.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev_lower =
                i > 0 && (chars[i - 1].is_ascii_lowercase() || chars[i - 1].is_ascii_digit());
            let next_lower = chars.get(i + 1).is_some_and(char::is_ascii_lowercase);
            let prev_upper = i > 0 && chars[i - 1].is_ascii_uppercase();
            if prev_lower || (prev_upper && next_lower) {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else if c.is_ascii_alphanumeric() {
            out.push(*c);
        } else {
            out.push('_');
        }
    }
    out
}

/// Whether a key names a secret.
pub fn sensitive_key(key: &str) -> bool {
    let k = snake(key);
    let words: Vec<&str> = k.split('_').filter(|w| !w.is_empty()).collect();
    const SINGLE: [&str; 9] = [
        "secret",
        "token",
        "password",
        "passwd",
        "credential",
        "credentials",
        "authorization",
        "bearer",
        "apikey",
    ];
    const PAIRS: [(&str, &str); 4] = [
        ("api", "key"),
        ("access", "key"),
        ("private", "key"),
        ("client", "secret"),
    ];
    words.iter().any(|w| SINGLE.contains(w))
        || words.windows(2).any(|p| PAIRS.contains(&(p[0], p[1])))
}

fn mask_nested(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| {
                    let masked = if sensitive_key(k) && !v.is_null() {
                        Value::String(MASK.into())
                    } else {
                        mask_nested(v)
                    };
                    (k.clone(), masked)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(mask_nested).collect()),
        other => other.clone(),
    }
}

fn mask_values(v: Option<&Value>) -> Value {
    match v {
        Some(Value::Object(o)) => Value::Object(
            o.keys()
                .map(|k| (k.clone(), Value::String(MASK.into())))
                .collect(),
        ),
        _ => Value::Object(Map::new()),
    }
}

/// One server as GET shows it: defaults filled in, secrets masked.
pub fn server_view(raw: &Map<String, Value>) -> Value {
    let mut v = Map::new();
    v.insert("enabled".into(), json!(true));
    v.insert("type".into(), json!("stdio"));
    v.insert("command".into(), Value::Null);
    v.insert("args".into(), json!([]));
    v.insert("env".into(), json!({}));
    v.insert("url".into(), Value::Null);
    v.insert("headers".into(), json!({}));
    v.insert("oauth".into(), Value::Null);
    v.insert("description".into(), json!(""));
    let has_type = raw.get("type").is_some_and(|t| !t.is_null());
    for (k, val) in raw {
        match k.as_str() {
            "transport" => {
                if !has_type && !val.is_null() {
                    v.insert("type".into(), val.clone());
                }
            }
            "env" | "headers" => {
                v.insert(k.clone(), mask_values(Some(val)));
                // A stored variable that would make the launcher run other code (written
                // before such keys were refused, or by hand) is named, not just masked:
                // that server is not started until it is removed.
                if k == "env"
                    && let Value::Object(env) = val
                {
                    let refused: Map<String, Value> = env
                        .keys()
                        .filter_map(|key| {
                            fawn_tools::mcp::launch::env_key_refusal(key)
                                .map(|why| (key.clone(), json!(why)))
                        })
                        .collect();
                    if !refused.is_empty() {
                        v.insert("refused_env".into(), Value::Object(refused));
                    }
                }
            }
            "oauth" => {
                let masked = match val {
                    Value::Object(o) => {
                        let mut o = o.clone();
                        for s in ["client_secret", "refresh_token"] {
                            if o.get(s).is_some_and(|x| !x.is_null()) {
                                o.insert(s.into(), json!(MASK));
                            }
                        }
                        for (key, val) in o.iter_mut() {
                            if key != "client_secret" && key != "refresh_token" {
                                *val = mask_nested(val);
                            }
                        }
                        Value::Object(o)
                    }
                    other => other.clone(),
                };
                v.insert(k.clone(), masked);
            }
            _ if KNOWN_KEYS.contains(&k.as_str()) => {
                v.insert(k.clone(), val.clone());
            }
            _ => {
                let masked = if sensitive_key(k) && !val.is_null() {
                    json!(MASK)
                } else {
                    mask_nested(val)
                };
                v.insert(k.clone(), masked);
            }
        }
    }
    Value::Object(v)
}

/// The raw `mcpServers` of the extensions file.
fn raw_servers(raw: &Map<String, Value>) -> Map<String, Value> {
    match raw.get("mcpServers").or_else(|| raw.get("mcp_servers")) {
        Some(Value::Object(o)) => o.clone(),
        _ => Map::new(),
    }
}

fn config_view(servers: &Map<String, Value>) -> Value {
    let out: Map<String, Value> = servers
        .iter()
        .map(|(name, s)| {
            let view = match s {
                Value::Object(o) => server_view(o),
                _ => server_view(&Map::new()),
            };
            (name.clone(), view)
        })
        .collect();
    json!({ "mcp_servers": out })
}

fn read_error(e: fawn_runtime::services::ExtensionsError) -> ApiError {
    ApiError::conflict(format!("extensions_config.json: {e}"))
}

/// `GET /api/mcp/config`.
pub async fn get(State(app): State<AppState>) -> ApiResult<Response> {
    let raw = app
        .services
        .extensions
        .current()
        .await
        .map_err(read_error)?;
    Ok(ok(&config_view(&raw_servers(&raw))))
}

fn masked_error(what: &str, server: &str, key: &str) -> ApiError {
    ApiError::bad_request(format!(
        "MCP server '{server}': cannot set {what} '{key}' to the masked value '{MASK}'; provide a real value"
    ))
}

/// `env` / `headers`: `***` → the stored value.
fn merge_map(
    what: &str,
    server: &str,
    incoming: &Value,
    existing: Option<&Value>,
) -> ApiResult<Value> {
    let Value::Object(inc) = incoming else {
        return Ok(incoming.clone());
    };
    let mut out = Map::new();
    for (k, v) in inc {
        if v.as_str() == Some(MASK) {
            match existing.and_then(|e| e.get(k)) {
                Some(stored) => {
                    out.insert(k.clone(), stored.clone());
                }
                None => return Err(masked_error(what, server, k)),
            }
        } else {
            out.insert(k.clone(), v.clone());
        }
    }
    Ok(Value::Object(out))
}

/// Other keys: a `***` under a secret-looking key → the stored value (recursively).
fn merge_extra(
    server: &str,
    key: &str,
    incoming: &Value,
    existing: Option<&Value>,
) -> ApiResult<Value> {
    if incoming.as_str() == Some(MASK) && sensitive_key(key) {
        return match existing {
            Some(e) => Ok(e.clone()),
            None => Err(masked_error("key", server, key)),
        };
    }
    match (incoming, existing) {
        (Value::Object(inc), Some(Value::Object(ex))) => {
            let mut out = Map::new();
            for (k, v) in inc {
                out.insert(k.clone(), merge_extra(server, k, v, ex.get(k))?);
            }
            Ok(Value::Object(out))
        }
        (Value::Object(inc), None) => {
            let mut out = Map::new();
            for (k, v) in inc {
                out.insert(k.clone(), merge_extra(server, k, v, None)?);
            }
            Ok(Value::Object(out))
        }
        (Value::Array(inc), Some(Value::Array(ex))) if inc.len() == ex.len() => Ok(Value::Array(
            inc.iter()
                .zip(ex)
                .map(|(i, e)| merge_extra(server, key, i, Some(e)))
                .collect::<ApiResult<Vec<_>>>()?,
        )),
        _ => Ok(incoming.clone()),
    }
}

fn merge_oauth(server: &str, incoming: &Value, existing: Option<&Value>) -> ApiResult<Value> {
    let Value::Object(inc) = incoming else {
        return Ok(incoming.clone());
    };
    let ex = existing.and_then(Value::as_object);
    let mut out = Map::new();
    for (k, v) in inc {
        if k == "client_secret" || k == "refresh_token" {
            let stored = ex.and_then(|e| e.get(k)).filter(|s| !s.is_null());
            let merged = match v {
                Value::Null => stored.cloned().unwrap_or(Value::Null),
                Value::String(s) if s == MASK => match stored {
                    Some(s) => s.clone(),
                    None => return Err(masked_error("oauth", server, k)),
                },
                Value::String(s) if s.is_empty() => Value::Null,
                other => other.clone(),
            };
            out.insert(k.clone(), merged);
        } else {
            out.insert(
                k.clone(),
                merge_extra(server, k, v, ex.and_then(|e| e.get(k)))?,
            );
        }
    }
    // Secrets the client left out entirely are kept too.
    if let Some(e) = ex {
        for k in ["client_secret", "refresh_token"] {
            if !out.contains_key(k)
                && let Some(s) = e.get(k)
            {
                out.insert(k.into(), s.clone());
            }
        }
    }
    Ok(Value::Object(out))
}

/// An incoming server merged with its stored version (masked values restored).
pub fn merge_server(
    name: &str,
    incoming: &Map<String, Value>,
    existing: Option<&Map<String, Value>>,
) -> ApiResult<Map<String, Value>> {
    let mut out = Map::new();
    // `refused_env` is what GET reports, not configuration: a view sent back drops it.
    for (k, v) in incoming.iter().filter(|(k, _)| k.as_str() != "refused_env") {
        let stored = existing.and_then(|e| e.get(k));
        let merged = match k.as_str() {
            "env" => merge_map("env key", name, v, stored)?,
            "headers" => merge_map("header", name, v, stored)?,
            "oauth" => merge_oauth(name, v, stored)?,
            _ => merge_extra(name, k, v, stored)?,
        };
        out.insert(k.clone(), merged);
    }
    if let Some(e) = existing {
        for (k, v) in e {
            let keep = match k.as_str() {
                "routing" | "tools" => true,
                other => !KNOWN_KEYS.contains(&other),
            };
            if keep && !out.contains_key(k) {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(out)
}

fn transport(server: &Map<String, Value>) -> String {
    server
        .get("type")
        .filter(|t| !t.is_null())
        .or_else(|| server.get("transport"))
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .unwrap_or("stdio")
        .trim()
        .to_ascii_lowercase()
}

/// The launch settings of a stdio server (what the allowlist guards); absent `args`/`env`
/// equal empty ones.
fn launch(server: &Map<String, Value>) -> (String, Value, Value, Value) {
    let or = |k: &str, empty: Value| match server.get(k) {
        None | Some(Value::Null) => empty,
        Some(v) => v.clone(),
    };
    (
        transport(server),
        or("command", Value::Null),
        or("args", json!([])),
        or("env", json!({})),
    )
}

fn allowlist() -> Vec<String> {
    let mut list: Vec<String> = DEFAULT_STDIO_ALLOWLIST
        .iter()
        .map(|s| s.to_string())
        .collect();
    for var in ALLOWLIST_VARS {
        if let Ok(v) = std::env::var(var) {
            list.extend(
                v.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty()),
            );
        }
    }
    list.sort();
    list.dedup();
    list
}

/// The API-side guard for a stdio server (reference §8.2).
pub fn check_stdio(name: &str, server: &Map<String, Value>, allowed: &[String]) -> ApiResult<()> {
    let bad = |m: String| Err(ApiError::bad_request(format!("MCP server '{name}': {m}")));
    let command = match server.get("command") {
        Some(Value::String(c)) if !c.trim().is_empty() => c,
        _ => return bad("a stdio server needs a command".into()),
    };
    if command.trim() != command
        || command.contains(['/', '\\'])
        || command.chars().any(char::is_whitespace)
        || command.contains(SHELL_METACHARS)
    {
        return bad("the command must be a single executable name; put parameters in args".into());
    }
    if !allowed.iter().any(|a| a == command) {
        return bad(format!(
            "stdio command '{command}' is not allowed (allowed: {}); extend \
             DEER_FLOW_MCP_STDIO_COMMAND_ALLOWLIST to permit it",
            allowed.join(", ")
        ));
    }
    if let Some(args) = server.get("args") {
        let Some(args) = args.as_array() else {
            return bad("args must be a list of strings".into());
        };
        for a in args {
            let Some(a) = a.as_str() else {
                return bad("args must be a list of strings".into());
            };
            if !a.starts_with('-') {
                break; // the package: the launcher's options end here
            }
            let flag = a.split('=').next().unwrap_or(a);
            if CODE_FLAGS.contains(&flag) {
                return bad(format!(
                    "the launcher option '{flag}' runs inline code and is not allowed"
                ));
            }
        }
    }
    match server.get("env") {
        None | Some(Value::Null) => {}
        Some(Value::Object(env)) => {
            for k in env.keys() {
                if let Some(why) = fawn_tools::mcp::launch::env_key_refusal(k) {
                    return bad(format!("the environment variable '{k}' {why}"));
                }
            }
        }
        Some(_) => return bad("env must be an object of strings".into()),
    }
    Ok(())
}

/// Validates `servers` against the stored ones and writes them.
async fn store_servers(
    app: &AppState,
    mut raw: Map<String, Value>,
    servers: Map<String, Value>,
    previous: &Map<String, Value>,
) -> ApiResult<Value> {
    let allowed = allowlist();
    for (name, s) in &servers {
        let Value::Object(s) = s else {
            return Err(ApiError::unprocessable(format!(
                "Invalid request body at `mcp_servers.{name}`: expected an object"
            )));
        };
        if transport(s) != "stdio" {
            continue;
        }
        let unchanged = previous
            .get(name)
            .and_then(Value::as_object)
            .is_some_and(|p| launch(p) == launch(s));
        if !unchanged {
            check_stdio(name, s, &allowed)?;
        }
    }
    raw.remove("mcp_servers");
    raw.insert("mcpServers".into(), Value::Object(servers.clone()));
    let text = serde_json::to_string(&raw)
        .map_err(|e| ApiError::internal("serializing the MCP config", e))?;
    let opts = fawn_config::LoadOptions::from_process();
    if let Err(errors) = fawn_config::load_str("{}", Some(&text), &opts) {
        let detail: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
        return Err(ApiError::unprocessable(format!(
            "Invalid MCP configuration: {}",
            detail.join("; ")
        )));
    }
    let gw = &app.services;
    gw.extensions
        .write(&raw)
        .await
        .map_err(|e| ApiError::internal("saving the MCP config", e))?;
    gw.mcp.follow(gw.extensions.path()).await;
    Ok(config_view(&servers))
}

#[derive(Debug, Deserialize)]
pub struct PutBody {
    mcp_servers: Map<String, Value>,
}

/// `PUT /api/mcp/config`.
pub async fn put(
    State(app): State<AppState>,
    JsonBody(body): JsonBody<PutBody>,
) -> ApiResult<Response> {
    let gw = &app.services;
    let _guard = gw.extensions.lock().await;
    let raw = gw.extensions.current().await.map_err(read_error)?;
    let previous = raw_servers(&raw);
    let mut servers = Map::new();
    for (name, incoming) in &body.mcp_servers {
        if name.trim().is_empty() {
            return Err(ApiError::unprocessable("MCP server names cannot be empty"));
        }
        let Value::Object(incoming) = incoming else {
            return Err(ApiError::unprocessable(format!(
                "Invalid request body at `mcp_servers.{name}`: expected an object"
            )));
        };
        let existing = previous.get(name).and_then(Value::as_object);
        servers.insert(
            name.clone(),
            Value::Object(merge_server(name, incoming, existing)?),
        );
    }
    let view = store_servers(&app, raw.clone(), servers, &previous).await?;
    Ok(ok(&view))
}

#[derive(Debug, Deserialize)]
pub struct PatchBody {
    server_name: String,
    enabled: bool,
}

/// `PATCH /api/mcp/config` `{server_name, enabled}`.
pub async fn patch(
    State(app): State<AppState>,
    JsonBody(body): JsonBody<PatchBody>,
) -> ApiResult<Response> {
    let gw = &app.services;
    let _guard = gw.extensions.lock().await;
    let raw = gw.extensions.current().await.map_err(read_error)?;
    let previous = raw_servers(&raw);
    let mut servers = previous.clone();
    match servers.get_mut(&body.server_name) {
        Some(Value::Object(s)) => {
            s.insert("enabled".into(), Value::Bool(body.enabled));
        }
        _ => {
            return Err(ApiError::not_found(format!(
                "MCP server '{}' not found",
                body.server_name
            )));
        }
    }
    let view = store_servers(&app, raw.clone(), servers, &previous).await?;
    Ok(ok(&view))
}

/// `POST /api/mcp/cache/reset`.
pub async fn reset(State(app): State<AppState>) -> Response {
    app.services.mcp.current().reset().await;
    ok(&json!({
        "success": true,
        "message": "MCP sessions closed and tools cleared; the next run reconnects",
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn secret_keys() {
        for k in [
            "api_key",
            "apiKey",
            "API_KEY",
            "clientSecret",
            "token",
            "x-auth-token",
            "password",
            "Authorization",
            "privateKey",
        ] {
            assert!(sensitive_key(k), "{k}");
        }
        for k in [
            "command",
            "url",
            "description",
            "keywords",
            "tokenizer_name",
            "max_tokens",
        ] {
            assert!(!sensitive_key(k), "{k}");
        }
    }

    #[test]
    fn view_masks_and_fills_defaults() {
        let v = server_view(&obj(json!({
            "transport": "http", "url": "http://x", "headers": {"X-Key": "$KEY"},
            "oauth": {"token_url": "t", "client_secret": "s", "refresh_token": null},
            "apiKey": "k", "routing": {"keywords": ["a"]}
        })));
        assert_eq!(v["type"], "http");
        assert_eq!(v["headers"], json!({"X-Key": "***"}));
        assert_eq!(v["oauth"]["client_secret"], "***");
        assert_eq!(v["oauth"]["refresh_token"], Value::Null);
        assert_eq!(v["apiKey"], "***");
        assert_eq!(v["enabled"], true);
        assert_eq!(v["routing"], json!({"keywords": ["a"]}));
        assert!(v.get("refused_env").is_none());
        let planted = server_view(&obj(json!({
            "command": "npx", "env": {"npm_config_call": "touch /tmp/x", "TOKEN": "t"}
        })));
        assert_eq!(
            planted["env"],
            json!({"npm_config_call": "***", "TOKEN": "***"})
        );
        let why = planted["refused_env"]["npm_config_call"].as_str().unwrap();
        assert!(why.contains("run other code"), "{why}");
        assert!(planted["refused_env"].get("TOKEN").is_none());
    }

    #[test]
    fn merge_restores_masked_values() {
        let existing = obj(json!({
            "command": "npx", "env": {"TOKEN": "real"},
            "oauth": {"client_secret": "s1", "refresh_token": "r1"},
            "routing": {"mode": "prefer"}, "custom_secret": "c1"
        }));
        let merged = merge_server(
            "gh",
            &obj(json!({
                "command": "npx", "env": {"TOKEN": "***", "NEW": "v"},
                "oauth": {"client_secret": "***", "refresh_token": ""},
                "custom_secret": "***"
            })),
            Some(&existing),
        )
        .unwrap();
        assert_eq!(merged["env"], json!({"TOKEN": "real", "NEW": "v"}));
        assert_eq!(merged["oauth"]["client_secret"], "s1");
        assert_eq!(merged["oauth"]["refresh_token"], Value::Null);
        assert_eq!(merged["routing"], json!({"mode": "prefer"}));
        assert_eq!(merged["custom_secret"], "c1");
        let e = merge_server(
            "gh",
            &obj(json!({"env": {"OTHER": "***"}})),
            Some(&existing),
        )
        .unwrap_err();
        assert_eq!(e.status, 400);
        assert!(e.detail.contains("OTHER"), "{}", e.detail);
    }

    #[test]
    fn stdio_guard() {
        let allowed = vec!["npx".to_string(), "uvx".to_string()];
        let ok = |v: Value| check_stdio("s", &obj(v), &allowed);
        assert!(ok(json!({"command": "npx", "args": ["-y", "@scope/server", "-c", "x"]})).is_ok());
        for bad in [
            json!({"command": "bash", "args": ["-c", "id"]}),
            json!({"command": "/usr/bin/npx"}),
            json!({"command": "npx; rm"}),
            json!({"command": "npx", "args": ["-c", "id"]}),
            json!({"command": "npx", "args": ["--call=id"]}),
            json!({"command": "uvx", "env": {"PYTHONPATH": "/tmp"}}),
            json!({"command": "npx", "env": {"node_options": "--require x"}}),
            // The exploit: npm runs `npm_config_call` as a shell command.
            json!({"command": "npx", "args": ["-y", "some-mcp"],
                   "env": {"npm_config_call": "touch /tmp/owned"}}),
            json!({"command": "uvx", "env": {"UV_CONFIG_FILE": "/tmp/uv.toml"}}),
            json!({"command": "npx", "env": {"PATH": "/tmp/evil:/usr/bin"}}),
            json!({"command": "npx", "env": {"HOME": "/tmp/evil"}}),
            json!({"command": "npx", "env": "NODE_OPTIONS=x"}),
            json!({"args": []}),
        ] {
            assert_eq!(ok(bad.clone()).unwrap_err().status, 400, "{bad}");
        }
    }
}
