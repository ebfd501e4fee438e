//! Writing rules changed through the admin API back into the configuration file, keeping the
//! rest of the file (other sections, comments, layout) as it was.

use crate::file_stamp::FileStamp;
use std::path::Path;
use toml_edit::DocumentMut;

/// Writes `table`'s sub-tables as inline tables, and its arrays of tables (a per-key rule's
/// `exceptions`) as arrays of inline tables.
fn inline_nested(table: &mut toml_edit::Table) {
    let keys: Vec<String> = table
        .iter()
        .filter(|(_, item)| item.is_table() || item.is_array_of_tables())
        .map(|(key, _)| key.to_owned())
        .collect();
    for key in keys {
        match table.remove(&key) {
            Some(toml_edit::Item::Table(nested)) => {
                let inline = nested.into_inline_table();
                table.insert(&key, toml_edit::value(inline));
            }
            Some(toml_edit::Item::ArrayOfTables(tables)) => {
                table.insert(&key, toml_edit::value(tables.into_array()));
            }
            _ => {}
        }
    }
}

/// Replaces the given rule kinds in the file at `path`, each given by its name and its tables
/// in TOML (a kind not given is left as the file has it), then checks the result; the file is
/// replaced in one rename, and only if the new text is a valid configuration.
pub(crate) fn write_rules(path: &Path, kinds: &[(&str, String)]) -> Result<(), String> {
    write_rules_meanwhile(path, kinds, || {})
}

/// [`write_rules`], running `meanwhile` between each edit and its rename (where someone else's
/// change of the file would be noticed).
fn write_rules_meanwhile(
    path: &Path,
    kinds: &[(&str, String)],
    mut meanwhile: impl FnMut(),
) -> Result<(), String> {
    // Read, edited and replaced; if the file changed meanwhile (an editor, a script), the edit
    // starts again from what it holds now, so that no one's change is lost.
    const TRIES: usize = 3;
    for _ in 0..TRIES {
        let read = Read::of(path)?;
        let new_text = edited(&read.text, &path.display().to_string(), kinds)?;
        meanwhile();
        if replace(path, new_text.as_bytes(), read.version())? {
            return Ok(());
        }
    }
    Err(format!(
        "the file changed while the rules were written into it, {TRIES} times: nothing was written; try again"
    ))
}

/// A file's text and the version it was read from.
struct Read {
    text: String,
    /// The stamp of a regular file; none for another kind (a pipe's time moves with every
    /// read, and it cannot be read twice).
    stamp: Option<FileStamp>,
}

impl Read {
    /// Reads the file at `path`: its stamp and its text from one handle, so that both are of
    /// the same file even if the path is renamed over meanwhile.
    fn of(path: &Path) -> Result<Self, String> {
        use std::io::Read as _;
        let mut file = std::fs::File::open(path).map_err(|err| format!("cannot read: {err}"))?;
        let metadata = file
            .metadata()
            .map_err(|err| format!("cannot read: {err}"))?;
        let stamp = metadata.is_file().then(|| FileStamp::of(&metadata));
        let mut text = String::new();
        file.read_to_string(&mut text)
            .map_err(|err| format!("cannot read: {err}"))?;
        Ok(Self { text, stamp })
    }

    fn version(&self) -> Option<Version<'_>> {
        self.stamp.map(|stamp| Version {
            stamp,
            text: &self.text,
        })
    }
}

/// What a file held when it was read: a change of either is a change of the file (the text
/// too, since a same-length edit within one tick of a coarse clock keeps the stamp).
#[derive(Clone, Copy)]
struct Version<'a> {
    stamp: FileStamp,
    text: &'a str,
}

impl Version<'_> {
    /// Whether the file at `path` is still this version.
    fn is_current(&self, path: &Path) -> bool {
        FileStamp::read(path).ok() == Some(self.stamp)
            && std::fs::read(path).is_ok_and(|now| now == self.text.as_bytes())
    }
}

