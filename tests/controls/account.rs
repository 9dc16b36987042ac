//! A run's account, call by call, against the fake providers' ledger: every call of the run
//! with its outcome (applied, replayed, refused and why, pending approval, compensated,
//! unknown), each applied call's effect in the ledger once, and nothing in it for the others.
//! An approval decided later brings the pending call up to date.

use std::sync::Arc;
use std::time::Duration;

use idem::dispatch::CallOutcome;
use idem::prelude::*;
use serde_json::json;

use crate::authorize::shop;
use crate::on_stores;
use crate::support::dispatcher::approver;
use crate::world::{Ticket, fresh_tenant, world};

async fn a_runs_account_matches_the_providers_ledger_call_by_call(store: Arc<dyn idem::Store>) {
    let tenant = fresh_tenant("account");
    {
        let mut w = world(&tenant);
        w.orders.insert("ord_a".into(), ("cus_a".into(), false));
        w.orders.insert("ord_b".into(), ("cus_b".into(), false));
        w.tickets.insert(
            "t-9".into(),
            Ticket {
                version: 4,
                status: "open".into(),
            },
        );
        w.refuse_cancel.push("flight-bergen".into());
    }
    let d = shop(store.clone()).with_run_accounts(Duration::from_secs(3600));
    let run = RunContext::new(tenant.as_str())
        .with_run("run-acct", 1)
        .acting_for("cus_a")
        .with_limit("refund", 50);
    let calls = [
        ToolCall::new(
            "cancel_order",
            json!({"customer_id": "cus_a", "order_id": "ord_a"}),
        )
        .with_call_id("c1")
        .with_key("cancel-ord_a"),
        // The model calls again "to be sure", under the same key.
        ToolCall::new(
            "cancel_order",
            json!({"customer_id": "cus_a", "order_id": "ord_a"}),
        )
        .with_call_id("c2")
        .with_key("cancel-ord_a"),
        ToolCall::new(
            "cancel_order",
            json!({"customer_id": "cus_b", "order_id": "ord_b"}),
        )
        .with_call_id("c3"),
        ToolCall::new(
            "refund",
            json!({"customer_id": "cus_a", "order_id": "ord_a", "amount": 500}),
        )
        .with_call_id("c4"),
        ToolCall::new("book_trip", json!({"trip": "rome", "with_car": true})).with_call_id("c5"),
        ToolCall::new(
            "set_ticket_status",
            json!({"ticket_id": "t-9", "expected_version": 3, "status": "closed"}),
        )
        .with_call_id("c6"),
        ToolCall::new(
            "refund",
            json!({"customer_id": "cus_a", "order_id": "ord_a", "amount": 20}),
        )
        .with_call_id("c7"),
        ToolCall::new("book_trip", json!({"trip": "bergen", "with_car": true})).with_call_id("c8"),
    ];
    for (step, call) in calls.iter().enumerate() {
        let _ = d.dispatch(call, &run.clone().at_step(step as u64)).await;
    }
    let account = d.run_account(&tenant, "run-acct").await.unwrap();
    let outcomes: Vec<(&str, &str)> = account
        .calls
        .iter()
        .map(|c| (c.call_id.as_deref().unwrap(), c.outcome.name()))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("c1", "applied"),
            ("c2", "replayed"),
            ("c3", "refused"),
            ("c4", "pending_approval"),
            ("c5", "compensated"),
            ("c6", "refused"),
            ("c7", "applied"),
            ("c8", "unknown"),
        ],
        "{account}"
    );
    let CallOutcome::Refused { why } = &account.calls[2].outcome else {
        unreachable!()
    };
    assert!(
        why.contains("may cancel only the orders of the customer it acts for"),
        "{why}"
    );
    let CallOutcome::Refused { why } = &account.calls[5].outcome else {
        unreachable!()
    };
    assert!(why.starts_with("precondition failed"), "{why}");

    // Call by call against the ledger.
    let w = world(&tenant);
    let by_key = |key: &str| w.ledger.iter().filter(|e| e.key == key).count();
    let key_of = |i: usize| account.calls[i].key.clone().expect("a keyed call");
    assert_eq!(by_key(&key_of(0)), 1, "c1 applied once");
    assert_eq!(key_of(0), key_of(1), "c2 replayed c1's record");
    assert_eq!(w.effects("cancel ord_b").len(), 0, "c3 applied nothing");
    assert_eq!(w.effects("refund 500").len(), 0, "c4 waits: nothing yet");
    assert_eq!(w.effects("book flight rome").len(), 1);
    assert_eq!(w.effects("book hotel rome").len(), 1);
    assert_eq!(w.effects("cancel hotel-rome").len(), 1, "c5 undone");
    assert_eq!(w.effects("cancel flight-rome").len(), 1, "c5 undone");
    assert_eq!(w.effects("status").len(), 0, "c6 applied nothing");
    assert_eq!(by_key(&key_of(6)), 1, "c7 applied once");
    assert_eq!(
        w.effects("book flight bergen").len(),
        1,
        "c8 partly applied"
    );
    assert_eq!(w.effects("cancel hotel-bergen").len(), 1);
    assert_eq!(
        w.effects("cancel flight-bergen").len(),
        0,
        "c8 left for a person"
    );
    assert_eq!(
        w.ledger.len(),
        9,
        "no effect the account does not explain: {:?}",
        w.ledger
    );
    drop(w);
    let needing: Vec<&str> = account
        .needing_a_person()
        .map(|c| c.call_id.as_deref().unwrap())
        .collect();
    assert_eq!(needing, ["c4", "c8"]);
    let text = account.to_string();
    assert!(
        text.ends_with(
            "in all: 2 applied, 1 replayed, 2 refused, 1 pending_approval, 1 compensated, 1 unknown"
        ),
        "{text}"
    );

    // A person approves c4; the loop sends it again: the account says applied, once.
    let pending = d
        .approvals()
        .pending(&idem::store::approvals::ApprovalFilter {
            tenant: Some(tenant.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    d.approvals()
        .approve(&pending[0].key, &approver(), None, None)
        .await
        .unwrap();
    d.dispatch(&calls[3], &run.clone().at_step(3))
        .await
        .expect("approved");
    let account = d.run_account(&tenant, "run-acct").await.unwrap();
    assert_eq!(account.calls.len(), 8, "the same call, not a new one");
    assert_eq!(account.calls[3].outcome, CallOutcome::Applied);
    assert_eq!(world(&tenant).effects("refund 500").len(), 1);

    // Another run, and another tenant's run of the same id, are apart.
    assert!(
        d.run_account(&tenant, "run-other")
            .await
            .unwrap()
            .calls
            .is_empty()
    );
    assert!(
        d.run_account("someone-else", "run-acct")
            .await
            .unwrap()
            .calls
            .is_empty()
    );
}

on_stores!(a_runs_account_matches_the_providers_ledger_call_by_call =>
    sqlite_a_runs_account_matches_the_providers_ledger_call_by_call,
    postgres_a_runs_account_matches_the_providers_ledger_call_by_call);
