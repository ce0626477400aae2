//! Date and time parsing into ClickHouse's integer representations.
//!
//! Accepted text: `YYYY-MM-DD`, `YYYY-MM-DD hh:mm:ss[.frac]` (UTC) and
//! RFC 3339 `YYYY-MM-DDThh:mm:ss[.frac](Z|±hh:mm)`. Numbers: unix seconds
//! with an optional fraction. All in UTC; the column's time zone only
//! affects how ClickHouse prints the value.

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
/// Howard Hinnant's `days_from_civil`.
pub(crate) fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

fn digits(s: &[u8], at: usize, n: usize) -> Option<u32> {
    let d = s.get(at..at + n)?;
    let mut v = 0u32;
    for &c in d {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u32::from(c - b'0');
    }
    Some(v)
}

/// Parse `YYYY-MM-DD` at the start of `s`; returns days since epoch.
fn date_prefix(s: &[u8]) -> Option<i64> {
    let y = digits(s, 0, 4)?;
    let m = digits(s, 5, 2)?;
    let d = digits(s, 8, 2)?;
    if s.get(4) != Some(&b'-') || s.get(7) != Some(&b'-') {
        return None;
    }
    let y = i64::from(y);
    if !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
        return None;
    }
    Some(days_from_civil(y, m, d))
}

/// Parse a date string (`YYYY-MM-DD`) into days since the epoch.
pub(crate) fn parse_date(s: &[u8]) -> Option<i64> {
    if s.len() != 10 {
        return None;
    }
    date_prefix(s)
}

/// A point in time: whole seconds since the epoch plus `ticks`, the first
/// `precision` fractional digits (truncated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Instant {
    pub(crate) secs: i64,
    pub(crate) ticks: i64,
}

/// Parse a date-time string. A bare date means midnight.
pub(crate) fn parse_datetime(s: &[u8], precision: u8) -> Option<Instant> {
    let days = date_prefix(s)?;
    if s.len() == 10 {
        return Some(Instant {
            secs: days * 86_400,
            ticks: 0,
        });
    }
    if !matches!(s.get(10), Some(b'T' | b't' | b' ')) {
        return None;
    }
    let h = digits(s, 11, 2)?;
    let mi = digits(s, 14, 2)?;
    let se = digits(s, 17, 2)?;
    if s.get(13) != Some(&b':') || s.get(16) != Some(&b':') || h > 23 || mi > 59 || se > 59 {
        return None;
    }
    let mut i = 19;
    let (ticks, next) = fraction(s, i, precision)?;
    i = next;
    let offset: i64 = match s.get(i) {
        None => 0,
        Some(b'Z' | b'z') if i + 1 == s.len() => 0,
        Some(&sign @ (b'+' | b'-')) => {
            let oh = digits(s, i + 1, 2)?;
            let (om, end) = if s.get(i + 3) == Some(&b':') {
                (digits(s, i + 4, 2)?, i + 6)
            } else {
                (digits(s, i + 3, 2)?, i + 5)
            };
            if end != s.len() || oh > 23 || om > 59 {
                return None;
            }
            let o = i64::from(oh * 3600 + om * 60);
            if sign == b'-' {
                -o
            } else {
                o
            }
        }
        _ => return None,
    };
    let secs = days * 86_400 + i64::from(h * 3600 + mi * 60 + se) - offset;
    Some(Instant { secs, ticks })
}

/// Parse an optional `.digits` at `s[i]`; returns the first `precision`
/// digits as ticks (zero-padded) and the index after the fraction.
fn fraction(s: &[u8], i: usize, precision: u8) -> Option<(i64, usize)> {
    if s.get(i) != Some(&b'.') {
        return Some((0, i));
    }
    let mut j = i + 1;
    let mut ticks: i64 = 0;
    let mut n = 0u8;
    while let Some(&c) = s.get(j) {
        if !c.is_ascii_digit() {
            break;
        }
        if n < precision {
            ticks = ticks * 10 + i64::from(c - b'0');
            n += 1;
        }
        j += 1;
    }
    if j == i + 1 {
        return None;
    }
    while n < precision {
        ticks *= 10;
        n += 1;
    }
    Some((ticks, j))
}

