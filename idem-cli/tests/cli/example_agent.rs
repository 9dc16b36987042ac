//! SQLite, with the example agent.

use super::*;

/// The example agent's approval key, as an operator hands it to `idem`.
const EXAMPLE_KEY: &str =
    "desk-2026-12:6578616d706c652d617070726f76616c2d6b65792d6e6f742d73656372657421";

/// The example agent built next to this test binary (`target/<profile>/examples/agent`).
fn example_agent() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lives in target/<profile>/deps");
    let agent = profile
        .join("examples")
        .join(format!("agent{}", std::env::consts::EXE_SUFFIX));
    assert!(
        agent.is_file(),
        "the example agent is not built at {}: run `cargo build --example agent` (with this test's --features) first",
        agent.display()
    );
    agent
}

/// Run the example agent on the SQLite file `db` with `args`; its standard output.
fn run_agent(agent: &Path, db: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(agent)
        .arg("--db")
        .arg(db)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run the example agent");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the example agent failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The example's line for a provider: how many requests it received and effects it applied.
fn provider_line(name: &str, requests: usize, effects: usize) -> String {
    format!("  {name:<18} {requests} requests -> {effects} effects")
}

/// The rows of the example's table for `call` (`what: tool`), in the order they ran.
fn rows<'a>(stdout: &'a str, call: &str) -> Vec<&'a str> {
    stdout.lines().filter(|l| l.starts_with(call)).collect()
}

