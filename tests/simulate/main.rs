//! Deterministic simulation of the dispatcher over the in-memory store: one seed decides the
//! workers and duplicate callers, the tools and their classes, when each call is sent, the faults
//! of every store operation (an error before it, a reply lost after it committed, a delay) and of
//! every body (an effect then a timeout, nothing applied, a delay past the lease), which workers
//! crash (everything but the store is lost), when the store's clock steps forward (within the
//! documented bound: past settle delays, never past a renewed lease), and which calls of the
//! irreversible tool a person approves (every duplicate sender approves again). The schedule runs
//! in turmoil: every worker is a host on one thread, in simulated time, so a seed replays exactly.
//! After each run the invariants are checked (`check.rs`).
//!
//! `scripts/simulate [SEEDS] [--seed N]` runs any number; `cargo test` runs a budget
//! (`IDEM_SIM_SEEDS`, default [`CI_SEEDS`]). The simulator is tested too: with a defect
//! planted in the store (`faults::Defect`), it must report a violation.

mod check;
mod faults;
#[path = "../support/hooked_store.rs"]
mod hooked_store;
mod world;

use std::sync::Arc;
use std::time::Duration;

use idem::approval::ApprovalKeys;
use idem::prelude::*;
use idem::record::Timestamp;
use idem::store::{Clock, MemoryStore};
use idem::{ApprovalKey, Approver};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use faults::{Defect, faulty};
use world::{Sim, SimClock};

/// Seeds `cargo test` runs unless `IDEM_SIM_SEEDS` says otherwise.
const CI_SEEDS: u64 = 200;

/// The tools of the simulation, one per behaviour a class promises.
const TOOLS: [&str; 6] = [
    "sim_idem",
    "sim_steps",
    "sim_once",
    "sim_plain",
    "sim_final",
    "sim_ticket",
];

/// The tools that promise one effect per call: their providers apply every request.
pub const ONCE: [&str; 4] = ["sim_once", "sim_plain", "sim_final", "sim_ticket"];

/// One call the schedule sends, perhaps several times, from several workers.
#[derive(Debug, Clone)]
pub struct Planned {
    /// The tool it calls.
    pub tool: &'static str,
    /// Its logical id (in the arguments) and explicit key.
    pub id: String,
    /// (worker, when) of each send.
    pub sends: Vec<(usize, Duration)>,
    /// Whether a person approves it, if its tool asks.
    pub approved: bool,
}

/// What one seed decided.
#[derive(Debug, Clone)]
pub struct Plan {
    /// How many workers send calls.
    pub workers: usize,
    /// The calls, in the order they were planned.
    pub calls: Vec<Planned>,
    /// Workers that crash, and when.
    pub crashes: Vec<(usize, Duration)>,
    /// When the store's clock steps forward, and by how much.
    pub jumps: Vec<(Duration, Duration)>,
}

impl Plan {
    fn of(seed: u64) -> Plan {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x0005_eed0_f1de);
        let workers = rng.random_range(2..=4);
        let calls = (0..rng.random_range(2..=6))
            .map(|i| Planned {
                tool: TOOLS[rng.random_range(0..TOOLS.len())],
                id: format!("c{i}"),
                sends: (0..rng.random_range(1..=3))
                    .map(|_| {
                        (
                            rng.random_range(0..workers),
                            Duration::from_millis(rng.random_range(0..3_000)),
                        )
                    })
                    .collect(),
                approved: rng.random_bool(0.7),
            })
            .collect();
        let mut crashes = Vec::new();
        for w in 0..workers {
            if rng.random_bool(0.25) {
                crashes.push((w, Duration::from_millis(rng.random_range(0..4_000))));
            }
        }
        let jumps = (0..rng.random_range(0..=2))
            .map(|_| {
                (
                    Duration::from_millis(rng.random_range(0..4_000)),
                    // Within the bound ARCHITECTURE.md states: under two thirds of the
                    // shortest lease (30 s) in all.
                    Duration::from_millis(rng.random_range(500..9_500)),
                )
            })
            .collect();
        Plan {
            workers,
            calls,
            crashes,
            jumps,
        }
    }
}

/// The outcome of one seed: the violations found, and a trace of what the providers saw
/// (equal for equal seeds).
pub struct Ran {
    /// Each invariant the run broke, in words.
    pub violations: Vec<String>,
    /// What the providers saw, in order.
    pub trace: Vec<String>,
}

/// The in-process stores a schedule runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The memory store.
    Memory,
    /// A fresh file, at `synchronous = NORMAL` so that every operation runs inline on the
    /// simulation's one thread (at `FULL` a write goes to the blocking pool, whose threads
    /// the simulation does not schedule).
    Sqlite,
}

