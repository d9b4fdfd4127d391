//! asap-proxy: lets unmodified agent scaffolds drive pretrained base models through the
//! OpenAI Chat Completions API (the ASAP method; see DESIGN.md in the project docs).
//!
//! One module per pipeline stage: [`openai`] (decode), [`session`], [`profile`],
//! [`conversation`], [`render`], [`backend`], [`parse`], [`respond`], [`trace`]; [`pipeline`]
//! calls them in order and [`server`] is the HTTP layer; [`metrics`] counts and times what
//! they do, [`logging`] sets up the process's log output. Tools over traces: [`replay`],
//! [`report`], [`view`] (the trajectory viewer).

pub mod backend;
pub mod cli;
pub mod config;
pub mod context;
pub mod conversation;
pub mod dialect;
pub mod error;
pub mod logging;
pub mod metrics;
pub mod openai;
pub mod parse;
pub mod passthrough;
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
