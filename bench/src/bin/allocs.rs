//! Allocations per dispatch on the memory store (first execution and replay), counted by the
//! global allocator: the hot path's cost that timings alone do not explain.
//!
//! `cargo run --release --manifest-path bench/Cargo.toml --bin allocs`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem::MemoryStore;
use idem_bench::{CLASSES, call, dispatcher, run_for};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);
static BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the counters only
// observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's arguments.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let n = 1000;
    rt.block_on(async {
        for (class, tool) in CLASSES {
            let d = dispatcher(Arc::new(MemoryStore::new()));
            let ids: Vec<String> = (0..n).map(|i| format!("call_{i:010}")).collect();
            let mut runs = Vec::new();
            for id in &ids {
                runs.push(run_for(&d, tool, id).await);
            }
            let calls: Vec<_> = ids.iter().map(|id| call(tool, id)).collect();
            let (a0, b0) = (ALLOCS.load(Ordering::Relaxed), BYTES.load(Ordering::Relaxed));
            for (c, run) in calls.iter().zip(&runs) {
                d.dispatch(c, run).await.expect("first");
            }
            let (a1, b1) = (ALLOCS.load(Ordering::Relaxed), BYTES.load(Ordering::Relaxed));
            for _ in 0..n {
                d.dispatch(&calls[0], &runs[0]).await.expect("replay");
            }
            let (a2, b2) = (ALLOCS.load(Ordering::Relaxed), BYTES.load(Ordering::Relaxed));
            println!(
                "{{\"row\":\"allocs\",\"class\":\"{class}\",\"first_allocs\":{:.1},\"first_bytes\":{:.0},\"replay_allocs\":{:.1},\"replay_bytes\":{:.0}}}",
                (a1 - a0) as f64 / n as f64,
                (b1 - b0) as f64 / n as f64,
                (a2 - a1) as f64 / n as f64,
                (b2 - b1) as f64 / n as f64
            );
        }
    });
}
