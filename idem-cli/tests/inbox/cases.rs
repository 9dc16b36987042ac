//! A failed capture sent to a person (`escalate`), decided by that person in the inbox, and
//! the agent's retry then answered by that decision, on SQLite, PostgreSQL and Redis.
//!
//! The agent is a dispatcher over the store; the person is an HTTP client of `idem ui`, run
//! as a subprocess over the same store (its file, or its server's URL with the PostgreSQL
//! schema or Redis key prefix as `--prefix`). The card provider is a handler that declines
//! while a flag says so, and otherwise applies the capture once per downstream key.
//!
//! PostgreSQL needs `IDEM_POSTGRES_URL`, Redis `IDEM_REDIS_URL`; without them those tests say
//! why they are skipped, unless `IDEM_REQUIRE_SERVICES=1` makes that a failure.

use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use idem::Store;
use idem::dispatch::{CallOutcome, Case, CaseDesk};
use idem::prelude::*;
use idem::tool::{Escalate, ToolDef};
use serde_json::{Value, json};

use super::support::dispatcher::dispatcher;
use super::support::services::unique;
use super::support::tally::Tally;
use super::{Running, TempDir, answering, client, free_port, inbox_over, sign_in, tempdir};

/// Tenants whose card the provider declines for now.
static DECLINED: LazyLock<Mutex<BTreeSet<String>>> = LazyLock::new(Mutex::default);
/// Every run of the capture's body, by tenant: the downstream key it was handed.
static CAPTURE_RUNS: Tally = Tally::new();
/// The provider's ledger: the effects it applied, by downstream key, each key once.
static EFFECTS: Tally = Tally::new();

fn decline(tenant: &str, on: bool) {
    let mut declined = DECLINED.lock().unwrap_or_else(|e| e.into_inner());
    match on {
        true => declined.insert(tenant.to_owned()),
        false => declined.remove(tenant),
    };
}

fn declined(tenant: &str) -> bool {
    DECLINED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(tenant)
}

/// Apply `effect` under downstream `key` unless the provider applied that key already, as a
/// provider's own dedupe would.
fn apply(key: &str, effect: &str) {
    if EFFECTS.count(key) == 0 {
        EFFECTS.note(key, effect);
    }
}

/// The person deciding, as the inbox is started.
const OPS: &str = "ops@desk";
/// The inbox's sign-in token.
const TOKEN: &str = "ops-token-0123456789abcdef0123";

/// A reservation, and a capture sent to a person when it fails for good.
fn payments(store: Arc<dyn Store>) -> Dispatcher {
    let schema = json!({"type": "object", "properties": {"order": {"type": "string"}}});
    let reserve = ToolDef::builder("reserve", ToolClass::IdempotentWrite)
        .description("Reserve an amount on the customer's card.")
        .input_schema(schema.clone())
        .handler(|ctx: ToolContext, args: Value| async move {
            let order = args["order"].as_str().unwrap_or_default().to_owned();
            apply(ctx.downstream_key().as_str(), &format!("reserve {order}"));
            Ok::<_, ToolError>(json!({"hold": format!("hold-{order}")}))
        })
        .build()
        .expect("reserve");
    let capture = ToolDef::builder("capture", ToolClass::NonIdempotentWrite)
        .description("Capture the reserved amount.")
        .input_schema(schema)
        .handler(|ctx: ToolContext, args: Value| async move {
            let order = args["order"].as_str().unwrap_or_default().to_owned();
            let key = ctx.downstream_key().as_str().to_owned();
            CAPTURE_RUNS.note(ctx.tenant(), &key);
            if declined(ctx.tenant()) {
                return Err(ToolError::terminal("the card was declined"));
            }
            apply(&key, &format!("capture {order}"));
            Ok(json!({"captured": order}))
        })
        .escalate(Escalate::Failures)
        .build()
        .expect("capture");
    let registry = Registry::builder()
        .add(reserve)
        .add(capture)
        .build()
        .expect("registry");
    dispatcher(registry, store).with_run_accounts(Duration::from_secs(3600))
}

