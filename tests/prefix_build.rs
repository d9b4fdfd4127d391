//! `asap-proxy prefix build`: every input format, K, neutral tool names, the gold-patch leak
//! check, and the output read back by the prefix store.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use asap_proxy::prefix::build::{read_path, InputFormat};
use asap_proxy::prefix::{parse_file, Prefix, PrefixStore};
use asap_proxy::profile::Profiles;
use serde_json::{json, Value};

use crate::util::fixture_path;

use crate::util::cli::{self, Ran};

const SLUG_GOLD_LINE: &str = r#"text = re.sub(r"-{2,}", "-", text)"#;

fn prefix_fixture(rel: &str) -> PathBuf {
    fixture_path(&format!("prefix/{rel}"))
}

fn all_inputs() -> Vec<PathBuf> {
    [
        "swe-agent/run-0042.traj",
        "swe-agent/slugify__slugify-7-legacy.traj",
        "openhands-sdk/leftpad__leftpad-12",
        "openhands-sdk-events.jsonl",
        "openhands-v0/tally__tally-5.json",
        "asap-trace-3ed3f8b7a0cb.jsonl",
    ]
    .iter()
    .map(|p| prefix_fixture(p))
    .collect()
}

/// Runs `prefix build --from INPUTS --out OUT EXTRA…`, whatever its exit status.
fn run(inputs: &[PathBuf], out: &Path, extra: &[&str]) -> Ran {
    let mut args: Vec<&dyn AsRef<OsStr>> = vec![&"prefix", &"build", &"--from"];
    args.extend(inputs.iter().map(|i| i as &dyn AsRef<OsStr>));
    args.extend([&"--out" as &dyn AsRef<OsStr>, &out]);
    args.extend(extra.iter().map(|e| e as &dyn AsRef<OsStr>));
    cli::run(&args)
}

/// [`run`], which must succeed.
fn build(inputs: &[PathBuf], out: &Path, extra: &[&str]) -> Ran {
    let output = run(inputs, out, extra);
    assert!(output.success(), "prefix build failed: {}", output.stderr);
    output
}

fn read_out(out: &Path) -> HashMap<String, Prefix> {
    let text = std::fs::read_to_string(out).unwrap();
    parse_file(&out.display().to_string(), &text)
        .unwrap()
        .into_iter()
        .map(|p| (p.instance_id.clone(), p))
        .collect()
}

