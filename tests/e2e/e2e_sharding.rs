//! Sharded ClickHouse: two real servers (nodes `a` and `b` of
//! `scripts/services.sh`), which define three clusters in their configs:
//! `spate_two_shards` (a, b), `spate_weighted` (a weight 1, b weight 3) and
//! `spate_replicas` (one shard, replicas a and b).
//!
//! - Routing parity: rows spate routes with `--shard-key user_id` sit on the
//!   same shard as the same rows inserted through a Distributed table with
//!   `sharding_key = cityHash64(user_id)`.
//! - Weights: `--cluster spate_weighted` splits 100k keyed rows 25/75 ± 2%.
//! - Replica failover: node a is killed (SIGKILL) mid-run; the run
//!   completes on b and the union holds every offset.
//! - One slow shard: node b is frozen for 20 s; rows keep flowing to a
//!   until the budget is reached, RSS stays within it, and everything
//!   arrives after b is back.
//!
//! The tests in this file take nodes away, so they run one at a time
//! (`cluster_lock`, shared with every other file that uses nodes a and b).
//!
//! ClickHouse 18.16 only: nodes a and b are 18.16 servers (the 26.9 server
//! of `scripts/clickhouse-modern.sh` runs alone, no 26.9 cluster yet), and
//! the routing is spate's own `cityHash64`, which `shard_hash_server.rs`
//! checks against both versions.

use crate::support::*;
use std::time::{Duration, Instant};

fn nodes_lock() -> std::sync::MutexGuard<'static, ()> {
    cluster_lock()
}

const PARTITIONS: i32 = 4;

/// The columns every table here has; `user_id` is the shard key.
const COLUMNS: &str = "user_id UInt64, name String, _partition UInt32, _offset UInt64";

struct Setup {
    svc: Services,
    cluster: Cluster,
    nodes: Vec<Ch>,
    db: String,
}

impl Setup {
    fn new(prefix: &str) -> Option<Setup> {
        let svc = services()?;
        let mut cluster = cluster().expect(
            "SPATE_TEST_CLUSTER_URLS is not set: run `make services` and source build/services.env",
        );
        assert!(
            cluster.urls.len() >= 2,
            "two cluster nodes needed, got {:?}",
            cluster.urls
        );
        // Nodes a and b, the clusters' two servers; a third node (c, the
        // exactly-once storm's) is in none of the clusters.
        cluster.urls.truncate(2);
        cluster.nodes.truncate(2);
        let nodes: Vec<Ch> = cluster.urls.iter().map(|u| Ch::connect(u)).collect();
        let db = unique(prefix);
        for n in &nodes {
            n.exec(&format!("CREATE DATABASE {db}"));
        }
        Some(Setup {
            svc,
            cluster,
            nodes,
            db,
        })
    }

    /// `db.name` on every node, a MergeTree with [`COLUMNS`].
    fn table(&self, name: &str) -> String {
        let table = format!("{}.{name}", self.db);
        for n in &self.nodes {
            n.exec(&format!(
                "CREATE TABLE {table} ({COLUMNS}) ENGINE = MergeTree() ORDER BY (_partition, _offset)"
            ));
        }
        table
    }

    /// `spate run --until-end --drivers 2` arguments writing to `table`,
    /// with `sink` choosing the servers.
    fn args(&self, topic: &str, table: &str, sink: &[String]) -> Vec<String> {
        let mut args = self.sink_args(topic, &unique("g_shard"), table, sink);
        args.extend(["--until-end", "--drivers", "2"].map(String::from));
        args
    }

    /// `spate run` arguments for `group` writing to `table`, with `sink`
    /// choosing the servers (instead of the single `--clickhouse-url`).
    fn sink_args(&self, topic: &str, group: &str, table: &str, sink: &[String]) -> Vec<String> {
        let mut args = run_args(&self.svc, topic, group, table);
        let i = args
            .iter()
            .position(|a| a == "--clickhouse-url")
            .expect("run_args passes --clickhouse-url");
        args.drain(i..i + 2);
        args.extend(sink.iter().cloned());
        args
    }

