//! The `spate` binary: CLI, logging, and process assembly (see `run`).
//!
//! Exit codes: 0 completed, 1 the pipeline failed, 2 usage or
//! configuration error. Every failure ends with one line
//! `spate: error: <what failed and why>` on stderr.

mod check;
mod cli;
mod config;
mod events;
mod gen;
mod run;
mod stats;
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

    /// The same exit, its message naming pipeline `name` when the process
    /// runs `several`.
    #[must_use]
    pub fn in_pipeline(self, name: &str, several: bool) -> Self {
        if !several {
            return self;
        }
        Self {
            code: self.code,
            message: format!("pipeline {name}: {}", self.message),
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
    let argv: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if let Err(exit) = dispatch(argv) {
        eprintln!("spate: error: {}", exit.message.replace('\n', " "));
        std::process::exit(exit.code);
    }
}

/// Parse one argument vector; clap's own errors (and --help) exit here.
fn parse(argv: &[String]) -> Cli {
    match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            let _ = e.print();
            let what = e.to_string();
            let first = what.lines().next().unwrap_or("invalid arguments");
            eprintln!("spate: error: {}", first.trim_start_matches("error: "));
            std::process::exit(2);
        }
    }
}

fn dispatch(argv: Vec<String>) -> Result<(), Exit> {
    let expanded = config::expand(argv)?;
    let mut runs = Vec::new();
    let mut checks = Vec::new();
    for e in expanded {
        match parse(&e.argv).command {
            Command::Run(args) => runs.push((e.name, args)),
            Command::Check(args) => checks.push((e.name, args)),
            Command::Gen(args) => {
                init_logging(&args.log_level, LogFormat::Text);
                return gen::run(args);
            }
        }
    }
    if let Some((_, first)) = runs.first() {
        init_logging(&first.log_level, first.log_format);
        return run::run(runs);
    }
    if let Some((_, first)) = checks.first() {
        init_logging(&first.run.log_level, first.run.log_format);
    }
    // Check every pipeline; the worst outcome decides the exit.
    let several = checks.len() > 1;
    let mut worst: Option<Exit> = None;
    for (name, args) in checks {
        if several {
            println!("== pipeline {name} ==");
        }
        if let Err(e) = check::check(args) {
            let e = e.in_pipeline(&name, several);
            if worst.as_ref().is_none_or(|w| e.code > w.code) {
                worst = Some(e);
            }
        }
    }
    worst.map_or(Ok(()), Err)
}
