//! The lease heartbeat: renews the leases of running bodies from a thread of its own.
//!
//! A body that blocks its thread (a synchronous SDK call inside an `async fn`, a starved
//! runtime) cannot renew its own lease: renewal that shares the body's task waits for the
//! body to yield. Nor can a task spawned for the purpose, when the body blocks the worker
//! the task was scheduled on (tokio keeps a task spawned or woken from a worker in that
//! worker's slot, which no other worker steals). So one heartbeat thread per process renews
//! every registered lease when it falls due, on the runtime the lease was taken on, and
//! tells a body whose lease was refused (`Fenced`: it lapsed, or another worker took the
//! key) to stop. One per process, not per dispatcher: an application that builds a
//! dispatcher per request must not start a thread per request.
//!
//! Registering costs a lock and a map insert (and wakes the thread only when the new lease
//! falls due before anything else); the thread starts with the first registration and ends
//! once it has had nothing to renew for a second, so a dispatcher whose bodies finish
//! quickly rarely wakes it at all.
//!
//! What it cannot do: a network store (Redis, PostgreSQL) answers through its connection's
//! I/O, which the lease's runtime drives; on a current-thread runtime whose one thread a body
//! blocks, or a multi-thread runtime whose every worker is blocked, that renewal waits for a
//! worker to come free. The lease may then lapse: the body's late `complete` is refused
//! (`Fenced`) and the outcome is Unknown, and a verify hook is asked only after the settle
//! delay (at least a lease, five minutes by default). Keep blocking work off the runtime's
//! workers (`tokio::task::spawn_blocking`) for bodies that block longer than that.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use idem_core::{Fence, RecordKey, Store, StoreError};
use tokio::runtime::Handle;

use crate::context::FencedKey;

/// How often a lease is renewed: every third of it, at most every 10 ms.
pub(crate) fn period(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(10))
}

/// How long the thread waits with nothing to renew before it ends.
const LINGER: Duration = Duration::from_secs(1);

/// The process's heartbeat: the leases it renews and the thread's schedule.
static HEARTBEAT: Heartbeat = Heartbeat {
    state: Mutex::new(State {
        leases: Slots {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        },
        next_id: 0,
        wakes_at: None,
    }),
    wake: Condvar::new(),
};

#[derive(Debug)]
struct Heartbeat {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Debug)]
struct State {
    leases: Slots,
    next_id: u64,
    /// When the thread will next look at the leases; `None` when no thread runs.
    wakes_at: Option<Instant>,
}

/// The registered leases, each in a slot found by index (a registration costs no hashing),
/// and told apart from a later lease in the same slot by its id, which is never reused: a
/// renewal answered after its lease was dropped must not touch the next one.
#[derive(Debug)]
struct Slots {
    slots: Vec<Option<Lease>>,
    free: Vec<usize>,
    len: usize,
}

/// Where a lease is: its slot and its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ticket {
    slot: usize,
    id: u64,
}

impl Slots {
    fn insert(&mut self, lease: Lease) -> Ticket {
        let id = lease.id;
        self.len += 1;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some(lease);
                slot
            }
            None => {
                self.slots.push(Some(lease));
                self.slots.len() - 1
            }
        };
        Ticket { slot, id }
    }

    fn get_mut(&mut self, t: Ticket) -> Option<&mut Lease> {
        self.slots
            .get_mut(t.slot)?
            .as_mut()
            .filter(|lease| lease.id == t.id)
    }

    fn remove(&mut self, t: Ticket) {
        if let Some(place) = self.slots.get_mut(t.slot)
            && place.as_ref().is_some_and(|lease| lease.id == t.id)
        {
            *place = None;
            self.len -= 1;
            self.free.push(t.slot);
        }
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = (Ticket, &mut Lease)> {
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(|(slot, place)| {
                place
                    .as_mut()
                    .map(|lease| (Ticket { slot, id: lease.id }, lease))
            })
    }

    fn values(&self) -> impl Iterator<Item = &Lease> {
        self.slots.iter().flatten()
    }
}

struct Lease {
    id: u64,
    store: Arc<dyn Store>,
    key: RecordKey,
    fence: Fence,
    lease: Duration,
    due: Instant,
    /// The runtime the lease was taken on: the store's connections live there.
    runtime: Handle,
    /// A renewal was refused: the lease lapsed or another worker took the key. The body must
    /// stop.
    lost: bool,
    waker: Option<Waker>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("key", &self.key)
            .field("fence", &self.fence)
            .field("due", &self.due)
            .field("lost", &self.lost)
            .finish()
    }
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // Every critical section is a few map operations: the state is consistent after a panic.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keep `key` held at `fence` until the returned registration is dropped. Outside a tokio
/// runtime nothing renews the lease (the dispatcher always runs inside one).
pub(crate) fn keep(held: &FencedKey, lease: Duration) -> Registration {
    let id = match Handle::try_current() {
        Ok(runtime) => HEARTBEAT.insert(&held.store, &held.key, held.fence, lease, runtime),
        Err(_) => {
            tracing::warn!("no runtime to renew the lease on; it may lapse");
            None
        }
    };
    Registration { id }
}

