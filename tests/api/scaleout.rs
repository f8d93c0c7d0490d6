//! Several processes on one PostgreSQL database.
