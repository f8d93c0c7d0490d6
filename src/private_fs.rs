//! Folders only the service's user may enter (0700 on Unix): the SQLite folder and the one a
//! generated master key goes in, whichever is made first (docs/configuration.md, "Secrets and
//! environments").

use std::path::Path;

/// Creates `dir` and its missing parents with mode 0700 (the umask may only narrow it). An
/// existing folder is left as it is.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}
