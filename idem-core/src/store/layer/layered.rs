//! The seam itself: a [`Layer`] runs code around each operation of a store, [`Layered`] is a
//! store with a layer around it, and [`Operation`] is what a layer sees of each operation.
//!
//! Every operation of the [`Store`] trait is listed once, in `store_operations!` below: the
//! inputs a layer sees (its [`Operation`] variant) and the method's signature. The variant,
//! its name and key, and [`Layered`]'s forwarding method are generated from that entry, so a
//! new operation is written in the `Store` trait, this list, and each store's own code.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::key::RecordKey;
use crate::record::{Fence, Outcome, Record, Timestamp};
use crate::store::approvals::{ApprovalFilter, PendingApproval};
use crate::store::{Claim, ClaimRequest, ListFilter, PurgeFilter, Store, StoreError};

/// The future of one store operation, as every [`Store`] method returns it.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Code run around every operation of a store: it sees the [`Operation`], and decides
/// whether and how the rest runs (`next` starts it).
///
/// A layer may refuse an operation (return an error without calling `next`: the store is
/// never asked), or wrap the future `next` returns (a span, a timer, a fault for a test); it
/// cannot change an operation's inputs. See the [module documentation](super) for an
/// example.
pub trait Layer: Send + Sync + fmt::Debug {
    /// Run `next`, the rest of the stack for `operation`, or refuse it.
    fn around<'a, T: Send + 'static>(
        &'a self,
        operation: &Operation<'_>,
        next: impl FnOnce() -> StoreFuture<'a, T>,
    ) -> StoreFuture<'a, T>;

    /// `store` with this layer around it.
    ///
    /// ```
    /// use idem::store::layer::{Layer, Trace};
    /// use idem::store::memory::MemoryStore;
    ///
    /// let store = Trace.layer(MemoryStore::new());
    /// # let _ = store;
    /// ```
    fn layer<S: Store>(self, store: S) -> Layered<S, Self>
    where
        Self: Sized,
    {
        Layered {
            inner: store,
            layer: self,
        }
    }
}

/// A store with a [`Layer`] around it ([`Layer::layer`] makes one): a [`Store`] itself, so
/// layers stack.
///
/// ```
/// use idem::store::layer::{Layer, Trace};
/// use idem::store::memory::MemoryStore;
///
/// // A memory store is limited already: tracing outside the limits, a refused outcome shows
/// // in the trace too.
/// let store = Trace.layer(MemoryStore::new());
/// # let _ = store;
/// ```
#[derive(Debug, Clone)]
pub struct Layered<S, L> {
    pub(crate) inner: S,
    pub(crate) layer: L,
}

impl<S, L> Layered<S, L> {
    /// The store inside.
    ///
    /// ```
    /// use idem::store::layer::{Layer, Trace};
    /// use idem::store::memory::MemoryStore;
    ///
    /// let store = Trace.layer(MemoryStore::new());
    /// assert!(store.get_ref().is_empty());
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The layer around it.
    ///
    /// ```
    /// use idem::store::layer::{Layer, Limits};
    /// use idem::store::memory::MemoryStore;
    ///
    /// let store = Limits::new(64).layer(MemoryStore::new());
    /// assert_eq!(store.get_layer().max_outcome_bytes(), 64);
    /// ```
    pub fn get_layer(&self) -> &L {
        &self.layer
    }

