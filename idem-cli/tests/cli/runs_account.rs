//! `idem runs show` says each call's class and attempts, and a read as answered, counted
//! apart from the effects: as a table and as JSON.

use idem::tool::{ToolDef, ToolPolicy};

use super::*;

/// A read, an idempotent write whose first attempt times out, a non-idempotent write.
fn desk() -> Registry {
    let read = ToolDef::builder("read_order", ToolClass::Read)
        .description("Read an order.")
        .input_schema(json!({"type": "object"}))
        .handler(|_: ToolContext, _: Value| async move { Ok::<_, ToolError>(json!("shipped")) })
        .build()
        .expect("read_order");
    let hold = ToolDef::builder("hold_order", ToolClass::IdempotentWrite)
        .description("Put an order on hold.")
        .input_schema(json!({"type": "object"}))
        .policy(ToolPolicy {
            backoff: Duration::from_millis(1),
            ..Default::default()
        })
        .handler(|ctx: ToolContext, _: Value| async move {
            match ctx.attempt() {
                1 => Err(ToolError::ambiguous("the warehouse timed out")),
                _ => Ok(json!("held")),
            }
        })
        .build()
        .expect("hold_order");
    let mail = ToolDef::builder("mail_customer", ToolClass::NonIdempotentWrite)
        .description("Mail the customer.")
        .input_schema(json!({"type": "object"}))
        .handler(|_: ToolContext, _: Value| async move { Ok::<_, ToolError>(json!("mailed")) })
        .build()
        .expect("mail_customer");
    Registry::builder()
        .add(read)
        .add(hold)
        .add(mail)
        .build()
        .expect("registry")
}

#[tokio::test]
async fn runs_show_says_each_calls_class_and_attempts_and_a_read_as_answered() {
    let dir = TempDir::new("idem_cli_runs_account");
    let path = dir.path().join("records.db");
    let store = idem::SqliteStore::open(&path).expect("open SQLite");
    let agent = Dispatcher::new(desk(), Arc::new(store))
        .expect("dispatcher")
        .with_run_accounts(Duration::from_secs(3600));
    let run_ctx = RunContext::new("north").with_run("run-desk", 1);
    for (step, (tool, id)) in [
        ("read_order", "call-r1"),
        ("hold_order", "call-w1"),
        ("mail_customer", "call-w2"),
    ]
    .into_iter()
    .enumerate()
    {
        let call = ToolCall::new(tool, json!({"order": "o-5"})).with_call_id(id);
        agent
            .dispatch(&call, &run_ctx.clone().at_step(step as u64))
            .await
            .unwrap_or_else(|e| panic!("{tool}: {e}"));
    }
    let store = format!("sqlite:{}", path.display());
    let at = ["--store", store.as_str()];

    let json = run(&mut on(
        &at,
        &["runs", "show", "run-desk", "--tenant", "north", "--json"],
    ))
    .exited(0)
    .json();
    let said: Vec<(&str, &str, u64)> = entries(&json["calls"])
        .iter()
        .map(|c| {
            (
                c["outcome"].as_str().unwrap_or("?"),
                c["class"].as_str().unwrap_or("?"),
                c["attempts"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect();
    assert_eq!(
        said,
        [
            ("answered", "read", 1),
            ("applied", "idempotent_write", 2),
            ("applied", "non_idempotent_write", 1),
        ],
        "{json:#}"
    );

    let shown = run(&mut on(
        &at,
        &["runs", "show", "run-desk", "--tenant", "north"],
    ))
    .exited(0)
    .prints(&["CLASS", "ATTEMPTS", "in all: 1 answered, 2 applied"]);
    let row = |id: &str| -> Vec<String> {
        let line = shown
            .stdout
            .lines()
            .find(|l| l.contains(id))
            .unwrap_or_else(|| panic!("no row for {id}: {shown:#?}"));
        line.split_whitespace().map(str::to_owned).collect()
    };
    for (id, class, attempts, outcome) in [
        ("call-r1", "read", "1", "answered"),
        ("call-w1", "idempotent_write", "2", "applied"),
        ("call-w2", "non_idempotent_write", "1", "applied"),
    ] {
        let cells = row(id);
        let at = cells.iter().position(|c| c == id).expect("the call's cell");
        assert_eq!(
            cells[at + 1..at + 4],
            [class, attempts, outcome],
            "{id}: {shown:#?}"
        );
    }
}
