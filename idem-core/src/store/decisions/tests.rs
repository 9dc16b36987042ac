//! The decision log's chain: appends, races for a place, and each way a link breaks.

use super::*;
use crate::store::memory::{ManualClock, MemoryStore};

fn approve(n: u32) -> Decision {
    Decision::new("dana", Action::Approve, "inbox", "t").about("pay", format!("k-{n}"))
}

#[tokio::test]
async fn appends_link_and_verify() {
    let store = MemoryStore::new();
    let mut last = None;
    for n in 1..=5 {
        let logged = append(&store, &approve(n)).await.unwrap();
        assert_eq!(logged.seq, u64::from(n));
        assert_eq!(logged.prev, last);
        last = Some(logged.hash);
    }
    let chain = verify(&store).await.unwrap();
    assert_eq!((chain.entries, chain.head), (5, last));
    assert_eq!(read(&store, 2, 2).await.unwrap().len(), 2);
}

/// A layer that yields before every operation: the appenders' reads and swaps interleave,
/// so that several read the same end of the chain and all but one lose the place.
#[derive(Debug)]
struct Interleave;

impl crate::store::layer::Layer for Interleave {
    fn around<'a, T: Send + 'static>(
        &'a self,
        _: &crate::store::layer::Operation<'_>,
        next: impl FnOnce() -> crate::store::layer::StoreFuture<'a, T>,
    ) -> crate::store::layer::StoreFuture<'a, T> {
        let next = next();
        Box::pin(async move {
            tokio::task::yield_now().await;
            next.await
        })
    }
}

#[tokio::test]
async fn concurrent_appenders_each_take_a_place_of_their_own() {
    use crate::store::layer::Layer as _;
    let store = std::sync::Arc::new(Interleave.layer(MemoryStore::new()));
    let tasks: Vec<_> = (0..16)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move { append(&*store, &approve(n)).await.unwrap().seq })
        })
        .collect();
    let mut places = Vec::new();
    for task in tasks {
        places.push(task.await.unwrap());
    }
    places.sort_unstable();
    assert_eq!(places, (1..=16).collect::<Vec<_>>());
    assert_eq!(verify(&*store).await.unwrap().entries, 16);
}

/// Put `text` in place of entry `seq`, as someone who can write to the store would.
async fn overwrite(store: &MemoryStore, seq: u64, text: &str) {
    let old = store.budget_text(&scope(seq)).await.unwrap();
    assert!(
        store
            .swap_budget(&scope(seq), old.as_deref(), text, RETENTION)
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn a_changed_entry_is_named() {
    let store = MemoryStore::new();
    for n in 1..=3 {
        append(&store, &approve(n)).await.unwrap();
    }
    let mut second = read(&store, 2, 1).await.unwrap().remove(0);
    second.decision.by = "mallory".into();
    overwrite(&store, 2, &serde_json::to_string(&second).unwrap()).await;
    let broken = verify(&store).await.unwrap_err();
    assert!(matches!(
        broken,
        LogError::Broken(ChainBroken::Changed { seq: 2 })
    ));
    assert!(
        broken.to_string().contains("entry 2 was changed"),
        "{broken}"
    );
}

#[tokio::test]
async fn nothing_is_appended_after_a_changed_last_entry() {
    let store = MemoryStore::new();
    for n in 1..=2 {
        append(&store, &approve(n)).await.unwrap();
    }
    let mut last = read(&store, 2, 1).await.unwrap().remove(0);
    last.decision.action = Action::Deny;
    overwrite(&store, 2, &serde_json::to_string(&last).unwrap()).await;
    assert!(matches!(
        append(&store, &approve(3)).await,
        Err(LogError::Broken(ChainBroken::Changed { seq: 2 }))
    ));
    assert!(read(&store, 3, 1).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_rehashed_entry_breaks_the_next_link() {
    let store = MemoryStore::new();
    for n in 1..=3 {
        append(&store, &approve(n)).await.unwrap();
    }
    // Changed and hashed again: its own hash holds, the next entry's link does not.
    let mut first = read(&store, 1, 1).await.unwrap().remove(0);
    first.decision.action = Action::Deny;
    first.hash = first.computed_hash();
    overwrite(&store, 1, &serde_json::to_string(&first).unwrap()).await;
    let broken = verify(&store).await.unwrap_err();
    assert!(matches!(
        broken,
        LogError::Broken(ChainBroken::Unlinked { seq: 2 })
    ));
    assert!(
        broken
            .to_string()
            .contains("entry 2 does not follow entry 1"),
        "{broken}"
    );
}

#[tokio::test]
async fn an_unreadable_entry_is_named() {
    let store = MemoryStore::new();
    for n in 1..=3 {
        append(&store, &approve(n)).await.unwrap();
    }
    overwrite(&store, 3, "{}").await;
    assert!(matches!(
        verify(&store).await.unwrap_err(),
        LogError::Broken(ChainBroken::Unreadable { seq: 3, .. })
    ));
}

#[tokio::test]
async fn a_removed_tail_is_seen_from_the_head() {
    let clock = std::sync::Arc::new(ManualClock::new());
    let store = MemoryStore::new().with_clock(clock.clone());
    for n in 1..=3 {
        append(&store, &approve(n)).await.unwrap();
    }
    // The last entry made to expire at once: as good as removed.
    let text = store.budget_text(&scope(3)).await.unwrap().unwrap();
    assert!(
        store
            .swap_budget(&scope(3), Some(&text), &text, Duration::from_millis(1))
            .await
            .unwrap()
    );
    clock.advance(Duration::from_millis(5));
    let broken = verify(&store).await.unwrap_err();
    assert!(matches!(
        broken,
        LogError::Broken(ChainBroken::Missing {
            missing: 3,
            reached: 3
        })
    ));
}
