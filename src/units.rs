//! Parsers for durations (`500ms`, `1s`, `2m`, `1h`) and byte sizes
//! (`16MiB`, `256M`, `1048576`) as flags take them.

use std::time::Duration;

/// Parse a duration: a number with a unit `ms`, `s`, `m` or `h` (a bare
/// number means seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (e.g. 500ms, 1s, 2m)"))?;
    let secs = match unit.trim() {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        other => {
            return Err(format!(
                "`{s}`: unknown duration unit `{other}` (use ms, s, m or h)"
            ))
        }
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("`{s}` is not a valid duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parse a byte size: a number with an optional unit `K`/`KB`/`KiB`, `M…`,
/// `G…` (all powers of 1024).
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (e.g. 16MiB, 512K, 1048576)"))?;
    let mult: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => {
            return Err(format!(
                "`{s}`: unknown size unit `{other}` (use K, M or G)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too large"))
}

/// Parse a librdkafka property `key=value`.
pub fn parse_property(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("`{s}` is not KEY=VALUE")),
    }
}

/// `COLUMN=/POINTER` (`--rename`): a column and the JSON pointer its
/// value comes from.
pub fn parse_rename(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((c, p)) if !c.trim().is_empty() && p.starts_with('/') => {
            Ok((c.trim().to_string(), p.to_string()))
        }
        _ => Err(format!(
            "`{s}` is not COLUMN=/POINTER (a JSON pointer, like user_id=/user/id)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renames() {
        assert_eq!(
            parse_rename("user_id=/user/id").unwrap(),
            ("user_id".to_string(), "/user/id".to_string())
        );
        for bad in ["user_id", "=/a", "user_id=user/id", "a="] {
            assert!(parse_rename(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("2 weeks").is_err());
        assert!(parse_duration("x").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("16MiB").unwrap(), 16 << 20);
        assert_eq!(parse_bytes("512K").unwrap(), 512 << 10);
        assert_eq!(parse_bytes("1048576").unwrap(), 1 << 20);
        assert!(parse_bytes("1T").is_err());
    }

    #[test]
    fn properties() {
        assert_eq!(
            parse_property("a.b=c=d").unwrap(),
            ("a.b".into(), "c=d".into())
        );
        assert!(parse_property("novalue").is_err());
        assert!(parse_property("=x").is_err());
    }
}
