//! The Redis store's connection: one multiplexed connection manager, replaced after a
//! command timed out on it; when a failed command may be sent again; the connect-time check
//! that the server never evicts keys.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};

use super::codec::text;
use crate::store::StoreError;

pub(super) const CONNECT_BUDGET: Duration = Duration::from_secs(10);
/// One connection attempt.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);
/// One command; a 1 MiB outcome on a busy server must fit in it. A connection on which a
/// command timed out is replaced (see [`Connection`]).
pub(super) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Reconnection attempts after a dropped connection.
const RECONNECT_RETRIES: usize = 2;

/// The manager every connection of a store made by [`RedisStore::connect`] comes from.
pub(super) fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECTION_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_number_of_retries(RECONNECT_RETRIES)
}

/// The store's connection manager, and a fresh one after a command timed out.
///
/// The manager reconnects by itself only when its connection drops. A connection that stays
/// open but answers nothing (a hung server, a flow dropped by a firewall without a reset)
/// makes each command wait for the response timeout and fail, for as long as the socket
/// stays open. So after a timeout the store replaces the manager with a new one that connects
/// on first use; operations still in flight on the old one finish or time out on it, and it
/// is closed when the last of them lets go.
pub(super) struct Connection {
    current: Mutex<Current>,
    /// How to make a new manager; `None` for a manager the caller built
    /// ([`RedisStore::from_manager`]), which is kept.
    client: Option<redis::Client>,
}

struct Current {
    /// Counts replacements, so the many operations that time out on one silent connection
    /// replace it once.
    generation: u64,
    manager: ConnectionManager,
}