impl Heartbeat {
    fn insert(
        &'static self,
        store: &Arc<dyn Store>,
        key: &RecordKey,
        fence: Fence,
        lease: Duration,
        runtime: Handle,
    ) -> Option<Ticket> {
        let due = Instant::now() + period(lease);
        let mut state = lock(&self.state);
        let id = state.next_id;
        state.next_id += 1;
        let ticket = state.leases.insert(Lease {
            id,
            store: store.clone(),
            key: key.clone(),
            fence,
            lease,
            due,
            runtime,
            lost: false,
            waker: None,
        });
        match state.wakes_at {
            None => {
                state.wakes_at = Some(due);
                drop(state);
                let started = std::thread::Builder::new()
                    .name("idem-heartbeat".into())
                    .spawn(move || self.beat());
                if let Err(e) = started {
                    tracing::warn!(error = %e, "cannot start the lease heartbeat; leases may lapse");
                    lock(&self.state).wakes_at = None;
                }
            }
            // The thread sleeps past this lease's first renewal: wake it to plan again.
            Some(at) if at > due => {
                state.wakes_at = Some(due);
                drop(state);
                self.wake.notify_one();
            }
            Some(_) => {}
        }
        Some(ticket)
    }
}

/// A lease the heartbeat renews; dropping it stops the renewals.
#[derive(Debug)]
pub(crate) struct Registration {
    id: Option<Ticket>,
}

impl Registration {
    /// Ready once the heartbeat found the key taken by another worker.
    pub(crate) fn lost(&self) -> Lost<'_> {
        Lost(self)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            lock(&HEARTBEAT.state).leases.remove(id);
        }
    }
}

/// See [`Registration::lost`].
pub(crate) struct Lost<'a>(&'a Registration);

impl Future for Lost<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(id) = self.0.id else {
            return Poll::Pending;
        };
        let mut state = lock(&HEARTBEAT.state);
        match state.leases.get_mut(id) {
            Some(lease) if !lease.lost => {
                lease.waker = Some(cx.waker().clone());
                Poll::Pending
            }
            _ => Poll::Ready(()),
        }
    }
}

/// Marks the heartbeat stopped if its thread panics, so that the next registration starts
/// another instead of trusting a thread that is gone. (A thread that ends normally marks it
/// under the lock itself, where a new registration cannot slip in between.)
struct Unwinding(&'static Heartbeat);

impl Drop for Unwinding {
    fn drop(&mut self) {
        if std::thread::panicking() {
            lock(&self.0.state).wakes_at = None;
        }
    }
}

/// A renewal to make: what of a lease the thread needs outside the lock.
struct Due {
    id: Ticket,
    store: Arc<dyn Store>,
    key: RecordKey,
    fence: Fence,
    lease: Duration,
    runtime: Handle,
}

impl Heartbeat {
    /// The heartbeat thread: renew what is due, sleep until the next is, end when idle.
    fn beat(&'static self) {
        let _unwinding = Unwinding(self);
        let mut idle_since: Option<Instant> = None;
        loop {
            let now = Instant::now();
            let due: Vec<Due> = {
                let mut state = lock(&self.state);
                if state.leases.is_empty() {
                    let since = *idle_since.get_or_insert(now);
                    if now.duration_since(since) >= LINGER {
                        state.wakes_at = None;
                        return;
                    }
                } else {
                    idle_since = None;
                }
                state
                    .leases
                    .iter_mut()
                    .filter(|(_, l)| l.due <= now && !l.lost)
                    .map(|(id, l)| {
                        l.due = now + period(l.lease);
                        Due {
                            id,
                            store: l.store.clone(),
                            key: l.key.clone(),
                            fence: l.fence,
                            lease: l.lease,
                            runtime: l.runtime.clone(),
                        }
                    })
                    .collect()
            };
            // Renewed together, on the runtime the first was taken on (wakers work across
            // runtimes, and a dispatcher's leases nearly always share one): a slow store costs a
            // beat one round trip, not one per lease.
            if let Some(runtime) = due.first().map(|d| d.runtime.clone()) {
                let renewals = due
                    .iter()
                    .map(|d| async move { (d, d.store.renew(&d.key, d.fence, d.lease).await) });
                let renewed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    runtime.block_on(futures_util::future::join_all(renewals))
                }));
                match renewed {
                    Ok(results) => {
                        for (d, result) in results {
                            match result {
                                Ok(_) => {}
                                Err(StoreError::Fenced { .. }) => {
                                    // The lease lapsed or another worker owns the call now (a
                                    // take-over, an Unknown settled by a verify hook): the body
                                    // must stop rather than apply an effect it may also apply.
                                    let mut state = lock(&self.state);
                                    if let Some(lease) = state.leases.get_mut(d.id) {
                                        tracing::warn!(key = %d.key, "lease lost while the tool ran; stopping the body");
                                        lease.lost = true;
                                        if let Some(waker) = lease.waker.take() {
                                            waker.wake();
                                        }
                                    }
                                }
                                // The store may be back before the lease ends: the next beat
                                // tries again.
                                Err(e) => {
                                    tracing::warn!(error = %e, key = %d.key, "lease renewal failed")
                                }
                            }
                        }
                    }
                    // The runtime is shutting down, say: the leases lapse and are fenced.
                    Err(_) => tracing::warn!("lease renewal panicked"),
                }
            }
            let state = lock(&self.state);
            let next = state
                .leases
                .values()
                .filter(|l| !l.lost)
                .map(|l| l.due)
                .min()
                .unwrap_or_else(|| Instant::now() + LINGER);
            let mut state = state;
            state.wakes_at = Some(next);
            let wait = next.saturating_duration_since(Instant::now());
            let (mut state, _) = self
                .wake
                .wait_timeout(state, wait)
                .unwrap_or_else(|e| e.into_inner());
            // Planned again by whoever woke us, or at the next beat.
            state.wakes_at = Some(Instant::now());
        }
    }
}
