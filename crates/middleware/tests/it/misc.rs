//! Sandbox, memory, view-image and tool-error middlewares.

use crate::support::*;
use base64::Engine;
use fawn_middleware::view_image::{CONTEXT_ID_PREFIX, CONTEXT_INTRO};
use fawn_middleware::{
    MemoryMiddleware, Middleware, SandboxMiddleware, ToolErrorHandlingMiddleware,
    ViewImageMiddleware,
};
use fawn_state::{Content, Message, MessageKind, ThreadState, ToolCall};
use fawn_tools::ToolError;
use serde_json::json;
use sha2::Digest;

#[tokio::test]
async fn sandbox_id_written_once_and_released_after_the_agent() {
    let fx = Fx::new([]);
    let ctx = fx.ctx();
    let mw = SandboxMiddleware::new();
    // A tool that does not touch the sandbox: no write.
    let r = mw
        .wrap_tool_call(
            tool_request("echo", json!({}), "c0", ThreadState::default()),
            &ctx,
            &ToolFn(|r| Ok(answer(&r, "hi"))),
        )
        .await
        .unwrap();
    assert!(r.update.is_none());
    // The first tool that acquires it.
    ctx.sandbox.get().await.unwrap();
    let r = mw
        .wrap_tool_call(
            tool_request("bash", json!({}), "c1", ThreadState::default()),
            &ctx,
            &ToolFn(|r| Ok(answer(&r, "ok"))),
        )
        .await
        .unwrap();
    assert_eq!(
        r.update.unwrap().sandbox.unwrap().sandbox_id.as_deref(),
        Some("sb-thread-1")
    );
    // Later calls do not write it again.
    let r = mw
        .wrap_tool_call(
            tool_request("bash", json!({}), "c2", ThreadState::default()),
            &ctx,
            &ToolFn(|r| Ok(answer(&r, "ok"))),
        )
        .await
        .unwrap();
    assert!(r.update.is_none());
    assert!(
        mw.after_agent(&ThreadState::default(), &ctx)
            .await
            .unwrap()
            .update
            .is_none()
    );
    assert_eq!(fx.provider.released(), ["sb-thread-1"]);
}

#[tokio::test]
async fn no_sandbox_no_release() {
    let fx = Fx::new([]);
    SandboxMiddleware::new()
        .after_agent(&ThreadState::default(), &fx.ctx())
        .await
        .unwrap();
    assert!(fx.provider.released().is_empty());
    assert!(fx.provider.acquired().is_empty());
}

#[tokio::test]
async fn memory_gets_the_finished_conversation() {
    let mut fx = Fx::new([]);
    fx.options.agent_name = Some("coder".into());
    let st = state_of(vec![Message::human("I prefer uv"), Message::ai("Noted.")]);
    MemoryMiddleware::new()
        .after_agent(&st, &fx.ctx())
        .await
        .unwrap();
    let calls = fx.memory.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1);
    let (thread, user, agent, messages) = &calls[0];
    assert_eq!(
        (thread.as_str(), user.as_str(), agent.as_deref()),
        (THREAD, USER, Some("coder"))
    );
    assert_eq!(messages.len(), 2);
    // Disabled memory or an empty thread: nothing queued.
    let fx = Fx::with(|s| s.app.memory.enabled = false, []);
    MemoryMiddleware::new()
        .after_agent(&st, &fx.ctx())
        .await
        .unwrap();
    MemoryMiddleware::new()
        .after_agent(&ThreadState::default(), &Fx::new([]).ctx())
        .await
        .unwrap();
    assert!(fx.memory.calls.lock().unwrap().is_empty());
}

#[tokio::test]
async fn failing_tool_becomes_an_error_tool_message() {
    let fx = Fx::new([]);
    let r = ToolErrorHandlingMiddleware::new()
        .wrap_tool_call(
            tool_request(
                "web_fetch",
                json!({"url": "x"}),
                "c9",
                ThreadState::default(),
            ),
            &fx.ctx(),
            &ToolFn(|_| Err(ToolError::Failed("connection refused".into()))),
        )
        .await
        .unwrap();
    assert_eq!(r.message.kind, MessageKind::Tool);
    assert_eq!(r.message.status.as_deref(), Some("error"));
    assert_eq!(r.message.tool_call_id.as_deref(), Some("c9"));
    assert_eq!(r.message.name.as_deref(), Some("web_fetch"));
    assert_eq!(
        r.message.text(),
        "Error: Tool 'web_fetch' failed with ToolException: connection refused. Continue with available context, or choose an alternative tool."
    );
    // Cancellation is not swallowed.
    let r = ToolErrorHandlingMiddleware::new()
        .wrap_tool_call(
            tool_request("bash", json!({}), "c10", ThreadState::default()),
            &fx.ctx(),
            &ToolFn(|_| Err(ToolError::Cancelled)),
        )
        .await;
    assert!(matches!(r, Err(ToolError::Cancelled)));
}

