//! The store implementations, one module per backend, each behind a cargo
//! feature.

#[cfg(feature = "memory")]
mod memory;
#[cfg(feature = "memory")]
pub use memory::MemoryStore;
