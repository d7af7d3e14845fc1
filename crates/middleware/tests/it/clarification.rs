use crate::support::*;
use fawn_middleware::{ClarificationMiddleware, Middleware};
use fawn_state::ThreadState;
use serde_json::json;

#[tokio::test]
async fn formats_question_options_and_ends_the_run() {
    let fx = Fx::new([]);
    let mw = ClarificationMiddleware::new();
    let req = tool_request(
        "ask_clarification",
        json!({"question": "Which env?", "clarification_type": "approach_choice",
               "context": "Need target", "options": ["dev", "prod"]}),
        "call_1",
        ThreadState::default(),
    );
    let next = ToolFn(|_| panic!("the tool itself must not run"));
    let r = mw.wrap_tool_call(req, &fx.ctx(), &next).await.unwrap();
    assert!(r.end_run);
    let m = &r.message;
    assert_eq!(
        m.text(),
        "🔀 Need target\n\nWhich env?\n\n  1. dev\n  2. prod"
    );
    assert_eq!(m.id.as_deref(), Some("clarification:call_1"));
    assert_eq!(m.name.as_deref(), Some("ask_clarification"));
    assert_eq!(m.tool_call_id.as_deref(), Some("call_1"));
    assert_eq!(
        m.artifact,
        json!({"human_input": {
            "version": 1, "kind": "human_input_request", "source": "ask_clarification",
            "request_id": "clarification:call_1", "clarification_type": "approach_choice",
            "question": "Which env?", "input_mode": "choice_with_other", "tool_call_id": "call_1",
            "context": "Need target",
            "options": [
                {"id": "option-1", "label": "dev", "value": "dev"},
                {"id": "option-2", "label": "prod", "value": "prod"}
            ]
        }})
    );
}

#[tokio::test]
async fn option_cleanup_free_text_and_forms() {
    let fx = Fx::new([]);
    let mw = ClarificationMiddleware::new();
    let next = ToolFn(|_| panic!("not called"));
    let ask = |args| tool_request("ask_clarification", args, "c2", ThreadState::default());

    let r = mw
        .wrap_tool_call(
            ask(json!({"question": "Pick", "options": ["a", " a ", "", "<b>x</b>"]})),
            &fx.ctx(),
            &next,
        )
        .await
        .unwrap();
    let opts: Vec<_> = r.message.artifact["human_input"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["label"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(opts, ["a", "x"]);
    assert_eq!(r.message.text(), "❓ Pick\n\n  1. a\n  2. x");

    let r = mw
        .wrap_tool_call(
            ask(json!({"question": "Why?", "clarification_type": "risk_confirmation"})),
            &fx.ctx(),
            &next,
        )
        .await
        .unwrap();
    assert_eq!(r.message.text(), "⚠️ Why?");
    assert_eq!(r.message.artifact["human_input"]["input_mode"], "free_text");
    assert!(r.message.artifact["human_input"].get("options").is_none());

    let r = mw
        .wrap_tool_call(
            ask(json!({"question": "Deploy settings", "fields": [
                {"name": "region", "type": "select", "options": "[\"eu\", \"us\"]", "required": "true"},
                {"name": "notes", "type": "textarea", "placeholder": "  anything else  "}
            ]})),
            &fx.ctx(),
            &next,
        )
        .await
        .unwrap();
    let hi = &r.message.artifact["human_input"];
    assert_eq!(hi["version"], 2);
    assert_eq!(hi["input_mode"], "form");
    assert_eq!(
        hi["fields"][0],
        json!({"name": "region", "label": "region", "type": "select", "required": true,
               "options": [{"id": "region-option-1", "label": "eu", "value": "eu"},
                           {"id": "region-option-2", "label": "us", "value": "us"}]})
    );
    assert_eq!(hi["fields"][1]["placeholder"], "anything else");
    assert!(
        r.message
            .text()
            .ends_with("Please reply with a value for each field.")
    );
}

#[tokio::test]
async fn disabled_clarification_lets_the_model_proceed() {
    let mut fx = Fx::new([]);
    fx.context
        .insert("disable_clarification".into(), json!(true));
    let r = ClarificationMiddleware::new()
        .wrap_tool_call(
            tool_request(
                "ask_clarification",
                json!({"question": "?"}),
                "c3",
                ThreadState::default(),
            ),
            &fx.ctx(),
            &ToolFn(|_| panic!("not called")),
        )
        .await
        .unwrap();
    assert!(!r.end_run);
    assert!(r.message.text().starts_with("Clarification is disabled"));
    assert_eq!(r.message.artifact, serde_json::Value::Null);
}

#[tokio::test]
async fn other_tools_pass_through() {
    let fx = Fx::new([]);
    let r = ClarificationMiddleware::new()
        .wrap_tool_call(
            tool_request(
                "bash",
                json!({"command": "ls"}),
                "c4",
                ThreadState::default(),
            ),
            &fx.ctx(),
            &ToolFn(|r| Ok(answer(&r, "listing"))),
        )
        .await
        .unwrap();
    assert_eq!(r.message.text(), "listing");
    assert!(!r.end_run);
}
