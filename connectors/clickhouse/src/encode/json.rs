//! A small zero-copy JSON scanner.
//!
//! It never builds a tree: it validates a value and reports byte spans.
//! Callers get the raw text of each value (`&[u8]`, trimmed) and parse it
//! straight into RowBinary. The input must already be valid UTF-8 (the
//! encoder checks the whole payload once).

/// Maximum nesting depth accepted; deeper input is rejected instead of
/// risking the stack.
pub(crate) const MAX_DEPTH: usize = 128;

/// A JSON syntax problem: a static reason and the byte offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JsonError {
    pub(crate) at: usize,
    pub(crate) reason: &'static str,
}

fn err<T>(at: usize, reason: &'static str) -> Result<T, JsonError> {
    Err(JsonError { at, reason })
}

/// A key of an object: the raw bytes between the quotes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Key<'a> {
    pub(crate) raw: &'a [u8],
    pub(crate) escaped: bool,
}

/// `b` as text: valid UTF-8 checked 32 bytes at a time while it is
/// ASCII (messages mostly are), by the standard library's validator from
/// the first non-ASCII block on.
#[inline]
pub(crate) fn utf8(b: &[u8]) -> Result<&str, std::str::Utf8Error> {
    let mut j = 0;
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128};
        // SAFETY: SSE2 is in the x86-64 baseline; the loads read
        // `b[j..j + 32]`, in bounds by the loop condition.
        unsafe {
            while j + 32 <= b.len() {
                let p = b.as_ptr().add(j);
                let v = _mm_or_si128(
                    _mm_loadu_si128(p.cast::<__m128i>()),
                    _mm_loadu_si128(p.add(16).cast::<__m128i>()),
                );
                if _mm_movemask_epi8(v) != 0 {
                    break;
                }
                j += 32;
            }
        }
    }
    // A block boundary is a character boundary while everything before it
    // is ASCII, so the rest validates on its own.
    match std::str::from_utf8(&b[j..]) {
        // SAFETY: `b[..j]` is ASCII and `b[j..]` was just validated.
        Ok(_) => Ok(unsafe { std::str::from_utf8_unchecked(b) }),
        // Again over the whole input, for an error whose index is into `b`.
        Err(_) => std::str::from_utf8(b),
    }
}

#[inline]
fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(&c) = b.get(i) {
        if c == b' ' || c == b'\n' || c == b'\r' || c == b'\t' {
            i += 1;
        } else {
            break;
        }
    }
    i
}

/// Scan a string starting at the opening quote `b[i]`. Returns the index
/// after the closing quote and whether the content has escapes.
#[inline(always)]
fn scan_string(b: &[u8], i: usize) -> Result<(usize, bool), JsonError> {
    let mut j = i + 1;
    let mut escaped = false;
    loop {
        j = find_special(b, j);
        let Some(&c) = b.get(j) else {
            return err(i, "unterminated string");
        };
        match c {
            b'"' => return Ok((j + 1, escaped)),
            b'\\' => {
                escaped = true;
                match b.get(j + 1) {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => j += 2,
                    Some(b'u') => {
                        let hex = b.get(j + 2..j + 6).ok_or(JsonError {
                            at: j,
                            reason: "bad \\u escape",
                        })?;
                        if !hex.iter().all(u8::is_ascii_hexdigit) {
                            return err(j, "bad \\u escape");
                        }
                        j += 6;
                    }
                    _ => return err(j, "bad escape"),
                }
            }
            _ => return err(j, "control character in string"),
        }
    }
}

/// The index of the first byte at or after `j` that ends a run of plain
/// string content: `"`, `\\` or a control character (< 0x20); `b.len()`
/// if there is none. 16 bytes per step with SSE2 (part of every x86-64),
/// a byte at a time for the tail and on other targets.
#[inline(always)]
fn find_special(b: &[u8], mut j: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8,
            _mm_or_si128, _mm_set1_epi8,
        };
        // SAFETY: SSE2 is in the x86-64 baseline; every load reads the 16
        // bytes `b[j..j + 16]`, in bounds by the loop condition.
        unsafe {
            let quote = _mm_set1_epi8(b'"' as i8);
            let backslash = _mm_set1_epi8(b'\\' as i8);
            let ctrl_max = _mm_set1_epi8(0x1f);
            while j + 16 <= b.len() {
                let v = _mm_loadu_si128(b.as_ptr().add(j).cast::<__m128i>());
                // x <= 0x1f (unsigned) exactly when min(x, 0x1f) == x.
                let ctrl = _mm_cmpeq_epi8(_mm_min_epu8(v, ctrl_max), v);
                let hit = _mm_or_si128(
                    _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                    ctrl,
                );
                let mask = _mm_movemask_epi8(hit) as u32;
                if mask != 0 {
                    return j + mask.trailing_zeros() as usize;
                }
                j += 16;
            }
        }
    }
    while let Some(&c) = b.get(j) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            return j;
        }
        j += 1;
    }
    j
}

