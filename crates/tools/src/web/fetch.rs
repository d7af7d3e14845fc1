//! `web_fetch` providers: a direct fetch with the SSRF guard, the Jina reader and Tavily
//! extract. Output: the page as Markdown (`# Title` then the text), first `max_chars`
//! characters.

use super::guard::{GuardError, SsrfPolicy, find_guard_error};
use super::{
    DEFAULT_FETCH_TIMEOUT, DEFAULT_MAX_BYTES, DEFAULT_MAX_CHARS, DEFAULT_MAX_REDIRECTS,
    JINA_BASE_URL, TAVILY_BASE_URL, USER_AGENT, WebToolOptions, api_key, html, provider_client,
    read_capped, take_chars,
};
use crate::args::{parse_args, schema_for};
use crate::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use reqwest::header::{ACCEPT, CONTENT_TYPE, LOCATION};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;
use url::Url;

/// Which service reads the page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchBackend {
    /// Fawn fetches the page itself (SSRF guard on every hop) and converts HTML to Markdown.
    Direct,
    /// `POST {base}/` of a Jina reader with `{"url": …}`; returns Markdown.
    Jina,
    /// `POST {base}/extract` of Tavily with `{"urls": [...]}`.
    Tavily,
}

impl FetchBackend {
    fn label(&self) -> &'static str {
        match self {
            FetchBackend::Direct => "direct",
            FetchBackend::Jina => "Jina reader",
            FetchBackend::Tavily => "Tavily extract",
        }
    }
}

const DESCRIPTION: &str = "\
Read a web page and return its main content as Markdown (the beginning of the page, a few \
thousand characters). Give a full http or https URL, typically one from web_search results or \
one the user gave you. Private, local-network and cloud-metadata addresses are refused.";

/// Arguments of `web_fetch`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WebFetchArgs {
    /// The full URL to read, starting with http:// or https://.
    pub url: String,
}

/// `web_fetch(url)` served by one [`FetchBackend`].
pub struct WebFetchTool {
    name: String,
    backend: FetchBackend,
    options: WebToolOptions,
    policy: SsrfPolicy,
    base_url: String,
    timeout: Duration,
    max_chars: usize,
    max_bytes: usize,
    max_redirects: usize,
    /// Direct: the guarded client (no redirects, no proxy, checked DNS). Others: provider client.
    client: reqwest::Client,
}

