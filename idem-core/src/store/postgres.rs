//! A PostgreSQL store: for fleets of workers on many hosts.
//!
//! Every decision is one SQL statement evaluated on the database's clock, so workers whose
//! clocks disagree still agree on which lease has expired. The statements encode the rules
//! of [`machine`](crate::store::machine) and are held to them by the conformance suite:
//!
//! - **claim** is an `INSERT … ON CONFLICT (key) DO UPDATE` that inserts a fresh record
//!   (its first fence is the clock in milliseconds, so fences keep increasing across a
//!   release and a new claim of the key), reclaims a completed record past its expiry (fence + 1), takes over an orphan (fence + 1,
//!   journal kept) or turns it Unknown, and otherwise leaves the row as it is. The conflict
//!   branch always writes the row, so its `RETURNING` clause reports the row as this
//!   statement left it, even to the losing side of a race whose snapshot predates the
//!   winner's insert.
//! - **holder writes** are `UPDATE`/`DELETE … WHERE key = $1 AND state = 'in_progress' AND
//!   fence = $2`; zero rows means the holder was fenced out.
//!
//! All tables live in one schema chosen by the application, created on first use.
//! Timestamps are stored as milliseconds since the Unix epoch (`bigint`), read from the
//! database clock. Outcomes are stored as the exact JSON text serde produced (a `text`
//! column, not `jsonb`, which would reformat them), so they replay byte for byte.
//!
//! Each record keeps the tenant of the claim that created it. Operators list a tenant's
//! records needing attention through a partial index by tenant (only InProgress and Unknown
//! rows are in it, so completing a call does not add to it), and the purge finds Unknown
//! records past their retention through a partial index of Unknown rows. A table created
//! before tenants gains the column (empty for its records) and those indexes when a store
//! first connects to it; building them holds writes to the table back until they are built,
//! once.
//!
//! PostgreSQL `text` cannot hold the character U+0000: a tool name, argument text, journal
//! entry or error message containing it is refused by the server, which this store reports
//! as [`StoreError::Unavailable`] (nothing is written).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::tokio_postgres::types::ToSql;
use deadpool_postgres::tokio_postgres::{self, NoTls, Row};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};

/// The connection pool this store is built on (with `tokio_postgres` inside it), re-exported
/// so a pool for [`PostgresStore::from_pool`] comes from the same version.
pub use deadpool_postgres;

use crate::canonical::Fingerprint;
use crate::class::OrphanPolicy;
use crate::key::RecordKey;
use crate::record::{Fence, JournalEntry, Outcome, Record, RecordState, StateKind, Timestamp};
use crate::store::machine;
use crate::store::{
    Claim, ClaimRequest, DEFAULT_MAX_OUTCOME_BYTES, ListFilter, PurgeFilter, Store, StoreError,
};

/// How long [`PostgresStore::connect`] waits for a TCP connection and the server's greeting,
/// unless the URL sets `connect_timeout`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one store operation may take (waiting for a pooled connection included) before
/// it fails with [`StoreError::Unavailable`].
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(30);

/// How many connections [`PostgresStore::connect`] keeps open at most.
pub const DEFAULT_POOL_SIZE: usize = 16;

/// The message an orphan turned Unknown carries (the same as the memory and SQLite stores).
const ORPHAN_MESSAGE: &str = crate::record::ORPHANED;

/// Durations are capped so that `now + duration` never overflows a `bigint` (the cap is
/// about 73 million years).
const MAX_DURATION_MS: i64 = i64::MAX / 4;

/// The database clock in milliseconds since the epoch. `statement_timestamp()` is fixed for
/// the whole statement, so every use inside one statement sees the same instant.
const NOW: &str = "(floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint";

/// The columns every record-returning statement selects, in the order [`decode`] reads them.
const COLUMNS: &str = "t.key, t.tool, t.fingerprint, t.fence, t.state, t.lease_until, t.outcome, \
     t.expires_at, t.unknown_since, t.last_error, t.steps::text, t.arguments, t.created_at, \
     t.updated_at, t.tenant";
const COLUMN_COUNT: usize = 15;