#[inline]
fn scan_number(b: &[u8], i: usize) -> Result<usize, JsonError> {
    let mut j = i;
    if b.get(j) == Some(&b'-') {
        j += 1;
    }
    match b.get(j) {
        Some(b'0') => j += 1,
        Some(b'1'..=b'9') => {
            while b.get(j).is_some_and(u8::is_ascii_digit) {
                j += 1;
            }
        }
        _ => return err(i, "invalid number"),
    }
    if b.get(j) == Some(&b'.') {
        j += 1;
        let s = j;
        while b.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
        if s == j {
            return err(i, "invalid number");
        }
    }
    if matches!(b.get(j), Some(b'e' | b'E')) {
        j += 1;
        if matches!(b.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        let s = j;
        while b.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
        if s == j {
            return err(i, "invalid number");
        }
    }
    Ok(j)
}

/// Validate the value starting at `b[i]` (no leading whitespace) and return
/// the index just after it.
pub(crate) fn skip_value(b: &[u8], i: usize, depth: usize) -> Result<usize, JsonError> {
    if depth > MAX_DEPTH {
        return err(i, "nested too deeply");
    }
    match b.get(i) {
        Some(b'"') => scan_string(b, i).map(|(e, _)| e),
        Some(b'{') => for_each_member(b, i, depth + 1, |_, _, _| Ok::<_, JsonError>(()))
            .map_err(Walk::into_inner),
        Some(b'[') => {
            for_each_item(b, i, depth + 1, |_, _| Ok::<_, JsonError>(())).map_err(Walk::into_inner)
        }
        Some(b't') if b.get(i..i + 4) == Some(b"true") => Ok(i + 4),
        Some(b'f') if b.get(i..i + 5) == Some(b"false") => Ok(i + 5),
        Some(b'n') if b.get(i..i + 4) == Some(b"null") => Ok(i + 4),
        Some(b'-' | b'0'..=b'9') => scan_number(b, i),
        Some(_) => err(i, "unexpected character"),
        None => err(i, "unexpected end of input"),
    }
}

/// An error from a walk: bad JSON, or the callback's own error.
#[derive(Debug)]
pub(crate) enum Walk<E> {
    Json(JsonError),
    User(E),
}

impl Walk<JsonError> {
    fn into_inner(self) -> JsonError {
        match self {
            Walk::Json(e) | Walk::User(e) => e,
        }
    }
}

impl<E> From<JsonError> for Walk<E> {
    fn from(e: JsonError) -> Self {
        Walk::Json(e)
    }
}

/// Walk the members of the object starting at `b[open] == '{'`. Calls
/// `f(key, value_span_start, value_span_end)` per member; the span is the
/// trimmed value text.
pub(crate) fn for_each_member<'a, E>(
    b: &'a [u8],
    open: usize,
    depth: usize,
    mut f: impl FnMut(Key<'a>, usize, usize) -> Result<(), E>,
) -> Result<usize, Walk<E>> {
    if b.get(open) != Some(&b'{') {
        return Err(Walk::Json(JsonError {
            at: open,
            reason: "expected an object",
        }));
    }
    let mut i = skip_ws(b, open + 1);
    if b.get(i) == Some(&b'}') {
        return Ok(i + 1);
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return err(i, "expected a string key").map_err(Walk::Json);
        }
        let (kend, escaped) = scan_string(b, i)?;
        let key = Key {
            raw: &b[i + 1..kend - 1],
            escaped,
        };
        i = skip_ws(b, kend);
        if b.get(i) != Some(&b':') {
            return err(i, "expected `:`").map_err(Walk::Json);
        }
        i = skip_ws(b, i + 1);
        let vstart = i;
        let vend = skip_value(b, i, depth)?;
        f(key, vstart, vend).map_err(Walk::User)?;
        i = skip_ws(b, vend);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b'}') => return Ok(i + 1),
            _ => return err(i, "expected `,` or `}`").map_err(Walk::Json),
        }
    }
}