    /// The store inside, without the layer.
    ///
    /// ```
    /// use idem::store::layer::{Layer, Trace};
    /// use idem::store::memory::MemoryStore;
    ///
    /// let store = Trace.layer(MemoryStore::new()).into_inner();
    /// # let _ = store;
    /// ```
    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// Every operation of a store, each once: `$then! { entries }`.
///
/// An entry is the variant a layer sees, with the fields it is shown (a field whose value is
/// not the argument of the same name says how it is made: `= expr`), then `=` the [`Store`]
/// method with one lifetime per borrowed argument, in order (the ones `#[async_trait]` gives
/// the trait), its output, and the field that names the operation's key, if it has one.
macro_rules! store_operations {
    ($then:ident) => {
        $then! {
            /// [`Store::claim`].
            Claim {
                /// What is claimed: the key, the holder, the lease.
                request: &'a ClaimRequest,
            } = claim<'r>(request: &'r ClaimRequest) -> Claim, key: request.key;
            /// [`Store::complete`].
            Complete {
                /// The key.
                key: &'a RecordKey,
                /// The holder's fence.
                fence: Fence,
                /// The outcome to record.
                outcome: &'a Outcome,
                /// How long the record is kept.
                ttl: Duration,
            } = complete<'k, 'o>(
                key: &'k RecordKey,
                fence: Fence,
                outcome: &'o Outcome,
                ttl: Duration,
            ) -> (), key: key;
            /// [`Store::release`].
            Release {
                /// The key.
                key: &'a RecordKey,
                /// The holder's fence.
                fence: Fence,
            } = release<'k>(key: &'k RecordKey, fence: Fence) -> bool, key: key;
            /// [`Store::renew`].
            Renew {
                /// The key.
                key: &'a RecordKey,
                /// The holder's fence.
                fence: Fence,
                /// The new lease.
                lease: Duration,
            } = renew<'k>(key: &'k RecordKey, fence: Fence, lease: Duration) -> Timestamp, key: key;
            /// [`Store::journal`].
            Journal {
                /// The key.
                key: &'a RecordKey,
                /// The holder's fence.
                fence: Fence,
                /// The step's name.
                step: &'a str,
                /// The step's result.
                value: &'a str,
            } = journal<'k, 'n, 'v>(
                key: &'k RecordKey,
                fence: Fence,
                step: &'n str,
                value: &'v str,
            ) -> (), key: key;
            /// [`Store::mark_unknown`].
            MarkUnknown {
                /// The key.
                key: &'a RecordKey,
                /// The holder's fence.
                fence: Fence,
                /// Why the outcome is unknown.
                error: &'a str,
            } = mark_unknown<'k, 'e>(
                key: &'k RecordKey,
                fence: Fence,
                error: &'e str,
            ) -> (), key: key;
            /// [`Store::get`].
            Get {
                /// The key.
                key: &'a RecordKey,
            } = get<'k>(key: &'k RecordKey) -> Option<Record>, key: key;
            /// [`Store::list`].
            List {
                /// The filter (a copy: the store takes the argument).
                filter: &'a ListFilter = &filter.clone(),
            } = list<>(filter: ListFilter) -> Vec<Record>;
            /// [`Store::resolve`].
            Resolve {
                /// The key.
                key: &'a RecordKey,
                /// The outcome to settle with.
                outcome: &'a Outcome,
                /// How long the record is kept.
                ttl: Duration,
            } = resolve<'k, 'o>(
                key: &'k RecordKey,
                outcome: &'o Outcome,
                ttl: Duration,
            ) -> Record, key: key;
            /// [`Store::settle_unknown`].
            SettleUnknown {
                /// The key.
                key: &'a RecordKey,
                /// The fence the record must still be Unknown at.
                fence: Fence,
                /// The outcome (the effect happened), or none (it did not).
                outcome: Option<&'a Outcome>,
                /// How long the record is kept.
                ttl: Duration,
            } = settle_unknown<'k, 'o>(
                key: &'k RecordKey,
                fence: Fence,
                outcome: Option<&'o Outcome>,
                ttl: Duration,
            ) -> bool, key: key;
            /// [`Store::force_release`].
            ForceRelease {
                /// The key.
                key: &'a RecordKey,
            } = force_release<'k>(key: &'k RecordKey) -> bool, key: key;
            /// [`Store::purge_expired`].
            PurgeExpired {
                /// Which records may go.
                filter: &'a PurgeFilter,
            } = purge_expired<'p>(filter: &'p PurgeFilter) -> usize;
            /// [`Store::now`].
            Now {} = now<>() -> Timestamp;
            /// [`Store::approval_text`].
            ApprovalText {
                /// The key.
                key: &'a RecordKey,
            } = approval_text<'k>(key: &'k RecordKey) -> Option<String>, key: key;
            /// [`Store::swap_approval`].
            SwapApproval {
                /// The key.
                key: &'a RecordKey,
                /// The entry to put.
                entry: &'a PendingApproval,
            } = swap_approval<'k, 'x, 'e, 't>(
                key: &'k RecordKey,
                expected: Option<&'x str>,
                entry: &'e PendingApproval,
                text: &'t str,
            ) -> bool, key: key;
            /// [`Store::remove_approval`].
            RemoveApproval {
                /// The key.
                key: &'a RecordKey,
            } = remove_approval<'k, 'x>(key: &'k RecordKey, expected: &'x str) -> bool, key: key;
            /// [`Store::approval_texts`].
            ApprovalTexts {
                /// Which approvals are listed.
                filter: &'a ApprovalFilter,
            } = approval_texts<'p>(filter: &'p ApprovalFilter) -> Vec<(RecordKey, String)>;
            /// [`Store::append_run_entry`].
            AppendRunEntry {
                /// The tenant.
                tenant: &'a str,
                /// The run.
                run_id: &'a str,
                /// The entry.
                text: &'a str,
                /// How long it is kept.
                ttl: Duration,
            } = append_run_entry<'t, 'r, 'x>(
                tenant: &'t str,
                run_id: &'r str,
                text: &'x str,
                ttl: Duration,
            ) -> ();
            /// [`Store::run_entries`].
            RunEntries {
                /// The tenant.
                tenant: &'a str,
                /// The run.
                run_id: &'a str,
            } = run_entries<'t, 'r>(tenant: &'t str, run_id: &'r str) -> Vec<String>;
            // A scope may be an argument's value: not a key a trace may show, even hashed.
            /// [`Store::budget_text`].
            BudgetText {
                /// The budget's scope.
                scope: &'a str,
            } = budget_text<'c>(scope: &'c str) -> Option<String>;
            /// [`Store::swap_budget`].
            SwapBudget {
                /// The budget's scope.
                scope: &'a str,
                /// The text to put.
                text: &'a str,
                /// How long it is kept.
                ttl: Duration,
            } = swap_budget<'c, 'x, 't>(
                scope: &'c str,
                expected: Option<&'x str>,
                text: &'t str,
                ttl: Duration,
            ) -> bool;
        }
    };
}

