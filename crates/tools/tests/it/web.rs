//! Web tools against local stub servers: providers, timeouts, caps and the SSRF guard.
//! Nothing here reaches the internet: provider base URLs point at stubs on 127.0.0.1, and
//! refused addresses (169.254.169.254, …) are refused before any connection is made.

use crate::support::{Harness, args, serve, text};
use axum::Router;
use axum::extract::{Form, Json, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use fawn_tools::web::{
    FetchBackend, SearchBackend, SsrfPolicy, WebFetchTool, WebSearchTool, WebToolOptions,
};
use fawn_tools::{Tool, ToolError, ToolStatus};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const PAGE: &str = r#"<!doctype html><html><head><title>Stub Page</title>
<script>var secret = 1;</script></head><body><nav>Menu</nav>
<article><h1>Heading</h1><p>First paragraph with a <a href="/next">link</a>.</p>
<ul><li>alpha</li><li>beta</li></ul></article></body></html>"#;

fn open_policy() -> SsrfPolicy {
    SsrfPolicy {
        allow_private: true,
        exempt: vec![],
    }
}

fn direct(policy: SsrfPolicy, opts: WebToolOptions) -> WebFetchTool {
    WebFetchTool::new("web_fetch", FetchBackend::Direct, opts, policy).unwrap()
}

async fn fetch(tool: &WebFetchTool, url: &str) -> fawn_tools::ToolOutput {
    let h = Harness::new().await;
    tool.call(args(json!({ "url": url })), &h.ctx)
        .await
        .unwrap()
}

/// A stub that counts its requests.
#[derive(Clone, Default)]
struct Hits(Arc<AtomicUsize>);

impl Hits {
    fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

async fn counted_page(State(hits): State<Hits>) -> Response {
    hits.0.fetch_add(1, Ordering::SeqCst);
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE).into_response()
}

async fn target_stub() -> (SocketAddr, Hits) {
    let hits = Hits::default();
    let app = Router::new()
        .route("/", get(counted_page))
        .with_state(hits.clone());
    (serve(app).await, hits)
}

/// A stub redirecting `/to?u=<url>` to `<url>`, with extra pages for redirect chains.
async fn redirector() -> SocketAddr {
    async fn to(Query(q): Query<HashMap<String, String>>) -> Redirect {
        Redirect::temporary(q.get("u").map(String::as_str).unwrap_or("/"))
    }
    let app = Router::new()
        .route("/to", get(to))
        .route("/a", get(|| async { Redirect::to("/b") }))
        .route("/b", get(|| async { Redirect::permanent("/page") }))
        .route(
            "/page",
            get(|| async { ([(header::CONTENT_TYPE, "text/html")], PAGE) }),
        )
        .route("/loop", get(|| async { Redirect::to("/loop") }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "late"
            }),
        )
        .route(
            "/big",
            get(|| async {
                let body = format!(
                    "<html><body><p>{}</p></body></html>",
                    "word ".repeat(400_000)
                );
                ([(header::CONTENT_TYPE, "text/html")], body)
            }),
        )
        .route(
            "/image",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "image/png")],
                    b"\x89PNG\r\n\x1a\n".to_vec(),
                )
            }),
        )
        .route("/nul", get(|| async { b"abc\0def".to_vec() }))
        .route(
            "/text",
            get(|| async { ([(header::CONTENT_TYPE, "text/plain")], "  plain words  ") }),
        )
        .route("/missing", get(|| async { StatusCode::NOT_FOUND }));
    serve(app).await
}

// ---------------------------------------------------------------- direct fetch

#[tokio::test]
async fn direct_fetch_converts_html_to_markdown() {
    let (addr, hits) = target_stub().await;
    let out = fetch(
        &direct(open_policy(), WebToolOptions::default()),
        &format!("http://{addr}/"),
    )
    .await;
    assert_eq!(out.status, ToolStatus::Success, "{}", text(&out));
    assert_eq!(
        text(&out),
        format!(
            "# Stub Page\n\n# Heading\n\nFirst paragraph with a [link](http://{addr}/next).\n\n- alpha\n- beta"
        )
    );
    assert_eq!(hits.get(), 1);
}

