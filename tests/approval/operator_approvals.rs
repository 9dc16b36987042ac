//! Approvals decided without the agent's tools: `ApprovalDesk::over` (approve and deny), as the
//! `idem` command line and the approval inbox decide them, with only the store and a key.

use crate::support;

use std::sync::Arc;

use idem::approval::ApprovalDesk;
use idem::prelude::*;
use idem::store::approvals::{ApprovalFilter, DecisionRefused, PendingApproval};
use idem::{MemoryStore, SecretKey, approval::DecisionError};
use serde_json::{Value, json};
use support::dispatcher::{approver, dispatcher};
use support::tally::Tally;

static CLOSED: Tally = Tally::new();

fn default_notice() -> String {
    "30 days".into()
}

/// Close a customer's account.
#[tool(class = "irreversible")]
fn close_account(
    customer: String,
    #[serde(default = "default_notice")] notice: String,
) -> Result<Value, ToolError> {
    let run = CLOSED.note(&customer, &notice);
    Ok(json!({"closed": customer, "notice": notice, "run": run}))
}

/// Send a wire; the bank's one-time code is a secret, and may be left out.
#[tool(class = "irreversible")]
fn wire(cents: u64, #[secret] otp: Option<String>) -> Result<Value, ToolError> {
    Ok(json!({"wired": cents, "with_otp": otp.is_some()}))
}

/// Wire a payout to a card (its number is a secret).
#[tool(class = "irreversible")]
fn pay_out(cents: u64, #[secret] card: String) -> Result<Value, ToolError> {
    let _ = card;
    Ok(json!({"paid": cents}))
}

fn agent(store: &Arc<MemoryStore>) -> Dispatcher {
    dispatcher(Registry::linked().unwrap(), store.clone())
        .with_secret_key(SecretKey::new(*b"operator-approvals-test-sealing!").unwrap())
}

