//! After a schedule: settle what can be settled (the faults stopped, every lease and settle
//! delay lapsed, a recovery pass, every call sent once more), then check the invariants
//! ARCHITECTURE.md states, per class.

use std::collections::{BTreeMap, BTreeSet};

use idem::dispatch::RecoveryOptions;
use idem::prelude::*;
use idem::record::{Outcome, RecordState};

use crate::world::Sim;
use crate::{ONCE, Plan, send, tool_call};

/// The violations of one schedule, each in words.
pub async fn settle_and_check(
    d: &Dispatcher,
    store: &dyn Store,
    sim: &Sim,
    plan: &Plan,
) -> Vec<String> {
    let run = RunContext::new("sim");
    for _ in 0..2 {
        let _ = d.recover(&RecoveryOptions::default()).await;
    }
    for call in &plan.calls {
        let _ = send(d, call).await;
    }
    let mut violations = Vec::new();
    let effects = sim.effects();
    // The same downstream key on every attempt of a call.
    let mut keys: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (call, key) in sim.attempts() {
        keys.entry(call).or_default().insert(key);
    }
    for (call, keys) in &keys {
        if keys.len() > 1 {
            violations.push(format!(
                "call {call} was attempted under {} keys: {keys:?}",
                keys.len()
            ));
        }
    }
    // Fences increase: each claim of a key is handed a fence above every earlier one.
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    for (key, fence) in sim.fences() {
        if let Some(before) = last.insert(key.clone(), fence)
            && fence <= before
        {
            violations.push(format!(
                "key {key} was handed fence {fence} after fence {before}"
            ));
        }
    }
    // No irreversible call ran without a person's approval.
    for call in plan
        .calls
        .iter()
        .filter(|c| c.tool == "sim_final" && !c.approved)
    {
        if effects.iter().any(|e| e.call == call.id) {
            violations.push(format!(
                "sim_final {}: applied, and nobody approved it",
                call.id
            ));
        }
    }
    for call in &plan.calls {
        let mine: Vec<_> = effects.iter().filter(|e| e.call == call.id).collect();
        // At most one effect per key where the class promises it (a non-idempotent write's
        // provider applies every request it gets).
        if ONCE.contains(&call.tool) && mine.len() > 1 {
            violations.push(format!(
                "{} {}: {} effects of a non-idempotent write",
                call.tool,
                call.id,
                mine.len()
            ));
        }
        let key = match d.record_key(&tool_call(call), &run) {
            Ok(Some(key)) => key,
            other => {
                violations.push(format!(
                    "{} {}: no record key ({other:?})",
                    call.tool, call.id
                ));
                continue;
            }
        };
        let record = match store.get(&key).await {
            Ok(record) => record,
            Err(e) => {
                violations.push(format!(
                    "{} {}: the store failed after the faults stopped: {e}",
                    call.tool, call.id
                ));
                continue;
            }
        };
        match &record {
            // No live claim left once every lease lapsed and every call was sent again.
            Some(r) if matches!(r.state, RecordState::InProgress { .. }) => {
                violations.push(format!(
                    "{} {}: a claim is still held after the settling",
                    call.tool, call.id
                ));
            }
            // No completed record without its effect.
            Some(r)
                if matches!(
                    r.state,
                    RecordState::Completed {
                        outcome: Outcome::Success(_),
                        ..
                    }
                ) && mine.is_empty() =>
            {
                violations.push(format!(
                    "{} {}: recorded as done, and no provider applied it",
                    call.tool, call.id
                ));
            }
            // No effect without a record or an Unknown.
            None if !mine.is_empty() => {
                violations.push(format!(
                    "{} {}: applied {} time(s), and nothing is recorded",
                    call.tool,
                    call.id,
                    mine.len()
                ));
            }
            _ => {}
        }
        sim.note(format!(
            "end {} {}: {} effect(s), record {:?}",
            call.tool,
            call.id,
            mine.len(),
            record.as_ref().map(|r| r.state.kind())
        ));
    }
    violations
}