#[tokio::test]
async fn direct_fetch_follows_redirects_and_caps_output() {
    let addr = redirector().await;
    let tool = direct(open_policy(), WebToolOptions::default());
    let out = fetch(&tool, &format!("http://{addr}/a")).await;
    assert!(text(&out).starts_with("# Stub Page"), "{}", text(&out));

    let out = fetch(&tool, &format!("http://{addr}/loop")).await;
    assert_eq!(
        text(&out),
        format!("Error: too many redirects (more than 5) fetching http://{addr}/loop")
    );

    // A 2 MB page comes back as the first 4096 characters.
    let out = fetch(&tool, &format!("http://{addr}/big")).await;
    assert_eq!(out.status, ToolStatus::Success);
    assert_eq!(text(&out).chars().count(), 4096);
    assert!(text(&out).starts_with("word word"));

    let small = direct(
        open_policy(),
        WebToolOptions {
            max_chars: Some(10),
            max_bytes: Some(64),
            ..Default::default()
        },
    );
    let out = fetch(&small, &format!("http://{addr}/big")).await;
    assert_eq!(text(&out), "word word ");

    let out = fetch(&tool, &format!("http://{addr}/text")).await;
    assert_eq!(text(&out), "plain words");
}

#[tokio::test]
async fn direct_fetch_errors_are_tool_messages() {
    let addr = redirector().await;
    let tool = direct(open_policy(), WebToolOptions::default());

    let out = fetch(&tool, &format!("http://{addr}/image")).await;
    assert_eq!(out.status, ToolStatus::Error);
    assert_eq!(
        text(&out),
        format!(
            "Error: http://{addr}/image is image/png, not a text or HTML page; web_fetch only reads text"
        )
    );
    let out = fetch(&tool, &format!("http://{addr}/nul")).await;
    assert!(
        text(&out).contains("is application/octet-stream, not a text or HTML page"),
        "{}",
        text(&out)
    );

    let out = fetch(&tool, &format!("http://{addr}/missing")).await;
    assert_eq!(
        text(&out),
        format!("Error: http://{addr}/missing answered HTTP 404 Not Found")
    );

    let out = fetch(&tool, "not a url").await;
    assert!(text(&out).starts_with("Error: 'not a url' is not a valid URL"));
    let out = fetch(&tool, "file:///etc/passwd").await;
    assert_eq!(
        text(&out),
        "Error: Refusing to fetch file:///etc/passwd: only http and https URLs can be fetched, got 'file:'"
    );

    // A closed port: connection refused, reported, not a crash.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let out = fetch(&tool, &format!("http://{closed}/")).await;
    assert!(
        text(&out).starts_with(&format!("Error: could not fetch http://{closed}/")),
        "{}",
        text(&out)
    );

    let h = Harness::new().await;
    let e = tool
        .call(args(json!({"url": ["http://x"]})), &h.ctx)
        .await
        .unwrap_err();
    assert!(matches!(&e, ToolError::InvalidArguments(m) if m.contains("url: invalid type")));
    let e = tool.call(args(json!({})), &h.ctx).await.unwrap_err();
    assert!(e.to_string().contains("missing field `url`"));
}

#[tokio::test]
async fn direct_fetch_times_out() {
    let addr = redirector().await;
    let tool = direct(
        open_policy(),
        WebToolOptions {
            timeout: Some(0.3),
            ..Default::default()
        },
    );
    let started = std::time::Instant::now();
    let out = fetch(&tool, &format!("http://{addr}/slow")).await;
    assert_eq!(out.status, ToolStatus::Error);
    assert!(text(&out).contains("timed out"), "{}", text(&out));
    assert!(started.elapsed() < Duration::from_secs(4));
}

// ---------------------------------------------------------------- SSRF guard

