//! A private PostgreSQL server for tests that stop and start it.
