//! Service addresses from the environment, unique names, the ClickHouse
//! lock, the shared tokio runtime and `wait_for`.

use std::fs::File;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The librdkafka session timeout every spate run and every test consumer
/// uses: short (librdkafka's default is 45 s), so that the broker expires a
/// member killed with `kill -9` within seconds and the tests that kill one
/// (the rebalance storm) stay short.
pub const SESSION_TIMEOUT_MS: &str = "6000";

/// Which of the two ClickHouse servers under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    /// Debian's clickhouse-server 18.16 (`SPATE_TEST_CLICKHOUSE_URL`): the
    /// oldest release spate supports, with replicas, a cluster and the
    /// server the outage tests stop.
    V18,
    /// ClickHouse 26.9 from the chdb-core wheel
    /// (`SPATE_TEST_CLICKHOUSE_MODERN_URL`): current defaults
    /// (`async_insert=1`) and types (JSON, Variant, Dynamic, Int256, ...).
    V26,
}

impl Server {
    /// Both, oldest first.
    pub const ALL: [Server; 2] = [Server::V18, Server::V26];

    /// `(major, minor)` the server must report (`SELECT version()`).
    pub fn version(self) -> (u32, u32) {
        match self {
            Server::V18 => (18, 16),
            Server::V26 => (26, 9),
        }
    }

    /// "18.16" / "26.9", for names and messages.
    pub fn label(self) -> &'static str {
        match self {
            Server::V18 => "18.16",
            Server::V26 => "26.9",
        }
    }
}

/// [`SESSION_TIMEOUT_MS`] as a duration.
pub fn session_timeout() -> Duration {
    Duration::from_millis(
        SESSION_TIMEOUT_MS
            .parse()
            .expect("SESSION_TIMEOUT_MS is a number"),
    )
}

/// Addresses of the services under test.
#[derive(Clone, Debug)]
pub struct Services {
    /// `host:port` of the Kafka-protocol broker.
    pub brokers: String,
    /// `http://host:port` of the HTTP interface of the ClickHouse server
    /// this test runs against ([`Services::server`]).
    pub clickhouse_url: String,
    /// Which server `clickhouse_url` is ([`Services::on`] picks it).
    pub server: Server,
    /// `http://host:port` of ClickHouse 18.16.
    pub clickhouse_v18_url: String,
    /// `http://host:port` of ClickHouse 26.9.
    pub clickhouse_modern_url: String,
    /// `scripts/services.sh`, for tests that stop/start ClickHouse 18.16.
    pub services_sh: Option<String>,
    /// PID file of the server `clickhouse_url` names (absent with
    /// docker-compose).
    pub clickhouse_pid_file: Option<String>,
    /// PID files of 18.16 and 26.9, for [`Services::on`].
    pid_files: [Option<String>; 2],
}

impl Services {
    /// The same services, with `clickhouse_url` (and the PID file) of
    /// `server`.
    pub fn on(&self, server: Server) -> Services {
        let i = usize::from(server == Server::V26);
        Services {
            clickhouse_url: [&self.clickhouse_v18_url, &self.clickhouse_modern_url][i].clone(),
            clickhouse_pid_file: self.pid_files[i].clone(),
            server,
            ..self.clone()
        }
    }

    /// Whether the server under test is the current one (26.9).
    pub fn is_modern(&self) -> bool {
        self.server == Server::V26
    }
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// True if the user explicitly asked to skip the integration tests.
pub fn skip_requested() -> bool {
    if var("SPATE_SKIP_INTEGRATION").as_deref() == Some("1") {
        eprintln!("!!! SPATE_SKIP_INTEGRATION=1: SKIPPING this integration test !!!");
        true
    } else {
        false
    }
}

/// The services under test; `None` only when `SPATE_SKIP_INTEGRATION=1`.
/// Panics with instructions when the environment is missing.
pub fn services() -> Option<Services> {
    if skip_requested() {
        return None;
    }
    const HOW: &str = "run `make services` and `source build/services.env` \
                       (or export SPATE_SKIP_INTEGRATION=1 to skip the integration tests explicitly)";
    let brokers =
        var("SPATE_TEST_BROKERS").unwrap_or_else(|| panic!("SPATE_TEST_BROKERS is not set: {HOW}"));
    let clickhouse_url = var("SPATE_TEST_CLICKHOUSE_URL")
        .unwrap_or_else(|| panic!("SPATE_TEST_CLICKHOUSE_URL is not set: {HOW}"));
    // Never a silent skip: every e2e test also runs on the current server.
    let clickhouse_modern_url = var("SPATE_TEST_CLICKHOUSE_MODERN_URL").unwrap_or_else(|| {
        panic!(
            "SPATE_TEST_CLICKHOUSE_MODERN_URL is not set (the ClickHouse 26.9 server of \
             scripts/clickhouse-modern.sh, or with docker compose the `clickhouse-modern` service): {HOW}"
        )
    });
    let v18_pid = var("SPATE_TEST_CLICKHOUSE_PID_FILE");
    Some(Services {
        brokers,
        clickhouse_v18_url: clickhouse_url.clone(),
        clickhouse_url,
        server: Server::V18,
        clickhouse_modern_url,
        services_sh: var("SPATE_SERVICES_SH"),
        clickhouse_pid_file: v18_pid.clone(),
        pid_files: [v18_pid, var("SPATE_TEST_CLICKHOUSE_MODERN_PID_FILE")],
    })
}

/// The services with `clickhouse_url` on `server`, after checking that the
/// server there is that version (a swapped URL would test one version
/// twice); `None` only when `SPATE_SKIP_INTEGRATION=1`.
pub fn services_on(server: Server) -> Option<Services> {
    let svc = services()?.on(server);
    let version = wait_for(
        "ClickHouse to answer SELECT version()",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let c = block_on(spate_clickhouse::ChClient::connect(
                &svc.clickhouse_url,
                None,
                None,
            ))
            .map_err(|e| e.to_string())?;
            Ok::<_, String>(c.features().version)
        },
    );
    assert_eq!(
        version,
        server.version(),
        "{} should be ClickHouse {}",
        svc.clickhouse_url,
        server.label()
    );
    Some(svc)
}

