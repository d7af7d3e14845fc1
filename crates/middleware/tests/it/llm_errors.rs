use crate::support::*;
use async_trait::async_trait;
use fawn_llm::LlmError;
use fawn_llm::scripted::ScriptedTurn;
use fawn_middleware::llm_error::{CIRCUIT_OPEN_TEXT, CircuitBreakers, LlmConcurrency};
use fawn_middleware::{
    LLMErrorHandlingMiddleware, Middleware, MiddlewareError, ModelCall, ModelRequest,
    ModelResponse, error_fallback,
};
use fawn_state::{Message, ThreadState};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn rate_limited() -> ScriptedTurn {
    ScriptedTurn::Error(LlmError::RateLimit {
        retry_after: None,
        message: "Rate limit reached".into(),
    })
}

fn mw(fx: &Fx) -> LLMErrorHandlingMiddleware {
    let deps = fx.deps();
    LLMErrorHandlingMiddleware::new(
        fx.settings.app.llm_call.clone(),
        deps.shared.circuits.clone(),
        deps.shared.llm_limiter.clone(),
    )
}

async fn call(m: &LLMErrorHandlingMiddleware, fx: &Fx) -> Result<ModelResponse, MiddlewareError> {
    m.wrap_model_call(
        fx.request(vec![Message::human("hi")]),
        &ThreadState::default(),
        &fx.ctx(),
        &Invoke,
    )
    .await
}

#[tokio::test]
async fn two_rate_limits_then_success() {
    let fx = Fx::new([rate_limited(), rate_limited(), ScriptedTurn::text("Hello!")]);
    let r = call(&mw(&fx), &fx).await.unwrap();
    assert_eq!(r.message.text(), "Hello!");
    assert!(error_fallback(&r.message).is_none());
    assert_eq!(fx.model.requests().len(), 3);
    let events = fx.custom_events();
    assert_eq!(events.len(), 2);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["type"], "llm_retry");
        assert_eq!(e["attempt"], i as u64 + 1);
        assert_eq!(e["max_attempts"], 3);
        assert_eq!(e["reason"], "busy");
        let wait = e["wait_ms"].as_u64().unwrap();
        assert!(wait <= 5, "{wait}");
        assert_eq!(
            e["message"],
            format!(
                "LLM request retry {}/3: provider is busy. Retrying in 1s.",
                i + 1
            )
        );
    }
}

#[tokio::test]
async fn quota_is_not_retried_and_becomes_a_marked_answer() {
    let fx = Fx::new([ScriptedTurn::Error(LlmError::Quota {
        message: "You exceeded your current quota (insufficient_quota)".into(),
    })]);
    let r = call(&mw(&fx), &fx).await.unwrap();
    assert_eq!(fx.model.requests().len(), 1);
    assert!(fx.custom_events().is_empty());
    let m = &r.message;
    assert_eq!(m.additional_kwargs["deerflow_error_fallback"], true);
    assert_eq!(m.additional_kwargs["error_type"], "quota");
    assert_eq!(m.additional_kwargs["error_reason"], "quota");
    assert!(
        m.additional_kwargs["error_detail"]
            .as_str()
            .unwrap()
            .contains("insufficient_quota")
    );
    assert!(m.text().contains("out of quota"));
    let f = error_fallback(m).unwrap();
    assert_eq!(f.error_reason, "quota");
}

#[tokio::test]
async fn exhausted_retries_fall_back() {
    let server = || {
        ScriptedTurn::Error(LlmError::Server {
            status: 502,
            retry_after: None,
            message: "bad gateway".into(),
        })
    };
    let fx = Fx::new([server(), server(), server(), ScriptedTurn::text("never")]);
    let r = call(&mw(&fx), &fx).await.unwrap();
    assert_eq!(fx.model.requests().len(), 3);
    assert_eq!(fx.custom_events().len(), 2);
    let f = error_fallback(&r.message).unwrap();
    assert_eq!(
        (f.error_type.as_str(), f.error_reason.as_str()),
        ("server", "transient")
    );
    assert!(r.message.text().contains("temporarily unavailable"));
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured() {
    let fx = Fx::new([
        ScriptedTurn::Error(LlmError::RateLimit {
            retry_after: Some(Duration::from_secs(7)),
            message: "slow".into(),
        }),
        ScriptedTurn::text("ok"),
    ]);
    let started = tokio::time::Instant::now();
    call(&mw(&fx), &fx).await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(7));
    let e = &fx.custom_events()[0];
    assert_eq!(e["wait_ms"], 7000);
    assert_eq!(
        e["message"],
        "LLM request retry 1/3: provider is busy. Retrying in 7s."
    );
}

