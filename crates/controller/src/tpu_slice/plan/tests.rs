//! Table tests of the pure planning functions.
