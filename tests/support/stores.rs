//! The durable stores by name, for a child process told which one to open: SQLite by its
//! file, Redis and PostgreSQL by their URL and the prefix or schema of the run, a Redis
//! Cluster by its nodes' URLs, comma-separated (`redis-cluster-wait`: each write waits for a
//! replica).

use std::sync::Arc;
#[cfg(any(feature = "postgres", feature = "redis"))]
use std::time::Duration;

use idem::Store;

/// Open a store by name: `target` is the SQLite path, the server URL or the cluster's node
/// URLs, `scope` the Redis
/// prefix or PostgreSQL schema, `connections` the PostgreSQL pool size.
#[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
pub async fn open_store(
    store: &str,
    target: &str,
    scope: &str,
    connections: usize,
) -> Arc<dyn Store> {
    match store {
        #[cfg(feature = "sqlite")]
        "sqlite" => Arc::new(idem::store::sqlite::SqliteStore::open(target).expect("open SQLite")),
        #[cfg(feature = "redis")]
        "redis" => Arc::new(
            idem::store::redis::RedisStore::connect(target, scope)
                .await
                .expect("connect to Redis"),
        ),
        #[cfg(feature = "redis")]
        "redis-cluster" | "redis-cluster-wait" => {
            use idem::store::redis::{RedisOptions, RedisStore};
            let nodes: Vec<&str> = target.split(',').map(str::trim).collect();
            let mut options = RedisOptions::new();
            if store == "redis-cluster-wait" {
                options = options.wait_for_replicas(1, Duration::from_millis(250));
            }
            Arc::new(
                RedisStore::connect_cluster_with(&nodes, scope, options)
                    .await
                    .expect("connect to the Redis Cluster"),
            )
        }
        #[cfg(feature = "postgres")]
        "postgres" => Arc::new(
            idem::store::postgres::PostgresStore::from_pool(small_pool(target, connections), scope)
                .await
                .expect("connect to PostgreSQL"),
        ),
        other => panic!("this build has no {other} store"),
    }
}

/// A PostgreSQL pool of `connections` connections, so that many concurrent children stay well
/// inside the server's connection limit.
#[cfg(feature = "postgres")]
fn small_pool(url: &str, connections: usize) -> idem::store::postgres::deadpool_postgres::Pool {
    use idem::store::postgres::deadpool_postgres::tokio_postgres::{Config, NoTls};
    use idem::store::postgres::deadpool_postgres::{
        Manager, ManagerConfig, Pool, RecyclingMethod, Runtime,
    };
    let mut config: Config = url.parse().expect("PostgreSQL URL");
    config.connect_timeout(Duration::from_secs(10));
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(connections)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(30)))
        .create_timeout(Some(Duration::from_secs(11)))
        .build()
        .expect("PostgreSQL pool")
}