/// The report row of a task, split on whitespace.
fn row(report: &str, id: &str) -> Vec<String> {
    report
        .lines()
        .find(|l| l.split_whitespace().next() == Some(id))
        .unwrap_or_else(|| panic!("no row for {id}: {report}"))
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn tools(p: &Prefix) -> Vec<&str> {
    p.steps.iter().map(|s| s.action.tool.as_str()).collect()
}

fn args(p: &Prefix, i: usize) -> Value {
    Value::Object(p.steps[i].action.arguments.clone())
}

#[test]
fn every_format_cut_to_k_with_neutral_tools() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("prefixes.jsonl");
    let output = build(&all_inputs(), &out, &["--k", "3", "--no-leak-check"]);
    let report = output.stdout;
    assert!(
        report.contains("total: 6 prefixes, 6 kept, 0 rejected"),
        "{report}"
    );
    let got = read_out(&out);
    assert_eq!(got.len(), 6, "{:?}", got.keys());
    for p in got.values() {
        assert_eq!(p.steps.len(), 3, "{}: K=3", p.instance_id);
        assert!(p.leaks.is_empty());
    }

    // SWE-agent 1.x, calls from `history`; id and statement from `replay_config`.
    let swe = &got["slugify__slugify-7"];
    assert_eq!(
        tools(swe),
        ["bash", "str_replace_editor", "str_replace_editor"]
    );
    assert_eq!(swe.source.scaffold.as_deref(), Some("swe-agent"));
    assert_eq!(
        swe.source.model.as_deref(),
        Some("claude-sonnet-4-20250514")
    );
    assert!(swe
        .task_text
        .starts_with("`slugify()` keeps runs of dashes"));
    assert_eq!(
        args(swe, 1),
        json!({"command": "view", "path": "/testbed/slug/core.py"})
    );
    assert_eq!(
        args(swe, 2)["file_text"],
        json!("from slug.core import slugify\nprint(slugify('a -- b'))\n")
    );
    assert!(swe.steps[1].observation.contains("def slugify(text):"));
    assert_eq!(
        swe.steps[0].thought,
        "The PR is about `slugify`. Let me find where it is defined."
    );

    // SWE-agent without tool calls: action strings parsed; id from the file name.
    let legacy = &got["slugify__slugify-7-legacy"];
    assert_eq!(
        tools(legacy),
        ["bash", "str_replace_editor", "str_replace_editor"]
    );
    assert_eq!(args(legacy, 0), json!({"command": "ls -F /testbed"}));
    assert_eq!(
        args(legacy, 1),
        json!({"command": "view", "path": "/testbed/slug/core.py", "view_range": [5, 8]})
    );
    assert_eq!(
        args(legacy, 2),
        json!({"command": "str_replace", "path": "/testbed/slug/core.py",
               "old_str": r#"r"[\s]+""#, "new_str": r#"r"[\s-]+""#})
    );
    assert!(legacy.task_text.contains("ISSUE:"));

    // OpenHands SDK: a conversation directory and the same events as JSONL.
    for id in ["leftpad__leftpad-12", "openhands-sdk-events"] {
        let sdk = &got[id];
        assert_eq!(tools(sdk), ["bash", "str_replace_editor", "think"], "{id}");
        assert_eq!(sdk.source.scaffold.as_deref(), Some("openhands-sdk"));
        assert!(sdk
            .task_text
            .starts_with("leftPad(\"abc\", 2) throws a RangeError"));
        // `security_risk` and `summary` are scaffold metadata.
        assert_eq!(
            args(sdk, 0),
            json!({"command": "cd /workspace/leftpad && ls && cat package.json"})
        );
        assert!(sdk.steps[0].observation.contains("\"name\": \"leftpad\""));
        assert_eq!(sdk.steps[0].thought, "Let me look at the repository first.");
        assert!(sdk.steps[1].observation.contains("function leftPad"));
    }

    // OpenHands V0: tool calls from the metadata, an older action without it.
    let v0 = &got["tally__tally-5"];
    assert_eq!(
        tools(v0),
        ["bash", "str_replace_editor", "execute_ipython_cell"]
    );
    assert_eq!(v0.source.scaffold.as_deref(), Some("openhands-v0"));
    assert_eq!(v0.source.date.as_deref(), Some("2025-03-14"));
    assert_eq!(
        v0.task_text,
        "`Counter.most_common(0)` returns every item instead of an empty list."
    );
    assert_eq!(
        args(v0, 0),
        json!({"command": "find /workspace/tally__tally__0.3 -name '*.py' | head"})
    );
    assert_eq!(v0.steps[2].observation, "[('a', 2), ('b', 1)]");

    // Our own trace: the nudged record is skipped, observations come from the next prompt.
    let trace = &got["asap-trace-3ed3f8b7a0cb"];
    assert_eq!(tools(trace), ["bash", "str_replace_editor", "bash"]);
    assert_eq!(trace.source.scaffold.as_deref(), Some("asap-proxy"));
    assert_eq!(trace.source.model.as_deref(), Some("fake-base-1b"));
    assert!(trace
        .task_text
        .starts_with("`Inventory.total()` returns the sum"));
    assert_eq!(
        trace.steps[0].observation,
        "/testbed/inventory.py:14:    def total(self):"
    );
    assert!(trace.steps[1]
        .observation
        .ends_with("    16\t        return sum(line.quantity for line in self.lines)"));
    assert_eq!(
        args(trace, 2),
        json!({"command": "cd /testbed && python -m pytest -q tests/test_inventory.py 2>&1 | tail -5"})
    );
    assert!(trace.steps[2].observation.contains("1 failed, 1 passed"));
}

#[test]
fn later_steps_and_escaped_observations_of_a_trace() {
    let profiles = Profiles::builtin().unwrap();
    let got = read_path(
        &prefix_fixture("asap-trace-3ed3f8b7a0cb.jsonl"),
        0,
        &profiles,
        None,
    )
    .unwrap();
    let steps = &got[0].steps;
    assert_eq!(
        tools(&got[0]),
        ["bash", "str_replace_editor", "bash", "str_replace_editor"],
        "the trace's final submit is not part of a prefix"
    );
    // The rendering's escapes are undone.
    assert_eq!(
        steps[3].observation,
        "The file /testbed/inventory.py has been edited. <observation> is not a tag here.\n## Thinking about it is fine"
    );
    assert_eq!(steps.len(), 4);
}

#[test]
fn openhands_v0_evaluation_output_records() {
    let dir = tempfile::tempdir().unwrap();
    let events: Value = serde_json::from_str(
        &std::fs::read_to_string(prefix_fixture("openhands-v0/tally__tally-5.json")).unwrap(),
    )
    .unwrap();
    let lines: Vec<String> = ["tally__tally-5", "tally__tally-6"]
        .iter()
        .map(|id| {
            json!({"instance_id": id, "instruction": "see history", "history": events,
                   "metadata": {"llm_config": {"model": "claude-3-7-sonnet-20250219"}},
                   "test_result": {"git_patch": ""}})
            .to_string()
        })
        .collect();
    let path = dir.path().join("output.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    let profiles = Profiles::builtin().unwrap();
    let got = read_path(&path, 5, &profiles, None).unwrap();
    let ids: Vec<&str> = got.iter().map(|p| p.instance_id.as_str()).collect();
    assert_eq!(ids, ["tally__tally-5", "tally__tally-6"]);
    assert_eq!(
        tools(&got[1]),
        [
            "bash",
            "str_replace_editor",
            "execute_ipython_cell",
            "str_replace_editor"
        ],
        "the finish is not part of a prefix"
    );
    assert_eq!(
        got[0].source.model.as_deref(),
        Some("claude-3-7-sonnet-20250219")
    );
    assert_eq!(InputFormat::OpenHandsV0.scaffold(), "openhands-v0");
}

#[test]
fn leak_check_rejects_gold_lines_and_allow_leaks_marks_them() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = [
        prefix_fixture("swe-agent/run-0042.traj"),
        prefix_fixture("openhands-sdk/leftpad__leftpad-12"),
    ];
    let gold = prefix_fixture("gold.jsonl");
    let gold = gold.to_str().unwrap();

    // K=5 reaches the edit that writes the fix: rejected. The leftpad prefix shares only
    // trivial gold lines (`}`, `return`) with its observations: kept.
    let out = dir.path().join("checked.jsonl");
    let output = build(&inputs, &out, &["--k", "5", "--gold", gold]);
    let report = output.stdout;
    // The slugify patch has 3 non-trivial added lines, the leftpad one 5 (`}` and a bare
    // `return` do not count).
    assert_eq!(
        row(&report, "slugify__slugify-7")[..5],
        ["slugify__slugify-7", "5", "3", "3", "rejected"]
    );
    assert_eq!(
        row(&report, "leftpad__leftpad-12")[..5],
        ["leftpad__leftpad-12", "4", "5", "0", "kept"],
        "a prefix stops before the submit"
    );
    assert!(
        report.contains("  kept      thoughts, actions, observations of 4 steps\n"),
        "{report}"
    );
    assert!(
        report.contains("total: 2 prefixes, 1 kept, 1 rejected, 1 with leaks, 0 not checked"),
        "{report}"
    );
    let stderr = output.stderr;
    assert!(
        stderr.contains(&format!(
            "slugify__slugify-7: step 5 action leaks gold line: {SLUG_GOLD_LINE}"
        )),
        "{stderr}"
    );
    let kept = read_out(&out);
    assert_eq!(kept.keys().collect::<Vec<_>>(), ["leftpad__leftpad-12"]);
    assert!(kept["leftpad__leftpad-12"].leaks.is_empty());

    // K=3 stops before the fix: clean.
    let out3 = dir.path().join("k3.jsonl");
    let output = build(&inputs, &out3, &["--k", "3", "--gold", gold]);
    assert!(output
        .stdout
        .contains("total: 2 prefixes, 2 kept, 0 rejected, 0 with leaks"));

    // --allow-leaks writes it, marked.
    let marked = dir.path().join("marked.jsonl");
    build(
        &inputs,
        &marked,
        &["--k", "5", "--gold", gold, "--allow-leaks"],
    );
    let got = read_out(&marked);
    let leaks = &got["slugify__slugify-7"].leaks;
    assert!(leaks.iter().any(|l| l == SLUG_GOLD_LINE), "{leaks:?}");
    assert!(leaks.iter().all(|l| l.len() >= 10), "{leaks:?}");
    assert!(got["leftpad__leftpad-12"].leaks.is_empty());
}

#[test]
fn output_round_trips_into_the_store_and_matches_by_fingerprint() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("refs.jsonl");
    build(&all_inputs(), &out, &["--k", "3", "--no-leak-check"]);
    // What was written is exactly what parse_file reads back.
    let text = std::fs::read_to_string(&out).unwrap();
    for (line, prefix) in text.lines().zip(parse_file("refs.jsonl", &text).unwrap()) {
        assert_eq!(serde_json::to_string(&prefix).unwrap(), line);
    }
    let store = PrefixStore::load(&[dir.path().to_path_buf()], 3).unwrap();
    assert_eq!(store.len(), 6);
    // The trace was recorded from this request: its first user message finds the prefix.
    let request: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture_path("requests/swe-agent-1.json")).unwrap(),
    )
    .unwrap();
    let first_user = request["messages"][1]["content"][0]["text"]
        .as_str()
        .unwrap();
    let hit = store.select(None, first_user, None).unwrap();
    assert_eq!(
        (hit.id.as_str(), hit.matched_by.as_str(), hit.steps.len()),
        ("asap-trace-3ed3f8b7a0cb", "fingerprint", 3)
    );
}

