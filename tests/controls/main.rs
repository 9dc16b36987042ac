//! The controls around dedupe, as a new user would write them, on SQLite and PostgreSQL:
//! permission by argument, a precondition checked before every attempt, approval by
//! argument, compensation of a multi-step booking (also when the worker is killed
//! mid-compensation, and when a compensation fails), and a run's account checked call by
//! call against the fake providers' ledger.
//!
//! Each scenario is a function of the store, run once per store by [`on_stores!`]. The fake
//! providers (`world.rs`) keep their ledgers by tenant, and every scenario works in a tenant
//! of its own. The kill test runs this binary again as a child process (`kill.rs`).
//!
//! PostgreSQL needs `IDEM_POSTGRES_URL`; without it those tests say why they are skipped,
//! unless `IDEM_REQUIRE_SERVICES=1` makes that a failure.

#[path = "../support/mod.rs"]
mod support;

mod account;
mod account_attempts;
mod approval;
mod authorize;
mod authorize_reads;
mod compensate;
mod escalate;
mod example;
mod example_runs;
mod kill;
mod limit_processes;
mod limits;
mod precondition;
mod under_way;
mod undo_processes;
mod undo_run;
mod world;

use std::sync::Arc;

use idem::Store;

/// A store of each kind, named for the test that uses it, and what keeps it (a PostgreSQL
/// schema dropped at the end).
pub(crate) struct Opened {
    pub store: Arc<dyn Store>,
    _scratch: Option<Box<dyn std::any::Any>>,
}

pub(crate) fn sqlite_path(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("{}.sqlite", support::services::unique(tag)))
}

/// A SQLite file of a test's own, removed with its journal files when the test is done.
pub(crate) struct Scratch(pub std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut path = self.0.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
}

pub(crate) async fn sqlite(tag: &str) -> Option<Opened> {
    let path = sqlite_path(tag);
    let store = idem::store::sqlite::SqliteStore::open(&path).expect("open SQLite");
    Some(Opened {
        store: Arc::new(store),
        _scratch: Some(Box::new(Scratch(path))),
    })
}

pub(crate) async fn postgres(tag: &str) -> Option<Opened> {
    let url = support::services::service_url(support::services::POSTGRES_URL, tag)?;
    let schemas = support::postgres_schemas::postgres_schemas(&url);
    let schema = schemas.fresh("controls");
    let store = idem::store::postgres::PostgresStore::connect(&url, &schema)
        .await
        .expect("connect to PostgreSQL");
    Some(Opened {
        store: Arc::new(store),
        _scratch: Some(Box::new(schemas)),
    })
}

pub(crate) async fn redis(tag: &str) -> Option<Opened> {
    let url = support::services::service_url(support::services::REDIS_URL, tag)?;
    let prefix = support::services::unique(&format!("controls-{tag}"));
    let store = idem::store::redis::RedisStore::connect(&url, &prefix)
        .await
        .expect("connect to Redis");
    Some(Opened {
        store: Arc::new(store),
        _scratch: None,
    })
}

/// One `#[tokio::test]` per store for a scenario `async fn(Arc<dyn Store>)`.
#[macro_export]
macro_rules! on_stores {
    ($scenario:path => $sqlite:ident, $postgres:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $sqlite() {
            if let Some(opened) = $crate::sqlite(stringify!($sqlite)).await {
                $scenario(opened.store.clone()).await;
            }
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $postgres() {
            if let Some(opened) = $crate::postgres(stringify!($postgres)).await {
                $scenario(opened.store.clone()).await;
            }
        }
    };
}

/// Every scenario on SQLite, PostgreSQL and Redis.
#[macro_export]
macro_rules! on_every_store {
    ($($scenario:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    let opened = $crate::sqlite(stringify!($scenario)).await.unwrap();
                    super::$scenario(opened.store.clone()).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    if let Some(opened) = $crate::postgres(stringify!($scenario)).await {
                        super::$scenario(opened.store.clone()).await;
                    }
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    if let Some(opened) = $crate::redis(stringify!($scenario)).await {
                        super::$scenario(opened.store.clone()).await;
                    }
                }
            )*
        }
    };
}
