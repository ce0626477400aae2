//! Running the `spate` binary with a deadline, stderr captured to a file.

use super::env::{log_dir, unique, wait_for, Services, SESSION_TIMEOUT_MS};
use std::cell::Cell;
use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

thread_local! {
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// While the guard lives, this thread's spawns and exits print no
/// `[support]` line: for a test running many members, whose own summary
/// must stay near the top of its output (a CI record keeps about the first
/// 30 lines of a failing test's output).
pub struct QuietSpawns(bool);

pub fn quiet_spawns() -> QuietSpawns {
    QuietSpawns(QUIET.with(|q| q.replace(true)))
}

impl Drop for QuietSpawns {
    fn drop(&mut self) {
        QUIET.with(|q| q.set(self.0));
    }
}

fn quiet() -> bool {
    QUIET.with(Cell::get)
}

/// Arguments every `spate run` of a test passes.
pub fn run_args(svc: &Services, topic: &str, group: &str, table: &str) -> Vec<String> {
    [
        "run",
        "--brokers",
        &svc.brokers,
        "--topic",
        topic,
        "--group",
        group,
        "--clickhouse-url",
        &svc.clickhouse_url,
        "--table",
        table,
        "-X",
        &format!("session.timeout.ms={SESSION_TIMEOUT_MS}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A running spate process; killed on drop if still running.
pub struct Running {
    child: Option<Child>,
    pub stderr_path: PathBuf,
    pub started: Instant,
    pub label: String,
}

/// A finished spate process.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stderr: String,
    pub stderr_path: PathBuf,
    pub elapsed: Duration,
    pub label: String,
}

impl Finished {
    /// Exit code (`None` if killed by a signal).
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Messages the run reported the consumer delivered again (the Kafka
    /// lane's `redelivered` warnings; `--log-format json`).
    pub fn redelivered(&self) -> u64 {
        (self.stderr.lines())
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v["fields"]["redelivered"].as_u64())
            .sum()
    }

    /// The last `n` lines of stderr, for assertion messages.
    pub fn tail(&self, n: usize) -> String {
        tail_lines(&self.stderr, n)
    }

    /// The last non-empty stderr line.
    pub fn last_line(&self) -> &str {
        self.stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
    }

    /// Panic with the stderr tail unless the exit code is `code`.
    pub fn assert_code(&self, code: i32) {
        assert_eq!(
            self.code(),
            Some(code),
            "{}: expected exit code {code}, got {:?} after {:.1?}; stderr ({}) tail:\n{}",
            self.label,
            self.status,
            self.elapsed,
            self.stderr_path.display(),
            self.tail(40)
        );
    }
}

fn tail_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Spawn the spate binary with `args`; stderr goes to a file under
/// `target/tmp/e2e-logs/`. Inherited `SPATE_*` variables are removed so the
/// binary's env-var fallbacks never pick up the test environment.
pub fn spawn(label: &str, args: &[String]) -> Running {
    spawn_with_env(label, args, &[])
}

/// Like [`spawn`] with extra environment variables.
pub fn spawn_with_env(label: &str, args: &[String], env: &[(&str, &str)]) -> Running {
    let stderr_path = log_dir().join(format!("{}.stderr", unique(label)));
    let stdout_path = stderr_path.with_extension("stdout");
    // SPATE_TEST_SPATE_BIN runs another build (e.g. main's, to measure a
    // before/after figure); the suite never sets it.
    let bin = std::env::var_os("SPATE_TEST_SPATE_BIN")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_spate").into());
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(File::create(&stdout_path).expect("stdout file"))
        .stderr(File::create(&stderr_path).expect("stderr file"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("SPATE_") {
            cmd.env_remove(&k);
        }
    }
    cmd.env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    if !quiet() {
        eprintln!(
            "[support] {label}: spate {} (stderr: {})",
            args.join(" "),
            stderr_path.display()
        );
    }
    let child = cmd.spawn().expect("spawn spate");
    Running {
        child: Some(child),
        stderr_path,
        started: Instant::now(),
        label: label.to_owned(),
    }
}

/// Spawn and wait (see [`Running::wait`]).
pub fn run(label: &str, args: &[String], timeout: Duration) -> Finished {
    spawn(label, args).wait(timeout)
}

impl Running {
    /// PID of the process.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).expect("child")
    }

    /// `true` once the process has exited (does not reap the status).
    pub fn has_exited(&mut self) -> bool {
        let child = self.child.as_mut().expect("child");
        matches!(child.try_wait(), Ok(Some(_)))
    }

    /// Send SIGTERM.
    pub fn sigterm(&self) {
        let pid = self.pid() as libc::pid_t;
        // SAFETY: plain kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(
            rc,
            0,
            "kill -TERM {pid}: {}",
            std::io::Error::last_os_error()
        );
    }

    /// Send SIGKILL (`kill -9`: no drain, no final commit, no LeaveGroup)
    /// and reap the process; panics unless it died of that signal.
    pub fn kill9(self) -> Finished {
        use std::os::unix::process::ExitStatusExt as _;
        let pid = self.pid() as libc::pid_t;
        // SAFETY: plain kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(pid, libc::SIGKILL) };
        assert_eq!(
            rc,
            0,
            "kill -KILL {pid}: {}",
            std::io::Error::last_os_error()
        );
        let fin = self.wait(Duration::from_secs(10));
        assert_eq!(
            fin.status.signal(),
            Some(libc::SIGKILL),
            "{}: expected death by SIGKILL, got {:?}",
            fin.label,
            fin.status
        );
        fin
    }

    /// Call `sample` every `every` until the process exits; panics with the
    /// stderr if it is still running after `within`.
    pub fn sample_until_exit(
        &mut self,
        within: Duration,
        every: Duration,
        mut sample: impl FnMut(),
    ) {
        let deadline = Instant::now() + within;
        while !self.has_exited() {
            sample();
            assert!(
                Instant::now() < deadline,
                "{}: no exit within {within:?}:\n{}",
                self.label,
                self.stderr_so_far()
            );
            std::thread::sleep(every);
        }
    }

    /// Freeze ClickHouse (`scripts/services.sh ch-pause`, SIGSTOP) for
    /// `stall` while this process keeps running, calling `sample` every
    /// `every`; resumes it afterwards, and also when the test panics
    /// midway. Panics if the process exits during the stall.
    pub fn through_frozen_clickhouse(
        &mut self,
        script: &str,
        stall: Duration,
        every: Duration,
        mut sample: impl FnMut(),
    ) {
        super::env::services_sh(script, "ch-pause");
        let mut resume = super::env::Undo::new(|| {
            let _ = Command::new(script).arg("ch-resume").status();
        });
        let stall_end = Instant::now() + stall;
        while Instant::now() < stall_end {
            sample();
            assert!(
                !self.has_exited(),
                "{} exited during the stall:\n{}",
                self.label,
                self.stderr_so_far()
            );
            std::thread::sleep(every);
        }
        super::env::services_sh(script, "ch-resume");
        resume.disarm();
    }

    /// The stderr written so far.
    pub fn stderr_so_far(&self) -> String {
        read_lossy(&self.stderr_path)
    }

    /// Wait for exit within `timeout` (from now); on timeout kill the
    /// process and panic with the stderr tail.
    pub fn wait(mut self, timeout: Duration) -> Finished {
        let deadline = Instant::now() + timeout;
        let mut child = self.child.take().expect("child");
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    let stderr = read_lossy(&self.stderr_path);
                    let fin = Finished {
                        status,
                        stderr,
                        stderr_path: self.stderr_path.clone(),
                        elapsed: self.started.elapsed(),
                        label: self.label.clone(),
                    };
                    if !quiet() {
                        eprintln!(
                            "[support] {}: exited {:?} after {:.1?}; last line: {}",
                            fin.label,
                            fin.status,
                            fin.elapsed,
                            fin.last_line()
                        );
                    }
                    return fin;
                }
                Ok(None) => {}
                Err(e) => panic!("{}: wait: {e}", self.label),
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{}: spate did not exit within {timeout:?} (killed); stderr ({}) tail:\n{}",
                    self.label,
                    self.stderr_path.display(),
                    tail_lines(&read_lossy(&self.stderr_path), 40)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
                eprintln!(
                    "[support] {}: killed on drop; stderr tail:\n{}",
                    self.label,
                    tail_lines(&read_lossy(&self.stderr_path), 20)
                );
            }
        }
    }
}