#[test]
fn bad_inputs_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, r#"{"hello": "world"}"#).unwrap();
    let output = run(&[junk], &dir.path().join("o.jsonl"), &["--no-leak-check"]);
    assert_eq!(output.code, Some(1));
    let stderr = &output.stderr;
    assert!(stderr.contains("unknown trajectory format"), "{stderr}");
    let traj = [prefix_fixture("swe-agent/run-0042.traj")];
    let output = run(
        &traj,
        &dir.path().join("o.jsonl"),
        &["--no-leak-check", "--k", "0"],
    );
    assert_eq!(output.code, Some(2));
    let output = run(
        &traj,
        &dir.path().join("o.jsonl"),
        &["--no-leak-check", "--profile", "nope"],
    );
    assert_eq!(output.code, Some(2));
}

#[test]
fn without_gold_the_build_is_refused_and_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sub").join("prefixes.jsonl");
    let output = run(&all_inputs(), &out, &["--k", "3"]);
    assert_eq!(output.code, Some(2));
    let stderr = &output.stderr;
    assert!(
        stderr.contains("--gold FILE") && stderr.contains("--no-leak-check"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
    assert!(!out.parent().unwrap().exists(), "nothing may be written");
    // --allow-leaks is not a way around it: there is nothing to allow without a check.
    let output = run(&all_inputs(), &out, &["--allow-leaks"]);
    assert_eq!(output.code, Some(2));
    assert!(!out.parent().unwrap().exists());
}

#[test]
fn a_task_missing_from_the_gold_file_is_rejected_unless_no_leak_check() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = [
        prefix_fixture("swe-agent/run-0042.traj"),
        prefix_fixture("openhands-sdk/leftpad__leftpad-12"),
        prefix_fixture("openhands-v0/tally__tally-5.json"),
    ];
    let gold = prefix_fixture("gold.jsonl");
    let gold = gold.to_str().unwrap();

    let out = dir.path().join("checked.jsonl");
    let output = build(&inputs, &out, &["--k", "3", "--gold", gold]);
    let report = output.stdout;
    assert_eq!(
        row(&report, "tally__tally-5"),
        [
            "tally__tally-5",
            "3",
            "-",
            "-",
            "rejected",
            "no",
            "gold",
            "patch:",
            "not",
            "checked"
        ]
    );
    assert_eq!(
        row(&report, "slugify__slugify-7")[..5],
        ["slugify__slugify-7", "3", "3", "0", "kept"]
    );
    assert!(
        report.contains("total: 3 prefixes, 2 kept, 1 rejected, 0 with leaks, 1 not checked"),
        "{report}"
    );
    let stderr = output.stderr;
    assert!(
        stderr.contains("tally__tally-5: no gold patch: not checked"),
        "{stderr}"
    );
    let mut written: Vec<String> = read_out(&out).into_keys().collect();
    written.sort();
    assert_eq!(written, ["leftpad__leftpad-12", "slugify__slugify-7"]);

    // With --no-leak-check the unchecked task is written; the others are still checked.
    let out = dir.path().join("some-unchecked.jsonl");
    let output = build(
        &inputs,
        &out,
        &["--k", "5", "--gold", gold, "--no-leak-check"],
    );
    let report = output.stdout;
    assert_eq!(row(&report, "tally__tally-5")[4], "kept");
    assert!(
        report.contains("  kept      no gold patch: not checked\n"),
        "{report}"
    );
    assert_eq!(
        row(&report, "slugify__slugify-7")[..5],
        ["slugify__slugify-7", "5", "3", "3", "rejected"]
    );
    let mut written: Vec<String> = read_out(&out).into_keys().collect();
    written.sort();
    assert_eq!(written, ["leftpad__leftpad-12", "tally__tally-5"]);
}