#[tokio::test]
async fn ssrf_direct_addresses_are_refused() {
    let (addr, hits) = target_stub().await;
    let tool = direct(SsrfPolicy::strict(), WebToolOptions::default());
    let port = addr.port();
    let cases = [
        (
            format!("http://127.0.0.1:{port}/"),
            "127.0.0.1 is a loopback address",
        ),
        (
            "http://169.254.169.254/latest/meta-data/".to_string(),
            "169.254.169.254 is a cloud metadata address",
        ),
        (format!("http://[::1]:{port}/"), "::1 is a loopback address"),
        (
            format!("http://[::ffff:127.0.0.1]:{port}/"),
            "is a loopback address",
        ),
        (
            format!("http://2130706433:{port}/"),
            "127.0.0.1 is a loopback address",
        ),
        (
            "http://[fd00:ec2::254]/".to_string(),
            "is a cloud metadata address",
        ),
        (
            "http://10.0.0.1/".to_string(),
            "10.0.0.1 is a private address",
        ),
        (
            "http://100.100.100.200/".to_string(),
            "is a shared (CGNAT) address",
        ),
        (format!("http://localhost:{port}/"), "localhost resolves to"),
    ];
    for (url, want) in cases {
        let out = fetch(&tool, &url).await;
        let t = text(&out);
        assert_eq!(out.status, ToolStatus::Error, "{url}");
        assert!(t.starts_with("Error: Refusing to fetch "), "{url}: {t}");
        assert!(t.contains(want), "{url}: {t}");
    }
    assert_eq!(hits.get(), 0, "no refused request reached the server");
}

#[tokio::test]
async fn ssrf_redirects_to_blocked_addresses_are_refused() {
    let redirect = redirector().await;
    let (target, hits) = target_stub().await;
    // The redirecting stub itself is allowed by exact address; where it points is not.
    let policy = SsrfPolicy {
        allow_private: false,
        exempt: vec![redirect],
    };
    let tool = direct(policy, WebToolOptions::default());
    let targets = [
        (format!("http://127.0.0.1:{}/", target.port()), "loopback"),
        (
            "http://169.254.169.254/latest/meta-data/".to_string(),
            "cloud metadata",
        ),
        (
            format!("http://localhost:{}/", target.port()),
            "resolves to",
        ),
        (format!("http://[::1]:{}/", target.port()), "loopback"),
    ];
    for (to, want) in targets {
        let from = format!("http://{redirect}/to?u={}", urlencode(&to));
        let out = fetch(&tool, &from).await;
        let t = text(&out);
        assert_eq!(out.status, ToolStatus::Error, "{to}");
        assert!(
            t.starts_with(&format!(
                "Error: Refusing to follow the redirect from {from} to "
            )),
            "{t}"
        );
        assert!(t.contains(want), "{to}: {t}");
    }
    assert_eq!(hits.get(), 0, "the redirect target was never contacted");

    // Same-host redirects of the allowed stub are followed.
    let out = fetch(&tool, &format!("http://{redirect}/a")).await;
    assert!(text(&out).starts_with("# Stub Page"), "{}", text(&out));
}

#[tokio::test]
async fn allow_private_addresses_opens_the_guard() {
    let (addr, hits) = target_stub().await;
    let out = fetch(
        &direct(open_policy(), WebToolOptions::default()),
        &format!("http://localhost:{}/", addr.port()),
    )
    .await;
    assert!(text(&out).starts_with("# Stub Page"), "{}", text(&out));
    assert_eq!(hits.get(), 1);
}

fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

// ---------------------------------------------------------------- Jina / Tavily fetch

#[derive(Clone, Default)]
struct Seen(Arc<std::sync::Mutex<Vec<(HeaderMap, Value)>>>);

async fn jina_stub() -> (SocketAddr, Seen) {
    let seen = Seen::default();
    async fn handler(
        State(seen): State<Seen>,
        headers: HeaderMap,
        Json(body): Json<Value>,
    ) -> Response {
        seen.0.lock().unwrap().push((headers, body.clone()));
        if body["url"] == "https://93.184.216.34/fail" {
            return (StatusCode::UNPROCESSABLE_ENTITY, "cannot read that").into_response();
        }
        let md = format!(
            "Title: Example\n\nURL Source: {}\n\nMarkdown Content:\n{}",
            body["url"].as_str().unwrap_or(""),
            "text ".repeat(2000)
        );
        md.into_response()
    }
    let app = Router::new()
        .route("/", post(handler))
        .with_state(seen.clone());
    (serve(app).await, seen)
}

