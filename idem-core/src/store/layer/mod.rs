//! Store layers: code that runs around every operation of a store, without the store (or the
//! dispatcher) knowing.
//!
//! A [`Layer`] sees each [`Operation`] before the store does and decides what happens to it:
//! let it through, refuse it, or wrap the future that runs it. [`Layered`] puts a layer
//! around a store, and is a [`Store`](crate::store::Store) itself, so layers stack (the one
//! added last runs first). Two ship with idem:
//!
//! - [`Limits`]: what a store refuses to record (outcomes past its size limit, operator
//!   outcomes that are not JSON, optionally arguments past a size limit). Every store idem
//!   ships is its backend behind it ([`limits`] says why), so its refusals are written once.
//! - [`Trace`]: a `tracing` span per operation, with the operation's name and a short hash of
//!   its key, never its arguments or outcome.
//!
//! # Writing a layer
//!
//! A layer is a type with an [`around`](Layer::around) method. This one refuses writes while
//! an operator has the store in maintenance, and lets reads through:
//!
//! ```
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use idem::store::layer::{Layer, Operation, StoreFuture};
//! use idem::store::memory::MemoryStore;
//! use idem::store::{Store, StoreError};
//!
//! #[derive(Debug, Default)]
//! struct Maintenance(AtomicBool);
//!
//! impl Layer for Maintenance {
//!     fn around<'a, T: Send + 'static>(
//!         &'a self,
//!         operation: &Operation<'_>,
//!         next: impl FnOnce() -> StoreFuture<'a, T>,
//!     ) -> StoreFuture<'a, T> {
//!         let read = matches!(
//!             operation,
//!             Operation::Get { .. } | Operation::List { .. } | Operation::Now { .. }
//!         );
//!         if self.0.load(Ordering::Relaxed) && !read {
//!             let refused = StoreError::Unavailable("the store is in maintenance".into());
//!             return Box::pin(std::future::ready(Err(refused)));
//!         }
//!         next()
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let store = Maintenance::default().layer(MemoryStore::new());
//! store.get_layer().0.store(true, Ordering::Relaxed);
//! assert!(store.now().await.is_ok());
//! let key = idem::key::RecordKey::from_stored("k");
//! assert!(store.release(&key, 1).await.is_err_and(|e| e.is_unavailable()));
//! # }
//! ```
//!
//! To wrap the operation instead, call `next()` and return a future built around it, as
//! [`Trace`] does with a span. A layer cannot change an operation's inputs: a wrapper that
//! must (one confining operators to a tenant, say) is a [`Store`](crate::store::Store) of its
//! own, like [`TenantStore`](crate::store::tenant::TenantStore).
//!
//! Layers are for what watches or guards a store. The order in which the dispatcher asks a
//! store (claim before execute, every holder write fenced) is not theirs to change.

mod layered;
pub mod limits;
pub mod trace;

pub use layered::{Layer, Layered, Operation, StoreFuture};
pub use limits::{Limited, Limits};
pub use trace::{Trace, Traced};
