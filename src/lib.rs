//! asap-proxy: lets unmodified agent scaffolds drive pretrained base models through the
//! OpenAI Chat Completions and Responses APIs (the ASAP method).
//!
//! `docs/architecture.md` is the map: the pipeline, each module's row (what it owns, what it
//! may use; CI checks the imports against it) and the glossary. In short: [`pipeline`] runs a
//! turn through the stages [`profile`], [`conversation`], [`prefix`], [`render`], [`session`],
//! [`context`], [`backend`], [`parse`], [`policy`], [`respond`] and [`trace`]; [`server`] is
//! the HTTP layer over it; [`report`], [`replay`] and [`view`] are the tools over traces.

pub mod anthropic;
pub mod backend;
pub mod cli;
pub mod config;
pub mod context;
pub mod conversation;
pub mod error;
pub mod logging;
pub mod metrics;
pub mod openai;
pub mod parse;
pub mod pipeline;
pub mod policy;
pub mod prefix;
pub mod profile;
pub mod render;
pub mod replay;
pub mod report;
pub mod respond;
pub mod server;
pub mod session;
pub mod side_call;
pub mod trace;
pub mod util;
pub mod view;
