//! The dispatcher: keys and their scoping, natural keys, leases, limits, the seams, settle delays and verify hooks, tenancy, replays, recovery.
//!
//! One test binary, a module a theme (each was its own binary before).

#[path = "../support/mod.rs"]
mod support;

mod key_scoping;
mod lease_heartbeat;
mod limits;
mod natural_keys;
mod recovery;
mod replay_without_approval;
mod seams;
mod settle_delay;
mod tenancy;
mod verify;
