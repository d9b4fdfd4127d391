//! The one fake completion backend of asap-proxy's tests and benchmarks: a real axum server on
//! loopback speaking the OpenAI legacy completions API the way vLLM, llama-server and SGLang
//! do (`POST /v1/completions`, `GET /v1/models`, `GET /health`; in scripted mode also
//! `POST /v1/chat/completions` and vLLM's `POST /tokenize`). Four modes:
//!
//! - **scripted** ([`FakeBackend`], [`Scripted`]): each call takes the next reply of a script
//!   (from code, or a JSON file: [`Scripted::from_json`]), with faults as replies (errors,
//!   rate limits, raw bodies, hang-ups, slow answers, each backend's context-overflow answer);
//!   every request is recorded for assertions (in memory, and to a JSONL file for other
//!   processes). Used by the Rust integration tests (in-process) and, as the binary, by the
//!   Python client tests and the end-to-end tests.
//! - **constant** ([`constant`]): one reply, zero latency or a fixed delay, JSON or SSE; the
//!   load benchmark (`bench/load.sh`).
//! - **soak** ([`soak`]): plausible agent steps chosen from the prompt, with random faults
//!   logged for the soak driver (`bench/soak.sh`).
//! - **agent** ([`agent`]): a fake model that works through tasks, base (completions) and
//!   instruct (chat) alike, choosing each step from what the request already shows; the
//!   evaluation workflow's tests (`scripts/evaluate.py`).
//!
//! The binary (`fake-backend --port N <script|constant|soak> ...`) prints `PORT <n>` on stdout
//! and `fake backend (<mode>) listening on http://<addr>/v1` on stderr once it is bound.

pub mod agent;
pub mod constant;
pub mod reply;
pub mod script;
pub mod soak;

pub use script::{Exhausted, FakeBackend, Options, Scripted};
