//! A PostgreSQL store that goes away while `idem` waits at its prompt.

use super::*;

/// `url` with the query parameter `param` added.
#[cfg(feature = "postgres")]
fn with_param(url: &str, param: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{param}")
}

/// A pending approval of `close_account` on PostgreSQL, in a schema of its own: the agent,
/// its run, the call and its key.
#[cfg(feature = "postgres")]
async fn postgres_pending(url: &str, schema: &str) -> (Dispatcher, RunContext, ToolCall, String) {
    let store = idem::PostgresStore::connect(url, schema)
        .await
        .expect("connect to PostgreSQL");
    let agent = agent(Arc::new(store));
    let run_ctx = RunContext::new(schema);
    let call = close("call-cut", "cus_cut");
    left_for_approval(&agent, &call, &run_ctx).await;
    let key = key_of(&agent, &call, &run_ctx);
    (agent, run_ctx, call, key)
}

/// `idem approvals approve KEY` on `store_url`, waiting at its prompt.
#[cfg(feature = "postgres")]
async fn approve_at_prompt(store_url: &str, schema: &str, key: &str) -> Prompted {
    let mut cli = Prompted::start(
        &[
            "approvals",
            "approve",
            key,
            "--store",
            store_url,
            "--prefix",
            schema,
            "--as",
            "dana@desk",
        ],
        &[("IDEM_APPROVAL_KEY", desk_key_text())],
    );
    cli.wait_for("Proceed? [y/N]").await;
    cli
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_connection_terminated_at_the_prompt() {
    use idem::store::postgres::deadpool_postgres::tokio_postgres::{self, NoTls};
    use support::postgres_schemas::postgres_schemas;
    use support::services::{POSTGRES_URL, service_url};
    let Some(url) = service_url(
        POSTGRES_URL,
        "a_postgres_connection_terminated_at_the_prompt",
    ) else {
        return;
    };
    let schemas = postgres_schemas(&url);
    let schema = schemas.fresh("idem_cli_cut");
    let (agent, run_ctx, call, key) = postgres_pending(&url, &schema).await;

    // The command's connections carry a name of their own, so that only they are cut.
    let name = schema.clone();
    let cli_url = with_param(&url, &format!("application_name={name}"));
    let mut cli = approve_at_prompt(&cli_url, &schema, &key).await;
    let (admin, connection) = tokio_postgres::connect(&url, NoTls)
        .await
        .expect("connect to terminate idem's connection");
    tokio::spawn(connection);
    let cut = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1 AND pid <> pg_backend_pid()",
            &[&name],
        )
        .await
        .expect("terminate idem's connection");
    assert!(!cut.is_empty(), "idem held no connection at its prompt");
    for _ in 0..500 {
        let left: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                &[&name],
            )
            .await
            .expect("idem's connections")
            .get(0);
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Time for idem's side of the connection to see it closed (its pool then opens a new
    // one); without it, the command may pick the dead connection and fail instead.
    tokio::time::sleep(Duration::from_millis(200)).await;
    cli.answer("y\n");
    let shown = cli.finish().await;

    // Either outcome is right as long as idem says which: a new connection and the approval
    // made, or a failure naming PostgreSQL and nothing changed.
    let label = format!("{}/cus_cut", run_ctx.tenant);
    if shown.code == Some(0) {
        eprintln!("idem opened a new connection after the cut and approved");
        assert!(
            shown.stdout.contains(&format!("approved {key}")),
            "{shown:#?}"
        );
        let ran = agent
            .dispatch(&call, &run_ctx)
            .await
            .expect("the approved call");
        assert!(!ran.deduplicated, "{ran:?}");
        let again = agent.dispatch(&call, &run_ctx).await.expect("a replay");
        assert!(again.deduplicated, "{again:?}");
        assert_eq!(CLOSED.count(&label), 1);
    } else {
        eprintln!("idem failed on the cut connection; nothing changed");
        shown.exited(3).says(&["PostgreSQL", "store unavailable"]);
        still_pending(&["--store", &url, "--prefix", &schema], &key);
        left_for_approval(&agent, &call, &run_ctx).await;
        assert_eq!(CLOSED.count(&label), 0);
    }
}

