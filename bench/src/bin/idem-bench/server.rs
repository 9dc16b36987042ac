//! Rows 3, 3b and 4: dispatches per second on Redis, a Redis Cluster and PostgreSQL at a given
//! concurrency, from
//! one process (a multi-threaded runtime with one task per concurrent caller, every call a new
//! key, so each dispatch is a claim and a complete: two round trips).

use std::hint::black_box;
use std::sync::Arc;

use idem::store::postgres::deadpool_postgres::tokio_postgres::NoTls;
use idem::store::postgres::deadpool_postgres::{self, PoolConfig, Runtime};
use idem::{PostgresStore, RedisStore, RunContext, Store};
use idem_bench::{TENANT, call, dispatcher};

use crate::timed::{Window, drive};

/// `redis|redis-cluster|postgres <url> <namespace> <concurrency> <start_ms|now> <seconds>`; a
/// cluster's `url` is its nodes' URLs, comma-separated.
pub fn run(row: &str, args: &[String]) -> Result<(), String> {
    let [url, namespace, concurrency, start, seconds] = args else {
        return Err(format!(
            "usage: {row} <url> <prefix-or-schema> <concurrency> <start_ms|now> <seconds>"
        ));
    };
    let concurrency: usize = concurrency
        .parse()
        .map_err(|e| format!("concurrency: {e}"))?;
    let window = Window::parse(start, seconds)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let store: Arc<dyn Store> = match row {
            "redis" => Arc::new(
                RedisStore::connect(url, namespace)
                    .await
                    .map_err(|e| e.to_string())?,
            ),
            "redis-cluster" => {
                let nodes: Vec<&str> = url.split(',').collect();
                Arc::new(
                    RedisStore::connect_cluster(&nodes, namespace)
                        .await
                        .map_err(|e| e.to_string())?,
                )
            }
            "postgres" => {
                // As many connections as callers, like pgbench's clients.
                let config = deadpool_postgres::Config {
                    url: Some(url.clone()),
                    pool: Some(PoolConfig::new(concurrency)),
                    ..Default::default()
                };
                let pool = config
                    .create_pool(Some(Runtime::Tokio1), NoTls)
                    .map_err(|e| e.to_string())?;
                Arc::new(
                    PostgresStore::from_pool(pool, namespace)
                        .await
                        .map_err(|e| e.to_string())?,
                )
            }
            other => return Err(format!("unknown row {other:?}")),
        };
        let d = Arc::new(dispatcher(store));
        let run = Arc::new(RunContext::new(TENANT));
        let pid = std::process::id();
        drive(row, "idem", concurrency, window, move |worker, i| {
            let (d, run) = (d.clone(), run.clone());
            async move {
                let call = call("noop_idempotent_write", &format!("call-{pid}-{worker}-{i}"));
                let out = d.dispatch(&call, &run).await.map_err(|e| e.to_string())?;
                black_box(out);
                Ok(())
            }
        })
        .await
    })
}
