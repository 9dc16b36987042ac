//! Latency per store through the MCP proxy: p50 and p99 of one `tools/call` that claims and
//! completes a new call, and of the same call again (a replay), one caller at a time, from
//! an rmcp client over stdio to `idem mcp-proxy` (its store given as `--store`) in front of
//! the bench upstream (`mcp-upstream`). Beside it, the same two calls through a plain
//! forwarding proxy (`mcp-forward`) in front of the same upstream, which records nothing:
//! its "replay" is a second call, and the gap between the two lines is what idem adds to a
//! hop. And the upstream alone, no proxy (`"through":"none"`): one hop, the one a replay
//! through idem crosses too, since the proxy answers it from its store. The three take
//! turns call by call (which goes first rotates), so all see the same machine. Client, proxy and upstream are separate processes on a machine shared with
//! builds: the figures carry process-scheduling noise the in-process row
//! ([`crate::latency`]) does not.
//!
//! `idem-bench proxy-latency <idem-binary> <proxy.toml> <store> <calls>`, `store` what
//! `idem mcp-proxy --store` accepts (`memory`, a SQLite file's path, `redis://...`,
//! `redis-cluster://HOST:PORT,...`, `postgres://...`):
//! one JSON line per contender, the percentiles in microseconds.

use std::time::{Duration, Instant};

use rmcp::service::RunningService;
use rmcp::{Peer, RoleClient};
use tokio::process::Command;

use crate::latency::percentiles;
use crate::proxy::{bench_binary, connect, proxy_command};
use crate::turns::{call, check_ok, deduplicated};

const USAGE: &str = "usage: proxy-latency <idem-binary> <proxy.toml> <sqlite:PATH|redis://...|postgres://...> <calls>";

/// The tool timed: idem claims, runs and completes it, then replays it.
const TOOL: &str = "noop_idempotent_write";

pub fn run(args: &[String]) -> Result<(), String> {
    let [idem, config, store, calls] = args else {
        return Err(USAGE.into());
    };
    let calls: usize = calls.parse().map_err(|e| format!("calls: {e}"))?;
    if calls < 100 {
        return Err("at least 100 calls, for a p99".into());
    }
    let name = store_kind(store);
    let upstream = bench_binary("mcp-upstream")?;
    let forward = bench_binary("mcp-forward")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let proxied = proxy_command(idem, config, store, &upstream);
        let mut forwarded = Command::new(&forward);
        forwarded.arg("--").arg(&upstream);
        let contenders = [
            Timed::new(Through::Idem, connect("idem mcp-proxy", proxied).await?),
            Timed::new(Through::Forward, connect("mcp-forward", forwarded).await?),
            Timed::new(Through::Direct, connect("mcp-upstream", Command::new(&upstream)).await?),
        ];
        let pid = std::process::id();
        // Buffers, connections, the store's first pages and both code paths, not measured.
        for i in 0..calls / 10 {
            for c in &contenders {
                c.pair(&format!("warm-{pid}-{i}")).await?;
            }
        }
        let mut samples: Vec<_> = contenders
            .iter()
            .map(|_| (Vec::with_capacity(calls), Vec::with_capacity(calls)))
            .collect();
        for i in 0..calls {
            let key = format!("lat-{pid}-{i}");
            // Which goes first rotates, so that none always follows another.
            for k in (0..contenders.len()).map(|k| (k + i) % contenders.len()) {
                let (first, replay) = contenders[k].pair(&key).await?;
                samples[k].0.push(first);
                samples[k].1.push(replay);
            }
        }
        for (c, (first, replay)) in contenders.into_iter().zip(&mut samples) {
            let (f50, f99) = percentiles(first);
            let (r50, r99) = percentiles(replay);
            let (through, store) = match c.through {
                Through::Idem => ("idem mcp-proxy", format!("\"store\":\"{name}\"")),
                Through::Forward => ("mcp-forward", format!("\"store\":\"none\",\"beside\":\"{name}\"")),
                Through::Direct => ("none", format!("\"store\":\"none\",\"beside\":\"{name}\"")),
            };
            println!(
                "{{\"row\":\"proxy-latency\",\"through\":\"{through}\",{store},\"calls\":{calls},\"first_p50_us\":{f50:.1},\"first_p99_us\":{f99:.1},\"replay_p50_us\":{r50:.1},\"replay_p99_us\":{r99:.1}}}"
            );
            let _ = c.client.cancel().await;
        }
        Ok(())
    })
}

/// What a contender's client talks to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Through {
    /// `idem mcp-proxy` in front of the upstream.
    Idem,
    /// The plain forwarding proxy in front of the upstream: the second hop without idem.
    Forward,
    /// The upstream itself, no proxy: one hop, what a replay through idem also crosses.
    Direct,
}

/// One contender: a client of `idem mcp-proxy`, of the plain forwarder, or of the upstream.
struct Timed {
    through: Through,
    client: RunningService<RoleClient, ()>,
}

impl Timed {
    fn new(through: Through, client: RunningService<RoleClient, ()>) -> Self {
        Timed { through, client }
    }

    /// The call under `key`, then the same call again, each timed. Through idem the first
    /// must be a first execution and the second a replay, as its answer's `_meta` says.
    async fn pair(&self, key: &str) -> Result<(Duration, Duration), String> {
        let peer: &Peer<RoleClient> = self.client.peer();
        let started = Instant::now();
        let first = call(peer, TOOL, Some(key)).await?;
        let first_took = started.elapsed();
        let started = Instant::now();
        let again = call(peer, TOOL, Some(key)).await?;
        let replay_took = started.elapsed();
        check_ok(&first)?;
        check_ok(&again)?;
        if self.through == Through::Idem {
            if deduplicated(&first) != Some(false) {
                return Err(format!("a new call was not a first execution: {first:?}"));
            }
            if deduplicated(&again) != Some(true) {
                return Err(format!("a completed call was not replayed: {again:?}"));
            }
        }
        Ok((first_took, replay_took))
    }
}

/// The kind of store `spec` names, read as `idem mcp-proxy --store` reads it.
fn store_kind(spec: &str) -> &'static str {
    if spec == "memory" {
        return "memory";
    }
    match spec.split_once("://").map(|(scheme, _)| scheme) {
        Some("redis" | "rediss") => "redis",
        Some("redis-cluster" | "rediss-cluster") => "redis-cluster",
        Some("postgres" | "postgresql") => "postgres",
        _ => "sqlite",
    }
}
