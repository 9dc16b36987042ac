//! A Redis Cluster: connecting to one, the client and its settings (those of the
//! single-server manager), the primaries by address as the client's own slot map knows
//! them, and a command run on each of them (`CONFIG GET`, `SCAN`), which a cluster answers
//! per node.
//!
//! Everything else reaches the cluster through `Conn` (`connection.rs`), which
//! routes each command or pipeline by its keys' slot: every script touches the keys of one
//! record, which share its hash tag, so a script runs on the one primary that owns the
//! record. The client follows `MOVED` and `ASK`, and refreshes its slot map when a primary
//! fails over.

use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, ErrorKind, RedisError, RedisResult, Value};

use super::codec::text;
use super::{CONNECTION_TIMEOUT, RESPONSE_TIMEOUT};

/// Attempts after the first for one request: redirects (`MOVED`, `ASK`), a cluster that is
/// electing a new primary (`CLUSTERDOWN`, `TRYAGAIN`), a node to reconnect to. All of them
/// fit in the response timeout, which bounds a request with its retries.
const CLUSTER_RETRIES: u32 = 5;

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
