//! spate's integration tests, in one test binary (`cargo test --test e2e`;
//! one file's tests: `cargo test --test e2e <file>::`).
//!
//! One binary instead of one per file: each binary compiled and linked the
//! shared `support` code and the whole dependency graph again, and with
//! about forty of them the CI's build took longer than its run. Tests of
//! all files share the harness's threads (`--test-threads`, default one per
//! core); the ClickHouse lock (`support::ch_exclusive_lock`, a `flock` per
//! open file) keeps the outage tests apart from the rest within the one
//! process as it did across processes.
//!
//! Tests that install a global allocator stay in binaries of their own
//! (`tests/alloc_free_events.rs`), as does the dashboard check
//! (`tests/dashboard.rs`, no services).

#[macro_use]
mod support;

mod backpressure_slow_sink;
mod cli;
mod cli_check;
mod cli_check_formats;
mod e2e_bad_message;
mod e2e_block_hash;
mod e2e_broker_restart;
mod e2e_cdc;
mod e2e_clickhouse_outage;
mod e2e_codecs;
mod e2e_config;
mod e2e_exactly_once;
mod e2e_exactly_once_faults;
mod e2e_exactly_once_freeze;
mod e2e_exactly_once_replicas;
mod e2e_exactly_once_sharded;
mod e2e_exactly_once_storm;
mod e2e_exactly_once_window;
mod e2e_exactly_once_zombie;
mod e2e_fetch_error;
mod e2e_formats;
mod e2e_formats_avro;
mod e2e_formats_gen;
mod e2e_formats_protobuf;
mod e2e_formats_registry_tls;
mod e2e_freshness;
mod e2e_https;
mod e2e_kafka_security;
mod e2e_memory_partitions;
mod e2e_multi_topic;
mod e2e_observe;
mod e2e_policy;
mod e2e_policy_dead_letter_table;
mod e2e_policy_headers;
mod e2e_policy_stall;
mod e2e_replay_bound;
mod e2e_rolling_restart;
mod e2e_routing;
mod e2e_routing_message;
mod e2e_rows;
mod e2e_schema_change;
mod e2e_schema_race;
mod e2e_secret_rotation;
mod e2e_sharding;
mod e2e_shutdown_bound;
mod e2e_sigterm;
mod e2e_slow_insert;
mod e2e_standby;
mod e2e_types;
mod e2e_types_modern;
mod rebalance_storm;
mod secrets_no_leak;
