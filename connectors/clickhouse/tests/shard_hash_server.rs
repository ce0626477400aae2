//! Parity of `spate_clickhouse::shard_hash` with the server's `cityHash64`.
//!
//! For every supported key type, thousands of pseudo-random values (fixed
//! seed, edge values mixed in) are passed in the query text, hashed by the
//! server in one `arrayMap(... -> cityHash64(...), [...])` per batch, and
//! compared with `KeyHash::hash` of the same values' RowBinary bytes; the
//! same for multi-column keys. `LowCardinality` (which 18.16 cannot hash as
//! a constant) is checked on a real table filled with RowBinary rows.
//!
//! Runs against both servers, `SPATE_TEST_CLICKHOUSE_URL` (18.16) and
//! `SPATE_TEST_CLICKHOUSE_MODERN_URL` (26.9), and panics without either: a
//! parity test that silently passes proves nothing.

use bytes::Bytes;
use spate_clickhouse::shard_hash::{combine, KeyHash};
use spate_clickhouse::{parse_type, ChClient, ClientError, ErrorClass};
use std::fmt::Write as _;
use std::future::Future;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const ROWS_PER_TYPE: usize = 3000;
const ROWS_PER_KEY: usize = 2000;
/// Keep each query well below the server's default `max_query_size`
/// (256 KiB).
const MAX_QUERY_BYTES: usize = 150_000;

/// The servers to compare with: 18.16 and 26.9.
fn urls() -> Vec<String> {
    [
        "SPATE_TEST_CLICKHOUSE_URL",
        "SPATE_TEST_CLICKHOUSE_MODERN_URL",
    ]
    .iter()
    .map(|var| match std::env::var(var) {
        Ok(u) if !u.is_empty() => u,
        _ => panic!(
            "{var} is not set: this test compares shard hashes with real ClickHouse \
                 servers (18.16 and 26.9), e.g. SPATE_TEST_CLICKHOUSE_URL=http://127.0.0.1:8123 \
                 SPATE_TEST_CLICKHOUSE_MODERN_URL=http://127.0.0.1:8125 (see scripts/services.sh)"
        ),
    })
    .collect()
}