/// A TCP relay to a server that the test can cut: every connection through it is dropped
/// and new ones are refused, as when the server goes away.
#[cfg(feature = "postgres")]
struct Relay {
    addr: std::net::SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

#[cfg(feature = "postgres")]
impl Relay {
    async fn to(server: std::net::SocketAddr) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the relay");
        let addr = listener.local_addr().expect("the relay's address");
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut links = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((mut inbound, _)) = accepted else { break };
                        links.spawn(async move {
                            if let Ok(mut outbound) = tokio::net::TcpStream::connect(server).await {
                                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            }
                        });
                    }
                    _ = stopped.changed() => break,
                }
            }
            drop(listener);
            links.abort_all();
            while links.join_next().await.is_some() {}
        });
        Relay { addr, stop, task }
    }

    /// Drop every connection and refuse new ones; returns once they are closed.
    async fn cut(self) {
        let _ = self.stop.send(true);
        self.task.await.expect("the relay stops");
    }
}

/// `url` with its host and port replaced by `addr`.
#[cfg(feature = "postgres")]
fn via(url: &str, addr: std::net::SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").expect("a postgres:// URL");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let user = authority
        .rsplit_once('@')
        .map(|(user, _)| format!("{user}@"))
        .unwrap_or_default();
    format!("{scheme}://{user}{addr}{tail}")
}

/// The host and port of a PostgreSQL URL.
#[cfg(feature = "postgres")]
async fn server_of(url: &str) -> std::net::SocketAddr {
    use idem::store::postgres::deadpool_postgres::tokio_postgres::config::{Config, Host};
    let config: Config = url.parse().expect("a PostgreSQL URL");
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        other => panic!("this test relays TCP only, not {other:?}"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    tokio::net::lookup_host((host.as_str(), port))
        .await
        .expect("resolve the PostgreSQL host")
        .next()
        .expect("an address of the PostgreSQL host")
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_server_gone_at_the_prompt_changes_nothing() {
    use support::postgres_schemas::postgres_schemas;
    use support::services::{POSTGRES_URL, service_url};
    let Some(url) = service_url(
        POSTGRES_URL,
        "a_postgres_server_gone_at_the_prompt_changes_nothing",
    ) else {
        return;
    };
    let schemas = postgres_schemas(&url);
    let schema = schemas.fresh("idem_cli_gone");
    let (agent, run_ctx, call, key) = postgres_pending(&url, &schema).await;

    // The command reaches the server through a relay, cut while it waits at its prompt.
    let relay = Relay::to(server_of(&url).await).await;
    let relayed = via(&url, relay.addr);
    let mut cli = approve_at_prompt(&relayed, &schema, &key).await;
    relay.cut().await;
    cli.answer("y\n");
    cli.finish().await.exited(3).says(&[
        "PostgreSQL at",
        &relay_shown(&relayed),
        "store unavailable",
    ]);

    // Nothing was decided: the agent's retry still waits for a person, and nothing ran.
    let label = format!("{}/cus_cut", run_ctx.tenant);
    still_pending(&["--store", &url, "--prefix", &schema], &key);
    left_for_approval(&agent, &call, &run_ctx).await;
    assert_eq!(CLOSED.count(&label), 0);

    // Once the server answers again, the same command decides it, and the call runs once.
    run(idem(&[
        "approvals",
        "approve",
        &key,
        "--as",
        "dana@desk",
        "--yes",
        "--store",
        &url,
        "--prefix",
        &schema,
    ])
    .env("IDEM_APPROVAL_KEY", desk_key_text()))
    .exited(0);
    let ran = agent
        .dispatch(&call, &run_ctx)
        .await
        .expect("the approved call");
    assert!(!ran.deduplicated, "{ran:?}");
    assert_eq!(CLOSED.count(&label), 1);
}

/// How idem names the relayed store: its URL up to the database (no password here).
#[cfg(feature = "postgres")]
fn relay_shown(url: &str) -> String {
    url.split('?').next().unwrap_or(url).to_owned()
}
