//! Sending: each pending call, as it is pending now (record key and fingerprint), to every
//! channel once, across restarts and between notifiers on one store.
//!
//! Once is kept in the store, over the budget primitives every store has (as the decision
//! log is): per channel and call, a scope `idem:notified:<platform>:<record key>:<fingerprint
//! hex>` holding a [`Delivery`]. A notifier claims it first, by a compare-and-swap from what
//! it read (nothing, or a failed delivery), to `sending`, kept only for a lease; then it
//! posts; then it writes `sent` (kept until the call's request expires) or `failed`. So:
//! - two notifiers never both post: one claim wins the swap;
//! - a failed post (an HTTP error, an unreachable host) is retried at the next poll, by any
//!   notifier, because `failed` is claimable;
//! - a notifier that dies while posting leaves a claim that expires with its lease: the call
//!   is then posted again, perhaps a second time (the one case of more than once; a post
//!   cannot be made atomic with the store's write).
//!
//! What to do with what is read is [`claimable`], a pure function; the loop carries it out.

use std::time::Duration;

use idem_core::store::approvals::{ApprovalFilter, PendingApproval};
use idem_core::{Store, StoreError, Timestamp};
use idem_registry::ApprovalKey;
use idem_registry::approval::{ApprovalDesk, ApprovalLink};
use reqwest::Url;
use serde::{Deserialize, Serialize};

use super::Platform;
use super::config::Channel;
use super::message::{self, Pending};
use super::verify::sign_webhook;

/// How long a claim holds while its post is under way (several HTTP timeouts).
pub const LEASE: Duration = Duration::from_secs(60);

/// How long one post may take.
pub const POST_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a delivery is remembered after its call's request expires.
const AFTER_EXPIRY: Duration = Duration::from_secs(3600);

/// Pending calls read per poll.
const PER_POLL: usize = 1000;

/// The scope prefix of deliveries.
pub const SCOPE_PREFIX: &str = "idem:notified:";

/// Where one channel's delivery of one call, as pending now, is kept.
pub fn scope(platform: Platform, entry: &PendingApproval) -> String {
    format!(
        "{SCOPE_PREFIX}{}:{}:{}",
        platform.name(),
        entry.key.as_str(),
        entry.fingerprint.to_hex()
    )
}

/// One channel's delivery of one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case", deny_unknown_fields)]
pub enum Delivery {
    /// A notifier is posting it (kept for [`LEASE`] only).
    Sending { by: String, at: Timestamp },
    /// Posted; the platform took it.
    Sent { by: String, at: Timestamp },
    /// The last post failed: the next poll tries again.
    Failed { by: String, at: Timestamp },
}

/// Whether a notifier may claim a delivery that reads `current`: when none was made (or its
/// claim's lease ended), or the last one failed. Text that does not read as a delivery is
/// left alone (written by another version, or by hand): never posted over.
pub fn claimable(current: Option<&str>) -> bool {
    match current {
        None => true,
        Some(text) => matches!(
            serde_json::from_str::<Delivery>(text),
            Ok(Delivery::Failed { .. })
        ),
    }
}

/// Posts each pending call to each channel once.
pub struct Sender<'a> {
    pub store: &'a dyn Store,
    pub client: reqwest::Client,
    pub channels: &'a [Channel],
    /// Signs the inbox links.
    pub signing: &'a ApprovalKey,
    /// The inbox's base URL, for the links.
    pub inbox_url: Option<&'a str>,
    /// Where the generic webhook's receiver answers.
    pub webhook_callback: String,
    /// This notifier, in the deliveries it writes.
    pub me: String,
}

