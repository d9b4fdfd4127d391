//! Generated SWE-agent-shaped chat requests for the benchmarks (not part of the library).
//!
//! Included with `#[path]` by `benches/pipeline.rs` and by the `bench_bodies` and
//! `prefix_cache` examples, so the micro-benchmarks and the load benchmark post the same
//! bodies. A body is what SWE-agent 1.x (function calling, through LiteLLM) sends on turn
//! `turns + 1` of a trajectory: a system message, the task as a list of text parts, then
//! `turns` assistant messages with one `tool_calls` entry each (`bash` or
//! `str_replace_editor`; thoughts of a few sentences) and their `tool` results of a few KiB
//! (grep hits, `cat -n` views, pytest failures, directory listings, edit confirmations), and
//! the three tools of `tests/fixtures/requests/swe-agent-1.json`.
//!
//! Sizes: about 14 KiB for 2 turns, 60 KiB for 20, 300–315 KiB for 100 and 3.1 MiB for 1,000.
//! Everything is deterministic (a fixed-seed generator): the same `turns` and session give the
//! same bytes, and bodies of different sessions (rollouts) differ in every turn, as real
//! rollouts do: the proxy's caches must not answer one rollout's turns from another's (until
//! the twenty-second session of issue 23 the `ids` and `foreign` rollouts shared their
//! contents and differed only in their ids, so a sibling rollout's rendered prompt answered
//! most running turns whole; BENCHMARKS.md). Tool-call ids are minted the way the proxy mints them
//! (`call_asap_<session>_<step>_0_<nonce>`), so the proxy treats the body as the next turn of
//! an existing session (the steady state of a run), not as a new trajectory.

#![allow(dead_code)]

use serde_json::{json, Value};

/// The system message (our wording of what SWE-agent configs say; about 1 KiB).
const SYSTEM: &str = "You are a helpful assistant that can interact with a computer to solve \
tasks. You work in a Linux shell inside a container with the repository checked out at \
/testbed. Every reply must call exactly one of the tools you are given; the environment runs \
it and returns its output as the next message. Think before each action: say what you \
expect to see and why the action brings you closer to the goal. Prefer small, verifiable \
steps: read the relevant code, reproduce the problem, change the code, and run the \
reproduction again. Do not start interactive programs (editors, pagers, REPLs): they never \
return. Long outputs are cut, so filter them with grep, head or tail. Do not modify the \
tests. When the change is complete and checked, call the submit tool; nothing you do after \
that is seen. If a command fails, read the error message carefully before you try something \
else, and never repeat exactly the same command twice in a row.";

/// The session id every generated body carries unless told otherwise.
pub const SESSION: &str = "0b5e4c1d2a3f";

/// A small deterministic generator (SplitMix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    pub fn hex(&mut self, digits: usize) -> String {
        let mut s = format!("{:016x}", self.next());
        s.truncate(digits);
        s
    }
}

const MODULES: [&str; 12] = [
    "inventory",
    "ledger",
    "pricing",
    "stock",
    "orders",
    "units",
    "catalog",
    "report",
    "warehouse",
    "currency",
    "export",
    "audit",
];

const WORDS: [&str; 24] = [
    "total",
    "quantity",
    "unit_price",
    "line",
    "items",
    "discount",
    "round",
    "Decimal",
    "currency",
    "sum",
    "self",
    "return",
    "value",
    "amount",
    "tax",
    "rate",
    "cache",
    "lookup",
    "parse",
    "format",
    "record",
    "batch",
    "ledger",
    "balance",
];

fn module(rng: &mut Rng) -> &'static str {
    MODULES[rng.below(MODULES.len())]
}

/// A line of plausible Python source (with `<`, `>`, `&`, quotes and an occasional non-ASCII
/// character, as real files have).
fn python_line(rng: &mut Rng, depth: usize) -> String {
    let indent = "    ".repeat(depth);
    let a = rng.pick(&WORDS);
    let b = rng.pick(&WORDS);
    let c = rng.pick(&WORDS);
    match rng.below(12) {
        0 => format!("{indent}def {a}_{b}(self, {c}=None):"),
        1 => format!("{indent}if {a} < {b} and not {c}:"),
        2 => format!("{indent}return sum(l.{a} * l.{b} for l in self.{c})"),
        3 => format!("{indent}{a} = {{\"{b}\": {c}, 'unit': \"€\"}}"),
        4 => format!("{indent}# {a} & {b} must stay in sync with <{c}> (see docs)"),
        5 => format!("{indent}raise ValueError(f\"bad {a}: {{{b}!r}} > {c}\")"),
        6 => format!("{indent}for {a} in sorted(self.{b}, key=lambda x: x.{c}):"),
        7 => format!("{indent}self.{a}.append(({b}, {c}))"),
        8 => format!("{indent}assert {a}.{b} >= 0, \"{c} is negative\""),
        9 => format!("{indent}logger.debug(\"%s -> %s\", {a}, {b})"),
        10 => String::new(),
        _ => format!("{indent}{a} = Decimal(str({b})).quantize(Decimal(\"0.01\"))"),
    }
}

