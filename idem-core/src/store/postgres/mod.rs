//! A PostgreSQL store: for fleets of workers on many hosts.
//!
//! Every decision is one SQL statement evaluated on the database's clock, so workers whose
//! clocks disagree still agree on which lease has expired. The statements encode the rules
//! of [`machine`](crate::store::machine) and are held to them by the conformance suite:
//!
//! - **claim** is an `INSERT … ON CONFLICT (key) DO UPDATE` that inserts a fresh record
//!   (its first fence is the clock in milliseconds and above the fence floor, the highest
//!   fence of any deleted record, so fences keep increasing across a release and a new claim
//!   of the key, even within one millisecond), reclaims a completed record past its expiry
//!   (fence + 1), takes over an orphan (fence + 1, journal kept) or turns it Unknown, and
//!   otherwise leaves the row as it is. The conflict
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
//!
//! Pending approvals live in a table of their own, `approvals` (one JSON text per record key,
//! indexed by tenant and tool), created in the schema when a store first connects to it. So do
//! budgets, `budgets` (one JSON text per scope, the scope's bytes its key, since `text` cannot
//! hold U+0000, with when it expires on the database's clock).
//!
//! # The folder
//!
//! `statements.rs` holds the SQL text, `connection.rs` the pool and the schema's set-up,
//! `codec.rs` rows to records, and `store.rs` the [`Store`] impl.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::tokio_postgres::{self, NoTls};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};

mod codec;
mod connection;
mod statements;
mod store;

/// The connection pool this store is built on (with `tokio_postgres` inside it), re-exported
/// so a pool for [`PostgresStore::from_pool`] comes from the same version.
pub use deadpool_postgres;

use connection::Connections;
use statements::Statements;

#[cfg(doc)]
use crate::store::Store;
use crate::store::StoreError;
use crate::store::layer::{Layer, Limited, Limits};

/// How long [`PostgresStore::connect`] waits for a TCP connection and the server's greeting,
/// unless the URL sets `connect_timeout`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one store operation may take (waiting for a pooled connection included) before
/// it fails with [`StoreError::Unavailable`].
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(30);

/// How many connections [`PostgresStore::connect`] keeps open at most.
pub const DEFAULT_POOL_SIZE: usize = 16;

/// A [`Store`] on PostgreSQL, over a pool of connections: a [`PostgresBackend`] behind the
/// store [`Limits`].
///
/// Tables live in the schema given to [`connect`](PostgresStore::connect), so applications
/// (and test runs) sharing a database each work in their own namespace. The schema and its
/// tables are created on first use; many workers starting at once serialise that set-up on an
/// advisory lock, so none of them fails.
///
/// ```no_run
/// use std::sync::Arc;
/// use idem::store::Store;
/// use idem::store::postgres::PostgresStore;
///
/// # async fn run() -> Result<(), idem::store::StoreError> {
/// let store = PostgresStore::connect("postgres://app@db.internal/app", "idem")
///     .await?
///     .with_max_outcome_bytes(256 * 1024);
/// let store: Arc<dyn Store> = Arc::new(store);
/// println!("database clock: {:?}", store.now().await?);
/// # Ok(())
/// # }
/// ```
pub type PostgresStore = Limited<PostgresBackend>;

/// The pool, schema and statements of a [`PostgresStore`], without its [`Limits`]: what the
/// layer wraps.
pub struct PostgresBackend {
    db: Connections,
    schema: String,
    sql: Statements,
}

impl fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.db.pool.status();
        f.debug_struct("PostgresBackend")
            .field("schema", &self.schema)
            .field("pool_size", &status.size)
            .field("pool_max_size", &status.max_size)
            .field("operation_timeout", &self.db.operation_timeout)
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
    /// use idem::store::postgres::PostgresStore;
    ///
    /// # async fn run() -> Result<(), idem::store::StoreError> {
    /// let store = PostgresStore::connect("postgres://app@127.0.0.1:5432/app", "idem").await?;
    /// assert_eq!(store.schema(), "idem");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(url: &str, schema: &str) -> Result<Self, StoreError> {
        validate_schema(schema)?;
        Self::from_pool(Self::pool(url)?, schema).await
    }

    /// Connect to a schema a dispatcher set up, for an operator: never create it, never
    /// upgrade it. A schema without idem's tables (a mistyped name), or one an older idem
    /// made, is refused ([`StoreError::Unavailable`], naming the schema and the fix).
    ///
    /// ```no_run
    /// use idem::store::postgres::PostgresStore;
    ///
    /// # async fn run() -> Result<(), idem::store::StoreError> {
    /// let store = PostgresStore::connect_existing("postgres://ops@127.0.0.1/app", "idem").await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_existing(url: &str, schema: &str) -> Result<Self, StoreError> {
        validate_schema(schema)?;
        let db = Connections {
            pool: Self::pool(url)?,
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
        };
        db.bounded(db.check_existing(schema)).await?;
        Ok(Self::over(db, schema))
    }

    /// The pool `connect` makes.
    fn pool(url: &str) -> Result<Pool, StoreError> {
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
        Ok(pool)
    }

    /// Use an existing pool (with TLS, other limits or timeouts) and keep every table in
    /// `schema`, creating it if needed.
    ///
    /// # Errors
    ///
    /// As for [`connect`](PostgresStore::connect).
    ///
    /// ```no_run
    /// use idem::store::postgres::PostgresStore;
    /// use idem::store::postgres::deadpool_postgres::tokio_postgres::NoTls;
    /// use idem::store::postgres::deadpool_postgres::{Config, Runtime};
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
        let db = Connections {
            pool,
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
        };
        db.bounded(db.set_up(schema)).await?;
        Ok(Self::over(db, schema))
    }

    fn over(db: Connections, schema: &str) -> Self {
        let backend = PostgresBackend {
            db,
            schema: schema.to_owned(),
            sql: Statements::new(schema),
        };
        Limits::default().layer(backend)
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
    /// use idem::store::postgres::PostgresStore;
    ///
    /// # async fn run() -> Result<(), idem::store::StoreError> {
    /// let store = PostgresStore::connect("postgres://app@127.0.0.1/app", "idem")
    ///     .await?
    ///     .with_operation_timeout(Duration::from_secs(5));
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_operation_timeout(mut self, timeout: Duration) -> Self {
        self.inner.db.operation_timeout = timeout;
        self
    }

    /// The schema the store's tables live in.
    ///
    /// ```no_run
    /// use idem::store::postgres::PostgresStore;
    ///
    /// # async fn run() -> Result<(), idem::store::StoreError> {
    /// let store = PostgresStore::connect("postgres://app@127.0.0.1/app", "idem").await?;
    /// assert_eq!(store.schema(), "idem");
    /// # Ok(())
    /// # }
    /// ```
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }
}

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
}
