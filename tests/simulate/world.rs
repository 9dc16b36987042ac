//! The simulated world: the seeded generator every decision draws from, the clock the store
//! reads (simulated time, stepped forward as the seed says), the providers' ledger, the fences
//! the store handed out, and the tools, one per behaviour a class promises, whose bodies fail
//! as the seed says.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::prelude::*;
use idem::record::Timestamp;
use idem::store::Clock;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

/// Milliseconds since the epoch at which every simulation starts.
const EPOCH_MS: u64 = 1_800_000_000_000;

/// The store's clock: the simulation's time as the schedule last set it (one reading for
/// every host, so no host sees the store's clock behind another's), plus the steps forward
/// the seed made it take (an NTP step, a VM resumed), which the hosts' timers do not see.
#[derive(Debug)]
pub struct SimClock;

impl Clock for SimClock {
    fn now(&self) -> Timestamp {
        let ms = CURRENT.with(|c| {
            c.borrow().as_ref().map_or(0, |sim| {
                let s = sim.state();
                s.now_ms + s.jumped_ms
            })
        });
        Timestamp(EPOCH_MS + ms)
    }
}

/// One effect a provider applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    pub tool: String,
    pub call: String,
    pub key: String,
}

#[derive(Debug)]
struct State {
    rng: StdRng,
    faults: bool,
    effects: Vec<Effect>,
    /// (call, the key the body was given) per attempt.
    attempts: Vec<(String, String)>,
    /// (record key, fence) per claim the store reported acquired, in order.
    fences: Vec<(String, u64)>,
    /// The simulation's time when the schedule last stepped it.
    now_ms: u64,
    /// How far the store's clock was stepped forward.
    jumped_ms: u64,
    trace: Vec<String>,
}

/// The world of one seed, shared by the hosts (they all run on this thread).
#[derive(Debug, Clone)]
pub struct Sim(Arc<Mutex<State>>);

thread_local! {
    static CURRENT: std::cell::RefCell<Option<Sim>> = const { std::cell::RefCell::new(None) };
}

impl Sim {
    /// The world of `seed`, current on this thread (the tools find it there).
    pub fn new(seed: u64) -> Sim {
        let sim = Sim(Arc::new(Mutex::new(State {
            rng: StdRng::seed_from_u64(seed),
            faults: true,
            effects: Vec::new(),
            attempts: Vec::new(),
            fences: Vec::new(),
            now_ms: 0,
            jumped_ms: 0,
            trace: Vec::new(),
        })));
        CURRENT.with(|c| *c.borrow_mut() = Some(sim.clone()));
        sim
    }

