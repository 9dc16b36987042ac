//! A Redis Cluster: connecting to one, the client and its settings (those of the
//! single-server manager), the primaries by address as the client's own slot map knows
//! them, and a command run on each of them (`CONFIG GET`, `SCAN`), which a cluster answers
//! per node.
//!
//! Everything else reaches the cluster through [`Conn`](super::connection::Conn), which
//! routes each command or pipeline by its keys' slot: every script touches the keys of one
//! record, which share its hash tag, so a script runs on the one primary that owns the
//! record. The client follows `MOVED` and `ASK`, and refreshes its slot map when a primary
//! fails over.

use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, ErrorKind, RedisError, RedisResult, Value};

use super::codec::text;
use super::connection::{
    CONNECTION_TIMEOUT, Conn, Connection, Maker, RESPONSE_TIMEOUT, check_replica_timeout,
    within_budget,
};
use super::keys::check_prefix;
use super::{RedisOptions, RedisStore};
use crate::store::StoreError;

/// Attempts after the first for one request: redirects (`MOVED`, `ASK`), a cluster that is
/// electing a new primary (`CLUSTERDOWN`, `TRYAGAIN`), a node to reconnect to. All of them
/// fit in the response timeout, which bounds a request with its retries.
const CLUSTER_RETRIES: u32 = 5;

impl RedisStore {
    /// Connect to the Redis Cluster that `nodes` belong to (`redis://host:port` each; one
    /// reachable node is enough, the others are found from it), check that none of its
    /// primaries evicts keys, and load the scripts on every node. The same as
    /// [`connect_cluster_with`](RedisStore::connect_cluster_with) and [`RedisOptions::new`].
    ///
    /// Each record lives in one slot (its keys share the hash tag of the record key), so
    /// every state change is one script on the primary that owns the record; the client
    /// follows `MOVED` and `ASK` and finds the new primary after a failover. See
    /// [Redis Cluster](super#redis-cluster) for what that guarantees.
    ///
    /// Fails as [`connect`](RedisStore::connect) does, and when no node is given or the
    /// nodes are not of one cluster.
    ///
    /// ```no_run
    /// use idem_core::store::redis::RedisStore;
    ///
    /// # async fn run() -> Result<(), idem_core::StoreError> {
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
    /// use idem_core::store::redis::{RedisOptions, RedisStore};
    ///
    /// # async fn run() -> Result<(), idem_core::StoreError> {
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
        let client = client(&nodes)
            .map_err(|e| StoreError::Unavailable(format!("invalid Redis Cluster nodes: {e}")))?;
        let conn = within_budget(client.get_async_connection_with_config(config())).await?;
        let conn = Connection::new(Conn::Cluster(conn), Some(Maker::Cluster(Box::new(client))));
        Self::over(conn, prefix, &options).ready(&options).await
    }
}

/// The client of the cluster whose nodes (some of them are enough) are `nodes`.
pub(super) fn client(nodes: &[&str]) -> RedisResult<ClusterClient> {
    ClusterClient::builder(nodes.iter().copied())
        .connection_timeout(CONNECTION_TIMEOUT)
        .response_timeout(RESPONSE_TIMEOUT)
        .retries(CLUSTER_RETRIES)
        .build()
}

/// The connection settings of every cluster connection a store makes.
pub(super) fn config() -> ClusterConfig {
    ClusterConfig::new()
        .set_connection_timeout(CONNECTION_TIMEOUT)
        .set_response_timeout(RESPONSE_TIMEOUT)
}

/// A cluster node by address, as the client's slot map names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Node {
    host: String,
    port: u16,
}

impl Node {
    /// From `host:port` (the host may be an IPv6 address with colons of its own).
    fn parse(address: &str) -> Option<Node> {
        let (host, port) = address.rsplit_once(':')?;
        Some(Node {
            host: host.trim_matches(['[', ']']).to_owned(),
            port: port.parse().ok()?,
        })
    }

    /// A command routed to this node.
    pub(super) fn routing(&self) -> RoutingInfo {
        RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
            host: self.host.clone(),
            port: self.port,
        })
    }
}

/// Run `cmd` on every primary: each one's address and reply (a refusal is a
/// [`Value::ServerError`] there, not an error of the whole).
pub(super) async fn on_every_primary(
    conn: &mut ClusterConnection,
    cmd: &Cmd,
) -> RedisResult<Vec<(String, Value)>> {
    let reply = conn
        .route_command(
            cmd.clone(),
            RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
        )
        .await?;
    match reply {
        Value::Map(replies) => replies
            .into_iter()
            .map(|(node, reply)| match text(&node) {
                Some(node) => Ok((node, reply)),
                None => Err(strange("a node address", &node)),
            })
            .collect(),
        other => Err(strange("a reply per primary", &other)),
    }
}

/// The primaries, sorted by address, from the client's slot map.
pub(super) async fn primaries(conn: &mut ClusterConnection) -> RedisResult<Vec<Node>> {
    let mut nodes = on_every_primary(conn, &redis::cmd("PING"))
        .await?
        .into_iter()
        .map(|(address, _)| {
            Node::parse(&address)
                .ok_or_else(|| strange("a host:port", &Value::SimpleString(address)))
        })
        .collect::<RedisResult<Vec<_>>>()?;
    nodes.sort();
    nodes.dedup();
    Ok(nodes)
}

fn strange(wanted: &str, got: &Value) -> RedisError {
    RedisError::from((
        ErrorKind::UnexpectedReturnType,
        "Redis Cluster answered in an unexpected shape",
        format!("wanted {wanted}, got {got:?}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_addresses_parse() {
        let node = Node::parse("127.0.0.1:7000").expect("an address");
        assert_eq!((node.host.as_str(), node.port), ("127.0.0.1", 7000));
        let v6 = Node::parse("[::1]:7001").expect("an IPv6 address");
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 7001));
        assert!(Node::parse("nowhere").is_none());
    }
}
