//! The fault-injecting file system (work in progress).

/// In-memory fault-injecting file system.
#[derive(Debug, Default)]
pub struct SimVfs;
