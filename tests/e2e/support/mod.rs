//! Shared code for spate's end-to-end tests (the modules of `tests/e2e/`, one test binary).
//!
//! Every test runs the real `spate` binary against a real Kafka-protocol
//! broker and a real ClickHouse server; addresses come only from the
//! environment written by `make services` (`build/services.env`):
//! `SPATE_TEST_BROKERS`, `SPATE_TEST_CLICKHOUSE_URL` (ClickHouse 18.16),
//! `SPATE_TEST_CLICKHOUSE_MODERN_URL` (ClickHouse 26.9), `SPATE_SERVICES_SH`.
//! Without them a test fails loudly, unless `SPATE_SKIP_INTEGRATION=1`
//! asks explicitly to skip.
//!
//! Two servers: every e2e test that does not depend on one version runs on
//! both, through [`on_both_servers!`] (a `Services` whose `clickhouse_url`
//! is one server, see [`Server`]); fault tests that stop or pause the
//! server, and the cluster tests, run on 18.16 only (each says why).
//!
//! Isolation: each test creates its own topic (never deleted or reused:
//! librdkafka 2.12 crashes when a topic a live client knows is recreated),
//! its own ClickHouse database and its own consumer group, all with unique
//! names from [`unique`]. The ClickHouse-outage test takes
//! [`ch_exclusive_lock`]; every other test holds [`ch_shared_lock`], so the
//! outage never hits another test even when test binaries run in parallel.
//!
//! Async code (ClickHouse client, rdkafka admin futures) runs on one
//! process-wide tokio runtime ([`block_on`]); the tests themselves are plain
//! synchronous `#[test]` functions. Every wait polls a condition with a
//! deadline.

//! Layout: `admin` (admin server and /proc probes of a running spate), `env` (service addresses, unique names, the ClickHouse lock,
//! the shared runtime, `wait_for`), `clickhouse` (`Ch`), `kafka` (topics,
//! producing, committed offsets), `group_log` (a member's assignments and
//! revocations, from its JSON log), `process` (running the binary), `secure`
//! (the TLS/SASL/mutual-TLS brokers), `tls` (the HTTPS ClickHouse), `registry`
//! (a test schema registry) and `checks` (assertions shared by several tests).

#![allow(dead_code, unused_imports)] // helpers some test files use and others do not
#![allow(unknown_lints, clippy::manual_is_multiple_of)] // MSRV 1.85

mod admin;
mod checks;
mod clickhouse;
mod env;
mod group_log;
mod kafka;
mod process;
mod registry;
mod secure;
mod tls;

pub use admin::*;
pub use checks::*;
pub use clickhouse::*;
pub use env::*;
pub use group_log::*;
pub use kafka::*;
pub use process::*;
pub use registry::*;
pub use secure::*;
pub use tls::*;

/// `on_both_servers!(test_fn, ...)`: for each `fn test_fn(svc: Services)`,
/// a module `test_fn` with two tests, `v18_16` and `v26_9`, calling it with
/// [`services_on`] each ClickHouse server (tests run as `test_fn::v26_9`).
/// A test whose expectations differ by version branches on `svc.server`.
#[macro_export]
macro_rules! on_both_servers {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[test]
            fn v18_16() {
                if let Some(svc) = $crate::support::services_on($crate::support::Server::V18) {
                    super::$name(svc);
                }
            }

            #[test]
            fn v26_9() {
                if let Some(svc) = $crate::support::services_on($crate::support::Server::V26) {
                    super::$name(svc);
                }
            }
        }
    )+};
}
