//! Fawn's state model: LangChain-shaped [`Message`]s, DeerFlow's [`ThreadState`] with its
//! reducers, chunk merging, interrupts, commands and the [`StreamEvent`]s a run emits.
//!
//! This crate is pure: no I/O, no async, no clocks beyond uuid generation for missing
//! message ids. It knows nothing of HTTP, storage, models or tools; everything else in
//! Fawn depends on it.

pub mod chunk;
pub mod events;
pub mod list;
pub mod message;
pub mod state;

pub use chunk::{ChunkAccumulator, merge_chunks};
pub use events::{Command, EventSink, Interrupt, JournalEntry, NullSink, StreamEvent, VecSink};
pub use list::Messages;
pub use message::{
    Content, InvalidToolCall, Message, MessageError, MessageKind, REMOVE_ALL_MESSAGES, ToolCall,
    ToolCallChunk, UsageMetadata, messages_from_value,
};
pub use state::{
    GoalState, ReducerError, SandboxState, StateError, StateUpdate, ThreadData, ThreadState, Todo,
    add_messages,
};
