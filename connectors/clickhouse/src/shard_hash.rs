//! ClickHouse's `cityHash64(k1, k2, ...)`, computed from RowBinary bytes.
//!
//! Owns [`KeyHash`] (how one key column is hashed), [`combine`],
//! [`city_hash64`] and [`int_hash64`]. Pure and synchronous, no allocation:
//! a lane thread hashes the key columns of each encoded row to pick the shard
//! exactly as a `Distributed` table with `sharding_key = cityHash64(...)`
//! would. Start-up code calls [`KeyHash::for_type`] once per key column and
//! reports "unsupported shard key type" on `None`.
//!
//! # Parity with ClickHouse
//!
//! What `cityHash64` does, per argument (`FunctionsHashing.h`):
//! - fixed-width values (`(U)Int8..64`, `Float32/64`, `Date` = UInt16 days,
//!   `DateTime` = UInt32 seconds, `Enum8/16` = Int8/16):
//!   `intHash64(bit_cast<UInt64>(v))`. The bit cast copies the value's bytes
//!   into a zeroed `UInt64`, so narrow values are **zero**-extended whatever
//!   their sign (`Int8(-1)` hashes as `UInt8(255)`) and floats hash their IEEE
//!   bits (`-0.0` and `0.0` differ, NaN payloads matter). `intHash64` is
//!   the SQL function: murmur3 `fmix64` of `x ^ 0x4CF2D2BAAE6DA887`;
//! - `String` and `FixedString(N)`: CityHash64 v1.0.2 of the bytes (all `N`
//!   bytes for `FixedString`, trailing NULs included);
//! - `LowCardinality(T)`: as `T`;
//! - several arguments: the first argument's hash, then
//!   `h = Hash128to64(uint128(low = h, high = next))` for each next one.
//!
//! Rejected ([`KeyHash::for_type`] returns `None`): `Nullable` and
//! `LowCardinality(Nullable)` (the hash is `NULL` for a null key); `Array`
//! and `Tuple` (their elements are folded into the running hash one by one,
//! which a per-column hash cannot express); `UUID` and `Decimal*` (18.16
//! refuses them: "Unexpected type ... of argument of function cityHash64");
//! `(U)Int128`, `DateTime64`, `Bool`, `IPv4/6`, `Map`, `Nothing` (absent
//! from 18.16 or not hashable there, so parity cannot be checked).
//!
//! Verified against ClickHouse 18.16.1: the constant tables in the unit
//! tests below (every string length 0..=130 and longer ones, edge values of
//! every type) and `tests/shard_hash_server.rs` (run with
//! `SPATE_TEST_CLICKHOUSE_URL` set), which compares thousands of
//! pseudo-random values per supported type, multi-column keys and
//! `LowCardinality` columns of a real table with the server's answers.

use crate::rowbinary::leb128;

/// How one key column's RowBinary bytes are hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyHash {
    /// A fixed-width value of `width` (1, 2, 4 or 8) little-endian bytes:
    /// integers of either sign, floats, `Date`, `DateTime`, `Enum8/16`.
    /// Hashed as `intHash64` of the bytes zero-extended to 64 bits.
    Bits {
        /// Bytes per value.
        width: u8,
    },
    /// `String`: LEB128 length + bytes; CityHash64 of the bytes.
    String,
    /// `FixedString(N)`: exactly `N` bytes; CityHash64 of all of them.
    FixedString(usize),
}

impl KeyHash {
    /// The hashing of a column of type `ty`, or `None` if spate cannot hash
    /// it exactly like ClickHouse (see the module doc).
    #[must_use]
    pub fn for_type(ty: &crate::types::ChType) -> Option<KeyHash> {
        use crate::types::ChType as T;
        let width = match ty {
            T::UInt8 | T::Int8 | T::Enum8(_) => 1,
            T::UInt16 | T::Int16 | T::Enum16(_) | T::Date => 2,
            T::UInt32 | T::Int32 | T::Float32 | T::DateTime(_) => 4,
            T::UInt64 | T::Int64 | T::Float64 => 8,
            T::String => return Some(KeyHash::String),
            T::FixedString(n) if *n > 0 => return Some(KeyHash::FixedString(*n)),
            T::LowCardinality(inner) if !matches!(**inner, T::Nullable(_)) => {
                return KeyHash::for_type(inner)
            }
            _ => return None,
        };
        Some(KeyHash::Bits { width })
    }

    /// ClickHouse's `cityHash64` of one value, given exactly that value's
    /// RowBinary encoding; `None` if `bytes` is malformed (wrong length,
    /// bad varint, trailing bytes).
    #[must_use]
    pub fn hash(self, bytes: &[u8]) -> Option<u64> {
        if self.encoded_len(bytes)? != bytes.len() {
            return None;
        }
        Some(match self {
            KeyHash::Bits { .. } => {
                let mut word = [0u8; 8];
                word[..bytes.len()].copy_from_slice(bytes);
                int_hash64(u64::from_le_bytes(word))
            }
            KeyHash::String => {
                let (_, header) = read_varint(bytes)?;
                city_hash64(&bytes[header..])
            }
            KeyHash::FixedString(_) => city_hash64(bytes),
        })
    }

