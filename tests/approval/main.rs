//! Approvals: signed approvals carried by a run, pending approvals decided in the store, and operators who decide without the agent's tools.
//!
//! One test binary, a module a theme (each was its own binary before).

#[path = "../support/mod.rs"]
mod support;

mod approvals;
mod four_eyes;
mod grants;
mod operator_approvals;
mod pending_approvals;
mod policy_binding;
mod refused_call;
