//! Redis or PostgreSQL going away mid-run: write calls fail closed with
//! `DispatchError::StoreUnavailable` and nothing executes; when the server is back the run
//! continues without duplicates. An effect whose outcome could not be recorded because the
//! server went away while the body ran is settled by the class's orphan rule afterwards:
//! taken over with the same downstream key (`idempotent_write`) or Unknown
//! (`non_idempotent_write`), never run twice.
//!
//! A server that stops answering but keeps its connections open (a hung process) must not
//! hang the dispatcher either: the write fails closed within the store's own timeout (the
//! Redis store's response timeout, 5 s, plus one reconnection when the connection went
//! silent; the PostgreSQL store's operation timeout, set to 3 s here), and nothing executes.
//!
//! The real servers keep running (other tests use them): each test puts a TCP proxy between
//! its store and the server. "Stopping the server" closes the proxy's listener and every
//! connection through it; "restarting" listens again on the same port; "freezing" forwards
//! nothing and closes nothing. After a restart the tests wait (bounded) for the store to
//! answer a health check before dispatching, as a worker would; the
//! `*_first_write_after_a_long_outage_succeeds` tests dispatch without one, and the
//! frozen-server tests check that later operations get a fresh connection.
//!
//! Needs `IDEM_REDIS_URL` / `IDEM_POSTGRES_URL`; without them the tests say why they are
//! skipped, unless `IDEM_REQUIRE_SERVICES=1` makes that a failure.

#![cfg(any(feature = "redis", feature = "postgres"))]

mod support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem::prelude::*;
use serde_json::{Value, json};
use support::dispatcher::linked;
use support::services::service_url;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

// ---------------------------------------------------------------------------------------
// The proxy

/// A TCP proxy on 127.0.0.1 that can be stopped and restarted on the same port, or frozen.
struct Proxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    state: Arc<Mutex<ProxyState>>,
    /// Connections numbered below this forward nothing in either direction and stay open:
    /// a server that stopped answering (a hung process, a silently dropped flow).
    silent_below: watch::Sender<u64>,
}

#[derive(Default)]
struct ProxyState {
    running: bool,
    accept: Option<JoinHandle<()>>,
    /// Each connection's number and its forwarding task.
    connections: Vec<(u64, JoinHandle<()>)>,
    /// The connections whose forwarding task has stopped forwarding (gone silent).
    silenced: std::collections::HashSet<u64>,
    /// The number the next accepted connection gets.
    next: u64,
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Arc<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let proxy = Arc::new(Proxy {
            addr: listener.local_addr().expect("proxy address"),
            upstream,
            state: Arc::default(),
            silent_below: watch::Sender::new(0),
        });
        proxy.serve(listener);
        proxy
    }

    fn serve(&self, listener: TcpListener) {
        let (state, upstream, silent) =
            (self.state.clone(), self.upstream, self.silent_below.clone());
        let mut guard = self.state.lock().unwrap();
        guard.running = true;
        guard.accept = Some(tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let mut st = state.lock().unwrap();
                if !st.running {
                    return;
                }
                let n = st.next;
                st.next += 1;
                let task = tokio::spawn(forward(
                    client,
                    upstream,
                    n,
                    silent.subscribe(),
                    state.clone(),
                ));
                st.connections.push((n, task));
            }
        }));
    }

    /// The server "goes away": no more connections are accepted, and every open one is
    /// closed (the clients see their sockets close, as when a server process dies).
    async fn stop(&self) {
        let (accept, connections) = {
            let mut st = self.state.lock().unwrap();
            st.running = false;
            (st.accept.take(), std::mem::take(&mut st.connections))
        };
        for task in accept
            .into_iter()
            .chain(connections.into_iter().map(|(_, t)| t))
        {
            task.abort();
            let _ = task.await;
        }
    }

    /// The server is back, on the same address.
    async fn restart(&self) {
        let mut tries = 0;
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                Err(e) if tries < 50 => {
                    tries += 1;
                    eprintln!("rebinding {}: {e}; trying again", self.addr);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("cannot listen on {} again: {e}", self.addr),
            }
        };
        self.serve(listener);
    }

    /// The server stops answering: connections, open and new, stay open and nothing comes
    /// back.
    async fn freeze(&self) {
        self.silent_below.send_replace(u64::MAX);
        self.until_silent(u64::MAX).await;
    }

    /// The connections open now go silent (their flows were dropped without a reset), while
    /// new connections reach the server.
    async fn silence_open_connections(&self) {
        let below = self.state.lock().unwrap().next;
        self.silent_below.send_replace(below);
        self.until_silent(below).await;
    }

    /// Wait until every open connection numbered below `below` has stopped forwarding: the
    /// forwarding tasks see the change on their own schedule, and a request written before
    /// one of them did could still reach the server and apply there.
    async fn until_silent(&self, below: u64) {
        for _ in 0..5_000 {
            let done = {
                let st = self.state.lock().unwrap();
                st.connections
                    .iter()
                    .all(|(n, t)| *n >= below || t.is_finished() || st.silenced.contains(n))
            };
            if done {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("the proxy's connections did not go silent within 5 s");
    }

    /// The hung server is killed and started again: its connections close, new ones work.
    async fn thaw(&self) {
        self.stop().await;
        self.silent_below.send_replace(0);
        self.restart().await;
    }

    /// `url` with its host and port replaced by the proxy's.
    fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
        let (authority, path) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        let user = authority
            .rsplit_once('@')
            .map(|(u, _)| format!("{u}@"))
            .unwrap_or_default();
        format!("{scheme}://{user}{}{path}", self.addr)
    }
}

