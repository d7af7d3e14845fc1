//! Built-in tools through their `Tool` interface (reference §3.4, §3.6, §11.1 items 31-32).

use crate::support::{Harness, args, text};
use async_trait::async_trait;
use fawn_state::{Message, ToolCall, UsageMetadata};
use fawn_tools::builtins::{
    AskClarificationTool, CLARIFICATION_PLACEHOLDER, PresentFilesTool, TaskTool, ViewImageTool,
    WriteTodosTool,
};
use fawn_tools::{
    SubagentInfo, SubagentOutcome, SubagentRequest, SubagentRunner, SubagentStatus, Tool,
    ToolContext, ToolError, ToolStatus,
};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0";
const JPEG: &[u8] = b"\xff\xd8\xff\xe0\0\x10JFIF\0";

// ---------------------------------------------------------------- present_files

#[tokio::test]
async fn present_files_outside_outputs_is_refused_and_changes_nothing() {
    let h = Harness::new().await;
    let out = PresentFilesTool::new()
        .call(
            args(json!({"filepaths": ["/mnt/user-data/workspace/x.md"]})),
            &h.ctx,
        )
        .await
        .unwrap();
    assert_eq!(
        text(&out),
        "Error: Only files in /mnt/user-data/outputs can be presented: /mnt/user-data/workspace/x.md"
    );
    assert_eq!(out.status, ToolStatus::Error);
    assert!(out.update.is_none(), "artifacts must stay unchanged");

    // One bad path fails the whole call.
    let out = PresentFilesTool::new()
        .call(
            args(json!({"filepaths": ["/mnt/user-data/outputs/a.md", "/etc/passwd"]})),
            &h.ctx,
        )
        .await
        .unwrap();
    assert!(text(&out).ends_with(": /etc/passwd"));
    assert!(out.update.is_none());
}

#[tokio::test]
async fn present_files_records_artifacts_from_virtual_and_host_paths() {
    let h = Harness::new().await;
    let host = h.paths.outputs.join("charts").join("a.png");
    let out = PresentFilesTool::new()
        .call(
            args(json!({"filepaths": [
                "/mnt/user-data/outputs/report.md",
                host.display().to_string(),
                "/mnt/user-data/outputs/./report.md"
            ]})),
            &h.ctx,
        )
        .await
        .unwrap();
    assert_eq!(text(&out), "Successfully presented files");
    assert_eq!(out.status, ToolStatus::Success);
    let artifacts = out.update.and_then(|u| u.artifacts).unwrap();
    assert_eq!(
        artifacts,
        vec![
            "/mnt/user-data/outputs/report.md".to_string(),
            "/mnt/user-data/outputs/charts/a.png".to_string()
        ]
    );
}

#[tokio::test]
async fn present_files_bad_arguments_are_tool_errors() {
    let h = Harness::new().await;
    let t = PresentFilesTool::new();
    let e = t.call(args(json!({})), &h.ctx).await.unwrap_err();
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("missing field `filepaths`")),
        "{e}"
    );
    let e = t
        .call(
            args(json!({"filepaths": "/mnt/user-data/outputs/a"})),
            &h.ctx,
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("filepaths: invalid type"), "{e}");
    let out = t
        .call(args(json!({"filepaths": []})), &h.ctx)
        .await
        .unwrap();
    assert_eq!(out.status, ToolStatus::Error);
}

// ---------------------------------------------------------------- view_image

async fn view(h: &Harness, path: &str) -> fawn_tools::ToolOutput {
    ViewImageTool::new()
        .call(args(json!({ "image_path": path })), &h.ctx)
        .await
        .unwrap()
}

#[tokio::test]
async fn view_image_png_with_jpeg_bytes_is_refused() {
    let h = Harness::new().await;
    h.write("uploads/photo.png", JPEG);
    let out = view(&h, "/mnt/user-data/uploads/photo.png").await;
    assert_eq!(
        text(&out),
        "Error: Image contents are image/jpeg, but file extension indicates image/png"
    );
    assert_eq!(out.status, ToolStatus::Error);
    assert!(out.update.is_none());
}

