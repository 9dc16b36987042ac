//! The store a `--store` argument names: `sqlite:PATH` (or a bare path) is a SQLite file,
//! `redis://...` and `postgres://...` a server, `redis-cluster://HOST:PORT,HOST:PORT` a Redis
//! Cluster (the nodes to start from), and `memory` a store in the process's memory (for the
//! proxy only: what it records is gone when it stops, and no other process can read it).

use std::sync::Arc;

use idem_core::Store;

use crate::exit::{Exit, Failure};

/// The SQLite file used when neither `--store` nor the configuration names a store.
#[cfg(feature = "mcp-proxy")]
pub const DEFAULT_STORE: &str = "idem-proxy.db";

/// The Redis key prefix and PostgreSQL schema used unless `--prefix` names another (the
/// proxy's records live under it, its configuration's `namespace` inside).
pub const DEFAULT_PREFIX: &str = "idem";

/// What `--store` names.
#[derive(Debug, PartialEq)]
enum Spec<'a> {
    Sqlite(&'a str),
    Redis(&'a str),
    /// The nodes' URLs, each `redis://` (or `rediss://`) with the spec's credentials.
    RedisCluster(Vec<String>),
    Postgres(&'a str),
    Memory,
}

const FORMS: &str = "give `sqlite:PATH` (or a file's path), `redis://HOST:PORT`, `redis-cluster://HOST:PORT,HOST:PORT`, `postgres://USER@HOST/DB` or, for `idem mcp-proxy` alone, `memory`";

/// The word that names the memory store.
const MEMORY: &str = "memory";

fn parse(spec: &str) -> Result<Spec<'_>, Failure> {
    let malformed = |why: String| Failure::new(Exit::Usage, format!("`--store {spec}`: {why}"));
    if spec.trim().is_empty() {
        return Err(malformed(format!("no store is named: {FORMS}")));
    }
    if spec == MEMORY || spec == "memory:" {
        return Ok(Spec::Memory);
    }
    for (scheme, node) in [("redis-cluster", "redis"), ("rediss-cluster", "rediss")] {
        if let Some(rest) = spec.strip_prefix(scheme).and_then(|r| r.strip_prefix(':')) {
            return cluster_nodes(rest, node)
                .map(Spec::RedisCluster)
                .ok_or_else(|| {
                    malformed(format!(
                        "a `{scheme}` URL begins `{scheme}://` and names one node or more, `HOST:PORT` separated by commas: {FORMS}"
                    ))
                });
        }
    }
    if let Some(path) = spec
        .strip_prefix("sqlite://")
        .or(spec.strip_prefix("sqlite:"))
    {
        return match path {
            "" => Err(malformed(format!(
                "`sqlite:` needs a file's path after it: {FORMS}"
            ))),
            path => Ok(Spec::Sqlite(path)),
        };
    }
    match spec.split_once(':') {
        Some(("redis" | "rediss", rest)) if rest.starts_with("//") && rest.len() > 2 => {
            Ok(Spec::Redis(spec))
        }
        Some(("postgres" | "postgresql", rest)) if rest.starts_with("//") && rest.len() > 2 => {
            Ok(Spec::Postgres(spec))
        }
        Some((scheme @ ("redis" | "rediss" | "postgres" | "postgresql"), _)) => Err(malformed(
            format!("a `{scheme}` URL begins `{scheme}://` and names a host: {FORMS}"),
        )),
        Some((scheme, rest))
            if rest.starts_with("//")
                && !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '+') =>
        {
            Err(malformed(format!(
                "unknown store scheme `{scheme}://`: {FORMS}"
            )))
        }
        _ => Ok(Spec::Sqlite(spec)),
    }
}

/// The nodes of `redis-cluster://[USER:PASSWORD@]HOST:PORT,HOST:PORT/...` (`rest` is what
/// follows the scheme's colon), each a `node://` URL with the credentials; `None` if no node
/// is named or one is empty.
fn cluster_nodes(rest: &str, node: &str) -> Option<Vec<String>> {
    let rest = rest.strip_prefix("//")?;
    let (credentials, hosts) = match rest.rsplit_once('@') {
        Some((credentials, hosts)) => (format!("{credentials}@"), hosts),
        None => (String::new(), rest),
    };
    hosts
        .trim_end_matches('/')
        .split(',')
        .map(str::trim)
        .map(|host| (!host.is_empty()).then(|| format!("{node}://{credentials}{host}")))
        .collect()
}

/// Open the store `spec` names, creating a SQLite file that does not exist yet (the
/// proxy's records), and a description of it for the logs.
#[cfg(feature = "mcp-proxy")]
pub async fn open(spec: &str) -> Result<(Arc<dyn Store>, String), String> {
    connect(spec, DEFAULT_PREFIX, true)
        .await
        .map_err(|f| f.message)
}

/// Open the store `spec` names, for an operator: a SQLite file must exist already (a typo
/// must not become an empty store that lists nothing).
pub async fn open_existing(spec: &str, prefix: &str) -> Result<(Arc<dyn Store>, String), Failure> {
    connect(spec, prefix, false).await
}

