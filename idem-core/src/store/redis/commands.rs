//! How one operation reaches the server: a script run against one record's keys (with
//! `WAIT` in the same pipeline when the store waits for replicas), an atomic read of records
//! with the server's clock, one `SCAN` step, the reads of pending approvals, and giving back
//! a claim the replicas did not acknowledge.

use futures_util::{StreamExt, TryStreamExt, stream};
use redis::{ErrorKind, Script, ServerErrorKind, Value};

use super::RedisBackend;
use super::cluster::{self, Node};
use super::codec::{approval_value, decode_record, millis, server_time, text};
use super::connection::{Conn, Resend};
use super::keys::{RecordKeys, SCAN_COUNT, approval_index, glob_escape};
use super::replicas::{Unconfirmed, wrote};
use crate::key::RecordKey;
use crate::record::{Fence, Record, Timestamp};
use crate::store::StoreError;

/// Reads sent at once in a cluster, where each record is read on its own: a read of several
/// records would cross slots.
const CONCURRENT_READS: usize = 32;

/// Where a `SCAN` of the store's records has got to: the nodes still to walk (every primary
/// of a cluster, each with its own keys; `None` for a single server), and the cursor on the
/// first of them.
pub(super) struct Walk {
    nodes: Vec<Option<Node>>,
    cursor: u64,
}

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
        let keys = self.keys(key);
        self.run_on(
            script,
            key,
            &[&keys.rec, &keys.steps, &keys.fence],
            what,
            args,
        )
        .await
    }

    /// [`run`](Self::run) with the script's `KEYS` given: for a script that works on other
    /// keys than a record's three (the swap of a pending approval).
    pub(super) async fn run_on(
        &self,
        script: &Script,
        key: &RecordKey,
        names: &[&str],
        what: &str,
        args: &[&[u8]],
    ) -> Result<(String, Vec<Value>), StoreError> {
        let (status, rest, unconfirmed) = self.exec_on(script, key, names, args, true).await?;
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
        self.exec_on(
            script,
            key,
            &[&keys.rec, &keys.steps, &keys.fence],
            args,
            wait,
        )
        .await
    }

    /// [`exec`](Self::exec) with the script's `KEYS` given (`names`, in order); `key` names
    /// the record in errors.
    async fn exec_on(
        &self,
        script: &Script,
        key: &RecordKey,
        names: &[&str],
        args: &[&[u8]],
        wait: bool,
    ) -> Result<(String, Vec<Value>, Option<Unconfirmed>), StoreError> {
        let mut invocation = script.prepare_invoke();
        for name in names {
            invocation.key(*name);
        }
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
                // In a cluster the pipeline goes where its keyed command goes (redis-rs routes
                // a pipeline by its first command with a slot; `WAIT`, keyless, would alone go
                // to every primary), on that node's one connection; a `MOVED` answer to the
                // script sends the whole pipeline on to the new primary.
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

    /// Read records, each with the server time of its read: on a single server all in one
    /// atomic step with one clock; in a cluster each record atomically with the clock of the
    /// primary that owns it (the clock its scripts decide by), a few records at once.
    pub(super) async fn read(
        &self,
        keys: &[(RecordKeys, RecordKey)],
    ) -> Result<Vec<(Timestamp, Option<Record>)>, StoreError> {
        if !self.conn.is_cluster() {
            let (now, records) = self.read_together(keys).await?;
            return Ok(records.into_iter().map(|r| (now, r)).collect());
        }
        // Collected first: a stream over a closure is not `Send` for every lifetime, which the
        // `Store` futures must be.
        let reads: Vec<_> = keys.chunks(1).map(|one| self.read_alone(one)).collect();
        let reads: Vec<_> = stream::iter(reads)
            .buffered(CONCURRENT_READS)
            .try_collect()
            .await?;
        Ok(reads
            .into_iter()
            .flat_map(|(now, records)| records.into_iter().map(move |r| (now, r)))
            .collect())
    }

    /// Read records in one atomic step (a `MULTI` with `TIME`), on a single server.
    async fn read_together(
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
        decode_read(keys, values)
    }

    /// Read the record of `one` (a slice of one) atomically with a script, in a cluster: the
    /// client sends a script answered `MOVED` on to the new primary, not a `MULTI`.
    async fn read_alone(
        &self,
        one: &[(RecordKeys, RecordKey)],
    ) -> Result<(Timestamp, Vec<Option<Record>>), StoreError> {
        let mut invocation = self.scripts.read.prepare_invoke();
        for (k, _) in one {
            invocation.key(&k.rec).key(&k.steps);
        }
        let invocation = &invocation;
        let values: Vec<Value> = self
            .conn
            .call(Resend::AfterDrop, move |mut conn| async move {
                invocation.invoke_async(&mut conn).await
            })
            .await?;
        decode_read(one, values)
    }

    /// A walk over the store's records: on every primary of a cluster (as the client's slot
    /// map has them now), else on the one server.
    pub(super) async fn walk(&self) -> Result<Walk, StoreError> {
        let mut nodes: Vec<Option<Node>> = self
            .conn
            .call(Resend::AfterDrop, |conn| async move {
                match conn {
                    Conn::Server(_) => Ok(vec![None]),
                    Conn::Cluster(mut conn) => Ok(cluster::primaries(&mut conn)
                        .await?
                        .into_iter()
                        .map(Some)
                        .collect()),
                }
            })
            .await?;
        // Walked from the end.
        nodes.reverse();
        Ok(Walk { nodes, cursor: 0 })
    }

    /// The records of the next `SCAN` step of `walk`, or `None` once every node is walked.
    /// A record may come more than once (`SCAN` may return a key twice; a slot that moves
    /// during the walk is scanned on both nodes).
    pub(super) async fn next_page(
        &self,
        walk: &mut Walk,
    ) -> Result<Option<Vec<(RecordKeys, RecordKey)>>, StoreError> {
        let Some(node) = walk.nodes.last() else {
            return Ok(None);
        };
        let (next, keys) = self.scan(node.as_ref(), walk.cursor).await?;
        walk.cursor = next;
        if next == 0 {
            walk.nodes.pop();
        }
        Ok(Some(keys))
    }

    /// One `SCAN` step over this store's record hashes on `node` (`None`: the one server):
    /// the next cursor, and the keys of the records found.
    async fn scan(
        &self,
        node: Option<&Node>,
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
                conn.query_on(scan, node).await
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

    /// The text of the pending approval under `key`, if there is one.
    pub(super) async fn read_approval(
        &self,
        key: &RecordKey,
    ) -> Result<Option<String>, StoreError> {
        let name = self.keys(key).approval;
        let name = name.as_str();
        let value: Value = self
            .conn
            .call(Resend::AfterDrop, move |mut conn| async move {
                redis::cmd("GET").arg(name).query_async(&mut conn).await
            })
            .await?;
        approval_value(key, &value)
    }

    /// Append `text` to a run's account, and keep the account at least `ttl` from now.
    pub(super) async fn append_run(
        &self,
        tenant: &str,
        run_id: &str,
        text: &str,
        ttl: std::time::Duration,
    ) -> Result<(), StoreError> {
        // One script: the entry and the account's expiry change together.
        const APPEND: &str = "redis.call('RPUSH', KEYS[1], ARGV[1]) \
            if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then \
            redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 1";
        let name = super::keys::run_account(&self.prefix, tenant, run_id);
        let ttl = ttl.as_millis().clamp(1, i64::MAX as u128) as i64;
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(APPEND).arg(1).arg(&name).arg(text).arg(ttl);
        let cmd = &cmd;
        let _: Value = self
            .conn
            .call(Resend::IfNeverSent, move |mut conn| async move {
                cmd.query_async(&mut conn).await
            })
            .await?;
        Ok(())
    }

    /// A run's account, in append order.
    pub(super) async fn read_run(
        &self,
        tenant: &str,
        run_id: &str,
    ) -> Result<Vec<String>, StoreError> {
        let name = super::keys::run_account(&self.prefix, tenant, run_id);
        let name = name.as_str();
        self.conn
            .call(Resend::AfterDrop, move |mut conn| async move {
                redis::cmd("LRANGE")
                    .arg(name)
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut conn)
                    .await
            })
            .await
    }

    /// The record keys in the index of pending approvals.
    pub(super) async fn approval_keys(&self) -> Result<Vec<RecordKey>, StoreError> {
        let index = approval_index(&self.prefix);
        let index = index.as_str();
        let members: Vec<String> = self
            .conn
            .call(Resend::AfterDrop, move |mut conn| async move {
                redis::cmd("SMEMBERS")
                    .arg(index)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        Ok(members.into_iter().map(RecordKey::from_stored).collect())
    }

    /// Add `key` to the index of pending approvals: before its entry is written, so that no
    /// entry exists unindexed. A separate command, not part of the swap: the index is in
    /// another slot than the entry. Adding twice changes nothing, so it may be sent again.
    pub(super) async fn index_approval(&self, key: &RecordKey) -> Result<(), StoreError> {
        self.index_command("SADD", key).await
    }

    /// Take `key` out of the index after its entry was deleted; if an entry is back already
    /// (a new request for the key came between the deletion and this), put it back in, so
    /// that it is listed.
    pub(super) async fn unindex_approval(&self, key: &RecordKey) -> Result<(), StoreError> {
        self.index_command("SREM", key).await?;
        if self.read_approval(key).await?.is_some() {
            self.index_approval(key).await?;
        }
        Ok(())
    }

    async fn index_command(&self, command: &str, key: &RecordKey) -> Result<(), StoreError> {
        let mut cmd = redis::cmd(command);
        cmd.arg(approval_index(&self.prefix)).arg(key.as_str());
        let cmd = &cmd;
        let _: Value = self
            .conn
            .call(Resend::AfterDrop, move |mut conn| async move {
                cmd.query_async(&mut conn).await
            })
            .await?;
        Ok(())
    }

    /// The texts of the pending approvals under `keys` (at most a few hundred: one `MGET` on
    /// a single server, a `GET` each in a cluster), leaving out the keys that have none (an
    /// index member whose swap failed, or whose entry is being removed).
    pub(super) async fn read_approvals(
        &self,
        keys: &[RecordKey],
    ) -> Result<Vec<(RecordKey, String)>, StoreError> {
        if keys.is_empty() {
            // `MGET` without a key is a syntax error.
            return Ok(Vec::new());
        }
        if self.conn.is_cluster() {
            // One `GET` each: the entries are in their records' slots.
            let reads: Vec<_> = keys.iter().map(|k| self.read_approval(k)).collect();
            let texts: Vec<Option<String>> = stream::iter(reads)
                .buffered(CONCURRENT_READS)
                .try_collect()
                .await?;
            return Ok(keys
                .iter()
                .zip(texts)
                .filter_map(|(key, text)| text.map(|t| (key.clone(), t)))
                .collect());
        }
        let mut mget = redis::cmd("MGET");
        for key in keys {
            mget.arg(self.keys(key).approval);
        }
        let mget = &mget;
        let values: Vec<Value> = self
            .conn
            .call(Resend::AfterDrop, move |mut conn| async move {
                mget.query_async(&mut conn).await
            })
            .await?;
        if values.len() != keys.len() {
            return Err(StoreError::Unavailable(format!(
                "Redis answered MGET of {} pending approvals with {} values",
                keys.len(),
                values.len()
            )));
        }
        let mut out = Vec::with_capacity(keys.len());
        for (key, value) in keys.iter().zip(&values) {
            if let Some(text) = approval_value(key, value)? {
                out.push((key.clone(), text));
            }
        }
        Ok(out)
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

/// The reply of a read: the server's `TIME`, then each record's hash and steps.
fn decode_read(
    keys: &[(RecordKeys, RecordKey)],
    values: Vec<Value>,
) -> Result<(Timestamp, Vec<Option<Record>>), StoreError> {
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
