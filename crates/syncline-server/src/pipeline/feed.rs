//! One shape's share of the replication stream: which transactions reach its log, and when.
//!
//! A shape's log holds exactly the transactions its snapshot does not see, each whole, in
//! commit order, after the snapshot. While the snapshot runs its transactions wait here (the
//! snapshot's visibility is not known until it has started, and its rows must come first); when
//! it is durable the waiting transactions it did not see are appended and the feed goes live.
//! The transaction in progress at that moment is decided as a whole too: if the snapshot saw
//! it, none of its messages reach the log, neither those already waiting nor those still to
//! come (including the one held back to learn which message is the transaction's last).

use syncline_core::PgSnapshot;

use super::encode::PendingMessage;

/// What a feed writes to: a shape's log.
pub trait ShapeLog {
    /// Appends messages of the open transaction.
    fn append(&mut self, messages: &[PendingMessage]) -> syncline_storage::Result<()>;
    /// Commits the open transaction.
    fn commit(&mut self) -> syncline_storage::Result<()>;
    /// The commit LSN of the last transaction the log holds (0 if none).
    fn last_committed_lsn(&mut self) -> syncline_storage::Result<u64>;
}

/// A committed transaction waiting for the snapshot.
#[derive(Debug)]
struct WaitingTxn {
    xid: u32,
    messages: Vec<PendingMessage>,
}

/// Where the feed's transactions go.
#[derive(Debug)]
enum Phase {
    /// The snapshot is running: transactions wait in memory (boxed: most feeds are live, and
    /// a large server has hundreds of thousands).
    Snapshotting(Box<Waiting>),
    /// Transactions are appended as they arrive.
    Live,
}

/// The transactions waiting for a running snapshot.
#[derive(Debug, Default)]
struct Waiting {
    /// Committed transactions, in commit order.
    done: Vec<WaitingTxn>,
    /// Finished messages of the transaction in progress.
    open: Vec<PendingMessage>,
}

/// One shape's transaction gate; see the module documentation.
#[derive(Debug)]
pub struct Feed {
    phase: Phase,
    /// The snapshot's visibility: transactions it saw never reach the log.
    visibility: Option<PgSnapshot>,
    /// Transactions committed at or before this LSN are already in the log; `None` until the
    /// log of a shape restored at start is first needed.
    skip_through: Option<u64>,
    /// The transaction whose messages are waiting in `open` or `held`.
    current: Option<u32>,
    /// The latest message of the current transaction, held back until it is known whether it
    /// is the shape's last in the transaction (boxed, as [`Phase::Snapshotting`] is).
    held: Option<Box<PendingMessage>>,
    /// Messages of the current transaction were appended to the log.
    in_txn: bool,
}

impl Feed {
    /// The feed of a new shape whose snapshot is about to start.
    pub fn snapshotting() -> Feed {
        Feed {
            phase: Phase::Snapshotting(Box::default()),
            visibility: None,
            skip_through: Some(0),
            current: None,
            held: None,
            in_txn: false,
        }
    }

    /// The feed of a shape restored from disk: its snapshot (seen by `visibility`) and the
    /// transactions up to its log's last commit are in its log.
    pub fn restored(visibility: Option<PgSnapshot>) -> Feed {
        Feed {
            phase: Phase::Live,
            visibility,
            skip_through: None,
            current: None,
            held: None,
            in_txn: false,
        }
    }

    /// A restored subquery shape's moves followed more than its log's commits: every
    /// transaction committed at or before `through`, and every one `seen` (its last move-in's
    /// snapshot, later than its own) saw, is reflected in its log and skipped.
    pub fn reflects(
        &mut self,
        through: u64,
        seen: Option<PgSnapshot>,
        log: &mut dyn ShapeLog,
    ) -> syncline_storage::Result<()> {
        assert!(
            matches!(self.phase, Phase::Live) && self.current.is_none(),
            "only a restored feed that took nothing yet reflects moves"
        );
        let logged = match self.skip_through {
            Some(lsn) => lsn,
            None => log.last_committed_lsn()?,
        };
        self.skip_through = Some(logged.max(through));
        if seen.is_some() {
            self.visibility = seen;
        }
        Ok(())
    }

    /// Whether the snapshot is still running (transactions wait in memory).
    pub fn is_snapshotting(&self) -> bool {
        matches!(self.phase, Phase::Snapshotting(_))
    }