/// Forward connection number `n` until either side closes, or hold it silently once it is
/// told to go silent.
async fn forward(
    mut client: TcpStream,
    upstream: SocketAddr,
    n: u64,
    mut silent_below: watch::Receiver<u64>,
    state: Arc<Mutex<ProxyState>>,
) {
    if n >= *silent_below.borrow_and_update() {
        let Ok(mut server) = TcpStream::connect(upstream).await else {
            return;
        };
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => return,
            _ = silent_below.wait_for(|&below| n < below) => {}
        }
    }
    state.lock().unwrap().silenced.insert(n);
    // Silent: keep the client's socket open and answer nothing, until the proxy is stopped.
    std::future::pending::<()>().await;
}

/// The server's address in a URL (`scheme://[user@]host[:port]/...`).
async fn upstream_of(url: &str, default_port: u16) -> SocketAddr {
    let rest = url.split_once("://").expect("a URL with a scheme").1;
    let authority = rest.split('/').next().unwrap_or(rest);
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:{default_port}")
    };
    tokio::net::lookup_host(&host)
        .await
        .expect("resolve the server")
        .next()
        .expect("an address for the server")
}

// ---------------------------------------------------------------------------------------
// The probes and their downstream service (in memory: one process here)

#[derive(Default)]
struct Downstream {
    /// Every attempt: (label, key).
    attempts: Vec<(String, String)>,
    /// Applied keys.
    applied: HashMap<String, String>,
}

static DOWNSTREAM: Mutex<Option<Downstream>> = Mutex::new(None);
/// Labels whose first execution takes the server away right after the effect.
static STOP_AFTER_EFFECT: Mutex<Option<HashMap<String, Arc<Proxy>>>> = Mutex::new(None);

fn attempts(label: &str) -> Vec<String> {
    DOWNSTREAM
        .lock()
        .unwrap()
        .as_ref()
        .map(|d| {
            d.attempts
                .iter()
                .filter(|(l, _)| l == label)
                .map(|(_, k)| k.clone())
                .collect()
        })
        .unwrap_or_default()
}

fn applied(label: &str) -> usize {
    DOWNSTREAM
        .lock()
        .unwrap()
        .as_ref()
        .map_or(0, |d| d.applied.values().filter(|l| *l == label).count())
}

async fn effect(ctx: &ToolContext, label: &str) -> Result<Value, ToolError> {
    let key = ctx.idempotency_key().to_owned();
    let first = {
        let mut guard = DOWNSTREAM.lock().unwrap();
        let d = guard.get_or_insert_with(Downstream::default);
        d.attempts.push((label.to_owned(), key.clone()));
        d.applied.insert(key.clone(), label.to_owned()).is_none()
    };
    let stop = STOP_AFTER_EFFECT
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .remove(label);
    if let Some(proxy) = stop {
        proxy.stop().await;
    }
    Ok(json!({ "label": label, "key": key, "first_application": first }))
}

/// Idempotent write probe.
#[tool(class = "idempotent_write", lease_secs = 1, wait_secs = 30)]
async fn outage_idem(ctx: &ToolContext, label: String) -> Result<Value, ToolError> {
    effect(ctx, &label).await
}

/// Non-idempotent write probe.
#[tool(class = "non_idempotent_write", lease_secs = 1, wait_secs = 30)]
async fn outage_once(ctx: &ToolContext, label: String) -> Result<Value, ToolError> {
    effect(ctx, &label).await
}

/// Read probe.
#[tool(class = "read")]
async fn outage_read(label: String) -> Result<String, ToolError> {
    Ok(format!("read {label}"))
}

