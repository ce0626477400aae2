//! The deployment files, checked without a cluster or a Docker engine:
//!
//! - `deploy/kubernetes/test/check.py`: renders the kustomize base, the top
//!   level and the example overlay with `kubectl kustomize`, validates every
//!   object against the vendored Kubernetes 1.32 schemas and checks what spate
//!   needs of its pods (probes, non-root, grace period above the shutdown
//!   timeout, static membership, memory limit, secrets as files, alerts on
//!   real metrics, KEDA capped at the partition count and on spate's own
//!   group), has this build's spate read each pod's command line,
//!   variables and config file (`--print-config`), and promtool check and
//!   unit-test the alerts (`alerts.test.yaml`);
//! - the same script's `--self-test`: every deliberate break of the rendered
//!   objects must be caught;
//! - `deploy/systemd/spate.service`: `systemd-analyze verify` with no
//!   warning, a stop timeout above the shutdown timeout, readiness, restart
//!   policy and hardening;
//! - `deploy/compose_check.py` (and its `--self-test`): docker-compose.yml
//!   parses, every file it mounts exists (or make-certs.sh makes it), every
//!   spate command, flag, variable and config key exists (and this build's
//!   spate accepts each run command), and the Dockerfile is multi-stage,
//!   stripped, non-root, with `spate probe` as its HEALTHCHECK.
//!
//! They need `kubectl` (1.21 or later, for kustomize 4+), python3 with
//! PyYAML, promtool and systemd-analyze, and fail, naming what is missing,
//! without them: a check that skips itself where it cannot run proves
//! nothing.

use std::path::Path;
use std::process::Command;

/// Runs a python3 script of the repository and fails with its output.
fn python(script: &str, args: &[&str]) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(root.join(script))
        .args(args)
        .current_dir(root)
        .output()
        .unwrap_or_else(|e| panic!("python3 {script}: {e} (python3 is needed for this test)"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "python3 {script} {}: {}\n{text}",
        args.join(" "),
        out.status
    );
    text
}

/// This build's binary, for `check.py --spate`: it runs `spate ...
/// --print-config` on each StatefulSet's command line, environment and
/// config file.
const SPATE: &str = env!("CARGO_BIN_EXE_spate");

#[test]
fn kubernetes_manifests_render_and_pass_the_schema_and_spate_checks() {
    let out = python(
        "deploy/kubernetes/test/check.py",
        &["--spate", SPATE, "--promtool", "promtool"],
    );
    for target in ["deploy/kubernetes:", "base:", "examples/production:"] {
        assert!(out.contains(target), "{target} not checked:\n{out}");
    }
    for kind in [
        "StatefulSet",
        "PodDisruptionBudget",
        "Service",
        "ServiceMonitor",
        "PrometheusRule",
    ] {
        assert!(out.contains(kind), "{kind} not rendered:\n{out}");
    }
    assert!(
        out.contains("ScaledObject"),
        "the overlay's KEDA ScaledObject not rendered:\n{out}"
    );
}

#[test]
fn kubernetes_check_catches_every_deliberate_break() {
    let out = python(
        "deploy/kubernetes/test/check.py",
        &["--self-test", "--spate", SPATE, "--promtool", "promtool"],
    );
    assert!(out.contains("breaks caught"), "{out}");
    for only in [
        "a config value spate refuses",
        "a lag threshold no lag reaches",
    ] {
        assert!(
            out.contains(&format!("caught: {only}")),
            "{only}: not run\n{out}"
        );
    }
}

const UNIT: &str = "deploy/systemd/spate.service";