    /// The snapshot has recorded which transactions it sees.
    pub fn snapshot_started(&mut self, visibility: PgSnapshot) {
        assert!(
            self.is_snapshotting(),
            "a live shape's snapshot cannot start"
        );
        self.visibility = Some(visibility);
    }

    /// Whether the transaction `xid`, committed at `lsn`, belongs in the log: not already in
    /// it, and not seen by the snapshot.
    pub fn wants(
        &mut self,
        xid: u32,
        lsn: u64,
        log: &mut dyn ShapeLog,
    ) -> syncline_storage::Result<bool> {
        let skip_through = match self.skip_through {
            Some(lsn) => lsn,
            None => *self.skip_through.insert(log.last_committed_lsn()?),
        };
        Ok(lsn > skip_through && !self.saw(xid))
    }

    fn saw(&self, xid: u32) -> bool {
        self.visibility.as_ref().is_some_and(|v| v.is_visible(xid))
    }

    /// Takes the next message of transaction `xid` (one [`Feed::wants`]).
    pub fn push(
        &mut self,
        xid: u32,
        message: PendingMessage,
        log: &mut dyn ShapeLog,
    ) -> syncline_storage::Result<()> {
        assert!(
            self.current.is_none_or(|c| c == xid),
            "messages of transaction {xid} while {:?} is unfinished",
            self.current
        );
        self.current = Some(xid);
        match self.held.replace(Box::new(message)) {
            Some(previous) => self.deliver(previous.finish(false), log),
            None => Ok(()),
        }
    }

    /// Appends (live) or keeps (snapshot running) one finished message.
    fn deliver(
        &mut self,
        message: PendingMessage,
        log: &mut dyn ShapeLog,
    ) -> syncline_storage::Result<()> {
        match &mut self.phase {
            Phase::Snapshotting(waiting) => {
                waiting.open.push(message);
                Ok(())
            }
            Phase::Live => {
                self.in_txn = true;
                log.append(std::slice::from_ref(&message))
            }
        }
    }

    /// The transaction `xid` committed. Returns whether the log got a commit (it has data to
    /// make durable).
    pub fn commit(&mut self, xid: u32, log: &mut dyn ShapeLog) -> syncline_storage::Result<bool> {
        if self.current.take().is_none() {
            return Ok(false);
        }
        if let Some(last) = self.held.take() {
            self.deliver(last.finish(true), log)?;
        }
        match &mut self.phase {
            Phase::Snapshotting(waiting) => {
                let messages = std::mem::take(&mut waiting.open);
                waiting.done.push(WaitingTxn { xid, messages });
                Ok(false)
            }
            Phase::Live if std::mem::take(&mut self.in_txn) => {
                log.commit()?;
                Ok(true)
            }
            Phase::Live => Ok(false),
        }
    }

    /// The snapshot is durable: appends the waiting transactions it did not see and goes live.
    /// `current` is the transaction the stream is in the middle of, if any: if the snapshot saw
    /// it, its waiting messages are dropped, and [`Feed::wants`] refuses the rest.
    pub fn go_live(
        &mut self,
        current: Option<u32>,
        log: &mut dyn ShapeLog,
    ) -> syncline_storage::Result<()> {
        let Phase::Snapshotting(waiting) = std::mem::replace(&mut self.phase, Phase::Live) else {
            return Ok(());
        };
        let Waiting { done, open } = *waiting;
        assert!(
            self.visibility.is_some(),
            "a snapshot is durable only after it recorded its visibility"
        );
        for txn in done.iter().filter(|t| !self.saw(t.xid)) {
            log.append(&txn.messages)?;
            log.commit()?;
        }
        if let Some(xid) = self.current {
            assert_eq!(
                Some(xid),
                current,
                "waiting messages belong to the open transaction"
            );
            if self.saw(xid) {
                self.current = None;
                self.held = None;
            } else if !open.is_empty() {
                log.append(&open)?;
                self.in_txn = true;
            }
        }
        Ok(())
    }

