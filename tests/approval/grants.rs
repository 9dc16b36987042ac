//! Standing grants: a person grants a tool for a run, a session or a tenant, for a time,
//! within argument bounds; calls inside run without asking, a call outside asks again; a
//! revoked, forged or out-of-policy grant lets nothing through; each call a grant let
//! through shows it in its run's account.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem::approval::{ApprovalDesk, ApprovalKeys, GrantError, GrantTerms};
use idem::prelude::*;
use idem::store::approvals::ApprovalFilter;
use idem::tool::{Rule, ToolDef};
use idem::{Approver, Store};
use serde_json::{Value, json};
use support::dispatcher::approval_key;

/// An agent whose irreversible `refund` is at handler `version` (and, with `four_eyes`,
/// needs two approvers), counting its executions, keeping run accounts.
fn agent(
    store: Arc<dyn Store>,
    runs: &Arc<AtomicUsize>,
    version: &str,
    four_eyes: bool,
) -> Dispatcher {
    let counter = runs.clone();
    let refund = ToolDef::builder("refund", ToolClass::Irreversible)
        .description("Refund a customer.")
        .version(version.to_owned())
        .input_schema(json!({
            "type": "object",
            "properties": {"customer": {"type": "string"}, "amount": {"type": "integer"}},
            "required": ["customer", "amount"]
        }))
        .approvers(if four_eyes { 2 } else { 1 })
        .handler(move |_: ToolContext, args: Value| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                if args["customer"] == "c-closed" {
                    return Err(ToolError::terminal("the customer's account is closed"));
                }
                Ok::<_, ToolError>(args)
            }
        })
        .build()
        .unwrap();
    let registry = Registry::builder().add(refund).build().unwrap();
    Dispatcher::approving(registry, store, ApprovalKeys::new([approval_key()]))
        .unwrap()
        .with_run_accounts(Duration::from_secs(3600))
}

fn dana() -> Approver {
    Approver::new("dana@desk", approval_key())
}

fn bound(rule: Value) -> Rule {
    serde_json::from_value(rule).unwrap()
}

fn refund(id: &str, customer: &str, amount: u64) -> ToolCall {
    ToolCall::new("refund", json!({"customer": customer, "amount": amount})).with_call_id(id)
}

fn asks(result: Result<Dispatched, DispatchError>) -> bool {
    matches!(result, Err(DispatchError::ApprovalRequired { .. }))
}

#[tokio::test]
async fn the_account_names_the_grant_of_a_call_that_failed() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = agent(store.clone(), &runs, "1", false);
    let terms = GrantTerms::new("shop", "refund", Duration::from_secs(3600)).for_run("r-9");
    let grant = agent.approvals().grant(&terms, &dana()).await.unwrap();
    let run = RunContext::new("shop").with_run("r-9", 1);
    let failed = agent.dispatch(&refund("f1", "c-closed", 5), &run).await;
    assert!(
        matches!(failed, Err(DispatchError::ToolFailed { .. })),
        "{failed:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the grant let it run");
    let account = agent.run_account("shop", "r-9").await.unwrap();
    assert!(
        account.calls[0]
            .granted
            .as_deref()
            .is_some_and(|g| g.contains(&grant.id)),
        "{:?}",
        account.calls[0]
    );
}