/// `cat -n` of `lines` lines of a Python file, starting at `start`.
fn numbered_source(rng: &mut Rng, start: usize, lines: usize) -> String {
    let mut out = String::new();
    let mut depth = 1;
    for n in start..start + lines {
        let line = python_line(rng, depth);
        depth = if line.ends_with(':') {
            (depth + 1).min(3)
        } else {
            1 + rng.below(2)
        };
        out.push_str(&format!("{n:>6}\t{line}\n"));
    }
    out
}

fn grep_hits(rng: &mut Rng, word: &str, hits: usize) -> String {
    let mut out = String::new();
    for _ in 0..hits {
        let m = module(rng);
        let line = python_line(rng, 1);
        out.push_str(&format!(
            "/testbed/src/{m}/{}.py:{}:    {word} = {}\n",
            rng.pick(&WORDS),
            1 + rng.below(400),
            line.trim_start()
        ));
    }
    out
}

fn pytest_failure(rng: &mut Rng, frames: usize) -> String {
    let m = module(rng);
    let mut out = format!(
        "============================= test session starts ==============================\n\
         platform linux -- Python 3.11.9, pytest-8.2.0, pluggy-1.5.0\n\
         rootdir: /testbed\ncollected {} items\n\ntests/test_{m}.py ..F.{}F\n\n\
         =================================== FAILURES ===================================\n\
         ________________________ test_{}_{} ________________________\n\n",
        10 + rng.below(40),
        ".".repeat(rng.below(20)),
        rng.pick(&WORDS),
        rng.pick(&WORDS),
    );
    for _ in 0..frames {
        out.push_str(&format!(
            "    def test_{}(self):\n        inv = Inventory([Line(\"bolt\", 3, 0.5)])\n\
             >       assert inv.total() == 1.5\nE       assert {} == 1.5\n\
             E        +  where {} = <Inventory object at 0x7f{}>.total\n\n\
             src/{m}/{}.py:{}: AssertionError\n",
            rng.pick(&WORDS),
            rng.below(10),
            rng.below(10),
            rng.hex(10),
            rng.pick(&WORDS),
            10 + rng.below(300),
        ));
    }
    out.push_str(&format!(
        "=========================== short test summary info ============================\n\
         FAILED tests/test_{m}.py::test_{} - assert 3 == 1.5\n\
         ========================= 1 failed, {} passed in 0.{}s =========================",
        rng.pick(&WORDS),
        rng.below(40),
        rng.below(99)
    ));
    out
}

fn listing(rng: &mut Rng, entries: usize) -> String {
    let mut out = format!("total {}\n", 8 * entries);
    for _ in 0..entries {
        out.push_str(&format!(
            "-rw-r--r-- 1 root root {:>6} Jan {:>2} 12:{:02} {}_{}.py\n",
            100 + rng.below(30_000),
            1 + rng.below(28),
            rng.below(60),
            rng.pick(&WORDS),
            module(rng)
        ));
    }
    out
}