/// Where a scenario's store lives, for the agent and for `idem ui`. The fields drop in
/// order: the store before the scratch names that remove what it wrote on a server.
pub(crate) struct Place {
    store: Arc<dyn Store>,
    /// `--store` for `idem ui`.
    spec: String,
    /// `--prefix` for `idem ui` (the PostgreSQL schema, the Redis key prefix).
    prefix: Option<String>,
    _dir: Option<TempDir>,
    _scratch: Option<super::support::services::Scratch>,
}

fn sqlite() -> Place {
    let dir = tempdir();
    let db = dir.join("cases.db");
    let store = idem::SqliteStore::open(&db).expect("open SQLite");
    Place {
        store: Arc::new(store),
        spec: format!("sqlite:{}", db.display()),
        prefix: None,
        _dir: Some(dir),
        _scratch: None,
    }
}

#[cfg(feature = "postgres")]
async fn postgres(test: &str) -> Option<Place> {
    use super::support::services::{POSTGRES_URL, service_url};
    let url = service_url(POSTGRES_URL, test)?;
    let schemas = super::support::postgres_schemas::postgres_schemas(&url);
    let schema = schemas.fresh("inbox_cases");
    let store = idem::store::postgres::PostgresStore::connect(&url, &schema)
        .await
        .expect("connect to PostgreSQL");
    Some(Place {
        store: Arc::new(store),
        spec: url,
        prefix: Some(schema),
        _dir: None,
        _scratch: Some(schemas),
    })
}

#[cfg(feature = "redis")]
async fn redis(test: &str) -> Option<Place> {
    use super::support::services::{REDIS_URL, service_url};
    let url = service_url(REDIS_URL, test)?;
    let prefixes = super::support::redis_keys::redis_prefixes(&url);
    let prefix = prefixes.fresh("inbox-cases");
    let store = idem::store::redis::RedisStore::connect(&url, &prefix)
        .await
        .expect("connect to Redis");
    Some(Place {
        store: Arc::new(store),
        spec: url,
        prefix: Some(prefix),
        _dir: None,
        _scratch: Some(prefixes),
    })
}

/// The inbox over `place`, signed in as [`OPS`]: its address, the session cookie and the
/// anti-forgery token.
async fn open_inbox(place: &Place) -> (Running, String, String, String) {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut cmd = inbox_over(
        &place.spec,
        place.prefix.as_deref(),
        port,
        &[("IDEM_UI_TOKEN", TOKEN)],
    );
    cmd.args(["--as", OPS]);
    let server = Running(cmd.spawn().expect("start idem ui"));
    answering(&base).await;
    let (cookie, csrf) = sign_in(&base, TOKEN).await;
    (server, base, cookie, csrf)
}

