//! Web tools: `web_search` and `web_fetch` with several providers (reference §3.5).
//!
//! | tool | providers | keys |
//! |---|---|---|
//! | `web_search` | Tavily, DuckDuckGo (HTML endpoint, no key), SearXNG (JSON API, configured URL) | `TAVILY_API_KEY` or `api_key:` |
//! | `web_fetch` | direct (our own HTTP fetch, HTML → Markdown), Jina reader, Tavily extract | `JINA_API_KEY` (optional), `TAVILY_API_KEY` |
//!
//! Options come from the tool's `config.yaml` entry ([`WebToolOptions`]): `max_results`,
//! `timeout` (seconds), `max_chars`, `max_bytes`, `max_redirects`, `api_key`, `base_url`.
//! Provider base URLs are trusted configuration; the URL the **model** asks to fetch is not:
//! it goes through the [`guard`] (see there) unless `web.allow_private_addresses` is on.
//!
//! Every failure comes back to the model as an `Error: …` ToolMessage (status `error`).

mod fetch;
pub mod guard;
pub mod html;
mod search;

pub use fetch::{FetchBackend, WebFetchTool};
pub use guard::SsrfPolicy;
pub use search::{SearchBackend, SearchResult, WebSearchTool, parse_duckduckgo_html};

use serde::Deserialize;
use serde_json::{Map, Value};
use std::time::Duration;

/// Default Tavily API.
pub const TAVILY_BASE_URL: &str = "https://api.tavily.com";
/// Default DuckDuckGo HTML endpoint host.
pub const DUCKDUCKGO_BASE_URL: &str = "https://html.duckduckgo.com";
/// Default Jina reader.
pub const JINA_BASE_URL: &str = "https://r.jina.ai";

/// Default number of search results (DeerFlow's 5).
pub const DEFAULT_MAX_RESULTS: usize = 5;
/// Hard cap on search results.
pub const MAX_RESULTS_CAP: usize = 20;
/// Default characters returned by `web_fetch` (DeerFlow's 4096).
pub const DEFAULT_MAX_CHARS: usize = 4096;
/// Default cap on bytes read from a fetched page.
pub const DEFAULT_MAX_BYTES: usize = 5 * 1024 * 1024;
/// Default redirect hops followed by the direct fetcher.
pub const DEFAULT_MAX_REDIRECTS: usize = 5;
/// Default timeouts (seconds).
pub const DEFAULT_SEARCH_TIMEOUT: f64 = 20.0;
pub const DEFAULT_FETCH_TIMEOUT: f64 = 10.0;

const USER_AGENT: &str = concat!(
    "Mozilla/5.0 (compatible; Fawn/",
    env!("CARGO_PKG_VERSION"),
    "; web tools)"
);

/// The extra keys of a web tool's `tools:` entry. Unknown keys are ignored (DeerFlow
/// configs carry provider-specific ones); known keys must have the right type.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct WebToolOptions {
    /// Search: default and upper bound of results per call (1..=20).
    pub max_results: Option<u64>,
    /// Seconds for the whole call (search request, or fetch including redirects).
    pub timeout: Option<f64>,
    /// Fetch: characters of page text returned (default 4096).
    pub max_chars: Option<u64>,
    /// Fetch: bytes read from the server at most (default 5 MiB).
    pub max_bytes: Option<u64>,
    /// Direct fetch: redirect hops followed (default 5).
    pub max_redirects: Option<u64>,
    /// Provider API key (else the provider's environment variable).
    pub api_key: Option<String>,
    /// Provider endpoint (trusted config; required for SearXNG).
    pub base_url: Option<String>,
    /// Tavily search depth: `basic` or `advanced`.
    pub search_depth: Option<String>,
}

/// A problem with a web tool's options, tied to the option's key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionError {
    /// The option key (`max_results`), or empty for the entry as a whole.
    pub key: String,
    pub message: String,
}

impl OptionError {
    fn new(key: &str, message: impl Into<String>) -> Self {
        OptionError {
            key: key.to_string(),
            message: message.into(),
        }
    }
}

const KNOWN_KEYS: [&str; 8] = [
    "max_results",
    "timeout",
    "max_chars",
    "max_bytes",
    "max_redirects",
    "api_key",
    "base_url",
    "search_depth",
];