    fn count(&self, node: usize, table: &str) -> u64 {
        self.nodes[node].u64(&format!("SELECT count() FROM {table}"))
    }

    /// Wait until node a holds rows of `table` while `running` still
    /// runs, so the test can take a node away mid-run (`what`).
    fn first_rows_on_a(&self, table: &str, running: &mut Running, what: &str) {
        wait_for(
            "the first rows on node a",
            Duration::from_secs(60),
            Duration::from_millis(10),
            || match self.nodes[0].try_u64(&format!("SELECT count() FROM {table}")) {
                Ok(n) if n > 0 => Ok(n),
                other => Err(format!("{other:?}")),
            },
        );
        assert!(
            !running.has_exited(),
            "the run ended before {what}: make N larger"
        );
    }

    /// Distinct (partition, offset) over both nodes, and all rows.
    fn union(&self, table: &str) -> (usize, u64) {
        let mut seen = std::collections::HashSet::new();
        let mut rows = 0;
        for n in &self.nodes {
            for r in n.u64_rows(&format!("SELECT _partition, _offset FROM {table}")) {
                seen.insert((r[0], r[1]));
                rows += 1;
            }
        }
        (seen.len(), rows)
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        for n in &self.nodes {
            let _ = n.try_text(
                &format!("DROP DATABASE IF EXISTS {}", self.db),
                "TabSeparated",
            );
        }
    }
}

