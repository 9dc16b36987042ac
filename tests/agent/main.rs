//! Agent loops: provider shapes answered through the dispatcher, the key on HTTP requests and on each journaled step, and rig agents.
//!
//! One test binary, a module a theme (each was its own binary before).

#[path = "../support/mod.rs"]
mod support;

mod agent_loop;
mod http_key;
mod rig;
mod step_keys;
