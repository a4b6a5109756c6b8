//! The error every store operation reports.

use std::time::Duration;

/// A boxed error from a store's client library.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a store operation failed. The runtime answers 503 (fail closed)
/// when this happens before a handler runs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store could not be reached or refused the operation.
    #[error("{store} store unavailable: {message}")]
    Unavailable {
        /// Which store (`"redis"`, `"postgres"`, ...).
        store: &'static str,
        /// What happened, with any password already removed.
        message: String,
        /// The client library's error.
        #[source]
        source: Option<BoxError>,
    },
    /// The operation did not finish in time.
    #[error("{store} store did not answer within {after:?}")]
    Timeout {
        /// Which store.
        store: &'static str,
        /// The configured timeout.
        after: Duration,
    },
    /// The store is full and cannot take a new record.
    #[error("{store} store is full ({detail})")]
    Full {
        /// Which store.
        store: &'static str,
        /// Which limit was reached.
        detail: String,
    },
    /// The store returned data this version cannot read.
    #[error("{store} store returned an unreadable record: {message}")]
    Corrupt {
        /// Which store.
        store: &'static str,
        /// What was wrong.
        message: String,
    },
    /// The store's server is set up in a way that can lose records (an
    /// evicting memory policy, say), and the store was asked to refuse it.
    #[error("{store} store refused: {message}")]
    Misconfigured {
        /// Which store.
        store: &'static str,
        /// What is wrong and how to fix it.
        message: String,
    },
}

impl StoreError {
    /// An [`StoreError::Unavailable`] wrapping a client error.
    pub fn unavailable(store: &'static str, source: impl Into<BoxError>) -> Self {
        let source = source.into();
        Self::Unavailable { store, message: source.to_string(), source: Some(source) }
    }
}