/// Turn `i` of a trajectory: thought, tool name, arguments, observation.
pub fn turn(rng: &mut Rng, i: usize) -> (String, &'static str, Value, String) {
    // Outputs grow as a trajectory goes on (first greps and listings, later whole files and
    // test runs): 0.9x of the base size at the start, 1.35x from turn 60 on.
    let scale = |n: usize| n * (90 + 45 * i.min(60) / 60) / 100;
    let m = module(rng);
    let word = rng.pick(&WORDS);
    let thought_tail = format!(
        " The last output suggests that `{word}` in `{m}` is involved, so I want to confirm \
         how it is used before I change anything (step {i}).",
    );
    match i % 6 {
        0 => (
            format!("I need to find where `{word}` is computed.{thought_tail}"),
            "bash",
            json!({"command": format!("grep -rn \"{word}\" /testbed/src/{m} --include=*.py | head -n 60  # {i}")}),
            {
                let n = scale(14 + rng.below(14));
                grep_hits(rng, word, n)
            },
        ),
        1 => {
            let start = 1 + rng.below(200);
            let lines = scale(40 + rng.below(40));
            (
                format!("Let me read the relevant part of `{m}.py`.{thought_tail}"),
                "str_replace_editor",
                json!({"command": "view", "path": format!("/testbed/src/{m}/{word}_{i}.py"),
                       "view_range": [start, start + lines]}),
                format!(
                    "Here's the result of running `cat -n` on /testbed/src/{m}/{word}_{i}.py:\n{}",
                    numbered_source(rng, start, lines)
                ),
            )
        }
        2 => (
            format!("Running the tests shows the current behaviour.{thought_tail}"),
            "bash",
            json!({"command": format!("cd /testbed && python -m pytest -q tests/test_{m}.py -k {word} -x  # run {i}")}),
            {
                let n = scale(3 + rng.below(5));
                pytest_failure(rng, n)
            },
        ),
        3 => {
            let old = numbered_source(rng, 1, 4);
            let new = numbered_source(rng, 1, 5);
            let strip = |s: &str| {
                s.lines()
                    .map(|l| l.split_once('\t').map_or(l, |(_, code)| code))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            let path = format!("/testbed/src/{m}/{word}.py");
            (
                format!("Now I can make the change.{thought_tail}"),
                "str_replace_editor",
                json!({"command": "str_replace", "path": path,
                       "old_str": strip(&old), "new_str": strip(&new)}),
                format!(
                    "The file {path} has been edited. Here's the result of running `cat -n` on a \
                     snippet of {path}:\n{}Review the changes and make sure they are as expected. \
                     Edit the file again if necessary.",
                    {
                        let (a, n) = (20 + rng.below(100), scale(14 + rng.below(10)));
                        numbered_source(rng, a, n)
                    }
                ),
            )
        }
        4 => (
            format!("I will look at what else lives in this package.{thought_tail}"),
            "bash",
            json!({"command": format!("ls -la /testbed/src/{m} && wc -l /testbed/src/{m}/*.py  # {i}")}),
            {
                let n = scale(20 + rng.below(20));
                listing(rng, n)
            },
        ),
        _ => {
            let path = format!("/testbed/reproduce_{i}.py");
            let body = format!(
                "from {m} import Inventory, Line\n\ninv = Inventory([Line(\"bolt\", 3, 0.5), \
                 Line(\"nut\", 10, 0.1)])\nprint(\"total:\", inv.total())\nassert inv.total() == 2.5, \
                 inv.total()\n{}",
                numbered_source(rng, 1, scale(12))
                    .lines()
                    .map(|l| format!("# {l}\n"))
                    .collect::<String>()
            );
            (
                format!("A small script will show the bug directly.{thought_tail}"),
                "str_replace_editor",
                json!({"command": "create", "path": path, "file_text": body}),
                format!(
                    "File created successfully at: {path}\n\n$ python {path}\n{}",
                    pytest_failure(rng, 1)
                ),
            )
        }
    }
}

/// The task message (SWE-agent's instance template, our own wording): a made-up issue with a
/// code excerpt and the usual instructions; about 3.5 KiB.
fn task_text(rng: &mut Rng) -> String {
    format!(
        "<uploaded_files>\n/testbed\n</uploaded_files>\nI've uploaded a Python code repository \
         in the directory /testbed. Consider the following issue description:\n\n\
         <issue_description>\n`Inventory.total()` returns the sum of quantities but ignores the \
         `unit_price` of each line, so `Inventory([Line('bolt', 3, 0.5)]).total()` gives 3 \
         instead of 1.5. It should return the sum of quantity * unit_price, rounded to cents \
         with `Decimal` so that totals of many small lines do not drift.\n\nSteps to \
         reproduce:\n\n```python\n{}```\n\nThe same happens in `Ledger.balance()` when it is \
         computed from inventory snapshots, and the CSV export shows the wrong totals as a \
         consequence. Expected: 1.5 for the example above; 2.5 when a second line \
         `Line('nut', 10, 0.1)` is added.\n</issue_description>\n\nCan you help me implement \
         the necessary changes to the repository so that the requirements specified in the \
         <issue_description> are met?\nI've already taken care of all changes to any of the \
         test files described in the <issue_description>. This means you DON'T have to modify \
         the testing logic or any of the tests in any way!\nYour task is to make the minimal \
         changes to non-test files in the /testbed directory to ensure the \
         <issue_description> is satisfied.\nFollow these steps to resolve the issue:\n\
         1. As a first step, it might be a good idea to find and read code relevant to the \
         <issue_description>\n2. Create a script to reproduce the error and execute it with \
         `python <filename.py>` using the bash tool, to confirm the error\n3. Edit the source \
         code of the repo to resolve the issue\n4. Rerun your reproduce script and confirm \
         that the error is fixed!\n5. Think about edge cases and make sure your fix handles \
         them as well\nYour thinking should be thorough and so it's fine if it's very long.",
        numbered_source(rng, 1, 52)
    )
}

/// The request of the first turn: system message, task (a list of text parts, as LiteLLM
/// forwards SWE-agent's cache-control markers), tools, sampling. `rng` continues into the turns.
pub fn first_request(rng: &mut Rng, stream: bool) -> Value {
    let fixture: Value = serde_json::from_str(include_str!(
        "../../tests/fixtures/requests/swe-agent-1.json"
    ))
    .unwrap_or(Value::Null);
    let mut body = json!({
        "model": "base-model",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": [{"type": "text", "text": task_text(rng),
                                          "cache_control": {"type": "ephemeral"}}]},
        ],
        "tools": fixture["tools"].clone(),
        "temperature": 0.0,
        "top_p": 1.0,
        "tool_choice": "auto",
        "drop_params": true,
    });
    if stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