#[tokio::test]
async fn jina_reader_fetches_through_the_provider() {
    let (addr, seen) = jina_stub().await;
    let tool = WebFetchTool::new(
        "web_fetch",
        FetchBackend::Jina,
        WebToolOptions {
            base_url: Some(format!("http://{addr}")),
            api_key: Some("jina-key".into()),
            timeout: Some(5.0),
            ..Default::default()
        },
        SsrfPolicy::strict(),
    )
    .unwrap();
    // Target hosts are public IP literals: the stub reader never contacts them, and no
    // DNS is needed (names are resolved and checked too, and fail closed offline).
    let out = fetch(&tool, "https://93.184.216.34/article").await;
    assert_eq!(out.status, ToolStatus::Success, "{}", text(&out));
    assert!(text(&out).starts_with("Title: Example\n\nURL Source: https://93.184.216.34/article"));
    assert_eq!(text(&out).chars().count(), 4096);
    {
        let seen = seen.0.lock().unwrap();
        let (headers, body) = &seen[0];
        assert_eq!(body, &json!({"url": "https://93.184.216.34/article"}));
        assert_eq!(headers["authorization"], "Bearer jina-key");
        assert_eq!(headers["x-return-format"], "markdown");
        assert_eq!(headers["x-timeout"], "5");
    }

    let out = fetch(&tool, "https://93.184.216.34/fail").await;
    assert_eq!(
        text(&out),
        "Error: Jina reader answered HTTP 422 Unprocessable Entity: cannot read that"
    );

    // The model's URL is still checked: a reader must not be pointed at our network.
    let before = seen.0.lock().unwrap().len();
    let out = fetch(&tool, "http://169.254.169.254/latest/").await;
    assert!(text(&out).starts_with("Error: Refusing to fetch http://169.254.169.254/latest/"));
    assert_eq!(seen.0.lock().unwrap().len(), before);
}

#[tokio::test]
async fn tavily_extract_fetch() {
    async fn extract(headers: HeaderMap, Json(body): Json<Value>) -> Json<Value> {
        assert_eq!(headers["authorization"], "Bearer tv-key");
        let url = body["urls"][0].as_str().unwrap_or("").to_string();
        if url.ends_with("/bad") {
            return Json(
                json!({"results": [], "failed_results": [{"url": url, "error": "blocked by site"}]}),
            );
        }
        Json(json!({"results": [{"url": url, "title": "Doc", "raw_content": "Body text."}]}))
    }
    let addr = serve(Router::new().route("/extract", post(extract))).await;
    let tool = WebFetchTool::new(
        "web_fetch",
        FetchBackend::Tavily,
        WebToolOptions {
            base_url: Some(format!("http://{addr}/")),
            api_key: Some("tv-key".into()),
            ..Default::default()
        },
        SsrfPolicy::strict(),
    )
    .unwrap();
    let out = fetch(&tool, "https://93.184.216.34/doc").await;
    assert_eq!(text(&out), "# Doc\n\nBody text.");
    let out = fetch(&tool, "https://93.184.216.34/bad").await;
    assert_eq!(
        text(&out),
        "Error: Tavily could not read https://93.184.216.34/bad: blocked by site"
    );
}

// ---------------------------------------------------------------- search providers

