//! Row 1: the hot path on the memory store, per class, against the floor and rmcp's router.
//!
//! Every contender starts from the same input, the arguments as JSON text, and parses them
//! inside the measured loop. First executions use a fresh key per call and a fresh map per
//! sample (so map growth is paid, as in production); replays hit one recorded call.
//!
//! `cargo bench --manifest-path bench/Cargo.toml --bench hot_path`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use idem_bench::{
    ARGUMENTS, CLASSES, Floor, call, mcp, recorded, time_floor_first, time_idem_first,
};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn ids(n: u64) -> Vec<String> {
    (0..n).map(|i| format!("call_{i:010}")).collect()
}

fn first(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("first");

    group.bench_function("floor", |b| {
        b.iter_custom(|iters| time_floor_first(&ids(iters)))
    });

    group.bench_function("rmcp", |b| {
        let mut direct = rt.block_on(async { mcp::Direct::new() });
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(direct.call().await);
                }
                start.elapsed()
            })
        })
    });

    for (class, tool) in CLASSES {
        group.bench_function(format!("idem/{class}"), |b| {
            b.iter_custom(|iters| rt.block_on(time_idem_first(tool, &ids(iters))))
        });
    }
    group.finish();
}

fn replay(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("replay");

    group.bench_function("floor", |b| {
        let mut floor = Floor::new();
        floor.first("call_0000000000", ARGUMENTS);
        b.iter(|| black_box(floor.replay(black_box("call_0000000000"), black_box(ARGUMENTS))))
    });

    for (class, tool) in CLASSES.into_iter().filter(|(c, _)| *c != "read") {
        group.bench_function(format!("idem/{class}"), |b| {
            let (d, run) = rt.block_on(recorded(tool));
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let call = call(tool, "call_0000000000");
                        let out = d.dispatch(&call, &run).await.expect("replayed");
                        debug_assert!(out.deduplicated);
                        black_box(out);
                    }
                    start.elapsed()
                })
            })
        });
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(40)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .without_plots()
}

criterion_group! {
    name = benches;
    config = config();
    targets = first, replay
}
criterion_main!(benches);
