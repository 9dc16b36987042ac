//! The store a `--store` argument names: a path is a SQLite file, a URL a server.

use std::sync::Arc;

use idem::Store;

/// The SQLite file used when neither `--store` nor the configuration names a store.
pub const DEFAULT_STORE: &str = "idem-proxy.db";

/// The Redis key prefix and PostgreSQL schema of the proxy's records (the configuration's
/// `namespace` keeps two proxies apart inside them).
const PREFIX: &str = "idem";

/// Open the store `spec` names, and a description of it for the logs.
pub async fn open(spec: &str) -> Result<(Arc<dyn Store>, String), String> {
    let scheme = spec.split_once("://").map(|(scheme, _)| scheme);
    match scheme {
        None => {
            let store = idem::SqliteStore::open(spec)
                .map_err(|e| format!("cannot open the SQLite store `{spec}`: {e}"))?;
            Ok((Arc::new(store), format!("the SQLite file {spec}")))
        }
        Some("redis" | "rediss") => redis(spec).await,
        Some("postgres" | "postgresql") => postgres(spec).await,
        Some(other) => Err(format!(
            "`--store {spec}`: unknown store scheme `{other}://`: give a SQLite file's path, a `redis://` URL or a `postgres://` URL"
        )),
    }
}

#[cfg(feature = "redis")]
async fn redis(url: &str) -> Result<(Arc<dyn Store>, String), String> {
    let store = idem::RedisStore::connect(url, PREFIX)
        .await
        .map_err(|e| format!("cannot connect to the Redis store: {e}"))?;
    Ok((Arc::new(store), format!("Redis (key prefix `{PREFIX}`)")))
}

#[cfg(not(feature = "redis"))]
async fn redis(_: &str) -> Result<(Arc<dyn Store>, String), String> {
    let _ = PREFIX;
    Err("this `idem` was built without the Redis store: install it with `cargo install --path . --features mcp-proxy,redis` from a checkout of idem".into())
}

#[cfg(feature = "postgres")]
async fn postgres(url: &str) -> Result<(Arc<dyn Store>, String), String> {
    let store = idem::PostgresStore::connect(url, PREFIX)
        .await
        .map_err(|e| format!("cannot connect to the PostgreSQL store: {e}"))?;
    Ok((Arc::new(store), format!("PostgreSQL (schema `{PREFIX}`)")))
}

#[cfg(not(feature = "postgres"))]
async fn postgres(_: &str) -> Result<(Arc<dyn Store>, String), String> {
    Err("this `idem` was built without the PostgreSQL store: install it with `cargo install --path . --features mcp-proxy,postgres` from a checkout of idem".into())
}
