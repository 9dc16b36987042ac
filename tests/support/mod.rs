//! What the facade's tests share, one file per helper:
//!
//! - `dispatcher`: a dispatcher of one tool or of the linked `#[tool]`s; approving a call;
//! - `providers`: fake downstream providers as tools (always timing out, a mail provider);
//! - `tally`: counts of what probe tools did, by label;
//! - `hooked_store`: a store that calls a test's hook around the real one's operations;
//! - `fault_proxy`: a TCP proxy that delays, drops or cuts traffic to a server;
//! - `ledger`: the downstream service of the multi-process proofs, a ledger file;
//! - `child`: this test binary run again as a child process, and its result lines;
//! - `stores`: the durable stores by name, for those children;
//! - `services`, `redis_keys`, `postgres_schemas`: the shared Redis and PostgreSQL servers
//!   (URLs, skipping or failing without them, unique names, and cleaning up after a test);
//! - `redis_cluster`: a private Redis Cluster, its layout, its nodes killed and started again;
//! - `claims`: a claim that must acquire, straight on a store;
//! - `mcp_http`: raw Streamable HTTP requests to an MCP server, with or without credentials;
//! - `stripe`: a local HTTP API that keeps Stripe's idempotency rules and loses answers.
//!
//! `claims`, `services`, `redis_keys`, `redis_cluster` and `postgres_schemas` are idem-core's
//! own test support files, included as they are: they need only the standard library and
//! `idem_core`, a dependency of the facade, so each of these helpers is written once for the
//! whole workspace.

// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

pub mod child;
#[path = "../../idem-core/tests/support/claims.rs"]
pub mod claims;
pub mod dispatcher;
pub mod fault_proxy;
pub mod hooked_store;
pub mod ledger;
#[cfg(feature = "mcp")]
pub mod mcp_http;
#[cfg(feature = "postgres")]
#[path = "../../idem-core/tests/support/postgres_schemas.rs"]
pub mod postgres_schemas;
pub mod providers;
#[cfg(feature = "redis")]
#[path = "../../idem-core/tests/support/redis_cluster.rs"]
pub mod redis_cluster;
#[path = "../../idem-core/tests/support/redis_keys.rs"]
pub mod redis_keys;
#[path = "../../idem-core/tests/support/services.rs"]
pub mod services;
pub mod stores;
#[cfg(feature = "reqwest")]
pub mod stripe;
pub mod tally;