async fn pending(store: &Arc<MemoryStore>, call: &ToolCall, run: &RunContext) -> PendingApproval {
    let agent = agent(store);
    let err = agent.dispatch(call, run).await.unwrap_err();
    assert!(
        matches!(err, DispatchError::ApprovalRequired { .. }),
        "{err:?}"
    );
    let listed = agent
        .approvals()
        .pending(&ApprovalFilter {
            tenant: Some(run.tenant.clone()),
            tool: Some(call.name.clone()),
            ..ApprovalFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    listed.into_iter().next().unwrap()
}

fn close(id: &str, args: Value) -> ToolCall {
    ToolCall::new("close_account", args).with_call_id(id)
}

#[tokio::test]
async fn an_approval_made_without_the_tools_runs_the_call_once() {
    let store = Arc::new(MemoryStore::new());
    let run = RunContext::new("op-plain");
    let call = close("c1", json!({"customer": "cus_plain"}));
    let entry = pending(&store, &call, &run).await;

    let decided = ApprovalDesk::over(&*store)
        .approve(&entry.key, &approver(), None, None)
        .await
        .unwrap();
    assert_eq!(decided.decision.unwrap().by, "operator@tests");
    let agent = agent(&store);
    let first = agent.dispatch(&call, &run).await.unwrap();
    let again = agent.dispatch(&call, &run).await.unwrap();
    assert!(!first.deduplicated && again.deduplicated);
    assert_eq!(CLOSED.count("cus_plain"), 1);

    // Deciding it again is refused, naming who decided.
    let err = ApprovalDesk::over(&*store)
        .approve(&entry.key, &approver(), None, None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            DecisionError::Refused(DecisionRefused::AlreadyDecided { ref by, .. }) if by == "operator@tests"
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn edited_arguments_without_a_default_run_in_their_normal_form() {
    let store = Arc::new(MemoryStore::new());
    let run = RunContext::new("op-edit");
    let call = close("c2", json!({"customer": "cus_edit", "notice": "at once"}));
    let entry = pending(&store, &call, &run).await;

    // The approver drops the notice: the tool's default is what it means.
    let edited = json!({"customer": "cus_edit"});
    ApprovalDesk::over(&*store)
        .approve(&entry.key, &approver(), Some(&edited), None)
        .await
        .unwrap();
    let agent = agent(&store);
    // The call as made is refused, with the arguments approved.
    let err = agent.dispatch(&call, &run).await.unwrap_err();
    let DispatchError::ApprovalEdited { arguments, .. } = err else {
        panic!("expected ApprovalEdited, got {err:?}");
    };
    assert_eq!(*arguments, edited);
    assert_eq!(CLOSED.count("cus_edit"), 0);
    // Called with them, it runs once, with the default filled in.
    let edited_call = close("c2", *arguments);
    let ran = agent.dispatch(&edited_call, &run).await.unwrap();
    assert_eq!(ran.output["notice"], "30 days");
    let replayed = agent.dispatch(&edited_call, &run).await.unwrap();
    assert!(replayed.deduplicated);
    assert_eq!(CLOSED.count("cus_edit"), 1);
}

#[tokio::test]
async fn edited_arguments_that_do_not_fit_are_refused_when_called_and_nothing_runs() {
    let store = Arc::new(MemoryStore::new());
    let run = RunContext::new("op-misfit");
    let call = close("c3", json!({"customer": "cus_misfit"}));
    let entry = pending(&store, &call, &run).await;

    let edited = json!({"customer": 7});
    ApprovalDesk::over(&*store)
        .approve(&entry.key, &approver(), Some(&edited), None)
        .await
        .unwrap();
    let agent = agent(&store);
    let err = agent
        .dispatch(&close("c3", edited.clone()), &run)
        .await
        .unwrap_err();
    assert!(
        matches!(err, DispatchError::InvalidArguments { .. }),
        "{err:?}"
    );
    assert_eq!(CLOSED.count("cus_misfit"), 0);
}

#[tokio::test]
async fn sealed_arguments_cannot_be_edited_but_can_be_approved() {
    let store = Arc::new(MemoryStore::new());
    let run = RunContext::new("op-secret");
    let call = ToolCall::new("pay_out", json!({"cents": 500, "card": "4242424242424242"}))
        .with_call_id("p1");
    let entry = pending(&store, &call, &run).await;
    assert!(
        !entry.arguments.to_string().contains("4242"),
        "{}",
        entry.arguments
    );

    let edited = json!({"cents": 5000, "card": entry.arguments["card"].clone()});
    let err = ApprovalDesk::over(&*store)
        .approve(&entry.key, &approver(), Some(&edited), None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, DecisionError::SecretsNotEditable(ref tool) if tool == "pay_out"),
        "{err:?}"
    );
    ApprovalDesk::over(&*store)
        .approve(&entry.key, &approver(), None, None)
        .await
        .unwrap();
    let paid = agent(&store).dispatch(&call, &run).await.unwrap();
    assert_eq!(paid.output, json!({"paid": 500}));
}

#[tokio::test]
async fn a_denial_made_without_the_tools_is_replayed_with_its_reason() {
    let store = Arc::new(MemoryStore::new());
    let run = RunContext::new("op-deny");
    let call = close("c4", json!({"customer": "cus_deny"}));
    let entry = pending(&store, &call, &run).await;

    ApprovalDesk::over(&*store)
        .deny(&entry.key, "lee@desk", "customer asked to keep it", None)
        .await
        .unwrap();
    let agent = agent(&store);
    for _ in 0..2 {
        let err = agent.dispatch(&call, &run).await.unwrap_err();
        let DispatchError::ApprovalDenied { by, reason, .. } = err else {
            panic!("expected ApprovalDenied, got {err:?}");
        };
        assert_eq!(
            (by.as_str(), reason.as_str()),
            ("lee@desk", "customer asked to keep it")
        );
    }
    assert_eq!(CLOSED.count("cus_deny"), 0);
    let err = ApprovalDesk::over(&*store)
        .approve(&entry.key, &approver(), None, None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            DecisionError::Refused(DecisionRefused::AlreadyDecided { .. })
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_tool_with_secrets_is_approved_as_called_even_when_its_secret_was_left_out() {
    let store = Arc::new(MemoryStore::new());
    let run = RunContext::new("op-wire");
    // The optional secret was left out, so nothing in the arguments is sealed; the entry
    // still says the tool has secrets.
    let call = ToolCall::new("wire", json!({"cents": 100})).with_call_id("w1");
    let entry = pending(&store, &call, &run).await;
    assert!(entry.secret_parameters);

    // An approver without the tools types the code into an edit: refused, nothing stored.
    let edited = json!({"cents": 100, "otp": "991234"});
    let err = ApprovalDesk::over(&*store)
        .approve(&entry.key, &approver(), Some(&edited), None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, DecisionError::SecretsNotEditable(ref tool) if tool == "wire"),
        "{err:?}"
    );
    let stored = serde_json::to_string(
        &agent(&store)
            .approvals()
            .pending(&ApprovalFilter::default())
            .await
            .unwrap(),
    )
    .unwrap();
    assert!(!stored.contains("991234"), "{stored}");
    // As called, it is approved and runs.
    ApprovalDesk::over(&*store)
        .approve(&entry.key, &approver(), None, None)
        .await
        .unwrap();
    let wired = agent(&store).dispatch(&call, &run).await.unwrap();
    assert_eq!(wired.output, json!({"wired": 100, "with_otp": false}));
}

#[tokio::test]
async fn edits_to_a_tool_with_secrets_are_never_handed_to_the_model() {
    let store = Arc::new(MemoryStore::new());
    let run = RunContext::new("op-wire-old");
    let call = ToolCall::new("wire", json!({"cents": 100})).with_call_id("w2");
    let entry = pending(&store, &call, &run).await;
    // An entry written before entries said whether the tool has secrets, approved with an
    // edit holding one: the dispatcher, which knows the tool, still never hands it back.
    let old = idem::store::approvals::PendingApproval {
        secret_parameters: false,
        ..entry.clone()
    };
    let text = serde_json::to_string(&entry).unwrap();
    let old_text = serde_json::to_string(&old).unwrap();
    assert!(!old_text.contains("secret_parameters"), "{old_text}");
    assert!(
        idem::Store::swap_approval(&*store, &entry.key, Some(&text), &old, &old_text)
            .await
            .unwrap()
    );
    let edited = json!({"cents": 100, "otp": "991234"});
    ApprovalDesk::over(&*store)
        .approve(&entry.key, &approver(), Some(&edited), None)
        .await
        .unwrap();
    let err = agent(&store).dispatch(&call, &run).await.unwrap_err();
    assert!(
        matches!(err, DispatchError::ApprovalRefused { .. }),
        "{err:?}"
    );
    assert!(!format!("{err:?} {err}").contains("991234"), "{err:?}");
}

#[tokio::test]
async fn a_decision_lands_only_on_the_request_that_was_shown() {
    let store = Arc::new(MemoryStore::new());
    let run = RunContext::new("op-shown");
    let call = close("c5", json!({"customer": "cus_shown"}));
    let entry = pending(&store, &call, &run).await;
    let other = idem::key::Fingerprint::of_canonical("{\"customer\":\"cus_other\"}");

    let denied = ApprovalDesk::over(&*store)
        .deny(&entry.key, "lee@desk", "not this one", Some(other))
        .await;
    assert!(
        matches!(denied, Err(DecisionError::Refused(DecisionRefused::NotShown(ref key))) if *key == entry.key),
        "{denied:?}"
    );
    let approved = ApprovalDesk::over(&*store)
        .approve(&entry.key, &approver(), None, Some(other))
        .await;
    assert!(
        matches!(approved, Err(DecisionError::NotShown(_))),
        "{approved:?}"
    );
    // Still pending: the request shown can be decided.
    assert!(pending(&store, &call, &run).await.decision.is_none());
    ApprovalDesk::over(&*store)
        .deny(&entry.key, "lee@desk", "this one", Some(entry.fingerprint))
        .await
        .unwrap();
}