fn png_bytes() -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n".to_vec();
    b.extend_from_slice(&[1, 2, 3, 4]);
    b
}

#[tokio::test]
async fn viewed_images_are_shown_for_one_call_then_removed() {
    let fx = Fx::new([]);
    let ctx = fx.ctx();
    let bytes = png_bytes();
    let outputs = fx.paths().outputs;
    std::fs::create_dir_all(&outputs).unwrap();
    std::fs::write(outputs.join("chart.png"), &bytes).unwrap();
    std::fs::write(outputs.join("changed.png"), b"different now").unwrap();
    let ai = Message::ai("")
        .with_id("ai-1")
        .with_tool_calls(vec![ToolCall::new(
            "view_image",
            json!({"image_path": "/mnt/user-data/outputs/chart.png"}),
            "v1",
        )]);
    let mut st = state_of(vec![
        Message::human("look").with_id("h"),
        ai,
        Message::tool("Successfully read image", "v1", Some("view_image".into())).with_id("t"),
    ]);
    let mut viewed = serde_json::Map::new();
    viewed.insert(
        "/mnt/user-data/outputs/chart.png".into(),
        json!({"mime_type": "image/png", "size": bytes.len(), "actual_path": "/mnt/user-data/outputs/chart.png",
               "sha256": hex::encode(sha2::Sha256::digest(&bytes))}),
    );
    viewed.insert(
        "/mnt/user-data/outputs/changed.png".into(),
        json!({"mime_type": "image/png", "size": 4, "actual_path": "/mnt/user-data/outputs/changed.png"}),
    );
    st.viewed_images = Some(viewed);
    let mw = ViewImageMiddleware::new();
    let u = mw.before_model(&st, &ctx).await.unwrap().update.unwrap();
    let m = u.messages.clone().unwrap()[0].clone();
    assert_eq!(
        m.id.as_deref(),
        Some(format!("{CONTEXT_ID_PREFIX}ai-1").as_str())
    );
    assert_eq!(m.kind, MessageKind::Human);
    assert_eq!(m.additional_kwargs["hide_from_ui"], true);
    assert_eq!(m.additional_kwargs["deerflow_view_image_context"], true);
    let Content::Blocks(blocks) = &m.content else {
        panic!()
    };
    assert_eq!(blocks[0]["text"], CONTEXT_INTRO);
    let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
    assert_eq!(
        blocks[2]["image_url"]["url"],
        format!("data:image/png;base64,{data}")
    );
    // The changed file is not attached.
    assert_eq!(blocks.len(), 3);
    apply(&mut st, u.into());
    // Once injected, not again.
    assert!(mw.before_model(&st, &ctx).await.unwrap().update.is_none());
    // After the model answered, the pixels leave the state.
    let mut after = st.clone();
    apply(
        &mut after,
        Some(fawn_state::StateUpdate::messages(vec![
            Message::ai("A bar chart.").with_id("ai-2"),
        ])),
    );
    let u = mw.after_model(&after, &ctx).await.unwrap().update;
    apply(&mut after, u);
    assert!(
        after.messages.iter().all(|m| !m
            .id
            .as_deref()
            .unwrap_or("")
            .starts_with(CONTEXT_ID_PREFIX))
    );
    assert_eq!(after.messages.last().unwrap().text(), "A bar chart.");
}

#[tokio::test]
async fn view_image_waits_for_every_result() {
    let fx = Fx::new([]);
    let mut st = state_of(vec![
        Message::human("look").with_id("h"),
        Message::ai("").with_id("ai").with_tool_calls(vec![
            ToolCall::new("view_image", json!({}), "v1"),
            ToolCall::new("bash", json!({}), "b1"),
        ]),
        Message::tool("ok", "v1", None).with_id("t"),
    ]);
    let mut viewed = serde_json::Map::new();
    viewed.insert(
        "/mnt/user-data/outputs/x.png".into(),
        json!({"mime_type": "image/png"}),
    );
    st.viewed_images = Some(viewed);
    assert!(
        ViewImageMiddleware::new()
            .before_model(&st, &fx.ctx())
            .await
            .unwrap()
            .update
            .is_none()
    );
}
