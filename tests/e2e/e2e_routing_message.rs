//! End to end: routing by the message (docs/routing.md). A `--table`
//! template with `{field:/tenant}` or `{header:tenant}` sends each message
//! to its tenant's table, among those `--allow-tables` lets through;
//! messages outside the allowlist, or without the field, are dead-lettered
//! and no table is made for them. A partition whose messages go to two
//! tables, one refusing its inserts, commits nothing past the refused
//! table's first row, whatever the other took, through a `kill -9`; a
//! tenant without a table gets one from `--create-table-like` while spate
//! runs, and one outside the allowlist is dead-lettered, with no table
//! made. On ClickHouse 18.16 and 26.9.

use crate::support::*;
use std::time::Duration;

const COLUMNS: &str = "(n UInt64, _partition UInt32, _offset UInt64) \
                       ENGINE = MergeTree() ORDER BY (_partition, _offset)";

/// `SELECT count(), uniqExact(n)` of `table`, and `n`s it should not hold.
fn rows_of(ch: &Ch, table: &str, wrong: &str) -> Vec<u64> {
    ch.u64_rows(&format!(
        "SELECT count(), uniqExact(n), countIf({wrong}) FROM {table}"
    ))
    .remove(0)
}

/// `spate run` of `topic` into `db.ev_{header:tenant}`: tenants matching
/// `tenants` allowed, tables made like `db.tmpl`, bad messages to `dlq`,
/// admin server on `port`.
fn by_tenant(
    svc: &Services,
    topic: &str,
    group: &str,
    db: &str,
    tenants: &str,
    dlq: &str,
    port: u16,
) -> Vec<String> {
    let mut args = run_args(svc, topic, group, &format!("{db}.ev_{{header:tenant}}"));
    args.extend(
        [
            "--allow-tables",
            &format!(r"{db}\.ev_{tenants}"),
            "--create-table-like",
            &format!("{db}.tmpl"),
            "--on-error",
            "dead-letter",
            "--dead-letter-topic",
            dlq,
            "--flush-interval",
            "200ms",
            "--admin-addr",
            &format!("127.0.0.1:{port}"),
        ]
        .map(String::from),
    );
    args
}

on_both_servers!(messages_name_their_table_by_a_field);

/// `{field:/tenant}`, bounded run: each message in its tenant's table
/// once; a tenant outside the allowlist and a message without the field
/// dead-lettered, no table made for them; committed to the end.
fn messages_name_their_table_by_a_field(svc: Services) {
    const N: usize = 2_000;
    let _timer = Timer::start("e2e_routing_field");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_route_field");
    for t in ["acme", "globex"] {
        ch.exec(&format!("CREATE TABLE {db}.ev_{t} {COLUMNS}"));
    }
    let topic = unique("rf");
    let dlq = format!("{topic}_dlq");
    create_topic(&svc.brokers, &topic, 2);
    create_topic(&svc.brokers, &dlq, 1);
    let tenant = |i: usize| match i % 5 {
        0 | 4 => Some("acme"),
        1 => Some("globex"),
        2 => Some("denied"),
        _ => None,
    };
    produce_tenants(&svc.brokers, &topic, 0..N, tenant);
    let group = unique("g_route_field");
    let mut args = run_args(&svc, &topic, &group, &format!("{db}.ev_{{field:/tenant}}"));
    args.extend(
        [
            "--allow-tables",
            &format!(r"{db}\.ev_(acme|globex)"),
            "--on-error",
            "dead-letter",
            "--dead-letter-topic",
            &dlq,
            "--until-end",
        ]
        .map(String::from),
    );
    let fin = run("route-field", &args, Duration::from_secs(120));
    fin.assert_code(0);
    let acme = rows_of(&ch, &format!("{db}.ev_acme"), "n % 5 NOT IN (0, 4)");
    assert_eq!(
        acme,
        vec![(2 * N / 5) as u64, (2 * N / 5) as u64, 0],
        "acme"
    );
    let globex = rows_of(&ch, &format!("{db}.ev_globex"), "n % 5 != 1");
    assert_eq!(globex, vec![(N / 5) as u64, (N / 5) as u64, 0], "globex");
    assert_eq!(
        end_offsets(&svc.brokers, &dlq, 1),
        vec![(2 * N / 5) as i64],
        "the denied tenant's and the field-less messages are dead letters"
    );
    assert_eq!(
        ch.u64(&format!(
            "SELECT count() FROM system.tables WHERE database = '{db}' AND name NOT IN ('ev_acme', 'ev_globex')"
        )),
        0,
        "no table is made outside the allowlist"
    );
    assert_committed_to_end(&svc.brokers, &group, &topic, 2, &topic);
}

