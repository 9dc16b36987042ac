//! Standing grants at the prompt: `idem grants add` lets an agent's calls within bounds run
//! without asking, `idem grants list` shows it, `idem grants revoke` ends it; and what cannot
//! be granted is refused naming why.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_made_at_the_prompt_lets_calls_within_run_until_it_is_revoked() {
    let dir = TempDir::new("idem_cli_grants");
    let path = dir.path().join("records.db");
    let store = format!("sqlite:{}", path.display());
    let at = ["--store", store.as_str()];
    let agent = agent(Arc::new(
        idem::SqliteStore::open(&path).expect("open SQLite"),
    ));
    let tenant = unique("grants");
    let run_ctx = RunContext::new(&tenant).with_run("run-g", 1);
    let within = r#"{"pointer": "/customer", "one_of": ["cus_g1", "cus_g2"]}"#;
    let add = |tool: &str| {
        let mut cmd = deciding(&at, &["grants", "add", "--yes"]);
        cmd.args(["--tenant", &tenant, "--tool", tool, "--run", "run-g"])
            .args(["--for", "1h", "--within", within]);
        cmd
    };

    // No call of the tool asked here yet: its policy is unknown to the command line.
    run(&mut add("close_account"))
        .exited(5)
        .says(&["policy of `close_account` is unknown here"]);
    left_for_approval(&agent, &close("g-0", "cus_other"), &run_ctx).await;

    let shown = run(&mut add("close_account")).exited(0);
    let granted = shown.stdout.clone();
    assert!(granted.contains("granted g-"), "{shown:#?}");
    let id = granted
        .split_whitespace()
        .find(|w| w.starts_with("g-"))
        .expect("the grant's id")
        .to_owned();

    // Within the bounds: runs without a person, once.
    let ran = agent
        .dispatch(&close("g-1", "cus_g1"), &run_ctx)
        .await
        .expect("granted");
    assert!(
        ran.granted.as_deref().is_some_and(|g| g.contains(&id)),
        "{ran:?}"
    );
    assert_eq!(CLOSED.count(&format!("{tenant}/cus_g1")), 1);
    // Outside them: asks.
    left_for_approval(&agent, &close("g-2", "cus_g3"), &run_ctx).await;

    let listed = run(&mut on(&at, &["grants", "list", "--json"]))
        .exited(0)
        .json();
    let mine: Vec<&Value> = entries(&listed)
        .iter()
        .filter(|g| g["id"] == json!(id))
        .collect();
    assert_eq!(mine.len(), 1, "{listed:#}");
    assert_eq!(
        (&mine[0]["status"], &mine[0]["by"], &mine[0]["tool"]),
        (
            &json!("standing"),
            &json!("dana@desk"),
            &json!("close_account")
        )
    );

    run(&mut on(
        &at,
        &["grants", "revoke", &id, "--yes", "--as", "lee@desk"],
    ))
    .exited(0)
    .prints(&[&format!("revoked {id} by lee@desk")]);
    left_for_approval(&agent, &close("g-3", "cus_g2"), &run_ctx).await;
    assert_eq!(CLOSED.count(&format!("{tenant}/cus_g2")), 0);
    run(&mut on(
        &at,
        &["grants", "revoke", &id, "--yes", "--as", "lee@desk"],
    ))
    .exited(5)
    .says(&["revoked already, by lee@desk"]);
    let all = run(&mut on(&at, &["grants", "list", "--all", "--json"]))
        .exited(0)
        .json();
    assert!(
        entries(&all)
            .iter()
            .any(|g| g["id"] == json!(id) && g["status"] == json!("revoked")),
        "{all:#}"
    );

    // Bad input: a bound that is not a rule, a grant for too long.
    run(&mut deciding(
        &at,
        &[
            "grants",
            "add",
            "--yes",
            "--tenant",
            "t",
            "--tool",
            "close_account",
            "--for",
            "1h",
            "--within",
            "{\"amount\": 5}",
        ],
    ))
    .exited(2)
    .says(&["--within", "not a rule"]);
    run(&mut deciding(
        &at,
        &[
            "grants",
            "add",
            "--yes",
            "--tenant",
            "t",
            "--tool",
            "close_account",
            "--for",
            "365d",
        ],
    ))
    .exited(2)
    .says(&["a grant lasts from 1 second to 90 days"]);

    // The decision log has the grant and its revocation.
    let log = run(&mut on(&at, &["audit", "list", "--json"]))
        .exited(0)
        .json();
    let actions: Vec<&Value> = entries(&log)
        .iter()
        .map(|e| &e["decision"]["action"])
        .collect();
    assert!(
        actions.contains(&&json!("grant")) && actions.contains(&&json!("revoke")),
        "{log:#}"
    );
}