async fn page(base: &str, cookie: &str) -> String {
    let shown = client()
        .get(format!("{base}/"))
        .header(reqwest::header::COOKIE, cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(shown.status(), 200);
    shown.text().await.unwrap()
}

/// The row of the case under `key` in the page's table of cases, if the page shows one.
fn case_row(page: &str, key: &str) -> Option<String> {
    let cases = page
        .split("<table id=cases>")
        .nth(1)?
        .split("</table>")
        .next()?;
    let row = cases
        .split(&format!("<tr data-key=\"{key}\">"))
        .nth(1)?
        .split("</tr>")
        .next()?;
    Some(row.to_owned())
}

/// The fence a row's forms carry.
fn fence_of(row: &str) -> String {
    row.split("name=fence value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the row's fence")
        .to_owned()
}

/// Post a decision on the case under `key`, at `fence`, with `fields` added.
async fn post_case(
    base: &str,
    cookie: &str,
    csrf: &str,
    key: &str,
    fence: &str,
    fields: &[(&str, &str)],
) -> (u16, String) {
    let mut form = vec![("csrf", csrf), ("key", key), ("fence", fence)];
    form.extend_from_slice(fields);
    let answered = client()
        .post(format!("{base}/case"))
        .header(reqwest::header::COOKIE, cookie)
        .form(&form)
        .send()
        .await
        .unwrap();
    let status = answered.status().as_u16();
    (status, answered.text().await.unwrap())
}

/// Reserve, then capture with the card declined, in run `run-1`: the capture goes to a
/// person; its case as the desk lists it.
async fn reserve_then_capture_declined(
    d: &Dispatcher,
    store: &dyn Store,
    tenant: &str,
) -> (RunContext, ToolCall, Case) {
    let run = RunContext::new(tenant).with_run("run-1", 1);
    let reserve = ToolCall::new("reserve", json!({"order": "o1"})).with_call_id("call_reserve");
    d.dispatch(&reserve, &run).await.expect("reserved");
    decline(tenant, true);
    let run = run.at_step(2);
    let capture = ToolCall::new("capture", json!({"order": "o1"})).with_call_id("call_capture");
    let sent = d.dispatch(&capture, &run).await.unwrap_err();
    assert_eq!(sent.code(), "escalated", "{sent}");
    assert_eq!(CAPTURE_RUNS.count(tenant), 1);
    let mut cases = CaseDesk::over(store)
        .pending(Some(tenant), 10)
        .await
        .unwrap();
    assert_eq!(cases.len(), 1, "{cases:?}");
    let case = cases.remove(0);
    assert_eq!(case.tool, "capture");
    (run, capture, case)
}

/// The test: a failed capture escalated, decided by a person in the inbox, and the
/// agent's retry then answered by that decision.
async fn a_failed_capture_is_run_again_at_the_word_of_a_person_in_the_inbox(place: &Place) {
    let tenant = unique("inbox_case_retry");
    let d = payments(place.store.clone());
    let (run, capture, case) = reserve_then_capture_declined(&d, &*place.store, &tenant).await;
    let key = case.record.as_str().to_owned();

    // The person's inbox shows the case: its error, and what its run applied before it.
    let (_server, base, cookie, csrf) = open_inbox(place).await;
    let shown = page(&base, &cookie).await;
    assert!(shown.contains("you are <b>ops@desk</b>"), "{shown}");
    let row = case_row(&shown, &key).unwrap_or_else(|| panic!("no row for {key}: {shown}"));
    assert!(row.contains("the card was declined"), "{row}");
    assert!(
        row.contains("reserve"),
        "what the run applied before it: {row}"
    );
    assert!(row.contains("run-1"), "{row}");
    let fence = fence_of(&row);
    assert_eq!(fence, case.fence.to_string());

    // Before anyone decides, the agent's retry is answered from the case: nothing runs.
    decline(&tenant, false);
    let early = d.dispatch(&capture, &run).await.unwrap_err();
    assert_eq!(early.code(), "escalated", "{early}");
    assert_eq!(
        CAPTURE_RUNS.count(&tenant),
        1,
        "nothing runs until a person decides"
    );

    // The person has it run again; the same decision posted again changes nothing.
    let (status, body) = post_case(
        &base,
        &cookie,
        &csrf,
        &key,
        &fence,
        &[("decision", "retry")],
    )
    .await;
    assert_eq!(status, 303, "{body}");
    let (status, body) = post_case(
        &base,
        &cookie,
        &csrf,
        &key,
        &fence,
        &[("decision", "retry")],
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("decided or changed"), "{body}");
    assert!(
        CaseDesk::over(&*place.store)
            .pending(Some(&tenant), 10)
            .await
            .unwrap()
            .is_empty()
    );
    let shown = page(&base, &cookie).await;
    assert!(case_row(&shown, &key).is_none(), "{shown}");
    assert_eq!(
        CAPTURE_RUNS.count(&tenant),
        1,
        "a decision runs nothing itself"
    );

    // The agent's retry runs the capture once, under the key it was handed the first time.
    let done = d.dispatch(&capture, &run).await.unwrap();
    assert!(!done.deduplicated);
    assert_eq!(done.output, json!({"captured": "o1"}));
    let replayed = d.dispatch(&capture, &run).await.unwrap();
    assert!(replayed.deduplicated);
    assert_eq!(replayed.output, json!({"captured": "o1"}));
    let runs = CAPTURE_RUNS.entries(&tenant);
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0], runs[1], "the same downstream key");
    assert_eq!(EFFECTS.entries(&runs[0]), ["capture o1"]);

    // The run's account: applied, decided by the person who signed in, to run again.
    let account = d.run_account(&tenant, "run-1").await.unwrap();
    let tools: Vec<&str> = account.calls.iter().map(|c| c.tool.as_str()).collect();
    assert_eq!(tools, ["reserve", "capture"], "{account}");
    let entry = &account.calls[1];
    assert_eq!(entry.outcome, CallOutcome::Applied, "{account}");
    let decided = entry.decided.as_ref().expect("the decision is kept");
    assert_eq!(
        (decided.by.as_str(), decided.decision.as_str()),
        (OPS, "retry")
    );
    assert_eq!(account.needing_a_person().count(), 0, "{account}");
}