impl Connection {
    pub(super) fn new(manager: ConnectionManager, client: Option<redis::Client>) -> Self {
        Connection {
            current: Mutex::new(Current {
                generation: 0,
                manager,
            }),
            client,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Current> {
        // `Current` is updated only once a new manager exists, so it is consistent even if a
        // thread panicked while holding the lock.
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current manager (a cheap handle on it) and its generation.
    pub(super) fn manager(&self) -> (u64, ConnectionManager) {
        let current = self.lock();
        (current.generation, current.manager.clone())
    }

    /// An operation on the manager of `generation` failed with `error`: replace that manager
    /// if the error is a timeout and it has not been replaced already.
    pub(super) fn failed(&self, generation: u64, error: &RedisError) {
        let Some(client) = &self.client else {
            return;
        };
        if !error.is_timeout() {
            return;
        }
        let mut current = self.lock();
        if current.generation != generation {
            return;
        }
        // Connects lazily: nothing waits on the server under the lock. It fails only on a
        // configuration the first manager was built with already.
        if let Ok(manager) =
            ConnectionManager::new_lazy_with_config(client.clone(), manager_config())
        {
            current.manager = manager;
            current.generation += 1;
        }
    }

    /// Run `operation` on the current connection. If it fails because the connection is
    /// gone, run it once more, on the connection the manager is already making, when that is
    /// safe (see [`Resend`]); a command that timed out is never sent again. Either way a
    /// timed-out connection is replaced for the operations that follow.
    ///
    /// Why once: the manager reconnects after the first failure (with its own bounded
    /// retries and connection timeout), so a second attempt waits for that reconnection. A
    /// long outage leaves the manager holding the `Connection refused` of its last failed
    /// reconnection; without the second attempt the first operation once the server is back
    /// would fail on that stale error.
    pub(super) async fn call<T, F, Fut>(
        &self,
        resend: Resend,
        operation: F,
    ) -> Result<T, StoreError>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let (generation, conn) = self.manager();
        let error = match operation(conn).await {
            Ok(value) => return Ok(value),
            Err(e) => e,
        };
        self.failed(generation, &error);
        if !resend.allows(&error) {
            return Err(unavailable(error));
        }
        let (generation, conn) = self.manager();
        operation(conn).await.map_err(|e| {
            self.failed(generation, &e);
            unavailable(e)
        })
    }

    /// Refuse a server that may evict keys: eviction deletes InProgress records (a second
    /// worker acquires a key while the first still runs), completed records and fence
    /// counters (a call runs again, a stale holder's fence is handed out again).
    pub(super) async fn check_eviction_policy(&self) -> Result<(), StoreError> {
        let reply: RedisResult<Value> = {
            let (generation, mut conn) = self.manager();
            let reply = redis::cmd("CONFIG")
                .arg("GET")
                .arg("maxmemory-policy")
                .query_async(&mut conn)
                .await;
            if let Err(e) = &reply {
                self.failed(generation, e);
            }
            reply
        };
        let reply = match reply {
            Ok(v) => v,
            Err(e) if refused(&e) => return Err(policy_unknown(&e.to_string())),
            Err(e) => return Err(unavailable(e)),
        };
        match config_value(&reply, "maxmemory-policy") {
            Some(policy) if policy == "noeviction" => Ok(()),
            Some(policy) => Err(StoreError::Unavailable(format!(
                "Redis may evict keys: its maxmemory-policy is `{policy}`, and an evicted \
                 record lets a second worker run a call that is still running, or run a \
                 completed one again. Set it to `noeviction`: `CONFIG SET maxmemory-policy \
                 noeviction` (and `maxmemory-policy noeviction` in redis.conf so a restart \
                 keeps it), or in the managed service's parameter group"
            ))),
            None => Err(policy_unknown("the reply named no such setting")),
        }
    }
}

/// When an operation whose connection failed may be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Resend {
    /// Only when the command certainly never reached the server: the connection to it was
    /// refused, so no byte of the command was written to any socket (a refusal can only come
    /// from a connection attempt, never from a connection that carried a command). Used for
    /// the state-changing scripts: running one twice is not harmless in general (a second
    /// `claim` would find the caller's own record and report it as someone else's; a second
    /// `complete`, `mark_unknown` or `settle_unknown` would find the record already settled
    /// and report the holder fenced).
    IfNeverSent,
    /// Also after the connection dropped with the command possibly sent: for reads (`TIME`,
    /// `SCAN`, a `MULTI` of `HGETALL`/`LRANGE`), which change nothing when run twice.
    AfterDrop,
}

impl Resend {
    fn allows(self, error: &RedisError) -> bool {
        error.is_connection_refusal()
            || (self == Resend::AfterDrop && !error.is_timeout() && error.is_connection_dropped())
    }
}

/// Whether the server answered a command with a refusal (unknown or renamed command, no ACL
/// permission) rather than failing to answer.
fn refused(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(ServerErrorKind::ResponseError | ServerErrorKind::NoPerm)
            | ErrorKind::Extension
    )
}

/// The server would not say what its eviction policy is.
fn policy_unknown(why: &str) -> StoreError {
    StoreError::Unavailable(format!(
        "cannot read Redis's maxmemory-policy (CONFIG GET maxmemory-policy: {why}). idem needs \
         `noeviction`: an evicted record lets a second worker run a call that is still \
         running, or run a completed one again. If the server is a managed service that \
         forbids CONFIG and its parameter group sets maxmemory-policy to noeviction, connect \
         with `RedisOptions::new().assume_noeviction()`"
    ))
}

/// The value of `name` in a `CONFIG GET` reply (a flat array in RESP2, a map in RESP3).
fn config_value(reply: &Value, name: &str) -> Option<String> {
    let pairs: Vec<(&Value, &Value)> = match reply {
        Value::Array(flat) => flat.chunks_exact(2).map(|p| (&p[0], &p[1])).collect(),
        Value::Map(map) => map.iter().map(|(k, v)| (k, v)).collect(),
        _ => return None,
    };
    pairs
        .into_iter()
        .find(|(k, _)| text(k).is_some_and(|k| k.eq_ignore_ascii_case(name)))
        .and_then(|(_, v)| text(v))
}

/// Every Redis error means the store could not do the work: writes fail closed on it.
pub(super) fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}
