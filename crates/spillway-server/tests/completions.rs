//! `spillway completions SHELL` and `spillway man`: generated from the command line's own
//! definition, so every subcommand and flag is in them.

use std::process::Command;

fn spillway(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "{args:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn completions_generate_for_bash_zsh_and_fish() {
    for (shell, marker) in [
        ("bash", "complete -F _spillway"),
        ("zsh", "#compdef spillway"),
        ("fish", "complete -c spillway"),
    ] {
        let script = spillway(&["completions", shell]);
        assert!(script.contains(marker), "{shell}: {script}");
        for word in ["serve", "check", "replay", "log-format", "config"] {
            assert!(script.contains(word), "{shell} lacks {word}");
        }
    }
    // bash reads the script without a syntax error.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spillway.bash");
    std::fs::write(&path, spillway(&["completions", "bash"])).unwrap();
    let read = Command::new("bash").arg("-n").arg(&path).status().unwrap();
    assert!(read.success());
    // An unknown shell is a clear error.
    let output = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("invalid value 'tcsh'"));
}

#[test]
fn the_manual_page_has_every_command() {
    let page = spillway(&["man"]);
    assert!(page.contains(".TH spillway 1"), "{page}");
    for command in ["serve", "check", "replay", "lab", "demo", "completions"] {
        assert!(page.contains(command), "the page lacks {command}");
    }
    let dir = tempfile::tempdir().unwrap();
    let pages = dir.path().join("man1");
    spillway(&["man", "--dir", pages.to_str().unwrap()]);
    let serve = std::fs::read_to_string(pages.join("spillway-serve.1")).unwrap();
    assert!(serve.contains(".TH spillway-serve 1"), "{serve}");
    assert!(serve.contains("log\\-format"), "{serve}");
}
