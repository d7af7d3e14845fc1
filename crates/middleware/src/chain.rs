//! Composition of a middleware list with LangChain's ordering rules:
//! `before_*` hooks in list order, `after_*` hooks in reverse list order, and `wrap_*` hooks
//! nested so that the first middleware is the outermost wrapper.

use crate::{
    Hook, Middleware, MiddlewareError, ModelRequest, ModelResponse, RunContext, ToolCallRequest,
    ToolCallResult,
};
use async_trait::async_trait;
use fawn_state::ThreadState;
use fawn_tools::ToolError;
use std::sync::Arc;

/// The next step of a model call: the next wrapper, or the model itself.
#[async_trait]
pub trait ModelCall: Send + Sync {
    async fn call(&self, request: ModelRequest) -> Result<ModelResponse, MiddlewareError>;
}

/// The next step of a tool call: the next wrapper, or the tool itself.
#[async_trait]
pub trait ToolCallHandler: Send + Sync {
    async fn call(&self, request: ToolCallRequest) -> Result<ToolCallResult, ToolError>;
}

/// An ordered middleware list.
#[derive(Clone, Default)]
pub struct Chain {
    middlewares: Vec<Arc<dyn Middleware>>,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.middlewares.iter().map(|m| m.name()))
            .finish()
    }
}

impl Chain {
    pub fn new(middlewares: Vec<Arc<dyn Middleware>>) -> Chain {
        Chain { middlewares }
    }

    pub fn middlewares(&self) -> &[Arc<dyn Middleware>] {
        &self.middlewares
    }

    pub fn names(&self) -> Vec<&str> {
        self.middlewares.iter().map(|m| m.name()).collect()
    }

    /// The middlewares implementing a state hook, in the order the hook runs: list order
    /// for `before_*`, reverse list order for `after_*`.
    pub fn state_hook_order(&self, hook: Hook) -> Vec<Arc<dyn Middleware>> {
        let mut v: Vec<Arc<dyn Middleware>> = self
            .middlewares
            .iter()
            .filter(|m| m.hooks().contains(&hook))
            .cloned()
            .collect();
        if matches!(hook, Hook::AfterModel | Hook::AfterAgent) {
            v.reverse();
        }
        v
    }

    /// Runs a model call through every `wrap_model_call`, first middleware outermost, with
    /// `model` as the innermost step.
    pub async fn call_model(
        &self,
        request: ModelRequest,
        state: &ThreadState,
        ctx: &RunContext,
        model: &dyn ModelCall,
    ) -> Result<ModelResponse, MiddlewareError> {
        let wrappers: Vec<&Arc<dyn Middleware>> = self
            .middlewares
            .iter()
            .filter(|m| m.hooks().contains(&Hook::WrapModelCall))
            .collect();
        ModelLink {
            wrappers: &wrappers,
            state,
            ctx,
            inner: model,
        }
        .call(request)
        .await
    }

    /// Runs a tool call through every `wrap_tool_call`, first middleware outermost, with
    /// `tool` as the innermost step.
    pub async fn call_tool(
        &self,
        request: ToolCallRequest,
        ctx: &RunContext,
        tool: &dyn ToolCallHandler,
    ) -> Result<ToolCallResult, ToolError> {
        let wrappers: Vec<&Arc<dyn Middleware>> = self
            .middlewares
            .iter()
            .filter(|m| m.hooks().contains(&Hook::WrapToolCall))
            .collect();
        ToolLink {
            wrappers: &wrappers,
            ctx,
            inner: tool,
        }
        .call(request)
        .await
    }
}

struct ModelLink<'a> {
    wrappers: &'a [&'a Arc<dyn Middleware>],
    state: &'a ThreadState,
    ctx: &'a RunContext,
    inner: &'a dyn ModelCall,
}

#[async_trait]
impl ModelCall for ModelLink<'_> {
    async fn call(&self, request: ModelRequest) -> Result<ModelResponse, MiddlewareError> {
        match self.wrappers.split_first() {
            None => self.inner.call(request).await,
            Some((first, rest)) => {
                let next = ModelLink {
                    wrappers: rest,
                    state: self.state,
                    ctx: self.ctx,
                    inner: self.inner,
                };
                first
                    .wrap_model_call(request, self.state, self.ctx, &next)
                    .await
            }
        }
    }
}

struct ToolLink<'a> {
    wrappers: &'a [&'a Arc<dyn Middleware>],
    ctx: &'a RunContext,
    inner: &'a dyn ToolCallHandler,
}

#[async_trait]
impl ToolCallHandler for ToolLink<'_> {
    async fn call(&self, request: ToolCallRequest) -> Result<ToolCallResult, ToolError> {
        match self.wrappers.split_first() {
            None => self.inner.call(request).await,
            Some((first, rest)) => {
                let next = ToolLink {
                    wrappers: rest,
                    ctx: self.ctx,
                    inner: self.inner,
                };
                first.wrap_tool_call(request, self.ctx, &next).await
            }
        }
    }
}
