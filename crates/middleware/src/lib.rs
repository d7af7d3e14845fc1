//! The middleware chain around the model/tool loop.
//!
//! Owns: the `Middleware` trait with its six hooks and LangChain's ordering rules, and
//! DeerFlow's built-in middlewares. Must never know about HTTP, SSE framing or storage.
