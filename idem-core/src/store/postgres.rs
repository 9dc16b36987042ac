//! postgres store (in progress).