/// A name unique to this process and moment: `{prefix}_{pid}_{nanos}`.
/// Valid as a Kafka topic, a ClickHouse identifier and a group id.
pub fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}_{}_{nanos}", std::process::id())
}

/// Directory for logs of spawned spate processes (under `target/`).
pub fn log_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-logs");
    std::fs::create_dir_all(&dir).expect("create log dir");
    dir
}

/// A held `flock` on the ClickHouse lock file; released on drop.
pub struct ChLock {
    _file: File,
}

fn ch_lock(op: libc::c_int) -> ChLock {
    let deadline = Instant::now() + Duration::from_secs(600);
    // Writers first: a test that wants the server to itself takes the
    // `want` file exclusively before it waits for the lock, and every test
    // passes through `want` (shared) before it takes the lock shared. So
    // once a writer waits, no new reader gets in ahead of it, and the
    // readers running end. Without it, two test threads running readers
    // back to back (the gap between two tests is microseconds, the poll
    // 100 ms) starved a writer for the whole 600 s.
    let want = flock_by(&lock_file("ch-outage.want"), op, deadline);
    let held = flock_by(&lock_file("ch-outage.lock"), op, deadline);
    drop(want);
    ChLock { _file: held }
}

/// `build/<name>`, opened for `flock`.
fn lock_file(name: &str) -> (File, PathBuf) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("build");
    std::fs::create_dir_all(&dir).expect("create build dir");
    let path = dir.join(name);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    (file, path)
}

/// `flock(op)` on `file`, polled until `deadline`; the file, locked.
fn flock_by((file, path): &(File, PathBuf), op: libc::c_int, deadline: Instant) -> File {
    let file = file.try_clone().expect("dup the lock file");
    loop {
        // SAFETY: flock on a file descriptor we own.
        let rc = unsafe {
            use std::os::fd::AsRawFd;
            libc::flock(file.as_raw_fd(), op | libc::LOCK_NB)
        };
        if rc == 0 {
            return file;
        }
        let err = std::io::Error::last_os_error();
        assert!(
            err.raw_os_error() == Some(libc::EWOULDBLOCK),
            "flock {}: {err}",
            path.display()
        );
        assert!(
            Instant::now() < deadline,
            "timed out after 600 s waiting for the lock {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Held by every test that uses ClickHouse, so the outage test cannot stop
/// the server under it.
pub fn ch_shared_lock() -> ChLock {
    ch_lock(libc::LOCK_SH)
}

/// Held by the test that stops ClickHouse.
pub fn ch_exclusive_lock() -> ChLock {
    ch_lock(libc::LOCK_EX)
}

/// Run a future to completion on the shared test runtime.
pub fn block_on<F: Future>(f: F) -> F::Output {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime")
    })
    .block_on(f)
}

/// Poll `cond` every `every` until it returns `Some`, or panic after
/// `timeout` with `what` and the last observation.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut cond: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match cond() {
            Ok(v) => return v,
            Err(last) => {
                assert!(
                    Instant::now() < deadline,
                    "timed out after {timeout:?} waiting for {what}; last: {last}"
                );
            }
        }
        std::thread::sleep(every);
    }
}

/// Print how long a test took.
pub struct Timer {
    name: &'static str,
    started: Instant,
}

