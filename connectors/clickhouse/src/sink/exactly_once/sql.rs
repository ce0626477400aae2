//! The state table's SQL text: its name, quoting, TabSeparated fields,
//! and what spate reads about a table before it trusts it with
//! exactly-once ([`TableFacts`]). Shared by the intent log, the state
//! table's home and the preflight; no I/O but [`facts`].

use crate::client::ChClient;

/// Name of the state table, in the target table's database.
pub const STATE_TABLE: &str = "spate_intents";

/// A SQL string literal.
pub(crate) fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A TabSeparated field's text (`\'` is `'`, `\\` is `\`, ...).
pub(crate) fn untsv(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('0') => out.push('\0'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// A TabSeparated field.
pub(crate) fn tsv(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('\t', "\\t")
        .replace('\n', "\\n")
}

/// What the preflight read about the target table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TableFacts {
    pub(crate) engine: String,
    pub(crate) engine_full: String,
    /// The server's default `non_replicated_deduplication_window` (absent
    /// before the setting existed).
    pub(crate) default_window: Option<u64>,
    /// The server's default `replicated_deduplication_window`.
    pub(crate) default_replicated_window: Option<u64>,
    /// The server's default `replicated_deduplication_window_seconds`
    /// (absent before the setting existed).
    pub(crate) default_window_seconds: Option<u64>,
    pub(crate) has_views: bool,
    /// The session's `insert_deduplicate` (a profile may turn it off).
    pub(crate) insert_deduplicate: bool,
}

/// A table setting's value from `engine_full` (`... SETTINGS a = 1, b = 2`).
pub(crate) fn table_setting(engine_full: &str, name: &str) -> Option<u64> {
    let mut from = 0;
    while let Some(i) = engine_full[from..].find(name) {
        let at = from + i;
        from = at + name.len();
        let whole = engine_full[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
        let Some(rest) = engine_full[from..].trim_start().strip_prefix('=') else {
            continue;
        };
        if whole {
            let digits: String = rest
                .trim_start()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            return digits.parse().ok();
        }
    }
    None
}

/// The `system.tables` row of `db.table`: the TabSeparated fields of
/// `select` (raw; [`untsv`] each).
pub(crate) async fn table_row(
    client: &ChClient,
    (db, table): (&str, &str),
    select: &str,
) -> Result<String, String> {
    let sql = format!(
        "SELECT {select} FROM system.tables WHERE database = {} AND name = {}",
        quote(db),
        quote(table)
    );
    let text = client
        .fetch_text(&sql, "TabSeparated")
        .await
        .map_err(|e| e.to_string())?;
    text.lines()
        .next()
        .map(str::to_owned)
        .ok_or_else(|| format!("table {db}.{table} not found"))
}

/// Read the [`TableFacts`] of `db.table`.
pub(crate) async fn facts(client: &ChClient, db: &str, table: &str) -> Result<TableFacts, String> {
    let line = table_row(
        client,
        (db, table),
        "engine, replaceAll(engine_full, '\\t', ' '), length(dependencies_table) > 0",
    )
    .await?;
    let mut f = line.split('\t');
    let (engine, engine_full, views) = (f.next(), f.next(), f.next());
    let defaults = client
        .fetch_text(
            "SELECT name, value FROM system.merge_tree_settings WHERE name IN \
             ('non_replicated_deduplication_window', 'replicated_deduplication_window', \
             'replicated_deduplication_window_seconds')",
            "TabSeparated",
        )
        .await
        .map_err(|e| e.to_string())?;
    let default = |name: &str| {
        (defaults.lines())
            .filter_map(|l| l.split_once('\t'))
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.trim().parse().ok())
    };
    let dedup = client
        .fetch_text(
            "SELECT value FROM system.settings WHERE name = 'insert_deduplicate'",
            "TabSeparated",
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(TableFacts {
        engine: untsv(engine.unwrap_or_default()),
        engine_full: untsv(engine_full.unwrap_or_default()),
        default_window: default("non_replicated_deduplication_window"),
        default_replicated_window: default("replicated_deduplication_window"),
        default_window_seconds: default("replicated_deduplication_window_seconds"),
        has_views: views == Some("1"),
        // Absent (a server without the setting) is not "off".
        insert_deduplicate: dedup.trim() != "0",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_settings_and_tsv() {
        assert_eq!(
            table_setting("X SETTINGS a_window = 5, b = 1", "a_window"),
            Some(5)
        );
        assert_eq!(table_setting("X SETTINGS b = 1", "a_window"), None);
        assert_eq!(
            table_setting("X SETTINGS non_a_window = 3, a_window = 4", "a_window"),
            Some(4),
            "a longer name is not the setting"
        );
        assert_eq!(tsv("a\tb"), "a\\tb");
        assert_eq!(untsv(&tsv("a\tb\\c")), "a\tb\\c");
        assert_eq!(untsv("M(\\'/p\\', \\'r\\')"), "M('/p', 'r')");
        assert_eq!(quote("it's"), "'it\\'s'");
    }
}
