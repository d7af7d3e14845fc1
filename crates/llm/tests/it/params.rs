use crate::support::{ask, openai};
use fawn_llm::ChatRequest;
use fawn_state::{Content, Message};
use fawn_testkit::{MockLlm, Turn};
use serde_json::{Value, json};

async fn body_for(use_: &str, overrides: Value, req: ChatRequest) -> Value {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("ok"));
    let m = openai(&mock, use_, overrides);
    m.model.invoke(req).await.unwrap();
    mock.last_request().unwrap().json().clone()
}

fn thinking(on: bool, effort: Option<&str>) -> ChatRequest {
    ChatRequest {
        thinking_enabled: on,
        reasoning_effort: effort.map(str::to_string),
        ..ask("q")
    }
}

#[tokio::test]
async fn thinking_toggles_and_reasoning_effort() {
    let cfg = json!({
        "supports_thinking": true,
        "supports_reasoning_effort": true,
        "extra_body": {"tool_stream": true},
        "when_thinking_enabled": {"extra_body": {"thinking": {"type": "enabled"}}},
    });
    let class = "deerflow.models.patched_deepseek:PatchedChatDeepSeek";
    let on = body_for(class, cfg.clone(), thinking(true, Some("high"))).await;
    assert_eq!(on["thinking"], json!({"type": "enabled"}));
    assert_eq!(on["tool_stream"], true, "extra_body merged at top level");
    assert_eq!(on["reasoning_effort"], "high");
    assert!(on.get("extra_body").is_none());
    // Off without when_thinking_disabled: auto-disable like DeerFlow.
    let off = body_for(class, cfg.clone(), thinking(false, Some("high"))).await;
    assert_eq!(off["thinking"], json!({"type": "disabled"}));
    assert_eq!(off["reasoning_effort"], "minimal");
    // Explicit when_thinking_disabled wins.
    let mut explicit = cfg.clone();
    explicit["when_thinking_disabled"] = json!({"extra_body": {"thinking": {"type": "off"}}});
    let off = body_for(class, explicit, thinking(false, None)).await;
    assert_eq!(off["thinking"], json!({"type": "off"}));
    let mut capped = cfg.clone();
    capped["max_tokens"] = json!(100);
    let b = body_for(class, capped, thinking(false, None)).await;
    assert_eq!(b["max_tokens"], 100, "DeepSeek classes keep max_tokens");
    // reasoning_effort only when supported.
    let mut no_effort = cfg.clone();
    no_effort["supports_reasoning_effort"] = json!(false);
    let on = body_for(class, no_effort, thinking(true, Some("high"))).await;
    assert!(on.get("reasoning_effort").is_none());
}

#[tokio::test]
async fn vllm_template_kwargs_are_normalised_and_flipped() {
    let cfg = json!({
        "supports_thinking": true,
        "when_thinking_enabled": {"extra_body": {"chat_template_kwargs": {"thinking": true}}},
    });
    let class = "deerflow.models.vllm_provider:VllmChatModel";
    let on = body_for(class, cfg.clone(), thinking(true, None)).await;
    assert_eq!(on["chat_template_kwargs"], json!({"enable_thinking": true}));
    let off = body_for(class, cfg, thinking(false, None)).await;
    assert_eq!(
        off["chat_template_kwargs"],
        json!({"enable_thinking": false})
    );
}

#[tokio::test]
async fn headers_key_extra_body_and_sampling_params() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("ok"));
    let m = openai(
        &mock,
        "langchain_openai:ChatOpenAI",
        json!({
            "api_key": "sk-custom",
            "headers": {"X-Tenant": "acme"},
            "max_tokens": 256,
            "temperature": 0.2,
            "top_p": 0.9,
            "extra_body": {"vendor_flag": {"on": true}},
            "use_responses_api": true,
            "stream_usage": true,
            "context_window": 128000,
        }),
    );
    let mut req = ask("q");
    req.max_tokens = Some(64);
    req.extra.insert("seed".into(), json!(7));
    m.model.invoke(req).await.unwrap();
    let r = mock.last_request().unwrap();
    assert_eq!(r.header("authorization"), Some("Bearer sk-custom"));
    assert_eq!(r.header("x-tenant"), Some("acme"));
    let b = r.json();
    assert_eq!(
        b["max_completion_tokens"], 64,
        "request max_tokens overrides the profile; ChatOpenAI sends it as max_completion_tokens"
    );
    assert!(b.get("max_tokens").is_none());
    assert_eq!(b["temperature"], 0.2);
    assert_eq!(b["top_p"], 0.9);
    assert_eq!(b["seed"], 7);
    assert_eq!(b["vendor_flag"], json!({"on": true}));
    for key in [
        "use_responses_api",
        "stream_usage",
        "context_window",
        "supports_vision",
        "extra_body",
    ] {
        assert!(b.get(key).is_none(), "{key} must not be sent: {b}");
    }
}

#[tokio::test]
async fn minimax_strips_user_names_and_splits_reasoning() {
    let mut req = ask("q");
    if let Some(m) = req.messages.get_mut(1) {
        m.name = Some("user-input".into());
    }
    let b = body_for(
        "deerflow.models.patched_minimax:PatchedChatMiniMax",
        json!({}),
        req.clone(),
    )
    .await;
    assert_eq!(b["reasoning_split"], true);
    assert!(b["messages"][1].get("name").is_none());
    let b = body_for("langchain_openai:ChatOpenAI", json!({}), req).await;
    assert_eq!(b["messages"][1]["name"], "user-input");
}

fn image_request() -> ChatRequest {
    ChatRequest {
        messages: vec![Message::human(Content::Blocks(vec![
            json!({"type": "text", "text": "What is this?"}),
            json!({"type": "image", "source_type": "base64", "data": "iVBORw0KGgo=", "mime_type": "image/png"}),
            json!({"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "low"}}),
        ]))]
        .into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn image_blocks_for_vision_models() {
    let b = body_for(
        "langchain_openai:ChatOpenAI",
        json!({"supports_vision": true}),
        image_request(),
    )
    .await;
    assert_eq!(
        b["messages"][0]["content"],
        json!([
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "low"}},
        ])
    );
    let b = body_for("langchain_openai:ChatOpenAI", json!({}), image_request()).await;
    let parts = b["messages"][0]["content"].as_array().unwrap();
    assert_eq!(parts.len(), 3);
    assert!(parts.iter().all(|p| p["type"] == "text"));
    assert_eq!(parts[1]["text"], fawn_llm::content::IMAGE_OMITTED_NOTE);
}
