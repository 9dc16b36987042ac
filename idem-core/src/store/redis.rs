//! redis store (in progress).
