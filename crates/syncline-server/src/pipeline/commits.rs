//! The transactions the pipeline processed last: those a snapshot started from now on must see
//! (`syncline_pg::snapshot::run::sees_all` says why), or their changes would reach neither its
//! rows nor the log that continues it.

use std::collections::VecDeque;
use std::sync::Arc;

use syncline_core::PgSnapshot;

/// How many of the last commits are kept. A commit becomes visible to new snapshots moments
/// after the stream delivered it (when its session leaves Postgres's running transactions, or a
/// synchronous standby confirmed it); thousands of commits later it long has.
const RECENT_COMMITS_MAX: usize = 16_384;

/// The last commits the pipeline processed, in commit order.
#[derive(Debug, Default)]
pub struct RecentCommits {
    xids: VecDeque<u32>,
    /// The list handed out last, while no commit came since.
    shared: Option<Arc<[u32]>>,
}

impl RecentCommits {
    /// The pipeline processed the commit of transaction `xid`.
    pub fn record(&mut self, xid: u32) {
        if self.xids.len() == RECENT_COMMITS_MAX {
            self.xids.pop_front();
        }
        self.xids.push_back(xid);
        self.shared = None;
    }

    /// Forgets the oldest commits that every snapshot from now on sees: those below the `xmin`
    /// of `seen`, a snapshot Postgres took (no transaction below it still ran, so each had
    /// ended and stays visible). Commit order is not xid order: it stops at the first to keep.
    pub fn forget_seen_by(&mut self, seen: &PgSnapshot) {
        let kept = self.xids.len();
        while self
            .xids
            .front()
            .is_some_and(|&xid| seen.widen(xid) < seen.xmin)
        {
            self.xids.pop_front();
        }
        if self.xids.len() != kept {
            self.shared = None;
        }
    }

    /// The processed commits a snapshot started now must see.
    pub fn must_see(&mut self) -> Arc<[u32]> {
        let xids = &self.xids;
        self.shared
            .get_or_insert_with(|| xids.iter().copied().collect())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_commits_until_a_snapshot_sees_them_for_good() {
        let mut commits = RecentCommits::default();
        for xid in [100, 102, 101, 105] {
            commits.record(xid);
        }
        assert_eq!(&*commits.must_see(), &[100, 102, 101, 105]);
        // 101 still ran when this snapshot was taken: 100 goes, 102 and all after it stay.
        commits.forget_seen_by(&"101:106:101".parse().unwrap());
        assert_eq!(&*commits.must_see(), &[102, 101, 105]);
        commits.forget_seen_by(&"106:106:".parse().unwrap());
        assert!(commits.must_see().is_empty());
        for xid in 0..u32::try_from(RECENT_COMMITS_MAX).unwrap() + 3 {
            commits.record(xid);
        }
        let kept = commits.must_see();
        assert_eq!(kept.len(), RECENT_COMMITS_MAX);
        assert_eq!(kept[0], 3, "the oldest go first");
    }
}