/// `text`, the file called `name`, with `kinds` replaced, checked.
fn edited(text: &str, name: &str, kinds: &[(&str, String)]) -> Result<String, String> {
    let mut document: DocumentMut = text
        .parse()
        .map_err(|err| format!("cannot edit the file: {err}"))?;
    // New rules go after everything else, each a `[[kind]]` table with its nested fields
    // (behavior, strategy, algorithm, queue) inline, as one would write them by hand.
    let mut position = document
        .iter()
        .flat_map(|(_, item)| {
            let table = item.as_table().and_then(|t| t.position());
            let tables = item
                .as_array_of_tables()
                .and_then(|a| a.iter().filter_map(|t| t.position()).max());
            table.into_iter().chain(tables)
        })
        .max()
        .unwrap_or(0)
        + 1;
    for (key, tables) in kinds {
        let fragment: DocumentMut = tables
            .parse()
            .map_err(|err| format!("cannot edit the rules: {err}"))?;
        document.remove(key);
        if let Some(mut item) = fragment.get(key).cloned() {
            if let Some(tables) = item.as_array_of_tables_mut() {
                for table in tables.iter_mut() {
                    inline_nested(table);
                    table.set_position(position);
                    position += 1;
                }
            }
            document.insert(key, item);
        }
    }
    let new_text = document.to_string();
    crate::checked::parse(&new_text, name)
        .map_err(|err| format!("the result would not load: {err}"))?;
    Ok(new_text)
}

