//! Integration tests of the server over real HTTP.
