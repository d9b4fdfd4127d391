//! Every way a turn ends is traced through the pipeline's one `finish`
//! (docs/architecture.md, "One turn runner"): here, a template that fails only once a nudge
//! has put its hint into the conversation, so the turn ends after its nudge record.

use std::path::Path;

use crate::util::backend::Scripted;
use crate::util::proxy::serve_with;
use crate::util::request;

#[tokio::test]
async fn a_template_failure_after_a_nudge_ends_the_turn_with_an_error_record() {
    // The embedded template, failing (strict undefined) on a step whose observation is the
    // submit-before-edit hint: the start-up check and the first attempt render; the second
    // attempt, after the nudge, cannot.
    let original = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/markdown_xml.jinja"),
    )
    .unwrap();
    let failing = original.replacen(
        "{% for step in steps %}",
        "{% for step in steps %}{% if step.observation and \"no file has been changed yet\" in step.observation %}{{ no_such_variable }}{% endif %}",
        1,
    );
    assert_ne!(failing, original);
    let templates = tempfile::tempdir().unwrap();
    std::fs::write(templates.path().join("markdown_xml.jinja"), failing).unwrap();
    let dir = templates.path().to_path_buf();
    let (backend, proxy) = serve_with(vec![Scripted::text("Looks fine.\n<submit/>\n")], move |a| {
        a.prompt.templates = Some(dir)
    })
    .await;

    let (status, body) = proxy.post(&request("swe-agent-1")).await;
    assert_eq!(status, 500, "{body}");
    assert_eq!(backend.requests().len(), 1, "no second completion call");
    let steps = proxy.steps();
    let decisions: Vec<(&str, u64)> = steps
        .iter()
        .map(|s| {
            (
                s["decision"].as_str().unwrap(),
                s["attempt"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(decisions, [("nudge", 0), ("error", 1)], "{steps:#?}");
    let error = steps[1]["error"].as_str().unwrap();
    assert!(
        error.contains("no_such_variable") || error.contains("undefined"),
        "{error}"
    );
    assert!(steps[1]["timings"]["total_ms"].as_f64().unwrap() > 0.0);
}
