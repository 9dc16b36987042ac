//! The PostgreSQL store's connections: a pool, every operation bounded by the operation
//! timeout, a connection cut short closed instead of pooled, and the schema's set-up (and
//! its migrations) serialised on an advisory lock.

use std::time::Duration;

use deadpool_postgres::Pool;
use deadpool_postgres::tokio_postgres::types::ToSql;
use deadpool_postgres::tokio_postgres::{self, Row};

use super::statements::{
    APPROVALS_TABLE, BUDGETS_TABLE, FLOOR_TABLE, LATER_COLUMNS, LATER_INDEXES, RUNS_TABLE,
    approvals_ddl, budgets_ddl, ddl, floor_ddl, runs_ddl,
};
use crate::store::StoreError;

/// Whether a relation (table or index) of that qualified name exists.
const HAS_RELATION: &str = "SELECT to_regclass($1::text) IS NOT NULL";

/// Whether the table `$1` has the column `$2`.
const HAS_COLUMN: &str = "SELECT EXISTS (SELECT 1 FROM pg_attribute \
                          WHERE attrelid = to_regclass($1::text) AND attname = $2::text \
                          AND NOT attisdropped)";

/// The yes-or-no answer of a catalog query.
async fn yes(
    client: &impl deadpool_postgres::GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<bool, StoreError> {
    client
        .query_one(sql, params)
        .await
        .map_err(db_error)?
        .try_get(0)
        .map_err(catalog_error)
}

/// The pool, and how long one operation may take.
pub(super) struct Connections {
    pub(super) pool: Pool,
    pub(super) operation_timeout: Duration,
}

impl Connections {
    /// Create the schema, tables and indexes unless the records table already exists, or add what a
    /// schema made by an older idem lacks (the tenant column, later indexes, the pending
    /// approvals', run accounts', fence floor's and budgets' tables). Concurrent `IF NOT EXISTS` statements
    /// can still collide on the catalogs' unique indexes, so set-up is serialised on a
    /// transaction-scoped advisory lock keyed by the schema name.
    pub(super) async fn set_up(&self, schema: &str) -> Result<(), StoreError> {
        let mut checkout = self.checkout().await?;
        let result = Self::create_schema(schema, checkout.client()).await;
        checkout.finish();
        result
    }

    /// Whether `schema` holds every table and column this idem uses, read without writing
    /// (the check of `PostgresStore::connect_existing`).
    pub(super) async fn check_existing(&self, schema: &str) -> Result<(), StoreError> {
        let mut checkout = self.checkout().await?;
        let client: &deadpool_postgres::Object = checkout.client();
        let exists = |name: String| async move { yes(client, HAS_RELATION, &[&name]).await };
        let table = format!("\"{schema}\".records");
        let refuse = |why: String| Err(StoreError::Unavailable(why));
        let result = if !exists(table.clone()).await? {
            refuse(format!(
                "schema `{schema}` holds no idem records (check the schema name: the one your dispatchers' PostgresStore was given)"
            ))
        } else {
            let mut missing = Vec::new();
            for (column, _) in LATER_COLUMNS {
                let has = yes(client, HAS_COLUMN, &[&table, &column]).await?;
                if !has {
                    missing.push(format!("column {column}"));
                }
            }
            if !exists(format!("\"{schema}\".{APPROVALS_TABLE}")).await? {
                missing.push(format!("table {APPROVALS_TABLE}"));
            }
            if missing.is_empty() {
                Ok(())
            } else {
                refuse(format!(
                    "schema `{schema}` was made by an older idem (it lacks {}): a dispatcher of this version upgrades it when it connects; upgrade the agents first, or use the idem of their version",
                    missing.join(", ")
                ))
            }
        };
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
        let exists = yes(&tx, HAS_RELATION, &[&table]).await?;
        if !exists {
            tx.batch_execute(&ddl(schema)).await.map_err(db_error)?;
        } else {
            // A table from before tenants or contracts. Checked first: `ADD COLUMN IF NOT
            // EXISTS` and `CREATE INDEX IF NOT EXISTS` lock the table even when there is
            // nothing to do, which would hold every worker's writes back whenever one starts.
            for (column, add) in LATER_COLUMNS {
                let has = yes(&tx, HAS_COLUMN, &[&table, &column]).await?;
                if !has {
                    tx.batch_execute(&format!(
                        "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {add}"
                    ))
                    .await
                    .map_err(db_error)?;
                }
            }
            for (name, index) in LATER_INDEXES {
                let exists = yes(&tx, HAS_RELATION, &[&format!("\"{schema}\".{name}")]).await?;
                if !exists {
                    tx.batch_execute(&index(schema)).await.map_err(db_error)?;
                }
            }
            // A schema from before pending approvals. Checked first, as above.
            let approvals = format!("\"{schema}\".{APPROVALS_TABLE}");
            let has_approvals = yes(&tx, HAS_RELATION, &[&approvals]).await?;
            if !has_approvals {
                tx.batch_execute(&approvals_ddl(schema))
                    .await
                    .map_err(db_error)?;
            }
            // A schema from before run accounts.
            let runs = format!("\"{schema}\".{RUNS_TABLE}");
            if !yes(&tx, HAS_RELATION, &[&runs]).await? {
                tx.batch_execute(&runs_ddl(schema))
                    .await
                    .map_err(db_error)?;
            }
            // A schema from before the fence floor.
            let floor = format!("\"{schema}\".{FLOOR_TABLE}");
            if !yes(&tx, HAS_RELATION, &[&floor]).await? {
                tx.batch_execute(&floor_ddl(schema))
                    .await
                    .map_err(db_error)?;
            }
            // A schema from before budgets.
            let budgets = format!("\"{schema}\".{BUDGETS_TABLE}");
            if !yes(&tx, HAS_RELATION, &[&budgets]).await? {
                tx.batch_execute(&budgets_ddl(schema))
                    .await
                    .map_err(db_error)?;
            }
        }
        tx.commit().await.map_err(db_error)
    }

    /// Run an operation within the operation timeout.
    pub(super) async fn bounded<T>(
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
    pub(super) async fn query(
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
    pub(super) async fn execute(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, StoreError> {
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

pub(super) fn db_error(e: tokio_postgres::Error) -> StoreError {
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

fn catalog_error(e: tokio_postgres::Error) -> StoreError {
    StoreError::Unavailable(format!("unexpected catalog answer: {e}"))
}
