//! Parsing: bytes (as UTF-8, lossily) as a model's completion → `parse_for` in every format
//! against the tools of several fixture requests, then the answer in the scaffold's dialect
//! (`respond::reply`) and the shell-write classifier. Any parse failure is fine; a panic is a
//! bug.
#![no_main]

use std::sync::OnceLock;

use asap_proxy::backend::BackendCompletion;
use asap_proxy::profile::Action;
use asap_proxy::openai::chat::ChatCompletionRequest;
use asap_proxy::parse::parse_for;
use asap_proxy::policy::shell_writes_files;
use asap_proxy::profile::{Profiles, ResolvedProfile};
use asap_proxy::render::FORMATS;
use asap_proxy::respond;
use asap_proxy::session::{CallId, NudgeState, SessionId};
use libfuzzer_sys::fuzz_target;

/// Request fixtures whose tools the completions are parsed against (one per profile family).
const REQUESTS: [&[u8]; 6] = [
    include_bytes!("../../tests/fixtures/requests/swe-agent-1.json"),
    include_bytes!("../../tests/fixtures/requests/mini-swe-agent-1.json"),
    include_bytes!("../../tests/fixtures/requests/openhands-sdk-1.json"),
    include_bytes!("../../tests/fixtures/requests/openhands-codeact-1.json"),
    include_bytes!("../../tests/fixtures/requests/browsecomp-plus-1.json"),
    include_bytes!("../../tests/fixtures/requests/terminus-2-1.json"),
];

fn tool_sets() -> &'static [ResolvedProfile] {
    static SETS: OnceLock<Vec<ResolvedProfile>> = OnceLock::new();
    SETS.get_or_init(|| {
        let profiles = Profiles::builtin().expect("built-in profiles load");
        REQUESTS
            .iter()
            .map(|body| {
                let request = ChatCompletionRequest::from_slice(body).expect("fixture decodes");
                ResolvedProfile::build(
                    profiles.detect(&request.tools, &request.detection_text()),
                    &request.tools,
                )
            })
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let call_id = CallId {
        session: SessionId::from_recorded("0123456789ab").expect("valid id"),
        step: 0,
        nudges: NudgeState::default(),
    };
    for tools in tool_sets() {
        for format in FORMATS {
            let parsed = parse_for(format, &text, tools);
            if let Ok(Action::Call { arguments, .. }) = &parsed.outcome {
                for value in arguments.values() {
                    if let Some(command) = value.as_str() {
                        let _ = shell_writes_files(command);
                    }
                }
            }
            let completion = BackendCompletion::stopped(&text, "m");
            let _ = respond::reply(&parsed, &completion, tools, &call_id, true);
        }
    }
    let _ = shell_writes_files(&text);
});