/// Produce `n` messages with pseudo-random `user_id`s (spread over the
/// whole u64 range, including values above i64::MAX).
fn produce_users(brokers: &str, topic: &str, n: usize) -> Produced {
    create_topic(brokers, topic, PARTITIONS);
    produce(brokers, topic, PARTITIONS, n, |i| {
        let user_id = splitmix(i as u64);
        Msg {
            partition: (i % PARTITIONS as usize) as i32,
            key: None,
            payload: format!(r#"{{"user_id":{user_id},"name":"user-{i}"}}"#),
            timestamp_ms: None,
        }
    })
}

fn splitmix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn shard_flags(cluster: &Cluster) -> Vec<String> {
    vec![
        "--shard".into(),
        cluster.urls[0].clone(),
        "--shard".into(),
        cluster.urls[1].clone(),
    ]
}

#[test]
fn keyed_rows_land_where_a_distributed_table_puts_them() {
    const N: usize = 100_000;
    let _lock = nodes_lock();
    let Some(s) = Setup::new("shard_parity") else {
        return;
    };
    let _timer = Timer::start("e2e_sharding::parity");
    let spate_table = s.table("by_spate");
    let dist_local = s.table("by_dist_local");
    let dist = format!("{}.by_dist", s.db);
    let topic = unique("t_shard_parity");
    produce_users(&s.svc.brokers, &topic, N);

    let mut args = s.args(&topic, &spate_table, &shard_flags(&s.cluster));
    args.extend(["--shard-key", "user_id"].map(String::from));
    run("parity", &args, Duration::from_secs(120)).assert_code(0);

    // The same rows through the Distributed table: each node re-inserts
    // the rows spate gave it, synchronously, through its own Distributed
    // table (both route by cityHash64(user_id) over spate_two_shards).
    for n in &s.nodes {
        n.exec(&format!(
            "CREATE TABLE {dist} ({COLUMNS}) ENGINE = Distributed(spate_two_shards, {}, by_dist_local, cityHash64(user_id))",
            s.db
        ));
    }
    for n in &s.nodes {
        n.exec_with(
            &format!(
                "INSERT INTO {dist} SELECT user_id, name, _partition, _offset FROM {spate_table}"
            ),
            &[("insert_distributed_sync", "1")],
        );
    }

    let mut per_shard = Vec::new();
    for (i, node) in s.nodes.iter().enumerate().take(2) {
        let ours = s.count(i, &spate_table);
        let theirs = s.count(i, &dist_local);
        let only_ours = node.u64(&format!(
            "SELECT count() FROM {spate_table} WHERE (_partition, _offset) NOT IN (SELECT _partition, _offset FROM {dist_local})"
        ));
        let only_theirs = node.u64(&format!(
            "SELECT count() FROM {dist_local} WHERE (_partition, _offset) NOT IN (SELECT _partition, _offset FROM {spate_table})"
        ));
        eprintln!("[e2e_sharding::parity] shard {}: spate {ours} rows, Distributed {theirs} rows, {only_ours} only in spate's, {only_theirs} only in the Distributed table's", i + 1);
        assert_eq!(
            (only_ours, only_theirs),
            (0, 0),
            "shard {}: row sets differ",
            i + 1
        );
        assert_eq!(ours, theirs, "shard {}: row counts differ", i + 1);
        per_shard.push(ours);
    }
    assert_eq!(
        per_shard.iter().sum::<u64>(),
        N as u64,
        "every row on exactly one shard"
    );
    assert!(
        per_shard.iter().all(|&n| n > N as u64 / 3),
        "both shards hold a fair share: {per_shard:?}"
    );
}

#[test]
fn cluster_weights_split_keyed_rows() {
    const N: usize = 100_000;
    let _lock = nodes_lock();
    let Some(s) = Setup::new("shard_weights") else {
        return;
    };
    let _timer = Timer::start("e2e_sharding::weights");
    let table = s.table("t");
    let topic = unique("t_shard_weights");
    produce_users(&s.svc.brokers, &topic, N);

    let sink = [
        "--clickhouse-url",
        &s.cluster.urls[0],
        "--cluster",
        "spate_weighted",
        "--shard-key",
        "user_id",
    ]
    .map(String::from);
    let fin = run(
        "weights",
        &s.args(&topic, &table, &sink),
        Duration::from_secs(120),
    );
    fin.assert_code(0);
    let (a, b) = (s.count(0, &table), s.count(1, &table));
    let share_b = b as f64 / (a + b) as f64;
    eprintln!("[e2e_sharding::weights] weight 1: {a} rows, weight 3: {b} rows ({:.2}% on the weight-3 shard)", share_b * 100.0);
    assert_eq!(a + b, N as u64, "every row on exactly one shard");
    assert!(
        (share_b - 0.75).abs() <= 0.02,
        "split {a}/{b} is not within 2% of 25/75"
    );
}

#[test]
fn a_killed_replica_fails_over_to_the_next() {
    const N: usize = 400_000;
    let _lock = nodes_lock();
    let Some(s) = Setup::new("shard_failover") else {
        return;
    };
    let _timer = Timer::start("e2e_sharding::failover");
    let table = s.table("t");
    let topic = unique("t_shard_failover");
    produce_users(&s.svc.brokers, &topic, N);

    // One shard, replicas a then b: everything goes to a until it dies.
    let replicas = format!("{},{}", s.cluster.urls[0], s.cluster.urls[1]);
    let mut args = s.args(&topic, &table, &["--shard".into(), replicas]);
    args.extend(
        [
            "--batch-rows",
            "2000",
            "--insert-workers",
            "1",
            "--insert-timeout",
            "5s",
        ]
        .map(String::from),
    );
    let mut running = spawn("failover", &args);
    s.first_rows_on_a(&table, &mut running, "replica a could be killed");
    s.cluster.node(0, "kill");
    let mut revive = Undo::new(|| s.cluster.node(0, "start"));
    let fin = running.wait(Duration::from_secs(120));
    fin.assert_code(0);
    s.cluster.node(0, "start");
    revive.disarm();
    Ch::wait_up(&s.cluster.urls[0], Duration::from_secs(60));

    let on_a = s.count(0, &table);
    let on_b = s.count(1, &table);
    let (distinct, _) = s.union(&table);
    eprintln!("[e2e_sharding::failover] replica a {on_a} rows (killed), replica b {on_b} rows, {distinct} distinct offsets in the union");
    assert!(on_b > 0, "nothing failed over to replica b");
    assert!(
        fin.stderr.contains("next one"),
        "no failover was logged:\n{}",
        fin.tail(30)
    );
    assert_eq!(distinct, N, "every offset in the union of the replicas");
}

#[test]
fn a_frozen_shard_holds_back_only_within_the_budget() {
    const N: usize = 1_000_000;
    const BUDGET_MIB: u64 = 64;
    const STALL: Duration = Duration::from_secs(20);
    let _lock = nodes_lock();
    let Some(s) = Setup::new("shard_slow") else {
        return;
    };
    let _timer = Timer::start("e2e_sharding::slow_shard");
    let table = s.table("t");
    let topic = unique("t_shard_slow");
    let filler = "z".repeat(120);
    create_topic(&s.svc.brokers, &topic, PARTITIONS);
    produce(&s.svc.brokers, &topic, PARTITIONS, N, |i| Msg {
        partition: (i % PARTITIONS as usize) as i32,
        key: None,
        payload: format!(
            r#"{{"user_id":{},"name":"{filler}{i}"}}"#,
            splitmix(i as u64)
        ),
        timestamp_ms: None,
    });

    let port = free_port();
    let mut sink = shard_flags(&s.cluster);
    sink.extend(
        [
            "--shard-key",
            "user_id",
            "--batch-rows",
            "20000",
            "--flush-interval",
            "200ms",
            "--insert-timeout",
            "5s",
            "--max-buffered-bytes",
            &format!("{BUDGET_MIB}MiB"),
            "--admin-addr",
            &format!("127.0.0.1:{port}"),
        ]
        .map(String::from),
    );
    let mut running = spawn("slow-shard", &s.args(&topic, &table, &sink));
    s.first_rows_on_a(&table, &mut running, "shard b could be frozen");
    s.cluster.node(1, "pause");
    let mut resume = Undo::new(|| s.cluster.node(1, "resume"));
    let stall_end = Instant::now() + STALL;
    let pid = running.pid();
    let (mut peak_kib, mut max_paused, mut a_during) = (0, 0, Vec::new());
    // The last /metrics scrape, and a 503 /readyz, seen while b was frozen.
    let (mut metrics_during, mut ready_during) = (String::new(), String::new());
    while Instant::now() < stall_end {
        if let Some(m) = http_get(port, "/metrics") {
            max_paused = max_paused.max(gauge(&m, "spate_lanes_paused").unwrap_or(0));
            metrics_during = m;
        }
        if let Some(r) = http_get(port, "/readyz").filter(|r| r.starts_with("HTTP/1.1 503")) {
            ready_during = r;
        }
        peak_kib = peak_kib.max(peak_rss_kib(pid).unwrap_or(0));
        a_during.push(
            s.nodes[0]
                .try_u64(&format!("SELECT count() FROM {table}"))
                .unwrap_or(0),
        );
        assert!(
            !running.has_exited(),
            "spate exited while shard b was frozen:\n{}",
            running.stderr_so_far()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let up = |shard: &str| metric_sum(&metrics_during, "spate_replica_up", &[shard]);
    let queued_b = metric_sum(&metrics_during, "spate_queue_bytes", &[r#"shard="2""#]);
    s.cluster.node(1, "resume");
    resume.disarm();
    let deadline = Instant::now() + Duration::from_secs(180);
    while !running.has_exited() {
        peak_kib = peak_kib.max(peak_rss_kib(pid).unwrap_or(0));
        assert!(
            Instant::now() < deadline,
            "no exit 180 s after the stall:\n{}",
            running.stderr_so_far()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    running.wait(Duration::from_secs(5)).assert_code(0);

    let a_at_end_of_stall = *a_during.last().unwrap_or(&0);
    let half = a_during.len() / 2;
    let (first_half, second_half) = (a_during[half / 2], a_during[half + half / 2]);
    let (a, b) = (s.count(0, &table), s.count(1, &table));
    let peak_mib = peak_kib / 1024;
    eprintln!(
        "[e2e_sharding::slow_shard] while b was frozen: shard a got {a_at_end_of_stall} rows \
         ({first_half} a quarter in, {second_half} three quarters in), lanes paused (max) {max_paused}, \
         peak RSS {peak_mib} MiB (budget {BUDGET_MIB} MiB + 64); after: a {a}, b {b}"
    );
    assert!(
        a_at_end_of_stall > 0,
        "no rows reached the healthy shard while the other was frozen"
    );
    assert!(
        a_at_end_of_stall < a,
        "shard a was not held back at the budget: it got all its rows during the stall"
    );
    assert_eq!(
        second_half, a_at_end_of_stall,
        "shard a kept growing while lanes were paused"
    );
    assert!(
        max_paused > 0,
        "lanes were never paused while shard b was frozen"
    );
    assert!(
        ready_during.contains("503") && ready_during.contains("shard 2"),
        "/readyz did not name the frozen shard: {ready_during}"
    );
    assert_eq!(
        (up(r#"shard="1""#), up(r#"shard="2""#)),
        (1.0, 0.0),
        "spate_replica_up per shard while b was frozen"
    );
    assert!(queued_b > 0.0, "no bytes queued for the frozen shard");
    assert!(
        peak_kib <= (BUDGET_MIB + 64) * 1024,
        "peak RSS {peak_mib} MiB exceeds the {BUDGET_MIB} MiB budget plus 64 MiB"
    );
    let (distinct, rows) = s.union(&table);
    eprintln!(
        "[e2e_sharding::slow_shard] {rows} rows, {distinct} distinct offsets, {} duplicates",
        rows - distinct as u64
    );
    assert_eq!(distinct, N, "every offset arrived after b came back");
}

/// Issue 17, tables that change while spate runs: every replica of every
/// shard must agree on the columns. `MODIFY COLUMN v UInt64` on node a
/// only, while 40 000 keyed messages arrive over 20 s: `/readyz` turns 503
/// naming the disagreement and the log says so; node a's inserts wait (its
/// type check sees a column spate does not use yet; nothing is stored
/// misread) while node b's go on. Once node b has the same change, spate
/// applies it and every offset lands once with its `v`, committed = ends.
#[test]
fn a_shard_with_other_columns_is_reported_and_waits_for_agreement() {
    const N: usize = 40_000;
    let _lock = nodes_lock();
    let Some(s) = Setup::new("shard_disagree") else {
        return;
    };
    let _timer = Timer::start("e2e_sharding::disagree");
    let table = format!("{}.t", s.db);
    for n in &s.nodes {
        n.exec(&format!(
            "CREATE TABLE {table} (i UInt64, user_id UInt64, v UInt32, _partition UInt32, _offset UInt64) \
             ENGINE = MergeTree() ORDER BY (_partition, _offset)"
        ));
    }
    let topic = unique("t_shard_disagree");
    create_topic(&s.svc.brokers, &topic, PARTITIONS);
    let paced = produce_paced(&s.svc.brokers, &topic, N, Duration::from_secs(20), |i| {
        Msg {
            partition: (i % PARTITIONS as usize) as i32,
            key: None,
            payload: format!(
                r#"{{"i":{i},"user_id":{},"v":{}}}"#,
                splitmix(i as u64),
                i % 1000
            ),
            timestamp_ms: None,
        }
    });
    let port = free_port();
    let mut sink = shard_flags(&s.cluster);
    sink.extend(
        [
            "--shard-key",
            "user_id",
            "--flush-interval",
            "200ms",
            "--stall-timeout",
            "2s",
            "--probe-interval",
            "500ms",
            "--admin-addr",
            &format!("127.0.0.1:{port}"),
        ]
        .map(String::from),
    );
    let group = unique("g_shard_disagree");
    let args = s.sink_args(&topic, &group, &table, &sink);
    let mut running = spawn("shard-disagree", &args);
    s.first_rows_on_a(&table, &mut running, "node a could be altered");
    s.nodes[0].exec(&format!("ALTER TABLE {table} MODIFY COLUMN v UInt64"));
    let body = wait_for(
        "/readyz 503 naming the disagreement",
        Duration::from_secs(40),
        Duration::from_millis(250),
        || match http_get(port, "/readyz") {
            Some(r) if r.starts_with("HTTP/1.1 503") && r.contains("other columns") => Ok(r),
            other => Err(format!("{other:?}")),
        },
    );
    assert!(
        body.contains(&s.cluster.urls[0]) && body.contains(&s.cluster.urls[1]),
        "/readyz names both nodes: {body}"
    );
    assert!(
        running
            .stderr_so_far()
            .contains("replicas disagree on the table's columns"),
        "the log says the replicas disagree"
    );
    // While they disagree, node a takes nothing, node b goes on.
    let (a0, b0) = (s.count(0, &table), s.count(1, &table));
    std::thread::sleep(Duration::from_secs(3));
    let (a1, b1) = (s.count(0, &table), s.count(1, &table));
    assert_eq!(a1, a0, "node a took inserts while its columns disagreed");
    assert!(b1 > b0 || paced.is_done(), "node b went on: {b0} -> {b1}");
    s.nodes[1].exec(&format!("ALTER TABLE {table} MODIFY COLUMN v UInt64"));
    let delivered = paced.join();
    assert!(delivered.errors.is_empty(), "{:?}", delivered.errors);
    let ends: Vec<Option<i64>> = end_offsets(&s.svc.brokers, &topic, PARTITIONS)
        .into_iter()
        .map(Some)
        .collect();
    wait_for(
        "every message inserted and committed",
        Duration::from_secs(120),
        Duration::from_millis(250),
        || {
            let c = committed(&s.svc.brokers, &group, &topic, PARTITIONS);
            if c == ends {
                Ok(())
            } else {
                Err(format!("committed {c:?}, ends {ends:?}"))
            }
        },
    );
    running.sigterm();
    let fin = running.wait(Duration::from_secs(60));
    fin.assert_code(0);
    assert!(
        fin.stderr.contains("table schema changed; applied"),
        "the change applied once both nodes had it:\n{}",
        fin.tail(20)
    );
    let (distinct, rows) = s.union(&table);
    assert_eq!(distinct, N, "every offset, {rows} rows");
    for n in &s.nodes {
        assert_eq!(
            n.u64(&format!("SELECT count() FROM {table} WHERE v != i % 1000")),
            0,
            "a row with a wrong v"
        );
    }
}

/// Routing with `--create-table-like` on two shards: each topic's table is
/// created from the template on both nodes, and its keyed rows are split
/// over them, each message once.
#[test]
fn routed_tables_are_created_on_every_shard() {
    const N: usize = 4_000;
    let _lock = nodes_lock();
    let Some(s) = Setup::new("shard_route") else {
        return;
    };
    let _timer = Timer::start("e2e_sharding::route");
    s.table("tmpl");
    let prefix = unique("rt_shard");
    let topics = [format!("{prefix}_a"), format!("{prefix}_b")];
    for t in &topics {
        produce_users(&s.svc.brokers, t, N);
    }
    let mut args = s.args(
        &format!("^{prefix}_"),
        &format!("{}.{{topic}}", s.db),
        &shard_flags(&s.cluster),
    );
    args.extend(
        [
            "--shard-key",
            "user_id",
            "--create-table-like",
            &format!("{}.tmpl", s.db),
        ]
        .map(String::from),
    );
    let fin = run("route-shards", &args, Duration::from_secs(120));
    fin.assert_code(0);
    for t in &topics {
        let table = format!("{}.{t}", s.db);
        assert_eq!(
            s.union(&table),
            (N, N as u64),
            "{t}: each message once over both shards"
        );
        for node in 0..2 {
            assert!(s.count(node, &table) > 0, "{t}: shard {node} has rows");
        }
    }
}
