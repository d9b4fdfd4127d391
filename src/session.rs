//! Sessions without server state (docs/architecture.md "Stateless sessions").
//!
//! Chat completions are stateless: the scaffold resends the whole history each turn. The proxy
//! mints every tool-call id it returns and encodes in it what it must remember:
//! `call_asap_<session>_<step>_<nudges>_<nonce>` where `session` is 12 lowercase hex digits,
//! `step` the 0-based step index (actions in the history: a requery of a failed turn keeps
//! it), `nudges` the nudges already used, in the order they fired, each as its kind letter and
//! the place it was rendered (`s5` = submit-before-edit after 5 history steps, `r9` = repeated
//! action after 9; `0` for none; see [`NudgeState`]), and `nonce` 8 hex digits that make every
//! id unique. The next request's history carries the id back, so any replica can serve any
//! request and a restart loses nothing. Ids match `^[A-Za-z0-9_-]{1,64}$` (at most 54 bytes).
//! Ids of any other shape are never decoded as state.
//!
//! Turns without a tool call (an unparsable reply, a content-format answer) carry no id. For
//! those, [`SessionIndex`] remembers the SHA-256 of the content the proxy sent and of the
//! prompt it answered, with the session, in memory and bounded: a history whose latest
//! proxy-made turn has no id is matched through the content, and one that dropped that turn
//! and appended feedback is matched through the prompt it extends. That part is per process, so replicas serving such turns need sticky
//! routing, and two rollouts whose whole histories are identical share a session.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};

use crate::openai::chat::{ChatMessage, Role};

const PREFIX: &str = "call_asap_";

/// A trajectory's identity: 12 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionId(String);

impl SessionId {
    /// A fresh random session id.
    pub fn mint() -> Self {
        Self(uuid::Uuid::new_v4().simple().to_string()[..12].to_string())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// An id read back from a trace (a file stem or the `session` of a record): 12 lowercase
    /// hex digits, as [`SessionId::mint`] makes them; `None` for any other text. `replay` uses
    /// it to feed the session index with the recorded id, as the pipeline did.
    pub fn from_recorded(text: &str) -> Option<Self> {
        (text.len() == 12
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| Self(text.to_string()))
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The two nudges of the paper (ASAP, failure recovery): each fires at most once per session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NudgeKind {
    /// A submit before any file edit.
    SubmitBeforeEdit,
    /// An action identical to the previous one.
    RepeatedAction,
}

impl NudgeKind {
    /// The snake_case name written in traces.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SubmitBeforeEdit => "submit_before_edit",
            Self::RepeatedAction => "repeated_action",
        }
    }

    fn letter(self) -> char {
        match self {
            Self::SubmitBeforeEdit => 's',
            Self::RepeatedAction => 'r',
        }
    }

    fn from_letter(c: char) -> Option<Self> {
        match c {
            's' => Some(Self::SubmitBeforeEdit),
            'r' => Some(Self::RepeatedAction),
            _ => None,
        }
    }
}

/// The place of a nudge used before a compaction: beyond any history, so never rendered.
pub const COMPACTED_PLACE: usize = 99_999;

/// Nudges used in a session, in the order they fired, each with its place: the number of
/// history steps (scaffold-visible steps, not counting earlier nudges) before which its
/// rejected action and hint are rendered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NudgeState(pub Vec<(NudgeKind, usize)>);

impl NudgeState {
    /// Whether `kind` was already used.
    pub fn used(&self, kind: NudgeKind) -> bool {
        self.0.iter().any(|(k, _)| *k == kind)
    }

    /// Records that `kind` fired after `place` history steps.
    pub fn push(&mut self, kind: NudgeKind, place: usize) {
        if !self.used(kind) {
            self.0.push((kind, place));
        }
    }

    /// These nudges after a compaction: still used, but placed past any history
    /// ([`COMPACTED_PLACE`]), so their hints, which stood in the steps compacted away, are
    /// not rendered again.
    pub fn compacted(&self) -> Self {
        Self(self.0.iter().map(|(k, _)| (*k, COMPACTED_PLACE)).collect())
    }

    fn encode(&self) -> String {
        if self.0.is_empty() {
            return "0".to_string();
        }
        self.0
            .iter()
            .map(|(k, p)| format!("{}{p}", k.letter()))
            .collect()
    }

