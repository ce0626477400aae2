//! Feature detection by version, checked against both real servers: for
//! each flag of `ServerFeatures` that `ChClient::connect` derives from
//! `SELECT version()`, the server must do what the flag says: a feature
//! reported present works, one reported absent is refused by the server.
//! Runs on `SPATE_TEST_CLICKHOUSE_URL` (18.16: none of these features) and
//! `SPATE_TEST_CLICKHOUSE_MODERN_URL` (26.9: all of them); a missing URL
//! panics (only `SPATE_SKIP_INTEGRATION=1` skips, loudly).

use bytes::Bytes;
use spate_clickhouse::{ChClient, ClientError, EncoderOptions, RowEncoder, ServerFeatures};
use spate_core::record::Message;
use std::time::{SystemTime, UNIX_EPOCH};

/// (variable, expected `(major, minor)`).
const SERVERS: [(&str, (u32, u32)); 2] = [
    ("SPATE_TEST_CLICKHOUSE_URL", (18, 16)),
    ("SPATE_TEST_CLICKHOUSE_MODERN_URL", (26, 9)),
];

fn servers() -> Vec<(String, (u32, u32))> {
    if std::env::var("SPATE_SKIP_INTEGRATION").as_deref() == Ok("1") {
        eprintln!("!!! SPATE_SKIP_INTEGRATION=1: SKIPPING the feature detection tests !!!");
        return Vec::new();
    }
    SERVERS
        .iter()
        .map(|(var, version)| match std::env::var(var) {
            Ok(u) if !u.is_empty() => (u, *version),
            _ => panic!(
                "{var} is not set: run `make services` and `source build/services.env` \
                 (or SPATE_SKIP_INTEGRATION=1 to skip explicitly)"
            ),
        })
        .collect()
}

async fn fresh_db(client: &ChClient) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let db = format!("spate_features_{}_{nanos}", std::process::id());
    client
        .execute(&format!("CREATE DATABASE {db}"), &[])
        .await
        .expect("create database");
    db
}

async fn count(client: &ChClient, table: &str) -> u64 {
    let t = client
        .fetch_text(&format!("SELECT count() FROM {table}"), "TabSeparated")
        .await
        .expect("count");
    t.trim().parse().expect("a number")
}

fn refused(res: Result<(), ClientError>, what: &str, text: &str) {
    let e = res.expect_err(what);
    assert!(e.to_string().contains(text), "{what}: {e}");
}

#[tokio::test]
async fn features_match_what_each_server_does() {
    for (url, version) in servers() {
        let client = ChClient::connect(&url, None, None).await.expect("connect");
        let f = client.features();
        assert_eq!(f.version, version, "{url}: version {}", client.version());
        let modern = version >= (23, 7);
        assert_eq!(
            (
                f.insert_deduplication_token,
                f.row_binary_with_defaults,
                f.async_insert
            ),
            (modern, modern, modern),
            "{url}: {f:?}"
        );
        assert_eq!(
            (f.bool_type, f.map_type, f.datetime64),
            (modern, modern, modern)
        );
        let db = fresh_db(&client).await;
        dedup_token(&client, &db, f).await;
        row_binary_with_defaults(&client, &db, f).await;
        types(&client, &db, f).await;
        client
            .execute(&format!("DROP DATABASE {db}"), &[])
            .await
            .expect("drop database");
    }
}

/// The same rows twice with one `insert_deduplication_token`: stored once.
async fn dedup_token(client: &ChClient, db: &str, f: ServerFeatures) {
    let settings = if f.insert_deduplication_token {
        " SETTINGS non_replicated_deduplication_window = 100"
    } else {
        ""
    };
    client
        .execute(
            &format!(
                "CREATE TABLE {db}.dedup (x UInt32) ENGINE = MergeTree() ORDER BY x{settings}"
            ),
            &[],
        )
        .await
        .expect("create dedup table");
    let token = vec![(
        "insert_deduplication_token".to_owned(),
        "batch-1".to_owned(),
    )];
    let body = || Bytes::from(7u32.to_le_bytes().to_vec());
    let cols = ["x".to_owned()];
    let insert = || client.insert(db, "dedup", &cols, "RowBinary", body(), &token);
    if f.insert_deduplication_token {
        insert().await.expect("first insert");
        insert().await.expect("second insert, same token");
        assert_eq!(
            count(client, &format!("{db}.dedup")).await,
            1,
            "deduplicated by token"
        );
    } else {
        let e = insert()
            .await
            .expect_err("18.16 has no insert_deduplication_token");
        assert!(e.to_string().contains("insert_deduplication_token"), "{e}");
    }
}

/// A missing key left to the server's DEFAULT by `RowBinaryWithDefaults`.
async fn row_binary_with_defaults(client: &ChClient, db: &str, f: ServerFeatures) {
    client
        .execute(
            &format!(
                "CREATE TABLE {db}.defaults (id UInt32, d UInt32 DEFAULT id * 10) \
                 ENGINE = MergeTree() ORDER BY id"
            ),
            &[],
        )
        .await
        .expect("create defaults table");
    let columns = client.describe(db, "defaults").await.expect("describe");
    let opts = EncoderOptions {
        with_defaults: true,
        ..EncoderOptions::default()
    };
    let mut enc = RowEncoder::new(&columns, opts).expect("encoder");
    let mut body = Vec::new();
    let msg = Message {
        topic: "t",
        partition: 0,
        offset: 0,
        timestamp_ms: None,
        key: None,
        payload: Some(br#"{"id": 4}"#),
        headers: None,
    };
    enc.encode(&msg, &mut body).expect("encode");
    let res = client
        .insert(
            db,
            "defaults",
            enc.insert_columns(),
            enc.format(),
            Bytes::from(body),
            &[],
        )
        .await;
    if f.row_binary_with_defaults {
        res.expect("RowBinaryWithDefaults insert");
        let d = client
            .fetch_text(&format!("SELECT d FROM {db}.defaults"), "TabSeparated")
            .await
            .expect("select");
        assert_eq!(d.trim(), "40", "the server computed the DEFAULT");
    } else {
        let e = res.expect_err("18.16 has no RowBinaryWithDefaults");
        assert!(e.to_string().contains("RowBinaryWithDefaults"), "{e}");
    }
}

/// Bool, Map and DateTime64 columns exist exactly when the flags say so;
/// JSON, Variant and Dynamic on current servers only.
async fn types(client: &ChClient, db: &str, f: ServerFeatures) {
    let cases = [
        ("Bool", f.bool_type),
        ("Map(String, UInt8)", f.map_type),
        ("DateTime64(3)", f.datetime64),
        ("JSON", f.version >= (25, 3)),
        ("Variant(String, UInt8)", f.version >= (25, 3)),
        ("Dynamic", f.version >= (25, 3)),
    ];
    for (i, (ty, present)) in cases.into_iter().enumerate() {
        let res = client
            .execute(
                &format!("CREATE TABLE {db}.ty{i} (v {ty}) ENGINE = Memory"),
                &[],
            )
            .await;
        if present {
            res.unwrap_or_else(|e| panic!("{ty} on {}: {e}", client.version()));
        } else {
            refused(res, ty, "Code:");
        }
    }
}
