use crate::support::*;
use fawn_llm::scripted::ScriptedTurn;
use fawn_middleware::todo::{COMPLETION_REMINDER_NAME, TODO_REMINDER_NAME};
use fawn_middleware::{JumpTo, Middleware, TodoMiddleware};
use fawn_state::{Message, ThreadState, Todo, ToolCall};
use serde_json::{Map, json};
use std::sync::Arc;

fn todo(content: &str, status: &str) -> Todo {
    Todo {
        content: content.into(),
        status: status.into(),
        extra: Map::new(),
    }
}

fn plan_mw() -> TodoMiddleware {
    TodoMiddleware::new(Some(Arc::new(fawn_tools::builtins::WriteTodosTool::new())))
}

#[test]
fn adds_tool_and_prompt() {
    let mw = plan_mw();
    assert_eq!(
        mw.tools()
            .iter()
            .map(|t| t.name().to_string())
            .collect::<Vec<_>>(),
        ["write_todos"]
    );
    let p = mw.system_prompt_section().unwrap();
    assert!(p.starts_with("<todo_list_system>") && p.ends_with("</todo_list_system>"));
    assert!(p.contains("exactly one item `in_progress`"));
}

#[tokio::test]
async fn reminder_when_write_todos_left_the_context() {
    let fx = Fx::new([]);
    let mw = plan_mw();
    let mut st = state_of(vec![Message::human("continue").with_id("h")]);
    st.todos = Some(vec![
        todo("Read data", "completed"),
        todo("Write report", "in_progress"),
    ]);
    let u = mw
        .before_model(&st, &fx.ctx())
        .await
        .unwrap()
        .update
        .unwrap();
    let r = &u.messages.unwrap()[0];
    assert_eq!(r.name.as_deref(), Some(TODO_REMINDER_NAME));
    assert_eq!(r.additional_kwargs["hide_from_ui"], true);
    let text = r.text();
    assert!(text.starts_with("<system_reminder>\n"));
    assert!(text.contains("- [completed] Read data\n- [in_progress] Write report"));
    assert!(text.ends_with("</system_reminder>"));
    // Not twice.
    let mut st2 = st.clone();
    apply(
        &mut st2,
        Some(fawn_state::StateUpdate::messages(vec![r.clone()])),
    );
    assert!(
        mw.before_model(&st2, &fx.ctx())
            .await
            .unwrap()
            .update
            .is_none()
    );
    // Not while the write_todos call is still visible.
    let mut visible = state_of(vec![
        Message::human("plan").with_id("h"),
        Message::ai("")
            .with_id("a")
            .with_tool_calls(vec![ToolCall::new(
                "write_todos",
                json!({"todos": []}),
                "w",
            )]),
        Message::tool("Updated todo list", "w", None).with_id("t"),
    ]);
    visible.todos = st.todos.clone();
    assert!(
        mw.before_model(&visible, &fx.ctx())
            .await
            .unwrap()
            .update
            .is_none()
    );
    // No todos, nothing.
    assert!(
        mw.before_model(&ThreadState::default(), &fx.ctx())
            .await
            .unwrap()
            .update
            .is_none()
    );
}

#[tokio::test]
async fn premature_finish_is_sent_back_twice_at_most() {
    let fx = Fx::new((0..5).map(|_| ScriptedTurn::text("done")));
    let ctx = fx.ctx();
    let mw = plan_mw();
    mw.before_agent(&ThreadState::default(), &ctx)
        .await
        .unwrap();
    let mut st = state_of(vec![
        Message::human("go").with_id("h"),
        Message::ai("All done!").with_id("a"),
    ]);
    st.todos = Some(vec![todo("Step 1", "completed"), todo("Step 2", "pending")]);
    for round in 0..2 {
        let out = mw.after_model(&st, &ctx).await.unwrap();
        assert_eq!(out.jump_to, Some(JumpTo::Model), "round {round}");
        assert!(out.update.is_none(), "the reminder is never persisted");
        mw.wrap_model_call(fx.request(st.messages.clone()), &st, &ctx, &Invoke)
            .await
            .unwrap();
    }
    let reqs = fx.model.requests();
    let reminder = reqs[0].messages.last().unwrap();
    assert_eq!(reminder.name.as_deref(), Some(COMPLETION_REMINDER_NAME));
    let text = reminder.text();
    assert!(text.starts_with("<system_reminder>\nYou have incomplete todo items"));
    assert!(text.contains("- [pending] Step 2"));
    assert!(!text.contains("Step 1"));
    // Third time: the model may finish.
    assert_eq!(mw.after_model(&st, &ctx).await.unwrap().jump_to, None);
    // A request without a queued reminder carries none.
    mw.wrap_model_call(fx.request(st.messages.clone()), &st, &ctx, &Invoke)
        .await
        .unwrap();
    assert_eq!(
        fx.model.requests()[2].messages.last().unwrap().text(),
        "All done!"
    );
    // All completed: no jump.
    let mw = plan_mw();
    st.todos = Some(vec![todo("Step 1", "completed")]);
    assert_eq!(mw.after_model(&st, &ctx).await.unwrap().jump_to, None);
    // Tool calls pending: not a finish.
    let mut busy = state_of(vec![
        Message::human("go").with_id("h"),
        Message::ai("")
            .with_id("a")
            .with_tool_calls(vec![ToolCall::new("bash", json!({}), "b")]),
    ]);
    busy.todos = Some(vec![todo("x", "pending")]);
    assert_eq!(mw.after_model(&busy, &ctx).await.unwrap().jump_to, None);
}

#[tokio::test]
async fn parallel_write_todos_are_refused() {
    let fx = Fx::new([]);
    let st = state_of(vec![
        Message::human("go").with_id("h"),
        Message::ai("").with_id("a").with_tool_calls(vec![
            ToolCall::new("write_todos", json!({"todos": []}), "w1"),
            ToolCall::new("write_todos", json!({"todos": []}), "w2"),
        ]),
    ]);
    let r = plan_mw()
        .wrap_tool_call(
            tool_request("write_todos", json!({"todos": []}), "w2", st),
            &fx.ctx(),
            &ToolFn(|_| panic!("must not run")),
        )
        .await
        .unwrap();
    assert_eq!(r.message.status.as_deref(), Some("error"));
    assert!(
        r.message
            .text()
            .starts_with("Error: `write_todos` was called more than once")
    );
    // A single call runs.
    let st = state_of(vec![
        Message::human("go").with_id("h"),
        Message::ai("")
            .with_id("a")
            .with_tool_calls(vec![ToolCall::new(
                "write_todos",
                json!({"todos": []}),
                "w1",
            )]),
    ]);
    let r = plan_mw()
        .wrap_tool_call(
            tool_request("write_todos", json!({"todos": []}), "w1", st),
            &fx.ctx(),
            &ToolFn(|r| Ok(answer(&r, "Updated todo list to []"))),
        )
        .await
        .unwrap();
    assert_eq!(r.message.text(), "Updated todo list to []");
}