    /// How many bytes at the start of `row_tail` belong to this column's
    /// RowBinary value, or `None` if `row_tail` is truncated (or the width
    /// is not 1, 2, 4 or 8).
    #[must_use]
    pub fn encoded_len(self, row_tail: &[u8]) -> Option<usize> {
        let len = match self {
            KeyHash::Bits {
                width: w @ (1 | 2 | 4 | 8),
            } => usize::from(w),
            KeyHash::Bits { .. } => return None,
            KeyHash::String => {
                let (n, header) = read_varint(row_tail)?;
                header.checked_add(usize::try_from(n).ok()?)?
            }
            KeyHash::FixedString(n) => n,
        };
        (len <= row_tail.len()).then_some(len)
    }
}

/// An unsigned LEB128 varint at the start of `b`: (value, bytes used).
fn read_varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut pos = 0;
    leb128::read(b, &mut pos).ok().map(|n| (n, pos))
}

/// Fold the hash of the next `cityHash64` argument into the hash so far:
/// `Hash128to64(uint128(low = prev, high = next))`.
#[must_use]
pub fn combine(prev: u64, next: u64) -> u64 {
    hash_len16(prev, next)
}

/// ClickHouse's SQL `intHash64` (`IntHash64Impl::apply`): the murmur3
/// `fmix64` finaliser of `x ^ 0x4CF2D2BAAE6DA887` (a fixed seed; bare
/// `fmix64` would map 0 to 0).
#[must_use]
pub fn int_hash64(x: u64) -> u64 {
    let mut x = x ^ 0x4cf2_d2ba_ae6d_a887;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

const K0: u64 = 0xc3a5_c85c_97cb_3127;
const K1: u64 = 0xb492_b66f_be98_f273;
const K2: u64 = 0x9ae1_6a3b_2f90_404f;
const K3: u64 = 0xc949_d7c7_509e_6557;
const K_MUL: u64 = 0x9ddf_ea08_eb38_2d69;

/// CityHash64 v1.0.2 (ClickHouse's bundled `CityHash_v1_0_2::CityHash64`).
#[must_use]
pub fn city_hash64(s: &[u8]) -> u64 {
    let len = s.len();
    match len {
        0..=16 => hash_len0to16(s),
        17..=32 => hash_len17to32(s),
        33..=64 => hash_len33to64(s),
        _ => hash_len65plus(s),
    }
}

fn fetch64(s: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&s[at..at + 8]);
    u64::from_le_bytes(b)
}

fn fetch32(s: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&s[at..at + 4]);
    u64::from(u32::from_le_bytes(b))
}

fn shift_mix(v: u64) -> u64 {
    v ^ (v >> 47)
}

/// `Hash128to64(uint128(low = u, high = v))`.
fn hash_len16(u: u64, v: u64) -> u64 {
    let a = shift_mix((u ^ v).wrapping_mul(K_MUL));
    let b = shift_mix((v ^ a).wrapping_mul(K_MUL));
    b.wrapping_mul(K_MUL)
}

fn hash_len0to16(s: &[u8]) -> u64 {
    let len = s.len();
    if len > 8 {
        let a = fetch64(s, 0);
        let b = fetch64(s, len - 8);
        // len is 9..=16: the rotation is never 0.
        hash_len16(a, b.wrapping_add(len as u64).rotate_right(len as u32)) ^ b
    } else if len >= 4 {
        let a = fetch32(s, 0);
        hash_len16(len as u64 + (a << 3), fetch32(s, len - 4))
    } else if len > 0 {
        let y = u64::from(s[0]) + (u64::from(s[len >> 1]) << 8);
        let z = len as u64 + (u64::from(s[len - 1]) << 2);
        shift_mix(y.wrapping_mul(K2) ^ z.wrapping_mul(K3)).wrapping_mul(K2)
    } else {
        K2
    }
}

fn hash_len17to32(s: &[u8]) -> u64 {
    let len = s.len();
    let a = fetch64(s, 0).wrapping_mul(K1);
    let b = fetch64(s, 8);
    let c = fetch64(s, len - 8).wrapping_mul(K2);
    let d = fetch64(s, len - 16).wrapping_mul(K0);
    hash_len16(
        a.wrapping_sub(b)
            .rotate_right(43)
            .wrapping_add(c.rotate_right(30))
            .wrapping_add(d),
        a.wrapping_add((b ^ K3).rotate_right(20))
            .wrapping_sub(c)
            .wrapping_add(len as u64),
    )
}