impl Sender<'_> {
    /// One poll: every pending call to every channel that has not had it. How many posts
    /// went out.
    pub async fn poll(&self) -> Result<usize, StoreError> {
        let filter = ApprovalFilter {
            limit: PER_POLL,
            ..ApprovalFilter::default()
        };
        let pending = ApprovalDesk::over(self.store).pending(&filter).await?;
        let mut sent = 0;
        for entry in &pending {
            for channel in self.channels {
                if self.deliver(entry, channel).await? {
                    sent += 1;
                }
            }
        }
        Ok(sent)
    }

    /// Post `entry` to `channel` unless it was (or is being) posted; whether it was, now.
    async fn deliver(
        &self,
        entry: &PendingApproval,
        channel: &Channel,
    ) -> Result<bool, StoreError> {
        let scope = scope(channel.platform, entry);
        let current = self.store.budget_text(&scope).await?;
        if !claimable(current.as_deref()) {
            return Ok(false);
        }
        let now = self.store.now().await?;
        let claim = text(&Delivery::Sending {
            by: self.me.clone(),
            at: now,
        });
        if !self
            .store
            .swap_budget(&scope, current.as_deref(), &claim, LEASE)
            .await?
        {
            // Another notifier claimed it first.
            return Ok(false);
        }
        let posted = self.post(entry, channel).await;
        let at = self.store.now().await?;
        let (after, ok) = match &posted {
            Ok(()) => (
                Delivery::Sent {
                    by: self.me.clone(),
                    at,
                },
                true,
            ),
            Err(why) => {
                tracing::warn!(
                    channel = channel.platform.name(),
                    key = %entry.key,
                    "the notice of a pending call was not delivered ({why}); retried at the next poll"
                );
                (
                    Delivery::Failed {
                        by: self.me.clone(),
                        at,
                    },
                    false,
                )
            }
        };
        let keep = Duration::from_millis(entry.expires_at.0.saturating_sub(at.0)) + AFTER_EXPIRY;
        // A claim whose lease ended meanwhile may be another's now: then theirs stands.
        self.store
            .swap_budget(&scope, Some(&claim), &text(&after), keep)
            .await?;
        if ok {
            tracing::info!(
                channel = channel.platform.name(),
                key = %entry.key,
                tool = %entry.tool,
                "sent the pending call"
            );
        }
        Ok(ok)
    }

    /// Post `entry`'s message to `channel`; an error says what failed, never the URL (a
    /// credential for Slack and Teams) or a secret.
    async fn post(&self, entry: &PendingApproval, channel: &Channel) -> Result<(), String> {
        let inbox_link = self.inbox_url.map(|base| {
            ApprovalLink {
                tenant: entry.tenant.clone(),
                record_key: entry.key.as_str().to_owned(),
                fingerprint: entry.fingerprint,
                expires_at: entry.expires_at,
            }
            .url(base, self.signing)
        });
        let pending = Pending {
            entry,
            inbox_link,
            callback_url: self.webhook_callback.clone(),
        };
        let body = match channel.platform {
            Platform::Slack => message::slack(&pending),
            Platform::Teams => message::teams(&pending),
            Platform::Webhook => message::webhook(&pending),
        };
        let body = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
        let mut request = self
            .client
            .post(channel.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        if channel.platform == Platform::Webhook {
            let signature = sign_webhook(&channel.secret, super::unix_now(), &body);
            request = request.header(super::WEBHOOK_SIGNATURE, signature);
        }
        let response = request
            .body(body)
            .send()
            .await
            .map_err(|e| e.without_url().to_string())?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!(
                "{} answered {status}",
                host(&channel.url).unwrap_or("the receiver")
            ));
        }
        Ok(())
    }
}

/// A URL's host, for messages: the rest of a webhook URL is its credential.
fn host(url: &Url) -> Option<&str> {
    url.host_str()
}

fn text(delivery: &Delivery) -> String {
    serde_json::to_string(delivery).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_is_claimed_only_when_none_was_made_or_the_last_failed() {
        let at = Timestamp(5);
        let by = || "n1".to_owned();
        let cases = [
            (None, true),
            (Some(text(&Delivery::Failed { by: by(), at })), true),
            (Some(text(&Delivery::Sending { by: by(), at })), false),
            (Some(text(&Delivery::Sent { by: by(), at })), false),
            (Some("{\"state\":\"lost\"}".to_owned()), false),
            (Some("not json".to_owned()), false),
        ];
        for (current, claim) in cases {
            assert_eq!(claimable(current.as_deref()), claim, "{current:?}");
        }
        assert_eq!(
            text(&Delivery::Sent { by: by(), at }),
            r#"{"state":"sent","by":"n1","at":5}"#
        );
    }
}