    fn decode(text: &str) -> Option<Self> {
        if text == "0" {
            return Some(Self::default());
        }
        let mut out = Vec::new();
        let mut chars = text.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            let kind = NudgeKind::from_letter(c)?;
            let mut end = i + 1;
            while let Some((j, d)) = chars.peek().copied() {
                if !d.is_ascii_digit() {
                    break;
                }
                end = j + 1;
                chars.next();
            }
            let place = text.get(i + 1..end)?.parse().ok()?;
            if out.iter().any(|(k, _)| *k == kind) {
                return None;
            }
            out.push((kind, place));
        }
        Some(Self(out))
    }
}

/// What a minted tool-call id carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallId {
    pub session: SessionId,
    pub step: usize,
    pub nudges: NudgeState,
}

impl CallId {
    /// Mints a unique id string for this session, step and nudge state.
    pub fn mint(&self) -> String {
        let nonce = &uuid::Uuid::new_v4().simple().to_string()[..8];
        format!(
            "{PREFIX}{}_{}_{}_{nonce}",
            self.session,
            self.step,
            self.nudges.encode()
        )
    }

    /// Decodes an id minted by [`CallId::mint`]; `None` for any other id.
    pub fn parse(id: &str) -> Option<Self> {
        let rest = id.strip_prefix(PREFIX)?;
        let mut parts = rest.split('_');
        let session = parts.next()?;
        let step = parts.next()?.parse().ok()?;
        let nudges = NudgeState::decode(parts.next()?)?;
        let nonce = parts.next()?;
        let hex = |s: &str, n: usize| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        (hex(session, 12) && hex(nonce, 8) && parts.next().is_none()).then(|| Self {
            session: SessionId(session.to_string()),
            step,
            nudges,
        })
    }
}

/// A session recovered from a history, or a fresh one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionState {
    pub session: SessionId,
    pub nudges: NudgeState,
    /// False for a freshly minted session.
    pub recovered: bool,
    /// Steps of the trajectory that the history no longer holds (a client that compacted
    /// its context keeps a summary in their place): the step of the history's first action
    /// is this, not 0. Read from the first proxy-minted id in the history, or, for the first
    /// request after a compaction (no id left), from the summary it carries
    /// ([`SessionIndex::find_summary`]).
    pub step_base: usize,
}

impl SessionState {
    /// A fresh session with no nudges used.
    pub fn fresh() -> Self {
        Self {
            session: SessionId::mint(),
            nudges: NudgeState::default(),
            recovered: false,
            step_base: 0,
        }
    }
}

/// Hash → session, for turns the proxy answered without a tool call: keyed by the content
/// sent (scaffolds that keep the failed turn in their history) and by the prompt it answered
/// (scaffolds that drop the failed turn and only append their feedback).
#[derive(Debug)]
pub struct SessionIndex {
    capacity: usize,
    inner: Mutex<IndexInner>,
}

#[derive(Debug, Default)]
struct IndexInner {
    map: HashMap<IndexKey, (SessionId, NudgeState)>,
    order: VecDeque<IndexKey>,
    /// Summaries the model wrote for a client's compaction, newest last (at most
    /// [`SUMMARY_CAPACITY`]).
    summaries: VecDeque<Summary>,
    /// Sessions that issued an edit, oldest first (at most the index's capacity).
    edited: VecDeque<SessionId>,
}

/// A compaction summary the model wrote for a session (see [`SessionIndex::remember_summary`]).
#[derive(Debug, Clone)]
struct Summary {
    scope: String,
    text: String,
    session: SessionId,
    nudges: NudgeState,
    next_step: usize,
    edited: bool,
}

/// Summaries kept (oldest evicted first): one per compaction in flight, each needed only until
/// the client's next request.
pub const SUMMARY_CAPACITY: usize = 1024;

/// Shorter summaries are not remembered: a short text could stand in an unrelated history.
pub const SUMMARY_MIN_CHARS: usize = 24;

/// Entries kept by default (oldest evicted first; two per turn answered without a tool
/// call): about 5 MiB when full (the table is allocated whole up front, so it never doubles
/// under load: 65,536 buckets of 64 bytes, the 0.5 MiB order queue, the session ids). An entry
/// must outlive the scaffold's tool run between two turns of its session: at the soak's
/// 150 requests/s (docs/reliability.md section 8) an entry lives about 3 minutes, at a
/// typical eval's 15 content turns/s about 18 minutes.
pub const DEFAULT_INDEX_CAPACITY: usize = 32_768;

