//! Test helpers: a fake base-model backend (a real HTTP server on loopback), fixtures, and
//! starting the proxy in-process or as the real binary.

pub mod backend;
pub mod proxy;

use std::path::PathBuf;

use serde_json::Value;

/// `tests/fixtures/<rel>`.
pub fn fixture_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// A JSON fixture.
pub fn fixture_json(rel: &str) -> Value {
    let text = std::fs::read_to_string(fixture_path(rel)).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Reads a JSONL trace file into its records.
pub fn read_trace(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
