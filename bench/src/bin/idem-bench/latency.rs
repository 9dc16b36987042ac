//! Latency per store, in process: p50 and p99 of one dispatch that claims and completes a new
//! call, and of one that replays a completed call, one caller at a time (what an agent waiting
//! on a tool call feels), on the memory store, SQLite (`synchronous=FULL`), Redis, a Redis
//! Cluster and PostgreSQL.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idem::store::postgres::deadpool_postgres::tokio_postgres::NoTls;
use idem::store::postgres::deadpool_postgres::{self, PoolConfig, Runtime};
use idem::{MemoryStore, PostgresStore, RedisStore, RunContext, SqliteStore, Store};
use idem_bench::{TENANT, call, dispatcher};

/// `latency <store> <calls>`, `store` one of `memory`, `sqlite:<path>`, `redis:<url>`,
/// `redis-cluster:<url>,<url>,...`, `postgres:<url>`: one JSON line with the percentiles
/// in microseconds.
pub fn run(args: &[String]) -> Result<(), String> {
    let [store, calls] = args else {
        return Err("usage: latency <memory|sqlite:PATH|redis:URL|redis-cluster:URLS|postgres:URL> <calls>".into());
    };
    let calls: usize = calls.parse().map_err(|e| format!("calls: {e}"))?;
    if calls < 100 {
        return Err("at least 100 calls, for a p99".into());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let (name, store) = open(store).await?;
        let d = dispatcher(store);
        let run = RunContext::new(TENANT);
        let pid = std::process::id();
        let tool = "noop_idempotent_write";
        // Warm the connections and the code paths first.
        for i in 0..calls / 10 {
            let c = call(tool, &format!("warm-{pid}-{i}"));
            d.dispatch(&c, &run).await.map_err(|e| e.to_string())?;
        }
        let mut first = Vec::with_capacity(calls);
        let mut replay = Vec::with_capacity(calls);
        for i in 0..calls {
            let c = call(tool, &format!("lat-{pid}-{i}"));
            let started = Instant::now();
            let done = d.dispatch(&c, &run).await.map_err(|e| e.to_string())?;
            first.push(started.elapsed());
            if done.deduplicated {
                return Err("a new call was replayed".into());
            }
            let started = Instant::now();
            let again = d.dispatch(&c, &run).await.map_err(|e| e.to_string())?;
            replay.push(started.elapsed());
            if !again.deduplicated {
                return Err("a completed call ran again".into());
            }
        }
        let (f50, f99) = percentiles(&mut first);
        let (r50, r99) = percentiles(&mut replay);
        println!(
            "{{\"row\":\"latency\",\"store\":\"{name}\",\"calls\":{calls},\"first_p50_us\":{f50:.1},\"first_p99_us\":{f99:.1},\"replay_p50_us\":{r50:.1},\"replay_p99_us\":{r99:.1}}}"
        );
        Ok(())
    })
}

/// The median and the 99th percentile (nearest rank), in microseconds.
pub(crate) fn percentiles(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort_unstable();
    let at = |q: f64| {
        let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
        samples[rank - 1].as_secs_f64() * 1e6
    };
    (at(0.50), at(0.99))
}

async fn open(spec: &str) -> Result<(&'static str, Arc<dyn Store>), String> {
    let (kind, rest) = spec.split_once(':').unwrap_or((spec, ""));
    let prefix = format!("bench-latency-{}", std::process::id());
    Ok(match kind {
        "memory" => ("memory", Arc::new(MemoryStore::new())),
        "sqlite" => (
            "sqlite",
            Arc::new(SqliteStore::open(rest).map_err(|e| e.to_string())?),
        ),
        "redis" => (
            "redis",
            Arc::new(
                RedisStore::connect(rest, &prefix)
                    .await
                    .map_err(|e| e.to_string())?,
            ),
        ),
        "redis-cluster" => {
            let nodes: Vec<&str> = rest.split(',').collect();
            (
                "redis-cluster",
                Arc::new(
                    RedisStore::connect_cluster(&nodes, &prefix)
                        .await
                        .map_err(|e| e.to_string())?,
                ),
            )
        }
        "postgres" => {
            let config = deadpool_postgres::Config {
                url: Some(rest.to_owned()),
                pool: Some(PoolConfig::new(2)),
                ..Default::default()
            };
            let pool = config
                .create_pool(Some(Runtime::Tokio1), NoTls)
                .map_err(|e| e.to_string())?;
            let schema = prefix.replace('-', "_");
            (
                "postgres",
                Arc::new(
                    PostgresStore::from_pool(pool, &schema)
                        .await
                        .map_err(|e| e.to_string())?,
                ),
            )
        }
        other => return Err(format!("unknown store {other:?}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let mut samples: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        samples.reverse();
        assert_eq!(percentiles(&mut samples), (50.0, 99.0));
    }
}
