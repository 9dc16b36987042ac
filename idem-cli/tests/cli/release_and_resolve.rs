//! Releasing and resolving: Unknown, in progress, and changed at the prompt.

use super::*;

#[tokio::test]
async fn an_unknown_record_released_runs_again_when_called() {
    let dir = TempDir::new("idem_cli_release");
    let (store, agent, run_ctx, _, unknown_key) = sqlite_with_work(&dir).await;
    let at = ["--store", store.as_str()];
    let call = text("call-u", "+351 910 000 044");
    let label = format!("{}/+351 910 000 044", run_ctx.tenant);
    assert_eq!(TEXTED.count(&label), 1);

    run(&mut on(
        &at,
        &[
            "records",
            "release",
            &unknown_key,
            "--as",
            "lee@desk",
            "--yes",
        ],
    ))
    .exited(0)
    .says(&["Release", "text_customer", "the call runs again"])
    .prints(&[&format!("released {unknown_key} by lee@desk")]);
    run(&mut on(&at, &["records", "show", &unknown_key]))
        .exited(4)
        .says(&["no record under key"]);

    // The carrier is asked again (and times out again).
    left_unknown(&agent, &call, &run_ctx).await;
    assert_eq!(TEXTED.count(&label), 2);
    assert_eq!(record_at(&at, &unknown_key)["state"], "unknown");
}