/// A [`Store`] on PostgreSQL, over a pool of connections.
///
/// Tables live in the schema given to [`connect`](PostgresStore::connect), so applications
/// (and test runs) sharing a database each work in their own namespace. The schema and its
/// table are created on first use; many workers starting at once serialise that set-up on an
/// advisory lock, so none of them fails.
///
/// ```no_run
/// use std::sync::Arc;
/// use idem_core::store::Store;
/// use idem_core::store::postgres::PostgresStore;
///
/// # async fn run() -> Result<(), idem_core::StoreError> {
/// let store = PostgresStore::connect("postgres://app@db.internal/app", "idem")
///     .await?
///     .with_max_outcome_bytes(256 * 1024);
/// let store: Arc<dyn Store> = Arc::new(store);
/// println!("database clock: {:?}", store.now().await?);
/// # Ok(())
/// # }
/// ```
pub struct PostgresStore {
    pool: Pool,
    schema: String,
    sql: Statements,
    max_outcome_bytes: usize,
    operation_timeout: Duration,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.pool.status();
        f.debug_struct("PostgresStore")
            .field("schema", &self.schema)
            .field("pool_size", &status.size)
            .field("pool_max_size", &status.max_size)
            .field("max_outcome_bytes", &self.max_outcome_bytes)
            .field("operation_timeout", &self.operation_timeout)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connect to the database at `url` (a `postgres://` URL or a libpq key-value string) and
    /// keep every table in `schema`, creating it if needed.
    ///
    /// The schema name must match `^[a-z_][a-z0-9_]{0,62}$` and must not start with `pg_`
    /// (PostgreSQL reserves those). Connections are made without TLS; to use TLS or tune the
    /// pool, build a pool yourself and call [`from_pool`](PostgresStore::from_pool).
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] if the schema name or URL is invalid, or the server cannot
    /// be reached, refuses the login, or refuses to create the schema.
    ///
    /// ```no_run
    /// use idem_core::store::postgres::PostgresStore;
    ///
    /// # async fn run() -> Result<(), idem_core::StoreError> {
    /// let store = PostgresStore::connect("postgres://app@127.0.0.1:5432/app", "idem").await?;
    /// assert_eq!(store.schema(), "idem");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(url: &str, schema: &str) -> Result<Self, StoreError> {
        validate_schema(schema)?;
        let mut config = tokio_postgres::Config::from_str(url)
            .map_err(|e| StoreError::Unavailable(format!("invalid PostgreSQL URL: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
        }
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(DEFAULT_POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(DEFAULT_OPERATION_TIMEOUT))
            .create_timeout(Some(DEFAULT_CONNECT_TIMEOUT + Duration::from_secs(1)))
            .recycle_timeout(Some(DEFAULT_CONNECT_TIMEOUT))
            .build()
            .map_err(|e| StoreError::Unavailable(format!("cannot build a PostgreSQL pool: {e}")))?;
        Self::from_pool(pool, schema).await
    }

    /// Use an existing pool (with TLS, other limits or timeouts) and keep every table in
    /// `schema`, creating it if needed.
    ///
    /// # Errors
    ///
    /// As for [`connect`](PostgresStore::connect).
    ///
    /// ```no_run
    /// use idem_core::store::postgres::PostgresStore;
    /// use idem_core::store::postgres::deadpool_postgres::tokio_postgres::NoTls;
    /// use idem_core::store::postgres::deadpool_postgres::{Config, Runtime};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let mut config = Config::new();
    /// config.url = Some("postgres://app@127.0.0.1:5432/app".into());
    /// let pool = config.create_pool(Some(Runtime::Tokio1), NoTls)?;
    /// let store = PostgresStore::from_pool(pool, "idem").await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn from_pool(pool: Pool, schema: &str) -> Result<Self, StoreError> {
        validate_schema(schema)?;
        let store = PostgresStore {
            pool,
            schema: schema.to_owned(),
            sql: Statements::new(schema),
            max_outcome_bytes: DEFAULT_MAX_OUTCOME_BYTES,
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
        };
        store.bounded(store.set_up()).await?;
        Ok(store)
    }

    /// Limit the size of one recorded outcome (default [`DEFAULT_MAX_OUTCOME_BYTES`]).
    ///
    /// ```no_run
    /// use idem_core::store::postgres::PostgresStore;
    ///
    /// # async fn run() -> Result<(), idem_core::StoreError> {
    /// let store = PostgresStore::connect("postgres://app@127.0.0.1/app", "idem")
    ///     .await?
    ///     .with_max_outcome_bytes(64 * 1024);
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_max_outcome_bytes(mut self, limit: usize) -> Self {
        self.max_outcome_bytes = limit;
        self
    }

    /// Bound every operation, waiting for a pooled connection included (default
    /// [`DEFAULT_OPERATION_TIMEOUT`]). An operation that runs out of time fails with
    /// [`StoreError::Unavailable`]; a claim cut short may still have been recorded, in which
    /// case its lease expires like any orphan's. The connection such an operation used is
    /// closed, not returned to the pool: a server that stopped answering on it would make
    /// every later operation time out too.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use idem_core::store::postgres::PostgresStore;
    ///
    /// # async fn run() -> Result<(), idem_core::StoreError> {
    /// let store = PostgresStore::connect("postgres://app@127.0.0.1/app", "idem")
    ///     .await?
    ///     .with_operation_timeout(Duration::from_secs(5));
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// The schema the store's tables live in.
    ///
    /// ```no_run
    /// use idem_core::store::postgres::PostgresStore;
    ///
    /// # async fn run() -> Result<(), idem_core::StoreError> {
    /// let store = PostgresStore::connect("postgres://app@127.0.0.1/app", "idem").await?;
    /// assert_eq!(store.schema(), "idem");
    /// # Ok(())
    /// # }
    /// ```
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Create the schema, table and indexes unless the table already exists. Concurrent
    /// `IF NOT EXISTS` statements can still collide on the catalogs' unique indexes, so
    /// set-up is serialised on a transaction-scoped advisory lock keyed by the schema name.
    async fn set_up(&self) -> Result<(), StoreError> {
        let mut checkout = self.checkout().await?;
        let result = Self::create_schema(&self.schema, checkout.client()).await;
        checkout.finish();
        result
    }

    async fn create_schema(
        schema: &str,
        client: &mut deadpool_postgres::Object,
    ) -> Result<(), StoreError> {
        let tx = client.transaction().await.map_err(db_error)?;
        let lock_name = format!("idem/schema/{schema}");
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))",
            &[&lock_name],
        )
        .await
        .map_err(db_error)?;
        let table = format!("\"{schema}\".records");
        let exists: bool = tx
            .query_one("SELECT to_regclass($1::text) IS NOT NULL", &[&table])
            .await
            .map_err(db_error)?
            .try_get(0)
            .map_err(catalog_error)?;
        if !exists {
            tx.batch_execute(&ddl(schema)).await.map_err(db_error)?;
        } else {
            // A table from before tenants. Checked first: `ADD COLUMN IF NOT EXISTS` and
            // `CREATE INDEX IF NOT EXISTS` lock the table even when there is nothing to do,
            // which would hold every worker's writes back whenever one starts.
            let has_tenant: bool = tx
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_attribute \
                     WHERE attrelid = to_regclass($1::text) AND attname = 'tenant' \
                     AND NOT attisdropped)",
                    &[&table],
                )
                .await
                .map_err(db_error)?
                .try_get(0)
                .map_err(catalog_error)?;
            if !has_tenant {
                tx.batch_execute(&format!(
                    "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS tenant text NOT NULL DEFAULT ''"
                ))
                .await
                .map_err(db_error)?;
            }
            for (name, index) in LATER_INDEXES {
                let exists: bool = tx
                    .query_one(
                        "SELECT to_regclass($1::text) IS NOT NULL",
                        &[&format!("\"{schema}\".{name}")],
                    )
                    .await
                    .map_err(db_error)?
                    .try_get(0)
                    .map_err(catalog_error)?;
                if !exists {
                    tx.batch_execute(&index(schema)).await.map_err(db_error)?;
                }
            }
        }
        tx.commit().await.map_err(db_error)
    }

    /// Run an operation within the operation timeout.
    async fn bounded<T>(
        &self,
        operation: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.operation_timeout, operation).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Unavailable(format!(
                "PostgreSQL did not answer within {:?}",
                self.operation_timeout
            ))),
        }
    }

    /// A pooled connection for one operation. Call [`Checkout::finish`] once the operation
    /// has its answer; if the operation is cut short instead (by the operation timeout, or
    /// because the caller dropped it), the connection is closed rather than pooled.
    async fn checkout(&self) -> Result<Checkout, StoreError> {
        let object = self.pool.get().await.map_err(pool_error)?;
        Ok(Checkout(Some(object)))
    }

    /// Run one statement (prepared once per connection) and return its rows.
    async fn query(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        self.bounded(async {
            let mut checkout = self.checkout().await?;
            let client = checkout.client();
            let result = match client.prepare_cached(sql).await {
                Ok(statement) => client.query(&statement, params).await,
                Err(e) => Err(e),
            };
            checkout.finish();
            result.map_err(db_error)
        })
        .await
    }

    /// Run one statement and return how many rows it changed.
    async fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, StoreError> {
        self.bounded(async {
            let mut checkout = self.checkout().await?;
            let client = checkout.client();
            let result = match client.prepare_cached(sql).await {
                Ok(statement) => client.execute(&statement, params).await,
                Err(e) => Err(e),
            };
            checkout.finish();
            result.map_err(db_error)
        })
        .await
    }
}

