use fawn_config::AppConfig;
use fawn_llm::{ModelRegistry, supported_use_values, validate_models};
use fawn_testkit::{MockLlm, Turn};
use serde_json::json;

#[tokio::test]
async fn registry_from_config_reaches_the_mock_via_api_base() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("from registry"));
    let config: AppConfig = serde_json::from_value(json!({"models": [
        {"name": "main", "display_name": "Main", "use": "langchain_openai:ChatOpenAI",
         "model": "gpt-x", "api_base": mock.base_url(), "api_key": "k", "request_timeout": 30.0,
         "supports_vision": true, "context_window": 1000},
        {"name": "claude", "use": "langchain_anthropic:ChatAnthropic", "model": "claude-x",
         "base_url": mock.url(), "api_key": "k"},
    ]}))
    .unwrap();
    assert!(validate_models(&config).is_empty());
    let registry = ModelRegistry::from_config(&config).unwrap();
    let main = registry.get("main").unwrap();
    let info = main.info();
    assert_eq!(info.model, "gpt-x");
    assert_eq!(info.display_name.as_deref(), Some("Main"));
    assert!(info.supports_vision);
    assert_eq!(info.context_window, Some(1000));
    assert_eq!(registry.default_model().unwrap().info().name, "main");
    let answer = main.invoke(crate::support::ask("hi")).await.unwrap();
    assert_eq!(answer.text(), "from registry");
    assert_eq!(registry.get("claude").unwrap().info().provider, "anthropic");
    assert!(registry.get("missing").is_none());
}

#[test]
fn unknown_use_lists_every_supported_class() {
    let config: AppConfig = serde_json::from_value(json!({"models": [
        {"name": "x", "use": "my_pkg:MyChat", "model": "m"},
        {"name": "y", "use": "langchain_openai:ChatOpenAI", "model": "m", "base_url": "not a url"},
    ]}))
    .unwrap();
    let issues = ModelRegistry::from_config(&config).unwrap_err();
    let lines: Vec<String> = issues.iter().map(ToString::to_string).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    let expected = format!(
        "models[0].use: unsupported model class 'my_pkg:MyChat'; supported: {}",
        supported_use_values().join(", ")
    );
    assert_eq!(lines[0], expected);
    assert!(
        lines[1].starts_with("models[1].base_url: invalid URL 'not a url'"),
        "{}",
        lines[1]
    );
    for class in [
        "langchain_openai:ChatOpenAI",
        "langchain_deepseek:ChatDeepSeek",
        "langchain_anthropic:ChatAnthropic",
        "deerflow.models.patched_deepseek:PatchedChatDeepSeek",
        "deerflow.models.vllm_provider:VllmChatModel",
        "langchain_google_genai:ChatGoogleGenerativeAI",
        "langchain_ollama:ChatOllama",
    ] {
        assert!(lines[0].contains(class), "{class}");
    }
}

/// DeerFlow's Gemini and Ollama entries, as its example config writes them, build and answer.
#[tokio::test]
async fn deerflow_gemini_and_ollama_entries_build_and_answer() {
    let mock = MockLlm::start().await.unwrap();
    mock.push_all([Turn::text("from gemini"), Turn::text("from ollama")]);
    let config: AppConfig = serde_json::from_value(json!({"models": [
        {"name": "gemini-2.5-pro", "display_name": "Gemini 2.5 Pro",
         "use": "langchain_google_genai:ChatGoogleGenerativeAI", "model": "gemini-2.5-pro",
         "gemini_api_key": "gk", "timeout": 600.0, "max_retries": 2, "max_tokens": 8192,
         "context_window": 1048576, "supports_vision": true, "base_url": mock.url()},
        {"name": "qwen3-local", "display_name": "Qwen3 32B (Ollama)",
         "use": "langchain_ollama:ChatOllama", "model": "qwen3:32b", "base_url": mock.url(),
         "num_predict": 8192, "temperature": 0.7, "reasoning": true, "context_window": 32768,
         "supports_thinking": true, "supports_vision": false},
    ]}))
    .unwrap();
    assert!(
        validate_models(&config).is_empty(),
        "{:?}",
        validate_models(&config)
    );
    let registry = ModelRegistry::from_config(&config).unwrap();
    let g = registry.get("gemini-2.5-pro").unwrap();
    assert_eq!(g.info().provider, "google_genai");
    assert_eq!(g.info().context_window, Some(1048576));
    let o = registry.get("qwen3-local").unwrap();
    assert_eq!(o.info().provider, "ollama");
    assert!(o.info().supports_thinking);
    let ask = crate::support::ask("hi");
    assert_eq!(g.invoke(ask.clone()).await.unwrap().text(), "from gemini");
    let r = mock.last_request().unwrap();
    assert_eq!(r.header("x-goog-api-key"), Some("gk"));
    assert_eq!(
        r.json()["generationConfig"],
        json!({"maxOutputTokens": 8192})
    );
    assert!(
        !r.body_text.contains("gk"),
        "the key never goes in the body"
    );
    assert_eq!(o.invoke(ask).await.unwrap().text(), "from ollama");
    let b = mock.last_request().unwrap().json().clone();
    assert_eq!(
        b["options"],
        json!({"num_predict": 8192, "temperature": 0.7})
    );
    assert_eq!(b["think"], false, "the run asked for no thinking");
}