/// Parse a numeric timestamp (seconds, optional fraction, optional sign)
/// from a JSON number's text. Exponents are rejected.
pub(crate) fn parse_epoch(s: &[u8], precision: u8) -> Option<Instant> {
    let (neg, body) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    let dot = body.iter().position(|c| *c == b'.').unwrap_or(body.len());
    let int = &body[..dot];
    if int.is_empty() || int.len() > 12 || !int.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut secs: i64 = 0;
    for &c in int {
        secs = secs * 10 + i64::from(c - b'0');
    }
    let (ticks, end) = fraction(body, dot, precision)?;
    if end != body.len() {
        return None;
    }
    if neg {
        // -1.5 s = -2 s + 0.5 s: keep ticks non-negative.
        let scale = 10i64.pow(u32::from(precision));
        if ticks == 0 {
            return Some(Instant {
                secs: -secs,
                ticks: 0,
            });
        }
        return Some(Instant {
            secs: -secs - 1,
            ticks: scale - ticks,
        });
    }
    Some(Instant { secs, ticks })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        assert_eq!(days_from_civil(2149, 6, 6), 65_535);
    }

    #[test]
    fn dates() {
        assert_eq!(parse_date(b"2024-02-29"), Some(19_782));
        assert_eq!(parse_date(b"2023-02-29"), None);
        assert_eq!(parse_date(b"2024-13-01"), None);
        assert_eq!(parse_date(b"2024-1-01"), None);
        assert_eq!(parse_date(b"2024-01-01x"), None);
    }

    #[test]
    fn datetimes() {
        let t = |s: &str, p| parse_datetime(s.as_bytes(), p);
        assert_eq!(
            t("2023-11-14 22:13:20", 0),
            Some(Instant {
                secs: 1_700_000_000,
                ticks: 0
            })
        );
        assert_eq!(
            t("2023-11-14T22:13:20Z", 0),
            Some(Instant {
                secs: 1_700_000_000,
                ticks: 0
            })
        );
        assert_eq!(
            t("2023-11-15T00:13:20+02:00", 0),
            Some(Instant {
                secs: 1_700_000_000,
                ticks: 0
            })
        );
        assert_eq!(
            t("2023-11-14T21:13:20-0100", 0),
            Some(Instant {
                secs: 1_700_000_000,
                ticks: 0
            })
        );
        assert_eq!(
            t("2023-11-14T22:13:20.123456Z", 3),
            Some(Instant {
                secs: 1_700_000_000,
                ticks: 123
            })
        );
        assert_eq!(
            t("2023-11-14T22:13:20.1Z", 6),
            Some(Instant {
                secs: 1_700_000_000,
                ticks: 100_000
            })
        );
        assert_eq!(
            t("2023-11-14T22:13:20.999Z", 0),
            Some(Instant {
                secs: 1_700_000_000,
                ticks: 0
            })
        );
        assert_eq!(
            t("2023-11-14", 0),
            Some(Instant {
                secs: 1_699_920_000,
                ticks: 0
            })
        );
        for bad in [
            "2023-11-14 24:00:00",
            "2023-11-14T22:13",
            "2023-11-14T22:13:20.",
            "2023-11-14T22:13:20+2",
            "2023-11-14T22:13:20Zx",
            "x",
        ] {
            assert_eq!(t(bad, 3), None, "{bad}");
        }
    }

    #[test]
    fn epochs() {
        assert_eq!(
            parse_epoch(b"1700000000", 3),
            Some(Instant {
                secs: 1_700_000_000,
                ticks: 0
            })
        );
        assert_eq!(
            parse_epoch(b"1700000000.5", 3),
            Some(Instant {
                secs: 1_700_000_000,
                ticks: 500
            })
        );
        assert_eq!(
            parse_epoch(b"-1.25", 2),
            Some(Instant {
                secs: -2,
                ticks: 75
            })
        );
        assert_eq!(parse_epoch(b"-3", 2), Some(Instant { secs: -3, ticks: 0 }));
        assert_eq!(parse_epoch(b"1e9", 0), None);
        assert_eq!(parse_epoch(b"9999999999999", 0), None);
    }
}
