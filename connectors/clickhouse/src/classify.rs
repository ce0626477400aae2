//! Classification of ClickHouse failures: give up, retry on the same
//! replica, or fail over to the shard's next replica.
//!
//! One table ([`code_remedy`]) decides for every server error code; the
//! HTTP status only matters when the body carries no `Code: N`. Called by
//! the client when it maps a failed request and by the insert workers'
//! retry policy (through [`crate::InsertError::remedy`]); pure, no I/O.
//! The codes and their names are from ClickHouse `src/Common/ErrorCodes.cpp`.

/// Whether a failed request may succeed when retried unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Transient: retry with backoff (the same rows, same dedup token).
    Retriable,
    /// The request itself is wrong (data, schema, permissions): do not retry.
    Fatal,
}

/// What a failed insert calls for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Remedy {
    /// Retrying the same bytes cannot help (data, schema, permissions,
    /// limits): fail the batch.
    GiveUp,
    /// Transient on the server (overload, merges behind, quorum): back off
    /// and retry, on the same replica.
    Retry,
    /// The replica itself looks unreachable or unable to take writes (no
    /// answer, a timeout, a cut connection, a read-only replica): send the
    /// same bytes to the shard's next replica.
    Failover,
}

impl Remedy {
    /// The coarse retry-or-not class of this remedy.
    #[must_use]
    pub fn class(self) -> ErrorClass {
        match self {
            Remedy::GiveUp => ErrorClass::Fatal,
            Remedy::Retry | Remedy::Failover => ErrorClass::Retriable,
        }
    }
}

/// Server error codes caused by the data or the schema: retrying the same
/// rows cannot help.
const DATA: &[u32] = &[
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
    190, // SIZES_OF_ARRAYS_DONT_MATCH
    321, // VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE
    349, // CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN
    395, // FUNCTION_THROW_IF_VALUE_IS_NON_ZERO
    407, // DECIMAL_OVERFLOW
    469, // VIOLATED_CONSTRAINT
];

/// Permission, profile and limit errors: the server will say the same
/// until someone changes its configuration.
const PERMISSION: &[u32] = &[
    158, // TOO_MANY_ROWS
    164, // READONLY (the user's profile has readonly=1)
    192, // UNKNOWN_USER
    307, // TOO_MANY_BYTES
    396, // TOO_MANY_ROWS_OR_BYTES
    452, // SETTING_CONSTRAINT_VIOLATION (a profile forbids a setting spate sends)
    497, // ACCESS_DENIED
];

/// A refused login: WRONG_PASSWORD (before 20.x), AUTHENTICATION_FAILED
/// (later). While running it is most likely a password rotating on the
/// server before the new one reached `--password-file` (which spate reads
/// again as it changes), so every running path retries it and reports it
/// as a stall; at start it is a configuration error (exit 2, by code:
/// `SinkError::is_config`).
const REFUSED_LOGIN: &[u32] = &[193, 516];

/// Transient server conditions: back off, retry on the same replica.
const TRANSIENT: &[u32] = &[
    159, // TIMEOUT_EXCEEDED
    202, // TOO_MANY_SIMULTANEOUS_QUERIES
    203, // NO_FREE_CONNECTION
    241, // MEMORY_LIMIT_EXCEEDED
    252, // TOO_MANY_PARTS (unless "Too many partitions for single INSERT block")
    285, // TOO_FEW_LIVE_REPLICAS
    319, // UNKNOWN_STATUS_OF_INSERT
    425, // SYSTEM_ERROR
];

/// Faults of the replica itself: fail over to the next one.
const REPLICA: &[u32] = &[
    3,   // UNEXPECTED_END_OF_FILE (connection cut mid-request)
    209, // SOCKET_TIMEOUT
    210, // NETWORK_ERROR
    242, // TABLE_IS_READ_ONLY (replica lost its ZooKeeper session)
    999, // KEEPER_EXCEPTION
];

