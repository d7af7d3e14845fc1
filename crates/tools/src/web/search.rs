//! `web_search` providers. Output: a JSON array of `{title, url, snippet}`.

use super::html::{Token, collapse_ws, tokenize};
use super::{
    DEFAULT_MAX_RESULTS, DEFAULT_SEARCH_TIMEOUT, DUCKDUCKGO_BASE_URL, MAX_RESULTS_CAP,
    TAVILY_BASE_URL, WebToolOptions, api_key, provider_client, read_capped,
};
use crate::args::{parse_args, schema_for};
use crate::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;
use url::Url;

/// One search hit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchResult {
    pub title: String,
    pub url: String,
    pub snippet: String,
}

/// Which search service answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SearchBackend {
    /// `POST {base}/search` with a bearer key.
    Tavily,
    /// `POST {base}/html/` (DuckDuckGo's HTML results page), no key.
    DuckDuckGo,
    /// `GET {base}/search?format=json` of a SearXNG instance (`base_url` required).
    Searxng,
}

impl SearchBackend {
    fn label(&self) -> &'static str {
        match self {
            SearchBackend::Tavily => "Tavily",
            SearchBackend::DuckDuckGo => "DuckDuckGo",
            SearchBackend::Searxng => "SearXNG",
        }
    }
}

/// Longest title and snippet kept per result (bounds the ToolMessage).
const MAX_TITLE_CHARS: usize = 300;
const MAX_SNIPPET_CHARS: usize = 1000;

const DESCRIPTION: &str = "\
Search the web for current information, news, articles and facts. Returns a JSON array of \
results, each with `title`, `url` and `snippet`. Use specific keywords; follow up with \
web_fetch to read a page in full.";

/// Arguments of `web_search`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WebSearchArgs {
    /// What to search for. Specific keywords give better results.
    pub query: String,
    /// How many results to return (default 5, at most 20).
    #[serde(default)]
    pub max_results: Option<u32>,
}

/// `web_search(query, max_results?)` answered by one [`SearchBackend`].
pub struct WebSearchTool {
    name: String,
    backend: SearchBackend,
    options: WebToolOptions,
    base_url: String,
    timeout: Duration,
    client: reqwest::Client,
}

impl std::fmt::Debug for WebSearchTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSearchTool")
            .field("name", &self.name)
            .field("backend", &self.backend)
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl WebSearchTool {
    /// Builds the tool. Fails when the options cannot work (SearXNG without `base_url`).
    pub fn new(
        name: impl Into<String>,
        backend: SearchBackend,
        options: WebToolOptions,
    ) -> Result<Self, String> {
        let base_url = match (&backend, &options.base_url) {
            (SearchBackend::Searxng, None) => {
                return Err(
                    "SearXNG needs base_url: the address of your SearXNG instance".to_string(),
                );
            }
            (SearchBackend::Tavily, _) => options.base_or(TAVILY_BASE_URL),
            (SearchBackend::DuckDuckGo, _) => options.base_or(DUCKDUCKGO_BASE_URL),
            (SearchBackend::Searxng, Some(_)) => options.base_or(""),
        };
        let timeout = options.timeout_or(DEFAULT_SEARCH_TIMEOUT);
        Ok(WebSearchTool {
            name: name.into(),
            backend,
            base_url,
            timeout,
            client: provider_client(timeout)?,
            options,
        })
    }

    pub fn backend(&self) -> &SearchBackend {
        &self.backend
    }

    pub fn options(&self) -> &WebToolOptions {
        &self.options
    }

    /// Results per call. As in DeerFlow, a configured `max_results` overrides the model's
    /// argument; otherwise the model's value (default 5) is used, capped at 20.
    fn limit(&self, asked: Option<u32>) -> usize {
        match self.options.max_results {
            Some(n) => (n as usize).clamp(1, MAX_RESULTS_CAP),
            None => asked
                .map(|n| n as usize)
                .unwrap_or(DEFAULT_MAX_RESULTS)
                .clamp(1, MAX_RESULTS_CAP),
        }
    }

    async fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchResult>, String> {
        match self.backend {
            SearchBackend::Tavily => self.tavily(query, limit).await,
            SearchBackend::DuckDuckGo => self.duckduckgo(query, limit).await,
            SearchBackend::Searxng => self.searxng(query, limit).await,
        }
    }

    async fn tavily(&self, query: &str, limit: usize) -> Result<Vec<SearchResult>, String> {
        let key = api_key(&self.options.api_key, "TAVILY_API_KEY")
            .ok_or("Tavily needs an API key: set TAVILY_API_KEY or api_key in the tool's config")?;
        let body = json!({
            "query": query,
            "max_results": limit,
            "search_depth": self.options.search_depth.as_deref().unwrap_or("basic"),
            "include_answer": false,
        });
        let resp = self
            .client
            .post(format!("{}/search", self.base_url))
            .headers(super::trace_headers())
            .bearer_auth(key)
            .json(&body)
            .send()
            .await
            .map_err(|e| request_error("Tavily", &e))?;
        let v = json_body("Tavily", resp).await?;
        Ok(results_from_json(&v, "content"))
    }

    async fn searxng(&self, query: &str, _limit: usize) -> Result<Vec<SearchResult>, String> {
        let mut url = Url::parse(&format!("{}/search", self.base_url))
            .map_err(|e| format!("bad SearXNG base_url: {e}"))?;
        url.query_pairs_mut()
            .append_pair("q", query)
            .append_pair("format", "json");
        let resp = self
            .client
            .get(url)
            .headers(super::trace_headers())
            .send()
            .await
            .map_err(|e| request_error("SearXNG", &e))?;
        let v = json_body("SearXNG", resp).await?;
        Ok(results_from_json(&v, "content"))
    }

    async fn duckduckgo(&self, query: &str, _limit: usize) -> Result<Vec<SearchResult>, String> {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("q", query)
            .append_pair("kl", "wt-wt")
            .finish();
        let resp = self
            .client
            .post(format!("{}/html/", self.base_url))
            .headers(super::trace_headers())
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send()
            .await
            .map_err(|e| request_error("DuckDuckGo", &e))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(format!("DuckDuckGo answered HTTP {status}"));
        }
        let (bytes, _) = read_capped(resp, 4 * 1024 * 1024)
            .await
            .map_err(|e| request_error("DuckDuckGo", &e))?;
        Ok(parse_duckduckgo_html(&String::from_utf8_lossy(&bytes)))
    }
}

