//! Clean-up of the shared PostgreSQL server: every schema a test's stores worked in is
//! dropped when the test ends, passed or panicked.
//!
//! It names the driver through `idem_core`, a dependency of the facade too, so that the
//! facade's tests include this very file.

use idem_core::store::postgres::deadpool_postgres::tokio_postgres::{self, NoTls};

use super::services::Scratch;

/// The schemas one test works in on the PostgreSQL server at `url`; dropping this drops them.
pub fn postgres_schemas(url: &str) -> Scratch {
    Scratch::new(url, |url, schemas| {
        // A thread of its own: a test drops this inside its runtime or outside any, and a
        // runtime cannot be started from within another.
        let (url, schemas) = (url.to_owned(), schemas.to_vec());
        std::thread::spawn(move || drop_schemas(&url, &schemas))
            .join()
            .unwrap_or_else(|_| Err("the thread dropping the test schemas panicked".to_owned()))
    })
}

fn drop_schemas(url: &str, schemas: &[String]) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("a runtime to drop the test schemas: {e}"))?;
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, NoTls)
            .await
            .map_err(|e| format!("connect to drop the test schemas: {e}"))?;
        let connection = tokio::spawn(connection);
        for schema in schemas {
            client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                .await
                .map_err(|e| format!("drop the test schema {schema}: {e}"))?;
        }
        drop(client);
        let _ = connection.await;
        Ok(())
    })
}
