//! The report of `spate check`: the table of columns and where each is
//! filled from, one [`TopicTally`] per sampled topic (decoded and failed
//! counts per column, with the first failure), the aligned text tables
//! they print as, and [`judge`], which turns the tallies into the one
//! problem `run` would stop on.
//!
//! Pure data and formatting, on the calling thread; nothing here prints.

use super::schema::Schema;
use super::verdict::Verdict;
use spate_clickhouse::RowError;
use spate_core::error::MessagePosition;
use spate_core::record::Message;

/// The columns and what fills each one, as a text table.
pub(super) fn render_schema(schema: &Schema) -> String {
    let mut rows = vec![cells(["column", "type", "filled from"])];
    for (i, name) in schema.encoder.insert_columns().iter().enumerate() {
        let from = if schema.encoder.is_metadata_column(i) {
            "Kafka message metadata".to_owned()
        } else {
            format!("{} of the same name", field_word(schema.format_name))
        };
        rows.push(cells([name, &schema.column_type(name), &from]));
    }
    for c in schema
        .columns
        .iter()
        .filter(|c| !c.default_kind.is_insertable())
    {
        let kind = format!("not inserted ({:?})", c.default_kind).to_uppercase();
        rows.push(cells([&c.name, &c.ty.to_string(), &kind]));
    }
    format!(
        "  {} of {} columns are inserted:\n{}",
        schema.encoder.insert_columns().len(),
        schema.columns.len(),
        table(&rows, "    ")
    )
}

/// What a column is filled from in messages of `format`.
fn field_word(format: &str) -> &'static str {
    match format {
        "avro" => "Avro field",
        "protobuf" => "Protobuf field",
        "csv" => "CSV field",
        "raw" => "the whole value, into the column",
        _ => "JSON key",
    }
}

/// What one message is in `format`.
fn message_word(format: &str) -> &'static str {
    match format {
        "avro" => "Avro record",
        "protobuf" => "Protobuf message",
        "csv" => "CSV record",
        "raw" => "raw value",
        _ => "JSON object",
    }
}

/// A value that failed, and where.
#[derive(Clone, Debug)]
struct Failure {
    at: MessagePosition,
    value: String,
    reason: String,
}

