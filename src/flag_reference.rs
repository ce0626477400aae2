//! `docs/flags.md`, the reference of every flag of `spate run`, `check`,
//! `gen` and `probe`, rendered from the clap definitions in `crate::cli` (and
//! `crate::tls_files`): each flag's long (and short) name, value,
//! environment variable, `--config` key, default, possible values and help
//! text, and `run`'s notes on Kafka properties.
//!
//! Test-only: the test `docs_flags_md_is_generated_from_the_flags` fails
//! when the file differs from what the definitions render, and
//! `SPATE_BLESS=1` makes it write the file instead
//! (`SPATE_BLESS=1 cargo test -p spate flag_reference`).

use clap::{Arg, ArgAction, Command, CommandFactory};
use std::fmt::Write as _;

/// Where the reference lives, from the crate's root.
pub(crate) const PATH: &str = "docs/flags.md";

/// The reference, as `docs/flags.md` holds it.
pub(crate) fn render() -> String {
    let cli = crate::cli::Cli::command();
    let mut out = String::from(
        "# Flag reference\n\n\
         <!-- Generated from the flag definitions (src/cli.rs, src/tls_files.rs);\n     \
         do not edit. Regenerate with\n     \
         SPATE_BLESS=1 cargo test -p spate flag_reference -->\n\n\
         Every flag of `spate run`, `spate check`, `spate gen` and `spate probe`, as `spate <command> --help`\n\
         describes it. A flag wins over its environment variable, which wins over\n\
         the `--config` file; a file key of a pipeline setting may also be set per\n\
         `[[pipeline]]`, a process-wide one only at the top level. The other pages\n\
         here explain the settings by topic ([index](README.md)); exit codes are in\n\
         [Operations](operations.md#exit-codes).\n",
    );
    let run = subcommand(&cli, "run");
    let run_ids: Vec<&str> = run.get_arguments().map(|a| a.get_id().as_str()).collect();
    section(&mut out, "run", run, |_| true);
    section(&mut out, "check", subcommand(&cli, "check"), |a| {
        !run_ids.contains(&a.get_id().as_str())
    });
    section(&mut out, "gen", subcommand(&cli, "gen"), |_| true);
    section(&mut out, "probe", subcommand(&cli, "probe"), |_| true);
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

fn subcommand<'c>(cli: &'c Command, name: &str) -> &'c Command {
    cli.find_subcommand(name)
        .unwrap_or_else(|| panic!("no subcommand {name}"))
}

/// One subcommand's flags, in the order of its `--help`.
fn section(out: &mut String, name: &str, cmd: &Command, keep: impl Fn(&Arg) -> bool) {
    if !out.ends_with("\n\n") {
        out.push('\n');
    }
    let _ = write!(out, "## `spate {name}`\n\n");
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(out, "{}\n", about.to_string().trim());
    }
    if name == "check" {
        out.push_str("Every flag of `spate run`, and:\n\n");
    }
    let args = cmd.get_arguments().filter(|a| {
        !a.is_hide_set() && !matches!(a.get_long(), Some("help" | "version")) && keep(a)
    });
    for a in args {
        flag(out, name, a);
    }
    // `check`'s notes are `run`'s.
    if let Some(after) = cmd.get_after_long_help().filter(|_| name == "run") {
        let _ = write!(
            out,
            "### Kafka properties\n\n```text\n{}\n```\n",
            after.to_string().trim_end()
        );
    }
}

/// `--long <VALUE>` (and `-s`), as the help names the flag.
fn title(a: &Arg) -> String {
    let mut names: Vec<String> = Vec::new();
    if let Some(s) = a.get_short() {
        names.push(format!("-{s}"));
    }
    if let Some(l) = a.get_long() {
        names.push(format!("--{l}"));
    }
    let takes_value = !matches!(
        a.get_action(),
        ArgAction::SetTrue | ArgAction::SetFalse | ArgAction::Help | ArgAction::Version
    );
    let mut t = names.join(", ");
    if takes_value {
        let value = a
            .get_value_names()
            .and_then(|v| v.first())
            .map_or_else(|| a.get_id().as_str().to_uppercase(), |v| v.to_string());
        let _ = write!(t, " <{value}>");
    }
    t
}

/// The `--config` key of a `spate run` flag, and where it goes.
fn config_key(a: &Arg) -> String {
    let id = a.get_id().as_str();
    match id {
        "config" | "print_config" => "none (command line only)".into(),
        "properties" => "the `[kafka]` table, `\"KEY\" = \"VALUE\"`".into(),
        _ if crate::config::PIPELINE_KEYS.contains(&id) => {
            format!("`{id}` (top level or per `[[pipeline]]`)")
        }
        _ => format!("`{id}` (top level)"),
    }
}

fn flag(out: &mut String, command: &str, a: &Arg) {
    let _ = write!(out, "### `{}`\n\n", title(a));
    // only `run` and `check` read --config
    let reads_config = matches!(command, "run" | "check");
    if a.is_required_set() {
        out.push_str(if !reads_config {
            "- required: on the command line or in the environment\n"
        } else {
            "- required: on the command line, in the environment or in the config file\n"
        });
    }
    if let Some(env) = a.get_env() {
        let _ = writeln!(out, "- environment: `{}`", env.to_string_lossy());
    }
    if reads_config {
        let _ = writeln!(out, "- config file: {}", config_key(a));
    }
    let defaults: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|d| d.to_string_lossy().into_owned())
        .collect();
    if !defaults.is_empty() && !matches!(a.get_action(), ArgAction::SetTrue) {
        let _ = writeln!(out, "- default: `{}`", defaults.join(","));
    }
    let values: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| match v.get_help() {
            Some(h) => format!("  - `{}`: {}", v.get_name(), h.to_string().trim()),
            None => format!("  - `{}`", v.get_name()),
        })
        .collect();
    if !values.is_empty() && !matches!(a.get_action(), ArgAction::SetTrue) {
        let _ = writeln!(out, "- values:\n{}", values.join("\n"));
    }
    if let Some(help) = a.get_long_help().or(a.get_help()) {
        let _ = write!(out, "\n{}\n", help.to_string().trim());
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn docs_flags_md_is_generated_from_the_flags() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(PATH);
        let want = render();
        if std::env::var_os("SPATE_BLESS").is_some_and(|v| v == "1") {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &want).unwrap();
            return;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if have != want {
            let line = have
                .lines()
                .zip(want.lines())
                .position(|(h, w)| h != w)
                .unwrap_or_else(|| have.lines().count().min(want.lines().count()))
                + 1;
            panic!(
                "{PATH} is not what the flag definitions (src/cli.rs, src/tls_files.rs) render (first difference at line {line}); \
                 regenerate it with `SPATE_BLESS=1 cargo test -p spate flag_reference` and commit it"
            );
        }
    }

    /// Every flag of `spate run` has its section, with its variable.
    #[test]
    fn every_run_flag_is_in_the_reference() {
        let text = render();
        let cli = crate::cli::Cli::command();
        for a in subcommand(&cli, "run").get_arguments() {
            let Some(long) = a.get_long().filter(|l| *l != "help") else {
                continue;
            };
            let heading = format!("### `{}", title(a));
            let at = text
                .find(&heading)
                .unwrap_or_else(|| panic!("--{long} has no section {heading:?}"));
            if let Some(env) = a.get_env() {
                let env = format!("- environment: `{}`", env.to_string_lossy());
                let next = text[at + 1..]
                    .find("\n### ")
                    .map_or(text.len(), |n| at + 1 + n);
                assert!(text[at..next].contains(&env), "--{long}: {env} missing");
            }
        }
    }
}