#[tokio::test]
async fn a_session_grant_covers_that_session_and_a_grant_ends_when_it_expires() {
    let clock = Arc::new(idem::store::ManualClock::new());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new().with_clock(clock.clone()));
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = agent(store.clone(), &runs, "1", false);
    let terms = GrantTerms::new("shop", "refund", Duration::from_secs(600)).for_session("s-1");
    agent.approvals().grant(&terms, &dana()).await.unwrap();
    // The MCP door accounts a client's calls as `session:<id>`.
    let session = RunContext::new("shop").accounted_as("session:s-1");
    let other = RunContext::new("shop").accounted_as("session:s-2");
    agent
        .dispatch(&refund("s1", "c-7", 10), &session)
        .await
        .unwrap();
    assert!(asks(agent.dispatch(&refund("s2", "c-7", 10), &other).await));
    assert!(asks(
        agent
            .dispatch(&refund("s3", "c-7", 10), &RunContext::new("shop"))
            .await
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    clock.advance(Duration::from_secs(601));
    assert!(
        asks(agent.dispatch(&refund("s4", "c-7", 10), &session).await),
        "expired"
    );
    let listed = agent.approvals().grants(None).await.unwrap();
    assert!(
        !listed[0].stands(store.now().await.unwrap()),
        "listed, no longer standing"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Up to 50 for customer c-7, in run r-1, for an hour.
fn terms() -> GrantTerms {
    GrantTerms::new("shop", "refund", Duration::from_secs(3600))
        .for_run("r-1")
        .within(bound(json!({"pointer": "/amount", "at_most": 50})))
        .within(bound(json!({"pointer": "/customer", "equals": "c-7"})))
}

#[tokio::test]
async fn calls_inside_the_bounds_run_without_asking_and_others_ask_until_revoked() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = agent(store.clone(), &runs, "1", false);
    let grant = agent
        .approvals()
        .through("cli")
        .grant(&terms(), &dana())
        .await
        .unwrap();
    assert!(grant.id.starts_with("g-"), "{}", grant.id);
    let run = RunContext::new("shop").with_run("r-1", 1);

    // Inside: runs, once, without a person; the account names the grant.
    let inside = agent
        .dispatch(&refund("c1", "c-7", 40), &run)
        .await
        .unwrap();
    assert!(!inside.deduplicated);
    assert!(
        inside
            .granted
            .as_deref()
            .is_some_and(|g| g.contains(&grant.id) && g.contains("dana@desk")),
        "{:?}",
        inside.granted
    );
    assert!(
        agent
            .dispatch(&refund("c1", "c-7", 40), &run)
            .await
            .unwrap()
            .deduplicated
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let account = agent.run_account("shop", "r-1").await.unwrap();
    assert_eq!(
        account.calls[0].granted.as_deref(),
        inside.granted.as_deref(),
        "the account shows the grant"
    );
    let text = account.to_string();
    assert!(
        text.contains(&format!("let through by grant {} by dana@desk", grant.id)),
        "{text}"
    );

    // Outside the bounds, another customer, another run: each asks a person.
    assert!(asks(agent.dispatch(&refund("c2", "c-7", 90), &run).await));
    assert!(asks(agent.dispatch(&refund("c3", "c-8", 10), &run).await));
    let other_run = RunContext::new("shop").with_run("r-2", 1);
    assert!(asks(
        agent.dispatch(&refund("c4", "c-7", 10), &other_run).await
    ));
    assert!(asks(
        agent
            .dispatch(
                &refund("c5", "c-7", 10),
                &RunContext::new("other-tenant").with_run("r-1", 1)
            )
            .await
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // Listed, then revoked: the next call inside the bounds asks.
    let listed = agent.approvals().grants(Some("shop")).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, grant.id);
    let revoked = agent
        .approvals()
        .revoke(&grant.id, "lee@desk")
        .await
        .unwrap();
    assert_eq!(
        revoked.revoked.as_ref().map(|r| r.by.as_str()),
        Some("lee@desk")
    );
    assert!(asks(agent.dispatch(&refund("c6", "c-7", 10), &run).await));
    assert!(matches!(
        agent.approvals().revoke(&grant.id, "lee@desk").await,
        Err(GrantError::AlreadyRevoked { .. })
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // The decision log has the grant and the revocation.
    let log = idem::store::decisions::read(&*store, 1, 100).await.unwrap();
    let actions: Vec<_> = log
        .iter()
        .map(|e| (e.decision.action.as_str(), e.decision.by.as_str()))
        .collect();
    assert_eq!(actions, [("grant", "dana@desk"), ("revoke", "lee@desk")]);
}

#[tokio::test]
async fn a_grant_widened_in_the_store_or_under_another_policy_lets_nothing_through() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let agent_v1 = agent(store.clone(), &runs, "1", false);
    agent_v1.approvals().grant(&terms(), &dana()).await.unwrap();
    let run = RunContext::new("shop").with_run("r-1", 1);

    // Someone who can write to the store (and holds no key) lifts the amount bound.
    let scope = idem::approval::GRANTS_SCOPE;
    let text = store.budget_text(scope).await.unwrap().unwrap();
    let widened = text.replace("\"at_most\":50", "\"at_most\":5000");
    assert_ne!(widened, text);
    assert!(
        store
            .swap_budget(scope, Some(&text), &widened, Duration::from_secs(3600))
            .await
            .unwrap()
    );
    assert!(asks(
        agent_v1.dispatch(&refund("w1", "c-7", 4000), &run).await
    ));
    assert!(
        asks(agent_v1.dispatch(&refund("w2", "c-7", 10), &run).await),
        "the whole grant is void"
    );
    assert!(
        store
            .swap_budget(scope, Some(&widened), &text, Duration::from_secs(3600))
            .await
            .unwrap()
    );
    agent_v1
        .dispatch(&refund("w3", "c-7", 10), &run)
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "restored, it holds again");

    // A deploy changes the handler: the grant, made under version 1, lets nothing through.
    let agent_v2 = agent(store.clone(), &runs, "2", false);
    assert!(asks(
        agent_v2.dispatch(&refund("w4", "c-7", 10), &run).await
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_denial_of_the_call_stands_over_a_grant() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = agent(store.clone(), &runs, "1", false);
    let run = RunContext::new("shop").with_run("r-1", 1);
    assert!(asks(agent.dispatch(&refund("d1", "c-7", 30), &run).await));
    let entry = ApprovalDesk::over(&*store)
        .pending(&ApprovalFilter::default())
        .await
        .unwrap()
        .remove(0);
    ApprovalDesk::over(&*store)
        .deny(&entry, "lee@desk", "not this one", None)
        .await
        .unwrap();
    agent.approvals().grant(&terms(), &dana()).await.unwrap();
    assert!(matches!(
        agent.dispatch(&refund("d1", "c-7", 30), &run).await,
        Err(DispatchError::ApprovalDenied { .. })
    ));
    agent
        .dispatch(&refund("d2", "c-7", 30), &run)
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only the call not denied");
}

#[tokio::test]
async fn what_cannot_be_granted_is_refused_naming_why() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    // A desk over the store alone does not know the tool's policy before a call asked.
    let alone = ApprovalDesk::over(&*store);
    assert!(matches!(
        alone.grant(&terms(), &dana()).await,
        Err(GrantError::PolicyUnknown(tool)) if tool == "refund"
    ));
    let agent = agent(store.clone(), &runs, "1", false);
    let run = RunContext::new("shop").with_run("r-1", 1);
    assert!(asks(agent.dispatch(&refund("a1", "c-7", 500), &run).await));
    // Now it binds the policy the call asked under, and the grant works.
    alone.grant(&terms(), &dana()).await.unwrap();
    agent.dispatch(&refund("a2", "c-7", 5), &run).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    let desk = agent.approvals();
    let long = GrantTerms::new("shop", "refund", Duration::from_secs(365 * 24 * 3600));
    assert!(matches!(
        desk.grant(&long, &dana()).await,
        Err(GrantError::Validity(_))
    ));
    let unknown = GrantTerms::new("shop", "wire", Duration::from_secs(60));
    assert!(matches!(
        desk.grant(&unknown, &dana()).await,
        Err(GrantError::UnknownTool(_))
    ));
    let bad = GrantTerms::new("shop", "refund", Duration::from_secs(60))
        .within(bound(json!({"pointer": "/cents", "at_most": 5})));
    match desk.grant(&bad, &dana()).await {
        Err(e @ GrantError::InvalidBound(_)) => assert!(e.to_string().contains("/cents"), "{e}"),
        other => panic!("expected InvalidBound, got {other:?}"),
    }
    let four = agent_four_eyes(store.clone(), &runs);
    match four.approvals().grant(&terms(), &dana()).await {
        Err(GrantError::FourEyes { approvers: 2, .. }) => {}
        other => panic!("expected FourEyes, got {other:?}"),
    }
    // A desk over the store alone reads the count from the policy the latest call asked
    // under (a millisecond apart from the one before, so that it is the latest).
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert!(asks(four.dispatch(&refund("a3", "c-7", 5), &run).await));
    match alone.grant(&terms(), &dana()).await {
        Err(GrantError::FourEyes { approvers: 2, .. }) => {}
        other => panic!("expected FourEyes from the store's policy, got {other:?}"),
    }
}

fn agent_four_eyes(store: Arc<dyn Store>, runs: &Arc<AtomicUsize>) -> Dispatcher {
    agent(store, runs, "1", true)
}

/// A desk over the store alone judges a tool by the policy its calls asked under, as a desk
/// with the tools does: a rule that asks two approvers for some calls does not make the
/// whole tool four eyes, even when the latest call that asked was one of those. The grant
/// then lets through only calls one approver decides.
#[tokio::test]
async fn a_desk_over_the_store_grants_a_tool_whose_rule_asks_two_for_some_calls() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let tool = ToolDef::builder("refund", ToolClass::Irreversible)
        .description("Refund a customer.")
        .input_schema(json!({
            "type": "object",
            "properties": {"customer": {"type": "string"}, "amount": {"type": "integer"}},
            "required": ["customer", "amount"]
        }))
        .approvers_when(2, |args: &Value, _: &RunContext| {
            args["amount"].as_u64() > Some(1000)
        })
        .handler(move |_: ToolContext, args: Value| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(args)
            }
        })
        .build()
        .unwrap();
    let registry = Registry::builder().add(tool).build().unwrap();
    let agent = Dispatcher::approving(registry, store.clone(), ApprovalKeys::new([approval_key()]))
        .unwrap();
    let run = RunContext::new("shop").with_run("r-1", 1);
    // The latest call that asked needs two approvers.
    assert!(asks(
        agent.dispatch(&refund("big", "c-7", 5000), &run).await
    ));
    let alone = ApprovalDesk::over(&*store);
    let wide = GrantTerms::new("shop", "refund", Duration::from_secs(3600))
        .within(bound(json!({"pointer": "/amount", "at_most": 10000})));
    alone.grant(&wide, &dana()).await.unwrap();
    // A small refund runs without asking; a big one, inside the bounds too, still asks: the
    // grant is one person's, and it needs two.
    agent
        .dispatch(&refund("small", "c-7", 5), &run)
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(asks(
        agent.dispatch(&refund("big-2", "c-7", 5000), &run).await
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