impl Failure {
    fn new(msg: &Message<'_>, e: &RowError) -> Self {
        Self {
            at: MessagePosition::of(msg),
            value: e.value.clone(),
            reason: e.reason.clone(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.value.is_empty() {
            write!(f, "value {} ", self.value)?;
        }
        write!(f, "at {}: {}", self.at, self.reason)
    }
}

/// Decoded and failed counts of one column (or of whole messages).
#[derive(Default)]
struct Count {
    decoded: usize,
    failed: usize,
    first: Option<Failure>,
}

impl Count {
    fn add(&mut self, failure: Option<Failure>) {
        match failure {
            None => self.decoded += 1,
            Some(f) => {
                self.failed += 1;
                self.first.get_or_insert(f);
            }
        }
    }
}

/// The sample of one topic, tried column by column.
#[derive(Default)]
pub(super) struct TopicTally {
    topic: String,
    sampled: usize,
    /// Messages with at least one failure.
    bad: usize,
    /// Whole messages that cannot be read (not JSON, not an object, ...).
    whole: Count,
    /// Per insert column; a message that fails as a whole fails in each.
    columns: Vec<Count>,
    /// The first bad message: the column `run` would name, and why.
    first_bad: Option<(Option<String>, Failure)>,
    /// One line per partition: start, end, messages read.
    pub partitions: Vec<String>,
    /// `--envelope`: per operation seen, in first-seen order: how many
    /// messages, and the row document the first of them makes.
    changes: Vec<(&'static str, usize, Option<String>)>,
}

impl TopicTally {
    /// Messages sampled into this tally.
    pub(super) fn seen(&self) -> usize {
        self.sampled
    }

    pub fn new(topic: &str, columns: usize) -> Self {
        Self {
            topic: topic.to_owned(),
            columns: (0..columns).map(|_| Count::default()).collect(),
            ..Self::default()
        }
    }

    pub fn add(&mut self, msg: &Message<'_>, outcome: Result<&[Result<(), RowError>], RowError>) {
        self.sampled += 1;
        let first = match outcome {
            Err(e) => {
                let failure = Failure::new(msg, &e);
                self.whole.add(Some(failure.clone()));
                self.columns.iter_mut().for_each(|c| c.failed += 1);
                // JSON names no column here; the other formats' decoders
                // name the field that stopped them.
                Some((e.column.clone(), failure))
            }
            Ok(results) => {
                self.whole.add(None);
                for (count, r) in self.columns.iter_mut().zip(results) {
                    count.add(r.as_ref().err().map(|e| Failure::new(msg, e)));
                }
                let e = results.iter().find_map(|r| r.as_ref().err());
                e.map(|e| (e.column.clone(), Failure::new(msg, e)))
            }
        };
        if let Some(first) = first {
            self.bad += 1;
            self.first_bad.get_or_insert(first);
        }
    }

    /// A sampled message of a change stream was the operation `op`, and
    /// made the row document `row` (if it made a row).
    pub fn add_change(&mut self, op: &'static str, row: Option<String>) {
        match self.changes.iter_mut().find(|(o, _, _)| *o == op) {
            Some((_, n, first)) => {
                *n += 1;
                if first.is_none() {
                    *first = row;
                }
            }
            None => self.changes.push((op, 1, row)),
        }
    }

    /// The changes table: operation, messages, the row the first makes.
    fn render_changes(&self) -> String {
        if self.changes.is_empty() {
            return String::new();
        }
        let mut rows = vec![cells(["operation", "messages", "row written (the first)"])];
        for (op, n, row) in &self.changes {
            let row = match row {
                Some(r) if r.chars().count() > 160 => {
                    format!("{}…", r.chars().take(159).collect::<String>())
                }
                Some(r) => r.clone(),
                None => "(no row)".into(),
            };
            rows.push(cells([op, &n.to_string(), &row]));
        }
        format!("  Changes:\n{}", table(&rows, "    "))
    }

    pub fn render(&self, schema: &Schema) -> String {
        let mut out = format!(
            "\nTopic {}: {} message(s) sampled\n",
            self.topic, self.sampled
        );
        for p in &self.partitions {
            out.push_str(&format!("  {p}\n"));
        }
        if self.sampled == 0 {
            return out;
        }
        let count_cells = |c: &Count| [c.decoded.to_string(), c.failed.to_string()];
        let first = |c: &Count, fallback: &str| match (&c.first, c.failed) {
            (Some(f), _) => f.to_string(),
            (None, 0) => String::new(),
            (None, _) => fallback.to_owned(),
        };
        let head = ["column", "type", "decoded", "failed", "first failure"];
        let mut rows = vec![cells(head)];
        let ([d, f], whole) = (count_cells(&self.whole), first(&self.whole, ""));
        let what = message_word(schema.format_name);
        rows.push(cells(["(whole message)", what, &d, &f, &whole]));
        for (name, c) in schema.encoder.insert_columns().iter().zip(&self.columns) {
            let [d, f] = count_cells(c);
            let ty = schema.column_type(name);
            rows.push(cells([name, &ty, &d, &f, &first(c, "(whole message)")]));
        }
        out.push_str(&table(&rows, "  "));
        out.push_str(&self.render_changes());
        out
    }
}

/// One problem naming the first bad message's column, value, topic,
/// partition and offset, and how many of all sampled messages are bad.
pub(super) fn judge(tallies: &[TopicTally], schema: &Schema, verdict: &mut Verdict) {
    let Some((column, failure)) = tallies.iter().find_map(|t| t.first_bad.as_ref()) else {
        return;
    };
    let column = (column.as_ref())
        .map(|c| format!("column `{c}` ({}): ", schema.column_type(c)))
        .unwrap_or_default();
    let bad: usize = tallies.iter().map(|t| t.bad).sum();
    let sampled: usize = tallies.iter().map(|t| t.sampled).sum();
    verdict.failed.push(format!(
        "{bad} of {sampled} sampled messages cannot be inserted: {column}{failure}"
    ));
}

fn cells<const N: usize>(items: [&str; N]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// Rows as aligned text columns, each line indented by `indent`.
fn table(rows: &[Vec<String>], indent: &str) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width = |c: usize| {
        (rows.iter())
            .filter_map(|r| r.get(c))
            .map(|s| s.chars().count())
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..columns).map(width).collect();
    let mut out = String::new();
    for row in rows {
        let mut line = indent.to_owned();
        for (cell, w) in row.iter().zip(&widths) {
            line.push_str(&format!("{cell:<w$}  "));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use spate_clickhouse::{Column, EncoderOptions, RowEncoder};

    #[test]
    fn changes_are_counted_per_operation_with_the_first_row() {
        let mut tally = TopicTally::new("t", 1);
        assert_eq!(tally.render_changes(), "", "no envelope, no table");
        tally.add_change("tombstone", None);
        tally.add_change("c (create)", Some(r#"{"id":1,"ver":0}"#.into()));
        tally.add_change("c (create)", Some(r#"{"id":2,"ver":1}"#.into()));
        tally.add_change("tombstone", None);
        tally.add_change("d (delete)", Some("x".repeat(300)));
        let text = tally.render_changes();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "  Changes:");
        assert!(
            lines[2].starts_with("    tombstone")
                && lines[2].contains(" 2 ")
                && lines[2].ends_with("(no row)"),
            "{text}"
        );
        assert!(
            lines[3].contains(" 2 ") && lines[3].ends_with(r#"{"id":1,"ver":0}"#),
            "{text}"
        );
        assert!(
            lines[4].ends_with('…') && lines[4].matches('x').count() == 159,
            "{text}"
        );
    }

    #[test]
    fn whole_message_failures_count_in_every_column() {
        let columns = vec![Column {
            name: "n".into(),
            ty: spate_clickhouse::parse_type("UInt64").unwrap(),
            default_kind: spate_clickhouse::DefaultKind::None,
            default_expression: String::new(),
        }];
        let encoder = RowEncoder::new(&columns, EncoderOptions::default()).unwrap();
        let mut schema = Schema {
            columns,
            encoder,
            format: None,
            format_name: "json",
            last_change: None,
        };
        let mut tally = TopicTally::new("t", 1);
        let mut results = Vec::new();
        for (offset, payload) in [(0, r#"{"n": 1}"#), (1, "{oops"), (2, r#"{"n": "x"}"#)] {
            let msg = Message {
                topic: "t",
                partition: 0,
                offset,
                timestamp_ms: None,
                key: None,
                payload: Some(payload.as_bytes()),
                headers: None,
            };
            let outcome = schema.encoder.check_columns(&msg, &mut results);
            tally.add(&msg, outcome.map(|()| results.as_slice()));
        }
        let text = tally.render(&schema);
        let row = |name: &str| {
            let line = text.lines().find(|l| l.trim_start().starts_with(name));
            line.unwrap_or_else(|| panic!("{name}: {text}")).to_owned()
        };
        let whole = row("(whole message)");
        assert!(
            whole.contains(" 2  ") && whole.contains("offset 1: invalid JSON"),
            "{whole}"
        );
        let n = row("n ");
        assert!(
            n.contains(" 1  ") && n.contains(r#"value "x" at topic t partition 0 offset 2"#),
            "{n}"
        );
        let mut verdict = Verdict::default();
        judge(&[tally], &schema, &mut verdict);
        assert!(verdict.config.is_empty());
        assert!(
            verdict.failed[0].starts_with("2 of 3 sampled messages cannot be inserted: value {oops at topic t partition 0 offset 1: invalid JSON"),
            "{:?}",
            verdict.failed
        );
    }

    #[test]
    fn tables_align() {
        let rows = vec![cells(["a", "bb"]), cells(["ccc", "d"])];
        assert_eq!(table(&rows, "  "), "  a    bb\n  ccc  d\n");
    }
}