on_both_servers!(a_partition_split_across_two_tables_commits_what_both_took);

/// `{header:tenant}`: every partition's odd offsets go to a table that
/// refuses its inserts (too many parts), the even ones to a table that
/// takes them. The second table's rows all land, yet nothing past the
/// first table's first row is committed, through a `kill -9`. Once the
/// first table takes inserts again, a new run writes everything, and a
/// tenant without a table gets one from `--create-table-like`.
fn a_partition_split_across_two_tables_commits_what_both_took(svc: Services) {
    const N: usize = 4_000;
    const NEW: usize = 1_000;
    let _timer = Timer::start("e2e_routing_split");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_route_split");
    let partitioned = "(n UInt64, _partition UInt32, _offset UInt64) ENGINE = MergeTree() \
                       PARTITION BY _partition ORDER BY _offset";
    ch.exec(&format!("CREATE TABLE {db}.ev_fast {partitioned}"));
    ch.exec(&format!("CREATE TABLE {db}.tmpl {partitioned}"));
    let slow = format!("{db}.ev_slow");
    // Both servers refuse an insert while a partition has this many parts.
    const LIMIT: usize = 20;
    ch.exec(&format!(
        "CREATE TABLE {slow} {partitioned} SETTINGS parts_to_throw_insert = {LIMIT}, parts_to_delay_insert = {LIMIT}"
    ));
    ch.exec(&format!("SYSTEM STOP MERGES {slow}"));
    for seed in 0..LIMIT {
        ch.exec(&format!("INSERT INTO {slow} VALUES (0, 9, {seed})"));
    }
    let topic = unique("rsplit");
    let dlq = format!("{topic}_dlq");
    create_topic(&svc.brokers, &topic, 2);
    create_topic(&svc.brokers, &dlq, 1);
    // Message i is at partition i % 2, offset i / 2: odd offsets are slow.
    let split = |i: usize| Some(if (i / 2) % 2 == 1 { "slow" } else { "fast" });
    produce_tenants(&svc.brokers, &topic, 0..N, split);

    let port = free_port();
    let group = unique("g_route_split");
    let mut args = by_tenant(&svc, &topic, &group, &db, r"(fast|slow|new)", &dlq, port);
    args.extend(["--commit-interval", "200ms"].map(String::from));
    let spate = spawn("route-split", &args);
    let fast = format!("{db}.ev_fast");
    ch.wait_rows(&fast, (N / 2) as u64, Duration::from_secs(60));
    let slow_errors = format!("table=\"{slow}\"");
    wait_for(
        "the slow table's inserts refused",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let m = http_get(port, "/metrics").ok_or("no /metrics")?;
            let n = metric_sum(&m, "spate_insert_errors_total", &[&slow_errors]);
            (n >= 1.0).then_some(()).ok_or(format!("{n} errors"))
        },
    );
    // Several commit ticks with the fast table's rows all in.
    std::thread::sleep(Duration::from_secs(2));
    let held = committed(&svc.brokers, &group, &topic, 2);
    assert!(
        held.iter().all(|c| c.unwrap_or(0) <= 1),
        "committed {held:?}: past offset 1, the slow table's first row, which it did not take"
    );
    spate.kill9();
    assert_eq!(
        ch.u64(&format!("SELECT count() FROM {slow} WHERE _partition != 9")),
        0
    );
    let held = committed(&svc.brokers, &group, &topic, 2);
    assert!(held.iter().all(|c| c.unwrap_or(0) <= 1), "{held:?}");

    // The slow table takes inserts again; a new tenant arrives, and one
    // outside the allowlist.
    ch.exec(&format!("ALTER TABLE {slow} DROP PARTITION 9"));
    ch.exec(&format!("SYSTEM START MERGES {slow}"));
    produce_tenants(&svc.brokers, &topic, N..N + NEW, |i| {
        Some(match i % 4 {
            0 => "new",
            1 => "deny",
            _ => "fast",
        })
    });
    let spate = spawn("route-split-2", &args);
    let new = format!("{db}.ev_new");
    let everything = [
        (&fast, "fast", (N / 2 + NEW / 2) as u64),
        (&slow, "slow", (N / 2) as u64),
        (&new, "new", (NEW / 4) as u64),
    ];
    wait_for(
        "every message in its table",
        Duration::from_secs(90),
        Duration::from_millis(500),
        || {
            for (table, _, n) in &everything {
                let got = ch
                    .try_u64(&format!(
                        "SELECT uniqExact(_partition, _offset) FROM {table}"
                    ))
                    .ok();
                if got != Some(*n) {
                    return Err(format!("{table}: {got:?} of {n}"));
                }
            }
            Ok(())
        },
    );
    let m = http_get(port, "/metrics").expect("/metrics");
    assert_eq!(
        metric_sum(
            &m,
            "spate_tables_created_total",
            &[&format!("table=\"{new}\"")]
        ),
        1.0
    );
    assert_eq!(
        end_offsets(&svc.brokers, &dlq, 1),
        vec![(NEW / 4) as i64],
        "the tenant outside the allowlist is dead-lettered"
    );
    assert_eq!(
        ch.u64(&format!(
            "SELECT count() FROM system.tables WHERE database = '{db}' AND name = 'ev_deny'"
        )),
        0,
        "no table is made outside the allowlist"
    );
    spate.sigterm();
    spate.wait(Duration::from_secs(60)).assert_code(0);
    // At least once through the kill: each message in its table (the fast
    // table's rows twice, as their offsets were held back), none elsewhere.
    for (table, tenant, n) in everything {
        let wrong = match tenant {
            "fast" => format!("n < {N} AND intDiv(n, 2) % 2 = 1 OR n >= {N} AND n % 4 IN (0, 1)"),
            "slow" => format!("n >= {N} OR intDiv(n, 2) % 2 = 0"),
            _ => format!("n < {N} OR n % 4 != 0"),
        };
        let got = ch.u64_rows(&format!(
            "SELECT uniqExact(_partition, _offset), uniqExact(n), countIf({wrong}) FROM {table}"
        ));
        assert_eq!(got[0], vec![n, n, 0], "{table}");
    }
    assert_committed_to_end(&svc.brokers, &group, &topic, 2, &topic);
}