#[test]
fn no_leak_check_writes_every_prefix_and_says_not_checked() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("unchecked.jsonl");
    // K=5 reaches the slugify fix: written all the same, since nothing is checked.
    let output = build(&all_inputs(), &out, &["--k", "5", "--no-leak-check"]);
    let report = output.stdout;
    let rows: Vec<&str> = report
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with("total:"))
        .collect();
    assert_eq!(rows.len(), 6, "{report}");
    for r in rows {
        let fields: Vec<&str> = r.split_whitespace().collect();
        assert_eq!(fields[2..], ["-", "-", "kept", "not", "checked"], "{r}");
    }
    assert!(
        report.contains("total: 6 prefixes, 6 kept, 0 rejected, 0 with leaks, 6 not checked"),
        "{report}"
    );
    assert_eq!(read_out(&out).len(), 6);
    assert!(
        output.stderr.is_empty(),
        "no per-task notes without a check"
    );
}

#[test]
fn a_gold_line_in_a_thought_is_a_leak() {
    let dir = tempfile::tempdir().unwrap();
    // The fixture's K=3 prefix is clean (see above); here the reference model spells out the
    // fix in its second thought, before any step writes it.
    let mut traj: Value = serde_json::from_str(
        &std::fs::read_to_string(prefix_fixture("swe-agent/run-0042.traj")).unwrap(),
    )
    .unwrap();
    traj["trajectory"][1]["thought"] = json!(format!(
        "Runs of dashes survive. The fix:\n    {SLUG_GOLD_LINE}\nFirst, the code."
    ));
    let input = dir.path().join("run-0042.traj");
    std::fs::write(&input, traj.to_string()).unwrap();
    let gold = prefix_fixture("gold.jsonl");

    let out = dir.path().join("checked.jsonl");
    let output = build(
        &[input],
        &out,
        &["--k", "3", "--gold", gold.to_str().unwrap()],
    );
    let report = output.stdout;
    assert_eq!(
        row(&report, "slugify__slugify-7")[..5],
        ["slugify__slugify-7", "3", "3", "1", "rejected"]
    );
    let stderr = output.stderr;
    assert!(
        stderr.contains(&format!(
            "slugify__slugify-7: step 2 thought leaks gold line: {SLUG_GOLD_LINE}"
        )),
        "{stderr}"
    );
    assert!(read_out(&out).is_empty());
}

