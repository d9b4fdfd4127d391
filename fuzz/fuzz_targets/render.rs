//! Rendering: bytes decoded as a Chat Completions request (or, failing that, a Responses
//! request) → `pipeline::prepare` with the built-in profiles, templates and prefix store
//! (built-in demonstrations, K = 3), in every format, with profile detection and with one
//! named profile. Any error is fine; a panic is a bug.
#![no_main]

use std::sync::OnceLock;

use asap_proxy::config::{ProfileChoice, PromptConfig, DEFAULT_PREFIX_K};
use asap_proxy::openai::chat::ChatCompletionRequest;
use asap_proxy::openai::responses::ResponsesRequest;
use asap_proxy::pipeline::prepare;
use asap_proxy::prefix::PrefixStore;
use asap_proxy::profile::Profiles;
use asap_proxy::render::{Format, Renderer, FORMATS};
use asap_proxy::session::SessionIndex;
use libfuzzer_sys::fuzz_target;

struct Fixed {
    profiles: Profiles,
    renderer: Renderer,
    prefixes: PrefixStore,
    names: Vec<String>,
}

fn fixed() -> &'static Fixed {
    static FIXED: OnceLock<Fixed> = OnceLock::new();
    FIXED.get_or_init(|| {
        let profiles = Profiles::builtin().expect("built-in profiles load");
        let names = profiles.names().into_iter().map(String::from).collect();
        Fixed {
            profiles,
            renderer: Renderer::new().expect("built-in templates compile"),
            prefixes: PrefixStore::load(&[], DEFAULT_PREFIX_K).expect("built-in prefixes load"),
            names,
        }
    })
}

fn render(request: &ChatCompletionRequest, format: Format, profile: ProfileChoice) {
    let f = fixed();
    let config = PromptConfig {
        profile,
        format,
        prefixes: Vec::new(),
        tasks: Vec::new(),
        prefix_k: DEFAULT_PREFIX_K,
    };
    let sessions = SessionIndex::new(16);
    if let Ok(prepared) = prepare(
        request,
        &Default::default(),
        &f.profiles,
        &f.renderer,
        &config,
        &sessions,
        &f.prefixes,
    ) {
        // The prompt ends with the format's cue: the model continues from there.
        assert!(
            prepared.prompt.ends_with(format.cue()),
            "{format:?} prompt does not end with its cue"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let request = match ChatCompletionRequest::from_slice(data) {
        Ok(request) => request,
        Err(_) => match ResponsesRequest::from_slice(data) {
            Ok(responses) => responses.chat,
            Err(_) => return,
        },
    };
    for format in FORMATS {
        render(&request, format, ProfileChoice::Auto);
    }
    let f = fixed();
    if !f.names.is_empty() {
        let name = f.names[data.len() % f.names.len()].clone();
        render(&request, Format::MarkdownXml, ProfileChoice::Named(name));
    }
});
