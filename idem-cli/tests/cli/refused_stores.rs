//! A store `idem` must not use as it is: another version, not an idem store, a Redis
//! that may evict, a PostgreSQL schema that does not exist. Refused, and left as it is.

use super::*;

/// Where a SQLite file keeps `PRAGMA user_version`: four big-endian bytes of its header.
const USER_VERSION_AT: std::ops::Range<usize> = 60..64;

/// A SQLite store made by an agent at `path`, with a request waiting for a person, closed:
/// the file holds all of it (closing it checkpointed its write-ahead log away).
async fn closed_sqlite_store(path: &Path) {
    let agent = agent(Arc::new(
        idem::SqliteStore::open(path).expect("open SQLite"),
    ));
    let run_ctx = RunContext::new(unique("closed"));
    left_for_approval(&agent, &close("call-v", "cus_v"), &run_ctx).await;
    drop(agent);
    let wal = PathBuf::from(format!("{}-wal", path.display()));
    assert!(
        !wal.exists(),
        "{} is still open: its header is not the file's",
        path.display()
    );
    assert_eq!(user_version(path), 3, "the store's schema version");
}

/// The `PRAGMA user_version` of the SQLite file at `path`.
fn user_version(path: &Path) -> u32 {
    let bytes = std::fs::read(path).expect("read the SQLite file");
    let version = bytes[USER_VERSION_AT].try_into().expect("four bytes");
    u32::from_be_bytes(version)
}

/// The SQLite file at `path` with its bytes changed by `edit`.
fn edit_file(path: &Path, edit: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(path).expect("read the SQLite file");
    edit(&mut bytes);
    std::fs::write(path, bytes).expect("write the SQLite file");
}

/// `bytes` with every `from` replaced by `to`, of the same length.
fn replace_all(bytes: &mut [u8], from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len());
    let mut at = 0;
    while let Some(found) = bytes[at..].windows(from.len()).position(|w| w == from) {
        bytes[at + found..at + found + to.len()].copy_from_slice(to);
        at += found + to.len();
    }
}

#[tokio::test]
async fn a_sqlite_file_of_another_version_or_kind_is_refused_and_left_as_it_is() {
    let dir = TempDir::new("idem_cli_versions");
    let (newer, older, other) = (
        dir.path().join("newer.db"),
        dir.path().join("older.db"),
        dir.path().join("other.db"),
    );
    for path in [&newer, &older, &other] {
        closed_sqlite_store(path).await;
    }
    edit_file(&newer, |b| {
        b[USER_VERSION_AT].copy_from_slice(&99u32.to_be_bytes())
    });
    edit_file(&older, |b| {
        b[USER_VERSION_AT].copy_from_slice(&2u32.to_be_bytes())
    });
    // Another application's database: the same tables under names of its own.
    edit_file(&other, |b| replace_all(b, b"idem_", b"misc_"));

    for (path, why, version) in [
        (
            &newer,
            &[
                "schema version 99",
                "this version of idem understands version 3",
            ][..],
            99,
        ),
        (
            &older,
            &[
                "schema version 2, older than this idem's 3",
                "upgrade the agents first",
            ],
            2,
        ),
        (
            &other,
            &["is not an idem store", "no idem_records table"],
            3,
        ),
    ] {
        let spec = format!("sqlite:{}", path.display());
        let before = std::fs::read(path).expect("read the SQLite file");
        for args in [
            &["records", "list"][..],
            &["approvals", "list"],
            &["stats"],
            &["records", "purge"],
        ] {
            run(idem(args).args(["--store", &spec]))
                .exited(3)
                .says(why)
                .says(&[&path.display().to_string()]);
            assert!(
                std::fs::read(path).expect("read the SQLite file") == before,
                "`idem {args:?}` changed {}",
                path.display()
            );
        }
        assert_eq!(user_version(path), version);
    }
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_postgres_schema_that_does_not_exist_is_not_created() {
    use idem::store::postgres::deadpool_postgres::tokio_postgres::{self, NoTls};
    use support::postgres_schemas::postgres_schemas;
    use support::services::{POSTGRES_URL, service_url};
    let Some(url) = service_url(
        POSTGRES_URL,
        "a_postgres_schema_that_does_not_exist_is_not_created",
    ) else {
        return;
    };
    // Dropped at the end, should `idem` create it after all.
    let schemas = postgres_schemas(&url);
    let typo = schemas.fresh("idem_cli_typo");
    let (admin, connection) = tokio_postgres::connect(&url, NoTls)
        .await
        .expect("connect to PostgreSQL");
    let connection = tokio::spawn(connection);
    for args in [
        &["records", "list"][..],
        &["approvals", "list"],
        &["stats"],
        &["records", "purge"],
    ] {
        run(&mut on(&["--store", &url, "--prefix", &typo], args))
            .exited(3)
            .says(&[
                "PostgreSQL",
                &format!("schema `{typo}` holds no idem records (check the schema name"),
            ]);
        let created: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
                &[&typo],
            )
            .await
            .expect("the schemas")
            .get(0);
        assert_eq!(created, 0, "`idem {args:?}` created the schema {typo}");
    }
    drop(admin);
    let _ = connection.await;
}

