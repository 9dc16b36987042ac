//! Connecting to a Redis Cluster: the store's constructors over the cluster's client
//! (`cluster.rs`) and the connection that routes each command by slot (`connection.rs`).

use super::connection::{Conn, Connection, Maker, check_replica_timeout, within_budget};
use super::keys::check_prefix;
use super::{RedisOptions, RedisStore, cluster};
use crate::store::StoreError;

impl RedisStore {
    /// Connect to the Redis Cluster that `nodes` belong to (`redis://host:port` each; one
    /// reachable node is enough, the others are found from it), check that none of its
    /// primaries evicts keys, and load the scripts on every node. The same as
    /// [`connect_cluster_with`](RedisStore::connect_cluster_with) and [`RedisOptions::new`].
    ///
    /// Each record lives in one slot (its keys share the hash tag of the record key), so
    /// every state change is one script on the primary that owns the record; the client
    /// follows `MOVED` and `ASK` and finds the new primary after a failover. See
    /// [Redis Cluster](crate::store::redis#redis-cluster) for what that guarantees.
    ///
    /// Fails as [`connect`](RedisStore::connect) does, and when no node is given or the
    /// nodes are not of one cluster.
    ///
    /// ```no_run
    /// use idem::store::redis::RedisStore;
    ///
    /// # async fn run() -> Result<(), idem::store::StoreError> {
    /// let nodes = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"];
    /// let store = RedisStore::connect_cluster(&nodes, "myapp:idem").await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_cluster(
        nodes: &[impl AsRef<str>],
        prefix: &str,
    ) -> Result<Self, StoreError> {
        Self::connect_cluster_with(nodes, prefix, RedisOptions::new()).await
    }

    /// [`connect_cluster`](RedisStore::connect_cluster) with options: a policy the operator
    /// asserts for every primary, replicas to wait for (`WAIT` goes to the primary that ran
    /// each write, and counts that primary's replicas).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use idem::store::redis::{RedisOptions, RedisStore};
    ///
    /// # async fn run() -> Result<(), idem::store::StoreError> {
    /// let nodes = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379"];
    /// let options = RedisOptions::new().wait_for_replicas(1, Duration::from_millis(250));
    /// let store = RedisStore::connect_cluster_with(&nodes, "app", options).await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_cluster_with(
        nodes: &[impl AsRef<str>],
        prefix: &str,
        options: RedisOptions,
    ) -> Result<Self, StoreError> {
        check_prefix(prefix)?;
        check_replica_timeout(&options)?;
        if nodes.is_empty() {
            return Err(StoreError::Unavailable(
                "no Redis Cluster node to connect to".into(),
            ));
        }
        let nodes: Vec<&str> = nodes.iter().map(AsRef::as_ref).collect();
        let client = cluster::client(&nodes)
            .map_err(|e| StoreError::Unavailable(format!("invalid Redis Cluster nodes: {e}")))?;
        let conn =
            within_budget(client.get_async_connection_with_config(cluster::config())).await?;
        let conn = Connection::new(Conn::Cluster(conn), Some(Maker::Cluster(Box::new(client))));
        Self::over(conn, prefix, &options).ready(&options).await
    }
}