/// A built set comes with its provenance (issue 20): the digest `serve` records for it, K,
/// the reference models, the inputs and the leak check in counts; the prefix loader skips the
/// provenance file, and a proxy serving the set records the same digest.
#[tokio::test]
async fn a_built_set_records_its_provenance_and_the_digest_serve_records() {
    use asap_proxy::prefix::build::{provenance_path, Provenance};
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("set");
    let inputs = [
        prefix_fixture("swe-agent/run-0042.traj"),
        prefix_fixture("openhands-sdk/leftpad__leftpad-12"),
    ];
    let gold = prefix_fixture("gold.jsonl");
    let out = set.join("verified.jsonl");
    build(
        &inputs,
        &out,
        &[
            "--k",
            "5",
            "--gold",
            gold.to_str().unwrap(),
            "--allow-leaks",
        ],
    );
    let path = provenance_path(&out);
    assert_eq!(path, set.join("verified.jsonl.provenance.json"));
    let p: Provenance = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(p.k, 5);
    assert_eq!(p.inputs, inputs);
    assert_eq!(p.leak_check.gold.as_deref(), Some(gold.as_path()));
    assert_eq!(
        (
            p.leak_check.checked,
            p.leak_check.kept,
            p.leak_check.rejected,
            p.leak_check.kept_with_leaks,
            p.leak_check.kept_unchecked
        ),
        (2, 2, 0, 1, 0),
        "{p:?}"
    );
    assert_eq!(p.sources.iter().map(|s| s.prefixes).sum::<usize>(), 2);

    // The loader reads the prefixes and skips the provenance: the digest is the one recorded.
    let store = asap_proxy::prefix::PrefixStore::load(std::slice::from_ref(&set), 3).unwrap();
    assert_eq!(store.len(), 2);
    assert_eq!(store.id(), p.prefix_set);
    let (_backend, proxy) = crate::util::proxy::serve_with(
        vec![crate::util::backend::Scripted::text(
            "Look.\n<bash>ls</bash>\n",
        )],
        |a| a.prompt.prefixes = vec![set.clone()],
    )
    .await;
    let (status, _) = proxy.post(&crate::util::request("swe-agent-1")).await;
    assert_eq!(status, 200);
    let session = &proxy.first_trace()[0]["data"];
    assert_eq!(
        session["prefix_set"]["sha256"],
        p.prefix_set.sha256.as_str()
    );
}