impl std::fmt::Debug for WebFetchTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebFetchTool")
            .field("name", &self.name)
            .field("backend", &self.backend)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl WebFetchTool {
    pub fn new(
        name: impl Into<String>,
        backend: FetchBackend,
        options: WebToolOptions,
        policy: SsrfPolicy,
    ) -> Result<Self, String> {
        let timeout = options.timeout_or(DEFAULT_FETCH_TIMEOUT);
        let base_url = match backend {
            FetchBackend::Direct => String::new(),
            FetchBackend::Jina => options.base_or(JINA_BASE_URL),
            FetchBackend::Tavily => options.base_or(TAVILY_BASE_URL),
        };
        let client = match backend {
            FetchBackend::Direct => {
                let mut b = fawn_net::client_builder()
                    .user_agent(USER_AGENT)
                    .redirect(reqwest::redirect::Policy::none())
                    .no_proxy()
                    .connect_timeout(timeout.min(Duration::from_secs(10)))
                    .timeout(timeout);
                if !policy.allow_private {
                    b = b.dns_resolver(Arc::new(super::guard::GuardedResolver));
                }
                b.build()
                    .map_err(|e| format!("cannot build HTTP client: {e}"))?
            }
            _ => provider_client(timeout)?,
        };
        Ok(WebFetchTool {
            name: name.into(),
            backend,
            base_url,
            timeout,
            max_chars: options
                .max_chars
                .map(|n| n as usize)
                .unwrap_or(DEFAULT_MAX_CHARS),
            max_bytes: options
                .max_bytes
                .map(|n| n as usize)
                .unwrap_or(DEFAULT_MAX_BYTES),
            max_redirects: options
                .max_redirects
                .map(|n| n as usize)
                .unwrap_or(DEFAULT_MAX_REDIRECTS),
            options,
            policy,
            client,
        })
    }

    pub fn backend(&self) -> &FetchBackend {
        &self.backend
    }

    pub fn options(&self) -> &WebToolOptions {
        &self.options
    }

    pub fn policy(&self) -> &SsrfPolicy {
        &self.policy
    }

    async fn fetch(&self, url: Url) -> Result<String, String> {
        match self.backend {
            FetchBackend::Direct => self.direct(url).await,
            FetchBackend::Jina => {
                self.check_target(&url).await?;
                self.jina(url).await
            }
            FetchBackend::Tavily => {
                self.check_target(&url).await?;
                self.tavily(url).await
            }
        }
    }

    /// For the reader services: the model's URL must pass the guard too, so a self-hosted
    /// reader cannot be used to reach our private network.
    async fn check_target(&self, url: &Url) -> Result<(), String> {
        self.policy
            .check(url)
            .await
            .map_err(|e| format!("Refusing to fetch {url}: {e}"))
    }

    async fn direct(&self, start: Url) -> Result<String, String> {
        let mut current = start.clone();
        let mut previous: Option<Url> = None;
        for _hop in 0..=self.max_redirects {
            if let Err(e) = self.policy.check(&current).await {
                return Err(refusal(&current, previous.as_ref(), &e));
            }
            let resp = self
                .client
                .get(current.clone())
                .headers(super::trace_headers())
                .header(
                    ACCEPT,
                    "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5",
                )
                .send()
                .await
                .map_err(|e| match find_guard_error(&e) {
                    Some(g) => refusal(&current, previous.as_ref(), &g),
                    None if e.is_timeout() => format!("timed out fetching {current}"),
                    None => format!("could not fetch {current}: {}", without_url(&e)),
                })?;
            let status = resp.status();
            if status.is_redirection() {
                let location = resp
                    .headers()
                    .get(LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| {
                        format!("{current} answered HTTP {status} without a Location header")
                    })?;
                let next = current
                    .join(location)
                    .map_err(|e| format!("{current} redirected to an invalid URL: {e}"))?;
                previous = Some(current);
                current = next;
                continue;
            }
            if !status.is_success() {
                return Err(format!("{current} answered HTTP {status}"));
            }
            let content_type = resp
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_ascii_lowercase();
            let (body, _cut) = read_capped(resp, self.max_bytes)
                .await
                .map_err(|e| format!("could not read {current}: {}", without_url(&e)))?;
            return render(&current, &content_type, &body);
        }
        Err(format!(
            "too many redirects (more than {}) fetching {start}",
            self.max_redirects
        ))
    }

    async fn jina(&self, url: Url) -> Result<String, String> {
        let mut req = self
            .client
            .post(format!("{}/", self.base_url))
            .headers(super::trace_headers())
            .header(ACCEPT, "text/plain")
            .header("X-Return-Format", "markdown")
            .header("X-Timeout", self.timeout.as_secs().max(1).to_string())
            .json(&json!({ "url": url.as_str() }));
        if let Some(key) = api_key(&self.options.api_key, "JINA_API_KEY") {
            req = req.bearer_auth(key);
        }
        let resp = req.send().await.map_err(|e| provider_error("Jina", &e))?;
        let status = resp.status();
        let (body, _) = read_capped(resp, self.max_bytes)
            .await
            .map_err(|e| provider_error("Jina", &e))?;
        let text = String::from_utf8_lossy(&body);
        if !status.is_success() {
            return Err(format!(
                "Jina reader answered HTTP {status}: {}",
                take_chars(text.trim(), 300)
            ));
        }
        Ok(text.trim().to_string())
    }

    async fn tavily(&self, url: Url) -> Result<String, String> {
        let key = api_key(&self.options.api_key, "TAVILY_API_KEY")
            .ok_or("Tavily needs an API key: set TAVILY_API_KEY or api_key in the tool's config")?;
        let resp = self
            .client
            .post(format!("{}/extract", self.base_url))
            .headers(super::trace_headers())
            .bearer_auth(key)
            .json(&json!({ "urls": [url.as_str()] }))
            .send()
            .await
            .map_err(|e| provider_error("Tavily", &e))?;
        let status = resp.status();
        let (body, _) = read_capped(resp, self.max_bytes)
            .await
            .map_err(|e| provider_error("Tavily", &e))?;
        if !status.is_success() {
            return Err(format!(
                "Tavily answered HTTP {status}: {}",
                take_chars(String::from_utf8_lossy(&body).trim(), 300)
            ));
        }
        let v: Value =
            serde_json::from_slice(&body).map_err(|e| format!("Tavily sent invalid JSON: {e}"))?;
        let first = v
            .get("results")
            .and_then(Value::as_array)
            .and_then(|a| a.first());
        let Some(r) = first else {
            let why = v
                .get("failed_results")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                .and_then(|f| f.get("error"))
                .and_then(Value::as_str)
                .unwrap_or("no content extracted");
            return Err(format!("Tavily could not read {url}: {why}"));
        };
        let content = r.get("raw_content").and_then(Value::as_str).unwrap_or("");
        Ok(match r.get("title").and_then(Value::as_str) {
            Some(t) if !t.trim().is_empty() => format!("# {}\n\n{}", t.trim(), content.trim()),
            _ => content.trim().to_string(),
        })
    }
}

