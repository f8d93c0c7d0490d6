//! Compiles the PostgreSQL run of the integration suite (tests/api_postgres.rs) when
//! CUSTODIAN_TEST_POSTGRES_URL is set, and rebuilds when migrations change.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(postgres_tests)");
    println!("cargo::rerun-if-env-changed=CUSTODIAN_TEST_POSTGRES_URL");
    // sqlx::migrate! embeds the migration files: rebuild when one is added or changed.
    println!("cargo::rerun-if-changed=migrations");
    if std::env::var_os("CUSTODIAN_TEST_POSTGRES_URL").is_some_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=postgres_tests");
    }
}
