//! The decision log as an operator and an auditor use it: every decision through the
//! command line appended to the store's hash chain, `idem audit verify` naming the first
//! link someone with write access to the store changed, and a signed export that catches a
//! chain rewritten whole.

use super::*;

/// Entry `seq` of the decision log, as the store keeps it.
async fn logged(store: &dyn Store, seq: u64) -> Value {
    let text = store
        .budget_text(&format!("idem:decisions:{seq}"))
        .await
        .expect("read the log")
        .unwrap_or_else(|| panic!("no entry {seq}"));
    serde_json::from_str(&text).expect("an entry is JSON")
}

/// Put `entry` in place of entry `seq`, as someone who can write to the store would.
async fn overwrite(store: &dyn Store, seq: u64, entry: &Value) {
    let scope = format!("idem:decisions:{seq}");
    let old = store.budget_text(&scope).await.expect("read the log");
    let put = store
        .swap_budget(
            &scope,
            old.as_deref(),
            &entry.to_string(),
            Duration::from_secs(3600),
        )
        .await
        .expect("write the log");
    assert!(put, "the entry changed under the test");
}

/// `idem audit` with `args` on the store `at` names, holding the desk's key.
fn auditing(at: &[&str], args: &[&str]) -> Command {
    let mut cmd = on(at, args);
    cmd.env("IDEM_APPROVAL_KEY", desk_key_text());
    cmd
}

/// The store's decision log exported, signed, to a file in `dir`: its path.
fn exported(dir: &TempDir, at: &[&str], decisions: usize) -> String {
    let export = dir.path().join("decisions.jsonl");
    let path = export.to_str().expect("a UTF-8 path").to_owned();
    run(&mut auditing(at, &["audit", "export", "--output", &path]))
        .exited(0)
        .says(&[
            &format!("exported {decisions} decisions"),
            "signed with key `desk-tests`",
        ]);
    path
}

/// The pending call under `key` denied by dana@desk through the command line.
fn denied_by_dana(at: &[&str], key: &str, reason: &str) {
    run(&mut deciding(
        at,
        &["approvals", "deny", key, "--reason", reason, "--yes"],
    ))
    .exited(0);
}

/// The Unknown record under `key` released by lee@desk through the command line.
fn released_by_lee(at: &[&str], key: &str) {
    run(&mut on(
        at,
        &["records", "release", key, "--as", "lee@desk", "--yes"],
    ))
    .exited(0);
}

/// `entry` with its hash made again, as a forger who knows the format would.
fn rehashed(mut entry: Value) -> Value {
    entry.as_object_mut().expect("an object").remove("hash");
    let hash = idem::key::Fingerprint::of(&entry).to_hex();
    entry["hash"] = json!(hash);
    entry
}

#[tokio::test]
async fn every_decision_is_logged_and_a_changed_one_is_named() {
    let dir = TempDir::new("idem_cli_audit");
    let (store, _agent, run_ctx, pending_key, unknown_key) = sqlite_with_work(&dir).await;
    let at = ["--store", store.as_str()];
    let shown = approval_at(&at, &pending_key)["fingerprint"].clone();

    run(&mut deciding(
        &at,
        &["approvals", "approve", &pending_key, "--yes"],
    ))
    .exited(0);
    released_by_lee(&at, &unknown_key);

    let listed = run(&mut on(&at, &["audit", "list", "--json"]))
        .exited(0)
        .json();
    let listed = entries(&listed);
    assert_eq!(listed.len(), 2, "{listed:#?}");
    let (approved, released) = (&listed[0]["decision"], &listed[1]["decision"]);
    assert_eq!(
        (
            &approved["by"],
            &approved["action"],
            &approved["door"],
            &approved["tool"],
            &approved["subject"],
            &approved["tenant"],
        ),
        (
            &json!("dana@desk"),
            &json!("approve"),
            &json!("cli"),
            &json!("close_account"),
            &json!(pending_key),
            &json!(run_ctx.tenant),
        )
    );
    assert_eq!(
        approved["shown"], shown,
        "the fingerprint the approver was shown"
    );
    assert_eq!(
        (&released["by"], &released["action"], &released["subject"]),
        (&json!("lee@desk"), &json!("release"), &json!(unknown_key))
    );
    assert_eq!(listed[1]["prev"], listed[0]["hash"]);
    run(&mut on(&at, &["audit", "verify"]))
        .exited(0)
        .prints(&["the decision log holds: 2 entries"]);

    // Someone with the store's password makes the approval someone else's.
    let path = dir.path().join("records.db");
    let direct = idem::SqliteStore::open(&path).expect("open SQLite");
    let mut first = logged(&direct, 1).await;
    first["decision"]["by"] = json!("mallory@desk");
    overwrite(&direct, 1, &first).await;
    run(&mut on(&at, &["audit", "verify"]))
        .exited(5)
        .says(&["decision log entry 1 was changed after it was appended"]);

    // Hashed again to hide it: the next link gives it away.
    overwrite(&direct, 1, &rehashed(first)).await;
    run(&mut on(&at, &["audit", "verify"]))
        .exited(5)
        .says(&["decision log entry 2 does not follow entry 1"]);
}