impl Kind {
    fn open(self, seed: u64) -> (Arc<dyn Store>, Option<std::path::PathBuf>) {
        let clock = Arc::new(SimClock);
        match self {
            Kind::Memory => (Arc::new(MemoryStore::new().with_clock(clock)), None),
            Kind::Sqlite => {
                let path =
                    std::env::temp_dir().join(format!("idem-sim-{}-{seed}.db", std::process::id()));
                let store = idem::store::SqliteStore::open(&path)
                    .and_then(|s| s.with_synchronous(idem::store::Synchronous::Normal))
                    .and_then(|s| s.with_clock(clock))
                    .expect("a SQLite store for the simulation");
                (Arc::new(store), Some(path))
            }
        }
    }

    fn of_env() -> Vec<Kind> {
        match std::env::var("IDEM_SIM_STORE").as_deref() {
            Ok("memory") => vec![Kind::Memory],
            Ok("sqlite") => vec![Kind::Sqlite],
            _ => vec![Kind::Memory, Kind::Sqlite],
        }
    }
}

/// Run one seed on the memory store, with `defect` planted in it.
pub fn run(seed: u64, defect: Defect) -> Ran {
    run_on(Kind::Memory, seed, defect)
}

/// Run one seed on a store of `kind`, with `defect` planted in it.
pub fn run_on(kind: Kind, seed: u64, defect: Defect) -> Ran {
    let (memory, file) = kind.open(seed);
    let ran = schedule(seed, defect, memory);
    if let Some(path) = file {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
    ran
}

fn schedule(seed: u64, defect: Defect, memory: Arc<dyn Store>) -> Ran {
    let plan = Plan::of(seed);
    let sim = Sim::new(seed);
    let store: Arc<dyn Store> = Arc::new(faulty(memory.clone(), sim.clone(), defect));
    let keys = ApprovalKeys::new([approval_key()]);
    let dispatcher = Dispatcher::approving(Registry::linked().expect("registry"), store, keys)
        .expect("dispatcher");
    let mut turmoil = turmoil::Builder::new()
        .rng_seed(seed)
        .tick_duration(Duration::from_millis(10))
        .simulation_duration(Duration::from_secs(600))
        .build();
    for w in 0..plan.workers {
        let mine: Vec<(Duration, Planned)> = plan
            .calls
            .iter()
            .flat_map(|c| {
                c.sends
                    .iter()
                    .filter(|(worker, _)| *worker == w)
                    .map(|(_, at)| (*at, c.clone()))
            })
            .collect();
        let d = dispatcher.clone();
        // A host, so that it can crash: everything of it but the store is lost.
        turmoil.host(format!("w{w}"), move || {
            let (d, mut sends) = (d.clone(), mine.clone());
            async move {
                sends.sort_by_key(|(at, c)| (*at, c.id.clone()));
                let started = tokio::time::Instant::now();
                let tasks: Vec<_> = sends
                    .into_iter()
                    .map(|(at, call)| {
                        let d = d.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep_until(started + at).await;
                            let _ = send(&d, &call).await;
                        })
                    })
                    .collect();
                for t in tasks {
                    let _ = t.await;
                }
                Ok(())
            }
        });
    }
    let settled = Arc::new(std::sync::Mutex::new(None));
    {
        let (d, sim, plan, settled) = (
            dispatcher.clone(),
            sim.clone(),
            plan.clone(),
            settled.clone(),
        );
        let memory = memory.clone();
        turmoil.client("checker", async move {
            // The workers' time, then the faults stop and every lease and settle delay lapses.
            tokio::time::sleep(Duration::from_secs(20)).await;
            sim.stop_faults();
            tokio::time::sleep(Duration::from_secs(30)).await;
            let found = check::settle_and_check(&d, &*memory, &sim, &plan).await;
            *settled.lock().unwrap() = Some(found);
            Ok(())
        });
    }
    let mut crashes = plan.crashes.clone();
    crashes.sort_by_key(|(_, at)| *at);
    let mut jumps = plan.jumps.clone();
    jumps.sort();
    let mut failure = None;
    loop {
        let elapsed = turmoil.elapsed();
        sim.at(elapsed);
        while let Some((w, at)) = crashes.first().copied() {
            if at > elapsed {
                break;
            }
            crashes.remove(0);
            if turmoil.is_host_running(format!("w{w}")) {
                turmoil.crash(format!("w{w}"));
            }
        }
        while jumps.first().is_some_and(|(at, _)| *at <= elapsed) {
            let (_, by) = jumps.remove(0);
            sim.jump(by);
        }
        match turmoil.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                failure = Some(e.to_string());
                break;
            }
        }
    }
    let mut violations = settled.lock().unwrap().take().unwrap_or_else(|| {
        vec![format!(
            "the schedule did not finish: {}",
            failure.unwrap_or_else(|| "no result".into())
        )]
    });
    violations.sort();
    Ran {
        violations,
        trace: sim.trace(),
    }
}