fn refusal(url: &Url, from: Option<&Url>, e: &GuardError) -> String {
    match from {
        Some(prev) => format!("Refusing to follow the redirect from {prev} to {url}: {e}"),
        None => format!("Refusing to fetch {url}: {e}"),
    }
}

fn provider_error(provider: &str, e: &reqwest::Error) -> String {
    if e.is_timeout() {
        format!("{provider} did not answer in time")
    } else {
        format!("{provider} request failed: {}", without_url(e))
    }
}

/// reqwest's error text without the URL it appends (we name the URL ourselves).
fn without_url(e: &reqwest::Error) -> String {
    let mut parts = vec![];
    let mut cur: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(err) = cur {
        parts.push(err.to_string());
        cur = err.source();
    }
    if parts.is_empty() {
        e.to_string()
    } else {
        parts.join(": ")
    }
}

fn is_html(content_type: &str, body: &[u8]) -> bool {
    if content_type.contains("html") {
        return true;
    }
    if !content_type.is_empty() {
        return false;
    }
    let head = String::from_utf8_lossy(&body[..body.len().min(1024)]).to_ascii_lowercase();
    head.contains("<html") || head.contains("<!doctype html")
}

fn is_text(content_type: &str) -> bool {
    let mime = content_type.split(';').next().unwrap_or("").trim();
    mime.starts_with("text/")
        || mime.ends_with("+json")
        || mime.ends_with("+xml")
        || matches!(
            mime,
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/x-javascript"
                | "application/ecmascript"
                | "application/x-yaml"
                | "application/yaml"
                | "application/toml"
                | "application/markdown"
        )
}

/// Page body → the text the model gets.
fn render(url: &Url, content_type: &str, body: &[u8]) -> Result<String, String> {
    let mime = content_type.split(';').next().unwrap_or("").trim();
    if is_html(content_type, body) {
        let page = html::to_markdown(&String::from_utf8_lossy(body), Some(url));
        let text = match page.title {
            Some(t) => format!("# {t}\n\n{}", page.markdown),
            None => page.markdown,
        };
        if text.trim().is_empty() {
            return Err(format!("{url} has no readable text"));
        }
        return Ok(text);
    }
    let binary = body[..body.len().min(8192)].contains(&0);
    if (!mime.is_empty() && !is_text(content_type)) || binary {
        let shown = if mime.is_empty() { "binary data" } else { mime };
        return Err(format!(
            "{url} is {shown}, not a text or HTML page; web_fetch only reads text"
        ));
    }
    let text = String::from_utf8_lossy(body).trim().to_string();
    if text.is_empty() {
        return Err(format!("{url} returned an empty body"));
    }
    Ok(text)
}

#[async_trait]
impl Tool for WebFetchTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> Arc<Value> {
        schema_for::<WebFetchArgs>()
    }

    async fn call(
        &self,
        args: Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: WebFetchArgs = parse_args(&self.name, args)?;
        let raw = args.url.trim();
        let url = match Url::parse(raw) {
            Ok(u) => u,
            Err(e) => {
                return Ok(ToolOutput::error(format!(
                    "Error: '{raw}' is not a valid URL ({e}); give a full http:// or https:// address"
                )));
            }
        };
        let fut = tokio::time::timeout(self.timeout, self.fetch(url.clone()));
        let outcome = tokio::select! {
            r = fut => r,
            _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        match outcome {
            Err(_) => Ok(ToolOutput::error(format!(
                "Error: web_fetch ({}) timed out after {}s fetching {url}",
                self.backend.label(),
                self.timeout.as_secs_f64()
            ))),
            Ok(Err(e)) => Ok(ToolOutput::error(format!("Error: {e}"))),
            Ok(Ok(text)) => Ok(ToolOutput::text(take_chars(&text, self.max_chars))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u() -> Url {
        Url::parse("https://example.com/p").unwrap()
    }

    #[test]
    fn renders_by_content_type() {
        let html = b"<html><head><title>T</title></head><body><p>Hi <a href='/x'>there</a></p></body></html>";
        assert_eq!(
            render(&u(), "text/html; charset=utf-8", html).unwrap(),
            "# T\n\nHi [there](https://example.com/x)"
        );
        assert_eq!(render(&u(), "", html).unwrap().lines().next(), Some("# T"));
        assert_eq!(render(&u(), "text/plain", b" plain ").unwrap(), "plain");
        assert_eq!(
            render(&u(), "application/json", b"{\"a\":1}").unwrap(),
            "{\"a\":1}"
        );
        let e = render(&u(), "image/png", b"\x89PNG\r\n").unwrap_err();
        assert!(
            e.contains("image/png") && e.contains("only reads text"),
            "{e}"
        );
        let e = render(&u(), "", b"ab\0cd").unwrap_err();
        assert!(e.contains("binary data"), "{e}");
        assert!(render(&u(), "text/plain", b"   ").is_err());
    }
}
