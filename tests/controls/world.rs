//! The fake providers of the scenarios, by tenant: an order book, a ticket desk that another
//! actor can change, a payment provider, and a travel agency whose bookings can be cancelled.
//! Each keeps a ledger of the effects it applied, deduplicated by the key it was sent (as a
//! real API's idempotency keys do), which the tests compare with what idem reports.

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex, MutexGuard};

/// One applied effect: what, under which key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    pub what: String,
    pub key: String,
}

/// A ticket as the desk holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    pub version: u64,
    pub status: String,
}

/// One tenant's world.
#[derive(Debug, Default)]
pub struct World {
    /// Applied effects, in order, each key once.
    pub ledger: Vec<Effect>,
    /// Orders by id: the customer who owns it, whether it is cancelled.
    pub orders: BTreeMap<String, (String, bool)>,
    pub tickets: BTreeMap<String, Ticket>,
    /// Cancellations the agency refuses, by booking.
    pub refuse_cancel: Vec<String>,
    /// Whether the next cancellation, once applied, never answers (a worker stopping there).
    pub hang_after_cancel: bool,
}

impl World {
    /// Apply `what` under `key` once; a repeated key changes nothing (the provider's dedupe).
    /// Returns whether it was applied now.
    pub fn apply(&mut self, what: &str, key: &str) -> bool {
        if self.ledger.iter().any(|e| e.key == key) {
            return false;
        }
        self.ledger.push(Effect {
            what: what.to_owned(),
            key: key.to_owned(),
        });
        true
    }

    /// What was applied, in order.
    pub fn applied(&self) -> Vec<String> {
        self.ledger.iter().map(|e| e.what.clone()).collect()
    }

    /// The effects whose description starts with `prefix`.
    pub fn effects(&self, prefix: &str) -> Vec<&Effect> {
        self.ledger
            .iter()
            .filter(|e| e.what.starts_with(prefix))
            .collect()
    }
}

static WORLDS: LazyLock<Mutex<BTreeMap<String, World>>> = LazyLock::new(Mutex::default);

/// `tenant`'s world, locked.
pub fn world(tenant: &str) -> WorldGuard {
    WorldGuard {
        tenant: tenant.to_owned(),
        worlds: WORLDS.lock().unwrap_or_else(|e| e.into_inner()),
    }
}

pub struct WorldGuard {
    tenant: String,
    worlds: MutexGuard<'static, BTreeMap<String, World>>,
}

impl std::ops::Deref for WorldGuard {
    type Target = World;
    fn deref(&self) -> &World {
        self.worlds.get(&self.tenant).expect("entered above")
    }
}

impl std::ops::DerefMut for WorldGuard {
    fn deref_mut(&mut self) -> &mut World {
        self.worlds.entry(self.tenant.clone()).or_default()
    }
}

/// A tenant of its own for one scenario, its world created empty.
pub fn fresh_tenant(tag: &str) -> String {
    let tenant = crate::support::services::unique(tag);
    WORLDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(tenant.clone(), World::default());
    tenant
}