/// The codes of [`DATA`] that blame rows of the batch (not the table, the
/// statement or the user): a batch failing with one of these is bisected
/// until the rows that fail alone are isolated; the error policy decides
/// what happens to them. 252 "too many partitions for single INSERT block"
/// is a property of the batch too: its halves span fewer partitions.
const ROWS: &[u32] = &[
    6, 7, 26, 27, 38, 41, 53, 69, 70, 72, 117, 131, 190, 321, 349, 395, 407, 469,
];

/// Whether server error `code` with message `body` blames rows of the
/// batch (see [`ROWS`]): bisecting the batch isolates them.
#[must_use]
pub fn is_row_error(code: u32, body: &str) -> bool {
    ROWS.contains(&code)
        || (code == 252 && body.to_ascii_lowercase().contains(PARTITIONS_PER_BLOCK))
}

/// Code 252 TOO_MANY_PARTS has two meanings: "Too many parts (N). Merges
/// are processing significantly slower than inserts" passes once merges
/// catch up; "Too many partitions for single INSERT block" is a property
/// of the batch and will never pass.
const PARTITIONS_PER_BLOCK: &str = "too many partitions for single insert block";

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

/// The remedy for server error `code` whose message is `body`; `None` for
/// a code the table does not know.
#[must_use]
pub fn code_remedy(code: u32, body: &str) -> Option<Remedy> {
    if code == 252 && body.to_ascii_lowercase().contains(PARTITIONS_PER_BLOCK) {
        return Some(Remedy::GiveUp);
    }
    if DATA.contains(&code) || PERMISSION.contains(&code) {
        Some(Remedy::GiveUp)
    } else if REPLICA.contains(&code) {
        Some(Remedy::Failover)
    } else if TRANSIENT.contains(&code) || REFUSED_LOGIN.contains(&code) {
        Some(Remedy::Retry)
    } else {
        None
    }
}

/// The remedy for a failed request. `status` is `None` when no HTTP
/// response arrived (connect error, reset, timeout): the replica is at
/// fault. A `Code: N` in the body decides whatever the status.
#[must_use]
pub fn remedy(status: Option<u16>, body: &str) -> Remedy {
    let Some(status) = status else {
        return Remedy::Failover;
    };
    let code = parse_code(body);
    if let Some(r) = code.and_then(|c| code_remedy(c, body)) {
        return r;
    }
    match status {
        // A 5xx without a code comes from a proxy or a dying server: try
        // another replica. An unknown code with 5xx: retry here.
        s if s >= 500 && code.is_none() => Remedy::Failover,
        s if s >= 500 => Remedy::Retry,
        // 408 Request Timeout / 429 Too Many Requests come from proxies.
        408 | 429 => Remedy::Retry,
        s if s >= 400 => Remedy::GiveUp,
        // A non-error status with an error body (e.g. an exception in the
        // middle of a 200 stream): the outcome is unknown, retry.
        _ => Remedy::Retry,
    }
}

