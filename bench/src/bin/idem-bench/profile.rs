//! A driver for callgrind: the hot path in a loop, with nothing else in the profile.
//!
//! `valgrind --tool=callgrind target/release/idem-bench profile first noop_idempotent_write 20000`

use std::hint::black_box;
use std::sync::Arc;

use idem::prelude::*;
use idem_bench::{call, dispatcher, run_for};

pub fn run(args: &[String]) -> Result<(), String> {
    let mode = args.first().map(String::as_str).unwrap_or("first");
    let tool = args
        .get(1)
        .map(String::as_str)
        .unwrap_or("noop_idempotent_write");
    let n: usize = args
        .get(2)
        .map(|s| s.parse().map_err(|e| format!("count: {e}")))
        .transpose()?
        .unwrap_or(20_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let d = dispatcher(Arc::new(MemoryStore::new().with_capacity(4 * n + 4096)));
        let ids: Vec<String> = (0..n).map(|i| format!("call_{i:010}")).collect();
        let mut runs = Vec::with_capacity(n);
        for id in &ids {
            runs.push(run_for(&d, tool, id).await);
        }
        match mode {
            "first" => {
                for (id, run) in ids.iter().zip(&runs) {
                    let out = d
                        .dispatch(&call(tool, id), run)
                        .await
                        .map_err(|e| e.to_string())?;
                    black_box(out);
                }
            }
            "replay" => {
                d.dispatch(&call(tool, &ids[0]), &runs[0])
                    .await
                    .map_err(|e| e.to_string())?;
                for _ in 0..n {
                    let out = d
                        .dispatch(&call(tool, &ids[0]), &runs[0])
                        .await
                        .map_err(|e| e.to_string())?;
                    black_box(out);
                }
            }
            other => return Err(format!("unknown mode {other:?}: expected first or replay")),
        }
        Ok(())
    })
}