/// A pooled connection lent to one operation.
///
/// An operation that timed out (or was cancelled) leaves its connection in an unknown state:
/// the server may have stopped answering while keeping the socket open, or a reply may be
/// half read. The pool's fast recycling only checks that a connection is not closed, so such
/// a connection would be handed to every later operation, which would time out on it in
/// turn. Dropping a `Checkout` that was not [finished](Checkout::finish) therefore takes the
/// connection out of the pool and closes it; the pool opens a fresh one when needed.
/// Discarding a connection is always safe: nothing is in flight on it any more, and an
/// operation that was cut short has already been reported as failed.
struct Checkout(Option<deadpool_postgres::Object>);

impl Checkout {
    fn client(&mut self) -> &mut deadpool_postgres::Object {
        self.0
            .as_mut()
            .expect("a checkout holds its connection until it is finished or dropped")
    }

    /// The operation got its answer (a result or an error): the connection goes back to the
    /// pool, whose recycling discards it if it has closed.
    fn finish(mut self) {
        drop(self.0.take());
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        if let Some(object) = self.0.take() {
            // Out of the pool for good; dropping the client aborts its connection task,
            // which closes the socket.
            drop(deadpool_postgres::Object::take(object));
        }
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Claim, StoreError> {
        let take_over = matches!(request.orphans, OrphanPolicy::TakeOver);
        let rows = self
            .query(
                &self.sql.claim,
                &[
                    &request.key.as_str(),
                    &request.tool,
                    &request.fingerprint.to_hex(),
                    &millis(request.lease),
                    &take_over,
                    &request.arguments,
                    &ORPHAN_MESSAGE,
                    &request.tenant,
                ],
            )
            .await?;
        let row = single(rows, &request.key)?;
        let record = decode(&row, 0, &request.key)?;
        let action: String = row
            .try_get(COLUMN_COUNT)
            .map_err(|e| corrupt(&request.key, format!("last_claim: {e}")))?;
        match action.as_str() {
            "inserted" | "reclaimed" => Ok(Claim::Acquired {
                fence: record.fence,
                steps: Vec::new(),
                takeover: false,
            }),
            "taken_over" => Ok(Claim::Acquired {
                fence: record.fence,
                steps: record.steps,
                takeover: true,
            }),
            "marked_unknown" | "existing" => Ok(Claim::Existing(record)),
            other => Err(corrupt(
                &request.key,
                format!("unexpected claim action {other:?}"),
            )),
        }
    }

    async fn complete(
        &self,
        key: &RecordKey,
        fence: Fence,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let outcome = machine::encode_outcome(key, outcome, self.max_outcome_bytes)?;
        let fence_param = fence_param(key, fence)?;
        let changed = self
            .execute(
                &self.sql.complete,
                &[&key.as_str(), &fence_param, &outcome, &millis(ttl)],
            )
            .await?;
        held(changed, key, fence)
    }

    async fn release(&self, key: &RecordKey, fence: Fence) -> Result<bool, StoreError> {
        let Ok(fence_param) = i64::try_from(fence) else {
            return Ok(false);
        };
        let deleted = self
            .execute(&self.sql.release, &[&key.as_str(), &fence_param])
            .await?;
        Ok(deleted > 0)
    }

    async fn renew(
        &self,
        key: &RecordKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        let fence_param = fence_param(key, fence)?;
        let rows = self
            .query(
                &self.sql.renew,
                &[&key.as_str(), &fence_param, &millis(lease)],
            )
            .await?;
        let Some(row) = rows.into_iter().next() else {
            return Err(StoreError::Fenced {
                key: key.clone(),
                fence,
            });
        };
        let until: i64 = row
            .try_get(0)
            .map_err(|e| corrupt(key, format!("lease_until: {e}")))?;
        timestamp(key, "lease_until", until)
    }

    async fn journal(
        &self,
        key: &RecordKey,
        fence: Fence,
        step: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        let fence_param = fence_param(key, fence)?;
        let changed = self
            .execute(
                &self.sql.journal,
                &[&key.as_str(), &fence_param, &step, &value],
            )
            .await?;
        held(changed, key, fence)
    }

    async fn mark_unknown(
        &self,
        key: &RecordKey,
        fence: Fence,
        error: &str,
    ) -> Result<(), StoreError> {
        let fence_param = fence_param(key, fence)?;
        let changed = self
            .execute(
                &self.sql.mark_unknown,
                &[&key.as_str(), &fence_param, &error],
            )
            .await?;
        held(changed, key, fence)
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        let rows = self.query(&self.sql.get, &[&key.as_str()]).await?;
        rows.first().map(|row| decode(row, 0, key)).transpose()
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<Record>, StoreError> {
        let state = filter.state.map(state_name);
        let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
        let rows = match (&filter.tenant, filter.state) {
            (None, _) => self.query(&self.sql.list, &[&state, &limit]).await?,
            (Some(tenant), Some(StateKind::Completed)) => {
                self.query(&self.sql.list_tenant_completed, &[tenant, &limit])
                    .await?
            }
            (Some(tenant), _) => {
                self.query(&self.sql.list_tenant_open, &[tenant, &state, &limit])
                    .await?
            }
        };
        let unknown_key = RecordKey::from_stored("<unreadable key>");
        rows.iter()
            .map(|row| decode(row, 0, &unknown_key))
            .collect()
    }

    async fn resolve(
        &self,
        key: &RecordKey,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<Record, StoreError> {
        let encoded = machine::encode_settled(key, outcome, self.max_outcome_bytes)?;
        let ttl = millis(ttl);
        for _ in 0..RACE_RETRIES {
            let rows = self
                .query(&self.sql.resolve, &[&key.as_str(), &encoded, &ttl])
                .await?;
            let row = single(rows, key)?;
            let resolved: Option<String> = row
                .try_get(1)
                .map_err(|e| corrupt(key, format!("key: {e}")))?;
            if resolved.is_some() {
                return decode(&row, 1, key);
            }
            unsettled_refusal(&row, key, "resolve")?;
        }
        Err(contended(key))
    }

    async fn settle_unknown(
        &self,
        key: &RecordKey,
        fence: Fence,
        outcome: Option<&Outcome>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let fence_param = fence_param(key, fence)?;
        let changed = match outcome {
            Some(o) => {
                let encoded = machine::encode_settled(key, o, self.max_outcome_bytes)?;
                let ttl = millis(ttl);
                self.execute(
                    &self.sql.settle_complete,
                    &[&key.as_str(), &fence_param, &encoded, &ttl],
                )
                .await?
            }
            None => {
                self.execute(&self.sql.settle_release, &[&key.as_str(), &fence_param])
                    .await?
            }
        };
        Ok(changed == 1)
    }

    async fn force_release(&self, key: &RecordKey) -> Result<bool, StoreError> {
        for _ in 0..RACE_RETRIES {
            let rows = self
                .query(&self.sql.force_release, &[&key.as_str()])
                .await?;
            let row = single(rows, key)?;
            let released: Option<String> = row
                .try_get(1)
                .map_err(|e| corrupt(key, format!("key: {e}")))?;
            if released.is_some() {
                return Ok(true);
            }
            unsettled_refusal(&row, key, "release")?;
        }
        Err(contended(key))
    }

    async fn purge_expired(&self, filter: &PurgeFilter) -> Result<usize, StoreError> {
        if filter.limit == 0 {
            return Ok(0);
        }
        let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
        let retention = millis(filter.unknown_retention);
        let purged = self
            .execute(&self.sql.purge, &[&limit, &retention, &filter.tenant])
            .await?;
        Ok(usize::try_from(purged).unwrap_or(usize::MAX))
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        let rows = self.query(&self.sql.now, &[]).await?;
        let ms: i64 = rows
            .first()
            .ok_or_else(|| StoreError::Unavailable("the clock query returned no row".into()))?
            .try_get(0)
            .map_err(|e| StoreError::Unavailable(format!("unreadable database clock: {e}")))?;
        u64::try_from(ms).map(Timestamp).map_err(|_| {
            StoreError::Unavailable(format!("the database clock reads {ms} ms before the epoch"))
        })
    }
}

/// How often an operator operation is retried when the record changed under it between the
/// statement's snapshot and its write.
const RACE_RETRIES: usize = 8;

/// Check a schema name: `^[a-z_][a-z0-9_]{0,62}$`, not `pg_*`.
fn validate_schema(schema: &str) -> Result<(), StoreError> {
    let bytes = schema.as_bytes();
    let well_formed = !bytes.is_empty()
        && bytes.len() <= 63
        && matches!(bytes[0], b'a'..=b'z' | b'_')
        && bytes
            .iter()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'));
    if !well_formed {
        return Err(StoreError::Unavailable(format!(
            "invalid PostgreSQL schema name {schema:?}: expected 1 to 63 characters matching \
             ^[a-z_][a-z0-9_]{{0,62}}$ (lower-case letters, digits, underscores; not starting \
             with a digit)"
        )));
    }
    if schema.starts_with("pg_") {
        return Err(StoreError::Unavailable(format!(
            "invalid PostgreSQL schema name {schema:?}: names starting with `pg_` are reserved \
             by PostgreSQL"
        )));
    }
    Ok(())
}

/// The schema, table and indexes. The CHECK constraints restate the record's invariants so
/// a row written by hand that breaks them is refused rather than read back as corrupt.
fn ddl(schema: &str) -> String {
    format!(
        r#"
CREATE SCHEMA IF NOT EXISTS "{schema}";
CREATE TABLE IF NOT EXISTS "{schema}".records (
    key           text COLLATE "C" PRIMARY KEY,
    tool          text NOT NULL,
    fingerprint   text NOT NULL,
    fence         bigint NOT NULL CHECK (fence >= 1),
    state         text NOT NULL CHECK (state IN ('in_progress', 'completed', 'unknown')),
    lease_until   bigint,
    outcome       text,
    expires_at    bigint,
    unknown_since bigint,
    last_error    text,
    steps         jsonb NOT NULL DEFAULT '[]'::jsonb,
    arguments     text,
    created_at    bigint NOT NULL,
    updated_at    bigint NOT NULL,
    last_claim    text NOT NULL DEFAULT 'inserted',
    tenant        text NOT NULL DEFAULT '',
    CHECK (state <> 'in_progress' OR lease_until IS NOT NULL),
    CHECK (state <> 'completed' OR (outcome IS NOT NULL AND expires_at IS NOT NULL)),
    CHECK (state <> 'unknown' OR (unknown_since IS NOT NULL AND last_error IS NOT NULL))
);
COMMENT ON COLUMN "{schema}".records.last_claim IS
    'What the latest claim of this key did: inserted, reclaimed, taken_over, marked_unknown or existing.';
CREATE INDEX IF NOT EXISTS records_expiry ON "{schema}".records (expires_at)
    WHERE state = 'completed';
CREATE INDEX IF NOT EXISTS records_open ON "{schema}".records (created_at, key)
    WHERE state <> 'completed';
{later}
"#,
        later = LATER_INDEXES
            .iter()
            .map(|(_, index)| index(schema))
            .collect::<String>()
    )
}

/// The statement that creates an index in a schema.
type IndexDdl = fn(&str) -> String;

/// Indexes added after the first schema, by name: [`ddl`] creates them with the table, and
/// set-up adds any a table made by an older idem lacks. Both are partial, over rows few calls
/// ever write (no claim or completion adds to them): the records needing attention, by tenant,
/// for an operator's listing; the Unknown records, by age, for the purge of those past their
/// retention.
const LATER_INDEXES: [(&str, IndexDdl); 2] = [
    ("records_tenant_open", |schema| {
        format!(
            "CREATE INDEX IF NOT EXISTS records_tenant_open \
             ON \"{schema}\".records (tenant, created_at, key) WHERE state <> 'completed';\n"
        )
    }),
    ("records_unknown", |schema| {
        format!(
            "CREATE INDEX IF NOT EXISTS records_unknown \
             ON \"{schema}\".records (unknown_since) WHERE state = 'unknown';\n"
        )
    }),
];

fn catalog_error(e: tokio_postgres::Error) -> StoreError {
    StoreError::Unavailable(format!("unexpected catalog answer: {e}"))
}

/// Every statement the store runs, with the schema filled in.
struct Statements {
    claim: String,
    complete: String,
    release: String,
    renew: String,
    journal: String,
    mark_unknown: String,
    get: String,
    list: String,
    list_tenant_open: String,
    list_tenant_completed: String,
    resolve: String,
    force_release: String,
    settle_complete: String,
    settle_release: String,
    purge: String,
    now: String,
}

impl Statements {
    fn new(schema: &str) -> Self {
        let table = format!("\"{schema}\".records");
        let held = "t.key = $1::text AND t.state = 'in_progress' AND t.fence = $2::bigint";
        let live = format!("NOT (t.state = 'completed' AND t.expires_at <= {NOW})");
        // A key without a record starts at the clock in milliseconds (`machine::first_fence`),
        // so a key released and claimed again never hands out a fence a former holder may
        // still hold. In the conflict branch `excluded.created_at` is this statement's clock and
        // `excluded.lease_until` the new lease end. The branch always writes (unchanged
        // columns keep their values) so RETURNING reports the row to every caller; the
        // action it took is written to `last_claim` and read back.
        let claim = format!(
            r#"
INSERT INTO {table} AS t (key, tool, fingerprint, fence, state, lease_until, steps, arguments,
                          created_at, updated_at, last_claim, tenant)
SELECT $1::text, $2::text, $3::text, GREATEST(n.now, 1), 'in_progress', n.now + $4::bigint,
       '[]'::jsonb,
       $6::text, n.now, n.now, 'inserted', $8::text
FROM (SELECT {NOW} AS now) AS n
ON CONFLICT (key) DO UPDATE SET
    (tool, fingerprint, fence, state, lease_until, outcome, expires_at, unknown_since,
     last_error, steps, arguments, created_at, updated_at, last_claim, tenant) =
    (SELECT
        CASE WHEN d.a = 'reclaimed' THEN excluded.tool ELSE t.tool END,
        CASE WHEN d.a = 'reclaimed' THEN excluded.fingerprint ELSE t.fingerprint END,
        CASE WHEN d.a IN ('reclaimed', 'taken_over') THEN t.fence + 1 ELSE t.fence END,
        CASE d.a WHEN 'reclaimed' THEN 'in_progress'
                 WHEN 'taken_over' THEN 'in_progress'
                 WHEN 'marked_unknown' THEN 'unknown'
                 ELSE t.state END,
        CASE d.a WHEN 'reclaimed' THEN excluded.lease_until
                 WHEN 'taken_over' THEN excluded.lease_until
                 WHEN 'marked_unknown' THEN NULL
                 ELSE t.lease_until END,
        CASE WHEN d.a = 'reclaimed' THEN NULL ELSE t.outcome END,
        CASE WHEN d.a = 'reclaimed' THEN NULL ELSE t.expires_at END,
        CASE d.a WHEN 'reclaimed' THEN NULL
                 WHEN 'marked_unknown' THEN excluded.created_at
                 ELSE t.unknown_since END,
        CASE d.a WHEN 'reclaimed' THEN NULL
                 WHEN 'marked_unknown' THEN $7::text
                 ELSE t.last_error END,
        CASE WHEN d.a = 'reclaimed' THEN '[]'::jsonb ELSE t.steps END,
        CASE WHEN d.a = 'reclaimed' THEN excluded.arguments ELSE t.arguments END,
        CASE WHEN d.a = 'reclaimed' THEN excluded.created_at ELSE t.created_at END,
        CASE WHEN d.a = 'existing' THEN t.updated_at ELSE excluded.created_at END,
        d.a,
        CASE WHEN d.a = 'reclaimed' THEN excluded.tenant ELSE t.tenant END
     FROM (SELECT CASE
        -- A completed record past its expiry: a new call under the same key.
        WHEN t.state = 'completed' AND t.expires_at <= excluded.created_at THEN 'reclaimed'
        -- An orphan with the same arguments: the class decides. Other arguments never
        -- take a key over.
        WHEN t.state = 'in_progress' AND t.lease_until <= excluded.created_at
             AND t.fingerprint = excluded.fingerprint
            THEN CASE WHEN $5::boolean THEN 'taken_over' ELSE 'marked_unknown' END
        ELSE 'existing' END AS a) AS d)
RETURNING {COLUMNS}, t.last_claim
"#
        );
        let complete = format!(
            "UPDATE {table} AS t SET state = 'completed', outcome = $3::text, \
             expires_at = {NOW} + $4::bigint, lease_until = NULL, updated_at = {NOW} \
             WHERE {held}"
        );
        let release = format!("DELETE FROM {table} AS t WHERE {held}");
        let renew = format!(
            "UPDATE {table} AS t SET lease_until = {NOW} + $3::bigint, updated_at = {NOW} \
             WHERE {held} AND t.lease_until > {NOW} RETURNING t.lease_until"
        );
        // A step journaled again keeps its place and takes the new value.
        let journal = format!(
            r#"
UPDATE {table} AS t SET
    steps = CASE
        WHEN EXISTS (SELECT 1 FROM jsonb_array_elements(t.steps) AS s(e) WHERE s.e->>'step' = $3::text)
        THEN (SELECT jsonb_agg(CASE WHEN s.e->>'step' = $3::text
                                    THEN jsonb_build_object('step', $3::text, 'value', $4::text)
                                    ELSE s.e END
                               ORDER BY s.i)
              FROM jsonb_array_elements(t.steps) WITH ORDINALITY AS s(e, i))
        ELSE t.steps || jsonb_build_array(jsonb_build_object('step', $3::text, 'value', $4::text))
    END,
    updated_at = {NOW}
WHERE {held}
"#
        );
        let mark_unknown = format!(
            "UPDATE {table} AS t SET state = 'unknown', unknown_since = {NOW}, \
             last_error = $3::text, lease_until = NULL, updated_at = {NOW} WHERE {held}"
        );
        let get = format!("SELECT {COLUMNS} FROM {table} AS t WHERE t.key = $1::text AND {live}");
        let list = format!(
            "SELECT {COLUMNS} FROM {table} AS t \
             WHERE (CASE WHEN $1::text IS NULL THEN t.state <> 'completed' \
                         ELSE t.state = $1::text END) AND {live} \
             ORDER BY t.created_at, t.key LIMIT $2::bigint"
        );
        // A tenant's records needing attention (optionally of one such state), through the
        // partial index by tenant: its predicate appears as written so the planner uses it.
        let list_tenant_open = format!(
            "SELECT {COLUMNS} FROM {table} AS t \
             WHERE t.tenant = $1::text AND t.state <> 'completed' \
             AND ($2::text IS NULL OR t.state = $2::text) \
             ORDER BY t.created_at, t.key LIMIT $3::bigint"
        );
        let list_tenant_completed = format!(
            "SELECT {COLUMNS} FROM {table} AS t \
             WHERE t.tenant = $1::text AND t.state = 'completed' AND {live} \
             ORDER BY t.created_at, t.key LIMIT $2::bigint"
        );
        // Operator operations: one statement that writes if the record is unsettled and
        // reports the state its snapshot saw, so a refusal names the right reason. If the
        // snapshot saw an unsettled record that the write no longer found, the record changed
        // in between and the caller runs the statement again.
        let resolve = format!(
            r#"
WITH seen AS (SELECT t.state FROM {table} AS t WHERE t.key = $1::text),
done AS (
    UPDATE {table} AS t SET fence = t.fence + 1, state = 'completed', outcome = $2::text,
        expires_at = {NOW} + $3::bigint, lease_until = NULL, unknown_since = NULL,
        last_error = NULL, updated_at = {NOW}
    WHERE t.key = $1::text AND t.state <> 'completed'
    RETURNING {COLUMNS}
)
SELECT seen.state, done.* FROM (SELECT 1) AS one
LEFT JOIN seen ON true LEFT JOIN done ON true
"#
        );
        let force_release = format!(
            r#"
WITH seen AS (SELECT t.state FROM {table} AS t WHERE t.key = $1::text),
gone AS (
    DELETE FROM {table} AS t WHERE t.key = $1::text AND t.state <> 'completed'
    RETURNING t.key
)
SELECT seen.state, gone.key FROM (SELECT 1) AS one
LEFT JOIN seen ON true LEFT JOIN gone ON true
"#
        );
        // `machine::is_purgeable`: completed and expired, or Unknown since `$2` ms or more
        // (`since + retention <= now`), of tenant `$3` unless it is null; at most `$1`. Each
        // kind is selected on its own index and locked (skipping rows another purge holds);
        // the delete checks the rule again on what was locked.
        let tenant_is = |t: &str| format!("($3::text IS NULL OR {t}.tenant = $3::text)");
        let expired = |t: &str| format!("{t}.state = 'completed' AND {t}.expires_at <= {NOW}");
        let forgotten =
            |t: &str| format!("{t}.state = 'unknown' AND {t}.unknown_since <= {NOW} - $2::bigint");
        let purge = format!(
            "WITH done AS (\
                 SELECT e.key FROM {table} AS e WHERE {} AND {} \
                 ORDER BY e.expires_at LIMIT $1::bigint FOR UPDATE SKIP LOCKED), \
             lost AS (\
                 SELECT e.key FROM {table} AS e WHERE {} AND {} \
                 ORDER BY e.unknown_since \
                 LIMIT GREATEST($1::bigint - (SELECT count(*) FROM done), 0) \
                 FOR UPDATE SKIP LOCKED) \
             DELETE FROM {table} AS t \
             WHERE t.key = ANY(ARRAY(SELECT key FROM done UNION ALL SELECT key FROM lost)) \
             AND (({}) OR ({})) AND {}",
            expired("e"),
            tenant_is("e"),
            forgotten("e"),
            tenant_is("e"),
            expired("t"),
            forgotten("t"),
            tenant_is("t"),
        );
        let unknown_at = "t.key = $1::text AND t.state = 'unknown' AND t.fence = $2::bigint";
        let settle_complete = format!(
            "UPDATE {table} AS t SET fence = t.fence + 1, state = 'completed', outcome = $3::text, \
             expires_at = {NOW} + $4::bigint, lease_until = NULL, unknown_since = NULL, \
             last_error = NULL, updated_at = {NOW} WHERE {unknown_at}"
        );
        let settle_release = format!("DELETE FROM {table} AS t WHERE {unknown_at}");
        Statements {
            claim,
            complete,
            release,
            renew,
            journal,
            mark_unknown,
            get,
            list,
            list_tenant_open,
            list_tenant_completed,
            resolve,
            force_release,
            settle_complete,
            settle_release,
            purge,
            now: format!("SELECT {NOW}"),
        }
    }
}

/// After an operator statement wrote nothing: the refusal its snapshot explains, or `Ok` if
/// the record changed under it and the statement should run again.
fn unsettled_refusal(row: &Row, key: &RecordKey, action: &'static str) -> Result<(), StoreError> {
    let seen: Option<String> = row
        .try_get(0)
        .map_err(|e| corrupt(key, format!("state: {e}")))?;
    match seen.as_deref() {
        None => Err(StoreError::NotFound(key.clone())),
        Some("completed") => Err(StoreError::WrongState {
            key: key.clone(),
            state: StateKind::Completed,
            action,
            needs: "an InProgress or Unknown record",
        }),
        Some("in_progress" | "unknown") => Ok(()),
        Some(other) => Err(corrupt(key, format!("unknown state {other:?}"))),
    }
}

fn contended(key: &RecordKey) -> StoreError {
    StoreError::Unavailable(format!(
        "record {key} kept changing during an operator operation; try again"
    ))
}

fn state_name(kind: StateKind) -> &'static str {
    match kind {
        StateKind::InProgress => "in_progress",
        StateKind::Completed => "completed",
        StateKind::Unknown => "unknown",
    }
}

/// A duration in whole milliseconds, capped so `now + it` fits a `bigint`.
fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).map_or(MAX_DURATION_MS, |ms| ms.min(MAX_DURATION_MS))
}

