//! Secrets that rotate while spate runs under a load, without a restart
//! and without leaving the group (issue 32):
//!
//! - ClickHouse (`clickhouse_secrets_rotate_under_load`): through a stunnel
//!   of the test's own, which asks for a client certificate and logs whose
//!   it got, in front of the 18.16 HTTPS server's HTTP port, as a user the
//!   test adds to the server's `users.d`:
//!   1. the user's password changes on the server (spate's inserts are
//!      refused, and retried), then in `--password-file`: inserts resume;
//!   2. a renewed client certificate and key are written over
//!      `--clickhouse-cert`/`--clickhouse-key`; stunnel restarts (every
//!      connection is made again) and sees only the renewed certificate;
//!   3. the server's certificate is re-issued by another CA, written over
//!      `--clickhouse-ca` first: after stunnel restarts with it, inserts
//!      go on (without the reload, spate could not verify the server).
//!
//!   Each change logged and counted (`spate_secret_reloads_total`); every
//!   message inserted, committed = ends, exit 0 at SIGTERM.
//! - Kafka (`kafka_scram_password_rotates_under_load`): a SCRAM broker of
//!   the test's own (nisshi, sqlite storage); its user's password changes
//!   (the broker restarts, so every connection authenticates again), then
//!   `--kafka-password-file`: the consumer logs in again and the load
//!   completes.
//! - Kafka TLS (`kafka_tls_files_rotate_under_load`): librdkafka reads its
//!   TLS files only when its client is made, so a change stops the
//!   pipelines and starts them again in the process. A SASL_SSL broker of
//!   the test's own: first the password rotates (applied live; the starts
//!   again below must log in with it, not the one read at start); then its
//!   certificate is re-issued by another CA: spate's CA file becomes both
//!   CAs (a start again), the broker switches, then the file holds the new
//!   CA alone (another); a static member, so the group never rebalances;
//!   every message inserted, committed = ends, one process.

use crate::support::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 2;

/// `openssl ARGS` in `dir`; panics with its output on failure.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two CAs; a server certificate for 127.0.0.1 from each; two client
/// certificates (`spate-first`, then `spate-renewed`) from the first.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn make(dir: &Path) -> Pki {
        std::fs::create_dir_all(dir).unwrap();
        for ca in ["ca1", "ca2"] {
            openssl(
                dir,
                &[
                    "req",
                    "-x509",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-days",
                    "2",
                    "-subj",
                    &format!("/CN=spate rotation {ca}"),
                    "-keyout",
                    &format!("{ca}.key"),
                    "-out",
                    &format!("{ca}.crt"),
                ],
            );
        }
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
        let issue = |name: &str, cn: &str, ca: &str, ext: &str| {
            openssl(
                dir,
                &[
                    "req",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-subj",
                    &format!("/CN={cn}"),
                    "-keyout",
                    &format!("{name}.key"),
                    "-out",
                    &format!("{name}.csr"),
                ],
            );
            openssl(
                dir,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &format!("{name}.csr"),
                    "-CA",
                    &format!("{ca}.crt"),
                    "-CAkey",
                    &format!("{ca}.key"),
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-extfile",
                    ext,
                    "-out",
                    &format!("{name}.crt"),
                ],
            );
        };
        issue("s1", "127.0.0.1", "ca1", "server.ext");
        issue("s2", "127.0.0.1", "ca2", "server.ext");
        issue("c1", "spate-first", "ca1", "client.ext");
        issue("c2", "spate-renewed", "ca1", "client.ext");
        Pki {
            dir: dir.to_owned(),
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Replace `to`'s contents with `from`'s the way Kubernetes updates a
/// mounted Secret: a new file renamed over the old one.
fn rewrite(to: &Path, contents: &[u8]) {
    let tmp = to.with_extension("new");
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, to).unwrap();
}

/// A server process of the test's own on a loopback port: started, waited
/// for until it listens, stopped (SIGTERM) when restarted or dropped.
struct Daemon {
    port: u16,
    child: Option<Child>,
}

impl Daemon {
    fn new() -> Daemon {
        Daemon {
            port: free_port(),
            child: None,
        }
    }

