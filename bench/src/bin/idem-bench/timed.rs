//! A timed window shared by every load command: all workers (tasks or processes) start at the
//! same wall-clock instant and stop at the same one, and each reports what it completed.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The window a worker measures in.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// Milliseconds since the epoch at which to start.
    pub start_ms: u64,
    /// How long to run.
    pub duration: Duration,
}

impl Window {
    /// Parse `<start_ms|now> <seconds>`.
    pub fn parse(start: &str, seconds: &str) -> Result<Self, String> {
        let start_ms = if start == "now" {
            now_ms() + 200
        } else {
            start.parse().map_err(|e| format!("start {start:?}: {e}"))?
        };
        let seconds: f64 = seconds
            .parse()
            .map_err(|e| format!("seconds {seconds:?}: {e}"))?;
        Ok(Window {
            start_ms,
            duration: Duration::from_secs_f64(seconds),
        })
    }

    /// Sleep until the start; return the instant the window ends.
    pub fn wait(&self) -> std::time::Instant {
        let now = now_ms();
        if self.start_ms > now {
            std::thread::sleep(Duration::from_millis(self.start_ms - now));
        }
        std::time::Instant::now() + self.duration
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// One line of results, as `scripts/bench` collects them.
pub fn report(row: &str, contender: &str, concurrency: usize, ops: u64, elapsed: Duration) {
    println!(
        "{{\"row\":\"{row}\",\"contender\":\"{contender}\",\"concurrency\":{concurrency},\"ops\":{ops},\"secs\":{:.6},\"per_sec\":{:.1}}}",
        elapsed.as_secs_f64(),
        ops as f64 / elapsed.as_secs_f64()
    );
}

/// `concurrency` callers, one task each, calling `one(worker, i)` over and over from the
/// window's start to its end; then one line of results with the calls completed. The first
/// failed call ends the run with its error.
pub async fn drive<F, Fut>(
    row: &str,
    contender: &str,
    concurrency: usize,
    window: Window,
    one: F,
) -> Result<(), String>
where
    F: Fn(usize, u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let ops = Arc::new(AtomicU64::new(0));
    let end = tokio::task::spawn_blocking(move || window.wait())
        .await
        .map_err(|e| e.to_string())?;
    let begin = Instant::now();
    let mut tasks = Vec::with_capacity(concurrency);
    for worker in 0..concurrency {
        let (one, ops) = (one.clone(), ops.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while Instant::now() < end {
                one(worker, i).await?;
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
        row,
        contender,
        concurrency,
        ops.load(Ordering::Relaxed),
        begin.elapsed(),
    );
    Ok(())
}
