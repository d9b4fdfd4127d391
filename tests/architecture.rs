//! The module graph check CI runs (`scripts/module-graph.py --check`, docs/architecture.md
//! "Module map"): it passes on this tree and fails on a tree with a cycle.

use std::path::Path;
use std::process::Command;

fn check(root: &Path) -> (bool, String) {
    check_with(root, &[])
}

fn check_with(root: &Path, extra: &[&Path]) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/module-graph.py");
    let mut command = Command::new("python3");
    command.arg(script).arg("--check").arg("--root").arg(root);
    if let Some(doc) = extra.first() {
        command.arg("--doc").arg(doc);
    }
    let out = command.output().expect("python3 runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn the_crate_has_no_cycle_and_imports_what_the_module_map_allows() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (ok, out) = check_with(&root.join("src"), &[&root.join("docs/architecture.md")]);
    assert!(ok, "{out}");
    assert!(out.contains("no cycles, as the module map allows"), "{out}");
}

#[test]
fn an_import_the_module_map_does_not_allow_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\npub mod c;\n").unwrap();
    std::fs::write(src.join("a.rs"), "use crate::b::X;\n").unwrap();
    std::fs::write(src.join("b.rs"), "use crate::c::Y;\n").unwrap();
    std::fs::write(src.join("c.rs"), "").unwrap();
    let doc = dir.path().join("map.md");
    let map = "| module | owns | may use |\n|---|---|---|\n| `a` | x | b |\n| `b` | y | |\n";
    std::fs::write(&doc, map).unwrap();
    let (ok, out) = check_with(&src, &[&doc]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("`b` uses `c`, which its row does not allow"),
        "{out}"
    );
    assert!(out.contains("`c` is missing"), "{out}");
    std::fs::write(&doc, format!("{map}| `c` | z | |\n")).unwrap();
    std::fs::write(src.join("b.rs"), "").unwrap();
    let (ok, out) = check_with(&src, &[&doc]);
    assert!(ok, "{out}");
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