/// The variants, their names and keys, and [`Layered`]'s methods, from the list.
///
/// `Layered`'s methods are written out rather than with `#[async_trait]`, whose `async fn`
/// would box a second future around the inner store's: each hands the layer the inner call
/// unstarted, and returns what the layer returns. Their signatures are the ones
/// `#[async_trait]` gives the trait.
macro_rules! operations {
    ($(
        $(#[$doc:meta])*
        $variant:ident {
            $( $(#[$field_doc:meta])* $field:ident : $field_ty:ty $(= $shown:expr)? ),* $(,)?
        }
            = $method:ident < $($lt:lifetime),* > ( $( $arg:ident : $arg_ty:ty ),* $(,)? ) -> $out:ty
            $(, key: $key:ident $(. $key_path:ident)* )? ;
    )*) => {
        /// One operation asked of a store, with its inputs, as a [`Layer`] sees it.
        #[derive(Debug, Clone, Copy)]
        #[non_exhaustive]
        pub enum Operation<'a> {
            $(
                $(#[$doc])*
                $variant { $( $(#[$field_doc])* $field: $field_ty ),* },
            )*
        }

        impl Operation<'_> {
            /// The operation's name: the [`Store`] method's.
            ///
            /// ```
            /// use idem::store::layer::Operation;
            /// assert_eq!(Operation::Now {}.name(), "now");
            /// ```
            pub fn name(&self) -> &'static str {
                match self {
                    $( Operation::$variant { .. } => stringify!($method), )*
                }
            }

            /// The key the operation is about, if it is about one.
            ///
            /// ```
            /// use idem::key::RecordKey;
            /// use idem::store::layer::Operation;
            ///
            /// let key = RecordKey::from_stored("k");
            /// assert_eq!(Operation::Get { key: &key }.key(), Some(&key));
            /// assert_eq!(Operation::Now {}.key(), None);
            /// ```
            #[allow(unused_variables)]
            pub fn key(&self) -> Option<&RecordKey> {
                match *self {
                    $(
                        Operation::$variant { $($field,)* } =>
                            operation_key!($($key $(. $key_path)*)?),
                    )*
                }
            }
        }

        impl<S: Store, L: Layer> Store for Layered<S, L> {
            $(
                fn $method<'s, $($lt,)* 'f>(&'s self, $($arg: $arg_ty),*) -> StoreFuture<'f, $out>
                where
                    's: 'f,
                    $($lt: 'f,)*
                    Self: 'f,
                {
                    let op = Operation::$variant { $($field: shown!($field $(= $shown)?)),* };
                    self.layer.around(&op, || self.inner.$method($($arg),*))
                }
            )*
        }
    };
}

/// `Some` of the field that names the key, or `None`.
macro_rules! operation_key {
    () => {
        None
    };
    ($key:ident $(. $path:ident)*) => {
        Some(&(*$key)$(.$path)*)
    };
}

/// The value a layer is shown for a field: the argument of its name, or what the entry says.
macro_rules! shown {
    ($field:ident) => {
        $field
    };
    ($field:ident = $shown:expr) => {
        $shown
    };
}

store_operations!(operations);
