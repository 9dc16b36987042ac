//! `idem runs show`: a run's account from the store, as a table and as JSON.

use super::*;

#[tokio::test]
async fn runs_show_tells_every_call_of_a_run_and_what_became_of_it() {
    let dir = TempDir::new("idem_cli_runs");
    let path = dir.path().join("records.db");
    let agent = agent(Arc::new(
        idem::SqliteStore::open(&path).expect("open SQLite"),
    ))
    .with_run_accounts(Duration::from_secs(3600));
    let store = format!("sqlite:{}", path.display());
    let at = ["--store", store.as_str()];
    let run_ctx = RunContext::new("north").with_run("run-cli", 1);
    agent
        .dispatch(&ticket("call-k1", "T-1"), &run_ctx)
        .await
        .expect("a ticket tagged");
    agent
        .dispatch(&ticket("call-k2", "T-1"), &run_ctx.clone().at_step(2))
        .await
        .expect("tagged again");
    left_for_approval(
        &agent,
        &close("call-c1", "cus_9"),
        &run_ctx.clone().at_step(3),
    )
    .await;
    let bad = ToolCall::new("tag_ticket", json!({"ticket": 7})).with_call_id("call-k3");
    assert!(
        agent
            .dispatch(&bad, &run_ctx.clone().at_step(4))
            .await
            .is_err()
    );

    let shown = run(&mut on(
        &at,
        &["runs", "show", "run-cli", "--tenant", "north"],
    ))
    .exited(0)
    .prints(&[
        "tag_ticket",
        "call-k1",
        "applied",
        "close_account",
        "pending_approval",
        "waiting for a person: idem approvals",
        "refused",
        "/ticket",
        "in all: 2 applied, 1 pending_approval, 1 refused",
    ]);
    let rows: Vec<&str> = shown
        .stdout
        .lines()
        .filter(|l| l.contains("call-"))
        .collect();
    assert_eq!(rows.len(), 4, "{shown:#?}");

    let json = run(&mut on(
        &at,
        &["runs", "show", "run-cli", "--tenant", "north", "--json"],
    ))
    .exited(0)
    .json();
    let outcomes: Vec<&str> = json["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        ["applied", "applied", "pending_approval", "refused"]
    );

    // Another tenant's run of that id, or a run nobody made: nothing, said so.
    run(&mut on(
        &at,
        &["runs", "show", "run-cli", "--tenant", "south"],
    ))
    .exited(4)
    .says(&["no calls of run `run-cli` for tenant `south`"]);
}
