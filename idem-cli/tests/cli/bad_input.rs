//! Bad input: a clear message, and nothing changed.

use super::*;

#[test]
fn a_malformed_store_is_refused_naming_the_forms_a_store_takes() {
    for (spec, why) in [
        ("redis:/x", "a `redis` URL begins `redis://`"),
        ("postgres:x", "a `postgres` URL begins `postgres://`"),
        ("ftp://x", "unknown store scheme `ftp://`"),
    ] {
        run(&mut idem(&["records", "list", "--store", spec]))
            .exited(2)
            .says(&[
                &format!("`--store {spec}`"),
                why,
                "sqlite:PATH",
                "redis://HOST:PORT",
            ]);
    }
    run(&mut idem(&["records", "list", "--store", "sqlite:"]))
        .exited(2)
        .says(&["`sqlite:` needs a file's path after it"]);
    run(&mut idem(&["approvals", "list"]))
        .exited(2)
        .says(&["no store", "--store", "IDEM_STORE"]);
    // The proxy's memory store is its own: an operator command cannot read it.
    run(&mut idem(&["records", "list", "--store", "memory"]))
        .exited(2)
        .says(&["`--store memory`", "cannot read another's"]);
    run(&mut idem(&[
        "records",
        "list",
        "--store",
        "redis-cluster://a:7000,,b:7000",
    ]))
    .exited(2)
    .says(&[
        "names one node or more",
        "redis-cluster://HOST:PORT,HOST:PORT",
    ]);
}

#[test]
fn a_sqlite_file_that_does_not_exist_is_not_created() {
    let dir = TempDir::new("idem_cli_missing");
    let path = dir.path().join("typo.db");
    let spec = format!("sqlite:{}", path.display());
    for args in [
        &["records", "list"][..],
        &["approvals", "list"],
        &["stats"],
        &["records", "purge"],
    ] {
        run(idem(args).args(["--store", &spec]))
            .exited(3)
            .says(&["no SQLite store at", &path.display().to_string()]);
        assert!(!path.exists(), "`idem {args:?}` created {}", path.display());
    }
}

#[tokio::test]
async fn an_unknown_key_is_not_found_and_a_known_one_is_untouched() {
    let dir = TempDir::new("idem_cli_unknown_key");
    let (store, agent, run_ctx, pending_key, _) = sqlite_with_work(&dir).await;
    let on_store = |args: &[&str]| {
        let mut cmd = idem(args);
        cmd.args(["--store", &store, "--as", "dana@desk", "--yes"])
            .env("IDEM_APPROVAL_KEY", desk_key_text());
        cmd
    };
    for args in [
        &["records", "resolve", "nope", "--value", "1"][..],
        &["records", "release", "nope"],
    ] {
        run(&mut on_store(args))
            .exited(4)
            .says(&["no record under key nope", "idem records list"]);
    }
    for args in [
        &["approvals", "approve", "nope"][..],
        &["approvals", "deny", "nope", "--reason", "no"],
    ] {
        run(&mut on_store(args))
            .exited(4)
            .says(&["no approval was requested under key nope"]);
    }
    run(idem(&["records", "show", "nope"]).args(["--store", &store]))
        .exited(4)
        .says(&["no record under key nope"]);
    run(idem(&["approvals", "show", "nope"]).args(["--store", &store]))
        .exited(4)
        .says(&["no approval was requested under key nope"]);

    still_pending(&["--store", &store], &pending_key);
    left_for_approval(&agent, &close("call-p", "cus_p"), &run_ctx).await;
}

