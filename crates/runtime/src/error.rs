//! The one error type that crosses from the runtime to its callers. Each variant says what
//! kind of failure it is, not how it is answered: the server maps them to statuses in one
//! place (`fawn_server::error`).

use fawn_checkpoint::StoreError;

/// Why a runtime operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A thread, run, assistant, graph or checkpoint that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The request is well formed but clashes with the current state (a busy thread with the
    /// `reject` strategy, …).
    #[error("{0}")]
    Conflict(String),
    /// The request is malformed in a way no single field names (a bad id, an unknown
    /// value checked against the current state, …).
    #[error("{0}")]
    Invalid(String),
    /// A field of the request is malformed: `path` names it (`config.configurable`,
    /// `command.update`, `values`), `reason` says what is wrong with it. The caller words the
    /// answer (the server: `Invalid request body at …`).
    #[error("invalid `{path}`: {reason}")]
    InvalidField { path: String, reason: String },
    /// A required field of the request is absent.
    #[error("`{path}` is required")]
    MissingField { path: String },
    /// The request is well formed but cannot be carried out as asked (two exclusive fields,
    /// a resume without a thread, a node the graph does not have, …).
    #[error("{0}")]
    Rejected(String),
    /// Storage failed while doing `context`.
    #[error("{context}: {source}")]
    Store {
        context: &'static str,
        #[source]
        source: StoreError,
    },
}

/// The runtime's result type.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

impl RuntimeError {
    pub fn not_found(m: impl Into<String>) -> RuntimeError {
        RuntimeError::NotFound(m.into())
    }

    pub fn conflict(m: impl Into<String>) -> RuntimeError {
        RuntimeError::Conflict(m.into())
    }

    pub fn invalid(m: impl Into<String>) -> RuntimeError {
        RuntimeError::Invalid(m.into())
    }

    pub fn invalid_field(path: impl Into<String>, reason: impl Into<String>) -> RuntimeError {
        RuntimeError::InvalidField {
            path: path.into(),
            reason: reason.into(),
        }
    }

    pub fn missing_field(path: impl Into<String>) -> RuntimeError {
        RuntimeError::MissingField { path: path.into() }
    }

    pub fn rejected(m: impl Into<String>) -> RuntimeError {
        RuntimeError::Rejected(m.into())
    }

    /// A storage error while doing `context`; the store's own not-found, conflict and invalid
    /// answers keep their kind.
    pub fn store(context: &'static str, e: StoreError) -> RuntimeError {
        match e {
            StoreError::NotFound(m) => RuntimeError::NotFound(m),
            StoreError::Conflict(m) => RuntimeError::Conflict(m),
            StoreError::Invalid(m) => RuntimeError::Invalid(m),
            source => RuntimeError::Store { context, source },
        }
    }
}
