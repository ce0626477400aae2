//! Exact number parsing from JSON text: integers, floats and decimals.
//!
//! Everything works on the raw bytes of a JSON number (or the content of a
//! JSON string); nothing goes through `f64` unless the target is a float.

/// Parse an integer: optional sign, digits, and an optional fraction made
/// only of zeros (`5.0`). Exponents are rejected. Returns `None` on bad
/// syntax or overflow of `i128`.
pub(crate) fn parse_i128(s: &[u8]) -> Option<i128> {
    if let Some(v) = parse_plain_int(s) {
        return Some(v);
    }
    let (neg, digits) = split_sign(s);
    let int = int_part(digits)?;
    let mut v: i128 = 0;
    // Negative numbers accumulate downwards: i128::MIN has no positive
    // counterpart.
    for &c in int {
        let d = i128::from(c - b'0');
        v = v.checked_mul(10)?;
        v = if neg {
            v.checked_sub(d)?
        } else {
            v.checked_add(d)?
        };
    }
    Some(v)
}

/// The common case of [`parse_i128`] in one pass: an optional `-` and 1 to
/// 19 digits (always within `u64`), nothing else; `None` sends anything
/// else (a `+`, a fraction, more digits, junk) to the general parser.
#[inline]
fn parse_plain_int(s: &[u8]) -> Option<i128> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in digits {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + u64::from(d);
    }
    let v = i128::from(v);
    Some(if neg { -v } else { v })
}

/// Like [`parse_i128`] for the `u128` range (no minus sign allowed except
/// for zero).
pub(crate) fn parse_u128(s: &[u8]) -> Option<u128> {
    let (neg, digits) = split_sign(s);
    let int = int_part(digits)?;
    let mut v: u128 = 0;
    for &c in int {
        v = v.checked_mul(10)?.checked_add(u128::from(c - b'0'))?;
    }
    if neg && v != 0 {
        return None;
    }
    Some(v)
}

fn split_sign(s: &[u8]) -> (bool, &[u8]) {
    match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    }
}

/// The integer digits, if the rest is an optional all-zero fraction.
fn int_part(d: &[u8]) -> Option<&[u8]> {
    let dot = d.iter().position(|c| *c == b'.').unwrap_or(d.len());
    let (int, frac) = d.split_at(dot);
    if int.is_empty() || !int.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if let Some(frac) = frac.get(1..) {
        if frac.is_empty() || !frac.iter().all(|c| *c == b'0') {
            return None;
        }
    }
    Some(int)
}

/// Parse a float from a JSON number or string content; accepts `nan`,
/// `inf`, `+inf`, `-inf`, `infinity` (any case) in strings only.
pub(crate) fn parse_f64(s: &[u8], from_string: bool) -> Option<f64> {
    let text = std::str::from_utf8(s).ok()?;
    if from_string {
        if let Some(v) = special_float(text) {
            return Some(v);
        }
    }
    if !looks_numeric(s) {
        return None;
    }
    let v: f64 = text.parse().ok()?;
    v.is_finite().then_some(v)
}

/// `f32` parsed directly from the text (no double rounding).
pub(crate) fn parse_f32(s: &[u8], from_string: bool) -> Option<f32> {
    let text = std::str::from_utf8(s).ok()?;
    if from_string {
        if let Some(v) = special_float(text) {
            // Rounding a special value (NaN/inf) to f32 is exact.
            return Some(v as f32);
        }
    }
    if !looks_numeric(s) {
        return None;
    }
    let v: f32 = text.parse().ok()?;
    v.is_finite().then_some(v)
}

fn looks_numeric(s: &[u8]) -> bool {
    !s.is_empty()
        && s.iter()
            .all(|c| c.is_ascii_digit() || matches!(c, b'-' | b'+' | b'.' | b'e' | b'E'))
}

fn special_float(t: &str) -> Option<f64> {
    let (neg, body) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if body.eq_ignore_ascii_case("nan") {
        Some(f64::NAN)
    } else if body.eq_ignore_ascii_case("inf") || body.eq_ignore_ascii_case("infinity") {
        Some(if neg {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        })
    } else {
        None
    }
}

/// Why a decimal was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DecimalError {
    Syntax,
    TooManyFractionDigits,
    Overflow,
}

/// Parse a decimal exactly into its scaled integer (`value * 10^scale`).
///
/// Rounding rule: more fractional digits than `scale` is an error unless
/// the extra digits are zeros. More than `precision` digits in total is an
/// overflow. Exponents (`1.5e3`) are supported.
pub(crate) fn parse_decimal(s: &[u8], precision: u8, scale: u8) -> Result<i128, DecimalError> {
    let (neg, v) = decimal_scaled::<i128>(s, precision, scale)?;
    Ok(if neg { -v } else { v })
}

