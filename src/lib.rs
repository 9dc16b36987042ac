//! # idem
//!
//! Exactly-once effects for the tools LLM agents call.
//!
//! Agents execute tools *at least once*: a timeout after the provider accepted the request,
//! a crash between the effect and the record, a retry on an ambiguous error, the model
//! calling again "to be sure", a replay from a checkpoint. idem makes each effect happen
//! once where that is promised, and makes every tool's side-effect policy impossible to
//! forget: `#[tool]` does not compile without a `class`, and the dispatcher applies it.
//!
//! ```
//! use std::sync::Arc;
//! use idem::prelude::*;
//!
//! /// Set a ticket's status.
//! #[tool(class = "idempotent_write")]
//! async fn set_status(
//!     ctx: &ToolContext,
//!     /// The ticket.
//!     ticket: u64,
//!     /// The new status.
//!     status: String,
//! ) -> Result<String, ToolError> {
//!     // Hand ctx.idempotency_key() to the downstream system.
//!     Ok(format!("#{ticket} is {status} ({})", ctx.idempotency_key()))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let dispatcher = Dispatcher::new(Registry::linked().unwrap(), Arc::new(MemoryStore::new())).unwrap();
//! let call = ToolCall::new("set_status", serde_json::json!({"ticket": 7, "status": "open"}))
//!     .with_call_id("call_1");
//! let run = RunContext::new("tenant-a");
//! let first = dispatcher.dispatch(&call, &run).await.unwrap();
//! let retry = dispatcher.dispatch(&call, &run).await.unwrap();
//! assert!(retry.deduplicated);
//! assert_eq!(first.output_json, retry.output_json);
//! # }
//! ```
//!
//! ## `#[tool]` keys
//!
//! | key | meaning | default |
//! |---|---|---|
//! | `class` | **required**: `read`, `idempotent_write`, `non_idempotent_write` or `irreversible` | none |
//! | `name` | the name the model calls (`^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$`) | the function's name |
//! | `description` | what the model reads to choose the tool | the doc comment, as rustdoc shows it (`#[doc = include_str!(..)]` included) |
//! | `ttl_secs` | how long a completed call is replayed | 86400 |
//! | `lease_secs` | how long a holder's lease lasts (renewed every third of it) | 30 |
//! | `max_attempts` | attempts in total for classes that retry (capped at 2 for `non_idempotent_write`, 1 for `irreversible`) | 3 |
//! | `wait_secs` | how long a concurrent duplicate waits for the holder | 10 |
//! | `backoff_ms` | first retry delay, doubled per attempt with jitter, at most 5 s | 100 |
//! | `open_world` | MCP `openWorldHint` | false |
//! | `scopes` | scopes the principal must hold, e.g. `["mail:send"]` | none |
//! | `natural_key` | a `fn(&serde_json::Value) -> Option<String>` computing the key from the normalised arguments; it takes precedence over call ids, so it must be a pure function of the arguments (no clock, no randomness) | none |
//! | `verify` | an `async fn(&ToolContext) -> Result<Verified, ToolError>` that asks the downstream system, by `ctx.idempotency_key()` (and `ctx.arguments()`, the call's arguments), whether an Unknown call's effect happened; the dispatcher then replays it (applied) or runs it (not applied) instead of refusing | none |
//! | `verify_after_secs` | the settle delay: how long after a record became Unknown (store clock) its `verify` hook is first asked (for an orphan, at least one lease); until then a duplicate gets `OutcomeUnknown` with `retry_after` | 300 |
//! | `on_key_reuse` | with a `natural_key`, what a call under it with other arguments gets: `"replay"` (find-or-create: the recorded outcome, `deduplicated`, with `differing_arguments` naming what differs) or `"reject"` (`KeyReused`, saying the entity exists); a key of any other source reused with other arguments is always `KeyReused` | `"replay"` |
//! | `version` | the handler's version, a string of 1 to 64 characters without surrounding spaces or control characters, recorded with every call: change it when a deploy changes what the body does, so that a verify hook is never asked about an Unknown call the other version made (the rules: [`contract`]) | `"1"` |
//! | `authorize` | a `fn(&A, &RunContext) -> Result<(), String>`, `A` a `Deserialize` type of the arguments it reads: checked before anything is recorded or run; `Err` is the refusal the model reads (`not_authorized`, nothing recorded), and arguments `A` cannot read are refused | none |
//! | `authorize_async` | an `async fn(ToolContext, A) -> Result<(), String>`, `A` as for `authorize`: a check that may read what the call acts on (whose order it is), asked by each dispatch after `authorize` and before the call is keyed, with a context of the run (`ctx.acting_for()`, `ctx.limit(..)`); `Err` is the refusal (`not_authorized`, nothing recorded or run), and a check that cannot read must refuse ([guide](guide::controls)) | none |
//! | `approve_when` | a `fn(&A, &RunContext) -> bool`, `A` as for `authorize`: the calls it returns `true` for (and those whose arguments `A` cannot read) need a person's signed approval, as every call of an `irreversible` tool does (a compile error on one); the tool then needs a dispatcher with approval keys ([`Dispatcher::approving`]): [`Dispatcher::new`] refuses its registry at start-up | none |
//! | `precondition` | an `async fn(ToolContext, A) -> Result<(), ToolError>`, `A` as for `authorize`: runs after the claim, before the body starts, and is not asked again once the call is under way (its pass journaled, or a step of its own) ([guide](guide::controls)) | none |
//! | `compensate` | an `async fn(ToolContext, Undo) -> Result<(), ToolError>` ([`Undo`](tool::Undo)): undoes one completed step (`ctx.step`) when the call fails for good after it, each step once, in reverse ([guide](guide::controls)) | none |
//! | `limits` | a `fn() -> Vec<Limit>` ([`Limit`](tool::Limit)): the tool's limits across a run's calls (calls per run, a sum per run or per tenant within a window, apart per destination), over which a call is refused or sent to a person ([guide](guide::controls)) | none |
//! | `escalate` | `"failures"`, `"unknown"` or `"failures_and_unknown"` ([`Escalate`](tool::Escalate)): which calls that end badly wait for a person's decision as a case instead of being answered and forgotten ([guide](guide::controls)) | none |
//! | `crate` | the path of this crate, e.g. `"::my_idem"`: needed only where the macro cannot read the rename in the crate's `Cargo.toml` (`my_idem = { package = "idem-tools", .. }` is found) | `"::idem"` |
//!
//! A `read` tool records nothing and makes no effect, so `ttl_secs`, `lease_secs`,
//! `wait_secs`, `natural_key`, `on_key_reuse`, `verify`, `verify_after_secs`, `version`,
//! `approve_when`, `precondition` and `compensate` on one are compile errors, as is
//! `approve_when` on an `irreversible` tool, a negative number or a duration over ten years.
//! The functions named by `natural_key`, `verify`, `authorize`, `approve_when`,
//! `precondition` and `compensate` are paths (`approve_when = rules::large_refund`); one of
//! the wrong shape is a compile error naming the shape it needs.
//!
//! The control keys, each with the shape the macro accepts:
//!
//! ```rust,standalone_crate
//! use idem::prelude::*;
//! use idem::tool::Undo;
//! use serde::Deserialize;
//!
//! /// The arguments the controls read (others are ignored).
//! #[derive(Deserialize)]
//! struct Refund {
//!     customer_id: String,
//!     amount: u64,
//! }
//!
//! fn own_customer(args: &Refund, run: &RunContext) -> Result<(), String> {
//!     match run.acting_for.as_deref() == Some(args.customer_id.as_str()) {
//!         true => Ok(()),
//!         false => Err("only the customer this run acts for".into()),
//!     }
//! }
//!
//! fn large(args: &Refund, _run: &RunContext) -> bool {
//!     args.amount > 50
//! }
//!
//! async fn order_open(_ctx: ToolContext, _args: Refund) -> Result<(), ToolError> {
//!     Ok(())
//! }
//!
//! async fn cancel(_ctx: ToolContext, _undo: Undo) -> Result<(), ToolError> {
//!     Ok(())
//! }
//!
//! /// Refund part of an order.
//! #[tool(
//!     class = "non_idempotent_write",
//!     version = "2",
//!     authorize = own_customer,
//!     approve_when = large,
//!     precondition = order_open,
//!     compensate = cancel
//! )]
//! async fn refund(customer_id: String, amount: u64) -> Result<String, ToolError> {
//!     Ok(format!("refunded {amount} to {customer_id}"))
//! }
//!
//! let registry = Registry::builder().tool::<refund>().build().unwrap();
//! let run = RunContext::new("shop").acting_for("cus_a");
//! let tool = registry.get("refund").unwrap();
//! assert!(tool.needs_approval(&serde_json::json!({"customer_id": "cus_a", "amount": 80}), &run));
//! assert!(!tool.needs_approval(&serde_json::json!({"customer_id": "cus_a", "amount": 20}), &run));
//! ```
//!
//! The function may be `async` or not, takes named parameters of types that implement
//! `Deserialize`, `Serialize` and `JsonSchema` (`Option<T>` ones are optional), at most one
//! `&ToolContext` (spelled so: the macro recognises the context by that name), and returns
//! `Result<T, E>` with `T: Serialize + JsonSchema` and `E: Into<ToolError>`, or an alias of
//! one whose name ends in `Result` (`type ToolResult<T> = Result<T, ToolError>`). Its future
//! must be `Send`. Doc comments on parameters become their descriptions; a parameter cannot
//! carry `#[cfg]` (the schema must not change with the build: put it on the whole tool).
//! `#[deprecated]` on a tool warns where its type is named, `#[cfg]` removes the tool, and
//! lint attributes apply to the body.
//!
//! A synchronous body runs on the dispatching task. Its lease is renewed meanwhile by the
//! process's heartbeat thread, whatever the body does with its own thread; but a network
//! store (Redis, PostgreSQL) answers that renewal through the runtime's I/O, so a body that
//! blocks the runtime's only free worker for longer than `lease_secs` can still lose its
//! lease. Its late result is then refused (fenced) and the outcome is Unknown, never a
//! second execution. Write such a tool `async` and move the blocking work to
//! `tokio::task::spawn_blocking`.
//!
//! `#[tool]` replaces the function by a type of the same name that implements
//! [`StaticTool`]: the body can only run through a [`Dispatcher`].
//!
//! ## Testing with a manual clock
//!
//! Leases, settle delays and expiry are decided on the store's clock. In tests, give a
//! [`MemoryStore`] a [`ManualClock`](store::ManualClock) (or any [`Clock`](store::Clock)) and move time instead of sleeping:
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::time::Duration;
//! use idem::prelude::*;
//! use idem::store::ManualClock;
//!
//! static RUNS: AtomicU32 = AtomicU32::new(0);
//!
//! /// Rebuild a report.
//! #[tool(class = "idempotent_write", ttl_secs = 60)]
//! async fn rebuild_report(report: String) -> Result<String, ToolError> {
//!     RUNS.fetch_add(1, Ordering::SeqCst);
//!     Ok(format!("{report} rebuilt"))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let clock = Arc::new(ManualClock::new());
//! let store = MemoryStore::new().with_clock(clock.clone());
//! let registry = Registry::builder().tool::<rebuild_report>().build().unwrap();
//! let dispatcher = Dispatcher::new(registry, Arc::new(store)).unwrap();
//! let call = ToolCall::new("rebuild_report", serde_json::json!({"report": "q3"}))
//!     .with_call_id("call_1");
//! let run = RunContext::new("tenant-a");
//! dispatcher.dispatch(&call, &run).await.unwrap();
//! // Within its 60 s the call is replayed; past them the record has expired and it runs again.
//! assert!(dispatcher.dispatch(&call, &run).await.unwrap().deduplicated);
//! clock.advance(Duration::from_secs(61));
//! assert!(!dispatcher.dispatch(&call, &run).await.unwrap().deduplicated);
//! assert_eq!(RUNS.load(Ordering::SeqCst), 2);
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

