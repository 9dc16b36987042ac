//! The store a case runs against, how time passes for it, and how to open it again.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::store::memory::ManualClock;
use crate::store::{Store, StoreError};

/// Opens another instance of a subject's store on the same data.
type Reopen = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Arc<dyn Store>, StoreError>> + Send>>
        + Send
        + Sync,
>;

/// A store under test, how time passes for it, and (if it can) how to open it again.
#[derive(Clone)]
pub struct Subject {
    /// The store.
    pub store: Arc<dyn Store>,
    clock: Option<Arc<ManualClock>>,
    reopen: Option<Reopen>,
    short: Duration,
}

/// The lease (and time to live) the cases let run out, unless a subject says otherwise.
const SHORT: Duration = Duration::from_millis(300);

impl fmt::Debug for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subject")
            .field("store", &self.store)
            .field("clock", &self.clock)
            .field("reopenable", &self.reopen.is_some())
            .field("short", &self.short)
            .finish()
    }
}

impl Subject {
    /// A store whose clock is real (a server's, or the system's): time passes by sleeping.
    pub fn real_time(store: Arc<dyn Store>) -> Self {
        Subject {
            store,
            clock: None,
            reopen: None,
            short: SHORT,
        }
    }

    /// A store on a manual clock: time passes by advancing it.
    pub fn manual(store: Arc<dyn Store>, clock: Arc<ManualClock>) -> Self {
        Subject {
            store,
            clock: Some(clock),
            reopen: None,
            short: SHORT,
        }
    }

    /// A store on a real clock that can be opened again on the same data: `open(place)` opens
    /// the subject's store now, and another instance whenever a case needs one (a second
    /// process racing the first, a worker starting cold). `place` names the data: a file, a
    /// database and schema, a server and key prefix.
    ///
    /// ```no_run
    /// use idem::store::conformance::{self, Subject};
    /// use idem::store::sqlite::SqliteStore;
    ///
    /// # async fn run() {
    /// conformance::run_all("sqlite", || async {
    ///     let path = std::env::temp_dir().join("idem-conformance.db");
    ///     Subject::reopenable(path, |path| async move { SqliteStore::open(path) })
    ///         .await
    ///         .expect("open")
    /// })
    /// .await;
    /// # }
    /// ```
    pub async fn reopenable<P, S, F, Fut>(place: P, open: F) -> Result<Self, StoreError>
    where
        P: Clone + Send + Sync + 'static,
        S: Store + 'static,
        F: Fn(P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<S, StoreError>> + Send + 'static,
    {
        let reopen: Reopen = Arc::new(move || {
            let opening = open(place.clone());
            Box::pin(async move { Ok(Arc::new(opening.await?) as Arc<dyn Store>) })
        });
        let store = reopen().await?;
        Ok(Subject {
            store,
            clock: None,
            reopen: Some(reopen),
            short: SHORT,
        })
    }

    /// The subject with `short` as the lease (and time to live) the cases let run out: 300 ms
    /// unless set. A store whose every write may wait (for a replica's acknowledgement, say)
    /// needs one longer than its slowest write, or a holder's lease runs out between two of
    /// its writes.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use idem::store::conformance::Subject;
    /// use idem::store::memory::MemoryStore;
    ///
    /// let subject = Subject::real_time(Arc::new(MemoryStore::new()))
    ///     .with_short_lease(Duration::from_secs(1));
    /// # let _ = subject;
    /// ```
    pub fn with_short_lease(mut self, short: Duration) -> Self {
        self.short = short;
        self
    }

    /// The lease the cases let run out.
    pub(super) fn short(&self) -> Duration {
        self.short
    }

    /// Time enough for a lease of [`short`](Self::short) to have run out, with a margin for a
    /// store's clock read a little late, and not so much that a server has dropped what expired
    /// with it (Redis keeps a completed record a grace of a second past its time to live, so
    /// that a purge still finds it).
    pub(super) fn past_short(&self) -> Duration {
        self.short + Duration::from_millis(400)
    }

    /// Let `d` pass on the store's clock.
    pub async fn pass(&self, d: Duration) {
        match &self.clock {
            Some(c) => c.advance(d),
            None => tokio::time::sleep(d).await,
        }
    }

    /// Another instance of the store on the same data, or `None` if the subject cannot open
    /// one.
    pub(super) async fn second_instance(&self) -> Option<Arc<dyn Store>> {
        let reopen = self.reopen.as_ref()?;
        Some(reopen().await.expect("open a second instance of the store"))
    }

    /// The subject after a cold start: this instance closed, a new one opened on the same
    /// data. `None` if the subject cannot open another instance.
    pub(super) async fn cold_start(self) -> Option<Subject> {
        let Subject {
            store,
            clock,
            reopen,
            short,
        } = self;
        let reopen = reopen?;
        drop(store);
        let store = reopen()
            .await
            .expect("open the store again after a cold start");
        Some(Subject {
            store,
            clock,
            reopen: Some(reopen),
            short,
        })
    }
}