fn request_error(provider: &str, e: &reqwest::Error) -> String {
    if e.is_timeout() {
        format!("{provider} did not answer in time")
    } else {
        format!("{provider} request failed: {e}")
    }
}

async fn json_body(provider: &str, resp: reqwest::Response) -> Result<Value, String> {
    let status = resp.status();
    let (bytes, _) = read_capped(resp, 8 * 1024 * 1024)
        .await
        .map_err(|e| request_error(provider, &e))?;
    if !status.is_success() {
        let text = String::from_utf8_lossy(&bytes);
        let detail = super::take_chars(text.trim(), 300);
        return Err(format!("{provider} answered HTTP {status}: {detail}"));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("{provider} sent invalid JSON: {e}"))
}

/// `{results: [{title, url, <snippet_key>}]}` → results (entries without a URL dropped).
fn results_from_json(v: &Value, snippet_key: &str) -> Vec<SearchResult> {
    let Some(items) = v.get("results").and_then(Value::as_array) else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|r| {
            let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").trim();
            let url = s("url");
            if url.is_empty() {
                return None;
            }
            Some(SearchResult {
                title: collapse_ws(s("title")),
                url: url.to_string(),
                snippet: collapse_ws(s(snippet_key)),
            })
        })
        .collect()
}

/// The target of a DuckDuckGo result link (`//duckduckgo.com/l/?uddg=<encoded>` or direct).
fn ddg_target(href: &str) -> Option<String> {
    let absolute = if href.starts_with("//") {
        format!("https:{href}")
    } else if href.starts_with('/') {
        format!("https://duckduckgo.com{href}")
    } else {
        href.to_string()
    };
    let url = Url::parse(&absolute).ok()?;
    if url
        .host_str()
        .is_some_and(|h| h.ends_with("duckduckgo.com"))
    {
        if url.path() == "/y.js" {
            return None; // an ad
        }
        let target = url
            .query_pairs()
            .find(|(k, _)| k == "uddg")
            .map(|(_, v)| v.into_owned())?;
        return Url::parse(&target)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https"))
            .map(|u| u.to_string());
    }
    matches!(url.scheme(), "http" | "https").then(|| url.to_string())
}

/// Parses DuckDuckGo's HTML results page: each `a.result__a` is a result (title and link),
/// the following `.result__snippet` its snippet. Ads and non-http links are skipped.
pub fn parse_duckduckgo_html(html: &str) -> Vec<SearchResult> {
    let tokens = tokenize(html);
    let mut results: Vec<SearchResult> = Vec::new();
    let mut i = 0;
    // The element whose text we are collecting: (tag name, depth, is_title).
    let mut capture: Option<(String, usize, bool)> = None;
    let mut buf = String::new();
    let mut pending: Option<SearchResult> = None;
    while i < tokens.len() {
        let t = &tokens[i];
        i += 1;
        if let Some((tag, depth, is_title)) = capture.as_mut() {
            match t {
                Token::Start {
                    name, self_closing, ..
                } if name == tag && !self_closing => *depth += 1,
                Token::End { name } if name == tag => {
                    *depth -= 1;
                    if *depth == 0 {
                        let text = collapse_ws(&buf);
                        if *is_title {
                            if let Some(p) = pending.as_mut() {
                                p.title = text;
                            }
                        } else if let Some(mut p) = pending.take() {
                            p.snippet = text;
                            results.push(p);
                        }
                        buf.clear();
                        capture = None;
                    }
                }
                Token::Text(s) => {
                    buf.push_str(s);
                    buf.push(' ');
                }
                _ => {}
            }
            continue;
        }
        let Token::Start {
            name, self_closing, ..
        } = t
        else {
            continue;
        };
        if *self_closing {
            continue;
        }
        if t.has_class("result__a") {
            if let Some(p) = pending.take() {
                results.push(p);
            }
            if let Some(url) = t.attr("href").and_then(ddg_target) {
                pending = Some(SearchResult {
                    title: String::new(),
                    url,
                    snippet: String::new(),
                });
                capture = Some((name.clone(), 1, true));
            }
        } else if t.has_class("result__snippet") && pending.is_some() {
            capture = Some((name.clone(), 1, false));
        }
    }
    if let Some(p) = pending.take() {
        results.push(p);
    }
    results.retain(|r| !r.title.is_empty());
    results
}