#[tokio::test]
async fn view_image_rejects_formats_roots_and_junk() {
    let h = Harness::new().await;
    h.write("workspace/a.bmp", b"BM\0\0");
    let out = view(&h, "/mnt/user-data/workspace/a.bmp").await;
    assert_eq!(
        text(&out),
        "Error: Unsupported image format: .bmp. Supported formats: .jpg, .jpeg, .png, .webp, .gif"
    );

    for p in [
        "/tmp/x.png",
        "/mnt/user-data/x.png",
        "/mnt/user-data/outputs/../../../etc/x.png",
        "/mnt/skills/public/x/a.png",
        "relative.png",
    ] {
        let out = view(&h, p).await;
        assert_eq!(
            text(&out),
            "Error: Only image paths under /mnt/user-data/workspace, /mnt/user-data/uploads, /mnt/user-data/outputs are allowed",
            "{p}"
        );
    }

    let out = view(&h, "/mnt/user-data/outputs/missing.png").await;
    assert_eq!(
        text(&out),
        "Error: Image file not found: /mnt/user-data/outputs/missing.png"
    );

    h.write("outputs/fake.gif", b"not an image at all");
    let out = view(&h, "/mnt/user-data/outputs/fake.gif").await;
    assert_eq!(
        text(&out),
        "Error: File contents do not match a supported image format"
    );
}

#[tokio::test]
async fn view_image_too_large_is_refused() {
    let h = Harness::new().await;
    let mut big = PNG.to_vec();
    big.resize(20 * 1024 * 1024 + 1, 0);
    h.write("uploads/big.png", &big);
    let out = view(&h, "/mnt/user-data/uploads/big.png").await;
    assert_eq!(out.status, ToolStatus::Error);
    assert_eq!(
        text(&out),
        "Error: Image file is too large: /mnt/user-data/uploads/big.png (20971521 bytes). Maximum supported size is 20971520 bytes"
    );
}

#[tokio::test]
async fn view_image_records_viewed_images_without_host_paths() {
    let h = Harness::new().await;
    h.write("workspace/charts/c.PNG", PNG);
    let out = view(&h, "/mnt/user-data/workspace/charts/./c.PNG").await;
    assert_eq!(text(&out), "Successfully read image");
    let viewed = out.update.and_then(|u| u.viewed_images).unwrap();
    let entry = &viewed["/mnt/user-data/workspace/charts/c.PNG"];
    assert_eq!(entry["mime_type"], "image/png");
    assert_eq!(entry["size"], PNG.len());
    assert_eq!(
        entry["actual_path"],
        "/mnt/user-data/workspace/charts/c.PNG"
    );
    assert_eq!(entry["sha256"].as_str().map(str::len), Some(64));
    let all = serde_json::to_string(&viewed).unwrap();
    assert!(!all.contains(&h.dir.path().display().to_string()));

    h.write("uploads/p.jpeg", JPEG);
    let out = view(&h, "/mnt/user-data/uploads/p.jpeg").await;
    assert_eq!(text(&out), "Successfully read image");
}

#[tokio::test]
async fn view_image_wrong_argument_type() {
    let h = Harness::new().await;
    let e = ViewImageTool::new()
        .call(args(json!({"image_path": 7})), &h.ctx)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("image_path: invalid type"), "{e}");
}

// ---------------------------------------------------------------- ask_clarification / write_todos