fn read_lossy(path: &Path) -> String {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) => return format!("<cannot open {}: {e}>", path.display()),
    };
    // Cap at the last 4 MiB: enough for any assertion, bounded for a noisy run.
    const CAP: u64 = 4 << 20;
    if let Ok(len) = f.metadata().map(|m| m.len()) {
        if len > CAP {
            let _ = f.seek(SeekFrom::Start(len - CAP));
        }
    }
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// `spate` run with a hold fault point armed (`hold-before-intent` or
/// `hold-before-send`, at the `at`-th chunk; see `sink::fault`), once the
/// worker is held: the test changes the world, then [`Held::release`]s it.
pub struct Held {
    pub proc: Running,
    release: PathBuf,
}

impl Held {
    /// Spawn `args` with `point` armed at chunk `at` and wait (60 s) until
    /// the worker holds; panics if spate exits first.
    pub fn spawn(label: &str, args: &[String], point: &str, at: u32) -> Held {
        let release = log_dir().join(unique(&format!("{label}-release")));
        let release_env = release.to_string_lossy().into_owned();
        let at = at.to_string();
        let mut proc = spawn_with_env(
            label,
            args,
            &[
                ("SPATE_FAULT", point),
                ("SPATE_FAULT_AT", &at),
                ("SPATE_FAULT_RELEASE", &release_env),
            ],
        );
        wait_for(
            &format!("{label}: the worker held at {point} (chunk {at})"),
            Duration::from_secs(60),
            Duration::from_millis(20),
            || {
                let so_far = proc.stderr_so_far();
                if so_far.contains(&format!("at chunk {at}: holding until")) {
                    Ok(())
                } else if proc.has_exited() {
                    panic!("spate exited before the hold: {so_far}");
                } else {
                    Err(so_far.lines().last().unwrap_or_default().to_owned())
                }
            },
        );
        Held { proc, release }
    }

    /// Let the held worker go on.
    pub fn release(&self) {
        std::fs::write(&self.release, b"go").expect("release file");
    }
}

/// Send `sig` to `pid` (a child of the test, or a service's pid); panics
/// if kill(2) fails.
pub fn kill_pid(pid: u32, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).expect("a pid");
    // SAFETY: plain kill(2) on a pid the test spawned or a services script
    // recorded.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(
        rc,
        0,
        "kill -{sig} {pid}: {}",
        std::io::Error::last_os_error()
    );
}

/// Send `sig` to the pid `pid_file` holds (a service started by
/// `scripts/services.sh`).
pub fn kill_pid_file(pid_file: &str, sig: libc::c_int) {
    let text = std::fs::read_to_string(pid_file).unwrap_or_else(|e| panic!("{pid_file}: {e}"));
    let pid: u32 = text
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{pid_file}: {e}"));
    kill_pid(pid, sig);
}
