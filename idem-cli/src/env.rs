//! Every environment variable the `idem` binary reads, in one place.
//!
//! | variable | what it holds | read by |
//! |---|---|---|
//! | `IDEM_STORE` | the store (`--store`): a SQLite path, `redis://...` or `postgres://...` | every command |
//! | `IDEM_STORE_PREFIX` | the Redis key prefix or PostgreSQL schema (`--prefix`) | every command |
//! | `IDEM_APPROVER` | who decides (`--as`) | approvals, cases, runs, `idem ui` |
//! | `IDEM_APPROVAL_KEY` | the key approvals are signed with, `id:hex-secret` | approvals, `idem ui`, `idem notify` |
//! | `IDEM_UI_TOKEN` | the inbox's sign-in token for the `--as` identity | `idem ui` |
//! | `IDEM_UI_TOKENS` | one sign-in token per person, `who=token,...` | `idem ui` |
//! | `IDEM_PROXY_TOKENS` | bearer tokens of the proxy's HTTP endpoint, `token=tenant,...` | `idem mcp-proxy --http` |
//! | `IDEM_PROXY_SECRET_KEY` | the key secret arguments are sealed with (hex) | `idem mcp-proxy` |
//! | `IDEM_PROXY_APPROVAL_KEYS` | the keys approvals are verified with, `id:hex-secret,...` | `idem mcp-proxy` |
//! | (named by `idem notify`'s configuration) | Slack's signing secret, Teams' security token, the webhook's secret and URLs | `idem notify` |
//! | `IDEM_LOG` | the log filter (`info` unless set) | every command |

/// The store (`--store`).
pub const STORE: &str = "IDEM_STORE";
/// The Redis key prefix or PostgreSQL schema (`--prefix`).
pub const STORE_PREFIX: &str = "IDEM_STORE_PREFIX";
/// Who decides (`--as`).
pub const APPROVER: &str = "IDEM_APPROVER";
/// The key approvals are signed with (`id:hex-secret`).
pub const APPROVAL_KEY: &str = "IDEM_APPROVAL_KEY";
/// The inbox's sign-in token for the `--as` identity.
pub const UI_TOKEN: &str = "IDEM_UI_TOKEN";
/// One inbox sign-in token per person (`who=token,...`).
pub const UI_TOKENS: &str = "IDEM_UI_TOKENS";
/// Bearer tokens of the proxy's HTTP endpoint (`token=tenant,...`).
pub const PROXY_TOKENS: &str = "IDEM_PROXY_TOKENS";
/// The log filter.
pub const LOG: &str = "IDEM_LOG";
/// The proxy's keys: named by the proxy's library, whose errors say which to set.
#[cfg(feature = "mcp-proxy")]
pub use idem_mcp::proxy::{
    APPROVAL_KEY_ENV as PROXY_APPROVAL_KEYS, SECRET_KEY_ENV as PROXY_SECRET_KEY,
};
