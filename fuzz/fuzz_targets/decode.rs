//! Request decoding: any bytes → the Chat Completions decoder and the Responses decoder, then
//! the request-level checks and accessors the server runs before rendering. Any error is
//! fine (a 400); a panic, a hang or unbounded memory is a bug.
#![no_main]

use asap_proxy::openai::chat::ChatCompletionRequest;
use asap_proxy::openai::responses::ResponsesRequest;
use libfuzzer_sys::fuzz_target;

fn exercise(request: &ChatCompletionRequest) {
    let _ = asap_proxy::profile::check_tools(&request.tools);
    let _ = request.detection_text();
    let _ = request.first_user_text();
    let _ = request.explicit_task(&Default::default());
    let _ = request.explicit_run(&Default::default());
    let _ = request.ignored_fields();
    let _ = request.max_tokens();
    let _ = request.is_stream();
    let _ = request.include_usage();
    let _ = request.tool_choice_is_none();
}

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = ChatCompletionRequest::from_slice(data) {
        exercise(&request);
    }
    if let Ok(responses) = ResponsesRequest::from_slice(data) {
        exercise(&responses.chat);
        // The chat form it forwards in passthrough mode must decode as a chat request.
        let _ = ChatCompletionRequest::from_slice(&responses.chat_body);
    }
});
