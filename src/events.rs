//! Generated demo and benchmark events: deterministic JSON messages and the
//! ClickHouse columns they fill.
//!
//! Two schemas, chosen by name (`small`, `wide`):
//! - `small`: 10 fields, about 200 bytes, the demo's events
//!   ([`SMALL_COLUMNS`]);
//! - `wide`: 50 columns, about 1 KB, a mix of integers, floats, strings,
//!   low-cardinality strings, date-times, arrays and nullables
//!   ([`WIDE_COLUMNS`]).
//!
//! Event `i` is a pure function of `i`: `spate gen` produces them, and the
//! hot-path benchmark (`benches/hot_path.rs`) and the allocation test
//! (`tests/alloc_free_events.rs`) include this file by `#[path]`, so it
//! imports nothing from the crate and allocates only in the caller's
//! `String`.

// Shared by the binary, a benchmark and a test, each using part of it.
#![allow(dead_code)]
// `is_multiple_of` is newer than the workspace's rust-version (1.85).
#![allow(unknown_lints, clippy::manual_is_multiple_of)]

use std::fmt::Write as _;

/// Columns of the `small` schema: (name, ClickHouse type), in table order.
pub const SMALL_COLUMNS: &[(&str, &str)] = &[
    ("ts", "DateTime"),
    ("user_id", "UInt64"),
    ("event", "LowCardinality(String)"),
    ("country", "LowCardinality(String)"),
    ("value", "Float64"),
    ("duration_ms", "UInt32"),
    ("ok", "UInt8"),
    ("tags", "Array(String)"),
    ("session", "String"),
    ("page", "String"),
];

/// Columns of the `wide` schema: (name, ClickHouse type), in table order.
/// [`wide`] derives each value from its column's type.
pub const WIDE_COLUMNS: &[(&str, &str)] = &[
    ("ts", "DateTime"),
    ("user_id", "UInt64"),
    ("c02", "LowCardinality(String)"),
    ("c03", "Int32"),
    ("c04", "String"),
    ("c05", "Float64"),
    ("c06", "UInt8"),
    ("c07", "Nullable(UInt64)"),
    ("c08", "Array(String)"),
    ("c09", "UInt64"),
    ("c10", "LowCardinality(String)"),
    ("c11", "String"),
    ("c12", "Int32"),
    ("c13", "Float64"),
    ("c14", "DateTime"),
    ("c15", "Nullable(String)"),
    ("c16", "UInt8"),
    ("c17", "UInt32"),
    ("c18", "LowCardinality(String)"),
    ("c19", "String"),
    ("c20", "Float64"),
    ("c21", "Nullable(Int32)"),
    ("c22", "UInt64"),
    ("c23", "Array(String)"),
    ("c24", "Int32"),
    ("c25", "LowCardinality(String)"),
    ("c26", "String"),
    ("c27", "Nullable(Float64)"),
    ("c28", "UInt8"),
    ("c29", "DateTime"),
    ("c30", "Float64"),
    ("c31", "UInt64"),
    ("c32", "LowCardinality(Nullable(String))"),
    ("c33", "String"),
    ("c34", "Int32"),
    ("c35", "Nullable(DateTime)"),
    ("c36", "UInt32"),
    ("c37", "Float64"),
    ("c38", "String"),
    ("c39", "LowCardinality(String)"),
    ("c40", "UInt8"),
    ("c41", "Array(String)"),
    ("c42", "Nullable(String)"),
    ("c43", "UInt64"),
    ("c44", "Int32"),
    ("c45", "Float64"),
    ("c46", "String"),
    ("c47", "UInt32"),
    ("c48", "LowCardinality(String)"),
    ("c49", "Nullable(UInt32)"),
];

const EVENTS: [&str; 6] = ["view", "click", "purchase", "signup", "logout", "search"];
const TAGS: [&str; 5] = ["mobile", "web", "beta", "eu", "us"];
const COUNTRIES: [&str; 8] = ["DE", "US", "FR", "GB", "JP", "BR", "IN", "NL"];
const WORDS: [&str; 8] = [
    "chrome", "firefox", "safari", "android", "ios", "linux", "windows", "macos",
];

/// An event schema, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schema {
    /// 10 fields, about 200 bytes.
    Small,
    /// 50 columns, about 1 KB.
    Wide,
}

impl Schema {
    /// Every schema's name, in declaration order.
    pub const NAMES: [&'static str; 2] = ["small", "wide"];

    /// The schema called `name`.
    pub fn from_name(name: &str) -> Option<Schema> {
        match name {
            "small" => Some(Schema::Small),
            "wide" => Some(Schema::Wide),
            _ => None,
        }
    }

    /// The schema's name.
    pub fn name(self) -> &'static str {
        match self {
            Schema::Small => "small",
            Schema::Wide => "wide",
        }
    }

