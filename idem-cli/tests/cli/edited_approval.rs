//! An approval with edited arguments.

use super::*;

/// Approve the pending `close_account` of `customer` (call `call_id`) as closing `edited`
/// instead, with `edit` (`--edit JSON` or `--edit-file FILE`): the agent's call as made is
/// refused with the edited arguments, the call with them runs once, and a further one is a
/// replay.
async fn runs_once_as_edited(
    at: &[&str],
    agent: &Dispatcher,
    run_ctx: &RunContext,
    (call_id, customer): (&str, &str),
    edited: &str,
    edit: &[&str],
) {
    let call = close(call_id, customer);
    let key = key_of(agent, &call, run_ctx);
    let arguments = json!({"customer": edited});
    run(deciding(at, &["approvals", "approve", &key, "--yes"]).args(edit))
        .exited(0)
        .says(&["EDITED arguments", edited])
        .prints(&[
            &format!("approved {key}"),
            "refused with the edited arguments",
        ]);
    let decided = approval_at(at, &key);
    assert_eq!(decided["status"], "approved", "{decided:#}");
    assert_eq!(decided["decision"]["edited_arguments"], arguments);

    let (as_called, as_edited) = (
        format!("{}/{customer}", run_ctx.tenant),
        format!("{}/{edited}", run_ctx.tenant),
    );
    match agent.dispatch(&call, run_ctx).await {
        Err(DispatchError::ApprovalEdited { arguments: got, .. }) => assert_eq!(*got, arguments),
        other => panic!("expected ApprovalEdited, got {other:?}"),
    }
    assert_eq!((CLOSED.count(&as_called), CLOSED.count(&as_edited)), (0, 0));
    let edited_call = close(call_id, edited);
    let ran = agent
        .dispatch(&edited_call, run_ctx)
        .await
        .expect("the call with the edited arguments");
    assert!(!ran.deduplicated, "{ran:?}");
    assert_eq!(ran.output["closed"], edited);
    let again = agent
        .dispatch(&edited_call, run_ctx)
        .await
        .expect("a replay");
    assert!(again.deduplicated, "{again:?}");
    assert_eq!((CLOSED.count(&as_called), CLOSED.count(&as_edited)), (0, 1));
}

#[tokio::test]
async fn an_approval_edited_by_the_operator_runs_once_with_the_edits_only() {
    let dir = TempDir::new("idem_cli_edited");
    let (store, agent, run_ctx, pending_key, _) = sqlite_with_work(&dir).await;
    let at = ["--store", store.as_str()];
    let not_an_object = dir.path().join("list.json");
    std::fs::write(&not_an_object, "[1]").expect("write the edits");
    let not_an_object = not_an_object.display().to_string();

    // Edits that are not a call's arguments are refused, and nothing is decided.
    for (edit, why) in [
        (&["--edit", "[1]"][..], "edited arguments are a JSON object"),
        (&["--edit", "nope"], "--edit: not JSON"),
        (
            &["--edit-file", &not_an_object],
            "edited arguments are a JSON object",
        ),
        (
            &["--edit", "{}", "--edit-file", &not_an_object],
            "cannot be used with",
        ),
    ] {
        run(deciding(&at, &["approvals", "approve", &pending_key, "--yes"]).args(edit))
            .exited(2)
            .says(&[why]);
    }
    still_pending(&at, &pending_key);
    left_for_approval(&agent, &close("call-p", "cus_p"), &run_ctx).await;

    runs_once_as_edited(
        &at,
        &agent,
        &run_ctx,
        ("call-p", "cus_p"),
        "cus_p_instead",
        &["--edit", r#"{"customer": "cus_p_instead"}"#],
    )
    .await;

    left_for_approval(&agent, &close("call-q", "cus_q"), &run_ctx).await;
    let edits = dir.path().join("edits.json");
    std::fs::write(&edits, r#"{"customer": "cus_q_instead"}"#).expect("write the edits");
    runs_once_as_edited(
        &at,
        &agent,
        &run_ctx,
        ("call-q", "cus_q"),
        "cus_q_instead",
        &["--edit-file", &edits.display().to_string()],
    )
    .await;
}
