//! Row 6: bytes a `MemoryStore` holds per completed record beyond the payload itself (the
//! canonical arguments and the outcome's JSON), at 1M records.
//!
//! Counted by the global allocator (bytes requested, live), not guessed from type sizes; the
//! resident-set growth, which adds malloc's own overhead, is printed beside it.
//!
//! `cargo run --release --manifest-path bench/Cargo.toml --bin memory -- 1000000`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem::store::{Claim, ClaimRequest};
use idem::{MemoryStore, Store, key::Fingerprint, key::KeyMaterial, record::Outcome};
use idem_core::{LogicalKey, OrphanPolicy, canonical_json};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the counter only
// observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded with the caller's arguments.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn rss_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("a record count"))
        .unwrap_or(1_000_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let arguments: serde_json::Value =
        serde_json::from_str(idem_bench::ARGUMENTS).expect("ARGUMENTS is JSON");
    let canonical = canonical_json(&arguments);
    let fingerprint = Fingerprint::of_canonical(&canonical);
    let outcome = Outcome::Success("\"ok\"".to_owned());
    let payload = canonical.len() + "\"ok\"".len();

    let store = MemoryStore::new().with_capacity(n + n / 4);
    let (live0, rss0) = (LIVE.load(Ordering::Relaxed), rss_bytes());
    rt.block_on(async {
        for i in 0..n {
            let material = KeyMaterial::CallId {
                call_id: format!("call_{i:010}"),
                run_id: None,
            };
            let logical = LogicalKey::new(
                "bench",
                idem_bench::TENANT,
                "noop_idempotent_write",
                material,
            );
            let contract = std::sync::Arc::new(idem_core::Contract::new(
                idem_core::ToolClass::IdempotentWrite,
                idem_core::DEFAULT_VERSION,
                Duration::from_secs(86_400),
                Duration::from_secs(30),
            ));
            let request = ClaimRequest {
                key: logical.record_key(),
                tool: "noop_idempotent_write".to_owned(),
                tenant: idem_bench::TENANT.to_owned(),
                fingerprint,
                lease: Duration::from_secs(30),
                orphans: OrphanPolicy::TakeOver,
                arguments: Some(canonical.clone()),
                // What the dispatcher records with each call.
                contract: Some(contract.clone()),
            };
            let Ok(Claim::Acquired { fence, .. }) = store.claim(&request).await else {
                panic!("claim {i} was not acquired");
            };
            store
                .complete(&request.key, fence, &outcome, Duration::from_secs(86_400))
                .await
                .expect("completed");
        }
    });
    let live = LIVE.load(Ordering::Relaxed) - live0;
    let rss = rss_bytes().zip(rss0).map(|(a, b)| a.saturating_sub(b));
    let per = live as f64 / n as f64;
    println!(
        "{{\"row\":\"memory\",\"records\":{n},\"record_struct_bytes\":{},\"payload_bytes\":{payload},\"live_bytes_per_record\":{per:.1},\"overhead_bytes_per_record\":{:.1},\"rss_bytes_per_record\":{}}}",
        std::mem::size_of::<idem::record::Record>(),
        per - payload as f64,
        rss.map(|r| format!("{:.1}", r as f64 / n as f64))
            .unwrap_or_else(|| "null".into())
    );
    assert_eq!(store.len(), n);
}