/// Quick and dirty 16-byte hash of `s[at..at + 32]`, `a` and `b`.
fn weak_hash_len32_with_seeds(s: &[u8], at: usize, a: u64, b: u64) -> (u64, u64) {
    let (w, x, y, z) = (
        fetch64(s, at),
        fetch64(s, at + 8),
        fetch64(s, at + 16),
        fetch64(s, at + 24),
    );
    let a = a.wrapping_add(w);
    let b = b.wrapping_add(a).wrapping_add(z).rotate_right(21);
    let c = a;
    let a = a.wrapping_add(x).wrapping_add(y);
    let b = b.wrapping_add(a.rotate_right(44));
    (a.wrapping_add(z), b.wrapping_add(c))
}

fn hash_len33to64(s: &[u8]) -> u64 {
    let len = s.len();
    let mut z = fetch64(s, 24);
    let mut a = fetch64(s, 0).wrapping_add(
        (len as u64)
            .wrapping_add(fetch64(s, len - 16))
            .wrapping_mul(K0),
    );
    let mut b = a.wrapping_add(z).rotate_right(52);
    let mut c = a.rotate_right(37);
    a = a.wrapping_add(fetch64(s, 8));
    c = c.wrapping_add(a.rotate_right(7));
    a = a.wrapping_add(fetch64(s, 16));
    let vf = a.wrapping_add(z);
    let vs = b.wrapping_add(a.rotate_right(31)).wrapping_add(c);
    a = fetch64(s, 16).wrapping_add(fetch64(s, len - 32));
    z = fetch64(s, len - 8);
    b = a.wrapping_add(z).rotate_right(52);
    c = a.rotate_right(37);
    a = a.wrapping_add(fetch64(s, len - 24));
    c = c.wrapping_add(a.rotate_right(7));
    a = a.wrapping_add(fetch64(s, len - 16));
    let wf = a.wrapping_add(z);
    let ws = b.wrapping_add(a.rotate_right(31)).wrapping_add(c);
    let r = shift_mix(
        vf.wrapping_add(ws)
            .wrapping_mul(K2)
            .wrapping_add(wf.wrapping_add(vs).wrapping_mul(K0)),
    );
    shift_mix(r.wrapping_mul(K0).wrapping_add(vs)).wrapping_mul(K2)
}

/// More than 64 bytes: hash the last 64 bytes into the state first, then
/// every whole 64-byte chunk before them (the last chunk, whole or not,
/// only through that initial state).
fn hash_len65plus(s: &[u8]) -> u64 {
    let len = s.len();
    let mut x = fetch64(s, 0);
    let mut y = fetch64(s, len - 16) ^ K1;
    let mut z = fetch64(s, len - 56) ^ K0;
    let mut v = weak_hash_len32_with_seeds(s, len - 64, len as u64, y);
    let mut w = weak_hash_len32_with_seeds(s, len - 32, (len as u64).wrapping_mul(K1), K0);
    z = z.wrapping_add(shift_mix(v.1).wrapping_mul(K1));
    x = z.wrapping_add(x).rotate_right(39).wrapping_mul(K1);
    y = y.rotate_right(33).wrapping_mul(K1);
    // The C code rounds `len - 1` down to a multiple of 64.
    for at in (0..(len - 1) / 64).map(|i| i * 64) {
        x = x
            .wrapping_add(y)
            .wrapping_add(v.0)
            .wrapping_add(fetch64(s, at + 16))
            .rotate_right(37)
            .wrapping_mul(K1);
        y = y
            .wrapping_add(v.1)
            .wrapping_add(fetch64(s, at + 48))
            .rotate_right(42)
            .wrapping_mul(K1);
        x ^= w.1;
        y ^= v.0;
        z = (z ^ w.0).rotate_right(33);
        v = weak_hash_len32_with_seeds(s, at, v.1.wrapping_mul(K1), x.wrapping_add(w.0));
        w = weak_hash_len32_with_seeds(s, at + 32, z.wrapping_add(w.1), y);
        std::mem::swap(&mut z, &mut x);
    }
    hash_len16(
        hash_len16(v.0, w.0)
            .wrapping_add(shift_mix(y).wrapping_mul(K1))
            .wrapping_add(z),
        hash_len16(v.1, w.1).wrapping_add(x),
    )
}

#[cfg(test)]
mod tests {
    //! Expected values come from a ClickHouse 18.16.1 server; each table
    //! names the SELECT that produced it.

    use super::*;
    use crate::types::{parse_type, ChType as T};

    /// One key column: its type as `system.columns` prints it, and a value's
    /// RowBinary bytes.
    type KeyCol<'a> = (&'a str, &'a [u8]);

    fn key(ty: &str) -> KeyHash {
        let ty = parse_type(ty).expect("type parses");
        KeyHash::for_type(&ty).unwrap_or_else(|| panic!("{ty:?} unsupported"))
    }

    /// RowBinary `String`: LEB128 length, then the bytes.
    fn rb_string(s: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(s.len() + 10);
        let mut n = s.len() as u64;
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
        out.extend_from_slice(s);
        out
    }

    /// `cityHash64(cols...)` of one row's key columns, the way a caller
    /// computes it.
    fn key_hash(cols: &[KeyCol]) -> u64 {
        cols.iter()
            .map(|&(ty, bytes)| key(ty).hash(bytes).expect("well-formed value"))
            .reduce(combine)
            .expect("at least one column")
    }