/// A fence as a `bigint`. No row holds a fence beyond `i64::MAX`, so such a writer is stale.
fn fence_param(key: &RecordKey, fence: Fence) -> Result<i64, StoreError> {
    i64::try_from(fence).map_err(|_| StoreError::Fenced {
        key: key.clone(),
        fence,
    })
}

/// A holder write changed one row, or the holder was fenced out.
fn held(changed: u64, key: &RecordKey, fence: Fence) -> Result<(), StoreError> {
    if changed == 0 {
        return Err(StoreError::Fenced {
            key: key.clone(),
            fence,
        });
    }
    Ok(())
}

fn single(rows: Vec<Row>, key: &RecordKey) -> Result<Row, StoreError> {
    rows.into_iter()
        .next()
        .ok_or_else(|| StoreError::Unavailable(format!("PostgreSQL returned no row for key {key}")))
}

fn corrupt(key: &RecordKey, reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        key: key.clone(),
        reason: reason.into(),
    }
}

fn timestamp(key: &RecordKey, column: &str, ms: i64) -> Result<Timestamp, StoreError> {
    u64::try_from(ms)
        .map(Timestamp)
        .map_err(|_| corrupt(key, format!("{column} is negative: {ms}")))
}

/// Read a record from `row`, starting at column `at` (in [`COLUMNS`] order). `fallback` names
/// the record in errors when the key itself cannot be read.
fn decode(row: &Row, at: usize, fallback: &RecordKey) -> Result<Record, StoreError> {
    let key = match row.try_get::<_, String>(at) {
        Ok(k) => RecordKey::from_stored(k),
        Err(e) => return Err(corrupt(fallback, format!("key: {e}"))),
    };
    let bad = |column: &str, e: &dyn fmt::Display| corrupt(&key, format!("{column}: {e}"));
    let text = |i: usize, column: &str| -> Result<String, StoreError> {
        row.try_get::<_, String>(at + i)
            .map_err(|e| bad(column, &e))
    };
    let opt_text = |i: usize, column: &str| -> Result<Option<String>, StoreError> {
        row.try_get::<_, Option<String>>(at + i)
            .map_err(|e| bad(column, &e))
    };
    let millis = |i: usize, column: &str| -> Result<Timestamp, StoreError> {
        let ms = row.try_get::<_, i64>(at + i).map_err(|e| bad(column, &e))?;
        timestamp(&key, column, ms)
    };
    let opt_millis = |i: usize, column: &str| -> Result<Timestamp, StoreError> {
        match row
            .try_get::<_, Option<i64>>(at + i)
            .map_err(|e| bad(column, &e))?
        {
            Some(ms) => timestamp(&key, column, ms),
            None => Err(corrupt(&key, format!("{column} is missing"))),
        }
    };

    let tool = text(1, "tool")?;
    let fingerprint_hex = text(2, "fingerprint")?;
    let fingerprint = Fingerprint::from_hex(&fingerprint_hex)
        .ok_or_else(|| corrupt(&key, format!("fingerprint {fingerprint_hex:?} is not hex")))?;
    let fence_raw = row
        .try_get::<_, i64>(at + 3)
        .map_err(|e| bad("fence", &e))?;
    let fence = Fence::try_from(fence_raw)
        .map_err(|_| corrupt(&key, format!("fence is negative: {fence_raw}")))?;
    let state = match text(4, "state")?.as_str() {
        "in_progress" => RecordState::InProgress {
            lease_until: opt_millis(5, "lease_until")?,
        },
        "completed" => {
            let stored = opt_text(6, "outcome")?
                .ok_or_else(|| corrupt(&key, "a completed record has no outcome"))?;
            let outcome: Outcome = serde_json::from_str(&stored)
                .map_err(|e| corrupt(&key, format!("outcome: {e}")))?;
            RecordState::Completed {
                outcome,
                expires_at: opt_millis(7, "expires_at")?,
            }
        }
        "unknown" => RecordState::Unknown {
            since: opt_millis(8, "unknown_since")?,
            last_error: opt_text(9, "last_error")?
                .ok_or_else(|| corrupt(&key, "an Unknown record has no last_error"))?,
        },
        other => return Err(corrupt(&key, format!("unknown state {other:?}"))),
    };
    let steps: Vec<JournalEntry> = serde_json::from_str(&text(10, "steps")?)
        .map_err(|e| corrupt(&key, format!("steps: {e}")))?;
    let arguments = opt_text(11, "arguments")?;
    let created_at = millis(12, "created_at")?;
    let updated_at = millis(13, "updated_at")?;
    let tenant = text(14, "tenant")?;
    Ok(Record {
        key,
        tool,
        tenant,
        fingerprint,
        fence,
        state,
        steps,
        arguments,
        created_at,
        updated_at,
    })
}

