//! The run lifecycle driven without HTTP: runs created through the runtime's API, executed
//! by the test graph over an in-process scripted model, observed through the store and the
//! test seams.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod lifecycle;