    /// `abcdefghijabcdefghij...`, `n` bytes.
    fn prefix(n: usize) -> Vec<u8> {
        b"abcdefghij".iter().copied().cycle().take(n).collect()
    }

    #[test]
    fn single_values_match_server() {
        for &(expr, ty, bytes, want) in SINGLE {
            let kh = key(ty);
            assert_eq!(kh.encoded_len(bytes), Some(bytes.len()), "{expr}");
            assert_eq!(kh.hash(bytes), Some(want), "cityHash64({expr})");
        }
    }

    #[test]
    fn strings_of_every_length_match_server() {
        let long = LONG_PREFIX_HASHES.iter().copied();
        for (n, want) in PREFIX_HASHES.iter().copied().enumerate().chain(long) {
            let s = prefix(n);
            assert_eq!(city_hash64(&s), want, "city_hash64 of {n} bytes");
            let rb = rb_string(&s);
            assert_eq!(KeyHash::String.hash(&rb), Some(want), "String({n})");
            if n > 0 {
                let fixed = KeyHash::FixedString(n);
                assert_eq!(fixed.hash(&s), Some(want), "FixedString({n})");
            }
        }
    }

    #[test]
    fn multi_column_keys_match_server() {
        for &(args, cols, want) in MULTI {
            assert_eq!(key_hash(cols), want, "cityHash64({args})");
        }
    }

    #[test]
    fn combine_is_hash128to64_low_then_high() {
        // cityHash64(toUInt8(1), toUInt8(2)) = 463667963421364848 (server).
        assert_eq!(combine(int_hash64(1), int_hash64(2)), 463667963421364848);
        assert_ne!(combine(int_hash64(2), int_hash64(1)), 463667963421364848);
    }

    #[test]
    fn int_hash64_matches_server() {
        for &(x, want) in INT_HASH64 {
            assert_eq!(int_hash64(x), want, "intHash64({x:#x})");
        }
    }

    /// A `LowCardinality` column of a real table (18.16 refuses a constant
    /// one): `CREATE TABLE t (s LowCardinality(String), u UInt32,
    /// lu LowCardinality(UInt32)) ENGINE = Memory` holding `('abc', 1, 1)`,
    /// `SELECT cityHash64(s), cityHash64(lu), cityHash64(s, u) FROM t`
    /// (with `allow_experimental_low_cardinality_type = 1`).
    #[test]
    fn low_cardinality_hashes_as_inner_type() {
        assert_eq!(key("LowCardinality(String)"), KeyHash::String);
        assert_eq!(key("LowCardinality(UInt32)"), KeyHash::Bits { width: 4 });
        let key_s = [("LowCardinality(String)", &b"\x03abc"[..])];
        assert_eq!(key_hash(&key_s), 4220206313085259313);
        let key_lu = [("LowCardinality(UInt32)", &1u32.to_le_bytes()[..])];
        assert_eq!(key_hash(&key_lu), 10577349846663553072);
        let key_su = [key_s[0], ("UInt32", &1u32.to_le_bytes()[..])];
        assert_eq!(key_hash(&key_su), 11074140453807316247);
    }

    #[test]
    fn rejects_types_without_exact_parity() {
        for ty in [
            "Nullable(String)",
            "Nullable(UInt64)",
            "LowCardinality(Nullable(String))",
            "Array(UInt32)",
            "Tuple(UInt32, String)",
            "UUID",
            "Decimal(9, 2)",
            "UInt128",
            "Int128",
            "DateTime64(3)",
            "Bool",
            "IPv4",
            "IPv6",
            "Map(String, UInt64)",
            "Nothing",
        ] {
            let parsed = parse_type(ty).expect("type parses");
            assert_eq!(KeyHash::for_type(&parsed), None, "{ty}");
        }
        assert_eq!(KeyHash::for_type(&T::FixedString(0)), None);
    }

    #[test]
    fn rejects_malformed_and_truncated_values() {
        let u32_ = KeyHash::Bits { width: 4 };
        assert_eq!(u32_.hash(&[1, 2, 3]), None);
        assert_eq!(u32_.hash(&[1, 2, 3, 4, 5]), None);
        assert_eq!(u32_.encoded_len(&[1, 2, 3]), None);
        assert_eq!(u32_.encoded_len(&[1, 2, 3, 4, 5]), Some(4));
        assert_eq!(KeyHash::Bits { width: 3 }.hash(&[1, 2, 3]), None);
        assert_eq!(KeyHash::Bits { width: 0 }.encoded_len(&[]), None);

        let s = KeyHash::String;
        assert_eq!(s.encoded_len(b"\x03ab"), None, "truncated body");
        assert_eq!(s.encoded_len(&[]), None, "missing length");
        assert_eq!(s.encoded_len(&[0x80]), None, "unterminated varint");
        assert_eq!(s.encoded_len(&[0xff; 11]), None, "varint past 64 bits");
        assert_eq!(s.encoded_len(b"\x03abc!"), Some(4), "next column follows");
        assert_eq!(s.hash(b"\x03abc!"), None, "trailing byte");
        let long = rb_string(&[b'x'; 200]);
        assert_eq!(&long[..2], &[0xc8, 0x01], "two-byte length");
        assert_eq!(s.encoded_len(&long), Some(202));

        let f = KeyHash::FixedString(3);
        assert_eq!(f.encoded_len(b"ab"), None);
        assert_eq!(f.encoded_len(b"abcd"), Some(3));
        assert_eq!(f.hash(b"abcd"), None);
    }

