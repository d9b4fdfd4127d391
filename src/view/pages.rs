//! HTML pages: the minijinja environment of `templates/view/*.html` (embedded), with HTML
//! auto-escaping on for every template: traces hold model- and scaffold-controlled text
//! (thoughts, commands, observations, prompts), so nothing reaches the page unescaped.

use std::sync::OnceLock;

use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde::Serialize;

/// The templates, by name.
const TEMPLATES: [(&str, &str); 3] = [
    ("base.html", include_str!("../../templates/view/base.html")),
    ("list.html", include_str!("../../templates/view/list.html")),
    (
        "session.html",
        include_str!("../../templates/view/session.html"),
    ),
];

/// The compiled page templates.
#[derive(Debug)]
pub struct Pages {
    env: Environment<'static>,
}

impl Pages {
    /// Compiles the embedded templates: strict undefined variables, HTML auto-escaping for
    /// every template whatever its name.
    ///
    /// Errors: a template does not compile.
    pub fn new() -> Result<Self, minijinja::Error> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_debug(true);
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_auto_escape_callback(|_| AutoEscape::Html);
        env.add_filter("kib", |bytes: u64| -> String { kib(bytes) });
        env.add_filter("pathseg", |text: &str| -> String {
            crate::util::path_segment(text)
        });
        for (name, source) in TEMPLATES {
            env.add_template(name, source)?;
        }
        Ok(Self { env })
    }

    /// Renders template `name` with `context`.
    ///
    /// Errors: an unknown template, or a variable the context lacks.
    pub fn render<S: Serialize>(&self, name: &str, context: S) -> Result<String, minijinja::Error> {
        self.env.get_template(name)?.render(context)
    }
}

/// The process's pages, compiled on first use; the error's text when they do not compile
/// (a test checks they do).
pub fn pages() -> Result<&'static Pages, &'static str> {
    static PAGES: OnceLock<Result<Pages, String>> = OnceLock::new();
    PAGES
        .get_or_init(|| Pages::new().map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(String::as_str)
}

/// Bytes as `123 B`, `4.5 KiB`, `1.2 MiB`.
fn kib(bytes: u64) -> String {
    match bytes {
        b if b < 1024 => format!("{b} B"),
        b if b < 1024 * 1024 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_compile() {
        assert!(pages().is_ok(), "{:?}", pages().err());
    }

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(crate::util::path_segment("0a1b2c3d4e5f"), "0a1b2c3d4e5f");
        assert_eq!(crate::util::path_segment("a b/<c>"), "a%20b%2F%3Cc%3E");
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(kib(12), "12 B");
        assert_eq!(kib(4608), "4.5 KiB");
        assert_eq!(kib(3 * 1024 * 1024), "3.0 MiB");
    }
}
