//! The HTTP face of Fawn: the LangGraph Platform API and DeerFlow's gateway API, the run
//! manager (queue, workers, cancellation, multitask strategies) and the stream broker (SSE,
//! resumable replay). The only crate that knows HTTP and the LangGraph wire format.
