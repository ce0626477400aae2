//! Classification of ClickHouse failures: retry or give up.
//!
//! One table-tested function, [`classify`], decides from the HTTP status and
//! the response body. Called by insert workers after a failed insert; pure.

/// Whether a failed request may succeed when retried unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Transient: retry with backoff (the same rows, same dedup token).
    Retriable,
    /// The request itself is wrong (data, schema, permissions): do not retry.
    Fatal,
}

/// Server error codes that are transient. Names from ClickHouse
/// `src/Common/ErrorCodes.cpp`.
const RETRIABLE: &[u32] = &[
    3,   // UNEXPECTED_END_OF_FILE (connection cut mid-request)
    159, // TIMEOUT_EXCEEDED
    164, // READONLY (replica temporarily read-only)
    202, // TOO_MANY_SIMULTANEOUS_QUERIES
    203, // NO_FREE_CONNECTION
    209, // SOCKET_TIMEOUT
    210, // NETWORK_ERROR
    241, // MEMORY_LIMIT_EXCEEDED
    242, // TABLE_IS_READ_ONLY
    252, // TOO_MANY_PARTS
    285, // TOO_FEW_LIVE_REPLICAS
    319, // UNKNOWN_STATUS_OF_INSERT
    425, // SYSTEM_ERROR
    999, // KEEPER_EXCEPTION
];

/// Server error codes caused by the data or the schema: retrying the same
/// rows cannot help.
const FATAL: &[u32] = &[
    6,   // CANNOT_PARSE_TEXT
    7,   // CANNOT_PARSE_NUMBER
    16,  // NO_SUCH_COLUMN_IN_TABLE
    26,  // CANNOT_PARSE_QUOTED_STRING
    27,  // CANNOT_PARSE_INPUT_ASSERTION_FAILED
    32,  // ATTEMPT_TO_READ_AFTER_EOF
    33,  // CANNOT_READ_ALL_DATA
    38,  // CANNOT_PARSE_DATE
    41,  // CANNOT_PARSE_DATETIME
    44,  // ILLEGAL_COLUMN
    47,  // UNKNOWN_IDENTIFIER
    53,  // TYPE_MISMATCH
    60,  // UNKNOWN_TABLE
    62,  // SYNTAX_ERROR
    69,  // ARGUMENT_OUT_OF_BOUND
    70,  // CANNOT_CONVERT_TYPE
    72,  // CANNOT_PARSE_NUMBER (legacy)
    73,  // UNKNOWN_FORMAT
    81,  // UNKNOWN_DATABASE
    115, // UNKNOWN_SETTING
    117, // INCORRECT_DATA
    131, // TOO_LARGE_STRING_SIZE
    192, // UNKNOWN_USER
    193, // WRONG_PASSWORD
    497, // ACCESS_DENIED
    516, // AUTHENTICATION_FAILED
];

/// Parse the `Code: N` that ClickHouse puts at the start of error bodies,
/// e.g. `Code: 60, e.displayText() = DB::Exception: Table x doesn't exist`.
#[must_use]
pub fn parse_code(body: &str) -> Option<u32> {
    let at = body.find("Code:")?;
    let rest = body[at + 5..].trim_start();
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// Classify a failed request. `status` is `None` when no HTTP response
/// arrived (connect error, reset, timeout).
#[must_use]
pub fn classify(status: Option<u16>, body: &str) -> ErrorClass {
    let Some(status) = status else {
        return ErrorClass::Retriable;
    };
    match parse_code(body) {
        Some(code) if FATAL.contains(&code) => ErrorClass::Fatal,
        Some(code) if RETRIABLE.contains(&code) => ErrorClass::Retriable,
        _ if status >= 500 => ErrorClass::Retriable,
        // 408 Request Timeout / 429 Too Many Requests come from proxies.
        _ if status == 408 || status == 429 => ErrorClass::Retriable,
        _ if status >= 400 => ErrorClass::Fatal,
        // A non-error status with an error body (e.g. an exception in the
        // middle of a 200 stream): the outcome is unknown, retry.
        _ => ErrorClass::Retriable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ErrorClass::{Fatal, Retriable};

    #[test]
    fn parses_codes() {
        assert_eq!(
            parse_code("Code: 60, e.displayText() = DB::Exception: Table x doesn't exist"),
            Some(60)
        );
        assert_eq!(
            parse_code("Code: 241. DB::Exception: Memory limit exceeded"),
            Some(241)
        );
        assert_eq!(parse_code("Code:27"), Some(27));
        assert_eq!(parse_code("no code here"), None);
        assert_eq!(parse_code("Code: x"), None);
        assert_eq!(parse_code("Code: 99999999999999"), None);
    }

    #[test]
    fn table() {
        let cases: &[(Option<u16>, &str, ErrorClass)] = &[
            (None, "", Retriable),
            (None, "Code: 60, Table doesn't exist", Retriable),
            (Some(500), "", Retriable),
            (Some(503), "Service Unavailable", Retriable),
            (
                Some(404),
                "Code: 60, e.displayText() = DB::Exception: Table db.t doesn't exist",
                Fatal,
            ),
            (
                Some(500),
                "Code: 60, e.displayText() = DB::Exception: Table db.t doesn't exist",
                Fatal,
            ),
            (Some(400), "Code: 26, Cannot parse quoted string", Fatal),
            (Some(500), "Code: 27, Cannot parse input", Fatal),
            (Some(500), "Code: 38, Cannot parse date", Fatal),
            (Some(400), "Code: 53, Type mismatch", Fatal),
            (Some(400), "Code: 62, Syntax error", Fatal),
            (Some(500), "Code: 117, Incorrect data", Fatal),
            (Some(500), "Code: 6, Cannot parse text", Fatal),
            (Some(500), "Code: 33, Cannot read all data", Fatal),
            (Some(500), "Code: 81, Database x doesn't exist", Fatal),
            (Some(500), "Code: 131, Too large string size", Fatal),
            (Some(500), "Code: 3, Unexpected end of file", Retriable),
            (Some(500), "Code: 159, Timeout exceeded", Retriable),
            (Some(500), "Code: 164, Readonly", Retriable),
            (
                Some(500),
                "Code: 202, Too many simultaneous queries",
                Retriable,
            ),
            (Some(500), "Code: 209, Socket timeout", Retriable),
            (Some(500), "Code: 210, Network error", Retriable),
            (Some(500), "Code: 241, Memory limit exceeded", Retriable),
            (Some(500), "Code: 242, Table is in readonly mode", Retriable),
            (Some(500), "Code: 252, Too many parts", Retriable),
            (Some(500), "Code: 285, Too few live replicas", Retriable),
            (Some(500), "Code: 319, Unknown status of insert", Retriable),
            (Some(500), "Code: 425, System error", Retriable),
            (Some(500), "Code: 999, Keeper exception", Retriable),
            (Some(500), "Code: 12345, something new", Retriable),
            (Some(400), "Code: 12345, something new", Fatal),
            (Some(403), "Code: 516, Authentication failed", Fatal),
            (Some(401), "", Fatal),
            (Some(429), "", Retriable),
            (Some(408), "", Retriable),
            (Some(200), "Code: 241, Memory limit exceeded", Retriable),
        ];
        for (status, body, want) in cases {
            assert_eq!(classify(*status, body), *want, "{status:?} {body:?}");
        }
    }

    #[test]
    fn tables_are_disjoint() {
        for c in RETRIABLE {
            assert!(!FATAL.contains(c), "{c} is in both tables");
        }
    }
}