async fn connect(
    spec: &str,
    prefix: &str,
    create: bool,
) -> Result<(Arc<dyn Store>, String), Failure> {
    opened(spec, prefix, create).await.map_err(|mut failure| {
        failure.message = scrubbed(&failure.message, spec);
        failure
    })
}

async fn opened(
    spec: &str,
    prefix: &str,
    create: bool,
) -> Result<(Arc<dyn Store>, String), Failure> {
    match parse(spec)? {
        Spec::Sqlite(path) => {
            let store = if create {
                idem_core::store::sqlite::SqliteStore::open(path)
            } else {
                idem_core::store::sqlite::SqliteStore::open_existing(path)
            };
            let store = store.map_err(|e| {
                Failure::new(
                    Exit::Store,
                    format!("cannot open the SQLite store `{path}`: {e}"),
                )
            })?;
            Ok((Arc::new(store), format!("the SQLite file {path}")))
        }
        Spec::Redis(url) => redis(url, prefix).await,
        Spec::RedisCluster(nodes) => redis_cluster(&nodes, spec, prefix).await,
        Spec::Postgres(url) => postgres(url, prefix, create).await,
        Spec::Memory if create => Ok((
            Arc::new(idem_core::store::memory::MemoryStore::new()),
            "a store in this process's memory (what it records is gone when it stops)".into(),
        )),
        Spec::Memory => Err(Failure::new(
            Exit::Usage,
            "`--store memory`: a memory store lives inside the process that made it, and this command cannot read another's: name the SQLite file, Redis or PostgreSQL the records are in",
        )),
    }
}

/// The passwords `spec` holds: a URL's `user:password@` (up to the last `@`, so that an
/// unencoded `@`, `/` or `?` in it still counts), and every `password=` or `pass=`
/// parameter (in a URL's query, or a libpq `key = value` string, quoted or not).
fn passwords_of(spec: &str) -> Vec<&str> {
    let mut found = Vec::new();
    if let Some((_, rest)) = spec.split_once("://")
        && let Some((user, _)) = rest.rsplit_once('@')
        && let Some((_, password)) = user.split_once(':')
    {
        found.push(password);
    }
    let lower = spec.to_ascii_lowercase();
    for name in ["password", "pass"] {
        let mut from = 0;
        while let Some(at) = lower[from..].find(name).map(|i| i + from) {
            from = at + name.len();
            let after = spec[from..].trim_start();
            let Some(value) = after.strip_prefix('=') else {
                continue;
            };
            let value = value.trim_start();
            let value = match value.strip_prefix('\'') {
                Some(quoted) => quoted.split('\'').next().unwrap_or(quoted),
                None => value.split(['&', ' ', ';']).next().unwrap_or(value),
            };
            found.push(value);
        }
    }
    found.retain(|p| !p.is_empty());
    found
}

/// `text` with `spec`'s passwords replaced by `***`: how messages name a store. The whole
/// spec is masked first, then each password wherever else it appears (if it is long enough
/// to be told from the rest of a message).
pub fn scrubbed(text: &str, spec: &str) -> String {
    let passwords = passwords_of(spec);
    let mut shown = spec.to_owned();
    for password in &passwords {
        shown = shown.replace(password, "***");
    }
    let mut out = text.replace(spec, &shown);
    for password in passwords.iter().filter(|p| p.len() >= 4) {
        out = out.replace(password, "***");
    }
    out
}

#[cfg(feature = "redis")]
async fn redis(url: &str, prefix: &str) -> Result<(Arc<dyn Store>, String), Failure> {
    let shown = scrubbed(url, url);
    let store = idem_core::store::redis::RedisStore::connect(url, prefix)
        .await
        .map_err(|e| {
            Failure::new(
                Exit::Store,
                format!("cannot use the Redis store at {shown}: {e}"),
            )
        })?;
    Ok((
        Arc::new(store),
        format!("Redis at {shown} (key prefix `{prefix}`)"),
    ))
}

#[cfg(feature = "redis")]
async fn redis_cluster(
    nodes: &[String],
    spec: &str,
    prefix: &str,
) -> Result<(Arc<dyn Store>, String), Failure> {
    let shown = scrubbed(spec, spec);
    let store = idem_core::store::redis::RedisStore::connect_cluster(nodes, prefix)
        .await
        .map_err(|e| {
            Failure::new(
                Exit::Store,
                format!("cannot use the Redis Cluster at {shown}: {e}"),
            )
        })?;
    Ok((
        Arc::new(store),
        format!("the Redis Cluster at {shown} (key prefix `{prefix}`)"),
    ))
}

#[cfg(not(feature = "redis"))]
async fn redis(_: &str, _: &str) -> Result<(Arc<dyn Store>, String), Failure> {
    Err(without_redis())
}

#[cfg(not(feature = "redis"))]
async fn redis_cluster(
    _: &[String],
    _: &str,
    _: &str,
) -> Result<(Arc<dyn Store>, String), Failure> {
    Err(without_redis())
}