fn mini_inputs() -> Vec<PathBuf> {
    [
        "mini-swe-agent/slugify__slugify-7.traj.json",
        "mini-swe-agent/leftpad__leftpad-12.traj.json",
        "mini-swe-agent/v1/tally__tally-5.traj.json",
    ]
    .iter()
    .map(|p| prefix_fixture(p))
    .collect()
}

/// mini-swe-agent `.traj.json` files as mini's own save code writes them (see
/// tests/fixtures/prefix/mini-swe-agent/make_fixtures.py): 2.x text mode, 2.x tool calls,
/// 1.x text mode without an instance id.
#[test]
fn mini_swe_agent_trajectories() {
    let profiles = Profiles::builtin().unwrap();
    let read = |rel: &str, k| read_path(&prefix_fixture(rel), k, &profiles, None).unwrap();

    // 2.x text mode: a thought, then a ```mswea_bash_command block; the reply mini rejected
    // (two blocks) is not in its history; the step before the submit is the last.
    let text = read("mini-swe-agent/slugify__slugify-7.traj.json", 0);
    let p = &text[0];
    assert_eq!(p.instance_id, "slugify__slugify-7");
    assert_eq!(p.source.scaffold.as_deref(), Some("mini-swe-agent"));
    assert_eq!(
        p.source.model.as_deref(),
        Some("anthropic/claude-sonnet-4-5-20250929")
    );
    // The task from mini's instance template, without its lead-in or tags.
    assert!(p.task_text.starts_with("`slugify()` keeps runs of dashes"));
    assert!(p.task_text.ends_with("collapse into one dash."));
    assert_eq!(tools(p), ["bash"; 5]);
    assert_eq!(
        p.steps[0].thought,
        "The PR is about `slugify`. Let me find where it is defined."
    );
    assert_eq!(args(p, 0), json!({"command": "grep -rn \"def slugify\" ."}));
    assert_eq!(
        p.steps[0].observation,
        "./slug/core.py:5:def slugify(text):"
    );
    assert_eq!(p.steps[2].thought, "Let me reproduce the issue first.");
    assert_eq!(p.steps[2].observation, "a----b");
    assert_eq!(p.steps[3].observation, "");

    // 2.x tool calls: one step per call (the thought on the first), observations by call id,
    // a non-zero return code as the last line.
    let calls = read("mini-swe-agent/leftpad__leftpad-12.traj.json", 0);
    let p = &calls[0];
    assert_eq!(p.instance_id, "leftpad__leftpad-12");
    assert!(p
        .task_text
        .starts_with("leftPad(\"abc\", 2) throws a RangeError"));
    assert_eq!(tools(p), ["bash"; 5]);
    assert_eq!(args(p, 1), json!({"command": "cat index.js"}));
    assert_eq!(args(p, 2), json!({"command": "cat test/run.js"}));
    assert!(p.steps[1].observation.starts_with("function leftPad("));
    assert!(p.steps[2]
        .observation
        .starts_with("const leftPad = require"));
    assert_eq!(p.steps[2].thought, "");
    assert_eq!(p.steps[3].observation, "[exit status 1]");

    // 1.x: ```bash blocks, a reply without a block (format error) skipped, the instance id
    // from the file name.
    let v1 = read("mini-swe-agent/v1/tally__tally-5.traj.json", 0);
    let p = &v1[0];
    assert_eq!(p.instance_id, "tally__tally-5");
    assert_eq!(
        p.task_text,
        "`Counter.most_common(0)` returns every item instead of an empty list."
    );
    assert_eq!(tools(p), ["bash"; 3]);
    assert_eq!(args(p, 1), json!({"command": "cat tally/counter.py"}));
    assert_eq!(p.steps[2].observation, "[('a', 1)]");

    // The submit is read as one (and cut), without it the prefix would end on it.
    let (format, raw) = asap_proxy::prefix::build::read_trajectories(&prefix_fixture(
        "mini-swe-agent/slugify__slugify-7.traj.json",
    ))
    .unwrap();
    assert_eq!(format, InputFormat::MiniSweAgent);
    let last = raw[0].steps.last().unwrap();
    assert_eq!(last.tool, "submit");
    assert!(last.arguments.is_empty());
    assert_eq!(raw[0].steps.len(), 6);

    // K cuts.
    let cut = read("mini-swe-agent/leftpad__leftpad-12.traj.json", 2);
    assert_eq!(cut[0].steps.len(), 2);
}

