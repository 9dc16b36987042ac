//! Clean-up of the shared Redis server: every key a test wrote under its prefixes is deleted
//! when the test ends, passed or panicked. The store cannot do it (a record's fence counter
//! outlives the record by design, so that fences never go back), and the server is never
//! flushed: other tests and runs use it at the same time.
//!
//! The deletion speaks RESP over a plain TCP connection, so that it needs only the standard
//! library and the facade's tests, which have no Redis client, include this very file.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::services::Scratch;

/// Deletes every key under a prefix in one script, so that a large clean-up costs one round
/// trip and needs no client-side loop over `SCAN`.
const DELETE_UNDER: &str = "local n = 0 local c = '0' repeat \
    local r = redis.call('SCAN', c, 'MATCH', ARGV[1], 'COUNT', 1000) c = r[1] \
    for _, k in ipairs(r[2]) do redis.call('DEL', k) n = n + 1 end \
    until c == '0' return n";

/// The prefixes one test writes under on the Redis server at `url`; dropping this deletes
/// their keys.
pub fn redis_prefixes(url: &str) -> Scratch {
    Scratch::new(url, delete_prefixes)
}

/// The prefixes one test writes under on the Redis Cluster whose nodes are `urls`
/// (comma-separated); dropping this deletes their keys on every node.
pub fn redis_cluster_prefixes(urls: &str) -> Scratch {
    Scratch::new(urls, delete_cluster_prefixes)
}

fn delete_cluster_prefixes(urls: &str, prefixes: &[String]) -> Result<(), String> {
    for url in urls.split(',').map(str::trim).filter(|u| !u.is_empty()) {
        for prefix in prefixes {
            match delete_prefix(url, prefix) {
                Ok(n) => eprintln!("deleted {n} Redis keys under {prefix} on {url}"),
                // A replica holds copies of its primary's keys, deleted there.
                Err(e) if e.contains("READONLY") => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

fn delete_prefixes(url: &str, prefixes: &[String]) -> Result<(), String> {
    for prefix in prefixes {
        let n = delete_prefix(url, prefix)?;
        eprintln!("deleted {n} Redis keys under {prefix}");
    }
    Ok(())
}

/// Delete every key under `prefix` on the server at `url` (`redis://[user:password@]host
/// [:port][/db]`); returns how many there were.
pub fn delete_prefix(url: &str, prefix: &str) -> Result<i64, String> {
    let fail =
        |what: &str, e: &dyn std::fmt::Display| format!("Redis clean-up of {prefix}: {what}: {e}");
    let rest = url
        .split_once("://")
        .map(|(_, r)| r)
        .ok_or_else(|| fail("not a redis:// URL", &url))?;
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
    let mut stream = TcpStream::connect(&host).map_err(|e| fail("connect", &e))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| fail("set a timeout", &e))?;
    let mut commands: Vec<Vec<&str>> = Vec::new();
    if let Some(auth) = auth {
        commands.push(match auth.split_once(':') {
            Some((user, pass)) if !user.is_empty() => vec!["AUTH", user, pass],
            Some((_, pass)) => vec!["AUTH", pass],
            None => vec!["AUTH", auth],
        });
    }
    let db = path.trim_matches('/');
    if !db.is_empty() {
        commands.push(vec!["SELECT", db]);
    }
    let pattern = format!("{prefix}:*");
    commands.push(vec!["EVAL", DELETE_UNDER, "0", &pattern]);
    let mut reply = String::new();
    for args in commands {
        let mut command = format!("*{}\r\n", args.len());
        for a in &args {
            command.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        stream
            .write_all(command.as_bytes())
            .map_err(|e| fail("send", &e))?;
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            stream.read_exact(&mut byte).map_err(|e| fail("read", &e))?;
            line.push(byte[0]);
        }
        reply = String::from_utf8_lossy(&line).trim_end().to_owned();
        if reply.starts_with('-') {
            return Err(fail(args[0], &reply));
        }
    }
    reply
        .strip_prefix(':')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| fail("unexpected reply", &reply))
}