on_both_servers!(tenant_tables_are_made_on_demand_from_none);

/// `--create-table-like` with no tenant table yet: each tenant's table is
/// made when its first message arrives. A tenant whose name ClickHouse
/// will not take for a table (too long) is dead-lettered, and the
/// pipelines go on.
fn tenant_tables_are_made_on_demand_from_none(svc: Services) {
    const N: usize = 400;
    let _timer = Timer::start("e2e_routing_on_demand");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_route_demand");
    ch.exec(&format!("CREATE TABLE {db}.tmpl {COLUMNS}"));
    let topic = unique("rdemand");
    let dlq = format!("{topic}_dlq");
    create_topic(&svc.brokers, &topic, 2);
    create_topic(&svc.brokers, &dlq, 1);
    let long: &'static str = Box::leak("z".repeat(300).into_boxed_str());
    produce_tenants(&svc.brokers, &topic, 0..N, |i| {
        Some(match i % 4 {
            0 | 3 => "acme",
            1 => "globex",
            _ => long,
        })
    });
    let port = free_port();
    let group = unique("g_route_demand");
    let args = by_tenant(&svc, &topic, &group, &db, "[a-z]+", &dlq, port);
    let spate = spawn("route-demand", &args);
    let (acme, globex) = (format!("{db}.ev_acme"), format!("{db}.ev_globex"));
    wait_for(
        "each tenant's rows in its new table, the long one dead-lettered",
        Duration::from_secs(90),
        Duration::from_millis(500),
        || {
            let got =
                [&acme, &globex].map(|t| ch.try_u64(&format!("SELECT uniqExact(n) FROM {t}")).ok());
            let letters = end_offsets(&svc.brokers, &dlq, 1)[0];
            if got == [Some((N / 2) as u64), Some((N / 4) as u64)] && letters == (N / 4) as i64 {
                Ok(())
            } else {
                Err(format!("{got:?}, {letters} letters"))
            }
        },
    );
    let m = http_get(port, "/metrics").expect("/metrics");
    for t in [&acme, &globex] {
        assert_eq!(
            metric_sum(
                &m,
                "spate_tables_created_total",
                &[&format!("table=\"{t}\"")]
            ),
            1.0,
            "{t}"
        );
    }
    let mut spate = spate;
    assert!(!spate.has_exited(), "{}", spate.stderr_so_far());
    spate.sigterm();
    spate.wait(Duration::from_secs(60)).assert_code(0);
    for (t, n, wrong) in [
        (&acme, N / 2, "n % 4 NOT IN (0, 3)"),
        (&globex, N / 4, "n % 4 != 1"),
    ] {
        assert_eq!(rows_of(&ch, t, wrong), vec![n as u64, n as u64, 0], "{t}");
    }
    assert_eq!(
        ch.u64(&format!(
            "SELECT count() FROM system.tables WHERE database = '{db}'"
        )),
        3,
        "the template and the two tenants' tables"
    );
    assert_committed_to_end(&svc.brokers, &group, &topic, 2, &topic);
}

