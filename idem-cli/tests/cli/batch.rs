//! Several pending calls decided at once: one question, each decision bound to the
//! arguments shown for its call, and a call that changed meanwhile refused alone.

use idem::store::approvals::{self, PendingApproval};

use super::*;

/// Three calls to close an account, left for approval on SQLite: the agent, its run, the
/// calls and their keys.
async fn three_pending(dir: &TempDir) -> (String, Dispatcher, RunContext, Vec<(ToolCall, String)>) {
    let path = dir.path().join("records.db");
    let agent = agent(Arc::new(
        idem::SqliteStore::open(&path).expect("open SQLite"),
    ));
    let run_ctx = RunContext::new(unique("batch"));
    let mut calls = Vec::new();
    for (id, customer) in [("b-1", "cus_b1"), ("b-2", "cus_b2"), ("b-3", "cus_b3")] {
        let call = close(id, customer);
        left_for_approval(&agent, &call, &run_ctx).await;
        let key = key_of(&agent, &call, &run_ctx);
        calls.push((call, key));
    }
    (format!("sqlite:{}", path.display()), agent, run_ctx, calls)
}

/// The entry under `key` replaced by a request for other arguments, as a new request made
/// under the key since would leave it.
async fn requested_again_otherwise(store: &dyn Store, key: &str, customer: &str) {
    let key = idem::key::RecordKey::from_stored(key);
    let old = store
        .approval_text(&key)
        .await
        .expect("read")
        .expect("pending");
    let mut entry: PendingApproval = serde_json::from_str(&old).expect("an entry");
    entry.arguments = json!({"customer": customer});
    entry.fingerprint = idem::key::Fingerprint::of(&entry.arguments);
    let text = serde_json::to_string(&entry).expect("JSON");
    assert!(
        store
            .swap_approval(&key, Some(&old), &entry, &text)
            .await
            .expect("swap")
    );
    assert!(approvals::get(store, &key).await.expect("read").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_decided_call_by_call_and_a_changed_call_is_refused_alone() {
    let dir = TempDir::new("idem_cli_batch");
    let (store, agent, run_ctx, calls) = three_pending(&dir).await;
    let keys: Vec<&str> = calls.iter().map(|(_, k)| k.as_str()).collect();
    let mut args = vec!["approvals", "approve"];
    args.extend(&keys);
    args.extend(["--store", store.as_str(), "--as", "dana@desk"]);
    let mut cli = Prompted::start(&args, &[("IDEM_APPROVAL_KEY", desk_key_text())]);
    cli.wait_for("Proceed? [y/N]").await;
    let asked = cli.stderr();
    for (customer, key) in ["cus_b1", "cus_b2", "cus_b3"].iter().zip(&keys) {
        assert!(asked.contains(customer) && asked.contains(key), "{asked}");
    }
    assert!(asked.contains("Approve 3 calls"), "{asked}");
    // While the operator reads, the second call is requested again with other arguments.
    requested_again_otherwise(&**agent.store(), keys[1], "cus_someone_else").await;
    cli.answer("y\n");
    let shown = cli.finish().await;
    shown
        .exited(5)
        .prints(&[
            &format!("approved {} (close_account", keys[0]),
            &format!("approved {} (close_account", keys[2]),
        ])
        .says(&[
            &format!("not approved: {}", keys[1]),
            "other arguments than the ones shown",
            "1 of 3 calls were not decided",
        ]);

    // The two approved calls run once each; the changed one waits for a person still.
    for (i, (call, _)) in calls.iter().enumerate() {
        let customer = call.arguments["customer"].as_str().expect("a customer");
        let label = format!("{}/{customer}", run_ctx.tenant);
        let answered = agent.dispatch(call, &run_ctx).await;
        if i == 1 {
            assert!(
                matches!(answered, Err(DispatchError::ApprovalRequired { .. })),
                "{answered:?}"
            );
            assert_eq!(CLOSED.count(&label), 0);
        } else {
            answered.expect("approved: it runs");
            assert_eq!(CLOSED.count(&label), 1);
        }
    }
    still_pending(&["--store", store.as_str()], keys[1]);
}

#[tokio::test]
async fn a_batch_denies_each_call_and_one_key_twice_is_one_call() {
    let dir = TempDir::new("idem_cli_batch_deny");
    let (store, agent, run_ctx, calls) = three_pending(&dir).await;
    let at = ["--store", store.as_str()];
    let downstream = approval_at(&at, &calls[0].1)["downstream_key"]
        .as_str()
        .expect("a downstream key")
        .to_owned();
    let shown = run(&mut deciding(
        &at,
        &[
            "approvals",
            "deny",
            &calls[0].1,
            &downstream,
            &calls[1].1,
            "--reason",
            "not during the freeze",
            "--yes",
            "--json",
        ],
    ))
    .exited(0);
    let decided = shown.json();
    let decided = entries(&decided);
    assert_eq!(
        decided.len(),
        2,
        "one call under two of its keys is one call: {decided:#?}"
    );
    assert!(decided.iter().all(|d| d["decided"] == json!(true)));
    for (call, _) in &calls[..2] {
        match agent.dispatch(call, &run_ctx).await {
            Err(DispatchError::ApprovalDenied { reason, .. }) => {
                assert_eq!(reason, "not during the freeze")
            }
            other => panic!("expected ApprovalDenied, got {other:?}"),
        }
    }
    still_pending(&at, &calls[2].1);
    // An edit belongs to one call.
    run(&mut deciding(
        &at,
        &[
            "approvals",
            "approve",
            &calls[2].1,
            &calls[1].1,
            "--edit",
            "{}",
            "--yes",
        ],
    ))
    .exited(2)
    .says(&["--edit changes one call's arguments"]);
    // A blank reason is refused before anything is decided.
    run(&mut deciding(
        &at,
        &[
            "approvals",
            "deny",
            &calls[2].1,
            &calls[1].1,
            "--reason",
            " ",
            "--yes",
        ],
    ))
    .exited(2)
    .says(&["a denial needs a reason"]);
    still_pending(&at, &calls[2].1);
}
