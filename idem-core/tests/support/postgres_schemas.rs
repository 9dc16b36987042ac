//! Clean-up of the shared PostgreSQL server: every schema a test's stores worked in is
//! dropped when the test ends, passed or panicked.
//!
//! It names the driver through `idem_core`, a dependency of the facade too, so that the
//! facade's tests include this very file.

use std::sync::Mutex;

use idem_core::store::postgres::deadpool_postgres::tokio_postgres::{self, NoTls};

use super::services::unique;

/// The schemas one test works in on the server at `url`; dropping this drops them. Declare
/// it before the stores, so that it outlives them.
#[derive(Debug)]
pub struct PostgresSchemas {
    url: String,
    used: Mutex<Vec<String>>,
}

impl PostgresSchemas {
    pub fn new(url: &str) -> PostgresSchemas {
        PostgresSchemas {
            url: url.to_owned(),
            used: Mutex::new(Vec::new()),
        }
    }

    /// A schema name no other test or run uses (`tag` in lowercase, with `_`), dropped with
    /// the others.
    pub fn fresh(&self, tag: &str) -> String {
        let schema = unique(tag);
        self.used
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(schema.clone());
        schema
    }
}

impl Drop for PostgresSchemas {
    fn drop(&mut self) {
        let used = std::mem::take(
            self.used
                .get_mut()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        if used.is_empty() {
            return;
        }
        // A thread of its own: a test drops this inside its runtime or outside any, and a
        // runtime cannot be started from within another.
        let url = self.url.clone();
        let dropped = std::thread::spawn(move || drop_schemas(&url, &used))
            .join()
            .unwrap_or_else(|_| Err("the clean-up thread panicked".to_owned()));
        match dropped {
            Ok(()) => {}
            // A second panic while unwinding would abort the whole test binary.
            Err(e) if std::thread::panicking() => eprintln!("{e}"),
            Err(e) => panic!("{e}"),
        }
    }
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
