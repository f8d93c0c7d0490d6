//! The `custodian` binary: everything lives in the library.

fn main() -> std::process::ExitCode {
    custodian::cli::main()
}
