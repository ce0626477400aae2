//! Table schema and server capabilities.
//!
//! Owns [`Column`] (one row of `system.columns`), [`DefaultKind`] and
//! [`ServerFeatures`] (what the connected server version supports). Built once
//! at start-up by the thread that connects ([`crate::ChClient`]); read-only
//! afterwards and shared freely.

use crate::types::ChType;

/// `system.columns.default_kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DefaultKind {
    /// No default expression.
    None,
    /// `DEFAULT expr`: insertable; the server may fill it.
    Default,
    /// `MATERIALIZED expr`: never inserted.
    Materialized,
    /// `ALIAS expr`: never inserted.
    Alias,
    /// `EPHEMERAL`: not inserted by spate.
    Ephemeral,
}

impl DefaultKind {
    /// Parse `system.columns.default_kind` (empty string = none).
    /// Unknown kinds are treated as non-insertable (`Alias`) so spate never
    /// sends a column the server would reject.
    #[must_use]
    pub fn parse(s: &str) -> DefaultKind {
        match s.trim() {
            "" => DefaultKind::None,
            "DEFAULT" => DefaultKind::Default,
            "MATERIALIZED" => DefaultKind::Materialized,
            "ALIAS" => DefaultKind::Alias,
            "EPHEMERAL" => DefaultKind::Ephemeral,
            _ => DefaultKind::Alias,
        }
    }

    /// Whether spate sends this column in `INSERT`s.
    #[must_use]
    pub fn is_insertable(self) -> bool {
        matches!(self, DefaultKind::None | DefaultKind::Default)
    }
}

/// One column of the target table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    /// Column name.
    pub name: String,
    /// Column type.
    pub ty: ChType,
    /// Kind of default expression.
    pub default_kind: DefaultKind,
    /// The expression as the server prints it (`now()`, `toDate(ts)`,
    /// `'dflt'`); empty without one. Spate never evaluates it: the server
    /// does (see the encoder's defaults rules); it is compared to notice a
    /// changed DEFAULT and shown in logs.
    pub default_expression: String,
}

impl Column {
    /// A column with no default expression.
    #[must_use]
    pub fn plain(name: &str, ty: ChType) -> Column {
        Column {
            name: name.to_owned(),
            ty,
            default_kind: DefaultKind::None,
            default_expression: String::new(),
        }
    }

    /// Whether the server computes this column when an insert leaves it
    /// out (`DEFAULT expr`).
    #[must_use]
    pub fn has_default(&self) -> bool {
        self.default_kind == DefaultKind::Default
    }
}

/// What the connected server supports, derived from `SELECT version()`.
///
/// Each boundary is the first release that has the feature; the comment on
/// each field cites where that was checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerFeatures {
    /// `(major, minor)` of the server version.
    pub version: (u32, u32),
    /// `insert_deduplication_token` setting: >= 22.2. Introduced by
    /// ClickHouse PR #32304 (opened 2021-12-06, follow-ups #34192 on
    /// 2022-01-31 and docs #34567 on 2022-02-13, i.e. after the 22.1 release
    /// of 2022-01-18).
    pub insert_deduplication_token: bool,
    /// `RowBinaryWithDefaults` input format: >= 23.7. The brief guessed 23.6,
    /// but the format was added by PR #51695 (opened 2023-06-30) and is listed
    /// under "New Feature" of "ClickHouse release 23.7, 2023-07-27" in the
    /// official changelog.
    pub row_binary_with_defaults: bool,
    /// `async_insert` setting: >= 21.11 ("ClickHouse v21.11 introduced
    /// async_insert", Tinybird KB; ClickHouse docs on asynchronous inserts).
    pub async_insert: bool,
    /// `DateTime64` type: >= 20.1 (per the brief; not independently
    /// confirmed from the changelog).
    pub datetime64: bool,
    /// `Map` type: >= 21.1 (experimental there, behind
    /// `allow_experimental_map_type`; per the brief).
    pub map_type: bool,
    /// `Bool` type: >= 21.12. The brief said 22.1, but the ClickHouse
    /// changelog lists it in "v21.12, 2021-12-15" (cited in ClickHouse issue
    /// #36294 and clickhouse-sqlalchemy issue #212).
    pub bool_type: bool,
    /// `LowCardinality` needs `allow_experimental_low_cardinality_type=1`
    /// before 19.3: the changelog of release 19.3 lists "Removed
    /// `allow_experimental_low_cardinality_type` setting. `LowCardinality`
    /// data types are production ready" (PR #4323, 2019-02-09).
    pub low_cardinality_needs_experimental_flag: bool,
    /// `system.columns.position`: added by PR #11655 (merged 2020-06-14,
    /// first in 20.5 or 20.6); 20.6 is used to be safe. Older servers list
    /// columns in table order anyway (checked on 18.16).
    pub columns_position: bool,
    /// A Native block's column of another type than the table's is
    /// converted: >= 23.3 (PR #46990, "Allow types conversion in Native
    /// input format", merged 2023-03, setting
    /// `input_format_native_allow_types_conversion`, on by default). Before,
    /// the insert fails with a bad cast (code 368; measured on 18.16 for
    /// UInt32 into UInt64) where the column classes differ; RowBinary never
    /// converts and is read misaligned.
    pub native_converts_types: bool,
}

