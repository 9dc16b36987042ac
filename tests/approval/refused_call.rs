//! Approving exactly the call an agent was refused: the `ApprovalRequired` error hands back
//! what the approval desk takes, with no bridge from the downstream key to the record key,
//! and a decision made with it binds the arguments the call was refused with. Other pending
//! calls are left alone.

use crate::support;

use std::sync::Arc;

use idem::approval::{ApprovalDesk, ApprovalRequest, PendingCall};
use idem::prelude::*;
use idem::store::approvals::ApprovalFilter;
use idem::{MemoryStore, Store, approval::DecisionError};
use serde_json::{Value, json};
use support::dispatcher::{approver, linked};
use support::tally::Tally;

static WIRED: Tally = Tally::new();

/// Wire money to an account.
#[tool(class = "irreversible")]
fn wire_money(ctx: &ToolContext, account: String, cents: u64) -> Result<Value, ToolError> {
    let run = WIRED.note(&format!("{}/{account}", ctx.tenant()), &cents.to_string());
    Ok(json!({"wired": cents, "to": account, "run": run}))
}

fn wire(call_id: &str, account: &str, cents: u64) -> ToolCall {
    ToolCall::new("wire_money", json!({"account": account, "cents": cents})).with_call_id(call_id)
}

/// How many times `run`'s tenant wired to `account`.
fn wired(run: &RunContext, account: &str) -> usize {
    WIRED.count(&format!("{}/{account}", run.tenant))
}

/// Dispatch `call`: it must be refused for want of an approval; the request it hands back.
async fn refused(agent: &Dispatcher, call: &ToolCall, run: &RunContext) -> ApprovalRequest {
    match agent.dispatch(call, run).await {
        Err(DispatchError::ApprovalRequired { request }) => *request,
        other => panic!("expected ApprovalRequired for {call:?}, got {other:?}"),
    }
}

/// The calls of `run`'s tenant still awaiting a decision, by downstream key.
async fn waiting(agent: &Dispatcher, run: &RunContext) -> Vec<String> {
    let filter = ApprovalFilter {
        tenant: Some(run.tenant.clone()),
        ..ApprovalFilter::default()
    };
    let listed = agent.approvals().pending(&filter).await.unwrap();
    listed.into_iter().map(|e| e.downstream_key).collect()
}

/// On `store`, in `tenant`'s name (unique per run: stores shared between runs hold other
/// runs' entries, which the search by downstream key must pass over): the refusal's request
/// approves its call alone, and the downstream key it names finds it.
async fn only_the_refused_call_runs(store: Arc<dyn Store>, tenant: &str) {
    let agent = linked(store.clone());
    let run = RunContext::new(tenant);
    let (first, second) = (wire("c1", "acc_1", 500), wire("c2", "acc_2", 700));
    let err = agent.dispatch(&first, &run).await.unwrap_err();
    let other = refused(&agent, &second, &run).await;

    // The error itself hands the request back; the desk approves exactly that call.
    let request = err.approval_request().expect("an ApprovalRequired refusal");
    let found = ApprovalDesk::over(&*store)
        .find(&request.key)
        .await
        .unwrap()
        .expect("the entry the refusal's key names");
    assert_eq!(found.fingerprint, request.fingerprint);
    let decided = agent
        .approvals()
        .approve(request, &approver(), None, None)
        .await
        .unwrap();
    assert_eq!(decided.key, found.key);
    assert_eq!(decided.downstream_key, request.key.as_str());

    let ran = agent.dispatch(&first, &run).await.unwrap();
    assert!(!ran.deduplicated, "{ran:?}");
    assert_eq!(wired(&run, "acc_1"), 1);
    // The other call was not approved with it: it is still pending, and still refused.
    assert_eq!(waiting(&agent, &run).await, [other.key.to_string()]);
    refused(&agent, &second, &run).await;
    assert_eq!(wired(&run, "acc_2"), 0);
}