/// The leak check applies to mini-swe-agent prefixes as to the others.
#[test]
fn mini_swe_agent_prefixes_are_checked_for_leaks() {
    let dir = tempfile::tempdir().unwrap();
    let gold = prefix_fixture("gold.jsonl");
    let gold = gold.to_str().unwrap();
    let inputs = mini_inputs();

    // K=3 stops before the edits: kept; tally has no gold patch: rejected.
    let out = dir.path().join("k3.jsonl");
    let output = build(&inputs, &out, &["--k", "3", "--gold", gold]);
    assert!(
        output
            .stdout
            .contains("total: 3 prefixes, 2 kept, 1 rejected, 0 with leaks, 1 not checked"),
        "{}",
        output.stdout
    );
    assert_eq!(row(&output.stdout, "slugify__slugify-7")[4], "kept");
    let got = read_out(&out);
    assert_eq!(got.len(), 2);
    assert_eq!(got["leftpad__leftpad-12"].steps.len(), 3);

    // K=5 reaches the edits: both rejected, the leaking step named.
    let out = dir.path().join("k5.jsonl");
    let output = build(&inputs[..2], &out, &["--k", "5", "--gold", gold]);
    assert!(
        output
            .stdout
            .contains("total: 2 prefixes, 0 kept, 2 rejected, 2 with leaks"),
        "{}",
        output.stdout
    );
    assert!(
        output.stderr.contains(&format!(
            "slugify__slugify-7: step 4 action leaks gold line: {SLUG_GOLD_LINE}"
        )),
        "{}",
        output.stderr
    );
    assert!(output.stderr.contains(
        "leftpad__leftpad-12: step 5 action leaks gold line: if (width <= text.length) {"
    ));
    assert!(read_out(&out).is_empty());

    // --allow-leaks writes them, marked; the prefix store reads the file back.
    let store_dir = dir.path().join("store");
    let out = store_dir.join("allow.jsonl");
    build(
        &inputs[..2],
        &out,
        &["--k", "5", "--gold", gold, "--allow-leaks"],
    );
    let got = read_out(&out);
    assert!(got["slugify__slugify-7"]
        .leaks
        .iter()
        .any(|l| l == SLUG_GOLD_LINE));
    assert_eq!(PrefixStore::load(&[store_dir], 5).unwrap().len(), 2);
}

