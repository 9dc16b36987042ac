//! Deciding exactly the call an agent was refused, by the key a person has in hand: the
//! downstream key the refusal names (the `ApprovalRequired` error's text, which an MCP answer
//! shows) or the record key `idem approvals list` prints. The other calls stay pending.

use super::*;

/// Dispatch `call`, refused for want of an approval: the refusal's text, and the downstream
/// key it names.
async fn refusal_of(agent: &Dispatcher, call: &ToolCall, run: &RunContext) -> (String, String) {
    match agent.dispatch(call, run).await {
        Err(e) => match &e {
            DispatchError::ApprovalRequired { request } => (e.to_string(), request.key.to_string()),
            other => panic!("expected ApprovalRequired for {call:?}, got {other:?}"),
        },
        Ok(done) => panic!("expected ApprovalRequired for {call:?}, it ran: {done:?}"),
    }
}

#[tokio::test]
async fn approve_takes_the_key_the_refusal_names_or_the_listed_one_and_decides_that_call_alone() {
    let dir = TempDir::new("idem_cli_refused");
    let path = dir.path().join("records.db");
    let agent = agent(Arc::new(
        idem::SqliteStore::open(&path).expect("open SQLite"),
    ));
    let store = format!("sqlite:{}", path.display());
    let at = ["--store", store.as_str()];
    let run_ctx = RunContext::new(unique("refused_call"));
    let closed = |customer: &str| CLOSED.count(&format!("{}/{customer}", run_ctx.tenant));
    let (first, second) = (close("call-r1", "cus_r1"), close("call-r2", "cus_r2"));
    let (said, named) = refusal_of(&agent, &first, &run_ctx).await;
    left_for_approval(&agent, &second, &run_ctx).await;
    let (first_key, second_key) = (
        key_of(&agent, &first, &run_ctx),
        key_of(&agent, &second, &run_ctx),
    );
    assert!(said.contains(&named), "the refusal names its key: {said}");

    // The key the refusal names shows and approves that call, and no other.
    assert_eq!(approval_at(&at, &named), approval_at(&at, &first_key));
    run(&mut deciding(
        &at,
        &["approvals", "approve", &named, "--yes"],
    ))
    .exited(0)
    .says(&["close_account", "cus_r1"])
    .prints(&[&format!("approved {first_key}")]);
    let ran = agent
        .dispatch(&first, &run_ctx)
        .await
        .expect("the approved call runs");
    assert!(!ran.deduplicated, "{ran:?}");
    assert_eq!((closed("cus_r1"), closed("cus_r2")), (1, 0));
    still_pending(&at, &second_key);
    left_for_approval(&agent, &second, &run_ctx).await;

    // The key `idem approvals list` prints approves the other.
    let listed = run(&mut on(
        &at,
        &["approvals", "list", "--json", "--tenant", &run_ctx.tenant],
    ))
    .exited(0)
    .json();
    let keys: Vec<&str> = entries(&listed)
        .iter()
        .map(|e| e["key"].as_str().expect("a key"))
        .collect();
    assert_eq!(keys, [second_key.as_str()]);
    run(&mut deciding(
        &at,
        &["approvals", "approve", &second_key, "--yes"],
    ))
    .exited(0)
    .prints(&[&format!("approved {second_key}")]);
    agent
        .dispatch(&second, &run_ctx)
        .await
        .expect("the approved call runs");
    assert_eq!((closed("cus_r1"), closed("cus_r2")), (1, 1));

    // Deny takes the refusal's key too.
    let third = close("call-r3", "cus_r3");
    let (_, named) = refusal_of(&agent, &third, &run_ctx).await;
    run(&mut deciding(
        &at,
        &["approvals", "deny", &named, "--reason", "kept", "--yes"],
    ))
    .exited(0)
    .prints(&["denied"]);
    match agent.dispatch(&third, &run_ctx).await {
        Err(DispatchError::ApprovalDenied { reason, .. }) => assert_eq!(reason, "kept"),
        other => panic!("expected ApprovalDenied, got {other:?}"),
    }
}

#[tokio::test]
async fn a_key_that_names_no_request_is_refused_saying_which_keys_are_taken() {
    let dir = TempDir::new("idem_cli_refused_none");
    let (store, agent, run_ctx, pending_key, _) = sqlite_with_work(&dir).await;
    let at = ["--store", store.as_str()];
    for key in ["idem-0000000000000000000000000000000000000000", "nope"] {
        run(&mut deciding(&at, &["approvals", "approve", key, "--yes"]))
            .exited(4)
            .says(&[
                &format!("no approval was requested under key {key}"),
                "`idem approvals list --all`",
                "downstream key",
            ]);
    }
    still_pending(&at, &pending_key);
    left_for_approval(&agent, &close("call-p", "cus_p"), &run_ctx).await;
}

#[test]
fn approve_says_in_its_help_which_key_it_takes() {
    for command in ["approve", "deny", "show"] {
        run(&mut idem(&["approvals", command, "--help"]))
            .exited(0)
            .prints(&["record key", "`idem approvals list`", "downstream key"]);
    }
}
