//! OpenAI wire types: what scaffolds send and receive, and what completion backends speak.
//!
//! Kept apart from the pipeline so that the internal types never carry wire quirks; the
//! conversion happens in [`crate::conversation`] and [`crate::respond`].

pub mod chat;
pub mod completions;
pub mod lenient;
pub mod response;
pub mod responses;
pub mod split;
