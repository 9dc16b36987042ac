//! Load → decide → apply, written once for the stores that run the state machine themselves.
//!
//! The memory store (under a shard's lock) and SQLite (inside `BEGIN IMMEDIATE`) can run code
//! between reading a record and writing it. Each operation on one key is then the same three
//! steps: load the record, let [`machine`] decide, apply what it decided. A backend says how
//! to load and apply ([`Records`]); each operation is a [`Transition`] (its inputs and the
//! machine function it runs); [`run`] does the three steps. Redis and PostgreSQL cannot run
//! Rust between their read and their write: each of their operations is one script or one
//! statement that encodes the same decisions (one round trip, ARCHITECTURE.md §6), and the
//! conformance suite holds them to it.
//!
//! A transition holds its inputs borrowed from the caller or owned ([`Transition::detached`]),
//! so a store that must hand an operation to another thread (SQLite, to its blocking pool)
//! copies the inputs only then, and runs the very same transition.
//!
//! A store of one's own over a map behind a lock needs only to say how to load and apply,
//! and to remember the highest fence it deleted:
//!
//! ```
//! use std::collections::HashMap;
//! use idem::store::machine::Write;
//! use idem::store::transition::{self, Records};
//! use idem::record::{Fence, Record, Timestamp}; use idem::key::RecordKey; use idem::store::StoreError;
//!
//! #[derive(Default)]
//! struct Map {
//!     records: HashMap<RecordKey, Record>,
//!     floor: Fence,
//! }
//!
//! impl Records for Map {
//!     type Error = StoreError;
//!
//!     fn load(&mut self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
//!         Ok(self.records.get(key).cloned())
//!     }
//!
//!     fn apply(&mut self, key: &RecordKey, write: Write) -> Result<(), StoreError> {
//!         match write {
//!             Write::Unchanged => {}
//!             Write::Put(record) => drop(self.records.insert(key.clone(), *record)),
//!             Write::Delete => {
//!                 if let Some(gone) = self.records.remove(key) {
//!                     self.floor = self.floor.max(gone.fence);
//!                 }
//!             }
//!         }
//!         Ok(())
//!     }
//!
//!     fn fence_floor(&mut self) -> Result<Fence, StoreError> {
//!         Ok(self.floor)
//!     }
//! }
//!
//! let mut map = Map::default();
//! let key = RecordKey::from_stored("k");
//! let release = transition::Release::new(&key, 1);
//! assert!(!transition::run(&mut map, &release, Timestamp(5))?, "nothing was held");
//! # Ok::<(), StoreError>(())
//! ```

use std::borrow::Cow;
use std::time::Duration;

use crate::key::RecordKey;
use crate::record::{Fence, Outcome, Record, Timestamp};
use crate::store::machine::{self, Write};
use crate::store::{self as contract, ClaimRequest, StoreError};

/// How a backend reads and writes one key's record inside one atomic section.
pub trait Records {
    /// What can go wrong (at least the machine's refusals, as [`StoreError`]).
    type Error: From<StoreError>;

    /// The record under `key`, as stored (expired or not).
    fn load(&mut self, key: &RecordKey) -> Result<Option<Record>, Self::Error>;

    /// Do what the machine decided for `key`.
    fn apply(&mut self, key: &RecordKey, write: Write) -> Result<(), Self::Error>;

    /// The highest fence of any record this backend deleted (0 if none), inside the same
    /// atomic section: a claim of a key without a record is fenced above it, so that a key
    /// freed and claimed again within one millisecond never hands out a fence twice
    /// ([`machine::first_fence`]). A backend raises it in [`Records::apply`] on
    /// [`Write::Delete`], and wherever else it deletes records (eviction, purge).
    fn fence_floor(&mut self) -> Result<Fence, Self::Error>;
}

/// One state change of one key's record: its inputs, and the [`machine`] function that
/// decides it.
pub trait Transition: Send + Sync {
    /// What the operation answers.
    type Output: Send + 'static;

    /// The same transition owning its inputs.
    type Owned: Transition<Output = Self::Output> + 'static;

    /// The key whose record changes.
    fn key(&self) -> &RecordKey;