    fn current() -> Sim {
        CURRENT
            .with(|c| c.borrow().clone())
            .expect("a simulation is running")
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A number in 0..100 from the seed's generator, or 100 (no fault) once faults stopped.
    pub fn roll(&self) -> u32 {
        let mut s = self.state();
        match s.faults {
            true => s.rng.random_range(0..100),
            false => 100,
        }
    }

    /// A duration up to `most` from the seed's generator.
    pub fn up_to(&self, most: Duration) -> Duration {
        let ms = most.as_millis() as u64;
        Duration::from_millis(self.state().rng.random_range(0..=ms))
    }

    /// No more faults: the settling phase.
    pub fn stop_faults(&self) {
        self.state().faults = false;
    }

    /// The simulation's time is `elapsed`: what the store's clock reads until the next step.
    pub fn at(&self, elapsed: Duration) {
        self.state().now_ms = elapsed.as_millis() as u64;
    }

    /// Step the store's clock forward by `by`.
    pub fn jump(&self, by: Duration) {
        let mut s = self.state();
        s.jumped_ms += by.as_millis() as u64;
        s.trace.push(format!("the clock jumped {by:?}"));
    }

    /// The store handed out `fence` for `key`.
    pub fn fenced(&self, key: &str, fence: u64) {
        self.state().fences.push((key.to_owned(), fence));
    }

    pub fn fences(&self) -> Vec<(String, u64)> {
        self.state().fences.clone()
    }

    pub fn note(&self, line: String) {
        self.state().trace.push(line);
    }

    pub fn trace(&self) -> Vec<String> {
        self.state().trace.clone()
    }

    pub fn effects(&self) -> Vec<Effect> {
        self.state().effects.clone()
    }

    pub fn attempts(&self) -> Vec<(String, String)> {
        self.state().attempts.clone()
    }

    /// Apply `tool`'s effect for `call` under `key`: a provider of an idempotent write
    /// honours the key (a repeated key applies nothing), any other applies every request.
    fn apply(&self, tool: &str, call: &str, key: &str, honours_keys: bool) {
        let mut s = self.state();
        if honours_keys && s.effects.iter().any(|e| e.key == key) {
            return;
        }
        s.trace.push(format!("applied {tool} {call} {key}"));
        s.effects.push(Effect {
            tool: tool.to_owned(),
            call: call.to_owned(),
            key: key.to_owned(),
        });
    }
}

/// One attempt at `tool`'s effect for `call`, failing as the seed says: after a delay
/// (sometimes past the lease), nothing applied (not applied, retryable), the effect then a
/// timeout (ambiguous), or the effect.
async fn effect(
    ctx: &ToolContext,
    tool: &str,
    call: &str,
    honours_keys: bool,
) -> Result<String, ToolError> {
    let sim = Sim::current();
    let key = ctx.downstream_key().to_string();
    {
        let mut s = sim.state();
        s.attempts
            .push((call.to_owned(), ctx.idempotency_key().to_owned()));
        s.trace.push(format!("attempt {tool} {call} {key}"));
    }
    match sim.roll() {
        0..4 => tokio::time::sleep(Duration::from_secs(35)).await,
        4..40 => tokio::time::sleep(sim.up_to(Duration::from_secs(2))).await,
        _ => {}
    }
    match sim.roll() {
        0..8 => Err(ToolError::not_applied(
            "the provider refused it before doing anything",
        )),
        8..13 => Err(ToolError::retryable("the provider was unreachable")),
        13..28 => {
            sim.apply(tool, call, &key, honours_keys);
            Err(ToolError::ambiguous("timed out after the request was sent"))
        }
        _ => {
            sim.apply(tool, call, &key, honours_keys);
            Ok(format!("{tool} {call}"))
        }
    }
}

/// An idempotent write whose provider honours its key.
#[tool(class = "idempotent_write", backoff_ms = 0, wait_secs = 2)]
async fn sim_idem(ctx: &ToolContext, call: String) -> Result<String, ToolError> {
    effect(ctx, "sim_idem", &call, true).await
}

/// An idempotent write of two journaled steps, each under its own key.
#[tool(class = "idempotent_write", backoff_ms = 0, wait_secs = 2)]
async fn sim_steps(ctx: &ToolContext, call: String) -> Result<serde_json::Value, ToolError> {
    let one: String = ctx
        .step("one", || effect(ctx, "sim_steps/one", &call, true))
        .await?;
    let two: String = ctx
        .step("two", || effect(ctx, "sim_steps/two", &call, true))
        .await?;
    Ok(json!([one, two]))
}

/// Whether `sim_once`'s effect happened, from its provider's ledger, by the call's key.
async fn sim_verify(ctx: &ToolContext) -> Result<Verified, ToolError> {
    let sim = Sim::current();
    let key = ctx.downstream_key().to_string();
    let found = sim.effects().into_iter().any(|e| e.key == key);
    sim.note(format!("verified {key}: {found}"));
    Ok(match found {
        true => Verified::Applied(json!("found by the verify hook")),
        false => Verified::NotApplied,
    })
}

/// A non-idempotent write with a verify hook.
#[tool(class = "non_idempotent_write", backoff_ms = 0, wait_secs = 2, verify = sim_verify, verify_after_secs = 5)]
async fn sim_once(ctx: &ToolContext, call: String) -> Result<String, ToolError> {
    effect(ctx, "sim_once", &call, false).await
}

/// A non-idempotent write without one.
#[tool(class = "non_idempotent_write", backoff_ms = 0, wait_secs = 2)]
async fn sim_plain(ctx: &ToolContext, call: String) -> Result<String, ToolError> {
    effect(ctx, "sim_plain", &call, false).await
}

/// An irreversible write: every call needs a person's approval, which the schedule gives to
/// some calls and not to others.
#[tool(class = "irreversible", backoff_ms = 0, wait_secs = 2)]
async fn sim_final(ctx: &ToolContext, call: String) -> Result<String, ToolError> {
    effect(ctx, "sim_final", &call, false).await
}

/// The key of `sim_ticket`'s call: the call's id, as a ticket's title would be.
fn ticket_key(args: &serde_json::Value) -> Option<String> {
    args.get("call")?.as_str().map(str::to_owned)
}

/// A non-idempotent write keyed by its arguments (a natural key): its calls carry no key, as
/// an MCP host sends them.
#[tool(class = "non_idempotent_write", backoff_ms = 0, wait_secs = 2, natural_key = ticket_key)]
async fn sim_ticket(ctx: &ToolContext, call: String) -> Result<String, ToolError> {
    effect(ctx, "sim_ticket", &call, false).await
}