    /// The table columns the events fill: (name, ClickHouse type).
    pub fn columns(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Schema::Small => SMALL_COLUMNS,
            Schema::Wide => WIDE_COLUMNS,
        }
    }

    /// Append event `i` of this schema to `out`.
    pub fn write(self, i: u64, out: &mut String) {
        match self {
            Schema::Small => small(i, out),
            Schema::Wide => wide(i, out),
        }
    }
}

impl std::str::FromStr for Schema {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Schema::from_name(s).ok_or_else(|| {
            format!(
                "unknown event schema `{s}` (expected one of: {})",
                Schema::NAMES.join(", ")
            )
        })
    }
}

/// The `i`-th `small` event, about 200 bytes:
/// `{"ts":…,"user_id":…,"event":"…","country":"…","value":…,"duration_ms":…,"ok":…,"tags":[…],"session":"…","page":"…"}`.
pub fn small(i: u64, out: &mut String) {
    let ts = 1_700_000_000 + i / 100;
    let user = i.wrapping_mul(2_654_435_761) % 100_000;
    let kind = EVENTS[(i % EVENTS.len() as u64) as usize];
    let country = COUNTRIES[((i / 7) % COUNTRIES.len() as u64) as usize];
    let value = (i % 10_000) as f64 / 100.0;
    let duration = mix(i) % 5_000;
    let ok = u8::from(i % 10 != 0);
    let _ = write!(
        out,
        "{{\"ts\":{ts},\"user_id\":{user},\"event\":\"{kind}\",\"country\":\"{country}\",\"value\":{value},\"duration_ms\":{duration},\"ok\":{ok},\"tags\":[\"{}\",\"{}\"],\"session\":\"s-{:016x}\",\"page\":\"/products/{}/details?ref=campaign-{}\"}}",
        TAGS[(i % 5) as usize],
        TAGS[((i / 5) % 5) as usize],
        i.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        i % 977,
        i % 31
    );
}

/// The `i`-th `wide` event, about 1 KB: one member per [`WIDE_COLUMNS`]
/// entry, its value derived from the column's type, `i` and the column's
/// position (nullable columns are `null` in about a quarter of the events).
pub fn wide(i: u64, out: &mut String) {
    out.push('{');
    for (j, &(name, ty)) in WIDE_COLUMNS.iter().enumerate() {
        if j > 0 {
            out.push(',');
        }
        let _ = write!(out, "\"{name}\":");
        let x = mix(i.wrapping_mul(64).wrapping_add(j as u64));
        match name {
            "ts" => {
                let _ = write!(out, "{}", 1_700_000_000 + i / 100);
            }
            "user_id" => {
                let _ = write!(out, "{}", i.wrapping_mul(2_654_435_761) % 100_000);
            }
            _ => wide_value(ty, i, j, x, out),
        }
    }
    out.push('}');
}

/// One `wide` value of type `ty` (column `j`, event `i`, mixed bits `x`).
fn wide_value(ty: &str, i: u64, j: usize, x: u64, out: &mut String) {
    if let Some(inner) = ty
        .strip_prefix("Nullable(")
        .or_else(|| ty.strip_prefix("LowCardinality(Nullable("))
    {
        if x % 4 == 0 {
            out.push_str("null");
            return;
        }
        let inner = inner.trim_end_matches(')');
        let inner = if ty.starts_with("LowCardinality(") {
            "LowCardinality(String)"
        } else {
            inner
        };
        return wide_value(inner, i, j, x >> 2, out);
    }
    let _ = match ty {
        "UInt64" => write!(out, "{}", x % 10_000_000_000),
        "UInt32" => write!(out, "{}", x % 100_000),
        "UInt8" => write!(out, "{}", x % 256),
        "Int32" => write!(out, "{}", (x % 2_000_000) as i64 - 1_000_000),
        "Float64" => write!(out, "{}", (x % 1_000_000) as f64 / 100.0),
        "DateTime" => write!(
            out,
            "\"2024-{:02}-{:02} {:02}:{:02}:{:02}\"",
            x % 12 + 1,
            (x >> 8) % 28 + 1,
            (x >> 16) % 24,
            (x >> 24) % 60,
            (x >> 32) % 60
        ),
        "LowCardinality(String)" => {
            let set: &[&str] = match j % 3 {
                0 => &COUNTRIES,
                1 => &EVENTS,
                _ => &WORDS,
            };
            write!(out, "\"{}\"", set[(x % set.len() as u64) as usize])
        }
        "Array(String)" => {
            out.push('[');
            for k in 0..(x % 3 + 1) {
                if k > 0 {
                    out.push(',');
                }
                out.push('"');
                out.push_str(TAGS[((x >> (8 * k + 8)) % 5) as usize]);
                out.push('"');
            }
            out.push(']');
            Ok(())
        }
        // String: a few shapes of free text, one with a JSON escape.
        _ => match (j + i as usize) % 4 {
            0 => write!(out, "\"item-{:016x}-{:04}\"", x >> 16, x % 10_000),
            1 => write!(
                out,
                "\"/api/v2/orders/{}/lines?page={}&sort=created\"",
                x % 100_000,
                x % 17
            ),
            2 => write!(
                out,
                "\"Mozilla/5.0 (X11; {}) Gecko/20100101 build {}\"",
                WORDS[(x % 8) as usize],
                x % 1000
            ),
            _ => write!(
                out,
                "\"caf\\u00e9 au lait, \\\"{}\\\" #{}\"",
                WORDS[(x % 8) as usize],
                x % 100
            ),
        },
    };
}

