//! `fake-backend`: the fake completion backend as a process (see the library's docs).
//!
//! - `fake-backend --port 0 script --script script.json --record requests.jsonl`
//! - `fake-backend --port 9000 constant --delay-ms 0`
//! - `fake-backend --port 19011 soak --fault-rate 0.05`
//! - `fake-backend --port 0 agent --script tasks.json`

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use fake_backend::{agent, constant, soak, Exhausted, FakeBackend, Options, Scripted};

#[derive(Parser)]
#[command(about = "The fake completion backend of asap-proxy's tests and benchmarks")]
struct Args {
    /// Port on 127.0.0.1 (0: any free port; the bound port is printed as `PORT <n>`).
    #[arg(long, default_value_t = 0)]
    port: u16,
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// Replies from a JSON script, in order; after the end the last one repeats.
    Script {
        /// JSON list of entries (see `Scripted::from_json`).
        #[arg(long)]
        script: PathBuf,
        /// JSONL file each POSTed request body is appended to.
        #[arg(long)]
        record: Option<PathBuf>,
        /// `max_model_len` reported by `GET /v1/models` (0: none).
        #[arg(long, default_value_t = 32768)]
        max_model_len: u64,
    },
    /// The same reply to every completion call.
    Constant {
        /// Delay before each answer, milliseconds (a model's generation time).
        #[arg(long, default_value_t = 0)]
        delay_ms: u64,
        /// Text of every completion [default: a thought and a `<bash>` action].
        #[arg(long)]
        text: Option<String>,
        // The place is named, not written: clap's help reads `{n}` as a line break.
        /// Number the answers: the first `n` in braces in the text becomes the answer's
        /// number, from 1, so no two are equal (the default text gets a `# run` comment with
        /// the number after its command).
        #[arg(long)]
        numbered: bool,
    },
    /// A fake model that works through the tasks of an agent script (see `agent`): base
    /// (completions) and instruct (chat) alike.
    Agent {
        /// JSON agent script: `{"tasks": [{"match", "variants": [[{"marker", "text"?, "chat"?}]]}]}`.
        #[arg(long)]
        script: PathBuf,
        /// JSONL file each POSTed request body is appended to.
        #[arg(long)]
        record: Option<PathBuf>,
    },
    /// Plausible agent steps with random faults (`GET /soak/faults`: what was injected).
    Soak(soak::SoakOptions),
}

fn main() -> Result<(), String> {
    let args = Args::parse();
    // One thread: the benchmarks pin the backend to one core (or share two cores).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        let addr = SocketAddr::from(([127, 0, 0, 1], args.port));
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("fake-backend: bind {addr}: {e}"))?;
        let bound = listener.local_addr().map_err(|e| e.to_string())?;
        let (name, app) = match args.mode {
            Mode::Script {
                script,
                record,
                max_model_len,
            } => {
                let text = std::fs::read_to_string(&script)
                    .map_err(|e| format!("fake-backend: {}: {e}", script.display()))?;
                let (script, keyed) = Scripted::from_json_keyed(&text)
                    .map_err(|e| format!("fake-backend: {}: {e}", script.display()))?;
                if script.is_empty() {
                    return Err("fake-backend: the script must hold at least one entry".into());
                }
                let options = Options {
                    exhausted: Exhausted::RepeatLast,
                    max_model_len: (max_model_len > 0).then_some(max_model_len),
                    tokenize: false,
                    record,
                    keyed,
                };
                announce("script", bound);
                FakeBackend::serve(listener, script, options);
                return std::future::pending().await;
            }
            Mode::Constant {
                delay_ms,
                text,
                numbered,
            } => {
                let default = if numbered {
                    constant::NUMBERED_COMPLETION
                } else {
                    constant::COMPLETION
                };
                let router = constant::router(
                    text.as_deref().unwrap_or(default),
                    Duration::from_millis(delay_ms),
                    numbered,
                )
                .map_err(|e| format!("fake-backend: {e}"))?;
                ("constant", router)
            }
            Mode::Agent { script, record } => {
                let text = std::fs::read_to_string(&script)
                    .map_err(|e| format!("fake-backend: {}: {e}", script.display()))?;
                let script = agent::AgentScript::from_json(&text)
                    .map_err(|e| format!("fake-backend: {}: {e}", script.display()))?;
                ("agent", agent::router(script, record))
            }
            Mode::Soak(options) => ("soak", soak::router(options)),
        };
        announce(name, bound);
        axum::serve(listener, app).await.map_err(|e| e.to_string())
    })
}

/// `PORT <n>` on stdout (read by the Python tests), the address on stderr (read by the
/// benchmark scripts).
fn announce(mode: &str, addr: SocketAddr) {
    let mut out = std::io::stdout();
    let _ = writeln!(out, "PORT {}", addr.port());
    let _ = out.flush();
    eprintln!("fake backend ({mode}) listening on http://{addr}/v1");
}