    /// What to write, and the answer, given the record found at `now`; `floor` is the
    /// backend's [`Records::fence_floor`] when the key has no record (only a claim uses it,
    /// to fence such a key), 0 otherwise.
    fn decide(
        &self,
        existing: Option<Record>,
        now: Timestamp,
        floor: Fence,
    ) -> Result<(Write, Self::Output), StoreError>;

    /// The transition with its inputs copied, to run on another thread.
    fn detached(&self) -> Self::Owned;
}

/// Load the record of `transition`'s key, decide at `now`, apply the decision.
pub fn run<R: Records, T: Transition>(
    records: &mut R,
    transition: &T,
    now: Timestamp,
) -> Result<T::Output, R::Error> {
    let key = transition.key();
    let existing = records.load(key)?;
    let floor = match existing {
        None => records.fence_floor()?,
        Some(_) => 0,
    };
    let (write, answer) = transition.decide(existing, now, floor)?;
    records.apply(key, write)?;
    Ok(answer)
}

/// A copy of `input` that owns what it holds.
pub(crate) fn owned<B: ToOwned + ?Sized>(input: &B) -> Cow<'static, B> {
    Cow::Owned(input.to_owned())
}

/// [`Store::claim`](contract::Store::claim).
#[derive(Debug, Clone)]
pub struct Claim<'a>(pub Cow<'a, ClaimRequest>);

impl<'a> Claim<'a> {
    /// A claim of `request`.
    pub fn new(request: &'a ClaimRequest) -> Self {
        Claim(Cow::Borrowed(request))
    }
}

impl Transition for Claim<'_> {
    type Output = contract::Claim;
    type Owned = Claim<'static>;

    fn key(&self) -> &RecordKey {
        &self.0.key
    }

    fn decide(
        &self,
        existing: Option<Record>,
        now: Timestamp,
        floor: Fence,
    ) -> Result<(Write, contract::Claim), StoreError> {
        Ok(machine::claim(existing, &self.0, now, floor))
    }

    fn detached(&self) -> Claim<'static> {
        Claim(owned(&*self.0))
    }
}

/// [`Store::complete`](contract::Store::complete).
#[derive(Debug, Clone)]
pub struct Complete<'a> {
    /// The key.
    pub key: Cow<'a, RecordKey>,
    /// The holder's fence.
    pub fence: Fence,
    /// The outcome.
    pub outcome: Cow<'a, Outcome>,
    /// How long the record is kept.
    pub ttl: Duration,
}

impl<'a> Complete<'a> {
    /// Record `outcome` under `key`, held at `fence`.
    pub fn new(key: &'a RecordKey, fence: Fence, outcome: &'a Outcome, ttl: Duration) -> Self {
        let (key, outcome) = (Cow::Borrowed(key), Cow::Borrowed(outcome));
        Complete {
            key,
            fence,
            outcome,
            ttl,
        }
    }
}

impl Transition for Complete<'_> {
    type Output = ();
    type Owned = Complete<'static>;

    fn key(&self) -> &RecordKey {
        &self.key
    }

    fn decide(
        &self,
        existing: Option<Record>,
        now: Timestamp,
        _: Fence,
    ) -> Result<(Write, ()), StoreError> {
        let write = machine::complete(
            existing,
            &self.key,
            self.fence,
            &self.outcome,
            self.ttl,
            now,
        )?;
        Ok((write, ()))
    }

    fn detached(&self) -> Complete<'static> {
        Complete {
            key: owned(&*self.key),
            fence: self.fence,
            outcome: owned(&*self.outcome),
            ttl: self.ttl,
        }
    }
}

/// [`Store::release`](contract::Store::release).
#[derive(Debug, Clone)]
pub struct Release<'a> {
    /// The key.
    pub key: Cow<'a, RecordKey>,
    /// The holder's fence.
    pub fence: Fence,
}

impl<'a> Release<'a> {
    /// Release `key`, held at `fence`.
    pub fn new(key: &'a RecordKey, fence: Fence) -> Self {
        Release {
            key: Cow::Borrowed(key),
            fence,
        }
    }
}