// The guide's examples need the test suites' dependencies (a rig agent, OpenTelemetry, ...):
// package `idem-tests` compiles them as its doc tests.
#[cfg(not(doctest))]
pub mod guide;

// README.md's examples run as doctests, so the one-page pitch cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

// The names a user types every day; everything else lives in a module by area.
pub use idem_core::store::memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use idem_core::store::postgres::PostgresStore;
#[cfg(feature = "redis")]
pub use idem_core::store::redis::RedisStore;
#[cfg(feature = "sqlite")]
pub use idem_core::store::sqlite::SqliteStore;
pub use idem_core::{ErrorKind, IdempotencyKey, Store, ToolClass, ToolError};
pub use idem_macros::tool;
pub use idem_registry::{
    Approval, ApprovalKey, Approver, DispatchError, Dispatched, Dispatcher, Registry, RunContext,
    SecretKey, StaticTool, ToolCall, ToolContext, ToolDef, ToolPolicy, ToolSpec, Verified,
};

#[cfg(feature = "agent")]
pub use idem_agent as agent;
#[cfg(feature = "mcp")]
pub use idem_mcp as mcp;
pub use idem_registry::{export, schema};

/// Stores: the four stores and their settings, the [`Store`] contract, the operator's
/// listings and purges, and the approvals kept for a person.
pub mod store {
    pub use idem_core::store::*;
}