impl WebToolOptions {
    /// Reads the options from a `tools:` entry's extra keys.
    pub fn from_extra(extra: &Map<String, Value>) -> Result<Self, Vec<OptionError>> {
        let mut errors = Vec::new();
        let mut known = Map::new();
        for (k, v) in extra {
            if KNOWN_KEYS.contains(&k.as_str()) && !v.is_null() {
                known.insert(k.clone(), v.clone());
            }
        }
        // Type each key on its own so every bad one is reported.
        for (k, v) in &known {
            let mut single = Map::new();
            single.insert(k.clone(), v.clone());
            if let Err(e) = serde_json::from_value::<WebToolOptions>(Value::Object(single)) {
                let msg = e.to_string();
                let msg = msg.split(" at line").next().unwrap_or(&msg).to_string();
                errors.push(OptionError::new(k, msg));
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let opts: WebToolOptions = serde_json::from_value(Value::Object(known))
            .map_err(|e| vec![OptionError::new("", e.to_string())])?;
        opts.check()?;
        Ok(opts)
    }

    fn check(&self) -> Result<(), Vec<OptionError>> {
        let mut errors = Vec::new();
        if let Some(n) = self.max_results
            && !(1..=MAX_RESULTS_CAP as u64).contains(&n)
        {
            errors.push(OptionError::new(
                "max_results",
                format!("must be between 1 and {MAX_RESULTS_CAP}, got {n}"),
            ));
        }
        if let Some(t) = self.timeout
            && !(t.is_finite() && t > 0.0 && t <= 3600.0)
        {
            errors.push(OptionError::new(
                "timeout",
                format!("must be a number of seconds between 0 and 3600, got {t}"),
            ));
        }
        for (key, v) in [("max_chars", self.max_chars), ("max_bytes", self.max_bytes)] {
            if v == Some(0) {
                errors.push(OptionError::new(key, "must be greater than 0"));
            }
        }
        if let Some(n) = self.max_redirects
            && n > 20
        {
            errors.push(OptionError::new(
                "max_redirects",
                format!("must be at most 20, got {n}"),
            ));
        }
        if let Some(u) = &self.base_url {
            match url::Url::parse(u) {
                Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {}
                Ok(parsed) => errors.push(OptionError::new(
                    "base_url",
                    format!(
                        "must be an http or https URL, got scheme '{}'",
                        parsed.scheme()
                    ),
                )),
                Err(e) => errors.push(OptionError::new(
                    "base_url",
                    format!("invalid URL '{u}': {e}"),
                )),
            }
        }
        if let Some(d) = &self.search_depth
            && !matches!(d.as_str(), "basic" | "advanced")
        {
            errors.push(OptionError::new(
                "search_depth",
                format!("expected basic or advanced, got \"{d}\""),
            ));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// Extra keys this tool does not know (for a warning).
    pub fn unknown_keys(extra: &Map<String, Value>) -> Vec<String> {
        extra
            .keys()
            .filter(|k| !KNOWN_KEYS.contains(&k.as_str()))
            .cloned()
            .collect()
    }

    fn timeout_or(&self, default: f64) -> Duration {
        Duration::from_secs_f64(self.timeout.unwrap_or(default))
    }

    fn base_or(&self, default: &str) -> String {
        self.base_url
            .clone()
            .unwrap_or_else(|| default.to_string())
            .trim_end_matches('/')
            .to_string()
    }
}

/// An API key from the option or, failing that, the environment variable `env`.
fn api_key(option: &Option<String>, env: &str) -> Option<String> {
    option
        .clone()
        .filter(|k| !k.trim().is_empty())
        .or_else(|| std::env::var(env).ok().filter(|k| !k.trim().is_empty()))
}

/// Client for trusted provider APIs.
fn provider_client(timeout: Duration) -> Result<reqwest::Client, String> {
    fawn_net::client_builder()
        .user_agent(USER_AGENT)
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .timeout(timeout)
        .build()
        .map_err(|e| format!("cannot build HTTP client: {e}"))
}

/// Truncates to `max` characters.
pub(crate) fn take_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => s[..i].to_string(),
        None => s.to_string(),
    }
}

/// Reads a response body, stopping after `cap` bytes. The bool says the body was cut.
async fn read_capped(
    mut resp: reqwest::Response,
    cap: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut buf: Vec<u8> = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        let room = cap.saturating_sub(buf.len());
        if chunk.len() > room {
            buf.extend_from_slice(&chunk[..room]);
            return Ok((buf, true));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok((buf, false))
}

/// The current span's `traceparent` (when tracing is on), for the tools' outgoing requests.
pub(crate) fn trace_headers() -> reqwest::header::HeaderMap {
    let mut h = reqwest::header::HeaderMap::new();
    fawn_telemetry::trace::inject(&mut h);
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn extra(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn options_are_typed_and_checked() {
        let o = WebToolOptions::from_extra(&extra(json!({
            "max_results": 7, "timeout": 2.5, "api_key": "k", "whatever": true
        })))
        .unwrap();
        assert_eq!(o.max_results, Some(7));
        assert_eq!(o.timeout, Some(2.5));
        assert_eq!(o.api_key.as_deref(), Some("k"));

        let e = WebToolOptions::from_extra(&extra(json!({
            "max_results": "five", "timeout": -1, "base_url": "ftp://x"
        })))
        .unwrap_err();
        let keys: Vec<&str> = e.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, vec!["max_results"], "type errors first: {e:?}");

        let e = WebToolOptions::from_extra(&extra(json!({
            "max_results": 0, "timeout": -1, "base_url": "ftp://x", "max_chars": 0
        })))
        .unwrap_err();
        let keys: Vec<&str> = e.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            vec!["max_results", "timeout", "max_chars", "base_url"]
        );
        assert_eq!(
            WebToolOptions::unknown_keys(&extra(json!({"max_results": 1, "foo": 2}))),
            vec!["foo".to_string()]
        );
    }

    #[test]
    fn chars_are_cut_on_boundaries() {
        assert_eq!(take_chars("héllo", 2), "hé");
        assert_eq!(take_chars("abc", 10), "abc");
    }
}