impl Transition for Release<'_> {
    type Output = bool;
    type Owned = Release<'static>;

    fn key(&self) -> &RecordKey {
        &self.key
    }

    fn decide(
        &self,
        existing: Option<Record>,
        _: Timestamp,
        _: Fence,
    ) -> Result<(Write, bool), StoreError> {
        Ok(machine::release(existing.as_ref(), self.fence))
    }

    fn detached(&self) -> Release<'static> {
        Release {
            key: owned(&*self.key),
            fence: self.fence,
        }
    }
}

/// [`Store::renew`](contract::Store::renew).
#[derive(Debug, Clone)]
pub struct Renew<'a> {
    /// The key.
    pub key: Cow<'a, RecordKey>,
    /// The holder's fence.
    pub fence: Fence,
    /// The new lease.
    pub lease: Duration,
}

impl<'a> Renew<'a> {
    /// Renew the lease on `key`, held at `fence`.
    pub fn new(key: &'a RecordKey, fence: Fence, lease: Duration) -> Self {
        Renew {
            key: Cow::Borrowed(key),
            fence,
            lease,
        }
    }
}

impl Transition for Renew<'_> {
    type Output = Timestamp;
    type Owned = Renew<'static>;

    fn key(&self) -> &RecordKey {
        &self.key
    }

    fn decide(
        &self,
        existing: Option<Record>,
        now: Timestamp,
        _: Fence,
    ) -> Result<(Write, Timestamp), StoreError> {
        machine::renew(existing, &self.key, self.fence, self.lease, now)
    }

    fn detached(&self) -> Renew<'static> {
        Renew {
            key: owned(&*self.key),
            fence: self.fence,
            lease: self.lease,
        }
    }
}

/// [`Store::journal`](contract::Store::journal).
#[derive(Debug, Clone)]
pub struct Journal<'a> {
    /// The key.
    pub key: Cow<'a, RecordKey>,
    /// The holder's fence.
    pub fence: Fence,
    /// The step's name.
    pub step: Cow<'a, str>,
    /// The step's result.
    pub value: Cow<'a, str>,
}

impl<'a> Journal<'a> {
    /// Journal `step` with `value` under `key`, held at `fence`.
    pub fn new(key: &'a RecordKey, fence: Fence, step: &'a str, value: &'a str) -> Self {
        let (step, value) = (Cow::Borrowed(step), Cow::Borrowed(value));
        Journal {
            key: Cow::Borrowed(key),
            fence,
            step,
            value,
        }
    }
}

impl Transition for Journal<'_> {
    type Output = ();
    type Owned = Journal<'static>;

    fn key(&self) -> &RecordKey {
        &self.key
    }

    fn decide(
        &self,
        existing: Option<Record>,
        now: Timestamp,
        _: Fence,
    ) -> Result<(Write, ()), StoreError> {
        let write = machine::journal(
            existing,
            &self.key,
            self.fence,
            &self.step,
            &self.value,
            now,
        )?;
        Ok((write, ()))
    }

    fn detached(&self) -> Journal<'static> {
        Journal {
            key: owned(&*self.key),
            fence: self.fence,
            step: owned(&*self.step),
            value: owned(&*self.value),
        }
    }
}

/// [`Store::mark_unknown`](contract::Store::mark_unknown).
#[derive(Debug, Clone)]
pub struct MarkUnknown<'a> {
    /// The key.
    pub key: Cow<'a, RecordKey>,
    /// The holder's fence.
    pub fence: Fence,
    /// Why the outcome is unknown.
    pub error: Cow<'a, str>,
}

impl<'a> MarkUnknown<'a> {
    /// Turn `key`, held at `fence`, Unknown for `error`.
    pub fn new(key: &'a RecordKey, fence: Fence, error: &'a str) -> Self {
        let error = Cow::Borrowed(error);
        MarkUnknown {
            key: Cow::Borrowed(key),
            fence,
            error,
        }
    }
}

impl Transition for MarkUnknown<'_> {
    type Output = ();
    type Owned = MarkUnknown<'static>;

    fn key(&self) -> &RecordKey {
        &self.key
    }

    fn decide(
        &self,
        existing: Option<Record>,
        now: Timestamp,
        _: Fence,
    ) -> Result<(Write, ()), StoreError> {
        let write = machine::mark_unknown(existing, &self.key, self.fence, &self.error, now)?;
        Ok((write, ()))
    }

    fn detached(&self) -> MarkUnknown<'static> {
        MarkUnknown {
            key: owned(&*self.key),
            fence: self.fence,
            error: owned(&*self.error),
        }
    }
}

