//! Which records a listing shows.

use super::*;

#[tokio::test]
async fn records_list_filters_by_tool_tenant_state_age_and_count() {
    let dir = TempDir::new("idem_cli_filters");
    let path = dir.path().join("records.db");
    let agent = agent(Arc::new(
        idem::SqliteStore::open(&path).expect("open SQLite"),
    ));
    let store = format!("sqlite:{}", path.display());
    let at = ["--store", store.as_str()];
    let (north, south) = (RunContext::new("north"), RunContext::new("south"));
    let done = |call: ToolCall, run_ctx: RunContext| {
        let agent = agent.clone();
        async move {
            agent
                .dispatch(&call, &run_ctx)
                .await
                .expect("a ticket tagged");
            key_of(&agent, &call, &run_ctx)
        }
    };
    let unknown = |call: ToolCall, run_ctx: RunContext| {
        let agent = agent.clone();
        async move {
            left_unknown(&agent, &call, &run_ctx).await;
            key_of(&agent, &call, &run_ctx)
        }
    };

    let old_text = unknown(text("call-t1", "+351 910 000 051"), north.clone()).await;
    let old_ticket = done(ticket("call-k1", "T-1"), north.clone()).await;
    let south_text = unknown(text("call-t2", "+351 910 000 052"), south.clone()).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let new_text = unknown(text("call-t3", "+351 910 000 053"), north.clone()).await;
    let new_ticket = done(ticket("call-k2", "T-2"), north.clone()).await;
    let keys = |keys: &[&String]| keys.iter().map(|k| k.to_string()).collect::<BTreeSet<_>>();
    let everything = keys(&[&old_text, &old_ticket, &south_text, &new_text, &new_ticket]);
    let texts = keys(&[&old_text, &south_text, &new_text]);

    for (args, expected) in [
        (&[][..], texts.clone()),
        (&["--state", "unknown"], texts.clone()),
        (&["--state", "in-progress"], keys(&[])),
        (&["--state", "completed"], keys(&[&old_ticket, &new_ticket])),
        (&["--state", "all"], everything.clone()),
        (
            &["--state", "all", "--tool", "text_customer"],
            texts.clone(),
        ),
        (
            &["--state", "all", "--tool", "tag_ticket"],
            keys(&[&old_ticket, &new_ticket]),
        ),
        (&["--state", "all", "--tool", "no_such_tool"], keys(&[])),
        (
            &["--state", "all", "--tenant", "north"],
            keys(&[&old_text, &old_ticket, &new_text, &new_ticket]),
        ),
        (&["--tenant", "south"], keys(&[&south_text])),
        (
            &["--state", "all", "--older-than", "1s"],
            keys(&[&old_text, &old_ticket, &south_text]),
        ),
        (
            &[
                "--older-than",
                "1s",
                "--tenant",
                "north",
                "--tool",
                "text_customer",
            ],
            keys(&[&old_text]),
        ),
    ] {
        assert_eq!(listed(&at, args), expected, "idem records list {args:?}");
    }

    // `--limit` shows that many, and says there may be more.
    let one = listed(&at, &["--state", "all", "--limit", "1"]);
    assert_eq!(one.len(), 1, "{one:?}");
    assert!(everything.is_superset(&one), "{one:?}");
    let table = run(&mut on(
        &at,
        &["records", "list", "--state", "all", "--limit", "1"],
    ))
    .exited(0)
    .says(&["1 record(s)", "--limit N shows more"]);
    assert_eq!(
        table.stdout.lines().count(),
        2,
        "a header and one row: {table:#?}"
    );
    run(&mut on(&at, &["records", "list", "--state", "all"]))
        .exited(0)
        .says(&["5 record(s)"])
        .hides(&["--limit N shows more"]);
    for (args, why) in [
        (&["--limit", "0"][..], "--limit"),
        (&["--older-than", "1w"], "not a unit"),
        (&["--state", "lost"], "--state"),
    ] {
        run(on(&at, &["records", "list"]).args(args))
            .exited(2)
            .says(&[why]);
    }
    assert_eq!(
        listed(&at, &["--state", "all"]),
        everything,
        "listing changed nothing"
    );
}