#[test]
fn an_operator_settles_what_the_example_agent_left_and_its_retry_obeys() {
    let agent = example_agent();
    let dir = TempDir::new("idem_cli_example");
    let db = dir.path().join("agent.db");
    let store = format!("sqlite:{}", db.display());
    let on_store = |args: &[&str]| {
        let mut cmd = idem(args);
        cmd.args(["--store", &store]);
        cmd
    };
    const DELETE_ROW: &str = "irreversible, left to an operator: delete_account";
    const SMS_ROW: &str = "carrier times out, left to an operator: send_sms";
    const REASON: &str = "the customer called back: keep the account";

    let first = run_agent(&agent, &db, &["--fresh", "--leave-to-operator"]);
    assert!(
        first.contains("waiting for a person: delete_account"),
        "{first}"
    );

    // The operator finds the unknown outcome the agent left...
    let open = run(&mut on_store(&["records", "list", "--json"]))
        .exited(0)
        .json();
    let open = entries(&open);
    assert_eq!(
        open.len(),
        1,
        "one open record, the text message: {open:#?}"
    );
    let sms = &open[0];
    assert_eq!(
        (&sms["tool"], &sms["tenant"], &sms["state"]),
        (&json!("send_sms"), &json!("acme-corp"), &json!("unknown"))
    );
    assert!(
        sms["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("carrier timed out")),
        "{sms:#}"
    );
    let sms_key = sms["key"].as_str().expect("a key").to_owned();

    // ...and the two deletions waiting for a person.
    let pending = run(&mut on_store(&["approvals", "list", "--json"]))
        .exited(0)
        .json();
    let pending = entries(&pending);
    assert_eq!(pending.len(), 2, "{pending:#?}");
    let key_for = |customer: &str| {
        let entry = pending
            .iter()
            .find(|e| e["arguments"] == json!({"customer_id": customer}))
            .unwrap_or_else(|| panic!("no pending deletion of {customer}: {pending:#?}"));
        assert_eq!(
            (&entry["tool"], &entry["tenant"], &entry["status"]),
            (
                &json!("delete_account"),
                &json!("acme-corp"),
                &json!("pending")
            )
        );
        entry["key"].as_str().expect("a key").to_owned()
    };
    let (keep, gone) = (key_for("cus_77"), key_for("cus_99"));

    // A prompt nothing answers changes nothing.
    run(
        on_store(&["approvals", "approve", &gone, "--as", "dana@desk"])
            .env("IDEM_APPROVAL_KEY", EXAMPLE_KEY),
    )
    .exited(6)
    .says(&["Proceed? [y/N]", "nothing changed", "--yes"]);
    still_pending(&["--store", &store], &gone);

    // The operator checked the carrier's log: the message went out. Answered at the prompt.
    let resolved = run(on_store(&[
        "records",
        "resolve",
        &sms_key,
        "--value",
        r#"{"sms": 1, "delivered": true}"#,
        "--as",
        "lee@desk",
    ])
    .write_stdin("y\n"))
    .exited(0)
    .says(&["Resolve", "send_sms", "Proceed? [y/N]"]);
    assert!(
        resolved
            .stdout
            .contains(&format!("resolved {sms_key} by lee@desk")),
        "{resolved:#?}"
    );
    let record = run(&mut on_store(&["records", "show", &sms_key, "--json"]))
        .exited(0)
        .json();
    assert_eq!(record["state"], "completed", "{record:#}");
    assert_eq!(
        record["outcome"]["success"],
        json!({"sms": 1, "delivered": true})
    );

    // One deletion approved, the other denied with a reason.
    let approved = run(
        on_store(&["approvals", "approve", &gone, "--as", "dana@desk", "--yes"])
            .env("IDEM_APPROVAL_KEY", EXAMPLE_KEY),
    )
    .exited(0);
    assert!(
        approved.stdout.contains(&format!("approved {gone}")),
        "{approved:#?}"
    );
    run(&mut on_store(&[
        "approvals",
        "deny",
        &keep,
        "--reason",
        REASON,
        "--as",
        "lee@desk",
        "--yes",
    ]))
    .exited(0);
    // A decision is made once.
    run(
        on_store(&["approvals", "approve", &gone, "--as", "dana@desk", "--yes"])
            .env("IDEM_APPROVAL_KEY", EXAMPLE_KEY),
    )
    .exited(5)
    .says(&["already decided", "dana@desk"]);
    let waiting = run(&mut on_store(&["approvals", "list", "--json"]))
        .exited(0)
        .json();
    assert_eq!(waiting, json!([]), "nothing waits for a person any more");

    // The agent's retry: the approved deletion runs once, the denied one is refused with the
    // reason, the text message is replayed as resolved.
    let second = run_agent(&agent, &db, &["--leave-to-operator"]);
    assert!(
        second.contains(&provider_line("account deletions", 1, 1)),
        "{second}"
    );
    assert!(
        second.contains(&provider_line("text messages", 0, 0)),
        "{second}"
    );
    let deletions = rows(&second, DELETE_ROW);
    assert_eq!(deletions.len(), 2, "{second}");
    assert!(deletions[0].contains("executed (1 attempt)"), "{second}");
    assert!(deletions[0].contains("cus_99"), "{second}");
    assert!(
        deletions[1].contains("refused: approval_denied") && deletions[1].contains(REASON),
        "{second}"
    );
    let texted = rows(&second, SMS_ROW);
    assert_eq!(texted.len(), 1, "{second}");
    assert!(texted[0].contains("deduplicated (replayed"), "{second}");
    assert!(texted[0].contains("delivered"), "{second}");
    assert!(!second.contains("waiting for a person"), "{second}");
    assert!(second.contains("resolves them): 0"), "{second}");

    // Once more: the deletion is replayed, never run again; the denial stands.
    let third = run_agent(&agent, &db, &["--leave-to-operator"]);
    assert!(
        third.contains(&provider_line("account deletions", 0, 0)),
        "{third}"
    );
    let deletions = rows(&third, DELETE_ROW);
    assert_eq!(deletions.len(), 2, "{third}");
    assert!(
        deletions[0].contains("deduplicated (replayed") && deletions[0].contains("cus_99"),
        "{third}"
    );
    assert!(deletions[1].contains("refused: approval_denied"), "{third}");
}