fn db_error(e: tokio_postgres::Error) -> StoreError {
    match e.as_db_error() {
        Some(db) => StoreError::Unavailable(format!(
            "PostgreSQL refused the statement ({}): {}",
            db.code().code(),
            db.message()
        )),
        None => StoreError::Unavailable(format!("PostgreSQL: {e}")),
    }
}

fn pool_error(e: deadpool_postgres::PoolError) -> StoreError {
    StoreError::Unavailable(format!("no PostgreSQL connection: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_follow_the_documented_pattern() {
        for ok in ["idem", "_x", "a1_b2", &"a".repeat(63)] {
            assert!(validate_schema(ok).is_ok(), "{ok} is valid");
        }
        for bad in [
            "",
            "Idem",
            "1abc",
            "a-b",
            "a b",
            "idem\"; DROP TABLE x; --",
            "é",
            &"a".repeat(64),
            "pg_idem",
        ] {
            let err = validate_schema(bad).expect_err(bad);
            assert!(
                err.to_string().contains("schema name"),
                "error names the problem: {err}"
            );
        }
    }

    #[test]
    fn durations_never_overflow_a_bigint_sum() {
        assert_eq!(millis(Duration::from_millis(1500)), 1500);
        assert_eq!(millis(Duration::MAX), MAX_DURATION_MS);
        assert!(MAX_DURATION_MS.checked_add(i64::MAX / 2).is_some());
    }

    #[test]
    fn every_statement_names_the_schema() {
        let sql = Statements::new("tenant_a");
        for s in [
            &sql.claim,
            &sql.complete,
            &sql.release,
            &sql.renew,
            &sql.journal,
            &sql.mark_unknown,
            &sql.get,
            &sql.list,
            &sql.list_tenant_open,
            &sql.list_tenant_completed,
            &sql.resolve,
            &sql.force_release,
            &sql.purge,
        ] {
            assert!(s.contains("\"tenant_a\".records"), "{s}");
        }
    }
}