    /// `(expr, type, RowBinary bytes, h)`: `SELECT cityHash64(expr)` returned `h`.
    const SINGLE: &[(&str, &str, &[u8], u64)] = &[
        ("toUInt8('0')", "UInt8", &0u8.to_le_bytes(), 4761183170873013810),
        ("toUInt8('1')", "UInt8", &1u8.to_le_bytes(), 10577349846663553072),
        ("toUInt8('127')", "UInt8", &127u8.to_le_bytes(), 6947037243239945742),
        ("toUInt8('128')", "UInt8", &128u8.to_le_bytes(), 10573636647639147473),
        ("toUInt8('255')", "UInt8", &255u8.to_le_bytes(), 8055013221972926055),
        ("toInt8('0')", "Int8", &0i8.to_le_bytes(), 4761183170873013810),
        ("toInt8('1')", "Int8", &1i8.to_le_bytes(), 10577349846663553072),
        ("toInt8('-1')", "Int8", &(-1i8).to_le_bytes(), 8055013221972926055),
        ("toInt8('-128')", "Int8", &(-128i8).to_le_bytes(), 10573636647639147473),
        ("toInt8('127')", "Int8", &127i8.to_le_bytes(), 6947037243239945742),
        ("toUInt16('0')", "UInt16", &0u16.to_le_bytes(), 4761183170873013810),
        ("toUInt16('1')", "UInt16", &1u16.to_le_bytes(), 10577349846663553072),
        ("toUInt16('32768')", "UInt16", &32768u16.to_le_bytes(), 11349277977595110966),
        ("toUInt16('65535')", "UInt16", &65535u16.to_le_bytes(), 6547939410751295652),
        ("toInt16('0')", "Int16", &0i16.to_le_bytes(), 4761183170873013810),
        ("toInt16('-1')", "Int16", &(-1i16).to_le_bytes(), 6547939410751295652),
        ("toInt16('-32768')", "Int16", &(-32768i16).to_le_bytes(), 11349277977595110966),
        ("toInt16('32767')", "Int16", &32767i16.to_le_bytes(), 16297833981631044619),
        ("toUInt32('0')", "UInt32", &0u32.to_le_bytes(), 4761183170873013810),
        ("toUInt32('1')", "UInt32", &1u32.to_le_bytes(), 10577349846663553072),
        ("toUInt32('2147483648')", "UInt32", &2147483648u32.to_le_bytes(), 6300953685602397207),
        ("toUInt32('4294967295')", "UInt32", &4294967295u32.to_le_bytes(), 9168733277332772950),
        ("toInt32('0')", "Int32", &0i32.to_le_bytes(), 4761183170873013810),
        ("toInt32('-1')", "Int32", &(-1i32).to_le_bytes(), 9168733277332772950),
        ("toInt32('-2147483648')", "Int32", &(-2147483648i32).to_le_bytes(), 6300953685602397207),
        ("toInt32('2147483647')", "Int32", &2147483647i32.to_le_bytes(), 11648569063521156533),
        ("toUInt64('0')", "UInt64", &0u64.to_le_bytes(), 4761183170873013810),
        ("toUInt64('1')", "UInt64", &1u64.to_le_bytes(), 10577349846663553072),
        ("toUInt64('9223372036854775808')", "UInt64", &9223372036854775808u64.to_le_bytes(), 7378616448805205431),
        ("toUInt64('18446744073709551615')", "UInt64", &18446744073709551615u64.to_le_bytes(), 14600443904207254319),
        ("toInt64('0')", "Int64", &0i64.to_le_bytes(), 4761183170873013810),
        ("toInt64('-1')", "Int64", &(-1i64).to_le_bytes(), 14600443904207254319),
        ("toInt64('-9223372036854775808')", "Int64", &(-9223372036854775808i64).to_le_bytes(), 7378616448805205431),
        ("toInt64('9223372036854775807')", "Int64", &9223372036854775807i64.to_le_bytes(), 16054072765933828340),
        ("reinterpretAsFloat32(unhex('00000000'))", "Float32", &0x00000000u32.to_le_bytes(), 4761183170873013810),
        ("reinterpretAsFloat32(unhex('00000080'))", "Float32", &0x80000000u32.to_le_bytes(), 6300953685602397207),
        ("reinterpretAsFloat32(unhex('0000c03f'))", "Float32", &0x3fc00000u32.to_le_bytes(), 17641193269776743632),
        ("reinterpretAsFloat32(unhex('0000c0bf'))", "Float32", &0xbfc00000u32.to_le_bytes(), 3400509885840320646),
        ("reinterpretAsFloat32(unhex('0000807f'))", "Float32", &0x7f800000u32.to_le_bytes(), 15903191845119072403),
        ("reinterpretAsFloat32(unhex('000080ff'))", "Float32", &0xff800000u32.to_le_bytes(), 12260595836058145864),
        ("reinterpretAsFloat32(unhex('0000c07f'))", "Float32", &0x7fc00000u32.to_le_bytes(), 1581281146772767095),
        ("reinterpretAsFloat32(unhex('ffff7f7f'))", "Float32", &0x7f7fffffu32.to_le_bytes(), 3153261347495239379),
        ("reinterpretAsFloat32(unhex('00008000'))", "Float32", &0x00800000u32.to_le_bytes(), 714067080950943179),
        ("reinterpretAsFloat32(unhex('01000000'))", "Float32", &0x00000001u32.to_le_bytes(), 10577349846663553072),
        ("toFloat32(1.5)", "Float32", &1.5f32.to_le_bytes(), 17641193269776743632),
        ("reinterpretAsFloat64(unhex('0000000000000000'))", "Float64", &0x0000000000000000u64.to_le_bytes(), 4761183170873013810),
        ("reinterpretAsFloat64(unhex('0000000000000080'))", "Float64", &0x8000000000000000u64.to_le_bytes(), 7378616448805205431),
        ("reinterpretAsFloat64(unhex('000000000000f83f'))", "Float64", &0x3ff8000000000000u64.to_le_bytes(), 7287324520655339053),
        ("reinterpretAsFloat64(unhex('000000000000f8bf'))", "Float64", &0xbff8000000000000u64.to_le_bytes(), 10416135296718872749),
        ("reinterpretAsFloat64(unhex('000000000000f07f'))", "Float64", &0x7ff0000000000000u64.to_le_bytes(), 538402171470004607),
        ("reinterpretAsFloat64(unhex('000000000000f0ff'))", "Float64", &0xfff0000000000000u64.to_le_bytes(), 9619585891926412536),
        ("reinterpretAsFloat64(unhex('000000000000f87f'))", "Float64", &0x7ff8000000000000u64.to_le_bytes(), 9287732440285194709),
        ("reinterpretAsFloat64(unhex('ffffffffffffef7f'))", "Float64", &0x7fefffffffffffffu64.to_le_bytes(), 15970585493671619163),
        ("reinterpretAsFloat64(unhex('9a9999999999b93f'))", "Float64", &0x3fb999999999999au64.to_le_bytes(), 1373127470233743201),
        ("reinterpretAsFloat64(unhex('0100000000000000'))", "Float64", &0x0000000000000001u64.to_le_bytes(), 10577349846663553072),
        ("toFloat64(-0.1)", "Float64", &(-0.1f64).to_le_bytes(), 13786276575118945339),
        ("CAST(toUInt16(0) AS Date)", "Date", &0u16.to_le_bytes(), 4761183170873013810),
        ("CAST(toUInt16(1) AS Date)", "Date", &1u16.to_le_bytes(), 10577349846663553072),
        ("CAST(toUInt16(18262) AS Date)", "Date", &18262u16.to_le_bytes(), 6817702824740635125),
        ("CAST(toUInt16(65535) AS Date)", "Date", &65535u16.to_le_bytes(), 6547939410751295652),
        ("toDate('2020-01-01')", "Date", &18262u16.to_le_bytes(), 6817702824740635125),
        ("toDateTime(toUInt32(0))", "DateTime", &0u32.to_le_bytes(), 4761183170873013810),
        ("toDateTime(toUInt32(1577836800))", "DateTime", &1577836800u32.to_le_bytes(), 1353083611880552204),
        ("toDateTime(toUInt32(4294967295))", "DateTime", &4294967295u32.to_le_bytes(), 9168733277332772950),
        ("toDateTime('2020-01-01 09:00:00', 'Asia/Tokyo')", "DateTime('Asia/Tokyo')", &1577836800u32.to_le_bytes(), 1353083611880552204),
        ("CAST('a' AS Enum8('a' = -128, 'b' = -1, 'c' = 0, 'd' = 127))", "Enum8('a' = -128, 'b' = -1, 'c' = 0, 'd' = 127)", &(-128i8).to_le_bytes(), 10573636647639147473),
        ("CAST('b' AS Enum8('a' = -128, 'b' = -1, 'c' = 0, 'd' = 127))", "Enum8('a' = -128, 'b' = -1, 'c' = 0, 'd' = 127)", &(-1i8).to_le_bytes(), 8055013221972926055),
        ("CAST('c' AS Enum8('a' = -128, 'b' = -1, 'c' = 0, 'd' = 127))", "Enum8('a' = -128, 'b' = -1, 'c' = 0, 'd' = 127)", &0i8.to_le_bytes(), 4761183170873013810),
        ("CAST('d' AS Enum8('a' = -128, 'b' = -1, 'c' = 0, 'd' = 127))", "Enum8('a' = -128, 'b' = -1, 'c' = 0, 'd' = 127)", &127i8.to_le_bytes(), 6947037243239945742),
        ("CAST('a' AS Enum16('a' = -32768, 'b' = -1, 'c' = 0, 'd' = 1000, 'e' = 32767))", "Enum16('a' = -32768, 'b' = -1, 'c' = 0, 'd' = 1000, 'e' = 32767)", &(-32768i16).to_le_bytes(), 11349277977595110966),
        ("CAST('b' AS Enum16('a' = -32768, 'b' = -1, 'c' = 0, 'd' = 1000, 'e' = 32767))", "Enum16('a' = -32768, 'b' = -1, 'c' = 0, 'd' = 1000, 'e' = 32767)", &(-1i16).to_le_bytes(), 6547939410751295652),
        ("CAST('c' AS Enum16('a' = -32768, 'b' = -1, 'c' = 0, 'd' = 1000, 'e' = 32767))", "Enum16('a' = -32768, 'b' = -1, 'c' = 0, 'd' = 1000, 'e' = 32767)", &0i16.to_le_bytes(), 4761183170873013810),
        ("CAST('d' AS Enum16('a' = -32768, 'b' = -1, 'c' = 0, 'd' = 1000, 'e' = 32767))", "Enum16('a' = -32768, 'b' = -1, 'c' = 0, 'd' = 1000, 'e' = 32767)", &1000i16.to_le_bytes(), 11665508437937700255),
        ("CAST('e' AS Enum16('a' = -32768, 'b' = -1, 'c' = 0, 'd' = 1000, 'e' = 32767))", "Enum16('a' = -32768, 'b' = -1, 'c' = 0, 'd' = 1000, 'e' = 32767)", &32767i16.to_le_bytes(), 16297833981631044619),
        ("''", "String", b"\x00", 11160318154034397263),
        ("'a'", "String", b"\x01a", 2603192927274642682),
        ("'Привет, мир! 🦀'", "String", b"\x1a\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82, \xd0\xbc\xd0\xb8\xd1\x80! \xf0\x9f\xa6\x80", 14632472455961742356),
        ("unhex('00ff80')", "String", b"\x03\x00\xff\x80", 3480784964629719458),
        ("'0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0'", "String", b"A0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0", 1209453134053511105),
        ("toFixedString('a', 1)", "FixedString(1)", b"a", 2603192927274642682),
        ("toFixedString('ab', 5)", "FixedString(5)", b"ab\x00\x00\x00", 868344072935674465),
        ("toFixedString('', 5)", "FixedString(5)", b"\x00\x00\x00\x00\x00", 10760515569599078033),
        ("toFixedString('0123456789abcdef', 16)", "FixedString(16)", b"0123456789abcdef", 692747204941329175),
        ("toFixedString('abcdefghijklmnopqrst', 20)", "FixedString(20)", b"abcdefghijklmnopqrst", 6597918609636401574),
        ("toFixedString(arrayStringConcat(arrayMap(x -> 'y', range(100))), 100)", "FixedString(100)", &[b'y'; 100], 10592969210838759155),
    ];

