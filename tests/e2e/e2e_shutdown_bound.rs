//! End to end: the shutdown is bounded by `--shutdown-timeout` even when
//! the broker stops answering (issue 16 point 6).
//!
//! spate consumes 20 000 messages from the suite's durable broker
//! (`SPATE_TEST_KAFKA_DURABLE_BROKERS`, which only the broker tests touch)
//! with `--shutdown-timeout 2s`. Once every row is in the table the broker
//! process is frozen (SIGSTOP: connections stay open, nothing answers) and
//! spate gets SIGTERM. Its final commit, the wait for outstanding commits
//! and the consumer's close all wait on the broker; spate must still exit
//! within the budget plus a small margin, and say the final commit failed
//! (exit 1). The broker is thawed (SIGCONT) whatever happens; the offsets
//! committed then must never run ahead of the rows in the table.
//!
//! Holds [`ch_exclusive_lock`]: the broker restart test uses the same
//! broker.

use crate::support::*;
use std::time::{Duration, Instant};

const N: usize = 20_000;
const PARTITIONS: i32 = 4;
/// Shorter than the session timeout (6 s), so the member is still in its
/// group and the final commit is attempted (and fails) rather than given
/// up as lost.
const BUDGET: Duration = Duration::from_secs(2);
/// The final commit gets at least 2 s even when the drain used the budget
/// (a missed final commit turns acknowledged rows into duplicates), plus
/// process start-up and teardown.
const MARGIN: Duration = Duration::from_secs(4);

#[test]
fn shutdown_is_bounded_when_the_broker_stops_answering() {
    let Some(mut svc) = services() else { return };
    svc.brokers = std::env::var("SPATE_TEST_KAFKA_DURABLE_BROKERS").expect(
        "SPATE_TEST_KAFKA_DURABLE_BROKERS is not set: run `make services` and source build/services.env",
    );
    let pid_file = std::env::var("SPATE_TEST_KAFKA_DURABLE_PID_FILE")
        .expect("SPATE_TEST_KAFKA_DURABLE_PID_FILE is not set: source build/services.env");
    let broker: u32 = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no broker pid in {pid_file}"));
    let _timer = Timer::start("e2e_shutdown_bound");
    let _lock = ch_exclusive_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let topic = unique("t_shutbound");
    let group = unique("g_shutbound");
    let table = ch.fresh_offsets_table("e2e_shutbound");
    create_topic(&svc.brokers, &topic, PARTITIONS);
    produce(&svc.brokers, &topic, PARTITIONS, N, |i| Msg {
        partition: (i % PARTITIONS as usize) as i32,
        key: None,
        payload: format!(r#"{{"n":{i},"s":"shutbound-{i}"}}"#),
        timestamp_ms: None,
    });
    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend(
        [
            "--batch-rows",
            "2000",
            "--flush-interval",
            "200ms",
            "--commit-interval",
            "60s",
            "--shutdown-timeout",
            "2s",
        ]
        .map(String::from),
    );
    let running = spawn("shutbound", &args);
    wait_for(
        "every row in the table",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || match ch.try_u64(&format!("SELECT count() FROM {table}")) {
            Ok(n) if n >= N as u64 => Ok(()),
            other => Err(format!("{other:?} rows")),
        },
    );

    let _thaw = Undo::new(|| kill_pid(broker, libc::SIGCONT));
    kill_pid(broker, libc::SIGSTOP);
    let stopped = Instant::now();
    running.sigterm();
    // Long enough to tell "bounded" from "waits for the broker".
    let fin = running.wait(BUDGET + MARGIN + Duration::from_secs(60));
    let took = stopped.elapsed();
    kill_pid(broker, libc::SIGCONT);
    eprintln!(
        "[e2e_shutdown_bound] exit {:?} {took:?} after SIGTERM with the broker stopped",
        fin.code()
    );
    assert!(
        took <= BUDGET + MARGIN,
        "spate took {took:?} to exit with the broker stopped (budget {BUDGET:?} + {MARGIN:?}); stderr:\n{}",
        fin.tail(30)
    );
    fin.assert_code(1);
    assert!(
        fin.stderr.contains("final offset commit failed"),
        "stderr does not report the failed final commit:\n{}",
        fin.tail(30)
    );
    // Nothing committed past the rows present, once the broker answers.
    let c = wait_for(
        "the thawed broker answers",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let c = committed(&svc.brokers, &group, &topic, PARTITIONS);
            Ok::<_, String>(c)
        },
    );
    assert_committed_prefix_present(&ch, &table, &c, "after the bounded shutdown");
    ch.drop_database_of(&table);
}
