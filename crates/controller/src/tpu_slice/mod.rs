//! The TpuSlice controller (in progress).
