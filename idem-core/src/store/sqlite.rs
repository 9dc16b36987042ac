//! sqlite store (in progress).