async fn tavily_search_stub() -> (SocketAddr, Seen) {
    let seen = Seen::default();
    async fn search(
        State(seen): State<Seen>,
        headers: HeaderMap,
        Json(body): Json<Value>,
    ) -> Response {
        seen.0.lock().unwrap().push((headers.clone(), body.clone()));
        if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some("Bearer tv-key") {
            return (StatusCode::UNAUTHORIZED, r#"{"detail":"bad key"}"#).into_response();
        }
        let n = body["max_results"].as_u64().unwrap_or(5) as usize;
        let results: Vec<Value> = (0..10)
            .map(|i| {
                json!({"title": format!("Result {i}"), "url": format!("https://r{i}.example/"),
                       "content": format!("Snippet {i}"), "score": 0.5})
            })
            .take(n)
            .collect();
        Json(json!({"query": body["query"], "results": results})).into_response()
    }
    let app = Router::new()
        .route("/search", post(search))
        .with_state(seen.clone());
    (serve(app).await, seen)
}

fn tavily(addr: SocketAddr, key: &str, max: Option<u64>) -> WebSearchTool {
    WebSearchTool::new(
        "web_search",
        SearchBackend::Tavily,
        WebToolOptions {
            base_url: Some(format!("http://{addr}")),
            api_key: Some(key.into()),
            max_results: max,
            ..Default::default()
        },
    )
    .unwrap()
}

#[tokio::test]
async fn tavily_search_returns_title_url_snippet() {
    let (addr, seen) = tavily_search_stub().await;
    let h = Harness::new().await;
    let out = tavily(addr, "tv-key", None)
        .call(args(json!({"query": "rust web", "max_results": 2})), &h.ctx)
        .await
        .unwrap();
    let v: Value = serde_json::from_str(&text(&out)).unwrap();
    assert_eq!(
        v,
        json!([
            {"title": "Result 0", "url": "https://r0.example/", "snippet": "Snippet 0"},
            {"title": "Result 1", "url": "https://r1.example/", "snippet": "Snippet 1"}
        ])
    );
    assert_eq!(seen.0.lock().unwrap()[0].1["query"], "rust web");

    // A configured max_results wins over the model's.
    let out = tavily(addr, "tv-key", Some(3))
        .call(args(json!({"query": "q", "max_results": 9})), &h.ctx)
        .await
        .unwrap();
    let v: Value = serde_json::from_str(&text(&out)).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 3);

    let out = tavily(addr, "wrong", None)
        .call(args(json!({"query": "q"})), &h.ctx)
        .await
        .unwrap();
    assert_eq!(out.status, ToolStatus::Error);
    assert_eq!(
        text(&out),
        r#"Error: web search failed: Tavily answered HTTP 401 Unauthorized: {"detail":"bad key"}"#
    );

    let out = tavily(addr, "tv-key", None)
        .call(args(json!({"query": "   "})), &h.ctx)
        .await
        .unwrap();
    assert_eq!(out.status, ToolStatus::Error);
    let e = tavily(addr, "tv-key", None)
        .call(args(json!({"query": 5})), &h.ctx)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("query: invalid type"));
}

#[tokio::test]
async fn tavily_without_a_key_says_how_to_fix_it() {
    if std::env::var("TAVILY_API_KEY").is_ok_and(|v| !v.trim().is_empty()) {
        // The process environment supplies a key; the missing-key path cannot be reached.
        return;
    }
    let (addr, seen) = tavily_search_stub().await;
    let tool = WebSearchTool::new(
        "web_search",
        SearchBackend::Tavily,
        WebToolOptions {
            base_url: Some(format!("http://{addr}")),
            ..Default::default()
        },
    )
    .unwrap();
    let h = Harness::new().await;
    let out = tool
        .call(args(json!({"query": "q"})), &h.ctx)
        .await
        .unwrap();
    assert_eq!(
        text(&out),
        "Error: web search failed: Tavily needs an API key: set TAVILY_API_KEY or api_key in the tool's config"
    );
    assert!(seen.0.lock().unwrap().is_empty());
}

const DDG_PAGE: &str = r##"<html><body>
<div class="result results_links web-result">
 <h2 class="result__title"><a rel="nofollow" class="result__a" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fexample.org%2Fone&amp;rut=1">First <b>hit</b></a></h2>
 <a class="result__snippet" href="#">About the <b>first</b> thing.</a>
</div>
<div class="result results_links web-result">
 <h2 class="result__title"><a rel="nofollow" class="result__a" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fexample.org%2Ftwo">Second</a></h2>
 <a class="result__snippet" href="#">Second snippet.</a>
</div>
<div class="result results_links web-result">
 <h2 class="result__title"><a rel="nofollow" class="result__a" href="https://example.org/three">Third</a></h2>
 <a class="result__snippet" href="#">Third snippet.</a>
</div></body></html>"##;

