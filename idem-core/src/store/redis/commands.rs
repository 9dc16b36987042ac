//! How one operation reaches the server: a script run against one record's keys (with
//! `WAIT` in the same pipeline when the store waits for replicas), an atomic read of records
//! with the server's clock, one `SCAN` step, and giving back a claim the replicas did not
//! acknowledge.

use redis::{ErrorKind, Script, ServerErrorKind, Value};

use super::RedisBackend;
use super::codec::{decode_record, millis, server_time, text};
use super::connection::Resend;
use super::keys::{RecordKeys, SCAN_COUNT, glob_escape};
use super::replicas::{Unconfirmed, wrote};
use crate::key::RecordKey;
use crate::record::{Fence, Record, Timestamp};
use crate::store::StoreError;

impl RedisBackend {
    pub(super) fn keys(&self, key: &RecordKey) -> RecordKeys {
        RecordKeys::new(&self.prefix, key)
    }

    /// Run a script against one record and split its reply into a status and the rest. When
    /// the store waits for replicas and the script wrote (`ok`, `acquired`,
    /// `marked_unknown`) but too few acknowledged, fail: `what` names the write in the error.
    pub(super) async fn run(
        &self,
        script: &Script,
        key: &RecordKey,
        what: &str,
        args: &[&[u8]],
    ) -> Result<(String, Vec<Value>), StoreError> {
        let (status, rest, unconfirmed) = self.exec(script, key, args, true).await?;
        match unconfirmed {
            Some(u) if wrote(&status) => Err(u.error(
                key,
                what,
                "it stands there, and is lost if the primary fails over before it replicates (report it \
                 as ambiguous, never as done)",
            )),
            _ => Ok((status, rest)),
        }
    }