    /// `(args, [(type, RowBinary bytes)], h)`: `SELECT cityHash64(args)` returned `h`.
    const MULTI: &[(&str, &[KeyCol], u64)] = &[
        ("toUInt8(1), toUInt8(2)", &[("UInt8", &1u8.to_le_bytes()), ("UInt8", &2u8.to_le_bytes())], 463667963421364848),
        ("toUInt32(1), 'abc'", &[("UInt32", &1u32.to_le_bytes()), ("String", b"\x03abc")], 10016680650033117268),
        ("'abc', toUInt32(1)", &[("String", b"\x03abc"), ("UInt32", &1u32.to_le_bytes())], 11074140453807316247),
        ("toInt8(-1), 'x'", &[("Int8", &(-1i8).to_le_bytes()), ("String", b"\x01x")], 15754791874440431685),
        ("'', ''", &[("String", b"\x00"), ("String", b"\x00")], 857056678345777455),
        ("'a', 'b', 'c'", &[("String", b"\x01a"), ("String", b"\x01b"), ("String", b"\x01c")], 9684406651005280037),
        ("toDate('2020-01-01'), toFixedString('key', 8), toInt64(-5)", &[("Date", &18262u16.to_le_bytes()), ("FixedString(8)", b"key\x00\x00\x00\x00\x00"), ("Int64", &(-5i64).to_le_bytes())], 9637874018888589781),
        ("toFloat64(2.5), CAST('b' AS Enum8('a' = -128, 'b' = -1, 'c' = 0, 'd' = 127)), 'the quick brown fox jumps over the lazy dog'", &[("Float64", &2.5f64.to_le_bytes()), ("Enum8('a' = -128, 'b' = -1, 'c' = 0, 'd' = 127)", &(-1i8).to_le_bytes()), ("String", b"+the quick brown fox jumps over the lazy dog")], 10545790562870150028),
        ("toDateTime(toUInt32(1577836800)), toUInt64('18446744073709551615'), toFloat32(-0.5)", &[("DateTime", &1577836800u32.to_le_bytes()), ("UInt64", &18446744073709551615u64.to_le_bytes()), ("Float32", &(-0.5f32).to_le_bytes())], 3738883936898072020),
    ];