    /// Stop the running one (if any), spawn `cmd`, wait until it listens.
    fn start(&mut self, what: &str, cmd: &mut Command, within: Duration) {
        self.stop();
        self.child = Some(
            cmd.stdin(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("{what}: {e}")),
        );
        wait_for(
            &format!("{what} to listen"),
            within,
            Duration::from_millis(50),
            || {
                std::net::TcpStream::connect(("127.0.0.1", self.port))
                    .map(drop)
                    .map_err(|e| e.to_string())
            },
        );
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_pid(c.id(), libc::SIGTERM);
            let _ = c.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A stunnel of the test's own: TLS with `cert` (verifying client
/// certificates against `client_ca`) in front of `backend`; each start
/// logs to a file of its own.
struct Stunnel {
    dir: PathBuf,
    daemon: Daemon,
    backend: String,
    starts: usize,
}

impl Stunnel {
    fn new(dir: &Path, backend: &str) -> Stunnel {
        Stunnel {
            dir: dir.to_owned(),
            daemon: Daemon::new(),
            backend: backend.to_owned(),
            starts: 0,
        }
    }

    fn log(&self, start: usize) -> PathBuf {
        self.dir.join(format!("stunnel-{start}.log"))
    }

    /// (Re)start it serving `cert`/`key`; waits until it accepts.
    fn start(&mut self, cert: &Path, key: &Path, client_ca: &Path) {
        self.starts += 1;
        let conf = self.dir.join("stunnel.conf");
        std::fs::write(
            &conf,
            format!(
                "foreground = yes\npid =\ndebug = 5\noutput = {}\n[ch]\naccept = 127.0.0.1:{}\n\
                 connect = {}\ncert = {}\nkey = {}\nCAfile = {}\nverify = 2\n",
                self.log(self.starts).display(),
                self.port(),
                self.backend,
                cert.display(),
                key.display(),
                client_ca.display()
            ),
        )
        .unwrap();
        let mut cmd = Command::new("stunnel");
        cmd.arg(&conf).stdout(Stdio::null()).stderr(Stdio::null());
        self.daemon.start(
            "the test's stunnel (apt-get install stunnel4)",
            &mut cmd,
            Duration::from_secs(10),
        );
    }

    fn port(&self) -> u16 {
        self.daemon.port
    }

    /// The client certificates stunnel accepted in start `start`.
    fn accepted(&self, start: usize) -> Vec<String> {
        let log = std::fs::read_to_string(self.log(start)).unwrap_or_default();
        log.lines()
            .filter_map(|l| l.split("Certificate accepted at depth=0: ").nth(1))
            .map(str::to_owned)
            .collect()
    }
}

/// A user of the HTTPS server, defined in a `users.d` file of its own.
struct ChUser {
    file: PathBuf,
    name: String,
}

impl ChUser {
    fn set_password(&self, password: &str) {
        rewrite(
            &self.file,
            format!(
                "<?xml version=\"1.0\"?>\n<yandex><users><{n}><password>{password}</password>\
                 <networks><ip>::/0</ip></networks><profile>default</profile>\
                 <quota>default</quota></{n}></users></yandex>\n",
                n = self.name
            )
            .as_bytes(),
        );
    }

    /// Wait until the server (`plain_url`) takes `password` for the user.
    fn wait_accepted(&self, plain_url: &str, password: &str) {
        wait_for(
            "the server to read the user's new password",
            Duration::from_secs(30),
            Duration::from_millis(250),
            || {
                block_on(spate_clickhouse::ChClient::connect(
                    plain_url,
                    Some(&self.name),
                    Some(password),
                ))
                .map(drop)
                .map_err(|e| e.to_string())
            },
        );
    }
}

impl Drop for ChUser {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

/// Wait (20 s at most) until spate's log satisfies `done`.
fn wait_logged(spate: &Running, what: &str, done: impl Fn(&str) -> bool) {
    wait_for(
        what,
        Duration::from_secs(20),
        Duration::from_millis(200),
        || {
            done(&spate.stderr_so_far())
                .then_some(())
                .ok_or_else(|| "not logged yet".to_owned())
        },
    );
}

/// Wait for `producer` to finish, every one of its messages delivered,
/// then for all `messages` distinct `n` in `table`, spate running.
fn every_message(ch: &Ch, table: &str, producer: Paced, spate: &mut Running, messages: usize) {
    let deadline = Instant::now() + Duration::from_secs(150);
    while !producer.is_done() {
        assert!(Instant::now() < deadline, "the producer did not finish");
        std::thread::sleep(Duration::from_millis(500));
    }
    let delivered = producer.join();
    assert!(
        delivered.errors.is_empty(),
        "{:?}",
        &delivered.errors[..delivered.errors.len().min(3)]
    );
    wait_running(
        spate,
        "every message",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || {
            let n = ch.u64(&format!("SELECT uniqExact(n) FROM {table}"));
            (n == messages as u64)
                .then_some(())
                .ok_or_else(|| format!("{n} distinct of {messages}"))
        },
    );
}

/// [`wait_for`] `cond`, failing at once (with its log) if spate exits.
fn wait_running<T>(
    spate: &mut Running,
    what: &str,
    within: Duration,
    every: Duration,
    mut cond: impl FnMut() -> Result<T, String>,
) -> T {
    wait_for(what, within, every, || {
        assert!(
            !spate.has_exited(),
            "spate exited:\n{}",
            spate.stderr_so_far()
        );
        cond()
    })
}

/// The group's committed offsets are the partitions' end offsets.
fn assert_committed_ends(endpoint: &KafkaEndpoint, group: &str, topic: &str) {
    let ends = end_offsets_at(endpoint, topic, PARTITIONS);
    let committed = committed_at(endpoint, group, topic, PARTITIONS);
    let ends: Vec<Option<i64>> = ends.into_iter().map(Some).collect();
    assert_eq!(committed, ends, "committed = ends");
}

/// A fresh database with the suite's numbered-messages table; `db.t`.
fn numbered_table(ch: &Ch, prefix: &str) -> (String, String) {
    let db = ch.fresh_db(prefix);
    let table = format!("{db}.t");
    ch.exec(&format!(
        "CREATE TABLE {table} (n UInt64, s String, _partition UInt32, _offset UInt64) \
         ENGINE = MergeTree() ORDER BY (_partition, _offset)"
    ));
    (db, table)
}

/// `spate_secret_reloads_total{file, outcome}` on the admin port `port`.
fn reloads_counted(port: u16, file: &str, outcome: &str) -> f64 {
    let metrics = http_get(port, "/metrics").expect("/metrics");
    metric_sum(
        &metrics,
        "spate_secret_reloads_total",
        &[
            &format!("file=\"{file}\""),
            &format!("outcome=\"{outcome}\""),
        ],
    )
}

/// How many times the log says a secret file named by `flag` reloaded.
fn reloads_logged(stderr: &str, flag: &str) -> usize {
    let flags_of = |line: &str| -> Option<String> {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
            let fields = &v["fields"];
            let reloaded = fields["message"].as_str()?.contains("reloaded");
            return reloaded.then(|| fields["flags"].as_str().map(str::to_owned))?;
        }
        line.contains("reloaded")
            .then(|| Some(line.split(" flags=").nth(1)?.split(' ').next()?.to_owned()))?
    };
    stderr
        .lines()
        .filter_map(flags_of)
        .filter(|flags| flags.split(',').any(|f| f == flag))
        .count()
}

/// Wait until `table` holds every message the broker `endpoint` holds now
/// (and more than `above` rows): messages produced after a change reached
/// it, so spate fetched them over connections made after it.
fn wait_caught_up(
    ch: &Ch,
    table: &str,
    endpoint: &KafkaEndpoint,
    topic: &str,
    spate: &mut Running,
    what: &str,
) {
    // Let the producer put some messages on the broker after the change.
    std::thread::sleep(Duration::from_secs(2));
    let ends: i64 = end_offsets_at(endpoint, topic, PARTITIONS).iter().sum();
    wait_running(
        spate,
        what,
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            let n = ch.u64(&format!("SELECT uniqExact(n) FROM {table}"));
            (n >= ends as u64)
                .then_some(())
                .ok_or_else(|| format!("{n} of the {ends} messages"))
        },
    );
}

/// Wait until `table` holds more than `above` rows; returns the count.
fn wait_growing(ch: &Ch, table: &str, above: u64, spate: &mut Running, what: &str) -> u64 {
    wait_running(
        spate,
        what,
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            let n = ch.u64(&format!("SELECT count() FROM {table}"));
            if n > above {
                Ok(n)
            } else {
                Err(format!("{n} rows"))
            }
        },
    )
}