#[tokio::test]
async fn ask_clarification_is_return_direct_and_ends_the_run() {
    let h = Harness::new().await;
    let t = AskClarificationTool::new();
    assert!(t.return_direct());
    let out = t
        .call(
            args(json!({
                "question": "Which env?", "clarification_type": "approach_choice",
                "context": "Need target", "options": ["dev", "prod"],
                "fields": [{"name": "region", "type": "select", "options": ["eu", "us"]}]
            })),
            &h.ctx,
        )
        .await
        .unwrap();
    assert_eq!(text(&out), CLARIFICATION_PLACEHOLDER);
    assert!(out.end_run);

    // Options in an odd shape are left to the middleware, not rejected here.
    let out = t
        .call(
            args(
                json!({"question": "q", "clarification_type": "suggestion", "options": "[\"a\"]"}),
            ),
            &h.ctx,
        )
        .await
        .unwrap();
    assert!(out.end_run);

    let e = t
        .call(
            args(json!({"question": "q", "clarification_type": "whatever"})),
            &h.ctx,
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("clarification_type"), "{e}");
}

#[tokio::test]
async fn write_todos_replaces_the_list() {
    let h = Harness::new().await;
    let out = WriteTodosTool::new()
        .call(
            args(json!({"todos": [
                {"content": "Collect data", "status": "completed"},
                {"content": "Write report", "status": "in_progress"},
                {"content": "Review", "status": "pending"}
            ]})),
            &h.ctx,
        )
        .await
        .unwrap();
    assert_eq!(
        text(&out),
        r#"Updated todo list to [{"content":"Collect data","status":"completed"},{"content":"Write report","status":"in_progress"},{"content":"Review","status":"pending"}]"#
    );
    let todos = out.update.and_then(|u| u.todos).unwrap();
    assert_eq!(todos.len(), 3);
    assert_eq!(todos[1].status, "in_progress");

    let out = WriteTodosTool::new()
        .call(args(json!({"todos": []})), &h.ctx)
        .await
        .unwrap();
    assert_eq!(out.update.and_then(|u| u.todos), Some(vec![]));

    let e = WriteTodosTool::new()
        .call(
            args(json!({"todos": [{"content": "x", "status": "done"}]})),
            &h.ctx,
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("todos[0].status"), "{e}");
}

// ---------------------------------------------------------------- task

/// A scripted subagent runner (the real one lives in the agent crate).
struct FakeRunner {
    outcome: SubagentOutcome,
    progress: Vec<Message>,
    wait_for_cancel: bool,
    seen: Mutex<Vec<SubagentRequest>>,
}

impl FakeRunner {
    fn new(outcome: SubagentOutcome, progress: Vec<Message>) -> Arc<FakeRunner> {
        Arc::new(FakeRunner {
            outcome,
            progress,
            wait_for_cancel: false,
            seen: Mutex::new(Vec::new()),
        })
    }
}

#[async_trait]
impl SubagentRunner for FakeRunner {
    fn available(&self) -> Vec<SubagentInfo> {
        vec![
            SubagentInfo {
                name: "general-purpose".into(),
                description: "General work".into(),
            },
            SubagentInfo {
                name: "bash".into(),
                description: "Shell work".into(),
            },
        ]
    }