/// `systemd-analyze verify` on a copy of `unit` whose ExecStart lines run
/// this build's binary (verify insists that the executable exists): its
/// status and what it printed. It exits 0 on an unknown key or a bad value,
/// only warning, so the caller asserts an empty output too.
fn verify_unit(unit: &str) -> (bool, String) {
    let exe = SPATE;
    let dir = std::env::temp_dir().join(format!("spate-deploy-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("spate.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/spate", exe)).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap_or_else(|e| {
            panic!("systemd-analyze: {e} (Debian package systemd; scripts/prereqs.sh installs it)")
        });
    let _ = std::fs::remove_dir_all(&dir);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A `Key=value` of the unit (the first), continuation lines joined.
fn unit_value(unit: &str, key: &str) -> String {
    let joined = unit.replace("\\\n", " ");
    let line = joined
        .lines()
        .find(|l| l.starts_with(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{UNIT}: no {key}="));
    line[key.len() + 1..]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn seconds(value: &str) -> u64 {
    value
        .trim_end_matches('s')
        .parse()
        .unwrap_or_else(|_| panic!("{value}: not N or Ns"))
}

#[test]
fn systemd_unit_verifies_and_outlasts_the_shutdown_timeout() {
    let unit = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(UNIT)).unwrap();
    let (ok, out) = verify_unit(&unit);
    assert!(
        ok && out.trim().is_empty(),
        "systemd-analyze verify {UNIT}:\n{out}"
    );

    // the check can fail: an unknown key and a bad value are reported
    for (from, to) in [
        ("KillMode=mixed", "KillMod=mixed"),
        ("Restart=on-failure", "Restart=sometimes"),
    ] {
        let (ok, out) = verify_unit(&unit.replace(from, to));
        assert!(!ok || !out.trim().is_empty(), "{to} not reported");
    }

    let start = unit_value(&unit, "ExecStart");
    let shutdown = start
        .split_whitespace()
        .find_map(|a| a.strip_prefix("--shutdown-timeout="))
        .expect("ExecStart sets --shutdown-timeout");
    assert!(
        seconds(&unit_value(&unit, "TimeoutStopSec")) > seconds(shutdown),
        "TimeoutStopSec <= --shutdown-timeout"
    );
    assert!(
        start.contains("-X group.instance.id=%H"),
        "static membership: {start}"
    );
    let ready = unit_value(&unit, "ExecStartPost");
    assert!(
        ready.contains("probe --url=http://127.0.0.1:9187/readyz --wait="),
        "readiness wait: {ready}"
    );
    assert!(start.contains("--admin-addr=127.0.0.1:9187"), "{start}");
    assert_eq!(unit_value(&unit, "Restart"), "on-failure");
    spate_reads_the_units_command_line(&start);
    for hardening in [
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "DynamicUser=yes",
    ] {
        assert!(
            unit.lines().any(|l| l == hardening),
            "{UNIT}: no {hardening}"
        );
    }
}

#[test]
fn docker_compose_and_dockerfile_reference_what_exists() {
    let out = python("deploy/compose_check.py", &["--spate", SPATE]);
    assert!(out.contains("and Dockerfile: ok"), "{out}");
    let out = python(
        "deploy/compose_check.py",
        &["--self-test", "--spate", SPATE, "--promtool", "promtool"],
    );
    assert!(out.contains("breaks caught"), "{out}");
    assert!(
        out.contains("caught: a probe URL spate refuses"),
        "spate's own breaks not run:\n{out}"
    );
}

/// The unit's ExecStart, its specifiers filled in (%d the credentials
/// directory, %H the host name) and its config file the example beside it,
/// as this build's spate reads it (`--print-config`): flags and values it
/// accepts, static membership from the host name.
fn spate_reads_the_units_command_line(exec_start: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let creds = std::env::temp_dir().join(format!("spate-deploy-creds-{}", std::process::id()));
    std::fs::create_dir_all(&creds).unwrap();
    for name in ["clickhouse-password", "kafka-password"] {
        std::fs::write(creds.join(name), "placeholder\n").unwrap();
    }
    let config = root.join("deploy/systemd/spate.toml");
    let args: Vec<String> = exec_start
        .split_whitespace()
        .skip(1) // the binary
        .map(|a| {
            a.replace("%d", &creds.display().to_string())
                .replace("%H", "host-a")
                .replace("/etc/spate/spate.toml", &config.display().to_string())
        })
        .collect();
    let out = Command::new(SPATE)
        .args(&args)
        .arg("--print-config")
        .env_clear()
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&creds);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "spate {} --print-config: {}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("\"group.instance.id\" = \"host-a\""),
        "{text}"
    );
}
