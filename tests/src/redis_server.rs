//! A private redis-server for tests that stop and start it.
