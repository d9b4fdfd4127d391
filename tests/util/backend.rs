//! The fake completion backend (the `fake-backend` workspace crate, shared with the benchmarks
//! and the Python client tests): a real axum server on 127.0.0.1:0 that answers
//! `POST /v1/completions` from a script of realistic base-model continuations (as vLLM,
//! llama-server or SGLang would report them), records every request body, and counts calls.

pub use fake_backend::{FakeBackend, Scripted};

/// A scripted continuation answered after `delay`.
pub fn slow(delay: std::time::Duration, text: &str) -> Scripted {
    Scripted::Slow {
        delay,
        text: text.into(),
    }
}
