//! Binary entry: parse the CLI, install tracing, run one subcommand, map the result to an exit
//! code (0 success, 2 usage or configuration error, 1 runtime failure).

use std::io::{Read, Write};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;

use asap_proxy::cli::{Cli, Command, PrefixArgs, PrefixCommand, RenderArgs};
use asap_proxy::config::{read_file, Config, Layer, PromptConfig, ServeArgs};
use asap_proxy::error::CliError;
use asap_proxy::logging::{self, LogFormat};
use asap_proxy::openai::chat::ChatCompletionRequest;
use asap_proxy::pipeline::prepare;
use asap_proxy::prefix::build::{build, BuildOptions};
use asap_proxy::prefix::PrefixStore;
use asap_proxy::profile::Profiles;
use asap_proxy::render::Renderer;
use asap_proxy::server::{serve, AppState};
use asap_proxy::session::SessionIndex;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `serve` installs logging once its configuration (which may ask for JSON) is resolved.
    if !matches!(cli.command, Command::Serve(_)) {
        logging::init(LogFormat::Text);
    }
    let result = match cli.command {
        Command::Serve(args) => run_serve(&args),
        Command::Render(args) => run_render(&args),
        Command::Prefix(args) => run_prefix(&args),
        Command::Replay(args) => asap_proxy::replay::run(&args),
        Command::Report(args) => asap_proxy::report::run(&args),
        Command::View(args) => asap_proxy::view::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let (code, message) = (error.exit_code(), error.report());
            if logging::is_json() {
                tracing::error!(code, "asap-proxy: {message}");
            } else {
                // Not `eprintln!`: it panics (exit 101) when standard error is a closed pipe.
                let _ = writeln!(std::io::stderr(), "asap-proxy: {message}");
            }
            ExitCode::from(code)
        }
    }
}

type RunResult = Result<(), CliError>;

fn run_serve(args: &ServeArgs) -> RunResult {
    let config = Config::resolve(args).map_err(|e| {
        // The file could not be read: the flag or `ASAP_LOG_FORMAT` still says how to log.
        logging::init(args.log_format.unwrap_or_default());
        CliError::input(e)
    })?;
    logging::init(config.log_format);
    let state = AppState::from_config(&config).map_err(CliError::input)?;
    let runtime = tokio::runtime::Runtime::new().map_err(CliError::internal)?;
    runtime
        .block_on(serve(Arc::new(state), config.listen))
        .map_err(CliError::io(format!("serving on {}", config.listen)))
}

fn run_render(args: &RenderArgs) -> RunResult {
    let file = read_file(args.prompt.config.as_deref()).map_err(CliError::input)?;
    let settings = args.prompt.clone().over(file.prompt);
    let config = PromptConfig::resolve(&settings);
    let mut body = Vec::new();
    let read = if args.request.as_os_str() == "-" {
        std::io::stdin().read_to_end(&mut body).map(|_| ())
    } else {
        std::fs::read(&args.request).map(|b| body = b)
    };
    read.map_err(CliError::unreadable(format!(
        "reading {}",
        args.request.display()
    )))?;
    let request = ChatCompletionRequest::from_slice(&body).map_err(CliError::input)?;
    let profiles = Profiles::builtin().map_err(CliError::internal)?;
    let renderer =
        Renderer::with_templates(settings.templates.as_deref()).map_err(CliError::input)?;
    // Ids in the history carry the session's nudges; there is no content index offline.
    let sessions = SessionIndex::new(1);
    let prefixes = PrefixStore::load(&config.prefixes, config.prefix_k).map_err(CliError::input)?;
    let prepared = prepare(
        &request,
        &Default::default(),
        &profiles,
        &renderer,
        &config,
        &sessions,
        &prefixes,
    )
    .map_err(CliError::input)?;
    std::io::stdout()
        .write_all(prepared.prompt.as_bytes())
        .map_err(CliError::internal)
}

fn run_prefix(args: &PrefixArgs) -> RunResult {
    match &args.command {
        PrefixCommand::Build(b) => {
            let opts = BuildOptions {
                from: b.from.clone(),
                k: b.k,
                out: b.out.clone(),
                gold: b.gold.clone(),
                allow_leaks: b.allow_leaks,
                no_leak_check: b.no_leak_check,
                profile: b.profile.clone(),
            };
            let report = build(&opts).map_err(|e| {
                if e.is_usage() {
                    CliError::input(e)
                } else {
                    CliError::internal(e)
                }
            })?;
            std::io::stderr()
                .write_all(report.details().as_bytes())
                .map_err(CliError::internal)?;
            std::io::stdout()
                .write_all(report.render().as_bytes())
                .map_err(CliError::internal)
        }
    }
}
