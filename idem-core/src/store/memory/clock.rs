//! Where the memory store reads the time: the system clock, or one a test moves by hand.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::record::{Timestamp, saturating_millis};

/// A source of time for the memory store, so tests can expire leases without sleeping.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that moves only when told to.
///
/// ```
/// use std::time::Duration;
/// use idem::store::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let t0 = clock.now();
/// clock.advance(Duration::from_secs(2));
/// assert_eq!(clock.now().as_millis(), t0.as_millis() + 2000);
/// ```
#[derive(Debug)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// Start at the system time.
    pub fn new() -> Self {
        ManualClock(AtomicU64::new(Timestamp::now().as_millis()))
    }

    /// Move forward.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(saturating_millis(by), Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}