/// The call a planned send dispatches: with an explicit key, but for the natural-key tool,
/// whose calls carry none.
fn tool_call(call: &Planned) -> ToolCall {
    let sent = ToolCall::new(call.tool, json!({"call": call.id}));
    match call.tool {
        "sim_ticket" => sent,
        _ => sent.with_key(format!("sim-{}", call.id)),
    }
}

/// The key approvals are signed with.
fn approval_key() -> ApprovalKey {
    ApprovalKey::new("sim-1", *b"idem-simulation-approval-key-32b").expect("an approval key")
}

/// Send `call` as its worker does: when its tool asks for approval and the schedule has the
/// person approve it, approve (a fresh approval for every send) and send it again.
pub async fn send(d: &Dispatcher, call: &Planned) -> Result<Dispatched, DispatchError> {
    let run = RunContext::new("sim");
    match d.dispatch(&tool_call(call), &run).await {
        Err(DispatchError::ApprovalRequired { request }) if call.approved => {
            // Valid for an hour of the store's clock (the simulation's, not this machine's).
            let until = Timestamp(SimClock.now().0 + 3_600_000);
            let approval =
                Approver::new("person@sim", approval_key()).approve_until(&request, until);
            d.dispatch(&tool_call(call), &run.approve(approval)).await
        }
        other => other,
    }
}

/// Run `seeds` seeds from `first` on a store of `kind` (stopping at the first seed with a
/// violation when `first_only`): how many ran, and the violations, each with its seed.
pub fn run_many(
    kind: Kind,
    first: u64,
    seeds: u64,
    defect: Defect,
    first_only: bool,
) -> (u64, Vec<(u64, String)>) {
    let mut found = Vec::new();
    for (ran, seed) in (first..first + seeds).enumerate() {
        for v in run_on(kind, seed, defect).violations {
            found.push((seed, v));
        }
        if first_only && !found.is_empty() {
            return (ran as u64 + 1, found);
        }
    }
    (seeds, found)
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The simulation: `IDEM_SIM_SEEDS` schedules from `IDEM_SIM_FIRST` (or the one seed
/// `IDEM_SIM_SEED`); the last line says `N schedules, V violations`, and each violation its
/// seed and the command that replays it.
#[test]
fn simulate() {
    let (first, seeds) = match env_u64("IDEM_SIM_SEED") {
        Some(seed) => (seed, 1),
        None => (
            env_u64("IDEM_SIM_FIRST").unwrap_or(0),
            env_u64("IDEM_SIM_SEEDS").unwrap_or(CI_SEEDS),
        ),
    };
    let (mut ran, mut violations) = (0, Vec::new());
    for kind in Kind::of_env() {
        let store = format!("{kind:?}").to_lowercase();
        if seeds == 1 && std::env::var_os("IDEM_SIM_TRACE").is_some() {
            println!("seed {first} on {store}: {:?}", Plan::of(first));
            for line in run_on(kind, first, Defect::None).trace {
                println!("  {line}");
            }
        }
        let (n, found) = run_many(kind, first, seeds, Defect::None, false);
        for (seed, v) in &found {
            println!(
                "seed {seed} on {store}: {v}\n  replay: scripts/simulate --store {store} --seed {seed}"
            );
        }
        println!("{store}: {n} schedules, {} violations", found.len());
        ran += n;
        violations.extend(found);
    }
    println!("{ran} schedules, {} violations", violations.len());
    assert!(violations.is_empty(), "{} violations", violations.len());
}

#[test]
fn a_seed_replays_exactly() {
    for kind in [Kind::Memory, Kind::Sqlite] {
        for seed in [3, 17, 42] {
            let (a, b) = (
                run_on(kind, seed, Defect::None),
                run_on(kind, seed, Defect::None),
            );
            assert!(!a.trace.is_empty(), "seed {seed} did something");
            assert_eq!(a.trace, b.trace, "seed {seed} on {kind:?} replays exactly");
        }
    }
}

#[test]
fn a_live_holders_fence_handed_out_again_is_caught() {
    let (ran, violations) = run_many(Kind::Memory, 1_000, CI_SEEDS, Defect::TakeLiveClaims, true);
    assert!(
        !violations.is_empty(),
        "the planted defect went unseen in {ran} schedules"
    );
    println!("caught after {ran} schedule(s): {violations:?}");
}

#[test]
fn a_claim_lost_and_reported_as_acquired_is_caught() {
    let (ran, violations) = run_many(Kind::Memory, 2_000, CI_SEEDS, Defect::LoseClaims, true);
    assert!(
        !violations.is_empty(),
        "the planted defect went unseen in {ran} schedules"
    );
    println!("caught after {ran} schedule(s): {violations:?}");
}