#[tokio::test]
async fn a_signed_export_catches_a_chain_rewritten_whole() {
    let dir = TempDir::new("idem_cli_audit_export");
    let (store, _agent, _run_ctx, pending_key, _unknown_key) = sqlite_with_work(&dir).await;
    let at = ["--store", store.as_str()];
    denied_by_dana(&at, &pending_key, "not without the customer's call");

    let export = exported(&dir, &at, 1);
    let export_arg = export.as_str();
    run(&mut auditing(
        &at,
        &["audit", "export", "--output", export_arg],
    ))
    .exited(2)
    .says(&["never written over"]);
    run(&mut auditing(
        &at,
        &["audit", "verify", "--against", export_arg],
    ))
    .exited(0);

    // The whole chain rewritten, every hash made again: it holds on its own...
    let path = dir.path().join("records.db");
    let direct = idem::SqliteStore::open(&path).expect("open SQLite");
    let mut first = logged(&direct, 1).await;
    first["decision"]["detail"] = json!("approved by phone");
    overwrite(&direct, 1, &rehashed(first)).await;
    run(&mut on(&at, &["audit", "verify"])).exited(0);
    // ...and not against what the auditor kept.
    run(&mut auditing(
        &at,
        &["audit", "verify", "--against", export_arg],
    ))
    .exited(5)
    .says(&["no longer holds entry 1", "the chain was rewritten since"]);

    // An export changed after it was signed is refused, and so is one under another key.
    let text = std::fs::read_to_string(&export).expect("read the export");
    let forged = dir.path().join("forged.jsonl");
    std::fs::write(&forged, text.replace("not without", "yes, with")).expect("write");
    run(&mut auditing(
        &at,
        &[
            "audit",
            "verify",
            "--against",
            forged.to_str().expect("UTF-8"),
        ],
    ))
    .exited(5)
    .says(&["entry 1 was changed after the export was signed"]);
    let other_key = format!("other:{}", "ab".repeat(32));
    run(on(&at, &["audit", "verify", "--against", export_arg]).env("IDEM_APPROVAL_KEY", other_key))
        .exited(5)
        .says(&["signed with key `desk-tests`, not `other`"]);
}

#[tokio::test]
async fn a_signed_export_catches_an_entry_removed_below_its_last() {
    let dir = TempDir::new("idem_cli_audit_removed");
    let (store, _agent, _run_ctx, pending_key, unknown_key) = sqlite_with_work(&dir).await;
    let at = ["--store", store.as_str()];
    denied_by_dana(&at, &pending_key, "not today");
    released_by_lee(&at, &unknown_key);
    let export = exported(&dir, &at, 2);
    let export_arg = export.as_str();

    // The denial removed (made to expire at once), and the head hint moved back before it:
    // the store's chain now reads as empty, and its second entry is as exported.
    let path = dir.path().join("records.db");
    let direct = idem::SqliteStore::open(&path).expect("open SQLite");
    let first = direct
        .budget_text("idem:decisions:1")
        .await
        .expect("read")
        .expect("entry 1");
    assert!(
        direct
            .swap_budget(
                "idem:decisions:1",
                Some(&first),
                &first,
                Duration::from_millis(1)
            )
            .await
            .expect("swap")
    );
    let head = direct
        .budget_text("idem:decisions:head")
        .await
        .expect("read")
        .expect("a head");
    assert!(
        direct
            .swap_budget(
                "idem:decisions:head",
                Some(&head),
                "0",
                Duration::from_secs(3600)
            )
            .await
            .expect("swap")
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    run(&mut on(&at, &["audit", "verify"]))
        .exited(0)
        .prints(&["holds: 0 entries"]);
    run(&mut auditing(
        &at,
        &["audit", "verify", "--against", export_arg],
    ))
    .exited(5)
    .says(&["no longer reaches entry 2", "removed or rewritten"]);
}