/// [`parse_decimal`] for `Decimal256` (precision 39..=76): the scaled
/// integer as 32 little-endian two's-complement bytes.
pub(crate) fn parse_decimal256(
    s: &[u8],
    precision: u8,
    scale: u8,
) -> Result<[u8; 32], DecimalError> {
    let (neg, v) = decimal_scaled::<U256>(s, precision, scale)?;
    // |v| < 10^76 < 2^255: the sign bit is free.
    Ok(v.to_le_bytes(neg))
}

/// A magnitude being accumulated digit by digit.
trait Acc: Sized {
    fn zero() -> Self;
    /// `self = self * 10 + d`; false on overflow.
    fn push_digit(&mut self, d: u8) -> bool;
    fn is_zero(&self) -> bool;
}

impl Acc for i128 {
    fn zero() -> Self {
        0
    }
    fn push_digit(&mut self, d: u8) -> bool {
        match self
            .checked_mul(10)
            .and_then(|v| v.checked_add(i128::from(d)))
        {
            Some(v) => {
                *self = v;
                true
            }
            None => false,
        }
    }
    fn is_zero(&self) -> bool {
        *self == 0
    }
}

/// An unsigned 256-bit magnitude, little-endian 64-bit limbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct U256([u64; 4]);

impl Acc for U256 {
    fn zero() -> Self {
        U256([0; 4])
    }
    fn push_digit(&mut self, d: u8) -> bool {
        let mut carry = u128::from(d);
        for limb in &mut self.0 {
            let v = u128::from(*limb) * 10 + carry;
            *limb = v as u64;
            carry = v >> 64;
        }
        carry == 0
    }
    fn is_zero(&self) -> bool {
        self.0 == [0; 4]
    }
}

impl U256 {
    /// 32 little-endian bytes of `self`, negated (two's complement) if `neg`.
    fn to_le_bytes(self, neg: bool) -> [u8; 32] {
        let mut limbs = self.0;
        if neg {
            let mut carry = true;
            for l in &mut limbs {
                let (v, c) = (!*l).overflowing_add(u64::from(carry));
                *l = v;
                carry = c;
            }
        }
        let mut out = [0u8; 32];
        for (chunk, l) in out.chunks_exact_mut(8).zip(limbs) {
            chunk.copy_from_slice(&l.to_le_bytes());
        }
        out
    }
}

/// An integer (syntax as [`parse_i128`]) as `Int256` (`signed`) or
/// `UInt256`: 32 little-endian bytes, `None` on bad syntax or out of range.
pub(crate) fn parse_int256(s: &[u8], signed: bool) -> Option<[u8; 32]> {
    let (neg, digits) = split_sign(s);
    let mut v = U256::zero();
    for &c in int_part(digits)? {
        if !v.push_digit(c - b'0') {
            return None;
        }
    }
    let top = v.0[3] >> 63 == 1;
    let ok = match (signed, neg) {
        (false, false) => true,
        (false, true) => v.is_zero(),
        (true, false) => !top,
        // -2^255 is the one value with the top bit set.
        (true, true) => !top || v.0 == [0, 0, 0, 1 << 63],
    };
    ok.then(|| v.to_le_bytes(neg && signed))
}

