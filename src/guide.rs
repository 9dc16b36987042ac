//! The guide: one chapter a topic, for the user who has read the README and now needs the
//! exact rules. The chapters are the files of `docs/guide/`; their examples run as tests.
//! The API docs of each item hold the details.

#[doc = include_str!("../docs/guide/keys.md")]
pub mod keys {}

#[doc = include_str!("../docs/guide/unknown.md")]
pub mod unknown {}

#[doc = include_str!("../docs/guide/stores.md")]
pub mod stores {}

#[doc = include_str!("../docs/guide/secrets.md")]
pub mod secrets {}

#[doc = include_str!("../docs/guide/approvals.md")]
pub mod approvals {}

#[doc = include_str!("../docs/guide/controls.md")]
pub mod controls {}

#[doc = include_str!("../docs/guide/operating.md")]
pub mod operating {}

#[doc = include_str!("../docs/guide/mcp.md")]
pub mod mcp {}

#[doc = include_str!("../docs/guide/http.md")]
pub mod http {}

#[doc = include_str!("../docs/guide/agent.md")]
pub mod agent {}

#[doc = include_str!("../docs/guide/observability.md")]
pub mod observability {}

#[doc = include_str!("../docs/guide/schemas.md")]
pub mod schemas {}

/// (Feature `testing`: its example uses `idem::testing`.)
#[cfg(all(feature = "testing", unix))]
#[doc = include_str!("../docs/guide/crashtest.md")]
pub mod crashtest {}

#[doc = include_str!("../docs/guide/proof.md")]
pub mod proof {}