#[tokio::test]
async fn the_refusal_hands_back_what_the_desk_approves_on_the_memory_store() {
    only_the_refused_call_runs(Arc::new(MemoryStore::new()), "refused-memory").await;
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn the_refusal_hands_back_what_the_desk_approves_on_sqlite() {
    let dir = std::env::temp_dir().join(support::services::unique("idem-refused"));
    std::fs::create_dir_all(&dir).unwrap();
    let store = idem::store::sqlite::SqliteStore::open(dir.join("idem.db")).unwrap();
    only_the_refused_call_runs(Arc::new(store), "refused-sqlite").await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn the_refusal_hands_back_what_the_desk_approves_on_redis() {
    use support::services::{REDIS_URL, service_url};
    let Some(url) = service_url(
        REDIS_URL,
        "the_refusal_hands_back_what_the_desk_approves_on_redis",
    ) else {
        return;
    };
    let prefixes = support::redis_keys::redis_prefixes(&url);
    let store =
        support::stores::open_store("redis", &url, &prefixes.fresh("idem-refused"), 4).await;
    only_the_refused_call_runs(store, &support::services::unique("refused-redis")).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn the_refusal_hands_back_what_the_desk_approves_on_postgres() {
    use support::services::{POSTGRES_URL, service_url};
    let Some(url) = service_url(
        POSTGRES_URL,
        "the_refusal_hands_back_what_the_desk_approves_on_postgres",
    ) else {
        return;
    };
    let schemas = support::postgres_schemas::postgres_schemas(&url);
    let store =
        support::stores::open_store("postgres", &url, &schemas.fresh("idem_refused"), 4).await;
    only_the_refused_call_runs(store, &support::services::unique("refused-postgres")).await;
}

#[tokio::test]
async fn the_boxed_request_of_a_match_is_approved_by_a_desk_over_the_store_alone() {
    let store = Arc::new(MemoryStore::new());
    let agent = linked(store.clone());
    let run = RunContext::new("refused-boxed");
    let call = wire("c1", "acc_boxed", 300);
    let pending_too = wire("c2", "acc_boxed_2", 300);
    refused(&agent, &pending_too, &run).await;
    let Err(DispatchError::ApprovalRequired { request }) = agent.dispatch(&call, &run).await else {
        panic!("expected ApprovalRequired");
    };
    // What a `match` binds (a `Box`) is taken as it is, by a desk without the tools (the
    // command line's, the inbox's).
    ApprovalDesk::over(&*store)
        .approve(&request, &approver(), None, None)
        .await
        .unwrap();
    assert!(!agent.dispatch(&call, &run).await.unwrap().deduplicated);
    assert_eq!(wired(&run, "acc_boxed"), 1);
    assert_eq!(waiting(&agent, &run).await.len(), 1, "the other stays");
}

#[tokio::test]
async fn a_request_denied_as_refused_denies_that_call_alone() {
    let store = Arc::new(MemoryStore::new());
    let agent = linked(store.clone());
    let run = RunContext::new("refused-deny");
    let (denied, kept) = (wire("c1", "acc_d", 100), wire("c2", "acc_k", 100));
    let request = refused(&agent, &denied, &run).await;
    let kept_request = refused(&agent, &kept, &run).await;
    agent
        .approvals()
        .deny(&request, "lee@desk", "wrong account", None)
        .await
        .unwrap();
    match agent.dispatch(&denied, &run).await {
        Err(DispatchError::ApprovalDenied { reason, .. }) => assert_eq!(reason, "wrong account"),
        other => panic!("expected ApprovalDenied, got {other:?}"),
    }
    assert_eq!(waiting(&agent, &run).await, [kept_request.key.to_string()]);
}

#[tokio::test]
async fn the_downstream_key_a_refusal_names_finds_the_call_and_binds_nothing_more() {
    let store = Arc::new(MemoryStore::new());
    let agent = linked(store.clone());
    let run = RunContext::new("refused-downstream");
    let call = wire("c1", "acc_dk", 900);
    let request = refused(&agent, &call, &run).await;
    let desk = agent.approvals();
    let found = desk.find(&request.key).await.unwrap().expect("found");
    assert_eq!(found.fingerprint, request.fingerprint);
    assert_eq!(desk.find(&found.key).await.unwrap(), Some(found.clone()));
    desk.approve(&request.key, &approver(), None, None)
        .await
        .unwrap();
    assert!(!agent.dispatch(&call, &run).await.unwrap().deduplicated);
}

#[tokio::test]
async fn a_refusal_for_other_arguments_than_those_pending_approves_nothing() {
    let store = Arc::new(MemoryStore::new());
    let agent = linked(store.clone());
    let run = RunContext::new("refused-other-args");
    // The call id is reused with other arguments while the first request stands: the
    // second refusal is for arguments nobody asked a person about.
    refused(&agent, &wire("c1", "acc_as_asked", 100), &run).await;
    let reused = refused(&agent, &wire("c1", "acc_other", 100_000), &run).await;
    let err = agent
        .approvals()
        .approve(&reused, &approver(), None, None)
        .await
        .unwrap_err();
    assert!(matches!(err, DecisionError::NotShown(_)), "{err:?}");
    // The pending request is untouched, and a fingerprint the caller says it was shown
    // must agree with the refusal's.
    let err = agent
        .approvals()
        .approve(
            PendingCall::Refused(&reused),
            &approver(),
            None,
            Some(reused.fingerprint),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, DecisionError::NotShown(_)), "{err:?}");
    assert_eq!(waiting(&agent, &run).await.len(), 1);
}

#[tokio::test]
async fn a_request_that_names_no_pending_call_is_refused_naming_its_key() {
    let store = Arc::new(MemoryStore::new());
    let agent = linked(store.clone());
    let run = RunContext::new("refused-nothing");
    let mut request = refused(&agent, &wire("c1", "acc_n", 100), &run).await;
    // The same call in another tenant's name was never refused.
    request.tenant = "another-tenant".into();
    let err = agent
        .approvals()
        .approve(&request, &approver(), None, None)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DecisionError::NoRequest(key) if *key == request.key),
        "{err:?}"
    );
    assert!(err.to_string().contains(request.key.as_str()), "{err}");
    let unknown = idem::key::IdempotencyKey::new("idem-0000000000000000000000000000000000000000");
    assert!(agent.approvals().find(&unknown).await.unwrap().is_none());
    let err = agent
        .approvals()
        .deny(&unknown, "lee@desk", "no", None)
        .await
        .unwrap_err();
    assert!(matches!(err, DecisionError::NoRequest(_)), "{err:?}");
    assert_eq!(waiting(&agent, &run).await.len(), 1);
}
