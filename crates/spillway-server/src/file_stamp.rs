//! What tells one version of a file from the next.

use std::time::SystemTime;

/// A file's modification time, length and inode: a rename over it (as editors and
/// orchestrators write) changes the inode even within one modification-time tick, and an
/// append changes its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

impl FileStamp {
    pub(crate) fn of(metadata: &std::fs::Metadata) -> Self {
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(metadata);
        #[cfg(not(unix))]
        let inode = 0;
        Self {
            modified: metadata.modified().ok(),
            len: metadata.len(),
            inode,
        }
    }

    /// The stamp of the file at `path` now.
    ///
    /// # Errors
    ///
    /// It cannot be read.
    pub(crate) fn read(path: &std::path::Path) -> std::io::Result<Self> {
        std::fs::metadata(path).map(|metadata| Self::of(&metadata))
    }
}
