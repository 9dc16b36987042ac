//! Row 3's third baseline: the claim script's round trips through the Redis client idem
//! itself uses (redis-rs's `ConnectionManager`, one multiplexed connection, a multi-threaded
//! tokio runtime, one task per concurrent caller), without idem. It runs what
//! `redis-benchmark` runs (two `EVALSHA` of the claim script per dispatch, new keys), so the
//! gap between idem and `redis-benchmark` splits into the client's share and idem's own.
//! The arguments are the ones `RedisStore::claim` sends (tenant, retentions and the orphan
//! text included), so
//! a reply is a claim, not an error; an error reply stops the run.

use std::sync::Arc;

use idem_bench::TENANT;
use idem_core::{DEFAULT_UNKNOWN_RETENTION, ORPHANED};
use idem_core::store::redis::DEFAULT_FENCE_RETENTION;

use crate::timed::{Window, drive};

/// The fingerprint argument `scripts/bench` gives `redis-benchmark`.
const FINGERPRINT: &str = "5555555555555555555555555555555555555555555555555555555555555555";

/// `redis-client <url> <script-sha> <arguments-json> <concurrency> <start_ms|now> <seconds>`
pub fn run(args: &[String]) -> Result<(), String> {
    let [url, sha, arguments, concurrency, start, seconds] = args else {
        return Err(
            "usage: redis-client <url> <script-sha> <arguments-json> <concurrency> <start_ms|now> <seconds>"
                .into(),
        );
    };
    let concurrency: usize = concurrency
        .parse()
        .map_err(|e| format!("concurrency: {e}"))?;
    let window = Window::parse(start, seconds)?;
    let (sha, arguments): (Arc<str>, Arc<str>) = (sha.as_str().into(), arguments.as_str().into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
        let conn = redis::aio::ConnectionManager::new(client)
            .await
            .map_err(|e| e.to_string())?;
        let pid = std::process::id();
        // The claim script's last ARGV, as RedisStore sends them by default (ms).
        let unknown_retention = DEFAULT_UNKNOWN_RETENTION.as_millis() as u64;
        let fence_retention = DEFAULT_FENCE_RETENTION.as_millis() as u64;
        drive(
            "redis",
            "redis-rs",
            concurrency,
            window,
            move |worker, i| {
                let (mut conn, sha, arguments) = (conn.clone(), sha.clone(), arguments.clone());
                async move {
                    // Two scripts per dispatch, as idem's claim and complete.
                    for half in 0..2 {
                        let base = format!("rb:{pid}-{worker}-{i}-{half}");
                        let _: redis::Value = redis::cmd("EVALSHA")
                            .arg(&*sha)
                            .arg(3)
                            .arg(format!("{base}:rec"))
                            .arg(format!("{base}:steps"))
                            .arg(format!("{base}:fence"))
                            .arg(&base)
                            .arg("noop_idempotent_write")
                            .arg(FINGERPRINT)
                            .arg(30000)
                            .arg("take_over")
                            .arg(1)
                            .arg(&*arguments)
                            .arg(TENANT)
                            .arg(unknown_retention)
                            .arg(fence_retention)
                            .arg(ORPHANED)
                            .query_async(&mut conn)
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                    Ok(())
                }
            },
        )
        .await
    })
}
