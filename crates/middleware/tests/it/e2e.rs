//! End to end through the agent's loop.
