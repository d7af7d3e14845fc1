use crate::support::*;
use fawn_config::TitleConfig;
use fawn_llm::scripted::{ScriptedModel, ScriptedTurn};
use fawn_llm::{LlmError, ModelInfo};
use fawn_middleware::util::hidden_human;
use fawn_middleware::{Middleware, TitleMiddleware};
use fawn_state::Message;
use std::sync::Arc;

fn exchange(user: &str) -> fawn_state::ThreadState {
    state_of(vec![
        Message::human(user),
        Message::ai("Sure, here you go."),
    ])
}

async fn title_of(mw: &TitleMiddleware, fx: &Fx, st: &fawn_state::ThreadState) -> Option<String> {
    mw.after_model(st, &fx.ctx())
        .await
        .unwrap()
        .update
        .and_then(|u| u.title)
        .flatten()
}

#[tokio::test]
async fn local_fallback_rules() {
    let fx = Fx::new([]);
    let mw = TitleMiddleware::new(TitleConfig::default());
    let long = "Please compare the performance of Rust and Go for web servers today";
    assert_eq!(
        title_of(&mw, &fx, &exchange(long)).await.unwrap(),
        "Please compare the performance of Rust and Go for..."
    );
    // 50 chars, right-stripped before the dots.
    let spaced = format!("{}      and more", "x".repeat(45));
    assert_eq!(
        title_of(&mw, &fx, &exchange(&spaced)).await.unwrap(),
        format!("{}...", "x".repeat(45))
    );
    assert_eq!(
        title_of(&mw, &fx, &exchange("Hi there")).await.unwrap(),
        "Hi there"
    );
    assert_eq!(
        title_of(&mw, &fx, &exchange("")).await.unwrap(),
        "New Conversation"
    );
    // No model call was made.
    assert!(fx.model.requests().is_empty());
}

#[tokio::test]
async fn only_after_the_first_exchange() {
    let fx = Fx::new([]);
    let mw = TitleMiddleware::new(TitleConfig::default());
    // Before any answer.
    assert!(
        title_of(&mw, &fx, &state_of(vec![Message::human("hello")]))
            .await
            .is_none()
    );
    // Already titled.
    let mut st = exchange("hello");
    st.title = Some("Existing".into());
    assert!(title_of(&mw, &fx, &st).await.is_none());
    // Second turn.
    let st = state_of(vec![
        Message::human("one"),
        Message::ai("a"),
        Message::human("two"),
        Message::ai("b"),
    ]);
    assert!(title_of(&mw, &fx, &st).await.is_none());
    // Framework reminders do not count as user messages.
    let st = state_of(vec![
        Message::human("real question"),
        hidden_human("<system_reminder>todo</system_reminder>", "todo_reminder"),
        Message::ai("answer"),
    ]);
    assert_eq!(title_of(&mw, &fx, &st).await.unwrap(), "real question");
    // Disabled.
    let off = TitleMiddleware::new(TitleConfig {
        enabled: false,
        ..Default::default()
    });
    assert!(title_of(&off, &fx, &exchange("hello")).await.is_none());
}

#[tokio::test]
async fn llm_title_when_a_model_is_configured() {
    let mut fx = Fx::new([]);
    let titler = Arc::new(
        ScriptedModel::new([
            ScriptedTurn::text("<think>short and clear</think>\n\"Rust vs Go Web Servers\""),
            ScriptedTurn::Error(LlmError::Server {
                status: 500,
                retry_after: None,
                message: "x".into(),
            }),
        ])
        .with_info(ModelInfo {
            name: "titler".into(),
            ..Default::default()
        }),
    );
    fx.extra_models.push(titler.clone());
    let mw = TitleMiddleware::new(TitleConfig {
        model_name: Some("titler".into()),
        max_words: 4,
        ..Default::default()
    });
    let user = "Compare Rust and Go for web servers";
    assert_eq!(
        title_of(&mw, &fx, &exchange(user)).await.unwrap(),
        "Rust vs Go Web Servers"
    );
    let reqs = titler.requests();
    assert_eq!(reqs.len(), 1);
    let prompt = reqs[0].messages[0].text();
    assert!(prompt.contains("at most 4 words"), "{prompt}");
    assert!(prompt.contains(&format!("User: {user}")));
    assert!(prompt.contains("Assistant: Sure, here you go."));
    // The run's own model is not used for titles.
    assert!(fx.model.requests().is_empty());
    // A failing title model falls back to the local title.
    assert_eq!(title_of(&mw, &fx, &exchange(user)).await.unwrap(), user);
}

#[tokio::test]
async fn custom_prompt_template_and_max_chars() {
    let mut fx = Fx::new([]);
    let titler = Arc::new(
        ScriptedModel::new([ScriptedTurn::text("T".repeat(40))]).with_info(ModelInfo {
            name: "titler".into(),
            ..Default::default()
        }),
    );
    fx.extra_models.push(titler.clone());
    let mw = TitleMiddleware::new(TitleConfig {
        model_name: Some("titler".into()),
        max_chars: 12,
        prompt_template: Some("Title in {max_words} words: {user_msg} / {assistant_msg}".into()),
        ..Default::default()
    });
    assert_eq!(
        title_of(&mw, &fx, &exchange("q")).await.unwrap(),
        "T".repeat(12)
    );
    assert_eq!(
        titler.requests()[0].messages[0].text(),
        "Title in 6 words: q / Sure, here you go."
    );
}
