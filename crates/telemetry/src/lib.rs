//! Observability for the whole process, in one place.
//!
//! Owns: the Prometheus metric families every crate records into ([`metrics`], rendered as
//! the text format or JSON for `/metrics`), OpenTelemetry tracing ([`trace`]: the span
//! helpers with GenAI and OpenInference attributes, W3C `traceparent` propagation, and the
//! export to OTLP destinations — any collector, LangSmith, Langfuse — configured from the
//! environment variables their users already set, through bounded queues that drop and
//! count instead of waiting), and the ids a request carries into the runs it creates
//! ([`request`]).
//!
//! Must never know HTTP routes, storage, the agent or the run lifecycle: those crates call
//! in here with plain values (a route template, a model name, a status), never the other
//! way round. Recording is cheap and never fails a caller; with no trace destination
//! configured no span data is built at all.

pub mod metrics;
pub mod request;
pub mod trace;

pub use metrics::metrics;
