//! The `spate` binary's entry point: the allocator setting, logging, and
//! the dispatch of the (`--config`-expanded) command line to `run`,
//! `check` or `gen`. Process assembly lives in `run`, the validation that
//! `run` and `check` share in `settings`.
//!
//! Exit codes ([`exit::Exit`]): 0 completed, 1 the pipeline failed, 2
//! usage or configuration error. Every failure ends with one line
//! `spate: error: <what failed and why>` on stderr. Runs on the main
//! thread.

mod check;
mod cli;
mod config;
mod events;
mod exit;
#[cfg(test)]
mod flag_reference;
mod gen;
mod kafka_help;
mod print_config;
mod probe;
mod rotate;
mod routing;
mod run;
mod secret;
mod settings;
mod stats;
mod tls_files;
mod units;

use clap::Parser;
use cli::{Cli, Command, LogFormat};
use exit::Exit;
use tracing_subscriber::EnvFilter;

fn init_logging(level: &str, format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only for a person at a terminal: a log file, journald or a
    // container's log collector would keep the escape codes in every
    // line. NO_COLOR (no-color.org) turns them off there too.
    let colour = stats::stderr_is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(secret::RedactingStderr)
        .with_ansi(colour)
        .with_thread_names(true);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() {
    bound_allocator_retention();
    secret::install_panic_hook();
    let argv: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if let Err(exit) = dispatch(argv) {
        let line = exit.message().replace('\n', " ");
        eprintln!("spate: error: {}", secret::redact(&line));
        std::process::exit(exit.code());
    }
}

/// Keep glibc's malloc from holding freed batch buffers.
///
/// Batches are buffers of megabytes, filled on a driver thread and freed on
/// an insert thread. glibc raises its mmap threshold (up to 32 MiB) each
/// time such a buffer is freed, after which buffers of that size come from
/// the threads' heaps and their memory stays with the process. A fixed
/// threshold of 128 KiB (which also turns off the adjustment) puts every
/// large buffer in its own mapping, given back to the system when freed.
/// Measured on `make bench`'s 5M-event backlog, default budget (256 MiB):
/// peak RSS 392 -> 245-272 MiB, at the cost of page faults on new batch
/// buffers (system CPU +0.2 s per million rows), which spate now avoids by
/// reusing them (the shard queues' spares, the insert workers' Native
/// buffers). Limiting glibc to one arena instead gave 286 MiB. A 4 MiB
/// threshold with that reuse (2M events, 3 alternated rounds, 2026-12-02)
/// halved the remaining faults (librdkafka's fetch buffers) for 0.98 of
/// the CPU per row, within the noise, and 1.06x the peak RSS: not taken.
/// glibc's own `MALLOC_MMAP_THRESHOLD_` environment variable wins.
fn bound_allocator_retention() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; it is called
        // before any other thread exists.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        }
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
            Command::Probe(args) => return probe::run(args),
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
            if worst.as_ref().is_none_or(|w| e.code() > w.code()) {
                worst = Some(e);
            }
        }
    }
    worst.map_or(Ok(()), Err)
}