/// A person says the capture failed for good: the agent's retries are answered with their
/// words, and nothing runs.
async fn a_person_resolves_a_case_as_failed_in_the_inbox(place: &Place) {
    let tenant = unique("inbox_case_resolve");
    let d = payments(place.store.clone());
    let (run, capture, case) = reserve_then_capture_declined(&d, &*place.store, &tenant).await;
    let key = case.record.as_str().to_owned();
    let (_server, base, cookie, csrf) = open_inbox(place).await;
    let shown = page(&base, &cookie).await;
    let row = case_row(&shown, &key).unwrap_or_else(|| panic!("no row for {key}: {shown}"));
    let fence = fence_of(&row);

    decline(&tenant, false);
    let (status, body) = post_case(
        &base,
        &cookie,
        &csrf,
        &key,
        &fence,
        &[
            ("decision", "resolve"),
            ("value", ""),
            ("failure", "declined for good"),
        ],
    )
    .await;
    assert_eq!(status, 303, "{body}");

    for _ in 0..2 {
        let answered = d.dispatch(&capture, &run).await.unwrap_err();
        assert_eq!(answered.code(), "tool_failed", "{answered}");
        let DispatchError::ToolFailed {
            error,
            deduplicated,
            ..
        } = &answered
        else {
            panic!("expected ToolFailed, got {answered:?}");
        };
        assert_eq!(error.message(), "declined for good");
        assert!(deduplicated, "the person's word is replayed");
    }
    assert_eq!(
        CAPTURE_RUNS.count(&tenant),
        1,
        "nothing ran after the decision"
    );
    let account = d.run_account(&tenant, "run-1").await.unwrap();
    let decided = account.calls[1]
        .decided
        .as_ref()
        .expect("the decision is kept");
    assert_eq!(
        (decided.by.as_str(), decided.decision.as_str()),
        (OPS, "resolved")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_failed_capture_is_run_again_at_the_word_of_a_person_in_the_inbox() {
    let place = sqlite();
    a_failed_capture_is_run_again_at_the_word_of_a_person_in_the_inbox(&place).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_failed_capture_is_run_again_at_the_word_of_a_person_in_the_inbox() {
    if let Some(place) =
        postgres("postgres_a_failed_capture_is_run_again_at_the_word_of_a_person_in_the_inbox")
            .await
    {
        a_failed_capture_is_run_again_at_the_word_of_a_person_in_the_inbox(&place).await;
    }
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_failed_capture_is_run_again_at_the_word_of_a_person_in_the_inbox() {
    if let Some(place) =
        redis("redis_a_failed_capture_is_run_again_at_the_word_of_a_person_in_the_inbox").await
    {
        a_failed_capture_is_run_again_at_the_word_of_a_person_in_the_inbox(&place).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_person_resolves_a_case_as_failed_in_the_inbox() {
    let place = sqlite();
    a_person_resolves_a_case_as_failed_in_the_inbox(&place).await;
}
