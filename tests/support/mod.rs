//! What the durability proofs (crash matrix, multi-process race, outages) share: service
//! URLs, unique names, the ledger file of the fake downstream service, and clean-up of the
//! servers' namespaces.

// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use std::fs::File;
#[cfg(feature = "redis")]
use std::io::{Read, Write};
use std::os::unix::io::AsRawFd;
use std::sync::Arc;
#[cfg(any(feature = "redis", feature = "postgres"))]
use std::time::Duration;

use idem::Store;

pub mod one_tool;

/// The service URL in `var`; `None` (saying why `test` skips) when it is unset, unless
/// `IDEM_REQUIRE_SERVICES=1` makes that a failure.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub fn service_url(var: &str, test: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ if std::env::var("IDEM_REQUIRE_SERVICES").as_deref() == Ok("1") => {
            panic!("{test}: IDEM_REQUIRE_SERVICES=1 but {var} is not set")
        }
        _ => {
            eprintln!("skipping {test}: set {var} to run it against that store");
            None
        }
    }
}

/// A name no other run or test uses: process id, clock, and the test's name.
pub fn unique(tag: &str) -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("{tag}_{}_{millis}", std::process::id())
}

pub fn lock_exclusive(file: &File) {
    // SAFETY: `flock` only reads the descriptor, which `file` keeps open for the call. The
    // lock is released when the file is closed, or by the kernel when the process dies.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock: {}", std::io::Error::last_os_error());
}

/// One line of the fake downstream service's ledger: `kind label key pid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    pub kind: String,
    pub label: String,
    pub key: String,
    pub pid: u32,
}

pub fn parse_ledger(text: &str) -> Vec<LedgerEntry> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let parts: Vec<&str> = line.split(' ').collect();
            assert_eq!(parts.len(), 4, "malformed ledger line {line:?}");
            LedgerEntry {
                kind: parts[0].to_owned(),
                label: parts[1].to_owned(),
                key: parts[2].to_owned(),
                pid: parts[3].parse().expect("pid"),
            }
        })
        .collect()
}

/// Open a store by name: `target` is the SQLite path or the server URL, `scope` the Redis
/// prefix or PostgreSQL schema, `connections` the PostgreSQL pool size.
#[cfg_attr(
    not(any(feature = "redis", feature = "postgres")),
    allow(unused_variables)
)]
pub async fn open_store(
    store: &str,
    target: &str,
    scope: &str,
    connections: usize,
) -> Arc<dyn Store> {
    match store {
        "sqlite" => Arc::new(idem::store::sqlite::SqliteStore::open(target).expect("open SQLite")),
        #[cfg(feature = "redis")]
        "redis" => Arc::new(
            idem::store::redis::RedisStore::connect(target, scope)
                .await
                .expect("connect to Redis"),
        ),
        #[cfg(feature = "postgres")]
        "postgres" => Arc::new(
            idem::store::postgres::PostgresStore::from_pool(small_pool(target, connections), scope)
                .await
                .expect("connect to PostgreSQL"),
        ),
        other => panic!("this build has no {other} store"),
    }
}

/// A PostgreSQL pool of `connections` connections, so that many concurrent children stay well
/// inside the server's connection limit.
#[cfg(feature = "postgres")]
pub fn small_pool(url: &str, connections: usize) -> idem::store::postgres::deadpool_postgres::Pool {
    use idem::store::postgres::deadpool_postgres::tokio_postgres::{Config, NoTls};
    use idem::store::postgres::deadpool_postgres::{
        Manager, ManagerConfig, Pool, RecyclingMethod, Runtime,
    };
    let mut config: Config = url.parse().expect("PostgreSQL URL");
    config.connect_timeout(Duration::from_secs(10));
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(connections)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(30)))
        .create_timeout(Some(Duration::from_secs(11)))
        .build()
        .expect("PostgreSQL pool")
}

/// Delete every key under `prefix` with one Lua script, over a bare RESP connection (the
/// store offers no way to drop its fence counters, which outlive records by design).
#[cfg(feature = "redis")]
pub fn redis_delete_prefix(url: &str, prefix: &str) -> i64 {
    use std::net::TcpStream;
    const SCRIPT: &str = "local n = 0 local c = '0' repeat \
        local r = redis.call('SCAN', c, 'MATCH', ARGV[1], 'COUNT', 1000) c = r[1] \
        for _, k in ipairs(r[2]) do redis.call('DEL', k) n = n + 1 end \
        until c == '0' return n";
    let rest = url.split_once("://").map(|(_, r)| r).expect("redis:// URL");
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (auth, host) = match authority.rsplit_once('@') {
        Some((auth, host)) => (Some(auth), host),
        None => (None, authority),
    };
    let host = if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:6379")
    };
    let mut stream = TcpStream::connect(&host).expect("connect to Redis to clean up");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut send = |args: &[&str]| -> String {
        let mut cmd = format!("*{}\r\n", args.len());
        for a in args {
            cmd.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        stream.write_all(cmd.as_bytes()).expect("send to Redis");
        let mut reply = Vec::new();
        let mut byte = [0u8; 1];
        while !reply.ends_with(b"\r\n") {
            stream.read_exact(&mut byte).expect("read from Redis");
            reply.push(byte[0]);
        }
        String::from_utf8_lossy(&reply).trim_end().to_owned()
    };
    if let Some(auth) = auth {
        let reply = match auth.split_once(':') {
            Some((user, pass)) if !user.is_empty() => send(&["AUTH", user, pass]),
            Some((_, pass)) => send(&["AUTH", pass]),
            None => send(&["AUTH", auth]),
        };
        assert!(reply.starts_with('+'), "Redis AUTH: {reply}");
    }
    let db = path.trim_matches('/');
    if !db.is_empty() {
        let reply = send(&["SELECT", db]);
        assert!(reply.starts_with('+'), "Redis SELECT: {reply}");
    }
    let pattern = format!("{prefix}:*");
    let reply = send(&["EVAL", SCRIPT, "0", &pattern]);
    reply
        .strip_prefix(':')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("Redis clean-up failed: {reply}"))
}

#[cfg(feature = "postgres")]
pub fn drop_schema(url: &str, schema: &str) {
    use idem::store::postgres::deadpool_postgres::tokio_postgres::{self, NoTls};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, NoTls)
            .await
            .expect("connect to drop the schema");
        let connection = tokio::spawn(connection);
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await
            .expect("drop the schema");
        drop(client);
        let _ = connection.await;
    });
}