/// The sign and the magnitude of `s * 10^scale`, checked against
/// `precision`.
fn decimal_scaled<A: Acc>(s: &[u8], precision: u8, scale: u8) -> Result<(bool, A), DecimalError> {
    let (neg, rest) = split_sign(s);
    let (mantissa, exp) = match rest.iter().position(|c| *c == b'e' || *c == b'E') {
        Some(p) => {
            let e = std::str::from_utf8(&rest[p + 1..])
                .ok()
                .and_then(|t| t.parse::<i32>().ok());
            (&rest[..p], e.ok_or(DecimalError::Syntax)?)
        }
        None => (rest, 0),
    };
    let dot = mantissa
        .iter()
        .position(|c| *c == b'.')
        .unwrap_or(mantissa.len());
    let (int, frac) = mantissa.split_at(dot);
    let frac = frac.get(1..).unwrap_or(&[]);
    if (int.is_empty() && frac.is_empty())
        || (dot < mantissa.len() && frac.is_empty() && int.is_empty())
        || !int.iter().chain(frac).all(u8::is_ascii_digit)
    {
        return Err(DecimalError::Syntax);
    }
    // Trailing zeros of the fraction carry no value.
    let frac_len = frac.iter().rposition(|c| *c != b'0').map_or(0, |p| p + 1);
    let frac = &frac[..frac_len];
    // Value = digits(int ++ frac) * 10^(exp - frac_len); we need it * 10^scale.
    let shift = i64::from(scale) + i64::from(exp) - frac.len() as i64;
    let first_nonzero = int.iter().chain(frac).position(|c| *c != b'0');
    let sig = first_nonzero.map_or(0, |p| int.len() + frac.len() - p) as i64;
    let digits = || {
        int.iter()
            .chain(frac)
            .copied()
            .skip(first_nonzero.unwrap_or(0))
    };
    // Digits beyond the kept ones (negative shift) must be zero.
    let keep = if shift < 0 { (sig + shift).max(0) } else { sig };
    if digits().skip(keep as usize).any(|c| c != b'0') {
        return Err(DecimalError::TooManyFractionDigits);
    }
    let mut v = A::zero();
    let mut count: i64 = 0;
    for c in digits().take(keep as usize) {
        if !v.push_digit(c - b'0') {
            return Err(DecimalError::Overflow);
        }
        count += 1;
    }
    if shift > 0 && !v.is_zero() {
        if count + shift > i64::from(precision) {
            return Err(DecimalError::Overflow);
        }
        for _ in 0..shift {
            if !v.push_digit(0) {
                return Err(DecimalError::Overflow);
            }
            count += 1;
        }
    }
    if !v.is_zero() && count > i64::from(precision) {
        return Err(DecimalError::Overflow);
    }
    Ok((neg, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints() {
        assert_eq!(parse_i128(b"0"), Some(0));
        assert_eq!(parse_i128(b"-12"), Some(-12));
        assert_eq!(parse_i128(b"+7"), Some(7));
        assert_eq!(parse_i128(b"5.000"), Some(5));
        assert_eq!(parse_i128(b"5.5"), None);
        assert_eq!(parse_i128(b"5."), None);
        assert_eq!(parse_i128(b"1e3"), None);
        assert_eq!(parse_i128(b""), None);
        assert_eq!(parse_i128(b"-"), None);
        assert_eq!(parse_i128(b"12a"), None);
        assert_eq!(
            parse_i128(b"170141183460469231731687303715884105727"),
            Some(i128::MAX)
        );
        assert_eq!(parse_i128(b"170141183460469231731687303715884105728"), None);
        assert_eq!(
            parse_i128(b"-170141183460469231731687303715884105728"),
            Some(i128::MIN)
        );
        assert_eq!(
            parse_i128(b"-170141183460469231731687303715884105729"),
            None
        );
        assert_eq!(
            parse_u128(b"340282366920938463463374607431768211455"),
            Some(u128::MAX)
        );
        assert_eq!(parse_u128(b"-1"), None);
        assert_eq!(parse_u128(b"-0"), Some(0));
        // Either side of the one-pass path's 19-digit limit.
        for s in [
            "9999999999999999999",
            "-9999999999999999999",
            "10000000000000000000",
            "18446744073709551615",
            "18446744073709551616",
            "-18446744073709551616",
            "007",
            "-0",
            "00000000000000000000001",
        ] {
            assert_eq!(parse_i128(s.as_bytes()), s.parse::<i128>().ok(), "{s}");
        }
        for s in ["1-", "--1", "1 ", " 1", "٣", "1_0"] {
            assert_eq!(parse_i128(s.as_bytes()), None, "{s}");
        }
    }

    proptest::proptest! {
        #[test]
        fn ints_agree_with_std(n in proptest::prelude::any::<i128>(), shift in 0u32..128) {
            let n = n >> shift;
            let text = n.to_string();
            proptest::prop_assert_eq!(parse_i128(text.as_bytes()), Some(n));
        }
    }

    #[test]
    fn floats() {
        assert_eq!(parse_f64(b"1.5", false), Some(1.5));
        assert_eq!(parse_f64(b"-2e3", false), Some(-2000.0));
        assert_eq!(parse_f64(b"1e400", false), None);
        assert!(parse_f64(b"nan", true).is_some_and(f64::is_nan));
        assert_eq!(parse_f64(b"-inf", true), Some(f64::NEG_INFINITY));
        assert_eq!(parse_f64(b"Infinity", true), Some(f64::INFINITY));
        assert_eq!(parse_f64(b"nan", false), None);
        assert_eq!(parse_f64(b"abc", true), None);
        assert_eq!(parse_f32(b"0.1", false), Some(0.1f32));
        assert_eq!(parse_f32(b"1e39", false), None);
    }

    #[test]
    fn int256_and_uint256() {
        let le = |hex_be: &str| {
            let mut b = [0u8; 32];
            for (i, byte) in (0..64).step_by(2).enumerate() {
                b[31 - i] = u8::from_str_radix(&hex_be[byte..byte + 2], 16).unwrap();
            }
            b
        };
        let mut one = [0u8; 32];
        one[0] = 1;
        assert_eq!(parse_int256(b"1", true), Some(one));
        assert_eq!(parse_int256(b"-1", true), Some([0xff; 32]));
        let max = "57896044618658097711785492504343953926634992332820282019728792003956564819967";
        let min = "-57896044618658097711785492504343953926634992332820282019728792003956564819968";
        assert_eq!(
            parse_int256(max.as_bytes(), true),
            Some(le(&format!("7f{}", "ff".repeat(31))))
        );
        assert_eq!(
            parse_int256(min.as_bytes(), true),
            Some(le(&format!("80{}", "00".repeat(31))))
        );
        assert_eq!(
            parse_int256(
                b"57896044618658097711785492504343953926634992332820282019728792003956564819968",
                true
            ),
            None
        );
        let umax = "115792089237316195423570985008687907853269984665640564039457584007913129639935";
        assert_eq!(parse_int256(umax.as_bytes(), false), Some([0xff; 32]));
        assert_eq!(
            parse_int256(
                b"115792089237316195423570985008687907853269984665640564039457584007913129639936",
                false
            ),
            None
        );
        assert_eq!(parse_int256(b"-1", false), None);
        assert_eq!(parse_int256(b"1.5", true), None);
    }

    #[test]
    fn decimal256() {
        let mut b = [0u8; 32];
        b[..2].copy_from_slice(&12345u16.to_le_bytes());
        assert_eq!(parse_decimal256(b"123.45", 76, 2), Ok(b));
        let neg = parse_decimal256(b"-0.01", 76, 2).unwrap();
        assert_eq!(neg, [0xff; 32]);
        let nines = "9".repeat(76);
        assert!(parse_decimal256(nines.as_bytes(), 76, 0).is_ok());
        let too_long = "1".repeat(77);
        assert_eq!(
            parse_decimal256(too_long.as_bytes(), 76, 0),
            Err(DecimalError::Overflow)
        );
        assert_eq!(
            parse_decimal256(b"1.234", 76, 2),
            Err(DecimalError::TooManyFractionDigits)
        );
    }

    #[test]
    fn decimals() {
        use DecimalError::*;
        assert_eq!(parse_decimal(b"123.45", 10, 2), Ok(12345));
        assert_eq!(parse_decimal(b"-123.4", 10, 2), Ok(-12340));
        assert_eq!(parse_decimal(b"0.10", 3, 1), Ok(1));
        assert_eq!(parse_decimal(b"1.2300", 10, 2), Ok(123));
        assert_eq!(parse_decimal(b"1.234", 10, 2), Err(TooManyFractionDigits));
        assert_eq!(parse_decimal(b"1.5e2", 10, 2), Ok(15000));
        assert_eq!(parse_decimal(b"15e-1", 10, 1), Ok(15));
        assert_eq!(parse_decimal(b"15e-3", 10, 1), Err(TooManyFractionDigits));
        assert_eq!(parse_decimal(b"0e-30", 10, 1), Ok(0));
        assert_eq!(parse_decimal(b"99999999.99", 10, 2), Ok(9_999_999_999));
        assert_eq!(parse_decimal(b"100000000.00", 10, 2), Err(Overflow));
        assert_eq!(parse_decimal(b"0000001", 1, 0), Ok(1));
        assert_eq!(parse_decimal(b"10", 1, 0), Err(Overflow));
        assert_eq!(parse_decimal(b"0", 1, 0), Ok(0));
        assert_eq!(parse_decimal(b"0.000", 3, 0), Ok(0));
        assert_eq!(parse_decimal(b"1e50", 38, 0), Err(Overflow));
        assert_eq!(
            parse_decimal(b"99999999999999999999999999999999999999", 38, 0),
            Ok(99999999999999999999999999999999999999)
        );
        assert_eq!(parse_decimal(b".5", 3, 1), Ok(5));
        for bad in [&b""[..], b".", b"-", b"1.2.3", b"1e", b"abc", b"1,5"] {
            assert_eq!(parse_decimal(bad, 10, 2), Err(Syntax), "{bad:?}");
        }
    }
}
