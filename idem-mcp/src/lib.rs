#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod keys;
mod model;
#[cfg(feature = "proxy")]
pub mod proxy;
mod server;
pub mod transport;

pub use model::{
    APPROVAL_INPUT, META_BARE_KEY, META_DEDUPLICATED, META_DIFFERING_ARGUMENTS,
    META_DOWNSTREAM_KEY, META_ERROR, META_KEY, META_KEY_NAMES, META_MCP_KEY, META_RETRY_AFTER,
    META_RUN, META_STEP,
};
pub use server::{Authenticate, McpServeError, McpServer, account, approval, inbox};
