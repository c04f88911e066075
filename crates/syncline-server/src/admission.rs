//! Admission control: at most so many shape requests in flight, counted apart for initial
//! requests (`offset=-1`, which may start snapshots) and the rest. Past a limit a request gets
//! 503 with `retry-after` at once, instead of every request slowing down together.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use prometheus_client::metrics::gauge::Gauge;
use rand::Rng;

use crate::config::ConcurrencyLimits;
use crate::metrics::{KindLabels, Metrics};

/// Shortest `retry-after` of a rejected request, in seconds.
const RETRY_AFTER_MIN_S: u64 = 6;
/// Longest `retry-after` of a rejected request, in seconds.
const RETRY_AFTER_MAX_S: u64 = 10;

/// Which limit a request counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `offset=-1`.
    Initial,
    /// Everything else.
    Existing,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Initial => "initial",
            Kind::Existing => "existing",
        }
    }
}

/// The in-flight counters.
pub struct Admission {
    limits: ConcurrencyLimits,
    initial: Arc<AtomicUsize>,
    existing: Arc<AtomicUsize>,
}

/// A request's place; gives it back when dropped.
#[derive(Debug)]
pub struct Ticket {
    counter: Arc<AtomicUsize>,
    gauge: Gauge,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::AcqRel);
        self.gauge.dec();
    }
}

impl Admission {
    /// Counters enforcing `limits`.
    pub fn new(limits: ConcurrencyLimits) -> Admission {
        Admission {
            limits,
            initial: Arc::default(),
            existing: Arc::default(),
        }
    }

    /// A place for a request of `kind`, or why it is turned away.
    pub fn enter(&self, kind: Kind, metrics: &Metrics) -> Result<Ticket, Rejected> {
        let (counter, limit) = match kind {
            Kind::Initial => (&self.initial, self.limits.initial),
            Kind::Existing => (&self.existing, self.limits.existing),
        };
        let labels = KindLabels { kind: kind.label() };
        let admitted = counter
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok();
        if !admitted {
            metrics.admission_rejected.get_or_create(&labels).inc();
            return Err(Rejected {
                kind,
                limit,
                retry_after_s: rand::thread_rng().gen_range(RETRY_AFTER_MIN_S..=RETRY_AFTER_MAX_S),
            });
        }
        let gauge = metrics.admission_in_flight.get_or_create(&labels).clone();
        gauge.inc();
        Ok(Ticket {
            counter: counter.clone(),
            gauge,
        })
    }
}

/// A request turned away: too many of its kind in flight.
#[derive(Debug)]
pub struct Rejected {
    kind: Kind,
    limit: usize,
    /// Seconds the client should wait (6 to 10, drawn at random so clients spread out).
    pub retry_after_s: u64,
}

impl Rejected {
    /// Electric's 503 body for it.
    pub fn body(&self) -> String {
        format!(
            r#"{{"code":"concurrent_request_limit_exceeded","message":"Concurrent {} request limit exceeded (limit: {}), please retry"}}"#,
            self.kind.label(),
            self.limit
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_each_kind_and_gives_places_back() {
        let metrics = Metrics::default();
        let admission = Admission::new(ConcurrencyLimits {
            initial: 1,
            existing: 2,
        });
        let first = admission.enter(Kind::Initial, &metrics).unwrap();
        let refused = admission.enter(Kind::Initial, &metrics).unwrap_err();
        assert!((RETRY_AFTER_MIN_S..=RETRY_AFTER_MAX_S).contains(&refused.retry_after_s));
        assert!(refused
            .body()
            .contains("Concurrent initial request limit exceeded (limit: 1)"));
        let _a = admission.enter(Kind::Existing, &metrics).unwrap();
        let _b = admission.enter(Kind::Existing, &metrics).unwrap();
        assert!(admission.enter(Kind::Existing, &metrics).is_err());
        drop(first);
        assert!(admission.enter(Kind::Initial, &metrics).is_ok());
        assert!(metrics
            .render()
            .contains(r#"syncline_admission_rejected_total{kind="existing"} 1"#));
    }

    #[test]
    fn parses_electrics_setting() {
        let limits: ConcurrencyLimits = r#"{"initial":5,"existing":7}"#.parse().unwrap();
        assert_eq!(
            limits,
            ConcurrencyLimits {
                initial: 5,
                existing: 7
            }
        );
        assert_eq!(
            limits.to_string().parse::<ConcurrencyLimits>().unwrap(),
            limits
        );
        assert!("{\"initial\":5}".parse::<ConcurrencyLimits>().is_err());
    }
}
