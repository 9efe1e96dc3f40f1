//! The PreprocessBatch controller (in progress).
