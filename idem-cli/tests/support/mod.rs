//! The workspace's test helpers these suites use: the facade's (`tests/support`) and
//! idem-core's own, included as they are, so that each is written once.

// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

#[path = "../../../tests/support/dispatcher.rs"]
pub mod dispatcher;
#[cfg(feature = "postgres")]
#[path = "../../../idem-core/tests/support/postgres_schemas.rs"]
pub mod postgres_schemas;
#[path = "../../../idem-core/tests/support/redis_keys.rs"]
pub mod redis_keys;
#[path = "../../../idem-core/tests/support/services.rs"]
pub mod services;
#[path = "../../../tests/support/tally.rs"]
pub mod tally;