    /// The stream lost the transaction in progress; it will be delivered again from its Begin.
    /// Returns whether the log got part of it (the caller cuts the log back to its last commit).
    pub fn interrupted(&mut self) -> bool {
        self.current = None;
        self.held = None;
        if let Phase::Snapshotting(waiting) = &mut self.phase {
            waiting.open.clear();
        }
        std::mem::take(&mut self.in_txn)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use syncline_core::{LogOffset, PgSnapshot};
    use syncline_storage::Operation;

    use super::*;

    /// A log in memory: committed messages, and those of the open transaction.
    #[derive(Default)]
    struct MemoryLog {
        committed: Vec<String>,
        open: Vec<String>,
        last_lsn: u64,
    }

    impl ShapeLog for MemoryLog {
        fn append(&mut self, messages: &[PendingMessage]) -> syncline_storage::Result<()> {
            let text = |m: &PendingMessage| String::from_utf8(m.json.clone()).unwrap();
            self.open.extend(messages.iter().map(text));
            Ok(())
        }

        fn commit(&mut self) -> syncline_storage::Result<()> {
            self.committed.append(&mut self.open);
            self.committed.push("COMMIT".into());
            Ok(())
        }

        fn last_committed_lsn(&mut self) -> syncline_storage::Result<u64> {
            Ok(self.last_lsn)
        }
    }

    impl MemoryLog {
        /// Cuts the log back to its last commit (what reopening a writer does).
        fn abort(&mut self) {
            self.open.clear();
        }
    }

    /// A transaction: xid `xid(t)`, commit LSN `lsn(t)`, and per change how many messages it
    /// makes for the shape (0: the shape does not see the change).
    #[derive(Debug, Clone)]
    struct TxnSpec {
        changes: Vec<usize>,
        seen_by_snapshot: bool,
    }

    fn xid(t: usize) -> u32 {
        100 + u32::try_from(t).unwrap()
    }

    fn lsn(t: usize) -> u64 {
        1_000 * (u64::try_from(t).unwrap() + 1)
    }

    fn message(t: usize, n: usize) -> PendingMessage {
        PendingMessage {
            offset: LogOffset::new(lsn(t), u64::try_from(n).unwrap()),
            key: Vec::new(),
            op: Operation::Insert,
            json: format!("t{t}m{n}").into_bytes(),
        }
    }

    /// What reaches the feed, in stream order: a transaction's changes (or its interruption
    /// before change `cut`, after which it is delivered again whole), with the pipeline's
    /// commands between any two of them.
    #[derive(Debug, Clone, Copy)]
    enum Event {
        Change { t: usize, n: usize, messages: usize },
        Interrupt { t: usize },
        Commit { t: usize },
    }

    fn stream(txns: &[TxnSpec], cuts: &[Option<usize>]) -> Vec<Event> {
        let mut events = Vec::new();
        for (t, spec) in txns.iter().enumerate() {
            let deliver = |upto: usize, events: &mut Vec<Event>| {
                let mut n = 0;
                for &messages in &spec.changes[..upto] {
                    events.push(Event::Change { t, n, messages });
                    n += messages;
                }
            };
            if let Some(cut) = cuts[t] {
                deliver(cut.min(spec.changes.len()), &mut events);
                events.push(Event::Interrupt { t });
            }
            deliver(spec.changes.len(), &mut events);
            events.push(Event::Commit { t });
        }
        events
    }

    /// Runs the stream through a feed added before event `add`, whose snapshot starts before
    /// event `started` and is durable before event `done`; returns the log and the first
    /// transaction that began after the shape was added.
    fn run(
        txns: &[TxnSpec],
        events: &[Event],
        add: usize,
        started: usize,
        done: usize,
    ) -> (MemoryLog, usize) {
        // The transaction in progress when the shape is added committed before its snapshot
        // began (pgoutput sends only committed transactions), so the snapshot sees it.
        let in_progress_at_add = match events.get(add) {
            Some(Event::Change { t, .. } | Event::Interrupt { t } | Event::Commit { t })
                if add > 0 && !matches!(events[add - 1], Event::Commit { .. }) =>
            {
                Some(*t)
            }
            _ => None,
        };
        let first_after_add = match events.get(add) {
            Some(Event::Change { t, .. } | Event::Interrupt { t } | Event::Commit { t }) => {
                *t + usize::from(in_progress_at_add.is_some())
            }
            None => txns.len(),
        };
        let seen = |t: usize| t < first_after_add || txns[t].seen_by_snapshot;
        let xmax = u64::from(xid(txns.len()));
        let visibility = PgSnapshot {
            xmin: u64::from(xid(0)),
            xmax,
            xip: (0..txns.len())
                .filter(|&t| !seen(t))
                .map(|t| u64::from(xid(t)))
                .collect(),
        };
        let mut log = MemoryLog::default();
        let mut feed: Option<Feed> = None;
        let mut current: Option<usize> = None;
        let mut touched = false;
        for (i, event) in events
            .iter()
            .copied()
            .chain([Event::Interrupt { t: usize::MAX }])
            .enumerate()
        {
            if i == add {
                feed = Some(Feed::snapshotting());
            }
            if let Some(feed) = feed.as_mut() {
                if i == started {
                    feed.snapshot_started(visibility.clone());
                }
                if i == done {
                    feed.go_live(current.map(xid), &mut log).unwrap();
                }
            }
            match event {
                Event::Change { t, n, messages } => {
                    current = Some(t);
                    let Some(feed) = feed.as_mut() else { continue };
                    if messages == 0 || !feed.wants(xid(t), lsn(t), &mut log).unwrap() {
                        continue;
                    }
                    touched = true;
                    for k in n..n + messages {
                        feed.push(xid(t), message(t, k), &mut log).unwrap();
                    }
                }
                Event::Interrupt { t } if t == usize::MAX => {}
                Event::Interrupt { .. } => {
                    current = None;
                    touched = false;
                    if feed.as_mut().is_some_and(Feed::interrupted) {
                        log.abort();
                    }
                }
                Event::Commit { t } => {
                    current = None;
                    if std::mem::take(&mut touched) {
                        feed.as_mut().unwrap().commit(xid(t), &mut log).unwrap();
                    }
                }
            }
        }
        (log, first_after_add)
    }

    /// Every message of every transaction from `first` on that the snapshot did not see, in
    /// order, the last of each marked, each transaction committed.
    fn expected(txns: &[TxnSpec], first: usize) -> Vec<String> {
        let mut out = Vec::new();
        for (t, spec) in txns.iter().enumerate().skip(first) {
            let total: usize = spec.changes.iter().sum();
            if spec.seen_by_snapshot || total == 0 {
                continue;
            }
            for k in 0..total {
                let last = if k + 1 == total { ",\"last\":true" } else { "" };
                out.push(format!("t{t}m{k}{last}}}}}"));
            }
            out.push("COMMIT".into());
        }
        out
    }

    fn txn() -> impl Strategy<Value = TxnSpec> {
        (prop::collection::vec(0..=2usize, 1..5), any::<bool>()).prop_map(
            |(changes, seen_by_snapshot)| TxnSpec {
                changes,
                seen_by_snapshot,
            },
        )
    }

    fn scenario() -> impl Strategy<Value = (Vec<TxnSpec>, Vec<Option<usize>>, [usize; 3])> {
        prop::collection::vec(txn(), 1..8).prop_flat_map(|txns| {
            let cuts = prop::collection::vec(prop::option::weighted(0.2, 0..4usize), txns.len());
            (Just(txns), cuts, [0..64usize, 0..64usize, 0..64usize])
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4_000))]

        /// Whatever the interleaving of the snapshot's steps with the stream, the log holds
        /// exactly the transactions that began after the shape was added and that the
        /// snapshot did not see.
        #[test]
        fn log_holds_exactly_the_transactions_the_snapshot_did_not_see(
            (txns, cuts, points) in scenario()
        ) {
            let events = stream(&txns, &cuts);
            let mut points = points.map(|p| p % (events.len() + 1));
            points.sort_unstable();
            let [add, started, done] = points;
            let (log, first) = run(&txns, &events, add, started, done);
            prop_assert!(log.open.is_empty(), "uncommitted messages: {:?}", log.open);
            prop_assert_eq!(log.committed, expected(&txns, first));
        }
    }

    #[test]
    fn a_restored_feed_skips_what_its_log_holds() {
        let mut log = MemoryLog {
            last_lsn: lsn(1),
            ..MemoryLog::default()
        };
        let mut feed = Feed::restored(None);
        for t in 0..3 {
            if feed.wants(xid(t), lsn(t), &mut log).unwrap() {
                feed.push(xid(t), message(t, 0), &mut log).unwrap();
                feed.commit(xid(t), &mut log).unwrap();
            }
        }
        assert_eq!(log.committed, ["t2m0,\"last\":true}}", "COMMIT"]);
    }
}