#[tokio::test]
async fn a_decision_needs_an_identity_and_a_signing_key() {
    let dir = TempDir::new("idem_cli_identity");
    let (store, agent, run_ctx, pending_key, _) = sqlite_with_work(&dir).await;
    let approve = |extra: &[&str]| {
        let mut cmd = idem(&["approvals", "approve", &pending_key, "--yes"]);
        cmd.args(["--store", &store]).args(extra);
        cmd
    };

    run(approve(&[]).env("IDEM_APPROVAL_KEY", desk_key_text()))
        .exited(2)
        .says(&["who decides?", "--as", "IDEM_APPROVER"]);
    run(&mut idem(&[
        "approvals",
        "deny",
        &pending_key,
        "--reason",
        "no",
        "--yes",
        "--store",
        &store,
    ]))
    .exited(2)
    .says(&["who decides?"]);
    run(&mut approve(&["--as", "dana@desk"])).exited(2).says(&[
        "no key to sign approvals with",
        "IDEM_APPROVAL_KEY",
        "--approval-key-file",
    ]);
    // The identity from the environment is as good as `--as`; the key is still missing.
    run(approve(&[]).env("IDEM_APPROVER", "dana@desk"))
        .exited(2)
        .says(&["no key to sign approvals with"]);
    run(approve(&["--as", "dana@desk"]).env("IDEM_APPROVAL_KEY", "no-colon-here"))
        .exited(2)
        .says(&["IDEM_APPROVAL_KEY", "not `id:hex-secret`"]);
    let missing = dir.path().join("no-such-key");
    run(&mut approve(&[
        "--as",
        "dana@desk",
        "--approval-key-file",
        &missing.display().to_string(),
    ]))
    .exited(2)
    .says(&["cannot read the signing key file"]);

    // Nothing was decided: the agent's retry is still refused, waiting for a person.
    still_pending(&["--store", &store], &pending_key);
    left_for_approval(&agent, &close("call-p", "cus_p"), &run_ctx).await;
    assert_eq!(CLOSED.count(&format!("{}/cus_p", run_ctx.tenant)), 0);
}

#[tokio::test]
async fn a_resolve_with_invalid_json_changes_nothing() {
    let dir = TempDir::new("idem_cli_bad_json");
    let (store, agent, run_ctx, _, unknown_key) = sqlite_with_work(&dir).await;
    run(&mut idem(&[
        "records",
        "resolve",
        &unknown_key,
        "--value",
        r#"{"delivered": tru"#,
        "--as",
        "lee@desk",
        "--yes",
        "--store",
        &store,
    ]))
    .exited(2)
    .says(&["--value is not JSON", "quote a string"]);

    let record = record_at(&["--store", &store], &unknown_key);
    assert_eq!(record["state"], "unknown", "{record:#}");
    left_unknown(&agent, &text("call-u", "+351 910 000 044"), &run_ctx).await;
}

#[cfg(feature = "redis")]
#[test]
fn an_unreachable_redis_is_a_store_failure_naming_it() {
    let url = format!("redis://127.0.0.1:{}", closed_port());
    run(&mut idem(&["records", "list", "--store", &url]))
        .exited(3)
        .says(&["Redis", &url]);
}

#[cfg(feature = "redis")]
#[test]
fn an_empty_redis_prefix_says_it_may_be_mistyped() {
    use support::redis_keys::redis_prefixes;
    use support::services::{REDIS_URL, service_url};
    let Some(url) = service_url(REDIS_URL, "an_empty_redis_prefix_says_it_may_be_mistyped") else {
        return;
    };
    let prefixes = redis_prefixes(&url);
    let prefix = prefixes.fresh("idem_cli_typo");
    for command in [&["records", "list"][..], &["approvals", "list"], &["stats"]] {
        let mut args = command.to_vec();
        args.extend(["--store", &url, "--prefix", &prefix]);
        run(&mut idem(&args)).exited(0).says(&[
            &format!("nothing under the key prefix `{prefix}`"),
            "--prefix",
        ]);
    }
}

#[cfg(feature = "postgres")]
#[test]
fn an_unreachable_postgres_is_a_store_failure_naming_it() {
    let url = format!("postgres://idem@127.0.0.1:{}/idem", closed_port());
    run(&mut idem(&["approvals", "list", "--store", &url]))
        .exited(3)
        .says(&["PostgreSQL", &url]);
}