#[tokio::test]
async fn duckduckgo_search_parses_the_html_page() {
    let seen = Seen::default();
    async fn html(State(seen): State<Seen>, Form(f): Form<HashMap<String, String>>) -> Response {
        seen.0.lock().unwrap().push((HeaderMap::new(), json!(f)));
        ([(header::CONTENT_TYPE, "text/html")], DDG_PAGE).into_response()
    }
    let addr = serve(
        Router::new()
            .route("/html/", post(html))
            .with_state(seen.clone()),
    )
    .await;
    let tool = WebSearchTool::new(
        "web_search",
        SearchBackend::DuckDuckGo,
        WebToolOptions {
            base_url: Some(format!("http://{addr}")),
            max_results: Some(2),
            ..Default::default()
        },
    )
    .unwrap();
    let h = Harness::new().await;
    let out = tool
        .call(args(json!({"query": "fawn & deer"})), &h.ctx)
        .await
        .unwrap();
    let v: Value = serde_json::from_str(&text(&out)).unwrap();
    assert_eq!(
        v,
        json!([
            {"title": "First hit", "url": "https://example.org/one", "snippet": "About the first thing."},
            {"title": "Second", "url": "https://example.org/two", "snippet": "Second snippet."}
        ])
    );
    assert_eq!(seen.0.lock().unwrap()[0].1["q"], "fawn & deer");
}

#[tokio::test]
async fn searxng_search_and_empty_results() {
    async fn search(Query(q): Query<HashMap<String, String>>) -> Json<Value> {
        assert_eq!(q.get("format").map(String::as_str), Some("json"));
        if q.get("q").map(String::as_str) == Some("nothing") {
            return Json(json!({"results": []}));
        }
        if q.get("q").map(String::as_str) == Some("long") {
            return Json(json!({"results": [
                {"title": "t".repeat(1000), "url": "https://l.example/", "content": "y".repeat(50_000)}
            ]}));
        }
        Json(json!({"results": [
            {"title": "  Spaced   title ", "url": "https://s.example/", "content": "c"}
        ]}))
    }
    let addr = serve(Router::new().route("/search", get(search))).await;
    let tool = WebSearchTool::new(
        "web_search",
        SearchBackend::Searxng,
        WebToolOptions {
            base_url: Some(format!("http://{addr}/")),
            ..Default::default()
        },
    )
    .unwrap();
    let h = Harness::new().await;
    let out = tool
        .call(args(json!({"query": "x"})), &h.ctx)
        .await
        .unwrap();
    let v: Value = serde_json::from_str(&text(&out)).unwrap();
    assert_eq!(
        v,
        json!([{"title": "Spaced title", "url": "https://s.example/", "snippet": "c"}])
    );
    let out = tool
        .call(args(json!({"query": "nothing"})), &h.ctx)
        .await
        .unwrap();
    assert_eq!(text(&out), "No results found for query: nothing");

    // Huge provider fields are bounded.
    let out = tool
        .call(args(json!({"query": "long"})), &h.ctx)
        .await
        .unwrap();
    let v: Value = serde_json::from_str(&text(&out)).unwrap();
    assert_eq!(v[0]["snippet"].as_str().unwrap().len(), 1000);
    assert_eq!(v[0]["title"].as_str().unwrap().len(), 300);
}

#[tokio::test]
async fn search_times_out() {
    async fn slow() -> &'static str {
        tokio::time::sleep(Duration::from_secs(5)).await;
        "{}"
    }
    let addr = serve(Router::new().route("/search", get(slow))).await;
    let tool = WebSearchTool::new(
        "web_search",
        SearchBackend::Searxng,
        WebToolOptions {
            base_url: Some(format!("http://{addr}")),
            timeout: Some(0.3),
            ..Default::default()
        },
    )
    .unwrap();
    let h = Harness::new().await;
    let out = tool
        .call(args(json!({"query": "x"})), &h.ctx)
        .await
        .unwrap();
    assert_eq!(out.status, ToolStatus::Error);
    let t = text(&out);
    assert!(
        t == "Error: web search (SearXNG) timed out after 0.3s"
            || t == "Error: web search failed: SearXNG did not answer in time",
        "{t}"
    );
}

#[tokio::test]
async fn cancelled_fetch_returns_promptly() {
    let addr = redirector().await;
    let tool = direct(open_policy(), WebToolOptions::default());
    let h = Harness::new().await;
    let cancel = h.ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
    });
    let r = tool
        .call(args(json!({"url": format!("http://{addr}/slow")})), &h.ctx)
        .await;
    assert!(matches!(r, Err(ToolError::Cancelled)));
}