/// After stunnel's latest restart: wait for spate to connect through it,
/// then for rows inserted over that connection; returns the count.
fn through_restarted(ch: &Ch, table: &str, stunnel: &Stunnel, spate: &mut Running) -> u64 {
    wait_running(
        spate,
        "spate to connect through the restarted stunnel",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            (!stunnel.accepted(stunnel.starts).is_empty())
                .then_some(())
                .ok_or_else(|| "no connection yet".to_owned())
        },
    );
    let now = ch.u64(&format!("SELECT count() FROM {table}"));
    wait_growing(ch, table, now, spate, "rows through the restarted stunnel")
}

#[test]
fn clickhouse_secrets_rotate_under_load() {
    let Some(svc) = services() else { return };
    let Some(tls) = https_clickhouse() else {
        return;
    };
    let users_d = std::env::var("SPATE_TEST_CLICKHOUSE_HTTPS_USERS_D")
        .expect("SPATE_TEST_CLICKHOUSE_HTTPS_USERS_D: run `scripts/services.sh up` again");
    let _lock = ch_shared_lock();
    let _t = Timer::start("clickhouse_secrets_rotate_under_load");
    let dir = log_dir().join(unique("rotation_ch"));
    let pki = Pki::make(&dir.join("pki"));

    // The user, with its first password.
    let user = ChUser {
        name: unique("spate_rot"),
        file: PathBuf::from(&users_d).join(format!("{}.xml", unique("rot"))),
    };
    let (pw1, pw2) = (unique("pw-first-"), unique("pw-second-"));
    user.set_password(&pw1);
    user.wait_accepted(&tls.plain_url, &pw1);

    // The secret files spate is given (as mounted from a Secret).
    let secrets = dir.join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    let (pw_file, ca, cert, key) = (
        secrets.join("password"),
        secrets.join("ca.crt"),
        secrets.join("tls.crt"),
        secrets.join("tls.key"),
    );
    let copy = |from: &str, to: &Path| rewrite(to, &std::fs::read(pki.file(from)).unwrap());
    rewrite(&pw_file, format!("{pw1}\n").as_bytes());
    copy("ca1.crt", &ca);
    copy("c1.crt", &cert);
    copy("c1.key", &key);

    let backend = tls.plain_url.trim_start_matches("http://").to_owned();
    let mut stunnel = Stunnel::new(&dir, &backend);
    stunnel.start(
        &pki.file("s1.crt"),
        &pki.file("s1.key"),
        &pki.file("ca1.crt"),
    );

    let ch = Ch::connect(&tls.plain_url);
    let (db, table) = numbered_table(&ch, "e2e_rotation");
    let topic = unique("t_rotation");
    create_topic(&svc.brokers, &topic, PARTITIONS);
    const MESSAGES: usize = 20_000;
    let producer = produce_paced(
        &svc.brokers,
        &topic,
        MESSAGES,
        Duration::from_secs(45),
        numbered(PARTITIONS),
    );

    let group = unique("g_rotation");
    let port = free_port();
    let mut args = run_args(&svc, &topic, &group, &table);
    let at = args.iter().position(|a| a == "--clickhouse-url").unwrap() + 1;
    args[at] = format!("https://127.0.0.1:{}", stunnel.port());
    for (flag, value) in [
        ("--user", user.name.clone()),
        ("--password-file", pw_file.display().to_string()),
        ("--clickhouse-ca", ca.display().to_string()),
        ("--clickhouse-cert", cert.display().to_string()),
        ("--clickhouse-key", key.display().to_string()),
        ("--admin-addr", format!("127.0.0.1:{port}")),
        ("--flush-interval", "200ms".into()),
    ] {
        args.extend([flag.to_owned(), value]);
    }
    let mut spate = spawn("rotation_ch", &args);
    wait_growing(&ch, &table, 0, &mut spate, "the first rows");
    assert!(
        stunnel.accepted(1).iter().all(|c| c == "CN=spate-first")
            && !stunnel.accepted(1).is_empty(),
        "spate presented its first certificate: {:?}",
        stunnel.accepted(1)
    );

    // 1. The password: the server first, so spate's inserts are refused
    // (and retried), then the file.
    user.set_password(&pw2);
    user.wait_accepted(&tls.plain_url, &pw2);
    wait_for(
        "an insert refused for the old password",
        Duration::from_secs(30),
        Duration::from_millis(250),
        || {
            let err = spate.stderr_so_far();
            (err.contains("Code: 193") || err.contains("Code: 516"))
                .then_some(())
                .ok_or_else(|| "no refusal logged yet".to_owned())
        },
    );
    assert!(
        !spate.has_exited(),
        "a refused login while running is retried:\n{}",
        spate.stderr_so_far()
    );
    rewrite(&pw_file, format!("{pw2}\n").as_bytes());
    wait_logged(&spate, "the password reload", |log| {
        reloads_logged(log, "--password-file") == 1
    });
    wait_growing(
        &ch,
        &table,
        ch.u64(&format!("SELECT count() FROM {table}")),
        &mut spate,
        "rows after the new password",
    );

    // 2. A renewed client certificate: every connection made after the
    // reload presents it.
    copy("c2.key", &key);
    copy("c2.crt", &cert);
    wait_logged(&spate, "the certificate reload", |log| {
        reloads_logged(log, "--clickhouse-cert") >= 1
    });
    stunnel.start(
        &pki.file("s1.crt"),
        &pki.file("s1.key"),
        &pki.file("ca1.crt"),
    );
    let rows = through_restarted(&ch, &table, &stunnel, &mut spate);
    let accepted = stunnel.accepted(2);
    assert!(
        !accepted.is_empty() && accepted.iter().all(|c| c == "CN=spate-renewed"),
        "new connections present the renewed certificate only: {accepted:?}"
    );

    // 3. The server's certificate re-issued by another CA: spate trusts
    // the new CA (and no longer the old) before the server switches.
    copy("ca2.crt", &ca);
    wait_logged(&spate, "the CA reload", |log| {
        reloads_logged(log, "--clickhouse-ca") == 1
    });
    stunnel.start(
        &pki.file("s2.crt"),
        &pki.file("s2.key"),
        &pki.file("ca1.crt"),
    );
    let after = through_restarted(&ch, &table, &stunnel, &mut spate);
    assert!(after > rows);

    // The whole load, exactly.
    every_message(&ch, &table, producer, &mut spate, MESSAGES);
    let counted = |file: &str| reloads_counted(port, file, "reloaded");
    assert_eq!(
        counted("--password-file"),
        1.0,
        "the password reload is counted"
    );
    assert!(
        counted("--clickhouse-cert") >= 1.0,
        "the certificate reload is counted"
    );
    assert_eq!(counted("--clickhouse-ca"), 1.0, "the CA reload is counted");
    spate.sigterm();
    let fin = spate.wait(Duration::from_secs(60));
    fin.assert_code(0);
    for secret in [&pw1, &pw2] {
        assert!(
            !fin.stderr.contains(secret.as_str()),
            "a password in the log"
        );
    }
    assert_committed_ends(&KafkaEndpoint::plain(&svc.brokers), &group, &topic);
    ch.exec(&format!("DROP DATABASE IF EXISTS {db}"));
}

