//! The controller's commits: handing the watermarks that moved to the
//! source (coalesced, asynchronous; synchronous on a revocation and at
//! shutdown), the broker's answers to them (a refused commit is offered
//! again), the final commit within the shutdown budget, and the partition
//! gauges. Runs on the controller thread only; calls the `Source`'s
//! commit methods and writes the commit metrics.

use super::*;

impl<L: Lane> Core<L> {
    /// Commit the watermarks that moved since they were last handed out;
    /// whether there were any.
    pub(super) fn commit<S: Source<Lane = L>>(&mut self, source: &mut S, sync: bool) -> bool {
        let watermarks = self.checkpointer.take_committable();
        if watermarks.is_empty() {
            return false;
        }
        match source.commit(&watermarks, sync) {
            Ok(()) if sync => self.committed_ok(&watermarks, true),
            // Counted when the broker confirms it (`CommitConfirmed`).
            Ok(()) if source.confirms_async_commits() => {}
            // Counted at once; a later `CommitFailed` takes it back.
            Ok(()) => self.committed_ok(&watermarks, false),
            Err(e) => {
                self.metrics.commits.with_label_values(&["error"]).inc();
                tracing::warn!(error = %e, "offset commit failed; will retry");
                self.checkpointer.commit_failed(&watermarks);
            }
        }
        true
    }

    /// High watermark and lag per owned partition; the gauges of
    /// partitions no longer owned are removed, so a group's members sum up
    /// without counting a partition twice.
    pub(super) fn update_partition_gauges<S: Source<Lane = L>>(&mut self, source: &mut S) {
        if let Some(bytes) = source.prefetched_bytes() {
            self.metrics
                .prefetch_bytes
                .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
        let owned: HashSet<&PartitionId> = self.home.values().map(|(_, p)| p).collect();
        for (p, hw) in source.high_watermarks() {
            if !owned.contains(&p) {
                continue;
            }
            let labels = [&*p.topic, &p.partition.to_string()];
            self.metrics
                .high_watermark
                .with_label_values(&labels)
                .set(hw.0);
            if let Some(c) = self.committed.get(&p) {
                self.metrics
                    .consumer_lag
                    .with_label_values(&labels)
                    .set((hw.0 - c.0).max(0));
            }
            self.gauged.insert(p);
        }
        let metrics = &self.metrics;
        self.gauged.retain(|p| {
            if owned.contains(p) {
                return true;
            }
            let labels = [&*p.topic, &p.partition.to_string()];
            let _ = metrics.high_watermark.remove_label_values(&labels);
            let _ = metrics.consumer_lag.remove_label_values(&labels);
            let _ = metrics.committed_offset.remove_label_values(&labels);
            false
        });
    }

    /// The broker refused an asynchronous commit: offer it again on the
    /// next tick (the partition may be idle, its watermark unmoved), and
    /// take back a value that was counted before the broker answered.
    pub(super) fn commit_refused(&mut self, watermarks: &[(PartitionId, Watermark)], error: &str) {
        self.metrics.commits.with_label_values(&["error"]).inc();
        tracing::warn!(
            error,
            ?watermarks,
            "the broker refused an offset commit; offering it again on the next tick"
        );
        self.checkpointer.commit_failed(watermarks);
        for (p, w) in watermarks {
            if self.committed.get(p) != Some(w) || self.confirmed.get(p) == Some(w) {
                continue;
            }
            let labels = [&*p.topic, &p.partition.to_string()];
            match self.confirmed.get(p) {
                Some(c) => {
                    self.committed.insert(p.clone(), *c);
                    self.metrics
                        .committed_offset
                        .with_label_values(&labels)
                        .set(c.0);
                }
                None => {
                    self.committed.remove(p);
                    let _ = self.metrics.committed_offset.remove_label_values(&labels);
                }
            }
        }
    }

    /// Count `watermarks` as committed; `confirmed` if the broker said so
    /// (a synchronous commit, a `CommitConfirmed`).
    pub(super) fn committed_ok(
        &mut self,
        watermarks: &[(PartitionId, Watermark)],
        confirmed: bool,
    ) {
        self.metrics.commits.with_label_values(&["ok"]).inc();
        for (p, w) in watermarks {
            self.metrics
                .committed_offset
                .with_label_values(&[&*p.topic, &p.partition.to_string()])
                .set(w.0);
            self.gauged.insert(p.clone());
            let e = self.committed.entry(p.clone()).or_insert(*w);
            if *w > *e {
                *e = *w;
            }
            if confirmed {
                let c = self.confirmed.entry(p.clone()).or_insert(*w);
                if *w > *c {
                    *c = *w;
                }
            }
        }
    }

    /// Final synchronous commit of every owned lane's acknowledged
    /// watermark, then wait for outstanding commits.
    pub(super) fn final_commit<S: Source<Lane = L>>(
        &mut self,
        source: &mut S,
        deadline: Instant,
    ) -> Option<String> {
        // At least a couple of seconds, even when the drain used the budget:
        // a missed final commit turns acknowledged rows into duplicates.
        let deadline = deadline.max(self.clock.now() + FINAL_COMMIT_FLOOR);
        // Every wait of the source from here on ends by then, also one on
        // a broker that stopped answering.
        source.shutdown_deadline(Instant::now() + clock::until(&*self.clock, deadline));
        let mut error = None;
        loop {
            let watermarks = self.checkpointer.watermarks();
            if watermarks.is_empty() {
                break;
            }
            match source.commit(&watermarks, true) {
                Ok(()) => {
                    self.committed_ok(&watermarks, true);
                    break;
                }
                Err(e) if e.is_retriable() && self.clock.now() < deadline => {
                    // Typically the group is rebalancing (another member
                    // joined or left) and our generation is stale: serve
                    // the rebalance, then commit again. Revocations during
                    // the drain hand back the acknowledged watermarks at
                    // once (see `Revoker for Core`).
                    self.metrics.commits.with_label_values(&["error"]).inc();
                    tracing::warn!(error = %e, "final offset commit refused; serving the group's rebalance and retrying");
                    self.serve_source_while_draining(source);
                }
                Err(e) => {
                    self.metrics.commits.with_label_values(&["error"]).inc();
                    tracing::error!(error = %e, "final offset commit failed; the acknowledged rows will replay after restart");
                    error = Some(e.to_string());
                    break;
                }
            }
        }
        let budget = clock::until(&*self.clock, deadline);
        if let Err(e) = source.flush_commits(budget) {
            tracing::error!(error = %e, "waiting for outstanding commits failed");
            error.get_or_insert(e.to_string());
        }
        error
    }
}
