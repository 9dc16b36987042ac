//! Cases of budgets' two primitives: a compare-and-swap of one text per scope that refuses a
//! stale writer and changes nothing then, expiry on the store's clock, scopes kept apart
//! whatever they hold, and no update lost among writers racing on one scope.

use std::sync::Arc;

use super::fixtures::{LONG, fresh_tenant};
use super::subject::Subject;
use crate::store::{MAX_BUDGET_SCOPE_BYTES, Store};

/// How many writers race on one scope.
const RACERS: usize = 16;

/// The text under `scope`.
async fn text(store: &dyn Store, scope: &str) -> Option<String> {
    store.budget_text(scope).await.expect("budget text")
}

/// Put `text` under `scope` if `expected` is still there.
async fn swap(store: &dyn Store, scope: &str, expected: Option<&str>, text: &str) -> bool {
    store
        .swap_budget(scope, expected, text, LONG)
        .await
        .expect("swap budget")
}

pub(super) async fn a_budget_is_swapped_only_from_what_is_there(s: Subject) {
    let store = &*s.store;
    let scope = fresh_tenant("budget-swap");
    assert_eq!(text(store, &scope).await, None, "no budget yet");
    assert!(
        !swap(store, &scope, Some(r#"{"n":0}"#), r#"{"n":1}"#).await,
        "a text is expected where there is none"
    );
    assert_eq!(
        text(store, &scope).await,
        None,
        "a refused swap puts nothing"
    );
    assert!(swap(store, &scope, None, r#"{"n":1}"#).await, "created");
    assert_eq!(text(store, &scope).await.as_deref(), Some(r#"{"n":1}"#));
    assert!(
        !swap(store, &scope, None, r#"{"n":9}"#).await,
        "nothing is expected where a text is"
    );
    assert!(
        !swap(store, &scope, Some(r#"{"n":0}"#), r#"{"n":9}"#).await,
        "a stale text is expected"
    );
    // Another text of the same meaning is another text: compared as written.
    assert!(!swap(store, &scope, Some(r#"{ "n": 1 }"#), r#"{"n":9}"#).await);
    assert_eq!(
        text(store, &scope).await.as_deref(),
        Some(r#"{"n":1}"#),
        "the refused swaps changed nothing"
    );
    assert!(swap(store, &scope, Some(r#"{"n":1}"#), r#"{"n":2}"#).await);
    assert_eq!(text(store, &scope).await.as_deref(), Some(r#"{"n":2}"#));
    assert!(
        !swap(store, &scope, Some(r#"{"n":1}"#), r#"{"n":3}"#).await,
        "the text replaced is stale now"
    );
    assert_eq!(text(store, &scope).await.as_deref(), Some(r#"{"n":2}"#));
    // Another instance on the same data sees the same budget (a second worker).
    if let Some(other) = s.second_instance().await {
        assert_eq!(text(&*other, &scope).await.as_deref(), Some(r#"{"n":2}"#));
        assert!(swap(&*other, &scope, Some(r#"{"n":2}"#), r#"{"n":3}"#).await);
        assert_eq!(text(store, &scope).await.as_deref(), Some(r#"{"n":3}"#));
    }
}

pub(super) async fn budgets_expire_on_the_store_clock(s: Subject) {
    let store = &*s.store;
    let (gone, renewed, kept) = (
        fresh_tenant("budget-gone"),
        fresh_tenant("budget-renewed"),
        fresh_tenant("budget-kept"),
    );
    let lease = s.short();
    let short = |scope| async move {
        store
            .swap_budget(scope, None, "1", lease)
            .await
            .expect("swap budget")
    };
    assert!(short(&gone).await);
    assert!(short(&renewed).await);
    assert!(swap(store, &kept, None, "1").await);
    // A swap puts its text for its own TTL from now: it does not expire with the one it
    // replaced.
    assert!(swap(store, &renewed, Some("1"), "2").await);
    s.pass(s.past_short()).await;
    assert_eq!(
        text(store, &gone).await,
        None,
        "an expired budget reads absent"
    );
    assert_eq!(text(store, &renewed).await.as_deref(), Some("2"));
    assert_eq!(text(store, &kept).await.as_deref(), Some("1"));
    assert!(
        !swap(store, &gone, Some("1"), "2").await,
        "an expired text is expected no more"
    );
    assert_eq!(
        text(store, &gone).await,
        None,
        "and the refusal put nothing"
    );
    assert!(
        swap(store, &gone, None, "fresh").await,
        "a swap expecting nothing replaces an expired text"
    );
    assert_eq!(text(store, &gone).await.as_deref(), Some("fresh"));
}

pub(super) async fn budget_scopes_are_kept_apart(s: Subject) {
    let store = &*s.store;
    // Each subject is a store of its own: even the empty scope is this case's.
    let base = fresh_tenant("budget-scope");
    let long = scope_of_bytes(&base, MAX_BUDGET_SCOPE_BYTES - 1);
    let scopes = [
        base.clone(),
        format!("{base} "),
        format!("{base}:a:b"),
        format!("{base}:a"),
        format!("{base}:a\u{0}b"),
        format!("{base}\u{0}"),
        format!("{base}/a|b{{c}}[d]*?\\\"'%_\n\t"),
        format!("{base}:\u{c4}"),
        format!("{base}:A\u{308}"),
        format!("{base}:\u{1F4B8}\u{200B}"),
        long.clone(),
        format!("{long}x"),
        String::new(),
    ];
    let shown = |scope: &str| scope.chars().take(60).collect::<String>();
    for (n, scope) in scopes.iter().enumerate() {
        assert!(
            swap(store, scope, None, &n.to_string()).await,
            "scope {n} ({:?}) is new",
            shown(scope)
        );
    }
    for (n, scope) in scopes.iter().enumerate() {
        assert_eq!(
            text(store, scope).await,
            Some(n.to_string()),
            "scope {n} ({:?}) reads back its own text",
            shown(scope)
        );
    }
}

/// A scope of exactly `bytes` bytes, `base` then characters of one to four bytes that repeat
/// nowhere (no store may count on a long scope compressing).
fn scope_of_bytes(base: &str, bytes: usize) -> String {
    let mut scope = format!("{base}:");
    let mut n: u32 = 1;
    while scope.len() < bytes {
        n = n.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let mut c = match n >> 30 {
            0 => char::from_u32(0x21 + (n >> 8) % 0x5e),
            1 => char::from_u32(0xa1 + (n >> 8) % 0x700),
            2 => char::from_u32(0x4e00 + (n >> 8) % 0x5000),
            _ => char::from_u32(0x1_f300 + (n >> 8) % 0x300),
        }
        .unwrap_or('?');
        if scope.len() + c.len_utf8() > bytes {
            c = '~';
        }
        scope.push(c);
    }
    scope
}

pub(super) async fn concurrent_budget_swaps_lose_no_update(s: Subject) {
    let scope = Arc::new(fresh_tenant("budget-race"));
    // Half the writers on another instance of the store, where it can open one (another
    // process on the same data).
    let other = s.second_instance().await.unwrap_or_else(|| s.store.clone());
    let tasks: Vec<_> = (0..RACERS)
        .map(|i| {
            let store = if i % 2 == 0 {
                s.store.clone()
            } else {
                other.clone()
            };
            let scope = scope.clone();
            tokio::spawn(async move {
                let mut attempts = 0;
                loop {
                    attempts += 1;
                    let seen = store.budget_text(&scope).await.expect("budget text");
                    let count: usize = seen.as_deref().map_or(0, |t| t.parse().expect("a count"));
                    let next = (count + 1).to_string();
                    let put = store
                        .swap_budget(&scope, seen.as_deref(), &next, LONG)
                        .await
                        .expect("swap budget");
                    if put {
                        return attempts;
                    }
                    assert!(
                        attempts < 100 * RACERS,
                        "no progress in {attempts} attempts"
                    );
                }
            })
        })
        .collect();
    let mut attempts = 0;
    for task in tasks {
        attempts += task.await.expect("task");
    }
    assert_eq!(
        text(&*s.store, &scope).await,
        Some(RACERS.to_string()),
        "every writer counted once ({attempts} attempts in all)"
    );
}
