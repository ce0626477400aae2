//! The idle exit of a bounded run (`ControllerConfig::idle_exit`): a
//! member that joined and holds no lane for the grace period ends.
//! Runs on the controller thread, in its consume loop; reads the
//! readiness flag the controller writes, sends nothing.

use super::Core;
use crate::source::Lane;
use std::sync::atomic::Ordering;

impl<L: Lane> Core<L> {
    /// A bounded run (`idle_exit` set) whose member joined and has held
    /// no lane for the whole grace period ends: a standby member, or one
    /// stripped of its partitions before they retired, has nothing to
    /// read, and its partitions' ends are another member's to reach.
    pub(super) fn idle_expired(&mut self) -> bool {
        let Some(grace) = self.config.idle_exit else {
            return false;
        };
        if !self.home.is_empty() || !self.readiness.joined.load(Ordering::Acquire) {
            self.idle_since = None;
            return false;
        }
        let now = self.clock.now();
        let since = *self.idle_since.get_or_insert(now);
        if now.duration_since(since) < grace {
            return false;
        }
        tracing::info!(
            grace_s = grace.as_secs_f64(),
            "this member has held no partition since it joined the group or lost its last one, for the whole grace period; the bounded run (--until-end) ends here, exit 0 (the group's other members read the partitions to their ends)"
        );
        self.drained = true;
        true
    }
}
