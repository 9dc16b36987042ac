//! MCP contenders taking turns, for the mcp and proxy rows: each round times every idem
//! contender right before or after each of its baselines (which goes first alternates, and
//! the pairs rotate), so each ratio compares two batches milliseconds apart on a machine
//! whose speed drifts over seconds. One JSON line per baseline and per (contender,
//! baseline): calls per second, median [p10–p90] over the contender's batches, and the
//! median [p10–p90] of the pair's per-round ratios.

use std::any::Any;
use std::time::{Duration, Instant};

use idem::mcp::{META_DEDUPLICATED, META_KEY};
use idem_bench::ARGUMENTS;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, JsonObject, MetaObject, RequestMetaObject,
};
use rmcp::service::RunningService;
use rmcp::{Peer, RoleClient};
use serde_json::Value;
use tokio::task::JoinSet;

use crate::paired::quantiles;

/// One contender: the client connected to its server, and the request it is sent.
pub struct Contender {
    pub name: &'static str,
    /// The contenders whose times next to this one's its ratios are to (none for a
    /// baseline).
    pub baselines: Vec<usize>,
    pub tool: &'static str,
    /// Each call carries a fresh `io.idem/idempotency-key` in `_meta`.
    pub keyed: bool,
    /// The result must be idem's first execution (`_meta` deduplicated: false).
    pub first_execution: bool,
    pub client: RunningService<RoleClient, ()>,
    /// What keeps the server running while the contender is measured (its half of an
    /// in-process pipe; nothing for a child process, which the client's transport owns).
    pub _serving: Option<Box<dyn Any>>,
}

/// What a batch took: wall-clock time, and the CPU time of this whole process (for the mcp
/// row: client, transport, server and the store's blocking threads), which a concurrent
/// build's preemption does not add to (nor an `fsync`'s wait).
#[derive(Debug, Clone, Copy)]
pub struct Took {
    pub wall: Duration,
    pub cpu: Duration,
}

/// Whether the process's CPU time covers the servers (in process) or the client alone (the
/// servers are child processes), and so whether to report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cpu {
    Report,
    ClientOnly,
}

/// `rounds` rounds of every pair, `calls` calls a batch with `concurrency` in flight, after
/// one warm-up batch each; one line per contender on standard output.
pub async fn take_turns(
    row: &str,
    contenders: &[Contender],
    rounds: usize,
    calls: usize,
    concurrency: usize,
    cpu: Cpu,
) -> Result<(), String> {
    // Keys `w-<call>`: buffers, connections and the stores' first pages, not measured.
    for c in contenders {
        c.batch("w", calls, concurrency).await?;
    }
    // Every batch each contender ran, and per (contender, baseline) its (baseline, own) pairs.
    let mut batches: Vec<Vec<Took>> = vec![Vec::new(); contenders.len()];
    let paired: Vec<(usize, usize)> = (0..contenders.len())
        .flat_map(|i| contenders[i].baselines.iter().map(move |&b| (i, b)))
        .collect();
    let mut pairs: Vec<Vec<(Took, Took)>> = vec![Vec::with_capacity(rounds); paired.len()];
    for round in 0..rounds {
        let keys = round.to_string();
        // Rotate the order so that no pair always runs right after another.
        for k in 0..paired.len() {
            let p = (k + round) % paired.len();
            let (i, b) = paired[p];
            let (first, second) = if round % 2 == 0 { (b, i) } else { (i, b) };
            // A contender paired with several baselines runs once per pair: its keys carry
            // the pair, so every call of a recording contender stays a first execution.
            let keys = format!("{keys}.{p}");
            let one = contenders[first].batch(&keys, calls, concurrency).await?;
            let other = contenders[second].batch(&keys, calls, concurrency).await?;
            let (base, own) = if first == b {
                (one, other)
            } else {
                (other, one)
            };
            batches[b].push(base);
            batches[i].push(own);
            pairs[p].push((base, own));
        }
    }
    let per_call = |d: Duration| d.as_nanos() as f64 / calls as f64;
    // Baselines first (ratio 1), then each pair.
    let lines = (0..contenders.len())
        .filter(|&i| contenders[i].baselines.is_empty())
        .map(|i| (i, i, None))
        .chain(
            paired
                .iter()
                .enumerate()
                .map(|(p, &(i, b))| (i, b, Some(p))),
        );
    for (i, b, p) in lines {
        let c = &contenders[i];
        // Calls per second relative to the baseline's: its time over this one's, per pair.
        let ratios = |of: fn(&Took) -> Duration| match p {
            None => (1.0, 1.0, 1.0),
            Some(p) => {
                let r = pairs[p]
                    .iter()
                    .map(|(b, o)| per_call(of(b)) / per_call(of(o)));
                quantiles(r.collect())
            }
        };
        let (lo, mid, hi) = ratios(|t| t.wall);
        let (slow, typical, fast) =
            quantiles(batches[i].iter().map(|t| 1e9 / per_call(t.wall)).collect());
        let mut line = format!(
            "{{\"row\":\"{row}\",\"contender\":\"{}\",\"baseline\":\"{}\",\"concurrency\":{concurrency},\"rounds\":{rounds},\"calls\":{calls},\"batches\":{},\"per_sec\":{typical:.0},\"per_sec_p10\":{slow:.0},\"per_sec_p90\":{fast:.0},\"ratio\":{mid:.3},\"ratio_p10\":{lo:.3},\"ratio_p90\":{hi:.3}",
            c.name,
            contenders[b].name,
            batches[i].len()
        );
        if cpu == Cpu::Report {
            let (cpu_lo, cpu_mid, cpu_hi) = ratios(|t| t.cpu);
            let (_, cpu_ns, _) = quantiles(batches[i].iter().map(|t| per_call(t.cpu)).collect());
            line += &format!(
                ",\"cpu_ns\":{cpu_ns:.0},\"cpu_ratio\":{cpu_mid:.3},\"cpu_ratio_p10\":{cpu_lo:.3},\"cpu_ratio_p90\":{cpu_hi:.3}"
            );
        }
        println!("{line}}}");
    }
    Ok(())
}

