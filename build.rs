//! Compiles the PostgreSQL run of the integration suite (tests/api_postgres.rs) when
//! CUSTODIAN_TEST_POSTGRES_URL is set.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(postgres_tests)");
    println!("cargo::rerun-if-env-changed=CUSTODIAN_TEST_POSTGRES_URL");
    if std::env::var_os("CUSTODIAN_TEST_POSTGRES_URL").is_some_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=postgres_tests");
    }
}
