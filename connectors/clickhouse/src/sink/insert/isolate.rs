//! [`Bisection`]: which rows of a rejected batch to insert next, so the
//! rows the server rejects alone are isolated and every other row is
//! inserted once. Pure bookkeeping, used by one insert worker (tokio task)
//! for the chunk it holds; the worker does the inserts.
//!
//! Cost: a batch of `n` rows with `k` rejected rows takes at most
//! `1 + 2·k·⌈log2 n⌉` inserts (the first, whole one included): each bad
//! row fails once per level of the halving, and each failing range costs
//! two inserts of its halves. One bad row in 100 000: at most 35 inserts.

use std::ops::Range;

/// The ranges of rows still to insert, front first.
#[derive(Debug)]
pub(crate) struct Bisection {
    /// A stack: the last entry is the next range, in row order.
    pending: Vec<Range<usize>>,
    inserts: u64,
}

impl Bisection {
    /// The batch of `rows` rows failed as a whole with a row error: its
    /// halves come next (a single row is isolated at once).
    pub(crate) fn after_failure(rows: usize) -> (Self, Option<usize>) {
        let mut b = Bisection {
            pending: Vec::new(),
            inserts: 1,
        };
        let isolated = b.failed(0..rows);
        (b, isolated)
    }

    /// The next range to insert.
    pub(crate) fn next(&mut self) -> Option<Range<usize>> {
        let r = self.pending.pop()?;
        self.inserts += 1;
        Some(r)
    }

    /// Range `r` failed with a row error: split it, or, for one row, that
    /// row is isolated (returned).
    pub(crate) fn failed(&mut self, r: Range<usize>) -> Option<usize> {
        match r.len() {
            0 => None,
            1 => Some(r.start),
            n => {
                let mid = r.start + n / 2;
                self.pending.push(mid..r.end);
                self.pending.push(r.start..mid);
                None
            }
        }
    }

    /// Inserts made so far, the whole batch's first one included.
    pub(crate) fn inserts(&self) -> u64 {
        self.inserts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bisect `rows` rows of which `bad` fail: (isolated rows, rows
    /// inserted with how often, inserts made).
    fn run(rows: usize, bad: &[usize]) -> (Vec<usize>, Vec<u32>, u64) {
        let mut inserted = vec![0u32; rows];
        let (mut b, mut isolated) = Bisection::after_failure(rows);
        let mut out: Vec<usize> = isolated.take().into_iter().collect();
        while let Some(r) = b.next() {
            if bad.iter().any(|x| r.contains(x)) {
                out.extend(b.failed(r));
            } else {
                r.for_each(|i| inserted[i] += 1);
            }
        }
        (out, inserted, b.inserts())
    }

    #[test]
    fn isolates_exactly_the_bad_rows_and_inserts_the_rest_once() {
        for (rows, bad) in [
            (1, vec![0]),
            (2, vec![1]),
            (7, vec![0, 6]),
            (100, vec![13]),
            (1000, vec![0, 1, 2, 500, 999]),
            (1024, (0..1024).step_by(100).collect()),
        ] {
            let (isolated, inserted, inserts) = run(rows, &bad);
            assert_eq!(isolated, bad, "{rows} rows");
            for (i, n) in inserted.iter().enumerate() {
                let want = u32::from(!bad.contains(&i));
                assert_eq!(*n, want, "{rows} rows: row {i} inserted {n} times");
            }
            let log = (rows as f64).log2().ceil() as u64;
            assert!(
                inserts <= 1 + 2 * bad.len() as u64 * log.max(1),
                "{rows} rows, {} bad: {inserts} inserts",
                bad.len()
            );
        }
    }

    #[test]
    fn one_bad_row_in_100_000_costs_at_most_35_inserts() {
        let (_, _, inserts) = run(100_000, &[77_777]);
        assert!(inserts <= 35, "{inserts}");
    }
}