/// Why a version string could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot parse ClickHouse version `{0}`")]
pub struct VersionError(pub String);

impl ServerFeatures {
    /// Derive features from `SELECT version()` output, e.g. `18.16.1` or
    /// `24.8.4.13`.
    pub fn from_version(v: &str) -> Result<ServerFeatures, VersionError> {
        let mut parts = v.trim().split('.');
        let mut num = || -> Option<u32> {
            let p = parts.next()?;
            let digits = p
                .find(|c: char| !c.is_ascii_digit())
                .map_or(p, |end| &p[..end]);
            digits.parse().ok()
        };
        let (Some(major), Some(minor)) = (num(), num()) else {
            return Err(VersionError(v.to_owned()));
        };
        let at_least = |a: u32, b: u32| (major, minor) >= (a, b);
        Ok(ServerFeatures {
            version: (major, minor),
            insert_deduplication_token: at_least(22, 2),
            row_binary_with_defaults: at_least(23, 7),
            async_insert: at_least(21, 11),
            datetime64: at_least(20, 1),
            map_type: at_least(21, 1),
            bool_type: at_least(21, 12),
            low_cardinality_needs_experimental_flag: !at_least(19, 3),
            columns_position: at_least(20, 6),
            native_converts_types: at_least(23, 3),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(v: &str) -> ServerFeatures {
        ServerFeatures::from_version(v).unwrap()
    }

    #[test]
    fn parses_versions() {
        assert_eq!(f("18.16.1").version, (18, 16));
        assert_eq!(f("24.8.4.13").version, (24, 8));
        assert_eq!(f(" 23.7.1.2470-stable\n").version, (23, 7));
        assert!(ServerFeatures::from_version("").is_err());
        assert!(ServerFeatures::from_version("abc").is_err());
        assert!(ServerFeatures::from_version("22").is_err());
    }

    #[test]
    fn old_server_has_nothing_new() {
        let s = f("18.16.1");
        assert!(!s.insert_deduplication_token);
        assert!(!s.row_binary_with_defaults);
        assert!(!s.async_insert);
        assert!(!s.datetime64);
        assert!(!s.map_type);
        assert!(!s.bool_type);
        assert!(s.low_cardinality_needs_experimental_flag);
        assert!(!s.columns_position);
    }

    #[test]
    fn dedup_token_boundary() {
        assert!(!f("22.1.3.7").insert_deduplication_token);
        assert!(f("22.2.1").insert_deduplication_token);
    }

    #[test]
    fn with_defaults_boundary() {
        assert!(!f("23.6.2.18").row_binary_with_defaults);
        assert!(f("23.7.1").row_binary_with_defaults);
        assert!(!f("18.16.1").native_converts_types);
        assert!(!f("23.2.7").native_converts_types);
        assert!(f("23.3.1").native_converts_types);
        assert!(f("24.8.4.13").row_binary_with_defaults);
    }

    #[test]
    fn async_insert_boundary() {
        assert!(!f("21.10.1").async_insert);
        assert!(f("21.11.1").async_insert);
    }

    #[test]
    fn datetime64_boundary() {
        assert!(!f("19.17.1").datetime64);
        assert!(f("20.1.2").datetime64);
    }

    #[test]
    fn map_boundary() {
        assert!(!f("20.12.8").map_type);
        assert!(f("21.1.2").map_type);
    }

    #[test]
    fn bool_boundary() {
        assert!(!f("21.11.5").bool_type);
        assert!(f("21.12.2").bool_type);
    }

    #[test]
    fn low_cardinality_flag_boundary() {
        assert!(f("19.1.6").low_cardinality_needs_experimental_flag);
        assert!(!f("19.3.3").low_cardinality_needs_experimental_flag);
    }

    #[test]
    fn columns_position_boundary() {
        assert!(!f("20.5.4").columns_position);
        assert!(f("20.6.1").columns_position);
    }

    #[test]
    fn default_kinds() {
        assert_eq!(DefaultKind::parse(""), DefaultKind::None);
        assert_eq!(DefaultKind::parse("DEFAULT"), DefaultKind::Default);
        assert_eq!(
            DefaultKind::parse("MATERIALIZED"),
            DefaultKind::Materialized
        );
        assert_eq!(DefaultKind::parse("ALIAS"), DefaultKind::Alias);
        assert_eq!(DefaultKind::parse("EPHEMERAL"), DefaultKind::Ephemeral);
        assert!(DefaultKind::Default.is_insertable());
        assert!(!DefaultKind::Ephemeral.is_insertable());
    }
}