impl Contender {
    /// `calls` calls with `concurrency` in flight over the one connection, timed. Keys are
    /// `<round>-<call>`, fresh within the contender's store.
    pub async fn batch(
        &self,
        round: &str,
        calls: usize,
        concurrency: usize,
    ) -> Result<Took, String> {
        let mut lanes = JoinSet::new();
        let cpu = process_cpu()?;
        let start = Instant::now();
        for lane in 0..concurrency {
            let peer = self.client.peer().clone();
            let (tool, keyed, first) = (self.tool, self.keyed, self.first_execution);
            let keys: Vec<String> = (lane..calls)
                .step_by(concurrency)
                .map(|i| format!("{round}-{i}"))
                .collect();
            lanes.spawn(async move {
                for key in keys {
                    let result = call(&peer, tool, keyed.then_some(key.as_str())).await?;
                    check(&result, first)?;
                }
                Ok::<_, String>(())
            });
        }
        while let Some(lane) = lanes.join_next().await {
            lane.map_err(|e| e.to_string())??;
        }
        let wall = start.elapsed();
        Ok(Took {
            wall,
            cpu: process_cpu()?.saturating_sub(cpu),
        })
    }
}

/// The CPU time this process has used.
fn process_cpu() -> Result<Duration, String> {
    use nix::time::{ClockId, clock_gettime};
    let t = clock_gettime(ClockId::CLOCK_PROCESS_CPUTIME_ID).map_err(|e| e.to_string())?;
    Ok(Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32))
}

/// One `tools/call` of `tool` with the bench's arguments, parsed from the model's JSON text
/// as a client does, and `key` in `_meta`.
pub async fn call(
    peer: &Peer<RoleClient>,
    tool: &'static str,
    key: Option<&str>,
) -> Result<CallToolResult, String> {
    let arguments: JsonObject =
        serde_json::from_str(ARGUMENTS).map_err(|e| format!("ARGUMENTS: {e}"))?;
    let mut params = CallToolRequestParams::new(tool).with_arguments(arguments);
    if let Some(key) = key {
        let mut meta = MetaObject::new();
        meta.insert(META_KEY.into(), Value::from(key));
        params.meta = Some(RequestMetaObject::from(meta));
    }
    peer.call_tool(params)
        .await
        .map_err(|e| format!("{tool}: {e}"))
}

/// Every contender answers `{"result": "ok"}`; an idem write's answer is a first execution.
fn check(result: &CallToolResult, first_execution: bool) -> Result<(), String> {
    check_ok(result)?;
    if first_execution && deduplicated(result) != Some(false) {
        return Err(format!("not a first execution: {result:?}"));
    }
    Ok(())
}

/// The answer is the no-op tools' `{"result": "ok"}`, not an error.
pub(crate) fn check_ok(result: &CallToolResult) -> Result<(), String> {
    let ok = result.is_error != Some(true)
        && result
            .structured_content
            .as_ref()
            .and_then(|v| v.get("result"))
            .and_then(Value::as_str)
            == Some("ok");
    match ok {
        true => Ok(()),
        false => Err(format!("unexpected result: {result:?}")),
    }
}

/// What idem's answer says in `_meta`: whether it replayed a recorded outcome (`None` for
/// an answer that does not say, such as a plain server's).
pub(crate) fn deduplicated(result: &CallToolResult) -> Option<bool> {
    result
        .meta
        .as_ref()
        .and_then(|m| m.0.get(META_DEDUPLICATED))
        .and_then(Value::as_bool)
}

/// Arguments `at..` as numbers, each with its default; none may be 0.
pub fn numbers<const N: usize>(
    args: &[String],
    at: usize,
    defaults: [(usize, &str); N],
) -> Result<[usize; N], String> {
    let mut out = [0; N];
    for (k, (default, what)) in defaults.into_iter().enumerate() {
        out[k] = match args.get(at + k) {
            Some(s) => s.parse().map_err(|e| format!("{what}: {e}"))?,
            None => default,
        };
        if out[k] == 0 {
            return Err(format!("{what} must be at least 1"));
        }
    }
    Ok(out)
}
