//! The OS's notifications of changes in the directories of the configuration's files.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A watcher of directories, and which of those it was asked to watch it does.
pub(super) struct Watched {
    watcher: notify::RecommendedWatcher,
    /// The directories it watches, absolute.
    directories: BTreeSet<PathBuf>,
    /// Whether it watches every directory last asked for.
    complete: bool,
}

impl Watched {
    /// A watcher that sends on `events` for any change in the directories it watches (none
    /// yet); `None` (logged) if the OS refuses. Any change, not only one naming a file: a file
    /// reached through a link in its directory changes when that link is swapped (a
    /// Kubernetes volume swaps `..data`, and no event names the file), and each change costs
    /// one look at the files' stamps once they settle. Reads and opens are not changes (each
    /// look opens the files, and a busy directory's are many).
    pub(super) fn new(events: tokio::sync::mpsc::Sender<()>) -> Option<Self> {
        let handler = move |event: notify::Result<notify::Event>| {
            if event.is_ok_and(|event| !event.kind.is_access()) {
                let _ = events.try_send(());
            }
        };
        match notify::recommended_watcher(handler) {
            Ok(watcher) => Some(Self {
                watcher,
                directories: BTreeSet::new(),
                complete: true,
            }),
            Err(err) => {
                tracing::warn!(error = %err, "cannot watch the configuration's files; looking at them once a second");
                None
            }
        }
    }

    /// Watches the directories of `files`, and only them: each again, since one removed and
    /// made again (a volume remounted, a directory replaced) is a new directory to the OS. One
    /// it cannot watch (the OS's limit of watches reached, no permission, not there) is
    /// logged, and makes the watch incomplete until a later call watches it. Blocks (the OS is
    /// asked about each path): call it off the runtime.
    pub(super) fn update(&mut self, files: &[PathBuf]) {
        use notify::Watcher as _;
        let wanted: BTreeSet<PathBuf> = files.iter().map(|file| directory_of(file)).collect();
        for gone in self.directories.difference(&wanted) {
            let _ = self.watcher.unwatch(gone);
        }
        self.directories.clear();
        self.complete = true;
        for directory in wanted {
            match self
                .watcher
                .watch(&directory, notify::RecursiveMode::NonRecursive)
            {
                Ok(()) => {
                    self.directories.insert(directory);
                }
                Err(err) => {
                    self.complete = false;
                    tracing::warn!(
                        directory = %directory.display(),
                        error = %err,
                        "cannot watch a directory of the configuration's files; looking at them once a second"
                    );
                }
            }
        }
    }

    /// Whether it watches every directory it was last asked for.
    pub(super) fn is_complete(&self) -> bool {
        self.complete
    }
}

/// The directory of `file`, absolute (one directory under two spellings, `.` and its full
/// path, is one watch: unwatching one would drop the other).
fn directory_of(file: &Path) -> PathBuf {
    let directory = match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    std::path::absolute(directory).unwrap_or_else(|_| directory.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_directory_spelled_two_ways_is_one() {
        let here = std::env::current_dir().unwrap();
        assert_eq!(directory_of(Path::new("cert.pem")), here);
        assert_eq!(directory_of(&here.join("spillway.toml")), here);
        assert_eq!(
            directory_of(Path::new("./certs/tls.crt")),
            here.join("./certs")
        );
    }
}
