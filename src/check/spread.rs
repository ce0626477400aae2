//! How `spate check` spreads one topic's sample over its partitions: equal
//! shares, and what a partition that reached its end could not give goes
//! to the others.
//!
//! A pure counter, updated by the sampling loop on the calling thread.

/// Spreads one topic's sample over its partitions: equal shares, and what
/// a partition that reached its end could not give goes to the others.
pub(super) struct Spread {
    total: usize,
    pub read: Vec<usize>,
    /// The partition's end was reached (partition EOF).
    pub ended: Vec<bool>,
}

impl Spread {
    pub fn new(total: usize, partitions: usize) -> Self {
        Self {
            total,
            read: vec![0; partitions],
            ended: vec![false; partitions],
        }
    }

    /// Per partition, whether it should give more messages.
    pub fn wants(&self) -> Vec<bool> {
        let fixed: usize = (0..self.read.len())
            .filter(|&i| self.ended[i])
            .map(|i| self.read[i])
            .sum();
        let open: Vec<usize> = (0..self.read.len()).filter(|&i| !self.ended[i]).collect();
        let mut left = self.total.saturating_sub(fixed);
        let mut wants = vec![false; self.read.len()];
        for (k, &i) in open.iter().enumerate() {
            let share = left.div_ceil(open.len() - k);
            wants[i] = self.read[i] < share;
            left -= share;
        }
        wants
    }

    /// Messages still wanted from partitions whose end was not reached.
    pub fn short(&self) -> usize {
        let read: usize = self.read.iter().sum();
        if self.wants().contains(&true) {
            self.total.saturating_sub(read)
        } else {
            0
        }
    }

    pub fn describe(&self, partition: i32, committed: Option<i64>, i: usize) -> String {
        let from = match committed {
            Some(o) => format!("from the committed offset {o}"),
            None => "from the start (nothing committed)".to_owned(),
        };
        let end = if self.ended[i] { ", end reached" } else { "" };
        format!(
            "partition {partition} {from}: {} sampled{end}",
            self.read[i]
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Spread;

    #[test]
    fn samples_spread_over_partitions_and_refill_ended_ones() {
        let mut s = Spread::new(10, 3);
        assert_eq!(s.wants(), [true, true, true]);
        s.read = vec![4, 3, 2];
        assert_eq!(s.wants(), [false, false, true]);
        // Partition 2 ended after 2: its share goes to the others.
        s.ended[2] = true;
        assert_eq!(s.wants(), [false, true, false]);
        s.read[1] = 4;
        assert_eq!(s.wants(), [false, false, false]);
        assert_eq!(s.short(), 0);
        let mut s = Spread::new(10, 2);
        s.read = vec![3, 0];
        s.ended[1] = true;
        assert_eq!((s.wants(), s.short()), (vec![true, false], 7));
        assert_eq!(Spread::new(0, 2).wants(), [false, false]);
    }
}
