//! Assertions shared by several tests.

use super::clickhouse::Ch;

/// For each partition with committed offset `C`, every offset `< C` is in
/// `table` (committed never runs ahead of the rows). Returns the committed
/// offsets (0 where nothing was committed).
pub fn assert_committed_prefix_present(
    ch: &Ch,
    table: &str,
    committed: &[Option<i64>],
    context: &str,
) -> Vec<u64> {
    let mut out = Vec::new();
    for (p, c) in committed.iter().enumerate() {
        let c = c.unwrap_or(0).max(0) as u64;
        let present = ch.u64(&format!(
            "SELECT uniqExact(_offset) FROM {table} WHERE _partition = {p} AND _offset < {c}"
        ));
        assert_eq!(
            present, c,
            "{context}: partition {p} committed {c} but only {present} distinct offsets below it are in {table}"
        );
        out.push(c);
    }
    out
}