    async fn run(
        &self,
        request: SubagentRequest,
        ctx: &ToolContext,
        progress: tokio::sync::mpsc::UnboundedSender<Message>,
    ) -> SubagentOutcome {
        self.seen.lock().unwrap().push(request);
        for m in &self.progress {
            let _ = progress.send(m.clone());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if self.wait_for_cancel {
            ctx.cancel.cancelled().await;
            return SubagentOutcome {
                status: SubagentStatus::Cancelled,
                ..self.outcome.clone()
            };
        }
        self.outcome.clone()
    }
}

fn outcome(status: SubagentStatus, result: &str, error: Option<&str>) -> SubagentOutcome {
    SubagentOutcome {
        status,
        result: result.into(),
        error: error.map(String::from),
        stop_reason: None,
        usage: UsageMetadata::new(10, 5),
        model_name: "sub-model".into(),
    }
}

fn ai(text: &str, usage: (i64, i64)) -> Message {
    let mut m = Message::ai(text).with_id(format!("ai-{text}"));
    m.usage_metadata = Some(UsageMetadata::new(usage.0, usage.1));
    m
}

async fn run_task(h: &Harness, runner: &Arc<FakeRunner>) -> fawn_tools::ToolOutput {
    TaskTool::new(&runner.available())
        .call(
            args(json!({
                "description": "Find the answer",
                "prompt": "Compute 6*7 and report it.",
                "subagent_type": "general-purpose"
            })),
            &h.ctx,
        )
        .await
        .unwrap()
}

#[tokio::test]
async fn task_streams_events_and_reports_success() {
    let mut tool_msg = Message::tool("42", "c9", Some("bash".into()));
    tool_msg.id = Some("tool-1".into());
    let ai_call = ai("thinking", (3, 1)).with_tool_calls(vec![ToolCall::new(
        "bash",
        json!({"command": "echo 42"}),
        "c9",
    )]);
    let runner = FakeRunner::new(
        outcome(SubagentStatus::Completed, "The answer is 42.", None),
        vec![ai_call, tool_msg, ai("The answer is 42.", (4, 2))],
    );
    let h = Harness::with_runner(Some(runner.clone())).await;
    let out = run_task(&h, &runner).await;

    assert_eq!(text(&out), "Task Succeeded. Result: The answer is 42.");
    assert_eq!(out.status, ToolStatus::Success);
    let k = &out.additional_kwargs;
    assert_eq!(k["subagent_status"], "completed");
    assert_eq!(k["subagent_result_brief"], "The answer is 42.");
    assert_eq!(k["subagent_model_name"], "sub-model");
    assert_eq!(
        k["subagent_token_usage"],
        json!({"input_tokens": 10, "output_tokens": 5, "total_tokens": 15})
    );
    let sha = k["subagent_result_sha256"].as_str().unwrap();
    assert_eq!(sha.len(), 64);
    assert!(k.get("subagent_error").is_none());

    let seen = runner.seen.lock().unwrap().clone();
    assert_eq!(seen[0].task_id, "call_1");
    assert_eq!(seen[0].subagent_type, "general-purpose");
    assert_eq!(seen[0].prompt, "Compute 6*7 and report it.");

    let ev = h.custom_events();
    let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        vec![
            "task_started",
            "task_running",
            "task_running",
            "task_running",
            "task_completed"
        ]
    );
    assert_eq!(
        ev[0],
        json!({"type": "task_started", "task_id": "call_1", "description": "Find the answer", "model_name": "lead-model"})
    );
    for (i, e) in ev[1..4].iter().enumerate() {
        assert_eq!(e["task_id"], "call_1");
        assert_eq!(e["message_index"], i + 1);
        assert_eq!(e["total_messages"], i + 1);
    }
    assert_eq!(ev[1]["message"]["type"], "ai");
    assert_eq!(ev[1]["message"]["tool_calls"][0]["name"], "bash");
    assert_eq!(ev[2]["message"]["type"], "tool");
    // Usage accumulates over the AI messages only.
    assert_eq!(ev[1]["usage"]["total_tokens"], 4);
    assert_eq!(ev[2]["usage"]["total_tokens"], 4);
    assert_eq!(ev[3]["usage"]["total_tokens"], 10);
    assert_eq!(
        ev[4],
        json!({"type": "task_completed", "task_id": "call_1", "result": "The answer is 42.",
               "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
               "model_name": "sub-model"})
    );
}