/// Replaces the file at `path` with `contents` in one rename, as it was in all but its text: a
/// symbolic link is followed (the file it points to is replaced, the link stays), and the new
/// file keeps the old one's permissions, owner and group. The new text and the directory entry
/// are synced to disk before this returns. If the file is no longer the version `read` (if
/// given), nothing is replaced and this returns `Ok(false)`.
fn replace(path: &Path, contents: &[u8], read: Option<Version<'_>>) -> Result<bool, String> {
    use std::io::Write;
    let target =
        std::fs::canonicalize(path).map_err(|err| format!("cannot find the file: {err}"))?;
    let metadata =
        std::fs::metadata(&target).map_err(|err| format!("cannot read its permissions: {err}"))?;
    let directory = target
        .parent()
        .ok_or_else(|| "the file has no directory".to_owned())?;
    let file_name = target
        .file_name()
        .ok_or_else(|| "the path names no file".to_owned())?
        .to_string_lossy();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        options.mode(metadata.permissions().mode() & 0o7777);
    }
    // A name no other write uses: this process's and a count of its writes, the next count
    // while one is taken (left by a process of the same id that stopped mid-write, as in a
    // restarted container).
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut attempts = 0;
    let (temporary, mut file) = loop {
        let write = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let temporary = directory.join(format!(".{file_name}.{}.{write}.tmp", std::process::id()));
        match options.open(&temporary) {
            Ok(file) => break (temporary, file),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists && attempts < 64 => {
                attempts += 1;
            }
            Err(err) => return Err(format!("cannot write next to it: {err}")),
        }
    };
    let written = (|| -> Result<(), String> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            // The mode again: the process's umask narrowed the one given at creation.
            file.set_permissions(metadata.permissions())
                .map_err(|err| format!("cannot keep its permissions: {err}"))?;
            let created = file
                .metadata()
                .map_err(|err| format!("cannot read the new file: {err}"))?;
            if (created.uid(), created.gid()) != (metadata.uid(), metadata.gid()) {
                std::os::unix::fs::fchown(&file, Some(metadata.uid()), Some(metadata.gid()))
                    .map_err(|err| {
                        format!(
                            "cannot keep its owner and group ({}:{}): {err}",
                            metadata.uid(),
                            metadata.gid()
                        )
                    })?;
            }
        }
        file.write_all(contents)
            .map_err(|err| format!("cannot write: {err}"))?;
        file.sync_all()
            .map_err(|err| format!("cannot sync the new file: {err}"))
    })();
    if let Err(err) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(err);
    }
    // Changed since it was read (by someone else than spillway's writes, which take turns):
    // not replaced. (A change between this look and the rename is still lost: the window is
    // the rename's.)
    if read.is_some_and(|read| !read.is_current(&target)) {
        let _ = std::fs::remove_file(&temporary);
        return Ok(false);
    }
    if let Err(err) = std::fs::rename(&temporary, &target) {
        let _ = std::fs::remove_file(&temporary);
        return Err(format!("cannot replace the file: {err}"));
    }
    // The rename itself reaches the disk with its directory.
    std::fs::File::open(directory)
        .and_then(|directory| directory.sync_all())
        .map_err(|err| format!("replaced, but cannot sync its directory: {err}"))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_changed_since_it_was_read_is_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spillway.toml");
        std::fs::write(&path, "# first\n").unwrap();
        let read = Read::of(&path).unwrap();
        // Someone appends after the read: the write made from the read is not applied.
        let mut changed = std::fs::read_to_string(&path).unwrap();
        changed.push_str("# someone's line\n");
        std::fs::write(&path, &changed).unwrap();
        assert_eq!(replace(&path, b"# rules\n", read.version()), Ok(false));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), changed);
        let leftovers = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(leftovers, 1, "no temporary file left behind");
        // Unchanged since its read: replaced.
        let read = Read::of(&path).unwrap();
        assert_eq!(replace(&path, b"# rules\n", read.version()), Ok(true));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "# rules\n");
    }

    #[test]
    fn an_edit_that_keeps_the_length_and_the_time_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spillway.toml");
        std::fs::write(&path, "count = 1\n").unwrap();
        let read = Read::of(&path).unwrap();
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        // Rewritten in place, same length, within one tick of a coarse clock (as on a
        // filesystem that keeps whole seconds): the stamp is the same, the text is not.
        std::fs::write(&path, "count = 2\n").unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(modified).unwrap();
        drop(file);
        assert_eq!(FileStamp::read(&path).unwrap(), read.stamp.unwrap());
        assert_eq!(replace(&path, b"# rules\n", read.version()), Ok(false));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "count = 2\n");
    }

    const FILE: &str = "# kept\n[listener]\nlisten = \"127.0.0.1:0\"\n";

    fn flow(count: u32) -> Vec<(&'static str, String)> {
        let flow = format!("[[flow]]\nid = \"a\"\nresource = \"r\"\ncount = {count}\n");
        vec![("flow", flow)]
    }

    #[test]
    fn a_change_made_while_the_rules_are_written_is_kept_and_the_rules_written_into_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spillway.toml");
        std::fs::write(&path, FILE).unwrap();
        let mut edits = 0;
        write_rules_meanwhile(&path, &flow(5), || {
            // An editor saves once, between the first edit and its rename.
            if edits == 0 {
                let mut text = std::fs::read_to_string(&path).unwrap();
                text.push_str("# someone's line\n");
                std::fs::write(&path, text).unwrap();
            }
            edits += 1;
        })
        .unwrap();
        assert_eq!(edits, 2, "the edit started again once");
        let written = std::fs::read_to_string(&path).unwrap();
        assert!(
            written.contains("# someone's line") && written.contains("count = 5"),
            "{written}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_link_swapped_to_a_new_version_while_the_rules_are_written_gets_them() {
        use std::os::unix::fs::symlink;
        // As a Kubernetes volume or a release tool lays it out: the file is a link through
        // `..data`, a link to the current version's directory, swapped in one rename.
        let dir = tempfile::tempdir().unwrap();
        for (version, line) in [("v1", "# v1\n"), ("v2", "# v2\n")] {
            std::fs::create_dir(dir.path().join(version)).unwrap();
            let file = dir.path().join(version).join("spillway.toml");
            std::fs::write(file, format!("{FILE}{line}")).unwrap();
        }
        symlink("v1", dir.path().join("..data")).unwrap();
        let path = dir.path().join("spillway.toml");
        symlink("..data/spillway.toml", &path).unwrap();
        let mut swapped = false;
        write_rules_meanwhile(&path, &flow(5), || {
            if !swapped {
                symlink("v2", dir.path().join("..data_tmp")).unwrap();
                std::fs::rename(dir.path().join("..data_tmp"), dir.path().join("..data")).unwrap();
                swapped = true;
            }
        })
        .unwrap();
        let live = std::fs::read_to_string(&path).unwrap();
        assert!(
            live.contains("# v2") && live.contains("count = 5"),
            "{live}"
        );
        let old = std::fs::read_to_string(dir.path().join("v1/spillway.toml")).unwrap();
        assert_eq!(
            old,
            format!("{FILE}# v1\n"),
            "the old version is left alone"
        );
        assert!(std::fs::symlink_metadata(&path).unwrap().is_symlink());
    }

    #[test]
    fn a_file_that_keeps_changing_is_left_as_its_last_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spillway.toml");
        std::fs::write(&path, FILE).unwrap();
        let mut edits = 0;
        let written = write_rules_meanwhile(&path, &flow(5), || {
            edits += 1;
            std::fs::write(&path, format!("{FILE}# change {edits}\n")).unwrap();
        });
        let err = written.unwrap_err();
        assert!(err.contains("3 times: nothing was written"), "{err}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{FILE}# change 3\n")
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn rules_are_written_into_the_file_as_it_is_now() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spillway.toml");
        std::fs::write(&path, FILE).unwrap();
        write_rules(&path, &flow(5)).unwrap();
        let written = std::fs::read_to_string(&path).unwrap();
        assert!(
            written.starts_with("# kept\n") && written.contains("count = 5"),
            "{written}"
        );
    }
}