/// Two reference runs of one task (here SWE-agent's and mini-swe-agent's): the first input's
/// prefix is written, the second is rejected as a duplicate, so the set holds one prefix per
/// task and its provenance counts what `serve` loads.
#[test]
fn a_second_prefix_of_the_same_task_is_rejected_as_a_duplicate() {
    use asap_proxy::prefix::build::{provenance_path, Provenance};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("set.jsonl");
    let inputs = [
        prefix_fixture("swe-agent/run-0042.traj"),
        prefix_fixture("mini-swe-agent/slugify__slugify-7.traj.json"),
    ];
    let output = build(&inputs, &out, &["--k", "3", "--no-leak-check"]);
    let report = output.stdout;
    assert!(
        report.contains("total: 2 prefixes, 1 kept, 1 rejected"),
        "{report}"
    );
    assert!(
        output.stderr.contains(
            "slugify__slugify-7: duplicate: this task's prefix came from an earlier input"
        ),
        "{}",
        output.stderr
    );
    let kept = read_out(&out);
    assert_eq!(kept.len(), 1);
    assert_eq!(
        kept["slugify__slugify-7"].source.scaffold.as_deref(),
        Some("swe-agent"),
        "the first input's prefix is kept"
    );
    let p: Provenance =
        serde_json::from_str(&std::fs::read_to_string(provenance_path(&out)).unwrap()).unwrap();
    assert_eq!((p.leak_check.kept, p.prefix_set.prefixes), (1, 1));
    assert!(p.built.ends_with(" UTC"), "{}", p.built);
}