#[tokio::test]
async fn task_failure_statuses() {
    let cases = [
        (
            outcome(SubagentStatus::Failed, "", Some("model exploded")),
            "Task failed. Error: model exploded",
            "task_failed",
            "failed",
        ),
        (
            outcome(SubagentStatus::TimedOut, "", None),
            "Task timed out.",
            "task_timed_out",
            "timed_out",
        ),
        (
            outcome(SubagentStatus::Cancelled, "", None),
            "Task cancelled by user.",
            "task_cancelled",
            "cancelled",
        ),
    ];
    for (o, want_text, want_event, want_status) in cases {
        let runner = FakeRunner::new(o, vec![]);
        let h = Harness::with_runner(Some(runner.clone())).await;
        let out = run_task(&h, &runner).await;
        assert_eq!(text(&out), want_text);
        assert_eq!(out.status, ToolStatus::Error);
        assert_eq!(out.additional_kwargs["subagent_status"], want_status);
        assert!(out.additional_kwargs.get("subagent_result_brief").is_none());
        assert!(out.additional_kwargs["subagent_error"].is_string());
        let ev = h.custom_events();
        let last = ev.last().unwrap();
        assert_eq!(last["type"], want_event);
        assert!(last.get("error").is_some());
        assert_eq!(last["model_name"], "sub-model");
    }

    let mut capped = outcome(SubagentStatus::Completed, "partial", None);
    capped.stop_reason = Some("token_capped".into());
    let runner = FakeRunner::new(capped, vec![]);
    let h = Harness::with_runner(Some(runner.clone())).await;
    let out = run_task(&h, &runner).await;
    assert_eq!(
        text(&out),
        "Task Succeeded (capped: token budget). Result: partial"
    );
    assert_eq!(
        out.additional_kwargs["subagent_stop_reason"],
        "token_capped"
    );
}

#[tokio::test]
async fn task_long_result_brief_is_bounded() {
    let long = "x".repeat(5000);
    let runner = FakeRunner::new(outcome(SubagentStatus::Completed, &long, None), vec![]);
    let h = Harness::with_runner(Some(runner.clone())).await;
    let out = run_task(&h, &runner).await;
    assert_eq!(text(&out), format!("Task Succeeded. Result: {long}"));
    let brief = out.additional_kwargs["subagent_result_brief"]
        .as_str()
        .unwrap();
    assert_eq!(brief.chars().count(), 2000);
    assert!(brief.contains("\n...\n"));
}

#[tokio::test]
async fn task_unknown_subagent_type_and_no_runner() {
    let runner = FakeRunner::new(outcome(SubagentStatus::Completed, "x", None), vec![]);
    let h = Harness::with_runner(Some(runner.clone())).await;
    let out = TaskTool::new(&runner.available())
        .call(
            args(json!({"description": "d", "prompt": "p", "subagent_type": "wizard"})),
            &h.ctx,
        )
        .await
        .unwrap();
    assert_eq!(
        text(&out),
        "Task failed. Error: Unknown subagent type 'wizard'. Available: general-purpose, bash"
    );
    assert_eq!(out.status, ToolStatus::Error);
    assert_eq!(out.additional_kwargs["subagent_status"], "failed");
    assert!(runner.seen.lock().unwrap().is_empty());
    assert!(h.custom_events().is_empty(), "no events for a refused task");

    let h = Harness::new().await;
    let out = TaskTool::new(&[])
        .call(
            args(json!({"description": "d", "prompt": "p", "subagent_type": "bash"})),
            &h.ctx,
        )
        .await
        .unwrap();
    assert!(text(&out).starts_with("Task failed. Error: Subagents are not enabled"));

    let e = TaskTool::new(&[])
        .call(args(json!({"description": "d", "prompt": 3})), &h.ctx)
        .await
        .unwrap_err();
    assert!(matches!(e, ToolError::InvalidArguments(_)), "{e}");
}

#[tokio::test]
async fn task_cancellation_reaches_the_runner() {
    let runner = Arc::new(FakeRunner {
        outcome: outcome(SubagentStatus::Completed, "never", None),
        progress: vec![ai("started", (1, 1))],
        wait_for_cancel: true,
        seen: Mutex::new(Vec::new()),
    });
    let h = Harness::with_runner(Some(runner.clone())).await;
    let cancel = h.ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
    });
    let out = tokio::time::timeout(Duration::from_secs(5), run_task(&h, &runner))
        .await
        .expect("task returns after cancellation");
    assert_eq!(text(&out), "Task cancelled by user.");
    let ev = h.custom_events();
    assert_eq!(ev.last().unwrap()["type"], "task_cancelled");
    assert!(ev.iter().any(|e| e["type"] == "task_running"));
    let _: Value = ev[0].clone();
}
