//! The shared servers store tests run against, and names no other test or run uses there.
//!
//! A test that needs a server reads its URL from the environment (`IDEM_REDIS_URL`,
//! `IDEM_POSTGRES_URL`). Without one it says why it skips and passes, unless
//! `IDEM_REQUIRE_SERVICES=1` makes the missing service a failure (CI sets it, so a service
//! that went missing cannot turn the durable tests into silent passes).
//!
//! A test's names on a server are a [`Scratch`]: whatever it wrote under them is removed when
//! it ends, passed or panicked; `redis_keys` and `postgres_schemas` say how.
//!
//! Only the standard library is used here, so the facade's tests include this very file
//! (`tests/support/mod.rs`) instead of keeping a copy of the rule.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The variable naming the shared Redis server.
pub const REDIS_URL: &str = "IDEM_REDIS_URL";
/// The variable naming a Redis Cluster: its nodes' URLs, comma-separated
/// (`scripts/redis-cluster start DIR` prints them).
pub const REDIS_CLUSTER_URL: &str = "IDEM_REDIS_CLUSTER_URL";
/// The variable naming the shared PostgreSQL server.
pub const POSTGRES_URL: &str = "IDEM_POSTGRES_URL";

/// The service URL in `var`; `None`, after saying why `test` skips, when it is unset, unless
/// `IDEM_REQUIRE_SERVICES=1` makes that a failure.
pub fn service_url(var: &str, test: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            unavailable(
                test,
                &format!("{var} is not set"),
                &format!("set {var} to run it against that store"),
            );
            None
        }
    }
}

/// `test` cannot run here because of `why`: a failure under `IDEM_REQUIRE_SERVICES=1`,
/// otherwise a line saying `what_to_do` to run it, and the test passes as skipped.
pub fn unavailable(test: &str, why: &str, what_to_do: &str) {
    if std::env::var("IDEM_REQUIRE_SERVICES").as_deref() == Ok("1") {
        panic!("{test}: IDEM_REQUIRE_SERVICES=1 but {why}");
    }
    eprintln!("skipping {test}: {what_to_do}");
}

/// A name no other test or run uses: `tag`, the process id, the clock in milliseconds and a
/// counter of this process. Lowercase `tag`s with `_` make valid PostgreSQL schema names.
pub fn unique(tag: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{tag}_{}_{millis}_{n}", std::process::id())
}

/// The names one test writes under on a shared server (Redis prefixes, PostgreSQL schemas),
/// and how to remove everything under them there. Dropping this removes it, whether the test
/// passed or panicked; declare it before the stores, so that it outlives them.
#[derive(Debug)]
pub struct Scratch {
    url: String,
    names: Mutex<Vec<String>>,
    remove: fn(url: &str, names: &[String]) -> Result<(), String>,
}

impl Scratch {
    pub fn new(url: &str, remove: fn(&str, &[String]) -> Result<(), String>) -> Scratch {
        Scratch {
            url: url.to_owned(),
            names: Mutex::new(Vec::new()),
            remove,
        }
    }

    /// A name no other test or run uses (see [`unique`]), removed with the others.
    pub fn fresh(&self, tag: &str) -> String {
        let name = unique(tag);
        self.names
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(name.clone());
        name
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let names = std::mem::take(
            self.names
                .get_mut()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        if names.is_empty() {
            return;
        }
        match (self.remove)(&self.url, &names) {
            Ok(()) => {}
            // A second panic while unwinding would abort the whole test binary.
            Err(e) if std::thread::panicking() => eprintln!("{e}"),
            Err(e) => panic!("{e}"),
        }
    }
}
