//! What the store tests share, one file per helper:
//!
//! - `services`: the shared servers' URLs, skipping or failing without them, unique names;
//! - `redis_keys` and `postgres_schemas`: the clean-up of what a test wrote on them;
//! - `redis_server`: a private `redis-server` for what the shared one must never undergo;
//! - `redis_cluster`: a private Redis Cluster (`scripts/redis-cluster`), its layout, its nodes
//!   killed and started again;
//! - `claims`: the claim every backend's tests make, and acquiring it.
//!
//! `services`, `redis_keys`, `redis_cluster` and `postgres_schemas` use only the standard
//! library and `idem_core`, so the facade's `tests/support/mod.rs` includes those files as
//! they are.

// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

pub mod claims;
#[cfg(feature = "postgres")]
pub mod postgres_schemas;
#[cfg(feature = "redis")]
pub mod redis_cluster;
pub mod redis_keys;
#[cfg(feature = "redis")]
pub mod redis_server;
pub mod services;