/// `{field:...}` in Avro, Protobuf and CSV messages, one bounded run per
/// format (each with its own tables): every message in its tenant's table
/// once, a denied tenant and a message without the value dead-lettered,
/// no table made for them, committed to the end. On one server: reading
/// the value is spate's own, the same on both (the JSON run above covers
/// the routing on both).
#[test]
fn avro_protobuf_and_csv_messages_name_their_table_by_a_field() {
    use spate_clickhouse::formats::{AvroWrite, SchemaType};
    use spate_clickhouse::{RegistryConfig, SchemaRegistry};
    const N: usize = 600;
    let Some(svc) = services_on(Server::V26) else {
        return;
    };
    let _timer = Timer::start("e2e_routing_field_formats");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_route_formats");
    let reg = TestRegistry::start(None);
    let client = SchemaRegistry::new(&RegistryConfig {
        url: reg.url(),
        ..RegistryConfig::default()
    })
    .expect("registry client");
    // acme, globex, denied (not allowed), none (no value).
    let tenant = |i: usize| [Some("acme"), Some("globex"), Some("denied"), None][i % 4];
    let avro_schema = r#"{"type":"record","name":"E","fields":[{"name":"n","type":"long"},
        {"name":"meta","type":{"type":"record","name":"M","fields":[{"name":"tenant","type":["null","string"]}]}}]}"#;
    let proto = "syntax = \"proto3\";\nmessage E { uint64 n = 1; optional string tenant = 2; }\n";
    for (format, pointer) in [
        ("avro", "/meta/tenant"),
        ("protobuf", "/tenant"),
        ("csv", "/tenant"),
    ] {
        for t in ["acme", "globex"] {
            ch.exec(&format!(
                "CREATE TABLE {db}.{format}_{t} (n UInt64, tenant String, _partition UInt32, _offset UInt64) \
                 ENGINE = MergeTree() ORDER BY (_partition, _offset)"
            ));
        }
        let topic = unique(&format!("rff_{format}"));
        let dlq = format!("{topic}_dlq");
        create_topic(&svc.brokers, &topic, 2);
        create_topic(&svc.brokers, &dlq, 1);
        let subject = format!("{topic}-value");
        let id = match format {
            "avro" => client.register(&subject, SchemaType::Avro, avro_schema),
            "protobuf" => client.register(&subject, SchemaType::Protobuf, proto),
            _ => Ok(0),
        }
        .expect("register");
        produce_bytes(&svc.brokers, &topic, 2, N, |i| {
            let mut b = Vec::new();
            match format {
                "avro" => {
                    b.confluent_header(id).avro_long(i as i64);
                    match tenant(i) {
                        Some(t) => b.avro_long(1).avro_bytes(t.as_bytes()),
                        None => b.avro_long(0),
                    };
                }
                "protobuf" => {
                    // Header, message indexes [0], then n and tenant.
                    b.confluent_header(id).push(0);
                    b.push(1 << 3);
                    let mut n = i as u64;
                    while n >= 0x80 {
                        b.push((n as u8) | 0x80);
                        n >>= 7;
                    }
                    b.push(n as u8);
                    if let Some(t) = tenant(i) {
                        b.extend_from_slice(&[2 << 3 | 2, t.len() as u8]);
                        b.extend_from_slice(t.as_bytes());
                    }
                }
                _ => {
                    b = match tenant(i) {
                        Some(t) => format!("{i},\"{t}\""),
                        None => format!("{i},"),
                    }
                    .into_bytes();
                }
            }
            ((i % 2) as i32, b)
        });
        let group = unique("g_rff");
        let mut args = run_args(
            &svc,
            &topic,
            &group,
            &format!("{db}.{format}_{{field:{pointer}}}"),
        );
        args.extend(
            [
                "--allow-tables",
                &format!(r"{db}\.{format}_(acme|globex)"),
                "--format",
                format,
                "--on-error",
                "dead-letter",
                "--dead-letter-topic",
                &dlq,
                "--until-end",
            ]
            .map(String::from),
        );
        if format == "csv" {
            args.extend(["--csv-columns", "n,tenant"].map(String::from));
        } else {
            args.extend(["--schema-registry".to_owned(), reg.url()]);
        }
        let fin = run(&format!("route-{format}"), &args, Duration::from_secs(120));
        fin.assert_code(0);
        for (t, k) in [("acme", 0), ("globex", 1)] {
            assert_eq!(
                rows_of(&ch, &format!("{db}.{format}_{t}"), &format!("n % 4 != {k}")),
                vec![(N / 4) as u64, (N / 4) as u64, 0],
                "{format}: {t}"
            );
        }
        assert_eq!(
            end_offsets(&svc.brokers, &dlq, 1),
            vec![(N / 2) as i64],
            "{format}: the denied tenant's and the value-less messages are dead letters"
        );
        let log = fin.tail(400);
        assert!(
            log.contains("not allowed by --allow-tables")
                && log.contains(&format!("has no field {pointer}")),
            "{format}: each refused message says why:\n{log}"
        );
        assert_committed_to_end(&svc.brokers, &group, &topic, 2, format);
    }
    assert_eq!(
        ch.u64(&format!(
            "SELECT count() FROM system.tables WHERE database = '{db}' AND name NOT LIKE '%\\_acme' AND name NOT LIKE '%\\_globex'"
        )),
        0,
        "no table is made outside the allowlist"
    );
}