/// The chat request of turn `turns + 1` of a SWE-agent trajectory in session `session`
/// (12 hex digits), streaming or not; its task and turns are seeded by `session`.
pub fn chat_body(turns: usize, session: &str, stream: bool) -> Value {
    rollout_body(turns, session, session, stream)
}

/// [`chat_body`] with its task and turns seeded by `tag` instead of the session.
fn rollout_body(turns: usize, session: &str, tag: &str, stream: bool) -> Value {
    let mut rng = rollout_rng(0x5eed_0000, turns, tag);
    let mut body = first_request(&mut rng, stream);
    let mut messages = Vec::with_capacity(2 * turns);
    for i in 0..turns {
        let (thought, tool, arguments, observation) = turn(&mut rng, i);
        let id = format!("call_asap_{session}_{i}_0_{}", rng.hex(8));
        messages.push(json!({
            "role": "assistant",
            "content": thought,
            "tool_calls": [{"id": id, "type": "function",
                            "function": {"name": tool, "arguments": arguments.to_string()}}],
        }));
        messages.push(json!({
            "role": "tool",
            "tool_call_id": id,
            "content": format!("OBSERVATION:\n{observation}"),
        }));
    }
    if let Some(list) = body["messages"].as_array_mut() {
        list.extend(messages);
    }
    body
}

/// The generator of rollout `tag`'s turns in a text dialect (`base` apart per dialect).
fn rollout_rng(base: u64, turns: usize, tag: &str) -> Rng {
    let seed = tag
        .bytes()
        .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    Rng::new(base + turns as u64 + (seed << 20))
}

/// A [`turn`]'s tool call as the shell command a text dialect writes (an editor view becomes
/// `cat -n`).
fn shell_command(arguments: &Value) -> String {
    match (arguments.get("command"), arguments.get("path")) {
        (Some(Value::String(c)), None) => c.clone(),
        (_, Some(Value::String(path))) => format!("cat -n {path}"),
        _ => "ls".to_string(),
    }
}

/// A Terminus-2 request (JSON keystrokes in the reply's content, the terminal's output as the
/// next user message; no tools, no ids) of `turns` turns, the commands and outputs of
/// [`turn`] seeded by `tag` as in [`mini_text_bytes`]: the other content dialect without ids.
pub fn terminus_text_bytes(turns: usize, tag: &str, stream: bool) -> Vec<u8> {
    let fixture: Value = serde_json::from_str(include_str!(
        "../../tests/fixtures/requests/terminus-2-1.json"
    ))
    .unwrap_or(Value::Null);
    let mut rng = rollout_rng(0x7e2a_0000, turns, tag);
    let opening = fixture["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .replacen(
            "Compile /app/hello.c with gcc into /app/hello and make sure running it prints `Hello, terminal!`.",
            &format!("{} ({tag})", task_text(&mut rng)),
            1,
        );
    let mut messages = vec![json!({"role": "user", "content": opening})];
    for i in 0..turns {
        let (thought, _, arguments, observation) = turn(&mut rng, i);
        let command = shell_command(&arguments);
        let reply = json!({
            "analysis": thought,
            "plan": format!("Run `{command}` and read its output."),
            "commands": [{"keystrokes": format!("{command}\n"), "duration": 1.0}],
            "task_complete": false,
        });
        messages.push(json!({"role": "assistant",
            "content": serde_json::to_string_pretty(&reply).unwrap_or_default()}));
        messages.push(json!({"role": "user",
            "content": format!("New Terminal Output:\n\nroot@box:/app# {command}\n{observation}\nroot@box:/app# ")}));
    }
    serde_json::to_vec(&json!({"model": "base-model", "messages": messages,
        "temperature": 0.7, "stream": stream}))
    .unwrap_or_default()
}