/// A `redis-server` of the test's own, on a free port, without persistence: one whose
/// configuration a test may choose (the shared server's is never touched). Killed, by the
/// child process this started, when dropped.
#[cfg(feature = "redis")]
struct PrivateRedis {
    child: std::process::Child,
    port: u16,
    _dir: TempDir,
}

#[cfg(feature = "redis")]
impl PrivateRedis {
    /// A server started with `args`; `None`, after saying why `test` skips, without
    /// `redis-server` (a failure under `IDEM_REQUIRE_SERVICES=1`).
    fn start(test: &str, args: &[&str]) -> Option<PrivateRedis> {
        let installed = std::process::Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !installed {
            support::services::unavailable(
                test,
                "`redis-server` is not installed",
                "install `redis-server` to run it",
            );
            return None;
        }
        // A port found free may be taken before the server binds it: try a few.
        for _ in 0..5 {
            let port = closed_port();
            let dir = TempDir::new("idem_cli_redis");
            let child = std::process::Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .arg("--dir")
                .arg(dir.path())
                .args(["--save", "", "--appendonly", "no"])
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start redis-server");
            let mut server = PrivateRedis {
                child,
                port,
                _dir: dir,
            };
            // A safety net against a server that never answers, not a measurement.
            for _ in 0..500 {
                if server.ask(&["PING"]).is_ok_and(|r| r == ["PONG"]) {
                    return Some(server);
                }
                if server
                    .child
                    .try_wait()
                    .expect("the server's status")
                    .is_some()
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("could not start a private redis-server");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Send one command; its reply, flattened into strings.
    fn ask(&self, args: &[&str]) -> std::io::Result<Vec<String>> {
        use std::io::Write as _;
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut command = format!("*{}\r\n", args.len());
        for arg in args {
            command.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        stream.write_all(command.as_bytes())?;
        let mut reply = Vec::new();
        read_reply(&mut std::io::BufReader::new(stream), &mut reply)?;
        Ok(reply)
    }
}

#[cfg(feature = "redis")]
impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Read one RESP reply into `out`: its strings and numbers, arrays flattened.
#[cfg(feature = "redis")]
fn read_reply(from: &mut impl std::io::BufRead, out: &mut Vec<String>) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind};
    let mut line = String::new();
    from.read_line(&mut line)?;
    let line = line.trim_end();
    let length = |n: &str| {
        n.parse::<i64>()
            .map_err(|e| Error::new(ErrorKind::InvalidData, format!("{line:?}: {e}")))
    };
    match line.split_at_checked(1) {
        Some(("+" | ":", text)) => out.push(text.to_owned()),
        Some(("-", error)) => return Err(Error::other(error.to_owned())),
        Some(("$", n)) => {
            if let Ok(n) = usize::try_from(length(n)?) {
                let mut text = vec![0; n + 2];
                from.read_exact(&mut text)?;
                out.push(String::from_utf8_lossy(&text[..n]).into_owned());
            }
        }
        Some(("*", n)) => {
            for _ in 0..length(n)?.max(0) {
                read_reply(from, out)?;
            }
        }
        _ => return Err(Error::new(ErrorKind::UnexpectedEof, format!("{line:?}"))),
    }
    Ok(())
}

#[cfg(feature = "redis")]
#[test]
fn a_redis_that_may_evict_is_refused_naming_the_fix() {
    let test = "a_redis_that_may_evict_is_refused_naming_the_fix";
    let Some(server) = PrivateRedis::start(test, &["--maxmemory-policy", "allkeys-lru"]) else {
        return;
    };
    let url = server.url();
    for args in [
        &["stats"][..],
        &["records", "list"],
        &["approvals", "list"],
        &["records", "purge"],
    ] {
        run(&mut on(&["--store", &url], args)).exited(3).says(&[
            &format!("Redis store at {url}"),
            "maxmemory-policy is `allkeys-lru`",
            "noeviction",
            "CONFIG SET maxmemory-policy noeviction",
        ]);
    }
    // Its configuration is the operator's to change, and nothing was written.
    assert_eq!(
        server
            .ask(&["CONFIG", "GET", "maxmemory-policy"])
            .expect("the policy"),
        ["maxmemory-policy", "allkeys-lru"]
    );
    assert_eq!(server.ask(&["DBSIZE"]).expect("the key count"), ["0"]);
}