/// Records and their states: what a store keeps of a call (its outcome, its journal, why it
/// is Unknown), as operators and tests read them.
pub mod record {
    pub use idem_core::record::*;
}

/// Tools: definitions and their builder, data-defined specs, policies, classes and what
/// each class implies, and what a `#[tool]` becomes.
pub mod tool {
    pub use idem_registry::tool::*;
}

/// The registry: the tools by name, built from `#[tool]`s, definitions and specs.
pub mod registry {
    pub use idem_registry::registry::*;
}

/// Keys: what a call's key is made of, the keys a record and a downstream system see, and
/// the canonical JSON fingerprinted for them.
pub mod key {
    pub use idem_core::key::*;
}

/// The dispatcher: calls, runs, results and errors, recovery, observers and the execution
/// seam.
pub mod dispatch {
    pub use idem_registry::dispatch::*;
}

/// Approvals for irreversible calls and calls selected by argument: keys, approvers, signed
/// approvals, requests, links to a call's page in the inbox, and the desk where a person
/// decides.
pub mod approval {
    pub use idem_registry::approval::*;
}

/// A crash harness for your own tools (feature `testing`, Unix): every point of a scenario
/// where a crash changes what happens, killed in a child process and resumed in another.
#[cfg(all(feature = "testing", unix))]
pub mod testing {
    pub use idem_registry::testing::*;
}

/// Secret arguments: the key they are sealed with, and how they are cut from what is shown.
pub mod redact {
    pub use idem_registry::redact::*;
}

/// The execution contract a record is made under (its handler version and timing rules).
pub mod contract {
    pub use idem_core::contract::*;
}

/// What a tool author imports: `use idem::prelude::*;` brings the attribute, the class, the
/// context and error a body uses, and what a test or a small program needs to dispatch a
/// call (a registry, a dispatcher on an in-memory store, a call, a run).
pub mod prelude {
    pub use crate::{
        Approval, DispatchError, Dispatched, Dispatcher, ErrorKind, MemoryStore, Registry,
        RunContext, Store, ToolCall, ToolClass, ToolContext, ToolError, Verified, tool,
    };
}

/// What `#[tool]`'s expansion names: not an API, for the macro alone.
#[doc(hidden)]
pub use idem_registry::tool_attribute as __private;