/// `scope` keeps rollouts that name their task and run (`X-ASAP-Task`, `X-ASAP-Run`) apart
/// even when their turns are byte-identical (parallel runs of one task with the same model
/// output); it is empty when a request names neither.
///
/// The key is a 128-bit XXH3 digest: keys live in this process's memory only, and hashing a
/// whole prompt with SHA-256 on every request was the proxy's largest single CPU cost.
///
/// The text is hashed in one call, seeded with the digest of `kind` and `scope`: XXH3's
/// streaming form costs about twice its one-shot form per byte, and the text is a whole
/// prompt (`prompt_key`) on every request.
fn key(kind: &str, scope: &str, text: &str) -> IndexKey {
    let mut head = Vec::with_capacity(kind.len() + scope.len() + 1);
    head.extend_from_slice(kind.as_bytes());
    head.push(0);
    head.extend_from_slice(scope.as_bytes());
    let seed = xxhash_rust::xxh3::xxh3_64(&head);
    xxhash_rust::xxh3::xxh3_128_with_seed(text.trim().as_bytes(), seed).to_le_bytes()
}

/// A key of the [`SessionIndex`].
pub type IndexKey = [u8; 16];

/// The index key of a prompt answered without a tool call (see [`SessionIndex::remember`]).
pub fn prompt_key(scope: &str, prompt: &str) -> IndexKey {
    key("prompt", scope, prompt)
}

/// The index scope of a request: its explicit task id and run index, if any. Keys are
/// hashed within it, so byte-identical turns of different runs never share a session.
pub fn index_scope(task: Option<&str>, run: Option<usize>) -> String {
    match (task, run) {
        (None, None) => String::new(),
        (task, run) => format!(
            "task={}\u{1f}run={}",
            task.unwrap_or_default(),
            run.map(|r| r.to_string()).unwrap_or_default()
        ),
    }
}