/// The requests of one growing session of `turns` turns: the first request, then each next
/// turn's (its history one turn longer: the assistant's tool call and its observation), as
/// compact JSON, `turns + 1` bodies. Each extends the one before, as a scaffold's requests
/// do, so the trace's bytes per turn can be set against the new content of each turn.
pub fn growing_bytes(turns: usize, session: &str) -> Vec<Vec<u8>> {
    let full = chat_body(turns, session, false);
    let all = full["messages"].as_array().cloned().unwrap_or_default();
    let opening = all.len() - 2 * turns;
    (0..=turns)
        .map(|k| {
            let mut body = full.clone();
            body["messages"] = Value::Array(all[..opening + 2 * k].to_vec());
            serde_json::to_vec(&body).unwrap_or_default()
        })
        .collect()
}

/// [`chat_body`] as compact JSON bytes (what the scaffold puts on the wire).
pub fn chat_bytes(turns: usize, session: &str, stream: bool) -> Vec<u8> {
    serde_json::to_vec(&chat_body(turns, session, stream)).unwrap_or_default()
}

/// [`chat_body`] with tool-call ids that are not the proxy's (`call_<tag><step>…`, as after a
/// restart, on another replica, or from a client that rewrites ids): every such body opens a
/// session. `tag` seeds the task and turns and names the ids, so rollouts differ in every turn.
pub fn foreign_id_bytes(turns: usize, tag: &str, stream: bool) -> Vec<u8> {
    let body = rollout_body(turns, SESSION, tag, stream).to_string();
    body.replace(&format!("call_asap_{SESSION}_"), &format!("call_{tag}x"))
        .into_bytes()
}

/// [`foreign_id_bytes`] with each tool result sent as a list of one text part, the last two
/// marked `cache_control` (how SWE-agent's cache-control history processor and OpenHands send
/// them): the same path, contents of the other JSON shape.
pub fn parts_bytes(turns: usize, tag: &str, stream: bool) -> Vec<u8> {
    let mut body = rollout_body(turns, SESSION, tag, stream);
    if let Some(messages) = body["messages"].as_array_mut() {
        let n = messages.len();
        for (i, message) in messages.iter_mut().enumerate() {
            if message["role"] != "tool" {
                continue;
            }
            let mut part = json!({"type": "text", "text": message["content"].take()});
            if i + 4 >= n {
                part["cache_control"] = json!({"type": "ephemeral"});
            }
            message["content"] = json!([part]);
        }
    }
    body.to_string()
        .replace(&format!("call_asap_{SESSION}_"), &format!("call_{tag}x"))
        .into_bytes()
}

/// A mini-swe-agent 2.x text-mode request (no tools: the command in a ```mswea_bash_command
/// block of the reply, the result as `<returncode>`/`<output>`) of `turns` turns, the same
/// commands and outputs as [`chat_body`] (an editor view becomes `cat -n`): a content dialect
/// without ids, whose first request in a process opens a session. `tag` varies the task text
/// and seeds the turns, so bodies of different rollouts differ in every turn (as real
/// rollouts do; the proxy's cache of decoded messages must not find one rollout's turns in
/// another's).
pub fn mini_text_bytes(turns: usize, tag: &str, stream: bool) -> Vec<u8> {
    let fixture: Value = serde_json::from_str(include_str!(
        "../../tests/fixtures/requests/mini-swe-agent-v2-text-1.json"
    ))
    .unwrap_or(Value::Null);
    let mut rng = rollout_rng(0x5eed_0000, turns, tag);
    let system = fixture["messages"][0]["content"].clone();
    let instructions = fixture["messages"][1]["content"]
        .as_str()
        .unwrap_or_default()
        .replacen(
            "Write hi into note.txt",
            &format!("{} ({tag})", task_text(&mut rng)),
            1,
        );
    let mut messages = vec![
        json!({"role": "system", "content": system}),
        json!({"role": "user", "content": instructions}),
    ];
    for i in 0..turns {
        let (thought, _, arguments, observation) = turn(&mut rng, i);
        let command = shell_command(&arguments);
        messages.push(json!({"role": "assistant",
            "content": format!("{thought}\n\n```mswea_bash_command\n{command}\n```")}));
        messages.push(json!({"role": "user",
            "content": format!("<returncode>0</returncode>\n<output>\n{observation}\n</output>")}));
    }
    serde_json::to_vec(&json!({"model": "base-model", "messages": messages, "stream": stream}))
        .unwrap_or_default()
}
