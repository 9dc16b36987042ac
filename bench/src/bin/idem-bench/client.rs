//! Row 3's third baseline: the claim script's round trips through the Redis client idem
//! itself uses (redis-rs's `ConnectionManager`, one multiplexed connection, a multi-threaded
//! tokio runtime, one task per concurrent caller), without idem. It runs what
//! `redis-benchmark` runs (two `EVALSHA` of the claim script per dispatch, new keys), so the
//! gap between idem and `redis-benchmark` splits into the client's share and idem's own.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::timed::{Window, report};

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
        let ops = Arc::new(AtomicU64::new(0));
        let end = tokio::task::spawn_blocking(move || window.wait())
            .await
            .map_err(|e| e.to_string())?;
        let begin = Instant::now();
        let pid = std::process::id();
        let mut tasks = Vec::with_capacity(concurrency);
        for worker in 0..concurrency {
            let (mut conn, ops) = (conn.clone(), ops.clone());
            let (sha, arguments) = (sha.clone(), arguments.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = 0u64;
                while Instant::now() < end {
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
                            .query_async(&mut conn)
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                    ops.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
                Ok::<_, String>(())
            }));
        }
        for task in tasks {
            task.await.map_err(|e| e.to_string())??;
        }
        report(
            "redis",
            "redis-rs",
            concurrency,
            ops.load(Ordering::Relaxed),
            begin.elapsed(),
        );
        Ok(())
    })
}
