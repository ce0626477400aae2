//! The `spate` binary: CLI, logging, and process assembly (see `run`).
//!
//! Exit codes: 0 completed, 1 the pipeline failed, 2 usage or
//! configuration error. Every failure ends with one line
//! `spate: error: <what failed and why>` on stderr.

mod check;
mod cli;
mod gen;
mod run;
mod units;

use clap::Parser;
use cli::{Cli, Command, LogFormat};
use tracing_subscriber::EnvFilter;

/// A process exit: code and the one line that explains it.
#[derive(Debug)]
pub struct Exit {
    code: i32,
    message: String,
}

impl Exit {
    /// A usage or configuration error (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            code: 2,
            message: message.into(),
        }
    }

    /// A pipeline failure (exit 1).
    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            code: 1,
            message: message.into(),
        }
    }
}

fn init_logging(level: &str, format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_thread_names(true);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            let _ = e.print();
            let what = e.to_string();
            let first = what.lines().next().unwrap_or("invalid arguments");
            eprintln!("spate: error: {}", first.trim_start_matches("error: "));
            std::process::exit(2);
        }
    };
    let result = match cli.command {
        Command::Run(args) => {
            init_logging(&args.log_level, args.log_format);
            run::run(args)
        }
        Command::Check(args) => {
            init_logging(&args.run.log_level, args.run.log_format);
            check::check(args)
        }
        Command::Gen(args) => {
            init_logging(&args.log_level, LogFormat::Text);
            gen::run(args)
        }
    };
    if let Err(exit) = result {
        eprintln!("spate: error: {}", exit.message.replace('\n', " "));
        std::process::exit(exit.code);
    }
}