    /// `SELECT number, cityHash64(substring(arrayStringConcat(arrayMap(x -> 'abcdefghij',
    /// range(200))), 1, number)) FROM system.numbers LIMIT 131` (18.16 has no `repeat`).
    const PREFIX_HASHES: [u64; 131] = [
        11160318154034397263,
        2603192927274642682,
        1725057946192985918,
        4220206313085259313,
        17823623939509273229,
        10649408139150141320,
        18226839071476555706,
        9365486912795408122,
        4864636163090995991,
        7406163328168016081,
        13358420144953240196,
        12058019667915820982,
        1937058068027667849,
        16341753808733081819,
        16049076291730236531,
        8479328655050613482,
        18089622749666649582,
        9577248983733867099,
        13421811169317108226,
        2526507387773800923,
        10355273566600941178,
        16831315507008593905,
        1762474743332343011,
        3113634351892819589,
        10313707709045939262,
        10189493260704227450,
        9980279392511741684,
        2868243705904269143,
        16171229938708229298,
        2590377340231094300,
        13787974339054030544,
        11212298337722168277,
        4263644337190170156,
        2417081383799599133,
        5315869960216412321,
        7819694702564368318,
        6708885752885380285,
        12836501135867361578,
        15901587704246367376,
        2886919789167503559,
        16246004320339951822,
        2754294214363811276,
        3233442971802819722,
        17639201906412343952,
        13375350600541818230,
        6778595908391590854,
        16761953189165704263,
        7965366230162316730,
        5524648551571565823,
        9791430784650268913,
        15453354826270834053,
        177094999067144958,
        3894553120377832931,
        1509058380299116746,
        2550486068988764382,
        1652321294410843000,
        11668277397580314511,
        14035998171335076775,
        3595187812420814216,
        7022187536078947232,
        18245823129196777568,
        7194374143967602037,
        2007086697330206647,
        1018935964331179782,
        14529111741231865234,
        3198888735405421256,
        4169793611541142876,
        11576016001099504552,
        6361413083064026033,
        16849326246508223753,
        602342293046596849,
        3594304576431573740,
        6786226259412594702,
        10701174051250623263,
        8362869066002832275,
        11339626099632624538,
        5238484095177583814,
        1200593594174305773,
        12580227151950943794,
        16052707026737299825,
        1018335565617929917,
        2944680295455446823,
        14237161876978172994,
        14195053465060007848,
        9045633374177177289,
        15659275858786275955,
        12221264134918429522,
        5349171292232148285,
        12640188165878652450,
        7924114684023915780,
        1759775956866301024,
        16878647243365412844,
        7005318731815589290,
        12801063308148183541,
        12418907399813173110,
        10862069263818295609,
        17491178798414751483,
        10695279363382083663,
        11847448251459591234,
        3121841949599281494,
        18232264794541548454,
        2783468724440849628,
        6931423237554845468,
        10049261878561601639,
        5230324876214088276,
        4123981778597778900,
        4266874905401427032,
        17976717347111360484,
        14285191058111718099,
        1666052106585588064,
        8521747661461949100,
        5881294273674657029,
        14509997130464223608,
        7373635278945096853,
        9961198789479679458,
        2381093330225251998,
        1173645229600636916,
        10928442824659304667,
        14018763795598909790,
        11221982865402926206,
        7156213025469676401,
        372412608716411246,
        17703738501658354517,
        568131808466997195,
        13540254228534087366,
        11330699193875358325,
        15743057955420666743,
        4689195323684511033,
        7152101300208859610,
        15766828465928903160,
        14725315219927051820,
    ];
    /// As [`PREFIX_HASHES`], `WHERE number IN (...)`.
    const LONG_PREFIX_HASHES: &[(usize, u64)] = &[
        (191, 9469967085224468947),
        (192, 9075320588627763387),
        (193, 1614309588658989101),
        (255, 6109599841507103123),
        (256, 12669749099692876044),
        (257, 16831312822252996581),
        (1000, 14919354632756233844),
        (2000, 16022648138309434993),
    ];
    /// `SELECT intHash64(toUInt64(x))`.
    const INT_HASH64: &[(u64, u64)] = &[
        (0x0, 4761183170873013810),
        (0x1, 10577349846663553072),
        (0xff, 8055013221972926055),
        (0xffff, 6547939410751295652),
        (0xffffffff, 9168733277332772950),
        (0x8000000000000000, 7378616448805205431),
        (0xffffffffffffffff, 14600443904207254319),
        (0x123456789abcdef, 6754740165898618715),
    ];
}
