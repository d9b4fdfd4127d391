//! The module graph check CI runs (`scripts/module-graph.py --check`, docs/architecture.md
//! "Module map"): it passes on this tree and fails on a tree with a cycle.

use std::path::Path;
use std::process::Command;

fn check(root: &Path) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/module-graph.py");
    let out = Command::new("python3")
        .arg(script)
        .arg("--check")
        .arg("--root")
        .arg(root)
        .output()
        .expect("python3 runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn the_crate_has_no_cycle_between_top_level_modules() {
    let (ok, out) = check(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(ok, "{out}");
    assert!(out.contains("no cycles"), "{out}");
}

#[test]
fn a_cycle_through_a_submodule_or_a_use_group_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir(src.join("b")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\npub mod c;\n").unwrap();
    // a -> b through a file below b's directory; b -> c in a use group; c -> a in a path.
    std::fs::write(src.join("a.rs"), "use crate::b::inner::X;\n").unwrap();
    std::fs::write(src.join("b/mod.rs"), "pub mod inner;\n").unwrap();
    std::fs::write(src.join("b/inner.rs"), "use crate::{c::Y, c::Z};\n").unwrap();
    // Mentions in comments and strings are not edges.
    std::fs::write(
        src.join("c.rs"),
        "// crate::b\nconst S: &str = \"crate::b\";\nfn f() { crate::a::g() }\n",
    )
    .unwrap();
    let (ok, out) = check(src);
    assert!(!ok, "{out}");
    assert!(out.contains("cycle among 3 modules: a, b, c"), "{out}");
    std::fs::write(
        src.join("c.rs"),
        "// crate::a\nconst S: &str = \"crate::a\";\n",
    )
    .unwrap();
    let (ok, out) = check(src);
    assert!(ok, "{out}");
}
