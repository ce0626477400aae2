//! Exact number parsing from JSON text: integers, floats and decimals.
//!
//! Everything works on the raw bytes of a JSON number (or the content of a
//! JSON string); nothing goes through `f64` unless the target is a float.

/// Parse an integer: optional sign, digits, and an optional fraction made
/// only of zeros (`5.0`). Exponents are rejected. Returns `None` on bad
/// syntax or overflow of `i128`.
pub(crate) fn parse_i128(s: &[u8]) -> Option<i128> {
    let (neg, digits) = split_sign(s);
    let int = int_part(digits)?;
    let mut v: i128 = 0;
    for &c in int {
        v = v.checked_mul(10)?.checked_add(i128::from(c - b'0'))?;
    }
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
    let mut v: i128 = 0;
    let mut count: i64 = 0;
    for c in digits().take(keep as usize) {
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(i128::from(c - b'0')))
            .ok_or(DecimalError::Overflow)?;
        count += 1;
    }
    if shift > 0 && v != 0 {
        if count + shift > i64::from(precision) {
            return Err(DecimalError::Overflow);
        }
        for _ in 0..shift {
            v = v.checked_mul(10).ok_or(DecimalError::Overflow)?;
            count += 1;
        }
    }
    if v != 0 && count > i64::from(precision) {
        return Err(DecimalError::Overflow);
    }
    Ok(if neg { -v } else { v })
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
            parse_u128(b"340282366920938463463374607431768211455"),
            Some(u128::MAX)
        );
        assert_eq!(parse_u128(b"-1"), None);
        assert_eq!(parse_u128(b"-0"), Some(0));
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
