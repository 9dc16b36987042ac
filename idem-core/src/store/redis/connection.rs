//! The Redis store's connection: one multiplexed connection manager to one server, or one
//! cluster connection (`cluster.rs`), replaced after a command timed out on it; when a failed
//! command may be sent again; the connect-time check that the server (every primary of a
//! cluster) never evicts keys.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{
    Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, ServerErrorKind, Value,
};

use super::cluster::{self, Node};
use super::codec::{millis, text};
use super::{CONNECTION_TIMEOUT, RESPONSE_TIMEOUT};
use crate::store::StoreError;

const CONNECT_BUDGET: Duration = Duration::from_secs(10);
/// Reconnection attempts after a dropped connection.
const RECONNECT_RETRIES: usize = 2;

/// The manager every connection of a store made by [`RedisStore::connect`] comes from.
pub(super) fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECTION_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_number_of_retries(RECONNECT_RETRIES)
}

/// A connection to one server, or to a cluster (commands routed by their keys' slots, `MOVED`
/// and `ASK` followed, the topology refreshed after a failover: see `cluster.rs`). Both are
/// cheap handles on one multiplexed connection (per node, in a cluster).
#[derive(Clone)]
pub(super) enum Conn {
    Server(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    /// Run `cmd` on `node` (a cluster primary, by address), or as routed by its keys when
    /// `node` is `None` (a single server has only one node).
    pub(super) async fn query_on<T: redis::FromRedisValue>(
        &mut self,
        cmd: &Cmd,
        node: Option<&Node>,
    ) -> RedisResult<T> {
        match (self, node) {
            (Conn::Cluster(conn), Some(node)) => {
                let value = conn.route_command(cmd.clone(), node.routing()).await?;
                Ok(redis::from_redis_value(value)?)
            }
            (conn, _) => cmd.query_async(conn).await,
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Server(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Server(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Server(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// How to make the next connection after a timeout.
pub(super) enum Maker {
    Server(redis::Client),
    Cluster(Box<ClusterClient>),
}

/// The store's connection, and a fresh one after a command timed out.
///
/// The manager reconnects by itself only when its connection drops. A connection that stays
/// open but answers nothing (a hung server, a flow dropped by a firewall without a reset)
/// makes each command wait for the response timeout and fail, for as long as the socket
/// stays open; a cluster connection does not replace a node's connection after a timeout
/// either. So after a timeout the store replaces the connection with a new one that connects
/// on first use; operations still in flight on the old one finish or time out on it, and it
/// is closed when the last of them lets go.
pub(super) struct Connection {
    current: Mutex<Current>,
    /// How to make a new connection; `None` for a manager the caller built
    /// ([`RedisStore::from_manager`]), which is kept.
    client: Option<Maker>,
}

struct Current {
    /// Counts replacements, so the many operations that time out on one silent connection
    /// replace it once.
    generation: u64,
    manager: Conn,
}

impl Connection {
    pub(super) fn new(manager: Conn, client: Option<Maker>) -> Self {
        Connection {
            current: Mutex::new(Current {
                generation: 0,
                manager,
            }),
            client,
        }
    }

    /// Whether the store talks to a cluster.
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self.lock().manager, Conn::Cluster(_))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Current> {
        // `Current` is updated only once a new manager exists, so it is consistent even if a
        // thread panicked while holding the lock.
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current connection (a cheap handle on it) and its generation.
    pub(super) fn manager(&self) -> (u64, Conn) {
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
        let fresh = match client {
            Maker::Server(client) => {
                ConnectionManager::new_lazy_with_config(client.clone(), manager_config())
                    .map(Conn::Server)
                    .ok()
            }
            Maker::Cluster(client) => Some(Conn::Cluster(
                client.get_pending_async_connection_with_config(cluster::config()),
            )),
        };
        if let Some(manager) = fresh {
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
        F: Fn(Conn) -> Fut,
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
    /// counters (a call runs again, a stale holder's fence is handed out again). A cluster
    /// answers per node: every primary is asked, and each must say `noeviction`.
    pub(super) async fn check_eviction_policy(&self) -> Result<(), StoreError> {
        let mut get = redis::cmd("CONFIG");
        get.arg("GET").arg("maxmemory-policy");
        let (generation, conn) = self.manager();
        let replies: RedisResult<Vec<(String, Value)>> = match conn {
            Conn::Server(mut conn) => get
                .query_async(&mut conn)
                .await
                .map(|reply| vec![(String::new(), reply)]),
            Conn::Cluster(mut conn) => cluster::on_every_primary(&mut conn, &get).await,
        };
        let replies = match replies {
            Ok(replies) => replies,
            Err(e) => {
                self.failed(generation, &e);
                return Err(match refused(&e) {
                    true => policy_unknown(&e.to_string()),
                    false => unavailable(e),
                });
            }
        };
        for (node, reply) in &replies {
            let at = match node.is_empty() {
                true => String::new(),
                false => format!(" (the cluster primary at {node})"),
            };
            if let Value::ServerError(e) = reply {
                return Err(policy_unknown(&format!("{e:?}{at}")));
            }
            match config_value(reply, "maxmemory-policy") {
                Some(policy) if policy == "noeviction" => {}
                Some(policy) => {
                    return Err(StoreError::Unavailable(format!(
                        "Redis may evict keys: its maxmemory-policy is `{policy}`{at}, and an \
                         evicted record lets a second worker run a call that is still running, \
                         or run a completed one again. Set it to `noeviction`: `CONFIG SET \
                         maxmemory-policy noeviction` (and `maxmemory-policy noeviction` in \
                         redis.conf so a restart keeps it; on every primary of a cluster), or in \
                         the managed service's parameter group"
                    )));
                }
                None => {
                    return Err(policy_unknown(&format!(
                        "the reply named no such setting{at}"
                    )));
                }
            }
        }
        Ok(())
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

/// A replica timeout must be shorter than the response timeout, or every write that waited
/// for it would time out instead.
pub(super) fn check_replica_timeout(options: &super::RedisOptions) -> Result<(), StoreError> {
    match options.replicas {
        Some(acks) if acks.timeout >= RESPONSE_TIMEOUT => Err(StoreError::Unavailable(format!(
            "the replica timeout of {} ms is not shorter than the {} s response timeout: \
             every write that waited for it would time out instead",
            millis(acks.timeout),
            RESPONSE_TIMEOUT.as_secs()
        ))),
        _ => Ok(()),
    }
}

/// A first connection, given up after [`CONNECT_BUDGET`].
pub(super) async fn within_budget<T>(
    connecting: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(CONNECT_BUDGET, connecting)
        .await
        .map_err(|_| {
            StoreError::Unavailable(format!(
                "no answer from Redis within {}s",
                CONNECT_BUDGET.as_secs()
            ))
        })?
        .map_err(unavailable)
}