/// SplitMix64's finaliser: well-spread bits from a counter.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(schema: Schema, i: u64) -> String {
        let mut s = String::new();
        schema.write(i, &mut s);
        s
    }

    #[test]
    fn events_are_json_objects_with_every_column() {
        for schema in [Schema::Small, Schema::Wide] {
            for i in [0, 1, 7, 123_457, 999_999, u64::from(u32::MAX) + 3] {
                let s = event(schema, i);
                let v: serde_json::Value = serde_json::from_str(&s)
                    .unwrap_or_else(|e| panic!("{} event {i}: {e}: {s}", schema.name()));
                let obj = v.as_object().expect("an object");
                let names: Vec<&str> = schema.columns().iter().map(|c| c.0).collect();
                let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
                let (mut names_sorted, mut keys_sorted) = (names.clone(), keys.clone());
                names_sorted.sort_unstable();
                keys_sorted.sort_unstable();
                assert_eq!(keys_sorted, names_sorted, "{} event {i}", schema.name());
            }
        }
    }

    #[test]
    fn sizes_are_in_range() {
        for (schema, range) in [(Schema::Small, 170..=240), (Schema::Wide, 850..=1200)] {
            let sizes: Vec<usize> = (0..2000).map(|i| event(schema, i).len()).collect();
            let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(
                range.contains(min) && range.contains(max),
                "{}: {min}..{max} bytes, expected within {range:?}",
                schema.name()
            );
        }
    }

    #[test]
    fn the_small_event_keeps_the_demo_fields() {
        let v: serde_json::Value = serde_json::from_str(&event(Schema::Small, 123_457)).unwrap();
        // 123457 % 6 == 1
        assert_eq!(v["event"], "click");
        assert_eq!(v["ts"], 1_700_000_000 + 1234);
        assert_eq!(v["value"], 34.57); // 123457 % 10000 / 100
        assert_eq!(v["tags"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn events_are_deterministic_and_vary_with_i() {
        for schema in [Schema::Small, Schema::Wide] {
            assert_eq!(event(schema, 42), event(schema, 42));
            assert_ne!(event(schema, 42), event(schema, 43));
        }
    }

    #[test]
    fn wide_values_have_their_column_types() {
        let mut nulls = 0;
        for i in 0..200 {
            let v: serde_json::Value = serde_json::from_str(&event(Schema::Wide, i)).unwrap();
            for &(name, ty) in WIDE_COLUMNS {
                let x = &v[name];
                if x.is_null() {
                    assert!(ty.contains("Nullable"), "{name} {ty} is null");
                    nulls += 1;
                    continue;
                }
                let t = ty
                    .trim_start_matches("LowCardinality(")
                    .trim_start_matches("Nullable(");
                let ok = match t {
                    t if t.starts_with("UInt") => x.is_u64(),
                    t if t.starts_with("Int32") => x.is_i64(),
                    t if t.starts_with("Float64") => x.is_number(),
                    t if t.starts_with("Array") => x.is_array(),
                    // `ts` is epoch seconds, the others are text.
                    t if t.starts_with("DateTime") => x.is_u64() || x.is_string(),
                    _ => x.is_string(),
                };
                assert!(ok, "{name} {ty}: {x}");
            }
        }
        assert!(nulls > 0, "no nullable column was ever null");
    }

    #[test]
    fn schemas_parse_by_name() {
        for name in Schema::NAMES {
            assert_eq!(name.parse::<Schema>().unwrap().name(), name);
        }
        assert!("medium".parse::<Schema>().is_err());
    }
}
