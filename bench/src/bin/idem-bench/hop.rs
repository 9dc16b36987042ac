//! The cost of one `spawn_blocking` round trip on a current-thread runtime: what every
//! `SqliteStore` operation pays on top of SQLite itself (row 2's explanation).

use std::hint::black_box;
use std::time::Instant;

pub fn run(args: &[String]) -> Result<(), String> {
    let n: u32 = args
        .first()
        .map(|s| s.parse().map_err(|e| format!("count: {e}")))
        .transpose()?
        .unwrap_or(20_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let start = Instant::now();
        for i in 0..n {
            let doubled = tokio::task::spawn_blocking(move || i.wrapping_mul(2))
                .await
                .map_err(|e| e.to_string())?;
            black_box(doubled);
        }
        let us = start.elapsed().as_secs_f64() * 1e6 / f64::from(n);
        println!("{{\"row\":\"hop\",\"spawn_blocking_round_trip_us\":{us:.1}}}");
        Ok(())
    })
}
