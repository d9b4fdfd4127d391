//! One integration-test binary (fast to link), one module per area.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod architecture;
mod behaviours;
mod cli;
mod context;
mod denominators;
mod dialects;
mod formats;
mod inputs;
mod loops;
mod messages;
mod metrics;
mod nudges;
mod parse;
mod passthrough;
mod prefix_build;
mod prefixes;
mod props;
mod reliability;
mod render;
mod replay;
mod report;
mod responses;
mod server;
mod summary;
mod trace;
mod turn_exits;
mod util;
mod view;