    /// Run a script; with `wait`, and replicas to wait for, `WAIT` in the same pipeline
    /// (`WAIT` counts the writes of the connection it is sent on, so it may not go on a
    /// connection the manager made after the script's). Also returns whether the replicas
    /// fell short, whatever the script did.
    pub(super) async fn exec(
        &self,
        script: &Script,
        key: &RecordKey,
        args: &[&[u8]],
        wait: bool,
    ) -> Result<(String, Vec<Value>, Option<Unconfirmed>), StoreError> {
        let keys = self.keys(key);
        let mut invocation = script.key(&keys.rec);
        invocation.key(&keys.steps).key(&keys.fence);
        for arg in args {
            invocation.arg(*arg);
        }
        let invocation = &invocation;
        let acks = self.replicas.filter(|_| wait);
        // A state-changing script: sent again only if it certainly never reached the server.
        let (reply, acked): (Value, Option<i64>) = match acks {
            None => {
                let reply = self
                    .conn
                    .call(Resend::IfNeverSent, move |mut conn| async move {
                        invocation.invoke_async(&mut conn).await
                    })
                    .await?;
                (reply, None)
            }
            Some(acks) => {
                let mut pipe = redis::pipe();
                pipe.invoke_script(invocation)
                    .cmd("WAIT")
                    .arg(acks.replicas)
                    .arg(millis(acks.timeout));
                let pipe = &pipe;
                let (reply, acked) = self
                    .conn
                    .call(Resend::IfNeverSent, move |mut conn| async move {
                        match pipe.query_async(&mut conn).await {
                            // The script did not run: load it and send both again.
                            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                                script.load_async(&mut conn).await?;
                                pipe.query_async(&mut conn).await
                            }
                            other => other,
                        }
                    })
                    .await?;
                (reply, Some(acked))
            }
        };
        let unconfirmed = acks.zip(acked).and_then(|(acks, acked)| {
            (acked < i64::from(acks.replicas)).then_some(Unconfirmed { acked, acks })
        });
        let Value::Array(mut items) = reply else {
            return Err(StoreError::corrupt(
                key,
                format!("unexpected script reply {reply:?}"),
            ));
        };
        if items.is_empty() {
            return Err(StoreError::corrupt(key, "empty script reply"));
        }
        let status = text(&items.remove(0))
            .ok_or_else(|| StoreError::corrupt(key, "script reply without a status"))?;
        Ok((status, items, unconfirmed))
    }

    /// Read records atomically, with the server time of the read.
    pub(super) async fn read(
        &self,
        keys: &[(RecordKeys, RecordKey)],
    ) -> Result<(Timestamp, Vec<Option<Record>>), StoreError> {
        let mut pipe = redis::pipe();
        pipe.atomic().cmd("TIME");
        for (k, _) in keys {
            pipe.cmd("HGETALL").arg(&k.rec);
            pipe.cmd("LRANGE").arg(&k.steps).arg(0).arg(-1);
        }
        let pipe = &pipe;
        let values: Vec<Value> = self
            .conn
            .call(Resend::AfterDrop, move |mut conn| async move {
                pipe.query_async(&mut conn).await
            })
            .await?;
        let mut values = values.into_iter();
        let now = values
            .next()
            .as_ref()
            .and_then(server_time)
            .ok_or_else(|| StoreError::Unavailable("Redis TIME gave no time".into()))?;
        let mut records = Vec::with_capacity(keys.len());
        for (_, key) in keys {
            let (Some(hash), Some(steps)) = (values.next(), values.next()) else {
                return Err(StoreError::corrupt(key, "short reply to a record read"));
            };
            records.push(decode_record(key, &hash, &steps)?);
        }
        Ok((now, records))
    }

    /// One `SCAN` step over this store's record hashes: the next cursor, and the keys of the
    /// records found.
    pub(super) async fn scan(
        &self,
        cursor: u64,
    ) -> Result<(u64, Vec<(RecordKeys, RecordKey)>), StoreError> {
        let pattern = format!("{}:{{*}}:rec", glob_escape(&self.prefix));
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let scan = &scan;
        let (next, names): (u64, Vec<String>) = self
            .conn
            .call(Resend::AfterDrop, move |mut conn| async move {
                scan.query_async(&mut conn).await
            })
            .await?;
        let keys = names
            .iter()
            .filter_map(|name| {
                RecordKeys::from_rec(name).map(|k| (k, RecordKey::from_stored(name.as_str())))
            })
            .collect();
        Ok((next, keys))
    }

    pub(super) fn retention_ms(&self) -> u64 {
        millis(self.fence_retention)
    }

    pub(super) fn unknown_retention_ms(&self) -> u64 {
        millis(self.unknown_retention)
    }

    /// Undo a claim the replicas did not acknowledge, so that a worker told it holds nothing
    /// does not leave the key held until its lease ends (and, under `MarkUnknown`, turned
    /// Unknown for a call that never ran). A new record is released; a take-over keeps the
    /// earlier holder's journal and gets an expired lease, as the orphan it took over had.
    /// Neither waits for replicas. Returns the error to report.
    pub(super) async fn give_back(
        &self,
        key: &RecordKey,
        fence: Fence,
        takeover: bool,
        unconfirmed: &Unconfirmed,
    ) -> StoreError {
        let undone = if takeover {
            self.exec(
                &self.scripts.renew,
                key,
                &[fence.to_string().as_bytes(), b"0"],
                false,
            )
            .await
        } else {
            let retention = self.retention_ms().to_string();
            self.exec(
                &self.scripts.release,
                key,
                &[fence.to_string().as_bytes(), retention.as_bytes()],
                false,
            )
            .await
        };
        let consequence = match undone {
            Ok((status, ..)) if status == "ok" => {
                "so it was given back: nothing holds the key".to_owned()
            }
            Ok((status, ..)) => format!("giving the claim back found it {status}"),
            Err(e) => format!(
                "giving the claim back failed ({e}): the key stays held until the lease ends"
            ),
        };
        unconfirmed.error(key, "the claim", &consequence)
    }
}