/// Retry `op` while the server answers with a retriable error (it may be
/// restarting), for at most a minute.
async fn retrying<T, F: Future<Output = Result<T, ClientError>>>(
    what: &str,
    mut op: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match op().await {
            Ok(v) => return v,
            Err(e) if e.class() == ErrorClass::Retriable && Instant::now() < deadline => {
                eprintln!("{what}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

async fn clients() -> Vec<ChClient> {
    let mut out = Vec::new();
    for url in urls() {
        out.push(retrying("connect", || ChClient::connect(&url, None, None)).await);
    }
    out
}

/// xorshift64: deterministic, no dependencies.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Random bits, or (one time in four) one of `edges`.
    fn edgy(&mut self, edges: &[u64]) -> u64 {
        if self.below(4) == 0 {
            edges[self.below(edges.len())]
        } else {
            self.next()
        }
    }
}

/// One generated key value: a SQL string literal the column's `wrap`
/// expression turns into the typed value, and its RowBinary bytes.
struct Value {
    sql: String,
    bytes: Vec<u8>,
}

/// Makes one pseudo-random value.
type Gen = Box<dyn Fn(&mut XorShift) -> Value>;

/// One key column: its ClickHouse type, the SQL building the typed value
/// from the literal (`{}` stands for it) and a value generator.
struct Col {
    ty: String,
    wrap: String,
    gen: Gen,
}

fn col(ty: &str, wrap: &str, gen: impl Fn(&mut XorShift) -> Value + 'static) -> Col {
    Col {
        ty: ty.to_owned(),
        wrap: wrap.to_owned(),
        gen: Box::new(gen),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().fold(String::new(), |mut s, c| {
        let _ = write!(s, "{c:02x}");
        s
    })
}

fn quoted(s: impl std::fmt::Display) -> String {
    format!("'{s}'")
}

/// An integer of `width` bytes: edge values often, random bits otherwise.
fn int(width: u32, signed: bool) -> impl Fn(&mut XorShift) -> Value {
    move |rng| {
        let bits = 8 * width;
        let mask = u64::MAX >> (64 - bits);
        let sign = 1u64 << (bits - 1);
        let v = rng.edgy(&[0, 1, mask, sign, sign - 1, sign + 1]) & mask;
        let text = if signed {
            (((v << (64 - bits)) as i64) >> (64 - bits)).to_string()
        } else {
            v.to_string()
        };
        Value {
            sql: quoted(text),
            bytes: v.to_le_bytes()[..width as usize].to_vec(),
        }
    }
}

/// IEEE bits of `width` bytes, passed as little-endian hex (so NaN
/// payloads, -0.0 and subnormals reach the server exactly).
fn float(width: u32) -> impl Fn(&mut XorShift) -> Value {
    move |rng| {
        let v = if width == 4 {
            rng.edgy(&[
                0,
                0x8000_0000,
                0x7f80_0000,
                0xff80_0000,
                0x7fc0_0000,
                1,
                0x7f7f_ffff,
            ]) & 0xffff_ffff
        } else {
            rng.edgy(&[
                0,
                1 << 63,
                0x7ff0 << 48,
                0xfff0 << 48,
                0x7ff8 << 48,
                1,
                u64::MAX,
            ])
        };
        let bytes = v.to_le_bytes()[..width as usize].to_vec();
        Value {
            sql: quoted(hex(&bytes)),
            bytes,
        }
    }
}

/// One of `values` (an enum's), as an integer literal.
fn pick(values: &'static [i64], width: usize) -> impl Fn(&mut XorShift) -> Value {
    move |rng| {
        let v = values[rng.below(values.len())];
        Value {
            sql: quoted(v),
            bytes: v.to_le_bytes()[..width].to_vec(),
        }
    }
}

fn random_bytes(rng: &mut XorShift, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next() as u8).collect()
}

/// Lengths 0..=130 mostly (every CityHash64 branch), up to 600 sometimes.
fn string(rng: &mut XorShift) -> Value {
    let len = if rng.below(4) == 0 {
        rng.below(601)
    } else {
        rng.below(131)
    };
    let data = random_bytes(rng, len);
    let mut bytes = Vec::with_capacity(len + 2);
    let mut n = len;
    while n >= 0x80 {
        bytes.push((n as u8) | 0x80);
        n >>= 7;
    }
    bytes.push(n as u8);
    bytes.extend_from_slice(&data);
    Value {
        sql: quoted(hex(&data)),
        bytes,
    }
}

/// Up to `n` random bytes, NUL-padded to `n` (by the server's
/// `toFixedString` and by us).
fn fixed(n: usize) -> impl Fn(&mut XorShift) -> Value {
    move |rng| {
        let len = if rng.below(2) == 0 {
            n
        } else {
            rng.below(n + 1)
        };
        let mut bytes = random_bytes(rng, len);
        let sql = quoted(hex(&bytes));
        bytes.resize(n, 0);
        Value { sql, bytes }
    }
}

const ENUM8: &str = "Enum8('a' = -128, 'b' = -1, 'c' = 0, 'd' = 1, 'e' = 100, 'f' = 127)";
const ENUM8_VALUES: &[i64] = &[-128, -1, 0, 1, 100, 127];
const ENUM16: &str =
    "Enum16('a' = -32768, 'b' = -1000, 'c' = -1, 'd' = 0, 'e' = 255, 'f' = 256, 'g' = 32767)";
const ENUM16_VALUES: &[i64] = &[-32768, -1000, -1, 0, 255, 256, 32767];

/// Every supported key type, one column each.
fn all_types() -> Vec<Col> {
    let mut cols = vec![
        col("UInt8", "toUInt8({})", int(1, false)),
        col("UInt16", "toUInt16({})", int(2, false)),
        col("UInt32", "toUInt32({})", int(4, false)),
        col("UInt64", "toUInt64({})", int(8, false)),
        col("Int8", "toInt8({})", int(1, true)),
        col("Int16", "toInt16({})", int(2, true)),
        col("Int32", "toInt32({})", int(4, true)),
        col("Int64", "toInt64({})", int(8, true)),
        col("Float32", "reinterpretAsFloat32(unhex({}))", float(4)),
        col("Float64", "reinterpretAsFloat64(unhex({}))", float(8)),
        col("Date", "CAST(toUInt16({}) AS Date)", int(2, false)),
        col("DateTime", "toDateTime(toUInt32({}))", int(4, false)),
        col(
            "DateTime('Asia/Tokyo')",
            "toDateTime(toUInt32({}), 'Asia/Tokyo')",
            int(4, false),
        ),
        col(
            ENUM8,
            &format!("CAST(toInt8({{}}) AS {ENUM8})"),
            pick(ENUM8_VALUES, 1),
        ),
        col(
            ENUM16,
            &format!("CAST(toInt16({{}}) AS {ENUM16})"),
            pick(ENUM16_VALUES, 2),
        ),
        col("String", "unhex({})", string),
    ];
    for n in [1, 3, 8, 16, 17, 33, 64, 65, 128, 200] {
        let wrap = format!("toFixedString(unhex({{}}), {n})");
        cols.push(col(&format!("FixedString({n})"), &wrap, fixed(n)));
    }
    cols
}

/// The Rust side: walk one RowBinary row of key columns with
/// `encoded_len`, hash each value and combine, as the router does.
fn rust_key_hash(keys: &[KeyHash], mut row: &[u8]) -> u64 {
    let mut acc = None;
    for key in keys {
        let len = key.encoded_len(row).expect("value fits in the row");
        let h = key.hash(&row[..len]).expect("well-formed value");
        acc = Some(acc.map_or(h, |prev| combine(prev, h)));
        row = &row[len..];
    }
    assert!(row.is_empty(), "row fully consumed");
    acc.expect("at least one key column")
}

/// Parse the server's TSV of one `Array(UInt64)`.
fn parse_hashes(tsv: &str) -> Vec<u64> {
    let inner = tsv
        .trim()
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or_else(|| panic!("not an array: {tsv:.200}"));
    inner
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap_or_else(|_| panic!("not a UInt64: {s}")))
        .collect()
}

/// Hash `rows` random keys made of `cols` on the server and in Rust;
/// panics listing the first mismatches.
async fn check_key(client: &ChClient, cols: &[Col], rows: usize, seed: u64) {
    let keys: Vec<KeyHash> = cols
        .iter()
        .map(|c| {
            let ty = parse_type(&c.ty).expect("type parses");
            KeyHash::for_type(&ty).unwrap_or_else(|| panic!("{} unsupported", c.ty))
        })
        .collect();
    let args: Vec<String> = (0..cols.len()).map(|i| format!("a{i}")).collect();
    let lambda_args = match args.len() {
        1 => args[0].clone(),
        _ => format!("({})", args.join(", ")),
    };
    let body: Vec<String> = cols
        .iter()
        .zip(&args)
        .map(|(c, a)| c.wrap.replace("{}", a))
        .collect();
    let head = format!(
        "SELECT arrayMap({lambda_args} -> cityHash64({}), ",
        body.join(", ")
    );
    let name = cols
        .iter()
        .map(|c| c.ty.as_str())
        .collect::<Vec<_>>()
        .join(", ");

    let mut rng = XorShift(seed);
    let mut mismatches = Vec::new();
    let mut done = 0;
    while done < rows {
        // One batch: per column an array literal, per row its RowBinary.
        let mut arrays = vec![String::from("["); cols.len()];
        let mut batch: Vec<(Vec<String>, Vec<u8>)> = Vec::new();
        while done < rows && arrays.iter().map(String::len).sum::<usize>() < MAX_QUERY_BYTES {
            let mut row = Vec::new();
            let mut sqls = Vec::new();
            for (c, array) in cols.iter().zip(&mut arrays) {
                let v = (c.gen)(&mut rng);
                if array.len() > 1 {
                    array.push(',');
                }
                array.push_str(&v.sql);
                row.extend_from_slice(&v.bytes);
                sqls.push(v.sql);
            }
            batch.push((sqls, row));
            done += 1;
        }
        let sql = format!("{head}{}])", arrays.join("], "));
        let tsv = retrying(&name, || client.fetch_text(&sql, "TSV")).await;
        let server = parse_hashes(&tsv);
        assert_eq!(server.len(), batch.len(), "{name}: one hash per row");
        for ((sqls, row), want) in batch.iter().zip(server) {
            let got = rust_key_hash(&keys, row);
            if got != want {
                mismatches.push(format!("cityHash64({sqls:?}): server {want}, rust {got}"));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{name}: {} of {rows} differ, e.g.:\n{}",
        mismatches.len(),
        mismatches[..mismatches.len().min(10)].join("\n")
    );
    eprintln!("{name}: {rows} keys match");
}

#[tokio::test]
async fn every_supported_type_matches_server() {
    for client in clients().await {
        every_supported_type_matches_server_on(&client).await;
    }
}

async fn every_supported_type_matches_server_on(client: &ChClient) {
    eprintln!("server version {}", client.version());
    for (i, c) in all_types().into_iter().enumerate() {
        check_key(
            client,
            &[c],
            ROWS_PER_TYPE,
            0x9e37_79b9_7f4a_7c15 ^ i as u64,
        )
        .await;
    }
}

#[tokio::test]
async fn multi_column_keys_match_server() {
    for client in clients().await {
        multi_column_keys_match_server_on(&client).await;
    }
}

async fn multi_column_keys_match_server_on(client: &ChClient) {
    let by_type = |ty: &str| -> Col {
        all_types()
            .into_iter()
            .find(|c| c.ty == ty)
            .unwrap_or_else(|| panic!("no generator for {ty}"))
    };
    let keys: &[&[&str]] = &[
        &["UInt32", "String"],
        &["String", "UInt32"],
        &["String", "Int8", "Float64"],
        &["Date", "FixedString(16)", "Int64", "DateTime"],
        &[ENUM16, "String", "String"],
        &["Float32", "UInt64", "FixedString(65)", "Int16", ENUM8],
    ];
    for (i, key) in keys.iter().enumerate() {
        let cols: Vec<Col> = key.iter().map(|ty| by_type(ty)).collect();
        check_key(
            client,
            &cols,
            ROWS_PER_KEY,
            0x2545_f491_4f6c_dd1d ^ i as u64,
        )
        .await;
    }
}

/// `LowCardinality` columns of a real table, filled with RowBinary rows;
/// the key types come from `describe`, as in production.
#[tokio::test]
async fn low_cardinality_columns_match_server() {
    for client in clients().await {
        low_cardinality_columns_match_server_on(&client).await;
    }
}

async fn low_cardinality_columns_match_server_on(client: &ChClient) {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let db = format!("spate_shard_hash_{}_{nanos}", std::process::id());
    // Before 19.3 LowCardinality needs the experimental flag; current
    // servers refuse LowCardinality(UInt64) unless asked (code 455).
    let flag = [("allow_experimental_low_cardinality_type", "1")];
    let suspicious = [("allow_suspicious_low_cardinality_types", "1")];
    let settings: &[(&str, &str)] = if client.features().low_cardinality_needs_experimental_flag {
        &flag
    } else {
        &suspicious
    };
    let create_db = format!("CREATE DATABASE {db}");
    retrying("create database", || client.execute(&create_db, &[])).await;
    let create = format!(
        "CREATE TABLE {db}.t (id UInt32, s LowCardinality(String), \
         fs LowCardinality(FixedString(8)), u LowCardinality(UInt64), i Int8) ENGINE = Memory"
    );
    retrying("create table", || client.execute(&create, settings)).await;
    let columns = retrying("describe", || client.describe(&db, "t")).await;
    let keys: Vec<KeyHash> = columns[1..]
        .iter()
        .map(|c| KeyHash::for_type(&c.ty).unwrap_or_else(|| panic!("{:?} unsupported", c.ty)))
        .collect();

    let gens: [Gen; 4] = [
        Box::new(string),
        Box::new(fixed(8)),
        Box::new(int(8, false)),
        Box::new(int(1, true)),
    ];
    let mut rng = XorShift(0xdead_beef_cafe_f00d);
    let mut body = Vec::new();
    let mut rows = Vec::new();
    for id in 0..ROWS_PER_KEY as u32 {
        body.extend_from_slice(&id.to_le_bytes());
        let vals: Vec<Vec<u8>> = gens.iter().map(|g| g(&mut rng).bytes).collect();
        vals.iter().for_each(|v| body.extend_from_slice(v));
        rows.push(vals);
    }
    let names: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
    client
        .insert(&db, "t", &names, "RowBinary", Bytes::from(body), &[])
        .await
        .expect("insert");

    let sql = format!(
        "SELECT cityHash64(s), cityHash64(fs), cityHash64(u), cityHash64(s, i, fs, u) \
         FROM {db}.t ORDER BY id"
    );
    let tsv = retrying("select", || client.fetch_text(&sql, "TSV")).await;
    let lines: Vec<&str> = tsv.lines().collect();
    assert_eq!(lines.len(), rows.len(), "one line per row");
    for (id, (line, vals)) in lines.iter().zip(&rows).enumerate() {
        let server: Vec<u64> = line
            .split('\t')
            .map(|h| h.parse().expect("UInt64"))
            .collect();
        let single = |k: usize| keys[k].hash(&vals[k]).expect("well-formed value");
        let row: Vec<u8> = [0, 3, 1, 2].iter().flat_map(|&k| vals[k].clone()).collect();
        let multi = rust_key_hash(&[keys[0], keys[3], keys[1], keys[2]], &row);
        assert_eq!(
            server,
            [single(0), single(1), single(2), multi],
            "row {id}: cityHash64(s), (fs), (u), (s, i, fs, u)"
        );
    }
    let drop_db = format!("DROP DATABASE {db}");
    retrying("drop database", || client.execute(&drop_db, &[])).await;
    eprintln!("LowCardinality: {} rows match", rows.len());
}