/// Walk the items of the array starting at `b[open] == '['`, calling
/// `f(start, end)` with each item's span. Returns the index after `]`.
pub(crate) fn for_each_item<E>(
    b: &[u8],
    open: usize,
    depth: usize,
    mut f: impl FnMut(usize, usize) -> Result<(), E>,
) -> Result<usize, Walk<E>> {
    if b.get(open) != Some(&b'[') {
        return Err(Walk::Json(JsonError {
            at: open,
            reason: "expected an array",
        }));
    }
    let mut i = skip_ws(b, open + 1);
    if b.get(i) == Some(&b']') {
        return Ok(i + 1);
    }
    loop {
        let vend = skip_value(b, i, depth)?;
        f(i, vend).map_err(Walk::User)?;
        i = skip_ws(b, vend);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b']') => return Ok(i + 1),
            _ => return err(i, "expected `,` or `]`").map_err(Walk::Json),
        }
    }
}

/// Scan a whole document that must be one object; calls `f` per member
/// with the value slice. Trailing non-whitespace is an error.
pub(crate) fn scan_document<'a, E>(
    b: &'a [u8],
    mut f: impl FnMut(Key<'a>, &'a [u8]) -> Result<(), E>,
) -> Result<(), Walk<E>> {
    let start = skip_ws(b, 0);
    if b.get(start) != Some(&b'{') {
        return err(start, "payload is not a JSON object").map_err(Walk::Json);
    }
    let end = for_each_member(b, start, 1, |k, s, e| f(k, &b[s..e]))?;
    let tail = skip_ws(b, end);
    if tail != b.len() {
        return err(tail, "trailing characters after the JSON object").map_err(Walk::Json);
    }
    Ok(())
}

fn hex4(h: &[u8]) -> Option<u32> {
    let mut v = 0u32;
    for &c in h.get(..4)? {
        v = v * 16 + char::from(c).to_digit(16)?;
    }
    Some(v)
}

