//! The `custodian` binary: everything lives in the library.

/// mimalloc instead of glibc's malloc: under the end-to-end load glibc's allocator (malloc,
/// free, consolidation) was about 17% of the server's CPU (docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    custodian::cli::main()
}