fn call(tool: &str, label: &str) -> ToolCall {
    ToolCall::new(tool, json!({ "label": label })).with_call_id(format!("call-{label}"))
}

async fn dispatch(d: &Dispatcher, c: &ToolCall) -> Result<Dispatched, DispatchError> {
    let started = Instant::now();
    let result = d.dispatch(c, &RunContext::new("tenant-outage")).await;
    eprintln!(
        "  {} {}: {} in {:.0?}",
        c.name,
        c.arguments["label"],
        match &result {
            Ok(r) if r.deduplicated => "replayed".to_owned(),
            Ok(_) => "executed".to_owned(),
            Err(e) => e.code().to_owned(),
        },
        started.elapsed()
    );
    result
}

fn assert_unavailable(result: Result<Dispatched, DispatchError>, what: &str) {
    match result {
        Err(DispatchError::StoreUnavailable { .. }) => {}
        other => panic!("{what}: expected StoreUnavailable, got {other:?}"),
    }
}

fn label_of(c: &ToolCall) -> &str {
    c.arguments["label"].as_str().expect("label")
}

/// Wait (bounded) until the store answers again, as a worker's health check would. A
/// connection the store still holds from before the outage may fail the first operation.
async fn until_store_answers(d: &Dispatcher) {
    let mut last = None;
    for _ in 0..100 {
        match d.store().now().await {
            Ok(_) => return,
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the store did not answer after the server came back: {last:?}");
}

/// The refused calls of an outage run once the store is back, and only once.
async fn run_once_each(d: &Dispatcher, calls: &[&ToolCall]) {
    for c in calls {
        let label = label_of(c);
        let first = dispatch(d, c).await.expect("the server is back");
        assert!(
            !first.deduplicated,
            "{label}: runs now that the store is back"
        );
        let again = dispatch(d, c).await.expect("the server is back");
        assert!(again.deduplicated, "{label}: and only once");
        assert_eq!(again.output_json, first.output_json);
        assert_eq!(attempts(label).len(), 1, "{label}: executed once");
    }
}

// ---------------------------------------------------------------------------------------
// The scenarios, the same for both stores

/// The server goes away between calls: writes fail closed, reads pass; when it is back,
/// recorded results replay and the refused calls run once.
async fn between_calls(d: &Dispatcher, proxy: &Proxy, tag: &str) {
    let before = call("outage_once", &format!("{tag}-before"));
    let once = call("outage_once", &format!("{tag}-during-once"));
    let idem = call("outage_idem", &format!("{tag}-during-idem"));

    let recorded = dispatch(d, &before).await.expect("the server is up");
    assert!(!recorded.deduplicated);

    proxy.stop().await;
    for c in [&once, &idem, &before] {
        assert_unavailable(dispatch(d, c).await, label_of(c));
    }
    for c in [&once, &idem] {
        assert!(
            attempts(label_of(c)).is_empty(),
            "nothing executes without a claim"
        );
    }
    let read = dispatch(d, &call("outage_read", &format!("{tag}-read")))
        .await
        .expect("reads need no store");
    assert_eq!(read.output, json!(format!("read {tag}-read")));

    proxy.restart().await;
    until_store_answers(d).await;
    let replay = dispatch(d, &before).await.expect("the server is back");
    assert!(
        replay.deduplicated,
        "the recorded result survived the outage"
    );
    assert_eq!(replay.output_json, recorded.output_json);
    run_once_each(d, &[&once, &idem]).await;
    assert_eq!(attempts(label_of(&before)).len(), 1);
}

/// The server goes away while the body runs, after the effect: the outcome cannot be
/// recorded, so the caller gets StoreUnavailable. Once the server is back and the holder's
/// lease has run out, the idempotent call is taken over with the same downstream key (the
/// downstream service dedupes it) and the non-idempotent one is Unknown, not run again.
async fn during_effect(d: &Dispatcher, proxy: &Arc<Proxy>, tag: &str) {
    let once = call("outage_once", &format!("{tag}-mid-once"));
    let idem = call("outage_idem", &format!("{tag}-mid-idem"));
    let (once_label, idem_label) = (label_of(&once), label_of(&idem));

    for c in [&once, &idem] {
        let label = label_of(c);
        STOP_AFTER_EFFECT
            .lock()
            .unwrap()
            .get_or_insert_with(HashMap::new)
            .insert(label.to_owned(), proxy.clone());
        assert_unavailable(dispatch(d, c).await, label);
        assert_eq!(
            attempts(label).len(),
            1,
            "{label}: the effect happened once"
        );
        proxy.restart().await;
        until_store_answers(d).await;
    }

    for _ in 0..2 {
        match dispatch(d, &once).await {
            Err(DispatchError::OutcomeUnknown { key, .. }) => {
                assert_eq!(attempts(once_label), vec![key.as_str().to_owned()]);
            }
            other => panic!("{once_label}: expected OutcomeUnknown, got {other:?}"),
        }
    }
    assert_eq!(attempts(once_label).len(), 1, "never run again");

    let taken = dispatch(d, &idem).await.expect("taken over");
    assert!(!taken.deduplicated);
    assert_eq!(
        taken.output["first_application"],
        json!(false),
        "the downstream service had applied it already"
    );
    let keys = attempts(idem_label);
    assert_eq!(
        keys.len(),
        2,
        "{idem_label}: the take-over ran the body again"
    );
    assert!(
        keys.iter()
            .all(|k| Some(k.as_str()) == taken.key.as_ref().map(|k| k.as_str())),
        "{idem_label}: with the same downstream key: {keys:?}"
    );
    assert_eq!(applied(idem_label), 1, "{idem_label}: applied once");
    assert!(dispatch(d, &idem).await.expect("replay").deduplicated);
}

/// The server stops answering but keeps its connections open (a hung process): a write
/// fails closed within the store's own timeout instead of hanging, and nothing executes.
/// When the hung server is replaced, the run continues.
async fn unresponsive_server(d: &Dispatcher, proxy: &Arc<Proxy>, tag: &str) {
    let warm = call("outage_once", &format!("{tag}-warm"));
    let once = call("outage_once", &format!("{tag}-hung-once"));
    let idem = call("outage_idem", &format!("{tag}-hung-idem"));
    dispatch(d, &warm).await.expect("the server is up");

    proxy.freeze().await;
    for c in [&once, &idem] {
        let started = Instant::now();
        assert_unavailable(dispatch(d, c).await, label_of(c));
        eprintln!(
            "{tag}: a write against a server that stopped answering failed after {:.1?}",
            started.elapsed()
        );
        assert!(attempts(label_of(c)).is_empty(), "nothing executed");
    }

    proxy.thaw().await;
    until_store_answers(d).await;
    assert!(dispatch(d, &warm).await.expect("back").deduplicated);
    run_once_each(d, &[&once, &idem]).await;
}

/// The store's open connections go silent (their flows were dropped without a reset) while
/// the server stays reachable: after one operation timed out on a silent connection, the
/// store must not keep sending every later operation into it.
async fn silent_connection(d: &Dispatcher, proxy: &Proxy, tag: &str) {
    let warm = call("outage_once", &format!("{tag}-warm"));
    let next = call("outage_once", &format!("{tag}-next"));
    dispatch(d, &warm).await.expect("the server is up");
    proxy.silence_open_connections().await;
    let started = Instant::now();
    assert_unavailable(dispatch(d, &next).await, label_of(&next));
    eprintln!(
        "{tag}: a write on a silent connection failed after {:.1?}",
        started.elapsed()
    );
    let mut results = Vec::new();
    for _ in 0..3 {
        let result = dispatch(d, &next).await;
        let ran = result.is_ok();
        results.push(result.map(|r| r.deduplicated).map_err(|e| e.to_string()));
        if ran {
            break;
        }
    }
    assert!(
        matches!(results.last(), Some(Ok(false))),
        "the server is reachable, yet three more writes after the timeout failed: {results:?}"
    );
    assert_eq!(attempts(label_of(&next)).len(), 1);
}

/// How long the server stays away in [`long_outage`]: longer than the Redis store's
/// reconnection attempts (two retries with backoff, about half a second).
const LONG_OUTAGE: Duration = Duration::from_secs(3);

/// The server is away for a few seconds, then back: the first write after its return
/// succeeds, without a health check in between.
async fn long_outage(d: &Dispatcher, proxy: &Proxy, tag: &str) {
    let warm = call("outage_once", &format!("{tag}-warm"));
    let after = call("outage_once", &format!("{tag}-after"));
    dispatch(d, &warm).await.expect("the server is up");
    proxy.stop().await;
    assert_unavailable(dispatch(d, &after).await, label_of(&after));
    tokio::time::sleep(LONG_OUTAGE).await;
    proxy.restart().await;
    let first = dispatch(d, &after).await;
    assert!(
        matches!(first, Ok(ref r) if !r.deduplicated),
        "the server is back, so the first write after its return runs: {first:?}"
    );
    assert!(dispatch(d, &after).await.expect("replay").deduplicated);
    assert_eq!(attempts(label_of(&after)).len(), 1);
}

/// Run `scenario` on `d`, whose store connects through `proxy`, then stop the proxy whether
/// the scenario passed or not (and so close every connection it still holds).
async fn through_the_proxy<F, Fut>(d: Dispatcher, proxy: Arc<Proxy>, tag: String, scenario: F)
where
    F: FnOnce(Dispatcher, Arc<Proxy>, String) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let outcome = tokio::spawn(scenario(d, proxy.clone(), tag)).await;
    proxy.stop().await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

// ---------------------------------------------------------------------------------------
// Redis

#[cfg(feature = "redis")]
async fn redis_case<F, Fut>(test: &str, scenario: F)
where
    F: FnOnce(Dispatcher, Arc<Proxy>, String) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    use idem::store::redis::RedisStore;
    use support::redis_keys::redis_prefixes;
    use support::services::REDIS_URL;
    let Some(url) = service_url(REDIS_URL, test) else {
        return;
    };
    let prefixes = redis_prefixes(&url);
    let proxy = Proxy::start(upstream_of(&url, 6379).await).await;
    let prefix = prefixes.fresh(&format!("idem-outage-{test}"));
    let store = RedisStore::connect(&proxy.url(&url), &prefix)
        .await
        .expect("connect through the proxy");
    let d = linked(Arc::new(store)).with_namespace(&prefix);
    through_the_proxy(d, proxy, format!("redis-{test}"), scenario).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_between_calls_fails_closed_and_resumes_without_duplicates() {
    redis_case("between", |d, proxy, tag| async move {
        between_calls(&d, &proxy, &tag).await
    })
    .await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_during_an_effect_settles_by_class_after_the_restart() {
    redis_case("during", |d, proxy, tag| async move {
        during_effect(&d, &proxy, &tag).await
    })
    .await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_unresponsive_server_fails_writes_closed_within_the_timeout() {
    redis_case("hung", |d, proxy, tag| async move {
        unresponsive_server(&d, &proxy, &tag).await
    })
    .await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_replaces_a_connection_that_went_silent() {
    redis_case("silent", |d, proxy, tag| async move {
        silent_connection(&d, &proxy, &tag).await
    })
    .await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_first_write_after_a_long_outage_succeeds() {
    redis_case("long", |d, proxy, tag| async move {
        long_outage(&d, &proxy, &tag).await
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// PostgreSQL

/// The bound on every PostgreSQL operation in these tests (the store's default is 30 s).
#[cfg(feature = "postgres")]
const POSTGRES_OPERATION_TIMEOUT: Duration = Duration::from_secs(3);

#[cfg(feature = "postgres")]
async fn postgres_case<F, Fut>(test: &str, scenario: F)
where
    F: FnOnce(Dispatcher, Arc<Proxy>, String) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    use idem::store::postgres::PostgresStore;
    use support::postgres_schemas::postgres_schemas;
    use support::services::POSTGRES_URL;
    let Some(url) = service_url(POSTGRES_URL, test) else {
        return;
    };
    let schemas = postgres_schemas(&url);
    let proxy = Proxy::start(upstream_of(&url, 5432).await).await;
    let schema = schemas.fresh(&format!("idem_outage_{test}"));
    let store = PostgresStore::connect(&proxy.url(&url), &schema)
        .await
        .expect("connect through the proxy")
        .with_operation_timeout(POSTGRES_OPERATION_TIMEOUT);
    let d = linked(Arc::new(store)).with_namespace(&schema);
    through_the_proxy(d, proxy, format!("postgres-{test}"), scenario).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outage_between_calls_fails_closed_and_resumes_without_duplicates() {
    postgres_case("between", |d, proxy, tag| async move {
        between_calls(&d, &proxy, &tag).await
    })
    .await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outage_during_an_effect_settles_by_class_after_the_restart() {
    postgres_case("during", |d, proxy, tag| async move {
        during_effect(&d, &proxy, &tag).await
    })
    .await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_unresponsive_server_fails_writes_closed_within_the_timeout() {
    postgres_case("hung", |d, proxy, tag| async move {
        unresponsive_server(&d, &proxy, &tag).await
    })
    .await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_replaces_a_connection_that_went_silent() {
    postgres_case("silent", |d, proxy, tag| async move {
        silent_connection(&d, &proxy, &tag).await
    })
    .await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_first_write_after_a_long_outage_succeeds() {
    postgres_case("long", |d, proxy, tag| async move {
        long_outage(&d, &proxy, &tag).await
    })
    .await;
}