/// A broker of the test's own (nisshi, sqlite storage, so users, topics
/// and the group survive a restart), with SASL (SCRAM) or TLS. Users are
/// created with the broker started without `--authentication` (nisshi's
/// user CLI speaks plaintext), then it restarts with it.
struct TestBroker {
    bin: String,
    dir: PathBuf,
    daemon: Daemon,
}

impl TestBroker {
    fn new(dir: &Path) -> TestBroker {
        std::fs::create_dir_all(dir).unwrap();
        TestBroker {
            bin: std::env::var("SPATE_TEST_KAFKA_BIN")
                .expect("SPATE_TEST_KAFKA_BIN: source build/services.env"),
            dir: dir.to_owned(),
            daemon: Daemon::new(),
        }
    }

    fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.daemon.port)
    }

    /// (Re)start it, requiring SASL or not; waits until it answers.
    fn start(&mut self, authentication: bool) {
        self.start_with(authentication, None);
    }

    /// (Re)start it, requiring SASL or not, serving TLS with `tls`
    /// (certificate, key) if given; waits until it listens.
    fn start_with(&mut self, authentication: bool, tls: Option<(&Path, &Path)>) {
        let url = format!("tcp://127.0.0.1:{}", self.daemon.port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("nisshi.log"))
            .unwrap();
        let mut cmd = Command::new(&self.bin);
        cmd.args([
            "broker",
            "--cluster-id",
            "spate-rotation",
            "--listener-url",
            &url,
        ])
        .args([
            "--advertised-listener-url",
            &url,
            "--storage-engine",
            "sqlite://rotation.db",
        ])
        .args(["--group-initial-rebalance-delay", "0s"])
        .current_dir(&self.dir)
        .stdout(log.try_clone().unwrap())
        .stderr(log);
        if authentication {
            cmd.arg("--authentication");
        }
        if let Some((cert, key)) = tls {
            cmd.arg("--cert").arg(cert).arg("--key").arg(key);
        }
        self.daemon
            .start("the test's broker", &mut cmd, Duration::from_secs(30));
    }

    /// From a fresh storage: `users` with their passwords, `topic`, then
    /// the broker with authentication (over TLS with `tls` if given).
    fn set_up(&mut self, users: &[(&str, &str)], topic: &str, tls: Option<(&Path, &Path)>) {
        self.start(false);
        for (user, password) in users {
            self.set_user(user, password);
        }
        create_topic(&self.brokers(), topic, PARTITIONS);
        self.start_with(true, tls);
    }

    /// Change `user`'s password: the broker restarts without
    /// authentication to take it, then with (every client logs in again).
    fn change_password(&mut self, user: &str, password: &str, tls: Option<(&Path, &Path)>) {
        self.start(false);
        self.set_user(user, password);
        self.start_with(true, tls);
    }

    /// Create (or change) `user`'s password, both SCRAM mechanisms; the
    /// broker must be running without authentication.
    fn set_user(&self, user: &str, password: &str) {
        for m in ["scram256", "scram512"] {
            let out = Command::new(&self.bin)
                .args([
                    "user",
                    "create",
                    "--broker",
                    &format!("tcp://127.0.0.1:{}", self.daemon.port),
                ])
                .args(["--mechanism", m, user, password])
                .output()
                .expect("nisshi user create");
            assert!(
                out.status.success(),
                "nisshi user create: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// A client's view of it: SCRAM-SHA-512 as `user`, over TLS
    /// verified with `ca` if given.
    fn endpoint(&self, user: &str, password: &str, ca: Option<&Path>) -> KafkaEndpoint {
        let mut properties: Vec<(String, String)> = [
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", user),
            ("sasl.password", password),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        let protocol = match ca {
            Some(ca) => {
                properties.push(("ssl.ca.location".into(), ca.display().to_string()));
                "SASL_SSL"
            }
            None => "SASL_PLAINTEXT",
        };
        properties.push(("security.protocol".into(), protocol.into()));
        KafkaEndpoint {
            brokers: self.brokers(),
            properties,
        }
    }

    /// `spate run` from `topic` into `table` on this broker as `spate`,
    /// the password from `pw_file` (over TLS with `ca` if given), the admin
    /// server on `admin_port`, with a session timeout long enough to ride
    /// out the broker's restarts.
    fn spate_args(
        &self,
        svc: &Services,
        run: [&str; 3],
        ca: Option<&Path>,
        pw_file: &Path,
        admin_port: u16,
    ) -> Vec<String> {
        let [topic, group, table] = run;
        let mut args = run_args(svc, topic, group, table);
        let at = args.iter().position(|a| a == "--brokers").unwrap() + 1;
        args[at] = self.brokers();
        let client = self.endpoint("spate", "", ca);
        let x = (client.properties.iter())
            .filter(|(k, _)| k != "sasl.password")
            .map(|(k, v)| format!("{k}={v}"))
            .chain(["session.timeout.ms=45000".to_owned()]);
        for x in x {
            args.extend(["-X".to_owned(), x]);
        }
        args.extend([
            "--kafka-password-file".into(),
            pw_file.display().to_string(),
            "--admin-addr".into(),
            format!("127.0.0.1:{admin_port}"),
        ]);
        args
    }
}

#[test]
fn kafka_scram_password_rotates_under_load() {
    let Some(svc) = services() else { return };
    let _lock = ch_shared_lock();
    let _t = Timer::start("kafka_scram_password_rotates_under_load");
    let dir = log_dir().join(unique("rotation_kafka"));
    let mut broker = TestBroker::new(&dir.join("broker"));
    let (pw1, pw2, loader_pw) = (
        unique("kpw-first-"),
        unique("kpw-second-"),
        unique("kpw-loader-"),
    );
    let topic = unique("t_krot");
    // The load's producer logs in as a user whose password stays.
    broker.set_up(&[("spate", &pw1), ("loader", &loader_pw)], &topic, None);

    let ch = Ch::connect(&svc.clickhouse_url);
    let (db, table) = numbered_table(&ch, "e2e_krot");
    const MESSAGES: usize = 12_000;
    let producer = produce_paced_at(
        &broker.endpoint("loader", &loader_pw, None),
        &topic,
        MESSAGES,
        Duration::from_secs(40),
        numbered(PARTITIONS),
    );

    let pw_file = dir.join("kafka-password");
    rewrite(&pw_file, format!("{pw1}\n").as_bytes());
    let group = unique("g_krot");
    let port = free_port();
    let args = broker.spate_args(&svc, [&topic, &group, &table], None, &pw_file, port);
    let mut spate = spawn("rotation_kafka", &args);
    wait_growing(&ch, &table, 0, &mut spate, "the first rows");

    // The password changes on the broker, which restarts: every client
    // must log in again, and spate's old password is refused.
    broker.change_password("spate", &pw2, None);
    wait_for(
        "spate's old password to be refused",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            let err = spate.stderr_so_far();
            (err.contains("SASL") && err.to_ascii_lowercase().contains("authentication"))
                .then_some(())
                .ok_or_else(|| "no refusal logged yet".to_owned())
        },
    );
    rewrite(&pw_file, format!("{pw2}\n").as_bytes());
    wait_logged(&spate, "the password reload", |log| {
        reloads_logged(log, "--kafka-password-file") == 1
    });
    wait_caught_up(
        &ch,
        &table,
        &broker.endpoint("loader", &loader_pw, None),
        &topic,
        &mut spate,
        "the messages produced after the change",
    );

    every_message(&ch, &table, producer, &mut spate, MESSAGES);
    assert_eq!(
        reloads_counted(port, "--kafka-password-file", "reloaded"),
        1.0,
        "the reload is counted"
    );
    // Never left the group: each partition assigned once, none revoked or
    // lost, up to the shutdown.
    let log = spate.stderr_so_far();
    assert_eq!(
        log.matches("partition assigned").count(),
        PARTITIONS as usize,
        "{log}"
    );
    assert!(
        !log.contains("partitions revoked") && !log.contains("assignment lost"),
        "{log}"
    );
    spate.sigterm();
    let fin = spate.wait(Duration::from_secs(60));
    fin.assert_code(0);
    for secret in [&pw1, &pw2] {
        assert!(
            !fin.stderr.contains(secret.as_str()),
            "a password in the log"
        );
    }
    // The ends, not MESSAGES / PARTITIONS: the producer's retries across
    // the broker's restart may have written a message twice.
    let loader = broker.endpoint("loader", &loader_pw, None);
    assert_committed_ends(&loader, &group, &topic);
    ch.exec(&format!("DROP DATABASE IF EXISTS {db}"));
}

#[test]
fn kafka_tls_files_rotate_under_load() {
    let Some(svc) = services() else { return };
    let _lock = ch_shared_lock();
    let _t = Timer::start("kafka_tls_files_rotate_under_load");
    let dir = log_dir().join(unique("rotation_ktls"));
    let pki = Pki::make(&dir.join("pki"));
    let both = dir.join("both-cas.crt");
    let mut bundle = std::fs::read(pki.file("ca1.crt")).unwrap();
    bundle.extend(std::fs::read(pki.file("ca2.crt")).unwrap());
    std::fs::write(&both, &bundle).unwrap();
    let (s1, s2) = (
        (pki.file("s1.crt"), pki.file("s1.key")),
        (pki.file("s2.crt"), pki.file("s2.key")),
    );
    let mut broker = TestBroker::new(&dir.join("broker"));
    let (pw1, pw2, loader_pw) = (unique("kpw-a-"), unique("kpw-b-"), unique("kpw-l-"));
    let topic = unique("t_ktls");
    broker.set_up(
        &[("spate", &pw1), ("loader", &loader_pw)],
        &topic,
        Some((&s1.0, &s1.1)),
    );
    // The test's own clients trust both CAs throughout.
    let endpoint = broker.endpoint("loader", &loader_pw, Some(&both));

    let ch = Ch::connect(&svc.clickhouse_url);
    let (db, table) = numbered_table(&ch, "e2e_ktls");
    const MESSAGES: usize = 15_000;
    let producer = produce_paced_at(
        &endpoint,
        &topic,
        MESSAGES,
        Duration::from_secs(50),
        numbered(PARTITIONS),
    );

    let ca = dir.join("kafka-ca.crt");
    rewrite(&ca, &std::fs::read(pki.file("ca1.crt")).unwrap());
    let pw_file = dir.join("kafka-password");
    rewrite(&pw_file, format!("{pw1}\n").as_bytes());
    let group = unique("g_ktls");
    let port = free_port();
    let mut args = broker.spate_args(&svc, [&topic, &group, &table], Some(&ca), &pw_file, port);
    args.extend([
        "-X".into(),
        // A static member that rides out the stop and start.
        format!("group.instance.id={}", unique("member")),
        "--log-format".into(),
        "json".into(),
    ]);
    let mut spate = spawn("rotation_ktls", &args);
    wait_growing(&ch, &table, 0, &mut spate, "the first rows");

    // 0. The password, applied to the running consumer: the starts again
    // below must log in with it too (not the one read at start).
    broker.change_password("spate", &pw2, Some((&s1.0, &s1.1)));
    rewrite(&pw_file, format!("{pw2}\n").as_bytes());
    wait_logged(&spate, "the password reload", |log| {
        reloads_logged(log, "--kafka-password-file") == 1
    });
    wait_caught_up(
        &ch,
        &table,
        &endpoint,
        &topic,
        &mut spate,
        "the messages after the new password",
    );

    // 1. Both CAs: a start again with a consumer that trusts both.
    rewrite(&ca, &bundle);
    wait_logged(&spate, "a start again", |log| {
        log.matches("starting them again").count() == 1
    });
    wait_caught_up(
        &ch,
        &table,
        &endpoint,
        &topic,
        &mut spate,
        "the messages after the first start again",
    );

    // 2. The broker's certificate re-issued by the second CA.
    broker.start_with(true, Some((&s2.0, &s2.1)));
    wait_caught_up(
        &ch,
        &table,
        &endpoint,
        &topic,
        &mut spate,
        "the messages from the broker with its new certificate",
    );

    // 3. The first CA retired: only the second is trusted.
    rewrite(&ca, &std::fs::read(pki.file("ca2.crt")).unwrap());
    wait_logged(&spate, "a second start again", |log| {
        log.matches("starting them again").count() == 2
    });
    wait_caught_up(
        &ch,
        &table,
        &endpoint,
        &topic,
        &mut spate,
        "the messages after the second start again",
    );

    every_message(&ch, &table, producer, &mut spate, MESSAGES);
    assert_eq!(
        reloads_counted(port, "-X ssl.ca.location", "restarted"),
        2.0,
        "both starts again are counted, across them"
    );
    assert_eq!(
        reloads_counted(port, "--kafka-password-file", "reloaded"),
        1.0,
        "the password reload is still counted after the starts again"
    );
    // The group never rebalanced: every assignment (three starts) in one
    // generation, nothing lost.
    let events = group_events(&spate.stderr_so_far());
    let generations: std::collections::BTreeSet<Option<u64>> = events
        .iter()
        .filter_map(|e| match e {
            GroupEvent::Assigned { generation, .. } => Some(*generation),
            _ => None,
        })
        .collect();
    assert_eq!(generations.len(), 1, "one generation: {events:?}");
    assert!(
        !events.iter().any(|e| matches!(e, GroupEvent::Lost(_))),
        "{events:?}"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, GroupEvent::Assigned { .. }))
            .count(),
        3 * PARTITIONS as usize,
        "each start got the member's partitions back: {events:?}"
    );
    spate.sigterm();
    spate.wait(Duration::from_secs(60)).assert_code(0);
    assert_committed_ends(&endpoint, &group, &topic);
    ch.exec(&format!("DROP DATABASE IF EXISTS {db}"));
}