#[async_trait]
impl Tool for WebSearchTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> Arc<Value> {
        schema_for::<WebSearchArgs>()
    }

    async fn call(
        &self,
        args: Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: WebSearchArgs = parse_args(&self.name, args)?;
        let query = args.query.trim();
        if query.is_empty() {
            return Ok(ToolOutput::error(
                "Error: query is empty; give the words to search for",
            ));
        }
        let limit = self.limit(args.max_results);
        let fut = tokio::time::timeout(self.timeout, self.search(query, limit));
        let outcome = tokio::select! {
            r = fut => r,
            _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        let results = match outcome {
            Err(_) => {
                return Ok(ToolOutput::error(format!(
                    "Error: web search ({}) timed out after {}s",
                    self.backend.label(),
                    self.timeout.as_secs_f64()
                )));
            }
            Ok(Err(e)) => return Ok(ToolOutput::error(format!("Error: web search failed: {e}"))),
            Ok(Ok(r)) => r,
        };
        let mut results = results;
        results.truncate(limit);
        for r in &mut results {
            r.title = super::take_chars(&r.title, MAX_TITLE_CHARS);
            r.snippet = super::take_chars(&r.snippet, MAX_SNIPPET_CHARS);
        }
        if results.is_empty() {
            return Ok(ToolOutput::text(format!(
                "No results found for query: {query}"
            )));
        }
        let text = serde_json::to_string_pretty(&results)
            .map_err(|e| ToolError::Failed(format!("Error: cannot encode results: {e}")))?;
        Ok(ToolOutput::text(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DDG: &str = r##"
<div class="result results_links results_links_deep result--ad">
  <a class="result__a" href="https://duckduckgo.com/y.js?ad_domain=x&amp;u3=y">Ad title</a>
  <a class="result__snippet" href="#">Buy now</a>
</div>
<div class="result results_links results_links_deep web-result">
  <h2 class="result__title">
    <a rel="nofollow" class="result__a" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fwww.rust-lang.org%2F&amp;rut=abc">Rust <b>Programming</b> Language</a>
  </h2>
  <a class="result__url" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fwww.rust-lang.org%2F">www.rust-lang.org</a>
  <a class="result__snippet" href="//duckduckgo.com/l/?uddg=x">A language empowering <b>everyone</b> to build reliable &amp; efficient software.</a>
</div>
<div class="result results_links results_links_deep web-result">
  <h2 class="result__title"><a class="result__a" href="https://doc.rust-lang.org/book/">The Book</a></h2>
  <td class="result__snippet">Learn Rust.</td>
</div>
<div class="result"><a class="result__a" href="javascript:alert(1)">bad</a></div>
"##;

    #[test]
    fn parses_duckduckgo_results() {
        let r = parse_duckduckgo_html(DDG);
        assert_eq!(
            r,
            vec![
                SearchResult {
                    title: "Rust Programming Language".into(),
                    url: "https://www.rust-lang.org/".into(),
                    snippet:
                        "A language empowering everyone to build reliable & efficient software."
                            .into(),
                },
                SearchResult {
                    title: "The Book".into(),
                    url: "https://doc.rust-lang.org/book/".into(),
                    snippet: "Learn Rust.".into(),
                },
            ]
        );
        assert!(parse_duckduckgo_html("<html>rate limited</html>").is_empty());
    }

    #[test]
    fn tavily_shape() {
        let v = json!({"results": [
            {"title": "T", "url": "https://a/", "content": "C", "score": 0.9},
            {"title": "no url"}
        ]});
        assert_eq!(
            results_from_json(&v, "content"),
            vec![SearchResult {
                title: "T".into(),
                url: "https://a/".into(),
                snippet: "C".into()
            }]
        );
    }

    #[test]
    fn limits() {
        let mk = |max: Option<u64>| {
            WebSearchTool::new(
                "web_search",
                SearchBackend::DuckDuckGo,
                WebToolOptions {
                    max_results: max,
                    ..Default::default()
                },
            )
            .unwrap()
        };
        assert_eq!(mk(None).limit(None), 5);
        assert_eq!(mk(None).limit(Some(3)), 3);
        assert_eq!(mk(None).limit(Some(50)), 20);
        assert_eq!(mk(None).limit(Some(0)), 1);
        assert_eq!(mk(Some(10)).limit(None), 10);
        assert_eq!(mk(Some(10)).limit(Some(3)), 10);
        assert!(
            WebSearchTool::new(
                "web_search",
                SearchBackend::Searxng,
                WebToolOptions::default()
            )
            .is_err()
        );
    }
}