impl Timer {
    pub fn start(name: &'static str) -> Timer {
        Timer {
            name,
            started: Instant::now(),
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        eprintln!("[timing] {} took {:.1?}", self.name, self.started.elapsed());
    }
}

/// Run `scripts/services.sh CMD` (e.g. `ch-pause`, `ch-stop`); panics with
/// its output if it fails.
pub fn services_sh(script: &str, cmd: &str) {
    services_sh_args(script, &[cmd]);
}

/// The extra ClickHouse servers of the sharding/replica tests
/// (`scripts/services.sh` nodes `a` and `b`, which both know the clusters
/// `spate_two_shards`, `spate_weighted` and `spate_replicas`, then `c`, in
/// none of them, which the exactly-once storm needs for a fourth 18.16
/// server).
#[derive(Clone, Debug)]
pub struct Cluster {
    /// `http://host:port` of each node's HTTP interface, node `a` first
    /// (`SPATE_TEST_CLUSTER_URLS`, comma-separated).
    pub urls: Vec<String>,
    /// The names `services.sh node-<cmd>` takes, in the order of `urls`
    /// (`SPATE_TEST_CLUSTER_NODES`); empty if unset: then [`Cluster::node`]
    /// panics.
    pub nodes: Vec<String>,
    /// `scripts/services.sh` (`SPATE_SERVICES_SH`), for [`Cluster::node`].
    pub services_sh: Option<String>,
}

/// A comma-separated environment variable; empty items dropped.
fn var_list(name: &str) -> Vec<String> {
    var(name)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// Tests that use the cluster nodes (a, b, c) run one at a time, whichever
/// file they are in: some take a node away (stop, kill, freeze).
pub fn cluster_lock() -> std::sync::MutexGuard<'static, ()> {
    static NODES: std::sync::Mutex<()> = std::sync::Mutex::new(());
    NODES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The cluster nodes; `None` only when `SPATE_SKIP_INTEGRATION=1`.
/// Panics with instructions when `SPATE_TEST_CLUSTER_URLS` is missing.
pub fn cluster() -> Option<Cluster> {
    if skip_requested() {
        return None;
    }
    const HOW: &str = "run `make services` and `source build/services.env`; with docker compose, \
                       see the `cluster` profile in docker-compose.yml \
                       (or export SPATE_SKIP_INTEGRATION=1 to skip the integration tests explicitly)";
    let urls = var_list("SPATE_TEST_CLUSTER_URLS");
    assert!(
        !urls.is_empty(),
        "SPATE_TEST_CLUSTER_URLS is not set: {HOW}"
    );
    let nodes = var_list("SPATE_TEST_CLUSTER_NODES");
    assert!(
        nodes.is_empty() || nodes.len() == urls.len(),
        "SPATE_TEST_CLUSTER_NODES {nodes:?} must name one node per SPATE_TEST_CLUSTER_URLS entry {urls:?}"
    );
    Some(Cluster {
        urls,
        nodes,
        services_sh: var("SPATE_SERVICES_SH"),
    })
}

impl Cluster {
    /// Run `$SPATE_SERVICES_SH node-<cmd> <name of node i>`, `cmd` one of
    /// `stop`, `start`, `kill` (SIGKILL), `pause` (SIGSTOP), `resume`
    /// (SIGCONT); panics with its output if it fails.
    pub fn node(&self, i: usize, cmd: &str) {
        let script = self.services_sh.as_deref().unwrap_or_else(|| {
            panic!("SPATE_SERVICES_SH is not set: cannot run node-{cmd} on cluster node {i}")
        });
        let name = self.nodes.get(i).unwrap_or_else(|| {
            panic!(
                "no cluster node {i} in SPATE_TEST_CLUSTER_NODES {:?}",
                self.nodes
            )
        });
        services_sh_args(script, &[&format!("node-{cmd}"), name]);
    }
}

/// [`services_sh`] with several arguments (`node-stop a`).
pub fn services_sh_args(script: &str, args: &[&str]) {
    let what = format!("{script} {}", args.join(" "));
    let out = std::process::Command::new(script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    if !out.status.success() {
        panic!(
            "{what} failed ({:?}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Runs its closure when dropped, unless disarmed: puts a service back
/// (restart, resume) when a test that took it away fails midway.
pub struct Undo<F: FnMut()> {
    undo: Option<F>,
}

impl<F: FnMut()> Undo<F> {
    /// Arm `undo`.
    pub fn new(undo: F) -> Self {
        Self { undo: Some(undo) }
    }

    /// The service is back: nothing to undo.
    pub fn disarm(&mut self) {
        self.undo = None;
    }
}

impl<F: FnMut()> Drop for Undo<F> {
    fn drop(&mut self) {
        if let Some(mut undo) = self.undo.take() {
            undo();
        }
    }
}

impl Services {
    /// `scripts/services.sh`, for a test that takes ClickHouse away;
    /// panics with instructions when `SPATE_SERVICES_SH` is not set.
    pub fn script(&self) -> String {
        self.services_sh.clone().unwrap_or_else(|| {
            panic!(
                "SPATE_SERVICES_SH is not set: this test stops and starts ClickHouse with scripts/services.sh; \
                 run `make services` and `source build/services.env`"
            )
        })
    }
}
