//! Nothing: the tests are the point.