impl SessionIndex {
    /// An empty index holding at most `capacity` entries, allocated whole now.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            capacity,
            inner: Mutex::new(IndexInner {
                // A turn inserts up to two keys before the oldest are evicted.
                map: HashMap::with_capacity(capacity + 2),
                order: VecDeque::with_capacity(capacity + 2),
                summaries: VecDeque::new(),
                edited: VecDeque::new(),
            }),
        }
    }

    /// Remembers a turn answered without a tool call: the `content` sent (ignored when blank:
    /// it would tie unrelated sessions together) and the prompt it answered (its
    /// [`prompt_key`]), within `scope` ([`index_scope`]).
    pub fn remember(
        &self,
        scope: &str,
        content: &str,
        prompt_key: IndexKey,
        session: &SessionId,
        nudges: &NudgeState,
    ) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let mut keys = vec![prompt_key];
        if !content.trim().is_empty() {
            keys.push(key("content", scope, content));
        }
        for k in keys {
            if inner
                .map
                .insert(k, (session.clone(), nudges.clone()))
                .is_none()
            {
                inner.order.push_back(k);
            }
        }
        while inner.order.len() > self.capacity {
            if let Some(old) = inner.order.pop_front() {
                inner.map.remove(&old);
            }
        }
    }

    /// The session of a history: from the latest proxy-minted id, or, when a later assistant
    /// turn has no tool call, from the content it had (within `scope`).
    pub fn find(&self, scope: &str, messages: &[Arc<ChatMessage>]) -> Option<SessionState> {
        let inner = self.inner.lock().ok();
        for m in messages.iter().rev().filter(|m| m.role == Role::Assistant) {
            if let Some(call) = m
                .tool_calls
                .iter()
                .rev()
                .find_map(|c| c.id.as_deref().and_then(CallId::parse))
            {
                return Some(SessionState {
                    session: call.session,
                    nudges: call.nudges,
                    recovered: true,
                    step_base: 0,
                });
            }
            if m.tool_calls.is_empty() && !m.content.trim().is_empty() {
                let hit = inner
                    .as_ref()
                    .and_then(|i| i.map.get(&key("content", scope, &m.content)));
                if let Some((session, nudges)) = hit {
                    return Some(SessionState {
                        session: session.clone(),
                        nudges: nudges.clone(),
                        recovered: true,
                        step_base: 0,
                    });
                }
            }
        }
        None
    }

    /// Remembers the summary `text` the model wrote when the client compacted `session`'s
    /// context (a compaction side call, [`crate::side_call::SideCallKind::Compaction`]): the
    /// client's next request replaces the history with it and carries no minted id;
    /// `next_step` is the step its first action will be and `edited` whether an action
    /// before it edited a file. The nudges used stay used, placed where no history reaches
    /// ([`NudgeState::compacted`]). Texts under [`SUMMARY_MIN_CHARS`] (trimmed) are not
    /// kept, but `edited` is.
    pub fn remember_summary(
        &self,
        scope: &str,
        text: &str,
        session: &SessionId,
        nudges: &NudgeState,
        (next_step, edited): (usize, bool),
    ) {
        // Claude Code asks for `<analysis>…</analysis><summary>…</summary>` and keeps only
        // the summary's inside: that is what its next request holds.
        let text = match (text.find("<summary>"), text.rfind("</summary>")) {
            (Some(start), Some(end)) if start + "<summary>".len() <= end => {
                &text[start + "<summary>".len()..end]
            }
            _ => text,
        }
        .trim();
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        inner.summaries.push_back(Summary {
            scope: scope.to_string(),
            // A short text is kept for `edited` only: it could stand in an unrelated history.
            text: if text.chars().count() < SUMMARY_MIN_CHARS {
                String::new()
            } else {
                text.to_string()
            },
            session: session.clone(),
            nudges: nudges.compacted(),
            next_step,
            edited,
        });
        while inner.summaries.len() > SUMMARY_CAPACITY {
            inner.summaries.pop_front();
        }
    }

    /// The session whose compaction summary one of `messages` holds (within `scope`, the
    /// newest summary first): a client's first request after it compacted the context.
    /// Its `step_base` is the step the summary was written at.
    pub fn find_summary(&self, scope: &str, messages: &[Arc<ChatMessage>]) -> Option<SessionState> {
        let inner = self.inner.lock().ok()?;
        let found = inner.summaries.iter().rev().find(|s| {
            s.scope == scope
                && !s.text.is_empty()
                && messages.iter().any(|m| m.content.contains(&s.text))
        })?;
        Some(SessionState {
            session: found.session.clone(),
            nudges: found.nudges.clone(),
            recovered: true,
            step_base: found.next_step,
        })
    }

    /// Whether an action `session` compacted away edited a file (its latest compaction, or
    /// an edit this process answered); `None` when this process saw neither (another replica
    /// did, or the process restarted since).
    pub fn compacted_edit(&self, session: &SessionId) -> Option<bool> {
        let inner = self.inner.lock().ok()?;
        if inner.edited.contains(session) {
            return Some(true);
        }
        let found = inner
            .summaries
            .iter()
            .rev()
            .find(|s| &s.session == session)?;
        Some(found.edited)
    }

    /// Notes that `session` issued an edit (an accepted action the policy counts as one): a
    /// compaction request may offer no tools to tell it by ([`Self::compacted_edit`]).
    pub fn note_edit(&self, session: &SessionId) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        if inner.edited.iter().rev().take(64).any(|s| s == session) {
            return;
        }
        inner.edited.push_back(session.clone());
        while inner.edited.len() > self.capacity {
            inner.edited.pop_front();
        }
    }

    /// Whether this process noted an edit of `session` ([`Self::note_edit`]).
    pub fn has_edit(&self, session: &SessionId) -> bool {
        self.inner
            .lock()
            .is_ok_and(|inner| inner.edited.contains(session))
    }

    /// The session whose turn answered exactly this prompt without a tool call (within
    /// `scope`).
    pub fn find_prompt(&self, scope: &str, prompt: &str) -> Option<SessionState> {
        let inner = self.inner.lock().ok()?;
        inner
            .map
            .get(&key("prompt", scope, prompt))
            .map(|(session, nudges)| SessionState {
                session: session.clone(),
                nudges: nudges.clone(),
                recovered: true,
                step_base: 0,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_ids_round_trip_and_are_unique() {
        let call = CallId {
            session: SessionId::mint(),
            step: 41,
            nudges: NudgeState(vec![
                (NudgeKind::RepeatedAction, 12),
                (NudgeKind::SubmitBeforeEdit, 40),
            ]),
        };
        let a = call.mint();
        let b = call.mint();
        assert_ne!(a, b);
        assert!(a.len() <= 64);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-'));
        assert!(a.contains("_41_r12s40_"), "{a}");
        assert_eq!(CallId::parse(&a), Some(call));
        let none = CallId {
            session: SessionId::mint(),
            step: 0,
            nudges: NudgeState::default(),
        };
        assert_eq!(CallId::parse(&none.mint()), Some(none));
    }

    #[test]
    fn index_recovers_sessions_of_turns_without_ids_and_evicts_oldest() {
        let index = SessionIndex::new(2);
        let a = SessionId::mint();
        index.remember(
            "",
            "I am not sure.",
            prompt_key("", "P1"),
            &a,
            &NudgeState::default(),
        );
        let msg = |role: Role, content: &str| {
            Arc::new(ChatMessage {
                role,
                content: content.into(),
                tool_calls: Vec::new(),
                tool_call_id: None,
                name: None,
                other: Default::default(),
                read: Default::default(),
                content_digest: Default::default(),
            })
        };
        let history = vec![
            msg(Role::User, "task"),
            msg(Role::Assistant, " I am not sure.\n"),
            msg(Role::User, "Please call a tool."),
        ];
        assert_eq!(index.find("", &history).map(|s| s.session), Some(a.clone()));
        assert_eq!(
            index.find_prompt("", "P1").map(|s| s.session),
            Some(a.clone())
        );
        index.remember(
            "",
            "",
            prompt_key("", "P2"),
            &SessionId::mint(),
            &NudgeState::default(),
        );
        index.remember(
            "",
            "",
            prompt_key("", "P3"),
            &SessionId::mint(),
            &NudgeState::default(),
        );
        assert_eq!(index.find("", &history), None, "evicted");
        assert_eq!(index.find_prompt("", "P1"), None, "evicted");
        assert!(index.find_prompt("", "P3").is_some());
        // Another task or run is another scope: identical turns stay apart.
        let scope = index_scope(Some("t1"), Some(2));
        assert_eq!(index.find_prompt(&scope, "P3"), None);
    }

    #[test]
    fn foreign_ids_are_not_ours() {
        for id in [
            "toolu_01ABC",
            "0",
            "call_abc123xyz",
            "call_asap_zz_1_0_12345678",
            "",
        ] {
            assert_eq!(CallId::parse(id), None, "{id}");
        }
    }

    /// A compaction summary finds its session from any message that holds it, within its
    /// scope, with the next step and the nudges used (placed past any history); a short
    /// summary is kept for its edit flag only.
    #[test]
    fn summaries_continue_their_session() {
        let index = SessionIndex::new(16);
        let session = SessionId::mint();
        let mut nudges = NudgeState::default();
        nudges.push(NudgeKind::RepeatedAction, 3);
        let text =
            "I read calc.py and fixed add(); the tests pass now. Next: answer the user plainly.";
        index.remember_summary("", text, &session, &nudges, (7, true));
        let message = |content: String| {
            Arc::new(ChatMessage {
                role: Role::User,
                content: content.into(),
                tool_calls: Vec::new(),
                tool_call_id: None,
                name: None,
                other: Default::default(),
                read: Default::default(),
                content_digest: Default::default(),
            })
        };
        let continued = [message(format!(
            "This session is being continued.\n\n{text}\n"
        ))];
        let found = index.find_summary("", &continued).unwrap();
        assert_eq!(found.session, session);
        assert_eq!(found.step_base, 7);
        assert_eq!(
            found.nudges.0,
            vec![(NudgeKind::RepeatedAction, COMPACTED_PLACE)]
        );
        assert!(index
            .find_summary("task=t\u{1f}run=0", &continued)
            .is_none());
        assert!(index
            .find_summary("", &[message("Fix it.".into())])
            .is_none());
        assert_eq!(index.compacted_edit(&session), Some(true));
        let other = SessionId::mint();
        index.remember_summary("", "short", &other, &nudges, (2, false));
        assert!(index.find_summary("", &[message("short".into())]).is_none());
        assert_eq!(index.compacted_edit(&other), Some(false));
        assert_eq!(index.compacted_edit(&SessionId::mint()), None);
        // Claude Code keeps only the inside of the `<summary>` it asked for.
        let tagged = SessionId::mint();
        index.remember_summary(
            "",
            "<analysis>I looked around.</analysis>\n\n<summary>\n1. Primary request: fix add() in calc.py.\n</summary>",
            &tagged,
            &NudgeState::default(),
            (3, false),
        );
        let kept = [message(
            "Summary:\n1. Primary request: fix add() in calc.py.".into(),
        )];
        assert_eq!(index.find_summary("", &kept).unwrap().session, tagged);
        // An edit this process answered counts after a compaction without tools.
        assert!(!index.has_edit(&tagged));
        index.note_edit(&tagged);
        assert!(index.has_edit(&tagged));
        assert_eq!(index.compacted_edit(&tagged), Some(true));
    }
}