/// Dispatch `call` on a task of its own, and return once its body runs, held at the
/// `GATE`: its record is in progress until [`let_through`].
async fn running(
    agent: &Dispatcher,
    call: &ToolCall,
    run_ctx: &RunContext,
) -> tokio::task::JoinHandle<Result<Dispatched, DispatchError>> {
    let card = call.arguments["card"].as_str().expect("a card");
    let label = format!("{}/{card}", run_ctx.tenant);
    let before = CHARGED.count(&label);
    let (agent, call, run_ctx) = (agent.clone(), call.clone(), run_ctx.clone());
    let worker = tokio::spawn(async move { agent.dispatch(&call, &run_ctx).await });
    // A safety net against a body that never starts, not a measurement.
    for _ in 0..6000 {
        if CHARGED.count(&label) > before {
            return worker;
        }
        assert!(
            !worker.is_finished(),
            "the dispatch ended before its body ran"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the body of {label} never ran");
}

/// Let a body held at the `GATE` finish: what its dispatch returned.
async fn let_through(
    worker: tokio::task::JoinHandle<Result<Dispatched, DispatchError>>,
) -> Result<Dispatched, DispatchError> {
    GATE.add_permits(1);
    let ended = worker.await.expect("the dispatch's task");
    // A body stopped first because its worker lost the key took no permit: none is left over
    // for the next one.
    while let Ok(permit) = GATE.try_acquire() {
        permit.forget();
    }
    ended
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_progress_record_is_settled_only_with_force() {
    let dir = TempDir::new("idem_cli_in_progress");
    let (store, agent, run_ctx, _, _) = sqlite_with_work(&dir).await;
    let at = ["--store", store.as_str()];
    let (released, resolved) = (charge("call-c1", "card_1"), charge("call-c2", "card_2"));
    let (released_key, resolved_key) = (
        key_of(&agent, &released, &run_ctx),
        key_of(&agent, &resolved, &run_ctx),
    );
    let charged = |card: &str| CHARGED.count(&format!("{}/{card}", run_ctx.tenant));

    let worker = running(&agent, &released, &run_ctx).await;
    assert_eq!(
        listed(&at, &["--state", "in-progress"]),
        BTreeSet::from([released_key.clone()])
    );
    let before = record_at(&at, &released_key);
    assert_eq!(before["state"], "in_progress", "{before:#}");

    // Its worker may be alive: refused without --force, and the record left as it was.
    for args in [
        &["records", "release", &released_key][..],
        &["records", "resolve", &released_key, "--value", "1"],
    ] {
        run(on(&at, args).args(["--as", "lee@desk", "--yes"]))
            .exited(5)
            .says(&[
                "is in progress: a worker may still be running the call",
                "Pass --force",
            ]);
        let now = record_at(&at, &released_key);
        assert_eq!(
            (&now["state"], &now["fence"]),
            (&before["state"], &before["fence"]),
            "{now:#}"
        );
    }

    // With --force it is released: the worker is fenced out, and the call runs again.
    run(&mut on(
        &at,
        &[
            "records",
            "release",
            &released_key,
            "--force",
            "--as",
            "lee@desk",
            "--yes",
        ],
    ))
    .exited(0)
    .prints(&[&format!("released {released_key} by lee@desk")]);
    run(&mut on(&at, &["records", "show", &released_key]))
        .exited(4)
        .says(&["no record under key"]);
    match let_through(worker).await {
        Err(DispatchError::Fenced { .. }) => {}
        other => panic!("expected the released worker to be fenced out, got {other:?}"),
    }
    let again = let_through(running(&agent, &released, &run_ctx).await)
        .await
        .expect("the call, run again");
    assert!(!again.deduplicated, "{again:?}");
    let replayed = agent.dispatch(&released, &run_ctx).await.expect("a replay");
    assert!(replayed.deduplicated, "{replayed:?}");
    assert_eq!(charged("card_1"), 2);

    // With --force it is resolved: the worker is fenced out, and every call replays it.
    let worker = running(&agent, &resolved, &run_ctx).await;
    run(&mut on(
        &at,
        &[
            "records",
            "resolve",
            &resolved_key,
            "--value",
            r#"{"charged": "by hand"}"#,
            "--force",
            "--as",
            "lee@desk",
            "--yes",
        ],
    ))
    .exited(0)
    .prints(&[&format!("resolved {resolved_key} by lee@desk")]);
    let settled = record_at(&at, &resolved_key);
    assert_eq!(settled["state"], "completed", "{settled:#}");
    assert_eq!(settled["outcome"]["success"], json!({"charged": "by hand"}));
    match let_through(worker).await {
        Err(DispatchError::Fenced { .. }) => {}
        other => panic!("expected the resolved worker to be fenced out, got {other:?}"),
    }
    let replayed = agent.dispatch(&resolved, &run_ctx).await.expect("a replay");
    assert!(replayed.deduplicated, "{replayed:?}");
    assert_eq!(replayed.output, json!({"charged": "by hand"}));
    assert_eq!(charged("card_2"), 1);
}

/// Run `idem` with `args` on `at` up to its prompt, `change` the store meanwhile, then
/// answer yes: what it showed.
async fn changed_at_the_prompt(
    at: &[&str],
    args: &[&str],
    change: impl std::future::Future<Output = ()>,
) -> Shown {
    let args: Vec<&str> = args.iter().chain(at).copied().collect();
    let mut cli = Prompted::start(&args, &[]);
    cli.wait_for("Proceed? [y/N]").await;
    change.await;
    cli.answer("y\n");
    cli.finish().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_changed_at_the_prompt_is_left_as_it_is_now() {
    let dir = TempDir::new("idem_cli_changed");
    let (store, agent, run_ctx, _, unknown_key) = sqlite_with_work(&dir).await;
    let at = ["--store", store.as_str()];
    let records = agent.store().clone();

    // Released by someone else and called again while the operator looks: Unknown again,
    // at another fence. The release of the record shown changes nothing.
    let (released, number) = (text("call-u", "+351 910 000 044"), "+351 910 000 044");
    let label = format!("{}/{number}", run_ctx.tenant);
    let shown = record_at(&at, &unknown_key);
    changed_at_the_prompt(
        &at,
        &["records", "release", &unknown_key, "--as", "lee@desk"],
        async {
            let key = idem::key::RecordKey::from_stored(unknown_key.as_str());
            assert!(records.force_release(&key).await.expect("release it"));
            left_unknown(&agent, &released, &run_ctx).await;
        },
    )
    .await
    .exited(5)
    .says(&[
        "changed since it was shown",
        "it is now unknown",
        "nothing changed",
    ]);
    let now = record_at(&at, &unknown_key);
    assert_eq!(now["state"], "unknown", "{now:#}");
    assert_ne!(now["fence"], shown["fence"], "{now:#}");
    assert_eq!(TEXTED.count(&label), 2);

    // Resolved by someone else: the outcome they recorded stands, not the operator's.
    let resolved = text("call-u2", "+351 910 000 045");
    left_unknown(&agent, &resolved, &run_ctx).await;
    let resolved_key = key_of(&agent, &resolved, &run_ctx);
    changed_at_the_prompt(
        &at,
        &[
            "records",
            "resolve",
            &resolved_key,
            "--value",
            r#"{"delivered": false}"#,
            "--as",
            "lee@desk",
        ],
        async {
            let key = idem::key::RecordKey::from_stored(resolved_key.as_str());
            let delivered = idem::record::Outcome::success(&json!({"delivered": true}));
            records
                .resolve(&key, &delivered, Duration::from_secs(3600))
                .await
                .expect("resolve it");
        },
    )
    .await
    .exited(5)
    .says(&["changed since it was shown", "it is now completed"]);
    let now = record_at(&at, &resolved_key);
    assert_eq!(now["outcome"]["success"], json!({"delivered": true}));
    let replayed = agent.dispatch(&resolved, &run_ctx).await.expect("a replay");
    assert!(replayed.deduplicated, "{replayed:?}");
    assert_eq!(replayed.output, json!({"delivered": true}));

    // A completed record is neither released nor resolved again.
    for args in [
        &["records", "release", &resolved_key][..],
        &[
            "records",
            "resolve",
            &resolved_key,
            "--value",
            "1",
            "--force",
        ],
    ] {
        run(on(&at, args).args(["--as", "lee@desk", "--yes"]))
            .exited(5)
            .says(&["is already completed", "nothing changed"]);
    }
    assert_eq!(record_at(&at, &resolved_key), now);
    assert_eq!(
        TEXTED.count(&format!("{}/+351 910 000 045", run_ctx.tenant)),
        1
    );
}