/// Unescape the raw content of a JSON string (between the quotes) into
/// `out` (appending). Handles `\uXXXX` surrogate pairs; a lone surrogate is
/// an error.
pub(crate) fn unescape_into(raw: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
    let mut i = 0;
    while i < raw.len() {
        // Copy the run up to the next backslash in one go.
        let run_end = raw[i..]
            .iter()
            .position(|c| *c == b'\\')
            .map_or(raw.len(), |p| i + p);
        out.extend_from_slice(&raw[i..run_end]);
        i = run_end;
        if i >= raw.len() {
            break;
        }
        let Some(&e) = raw.get(i + 1) else {
            return Err("bad escape");
        };
        i += 2;
        let c = match e {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 8,
            b'f' => 12,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let hi = raw.get(i..).and_then(hex4).ok_or("bad \\u escape")?;
                i += 4;
                let cp = if (0xD800..0xDC00).contains(&hi) {
                    if raw.get(i..i + 2) != Some(b"\\u") {
                        return Err("lone surrogate in \\u escape");
                    }
                    let lo = raw.get(i + 2..).and_then(hex4).ok_or("bad \\u escape")?;
                    if !(0xDC00..0xE000).contains(&lo) {
                        return Err("lone surrogate in \\u escape");
                    }
                    i += 6;
                    0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                } else if (0xDC00..0xE000).contains(&hi) {
                    return Err("lone surrogate in \\u escape");
                } else {
                    hi
                };
                let ch = char::from_u32(cp).ok_or("bad \\u escape")?;
                let mut buf = [0u8; 4];
                out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                continue;
            }
            _ => return Err("bad escape"),
        };
        out.push(c);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn members(s: &str) -> Result<Vec<(String, String)>, JsonError> {
        let mut v = Vec::new();
        scan_document(s.as_bytes(), |k, val| {
            let mut key = Vec::new();
            unescape_into(k.raw, &mut key).map_err(|r| JsonError { at: 0, reason: r })?;
            v.push((
                String::from_utf8(key).unwrap(),
                std::str::from_utf8(val).unwrap().to_owned(),
            ));
            Ok(())
        })
        .map_err(|e| match e {
            Walk::Json(e) | Walk::User(e) => e,
        })?;
        Ok(v)
    }

    #[test]
    fn spans() {
        let m = members(r#" { "a" : 1 , "b":[1, {"x":"]"}] ,"c\"d":"s\\" , "e": null, "f":{} } "#)
            .unwrap();
        assert_eq!(
            m,
            vec![
                ("a".into(), "1".into()),
                ("b".into(), r#"[1, {"x":"]"}]"#.into()),
                ("c\"d".into(), r#""s\\""#.into()),
                ("e".into(), "null".into()),
                ("f".into(), "{}".into()),
            ]
        );
        assert_eq!(members("{}").unwrap(), vec![]);
    }

    #[test]
    fn rejects_bad_json() {
        for s in [
            "",
            "[]",
            "1",
            "{",
            "{\"a\"}",
            "{\"a\":}",
            "{\"a\":1,}",
            "{\"a\":1} x",
            "{\"a\":01}",
            "{\"a\":1.}",
            "{\"a\":-}",
            "{\"a\":tru}",
            "{\"a\":\"\\x\"}",
            "{\"a\":\"\u{1}\"}",
            "{\"a\":[1,]}",
            "{\"a\":[1 2]}",
            "{a:1}",
            "{\"a\":\"\\u12\"}",
            "{\"a\":1e}",
        ] {
            assert!(members(s).is_err(), "{s:?}");
        }
    }

    #[test]
    fn depth_limited() {
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(500), "]".repeat(500));
        assert!(members(&deep).is_err());
        let ok = format!("{{\"a\":{}{}}}", "[".repeat(100), "]".repeat(100));
        assert!(members(&ok).is_ok());
    }

    #[test]
    fn utf8_agrees_with_std() {
        let mut cases: Vec<Vec<u8>> = vec![b"".to_vec(), b"{}".to_vec()];
        for len in [31usize, 32, 33, 64, 65, 100] {
            for at in [0, 15, 16, 31, 32, len.saturating_sub(1)] {
                for bad in [
                    &b"\xe9"[..],
                    "é".as_bytes(),
                    "😀".as_bytes(),
                    b"\xf0\x9f",
                    b"\xc0\x80",
                ] {
                    let mut v = vec![b'a'; len];
                    let at = at.min(len);
                    v.splice(at..at, bad.iter().copied());
                    cases.push(v);
                }
            }
            cases.push(vec![b'x'; len]);
        }
        for c in &cases {
            // The same text, or the same error (its index into all of `c`).
            assert_eq!(utf8(c), std::str::from_utf8(c), "{c:?}");
        }
    }

    #[test]
    fn unescapes() {
        let mut out = Vec::new();
        unescape_into(br#"a\"b\\c\/\n\t\u00e9\ud83d\ude00z"#, &mut out).unwrap();
        assert_eq!(std::str::from_utf8(&out).unwrap(), "a\"b\\c/\n\té😀z");
        for bad in [
            &br"\ud83d"[..],
            br"\ude00",
            br"\ud83dx",
            br"\ud83d\u0041",
            br"\q",
        ] {
            assert!(unescape_into(bad, &mut Vec::new()).is_err(), "{bad:?}");
        }
    }

    fn arb_json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(serde_json::Value::from),
            any::<String>().prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
                prop::collection::btree_map(any::<String>(), inner, 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn agrees_with_serde_json(obj in prop::collection::btree_map(any::<String>(), arb_json(), 0..10), pretty in any::<bool>()) {
            let value = serde_json::Value::Object(obj.clone().into_iter().collect());
            let text = if pretty { serde_json::to_string_pretty(&value).unwrap() } else { value.to_string() };
            let got = members(&text).unwrap();
            let got: BTreeMap<String, serde_json::Value> = got
                .into_iter()
                .map(|(k, v)| (k, serde_json::from_str(&v).unwrap()))
                .collect();
            // Compare with serde_json's own reading of the same text (its
            // float parsing is not bit-exact against the original value).
            let theirs: BTreeMap<String, serde_json::Value> = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(got.len(), obj.len());
            prop_assert_eq!(got, theirs);
        }

        #[test]
        fn never_panics_and_matches_serde_validity(s in "[{}\\[\\]\",:0-9a-d \\\\.-]{0,40}") {
            let ours = members(&s).is_ok();
            let theirs = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&s).is_ok();
            prop_assert_eq!(ours, theirs, "{:?}", s);
        }
    }
}