#[tokio::test]
async fn burst_rate_and_chunk_timeouts_have_a_budget_of_two() {
    let burst = || {
        ScriptedTurn::Error(LlmError::RateLimit {
            retry_after: None,
            message: "limit_burst_rate".into(),
        })
    };
    let fx = Fx::new([burst(), burst(), ScriptedTurn::text("never")]);
    let r = call(&mw(&fx), &fx).await.unwrap();
    assert_eq!(fx.model.requests().len(), 2);
    let events = fx.custom_events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["max_attempts"], 2);
    assert_eq!(events[0]["reason"], "burst_rate");
    assert!(error_fallback(&r.message).is_some());
}

#[tokio::test]
async fn circuit_breaker_opens_after_repeated_failures() {
    let fx = Fx::with(
        |s| {
            s.app.circuit_breaker.failure_threshold = 2;
            s.app.llm_call.retry_max_attempts = 1;
        },
        (0..5).map(|_| {
            ScriptedTurn::Error(LlmError::Connection {
                message: "reset".into(),
            })
        }),
    );
    let m = mw(&fx);
    for _ in 0..2 {
        let r = call(&m, &fx).await.unwrap();
        assert_eq!(
            error_fallback(&r.message).unwrap().error_reason,
            "transient"
        );
    }
    let r = call(&m, &fx).await.unwrap();
    assert_eq!(r.message.text(), CIRCUIT_OPEN_TEXT);
    assert_eq!(
        error_fallback(&r.message).unwrap().error_type,
        "circuit_open"
    );
    // Fail-fast: the model was not called a third time.
    assert_eq!(fx.model.requests().len(), 2);
    // Another model has its own breaker.
    let other = Arc::new(
        fawn_llm::scripted::ScriptedModel::new([ScriptedTurn::text("fine")]).with_info(
            fawn_llm::ModelInfo {
                name: "other".into(),
                ..Default::default()
            },
        ),
    );
    let mut req = fx.request(vec![Message::human("hi")]);
    req.model = other.clone();
    let r = m
        .wrap_model_call(req, &ThreadState::default(), &fx.ctx(), &Invoke)
        .await
        .unwrap();
    assert_eq!(r.message.text(), "fine");
}

#[tokio::test]
async fn cancellation_during_backoff() {
    let fx = Fx::with(
        |s| {
            s.app.llm_call.retry_base_delay_ms = 60_000;
            s.app.llm_call.retry_cap_delay_ms = 60_000;
        },
        [rate_limited(), ScriptedTurn::text("never")],
    );
    let ctx = fx.ctx();
    let cancel = ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
    });
    let r = mw(&fx)
        .wrap_model_call(
            fx.request(vec![Message::human("hi")]),
            &ThreadState::default(),
            &ctx,
            &Invoke,
        )
        .await;
    assert!(matches!(r, Err(MiddlewareError::Cancelled)));
    assert_eq!(fx.model.requests().len(), 1);
}

struct Slow {
    now: AtomicUsize,
    max: AtomicUsize,
}

#[async_trait]
impl ModelCall for Slow {
    async fn call(&self, _: ModelRequest) -> Result<ModelResponse, MiddlewareError> {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(n, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(30)).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        Ok(ModelResponse {
            message: Message::ai("ok"),
        })
    }
}

#[tokio::test]
async fn process_wide_concurrency_cap() {
    let fx = Fx::new([]);
    let m = Arc::new(LLMErrorHandlingMiddleware::new(
        fx.settings.app.llm_call.clone(),
        Arc::new(CircuitBreakers::new(5, Duration::from_secs(60))),
        LlmConcurrency::new(1),
    ));
    let slow = Arc::new(Slow {
        now: AtomicUsize::new(0),
        max: AtomicUsize::new(0),
    });
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let (m, slow, req, ctx) = (m.clone(), slow.clone(), fx.request(vec![]), fx.ctx());
        tasks.push(tokio::spawn(async move {
            m.wrap_model_call(req, &ThreadState::default(), &ctx, slow.as_ref())
                .await
                .unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(slow.max.load(Ordering::SeqCst), 1);
}
