//! What `idem` shows a person: never a password, and no text that reads as other text.

use super::*;

/// A password no message may hold.
const PASSWORD: &str = "hunter2-s3cret";

#[cfg(any(feature = "redis", feature = "postgres"))]
#[test]
fn a_store_password_never_reaches_a_message() {
    let port = closed_port();
    let mut stores = Vec::new();
    #[cfg(feature = "postgres")]
    stores.push((
        format!("postgres://ops:{PASSWORD}@127.0.0.1:{port}/idem"),
        format!("PostgreSQL store at postgres://ops:***@127.0.0.1:{port}/idem"),
    ));
    #[cfg(feature = "redis")]
    stores.push((
        format!("redis://:{PASSWORD}@127.0.0.1:{port}/"),
        format!("Redis store at redis://:***@127.0.0.1:{port}/"),
    ));
    for (url, named) in &stores {
        for args in [&["records", "list"][..], &["stats"]] {
            run(&mut on(&["--store", url], args))
                .exited(3)
                .says(&[named])
                .hides(&[PASSWORD]);
            run(idem(args).env("IDEM_STORE", url))
                .exited(3)
                .says(&[named])
                .hides(&[PASSWORD]);
        }
    }
}

#[test]
fn help_names_the_environment_but_never_its_values() {
    let store = format!("postgres://ops:{PASSWORD}@db/idem");
    for args in [
        &["records", "list", "--help"][..],
        &["approvals", "approve", "--help"],
        &["stats", "--help"],
    ] {
        run(idem(args)
            .env("IDEM_STORE", &store)
            .env("IDEM_STORE_PREFIX", format!("prefix-{PASSWORD}"))
            .env("IDEM_APPROVER", format!("approver-{PASSWORD}")))
        .exited(0)
        .prints(&["IDEM_STORE", "IDEM_STORE_PREFIX"])
        .hides(&[PASSWORD]);
    }
}

#[tokio::test]
async fn text_that_could_read_as_other_text_is_shown_by_its_code() {
    let dir = TempDir::new("idem_cli_spoof");
    let path = dir.path().join("records.db");
    let agent = agent(Arc::new(
        idem::SqliteStore::open(&path).expect("open SQLite"),
    ));
    let store = format!("sqlite:{}", path.display());
    let at = ["--store", store.as_str()];
    let run_ctx = RunContext::new(unique("spoof"));
    // Shown as is, it reads `cus_keep_99`: the override reverses what follows it.
    let customer = "cus_\u{202e}99_peek";
    let call = close("call-spoof", customer);
    left_for_approval(&agent, &call, &run_ctx).await;
    let key = key_of(&agent, &call, &run_ctx);

    let escaped = "cus_\\u202e99_peek";
    run(&mut on(&at, &["approvals", "list"]))
        .exited(0)
        .prints(&[&key, escaped])
        .hides(&["\u{202e}"]);
    run(&mut on(&at, &["approvals", "show", &key]))
        .exited(0)
        .prints(&[escaped])
        .hides(&["\u{202e}"]);
    // Asked to decide, the person sees the code too; unanswered, nothing is decided.
    run(&mut deciding(&at, &["approvals", "approve", &key]))
        .exited(6)
        .says(&[escaped])
        .hides(&["\u{202e}"]);
    // Scripts get the arguments exactly as called.
    let listed = run(&mut on(&at, &["approvals", "list", "--json"]))
        .exited(0)
        .prints(&["\u{202e}"])
        .json();
    assert_eq!(entries(&listed).len(), 1, "{listed:#}");
    assert_eq!(listed[0]["arguments"], json!({"customer": customer}));
    assert_eq!(
        approval_at(&at, &key)["arguments"],
        json!({"customer": customer})
    );
    still_pending(&at, &key);
    left_for_approval(&agent, &call, &run_ctx).await;
    assert_eq!(CLOSED.count(&format!("{}/{customer}", run_ctx.tenant)), 0);
}