/// [`Store::resolve`](contract::Store::resolve).
#[derive(Debug, Clone)]
pub struct Resolve<'a> {
    /// The key.
    pub key: Cow<'a, RecordKey>,
    /// The outcome.
    pub outcome: Cow<'a, Outcome>,
    /// How long the record is kept.
    pub ttl: Duration,
}

impl<'a> Resolve<'a> {
    /// Settle `key` with `outcome`.
    pub fn new(key: &'a RecordKey, outcome: &'a Outcome, ttl: Duration) -> Self {
        let (key, outcome) = (Cow::Borrowed(key), Cow::Borrowed(outcome));
        Resolve { key, outcome, ttl }
    }
}

impl Transition for Resolve<'_> {
    type Output = Record;
    type Owned = Resolve<'static>;

    fn key(&self) -> &RecordKey {
        &self.key
    }

    fn decide(
        &self,
        existing: Option<Record>,
        now: Timestamp,
        _: Fence,
    ) -> Result<(Write, Record), StoreError> {
        machine::resolve(existing.as_ref(), &self.key, &self.outcome, self.ttl, now)
    }

    fn detached(&self) -> Resolve<'static> {
        Resolve {
            key: owned(&*self.key),
            outcome: owned(&*self.outcome),
            ttl: self.ttl,
        }
    }
}

/// [`Store::settle_unknown`](contract::Store::settle_unknown).
#[derive(Debug, Clone)]
pub struct SettleUnknown<'a> {
    /// The key.
    pub key: Cow<'a, RecordKey>,
    /// The fence the record must still be Unknown at.
    pub fence: Fence,
    /// The outcome (the effect happened), or none (it did not).
    pub outcome: Option<Cow<'a, Outcome>>,
    /// How long the record is kept.
    pub ttl: Duration,
}

impl<'a> SettleUnknown<'a> {
    /// Settle `key`, Unknown at `fence`, with `outcome` or by deleting it.
    pub fn new(
        key: &'a RecordKey,
        fence: Fence,
        outcome: Option<&'a Outcome>,
        ttl: Duration,
    ) -> Self {
        let outcome = outcome.map(Cow::Borrowed);
        SettleUnknown {
            key: Cow::Borrowed(key),
            fence,
            outcome,
            ttl,
        }
    }
}

impl Transition for SettleUnknown<'_> {
    type Output = bool;
    type Owned = SettleUnknown<'static>;

    fn key(&self) -> &RecordKey {
        &self.key
    }

    fn decide(
        &self,
        existing: Option<Record>,
        now: Timestamp,
        _: Fence,
    ) -> Result<(Write, bool), StoreError> {
        let outcome = self.outcome.as_deref();
        Ok(machine::settle_unknown(
            existing.as_ref(),
            self.fence,
            outcome,
            self.ttl,
            now,
        ))
    }

    fn detached(&self) -> SettleUnknown<'static> {
        SettleUnknown {
            key: owned(&*self.key),
            fence: self.fence,
            outcome: self.outcome.as_deref().map(owned),
            ttl: self.ttl,
        }
    }
}

/// [`Store::force_release`](contract::Store::force_release).
#[derive(Debug, Clone)]
pub struct ForceRelease<'a> {
    /// The key.
    pub key: Cow<'a, RecordKey>,
}

impl<'a> ForceRelease<'a> {
    /// Forget `key`'s unsettled record.
    pub fn new(key: &'a RecordKey) -> Self {
        ForceRelease {
            key: Cow::Borrowed(key),
        }
    }
}

impl Transition for ForceRelease<'_> {
    type Output = bool;
    type Owned = ForceRelease<'static>;

    fn key(&self) -> &RecordKey {
        &self.key
    }

    fn decide(
        &self,
        existing: Option<Record>,
        _: Timestamp,
        _: Fence,
    ) -> Result<(Write, bool), StoreError> {
        Ok((machine::force_release(existing.as_ref(), &self.key)?, true))
    }

    fn detached(&self) -> ForceRelease<'static> {
        ForceRelease {
            key: owned(&*self.key),
        }
    }
}