#[cfg(not(feature = "redis"))]
fn without_redis() -> Failure {
    Failure::new(
        Exit::Usage,
        "this `idem` was built without the Redis store: install `idem-cli` with its default features (`cargo install idem-cli`, or `cargo install --path idem-cli` from a checkout of idem), which include every store",
    )
}

#[cfg(feature = "postgres")]
async fn postgres(
    url: &str,
    prefix: &str,
    create: bool,
) -> Result<(Arc<dyn Store>, String), Failure> {
    let shown = scrubbed(url, url);
    let store = if create {
        idem_core::store::postgres::PostgresStore::connect(url, prefix).await
    } else {
        idem_core::store::postgres::PostgresStore::connect_existing(url, prefix).await
    };
    let store = store.map_err(|e| {
        Failure::new(
            Exit::Store,
            format!("cannot use the PostgreSQL store at {shown}: {e}"),
        )
    })?;
    Ok((
        Arc::new(store),
        format!("PostgreSQL at {shown} (schema `{prefix}`)"),
    ))
}

#[cfg(not(feature = "postgres"))]
async fn postgres(_: &str, _: &str, _: bool) -> Result<(Arc<dyn Store>, String), Failure> {
    Err(Failure::new(
        Exit::Usage,
        "this `idem` was built without the PostgreSQL store: install `idem-cli` with its default features (`cargo install idem-cli`, or `cargo install --path idem-cli` from a checkout of idem), which include every store",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(spec: &str) -> String {
        match parse(spec) {
            Ok(_) => panic!("`{spec}` was accepted"),
            Err(f) => {
                assert_eq!(f.code, Exit::Usage, "{spec}: {}", f.message);
                f.message
            }
        }
    }

    #[test]
    fn passwords_never_reach_a_message() {
        for (spec, password) in [
            ("postgres://ops:s3cret@db:5432/app", "s3cret"),
            ("postgres://ops:p@ss@db/app", "p@ss"),
            (
                "postgres://ops@db/app?sslmode=require&password=s3cret",
                "s3cret",
            ),
            ("redis://:hunter22@cache:6379/", "hunter22"),
            ("host=db user=ops password=s3cret dbname=app", "s3cret"),
            ("host=db password = 's3 cret' dbname=app", "s3 cret"),
            ("postgres://ops:s3?cr/et@db/app", "s3?cr/et"),
            ("postgres://ops:first1@db/app?password=second2", "second2"),
            ("postgres://ops:first1@db/app?password=second2", "first1"),
            ("redis://127.0.0.1:6379/?pass=hunter22", "hunter22"),
        ] {
            let message = scrubbed(&format!("cannot use {spec}: refused"), spec);
            assert!(!message.contains(password), "{message}");
            assert!(message.contains("***"), "{message}");
        }
        assert_eq!(
            scrubbed("postgres://ops@db/app", "postgres://ops@db/app"),
            "postgres://ops@db/app"
        );
    }

    #[test]
    fn store_specs_are_read_or_refused_with_the_forms() {
        assert!(matches!(
            parse("sqlite:agent.db"),
            Ok(Spec::Sqlite("agent.db"))
        ));
        assert!(matches!(
            parse("sqlite:///var/a.db"),
            Ok(Spec::Sqlite("/var/a.db"))
        ));
        assert!(matches!(
            parse("./agent.db"),
            Ok(Spec::Sqlite("./agent.db"))
        ));
        assert!(matches!(
            parse("redis://127.0.0.1:6379/"),
            Ok(Spec::Redis(_))
        ));
        assert!(matches!(
            parse("postgresql://u@h/db"),
            Ok(Spec::Postgres(_))
        ));
        assert!(refusal("redis:/localhost").contains("begins `redis://`"));
        assert!(refusal("postgres://").contains("begins `postgres://`"));
        assert!(refusal("ftp://host/x").contains("unknown store scheme `ftp://`"));
        assert!(refusal("sqlite:").contains("needs a file's path"));
        assert_eq!(parse("memory").ok(), Some(Spec::Memory));
        assert_eq!(parse("sqlite:memory").ok(), Some(Spec::Sqlite("memory")));
        assert_eq!(
            parse("redis-cluster://10.0.0.1:7000, 10.0.0.2:7000/").ok(),
            Some(Spec::RedisCluster(vec![
                "redis://10.0.0.1:7000".into(),
                "redis://10.0.0.2:7000".into()
            ]))
        );
        assert_eq!(
            parse("rediss-cluster://ops:s3cret@a:7000,b:7000").ok(),
            Some(Spec::RedisCluster(vec![
                "rediss://ops:s3cret@a:7000".into(),
                "rediss://ops:s3cret@b:7000".into()
            ]))
        );
        for spec in [
            "redis-cluster://",
            "redis-cluster:a:7000",
            "redis-cluster://a:7000,,b:7000",
        ] {
            assert!(refusal(spec).contains("names one node or more"), "{spec}");
        }
        assert!(refusal("  ").contains("no store is named"));
    }
}
