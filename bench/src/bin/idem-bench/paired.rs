//! Row 1 again, paired: the contenders take turns in short batches, and each round gives one
//! ratio to the floor measured a few milliseconds earlier. On a shared machine whose speed
//! drifts over seconds (criterion measures each contender for several seconds, one after the
//! other), the median of these per-round ratios is the steadier figure.
//!
//! `idem-bench paired [rounds] [calls per batch]`: one JSON line per mode and contender.

use std::hint::black_box;
use std::time::Instant;

use idem_bench::{
    ARGUMENTS, CLASSES, Floor, call, mcp, recorded, time_floor_first, time_idem_first,
};

/// A contender's batch: `calls` calls, timed; `round` keeps first-execution keys unique.
enum Contender {
    Floor,
    Rmcp,
    Idem(&'static str),
}

impl Contender {
    fn name(&self) -> String {
        match self {
            Contender::Floor => "floor".into(),
            Contender::Rmcp => "rmcp".into(),
            Contender::Idem(class) => format!("idem/{class}"),
        }
    }
}

pub fn run(args: &[String]) -> Result<(), String> {
    let number = |i: usize, default: usize, what: &str| {
        args.get(i)
            .map(|s| s.parse().map_err(|e| format!("{what}: {e}")))
            .transpose()
            .map(|n| n.unwrap_or(default))
    };
    let rounds = number(0, 300, "rounds")?;
    let calls = number(1, 400, "calls per batch")?;
    if rounds == 0 || calls == 0 {
        return Err("rounds and calls per batch must be at least 1".into());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let mut direct = mcp::Direct::new();
        for mode in ["first", "replay"] {
            // rmcp has no replay: in both modes it is its plain dispatch, the bar of "no
            // slower than rmcp".
            let mut contenders = vec![Contender::Floor, Contender::Rmcp];
            for (class, _) in CLASSES {
                if mode == "first" || class != "read" {
                    contenders.push(Contender::Idem(class));
                }
            }
            // ns per call, per contender, per round.
            let mut times = vec![Vec::with_capacity(rounds); contenders.len()];
            // Replays repeat one recorded call per contender, recorded before the rounds.
            let mut replaying = Vec::new();
            for c in &contenders {
                replaying.push(match (mode, c) {
                    ("replay", Contender::Idem(class)) => Some(recorded(tool_of(class)).await),
                    _ => None,
                });
            }
            let mut floor = Floor::new();
            floor.first("call_0000000000", ARGUMENTS);
            for round in 0..rounds {
                // Rotate the order so that no contender always runs right after another.
                for k in 0..contenders.len() {
                    let i = (k + round) % contenders.len();
                    let ns = match (&contenders[i], &replaying[i]) {
                        (Contender::Floor, _) if mode == "first" => time_floor_first(&ids(round, calls)),
                        (Contender::Floor, _) => {
                            let start = Instant::now();
                            for _ in 0..calls {
                                black_box(floor.replay(black_box("call_0000000000"), ARGUMENTS));
                            }
                            start.elapsed()
                        }
                        (Contender::Rmcp, _) => {
                            let start = Instant::now();
                            for _ in 0..calls {
                                black_box(direct.call().await);
                            }
                            start.elapsed()
                        }
                        (Contender::Idem(class), None) => {
                            time_idem_first(tool_of(class), &ids(round, calls)).await
                        }
                        (Contender::Idem(class), Some((d, run))) => {
                            let tool = tool_of(class);
                            let start = Instant::now();
                            for _ in 0..calls {
                                let out = d
                                    .dispatch(&call(tool, "call_0000000000"), run)
                                    .await
                                    .map_err(|e| e.to_string())?;
                                debug_assert!(out.deduplicated);
                                black_box(out);
                            }
                            start.elapsed()
                        }
                    };
                    times[i].push(ns.as_nanos() as f64 / calls as f64);
                }
            }
            let per_round = |ns: &[f64], base: &[f64]| {
                quantiles(ns.iter().zip(base).map(|(a, b)| a / b).collect())
            };
            for (c, ns) in contenders.iter().zip(&times) {
                let (lo, mid, hi) = per_round(ns, &times[0]);
                let (_, rmcp, _) = per_round(ns, &times[1]);
                let (ns_lo, ns_mid, ns_hi) = quantiles(ns.clone());
                println!(
                    "{{\"row\":\"paired\",\"mode\":\"{mode}\",\"contender\":\"{}\",\"rounds\":{rounds},\"calls\":{calls},\"ns\":{ns_mid:.0},\"ns_p10\":{ns_lo:.0},\"ns_p90\":{ns_hi:.0},\"ratio\":{mid:.3},\"ratio_p10\":{lo:.3},\"ratio_p90\":{hi:.3},\"ratio_rmcp\":{rmcp:.3}}}",
                    c.name()
                );
            }
        }
        Ok(())
    })
}

fn tool_of(class: &str) -> &'static str {
    CLASSES
        .iter()
        .find(|(c, _)| *c == class)
        .map(|(_, t)| *t)
        .expect("a class of CLASSES")
}

fn ids(round: usize, calls: usize) -> Vec<String> {
    (0..calls)
        .map(|i| format!("call_{round:05}_{i:06}"))
        .collect()
}

/// The 10th percentile, the median and the 90th percentile.
pub(crate) fn quantiles(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.1), at(0.5), at(0.9))
}