/// Classify a failed request: retry or not (see [`remedy`]).
#[must_use]
pub fn classify(status: Option<u16>, body: &str) -> ErrorClass {
    remedy(status, body).class()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ErrorClass::{Fatal, Retriable};
    use Remedy::{Failover, GiveUp, Retry};

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
            // The GUIDE's corrected list: READONLY is the user's profile
            // (readonly=1), not a passing state; it was retried before.
            (Some(500), "Code: 164, Readonly", Fatal),
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
            // A refused login while running: a password rotating.
            (Some(403), "Code: 516, Authentication failed", Retriable),
            (Some(500), "Code: 193, Wrong password for user x", Retriable),
            (Some(500), "Code: 192, Unknown user x", Fatal),
            (Some(401), "", Fatal),
            (Some(429), "", Retriable),
            (Some(408), "", Retriable),
            (Some(200), "Code: 241, Memory limit exceeded", Retriable),
        ];
        for (status, body, want) in cases {
            assert_eq!(classify(*status, body), *want, "{status:?} {body:?}");
        }
    }

    /// Every code of the GUIDE's list, with the server's own wording (as a
    /// current server sends it; the status is lost by the HTTP crate for
    /// bodies with a code, so 500 is what the client assumes).
    #[test]
    fn server_messages() {
        let cases: &[(&str, Remedy)] = &[
            ("Code: 6. DB::Exception: Cannot parse string 'abc' as UInt32: syntax error at begin of string. Note: there are toUInt32OrZero and toUInt32OrNull functions, which returns zero/NULL instead of throwing exception.: while executing 'FUNCTION _CAST(x, 'UInt32')'. (CANNOT_PARSE_TEXT) (version 24.3.1.1)", GiveUp),
            ("Code: 26. DB::Exception: Cannot parse quoted string: expected opening quote ''', got 'a': (at row 1): While executing ValuesBlockInputFormat. (CANNOT_PARSE_QUOTED_STRING)", GiveUp),
            ("Code: 27. DB::Exception: Cannot parse input: expected '\\t' before: 'x\\n': (at row 1)\n: Row 1:\nColumn 0, name: a, type: UInt8, ERROR: text \"x<LINE FEED>\" is not like UInt8: While executing TabSeparatedRowInputFormat. (CANNOT_PARSE_INPUT_ASSERTION_FAILED)", GiveUp),
            ("Code: 38. DB::Exception: Cannot parse date: value is too short: (at row 1): While executing JSONEachRowRowInputFormat. (CANNOT_PARSE_DATE)", GiveUp),
            ("Code: 53. DB::Exception: Type mismatch in IN or VALUES section. Expected: UInt8. Got: String: While executing ValuesBlockInputFormat. (TYPE_MISMATCH)", GiveUp),
            ("Code: 60. DB::Exception: Table analytics.events does not exist. (UNKNOWN_TABLE)", GiveUp),
            ("Code: 62. DB::Exception: Syntax error: failed at position 1 ('INSRT'): INSRT INTO t VALUES. Expected one of: Query, SELECT query, INSERT query. (SYNTAX_ERROR)", GiveUp),
            ("Code: 69. DB::Exception: Too large precision 100 for Decimal(100, 2). (ARGUMENT_OUT_OF_BOUND)", GiveUp),
            ("Code: 70. DB::Exception: Value 300 cannot be safely converted into type UInt8: While processing _CAST(300, 'UInt8'). (CANNOT_CONVERT_TYPE)", GiveUp),
            ("Code: 117. DB::Exception: Unexpected NULL value of not Nullable type String: (at row 1): While executing JSONEachRowRowInputFormat. (INCORRECT_DATA)", GiveUp),
            ("Code: 190. DB::Exception: Elements 'n.a' and 'n.b' of Nested data structure 'n' (Array columns) have different array sizes. (SIZES_OF_ARRAYS_DONT_MATCH)", GiveUp),
            ("Code: 321. DB::Exception: Out of range: can't fit -1 into UInt32: While processing ... (VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE)", GiveUp),
            ("Code: 349. DB::Exception: Cannot convert NULL value to non-Nullable type: While processing CAST(NULL, 'String'). (CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN)", GiveUp),
            ("Code: 395. DB::Exception: Value passed to 'throwIf' function is non-zero: while executing 'FUNCTION throwIf(greater(x, 3) :: 2) -> throwIf(greater(x, 3)) UInt8 : 1'. (FUNCTION_THROW_IF_VALUE_IS_NON_ZERO)", GiveUp),
            ("Code: 407. DB::Exception: Decimal math overflow: While processing toDecimal32(1e10, 2). (DECIMAL_OVERFLOW)", GiveUp),
            ("Code: 469. DB::Exception: Constraint `positive` for table analytics.events (00000000-0000-0000-0000-000000000000) is violated at row 1. Expression: (x > 0). Column values: x = -1. (VIOLATED_CONSTRAINT)", GiveUp),
            ("Code: 164. DB::Exception: writer: Cannot execute query in readonly mode. (READONLY)", GiveUp),
            ("Code: 452. DB::Exception: Setting async_insert should not be changed. (SETTING_CONSTRAINT_VIOLATION) (version 26.9.1.1)", GiveUp),
            ("Code: 497. DB::Exception: writer: Not enough privileges. To execute this query, it's necessary to have the grant INSERT(a, b) ON analytics.events. (ACCESS_DENIED)", GiveUp),
            ("Code: 158. DB::Exception: Limit for rows (controlled by 'max_rows_to_read' setting) exceeded, max rows: 10.00, current rows: 8.19 thousand. (TOO_MANY_ROWS)", GiveUp),
            ("Code: 307. DB::Exception: Limit for rows or bytes to read exceeded, max bytes: 1.00 MiB, current bytes: 4.00 MiB. (TOO_MANY_BYTES)", GiveUp),
            ("Code: 396. DB::Exception: Limit for result exceeded, max rows: 10.00, current rows: 100.00. (TOO_MANY_ROWS_OR_BYTES)", GiveUp),
            ("Code: 252. DB::Exception: Too many partitions for single INSERT block (more than 100). The limit is controlled by 'max_partitions_per_insert_block' setting. Large number of partitions is a common misconception. It will lead to severe negative performance impact, including slow server startup, slow INSERT queries and slow SELECT queries. (TOO_MANY_PARTS)", GiveUp),
            ("Code: 252. DB::Exception: Too many parts (300 with average size of 1.07 MiB) in table 'analytics.events (00000000-0000-0000-0000-000000000000)'. Merges are processing significantly slower than inserts. (TOO_MANY_PARTS)", Retry),
            ("Code: 159. DB::Exception: Timeout exceeded: elapsed 30.000362 seconds, maximum: 30. (TIMEOUT_EXCEEDED)", Retry),
            ("Code: 202. DB::Exception: Too many simultaneous queries. Maximum: 100. (TOO_MANY_SIMULTANEOUS_QUERIES)", Retry),
            ("Code: 203. DB::Exception: No free connection. (NO_FREE_CONNECTION)", Retry),
            ("Code: 241. DB::Exception: Memory limit (total) exceeded: would use 9.31 GiB (attempt to allocate chunk of 4194304 bytes), maximum: 9.31 GiB. (MEMORY_LIMIT_EXCEEDED)", Retry),
            ("Code: 285. DB::Exception: Number of alive replicas (1) is less than requested quorum (2/2). (TOO_FEW_LIVE_REPLICAS)", Retry),
            ("Code: 319. DB::Exception: Unknown status, client must retry. Reason: Connection loss. (UNKNOWN_STATUS_OF_INSERT)", Retry),
            ("Code: 425. DB::ErrnoException: Cannot read from file /var/lib/clickhouse/x.bin, errno: 5, strerror: Input/output error. (SYSTEM_ERROR)", Retry),
            ("Code: 3. DB::Exception: Unexpected end of file while reading chunk header of HTTP chunked data. (UNEXPECTED_END_OF_FILE)", Failover),
            ("Code: 209. DB::NetException: Timeout exceeded while reading from socket (10.0.0.7:9000, 300000 ms). (SOCKET_TIMEOUT)", Failover),
            ("Code: 210. DB::NetException: Connection refused (ch-b:9000). (NETWORK_ERROR)", Failover),
            ("Code: 242. DB::Exception: Table is in readonly mode (replica path: /clickhouse/tables/01/events/replicas/ch-a). (TABLE_IS_READ_ONLY)", Failover),
            ("Code: 999. Coordination::Exception: Connection loss, path: /clickhouse/tables/01/events/blocks. (KEEPER_EXCEPTION)", Failover),
            // The 18.16 wording of the same errors.
            ("Code: 60, e.displayText() = DB::Exception: Table analytics.events doesn't exist., e.what() = DB::Exception", GiveUp),
            ("Code: 252, e.displayText() = DB::Exception: Too many partitions for single INSERT block (more than 100). The limit is controlled by 'max_partitions_per_insert_block' setting., e.what() = DB::Exception", GiveUp),
            ("Code: 252, e.displayText() = DB::Exception: Too many parts (300). Merges are processing significantly slower than inserts., e.what() = DB::Exception", Retry),
        ];
        for (body, want) in cases {
            assert_eq!(remedy(Some(500), body), *want, "{body}");
            // The code decides whatever the status.
            assert_eq!(remedy(Some(400), body), *want, "400: {body}");
            assert_eq!(remedy(Some(200), body), *want, "200: {body}");
        }
    }

    /// The row errors are data errors (given up, never retried), and the
    /// schema, statement and profile errors are not row errors: bisecting
    /// cannot help them.
    #[test]
    fn row_errors_are_a_subset_of_the_data_errors() {
        for c in ROWS {
            assert!(DATA.contains(c), "{c}");
            assert_eq!(code_remedy(*c, ""), Some(GiveUp), "{c}");
        }
        for c in [
            16, 44, 47, 60, 62, 73, 81, 115, 158, 164, 307, 396, 452, 497,
        ] {
            assert!(!is_row_error(c, ""), "{c}");
        }
        let partitions = "Code: 252. DB::Exception: Too many partitions for single INSERT block (more than 100). (TOO_MANY_PARTS)";
        assert!(is_row_error(252, partitions));
        assert!(!is_row_error(252, "Code: 252. DB::Exception: Too many parts (300). Merges are processing significantly slower than inserts. (TOO_MANY_PARTS)"));
    }

    /// Texts measured on the two test servers (18.16.1 and 26.9.2) by
    /// making each error happen: (text, remedy, blames rows). 18.16 has no
    /// CHECK constraints (469), no `max_partitions_per_insert_block`, no
    /// `accurateCast` (321); those codes are covered by the 26.9 texts and
    /// the `server_messages` table above.
    #[test]
    fn measured_server_texts() {
        let cases: &[(&str, Remedy, bool)] = &[
            // 18.16.1
            ("Code: 395, e.displayText() = DB::Exception: Value passed to 'throwIf' function is non zero, e.what() = DB::Exception", GiveUp, true),
            ("Code: 407, e.displayText() = DB::Exception: Decimal convert overflow, e.what() = DB::Exception", GiveUp, true),
            ("Code: 190, e.displayText() = DB::Exception: Arrays passed to arrayMap must have equal size, e.what() = DB::Exception", GiveUp, true),
            ("Code: 70, e.displayText() = DB::Exception: Cannot convert NULL to a non-nullable type: while converting source column NULL to destination column d, e.what() = DB::Exception", GiveUp, true),
            ("Code: 6, e.displayText() = DB::Exception: Cannot parse string 'abc' as UInt8: syntax error at begin of string. Note: there are toUInt8OrZero and toUInt8OrNull functions, which returns zero/NULL instead of throwing exception., e.what() = DB::Exception", GiveUp, true),
            ("Code: 164, e.displayText() = DB::Exception: Cannot insert into table in readonly mode, e.what() = DB::Exception", GiveUp, false),
            ("Code: 396, e.displayText() = DB::Exception: Limit for result exceeded, max rows: 1.00, current rows: 10.00, e.what() = DB::Exception", GiveUp, false),
            ("Code: 115, e.displayText() = DB::Exception: Unknown setting max_partitions_per_insert_block, e.what() = DB::Exception", GiveUp, false),
            ("Code: 62, e.displayText() = DB::Exception: Syntax error: failed at position 50: CHECK x > 0) ENGINE = MergeTree ORDER BY x. Expected one of: COMMENT, DEFAULT, MATERIALIZED, ALIAS, ClosingRoundBracket, Comma, token, e.what() = DB::Exception", GiveUp, false),
            ("Code: 60, e.displayText() = DB::Exception: Table cls.c doesn't exist., e.what() = DB::Exception", GiveUp, false),
            // 26.9.2
            ("Code: 395. DB::Exception: Value passed to 'throwIf' function is non-zero: while executing 'FUNCTION throwIf(1_UInt8 :: 1) -> throwIf(1_UInt8) UInt8 : 2'. (FUNCTION_THROW_IF_VALUE_IS_NON_ZERO) (version 26.9.2.1)", GiveUp, true),
            ("Code: 407. DB::Exception: Decimal convert overflow. Float is out of Decimal range: In scope SELECT toDecimal32(10000000000., 2). (DECIMAL_OVERFLOW) (version 26.9.2.1)", GiveUp, true),
            ("Code: 190. DB::Exception: Arrays passed to arrayMap must have equal size. Argument 3 has size 2 which differs with the size of another argument, 1. (SIZES_OF_ARRAYS_DONT_MATCH) (version 26.9.2.1)", GiveUp, true),
            ("Code: 70. DB::Exception: Value in column Int8 cannot be safely converted into type UInt8: In scope SELECT accurateCast(-1, 'UInt8'). (CANNOT_CONVERT_TYPE) (version 26.9.2.1)", GiveUp, true),
            ("Code: 469. DB::Exception: Constraint `positive` for table cls.c (d7098d6d-2da4-4557-99eb-e9d765a366da) is violated at row 1. Expression: (x > 0). Column values: x = -1. (VIOLATED_CONSTRAINT) (version 26.9.2.1)", GiveUp, true),
            ("Code: 252. DB::Exception: Too many partitions for single INSERT block (more than 1). The limit is controlled by 'max_partitions_per_insert_block' setting. Large number of partitions is a common misconception. (TOO_MANY_PARTS) (version 26.9.2.1)", GiveUp, true),
            ("Code: 164. DB::Exception: default: Cannot execute query in readonly mode. (READONLY) (version 26.9.2.1)", GiveUp, false),
            ("Code: 158. DB::Exception: Limit for rows (controlled by 'max_rows_to_read' setting) exceeded, max rows: 1.00, current rows: 10.00. (TOO_MANY_ROWS) (version 26.9.2.1)", GiveUp, false),
            ("Code: 396. DB::Exception: Limit for result exceeded, max rows: 1.00, current rows: 10.00. (TOO_MANY_ROWS_OR_BYTES) (version 26.9.2.1)", GiveUp, false),
            ("Code: 307. DB::Exception: Limit for rows or bytes to read exceeded, max bytes: 1.00 B, current bytes: 80.00 B: While executing NumbersRange. (TOO_MANY_BYTES) (version 26.9.2.1)", GiveUp, false),
            ("Code: 69. DB::Exception: Scale 100 is out of bounds (max scale: 18): In scope SELECT toDateTime64('2020-01-01', 100). (ARGUMENT_OUT_OF_BOUND) (version 26.9.2.1)", GiveUp, true),
        ];
        for (body, want, rows) in cases {
            for status in [Some(200), Some(400), Some(500)] {
                assert_eq!(remedy(status, body), *want, "{status:?}: {body}");
            }
            let code = parse_code(body).expect("a code");
            assert_eq!(is_row_error(code, body), *rows, "{body}");
        }
    }

    #[test]
    fn without_a_code_the_status_decides() {
        assert_eq!(remedy(None, ""), Failover);
        assert_eq!(remedy(None, "Code: 60. Table doesn't exist"), Failover);
        assert_eq!(remedy(Some(502), "Bad Gateway"), Failover);
        assert_eq!(remedy(Some(500), "Code: 12345. something new"), Retry);
        assert_eq!(remedy(Some(429), ""), Retry);
        assert_eq!(remedy(Some(404), "Not Found"), GiveUp);
    }

    #[test]
    fn tables_are_disjoint() {
        let all = [DATA, PERMISSION, TRANSIENT, REPLICA, REFUSED_LOGIN];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                for c in *a {
                    assert!(!b.contains(c), "{c} is in two tables");
                }
            }
        }
    }
}
