//! The render cache: rendered prompts kept so that the next turn renders only its new steps.
//!
//! A conversation's prompt is its header (everything before the first step: the task, the
//! tool documentation, the example), one block per step (reference prefix steps, then live
//! ones), then the cue. The built-in templates write each step's block from that step alone
//! (docs/architecture.md "Append-only rendering"), so the prompt of a conversation whose
//! steps extend a rendered one is that prompt without its cue, the blocks of the new steps and
//! the cue. The new blocks come from rendering the new steps alone: the same header, those
//! blocks, the cue; the header is checked byte for byte against the cached prompt's.
//!
//! An entry is found by a *family* key (format, system text, task text, example: XXH3-128)
//! and matched by the XXH3-128 digests of its steps' rendered inputs (thought, action,
//! observation) and by the tools, which decide how actions are written: family and tools
//! decide the header, the digests the blocks. Entries are bounded by the bytes of
//! their prompts (`--render-cache-mib`; a prompt grown in place counts its spare room too);
//! past the bound the least recently used go.
//!
//! The next turn of a session extends its entry's prompt in place when no one else holds it
//! (its last request sent it and let it go): the new blocks are appended to the allocation,
//! which replaces the older prompt as an extension's copy would. A prompt still held (a
//! request sending it, a retry answered from it) is never changed; its extension is a copy.
//!
//! An entry made by an extension also keeps its prompt JSON-escaped ([`JsonFrames`], as the
//! backend body sends it), and the next extension escapes only its new bytes, sharing the
//! frames of the prompt it extends (a prompt rendered whole gets none: most are not continued
//! in this process, and their frames would be made for nothing). The escaped frames count in
//! the bound; past it they are dropped first (least recently used first), and entries only
//! when the prompts alone pass it, so a cache too small for both keeps the prompts a cache
//! without frames would: a prompt without frames is escaped whole when sent, as every prompt
//! was.
//!
//! Admission adapts to the rollouts in flight, as the message cache's does
//! (`openai::split::MessageCache`): rollouts come back in the order they left, so when their
//! prompts together pass the bound, least-recently-used eviction always drops the entry asked
//! for next and almost no turn finds its prompt (issue 23, twenty-second session: 70 of 1,280
//! turns extended with 256 running 100-turn rollouts at the default bound; 792 with
//! admission). Each *turnover* (entries of half the bound dropped since the last one) with at
//! least [`MIN_WINDOW`] renders since judges them: when fewer were answered (whole or extended) than one in 8 (all admitted) or than
//! half the admitted share, only the conversations whose family key is 0 modulo 2 (then 4, at
//! most [`MAX_ADMIT_ONE_IN`]) get a new entry from a whole render, and that share stays and is
//! extended every turn. An extension is kept whatever the share (its rollout holds an entry).
//! Admitting one in `n`, each time `n` times the bound of prompts has been rendered since it
//! last looked, it admits twice as many again if the admitted prompts found (each once) and
//! rendered whole since fill at most half the bound (a prompt dropped before being found
//! again is counted once). Openings of conversations never continued in this process narrow it
//! as rollouts past the bound do: past the bound, they too are dropped unanswered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use xxhash_rust::xxh3::Xxh3;

use crate::conversation::{Conversation, Step};
use crate::profile::{Action, ResolvedProfile, ToolSpec};
use crate::util::JsonFrames;

use super::Format;

/// MiB of rendered prompts the cache holds by default (`serve --render-cache-mib`).
pub const RENDER_CACHE_MIB: usize = 64;

/// Rendered prompts by conversation, bounded by their bytes.
#[derive(Debug)]
pub(super) struct RenderCache {
    inner: Mutex<Inner>,
    /// Bytes of prompt text held at most.
    capacity: usize,
}

#[derive(Debug, Default)]
struct Inner {
    families: HashMap<u128, Vec<Entry>>,
    /// What the cache knows of each entry's prompt, by the address of the prompt: its escaped
    /// form for the backend body and what the trace may take as unchanged. An address is here
    /// only while its entry holds the prompt, so it names no other text.
    held: HashMap<usize, HeldPrompt>,
    /// The distinct tool sets the entries hold (shared; those no entry holds are dropped at
    /// eviction).
    tool_sets: Vec<Arc<Vec<ToolSpec>>>,
    bytes: usize,
    /// Use counter: an entry's `used` is the count at its last use.
    clock: u64,
    /// Of `bytes`, those of escaped frames.
    escaped_bytes: usize,
    stats: RenderCacheStats,
    admission: Admission,
}

/// The render cache's admission ([`RenderCache`]'s module doc: the rule and its source).
#[derive(Debug)]
struct Admission {
    /// Whole renders get an entry when their family key is 0 modulo this (1: all).
    one_in: u64,
    /// Renders counted since the window began, and those answered (whole or extended).
    renders: u64,
    answered: u64,
    /// Prompt bytes rendered (answered or not) since the window began.
    rendered: usize,
    /// Prompt bytes of the admitted share in use since the window began: entries of admitted
    /// families found (each once: [`Entry::found_in`]) and their whole renders.
    admitted: usize,
    /// Entry bytes dropped since the last turnover.
    dropped: usize,
    /// The window's number.
    window: u32,
}

impl Default for Admission {
    fn default() -> Self {
        Self {
            one_in: 1,
            renders: 0,
            answered: 0,
            rendered: 0,
            admitted: 0,
            dropped: 0,
            window: 0,
        }
    }
}

/// The fewest whole renders given an entry past the bound: one in this many ([`RenderCache`]).
pub const MAX_ADMIT_ONE_IN: u64 = 8;

/// Renders between two turnovers below which admission is left as it is (too few to judge).
const MIN_WINDOW: u64 = 64;

impl Admission {
    fn admits(&self, family: u128) -> bool {
        family % u128::from(self.one_in) == 0
    }

    /// Starts a window: nothing counted, nothing dropped.
    fn new_window(&mut self) {
        self.renders = 0;
        self.answered = 0;
        self.dropped = 0;
        self.new_share_window();
    }

    /// Starts measuring the admitted share in use anew (the renders since the last turnover
    /// stay counted for the next one).
    fn new_share_window(&mut self) {
        self.rendered = 0;
        self.admitted = 0;
        self.window = self.window.wrapping_add(1);
    }

    /// Counts a render of `len` prompt bytes; widens once `one_in` times `capacity` bytes were
    /// rendered in the window, if the admitted share in use fills at most half of it.
    fn rendered(&mut self, len: usize, answered: bool, capacity: usize) {
        self.renders += 1;
        self.answered += u64::from(answered);
        self.rendered += len;
        let n = usize::try_from(self.one_in).unwrap_or(usize::MAX);
        if n > 1 && self.rendered > n.saturating_mul(capacity) {
            if 2 * self.admitted <= capacity {
                self.one_in /= 2;
                self.new_window();
            } else {
                self.new_share_window();
            }
        }
    }

    /// Counts `bytes` of entries dropped; each turnover (half of `capacity`) narrows when too
    /// few renders were answered since the last one.
    fn dropped(&mut self, bytes: usize, capacity: usize) {
        self.dropped += bytes;
        if 2 * self.dropped < capacity {
            return;
        }
        self.dropped = 0;
        // Too few renders to judge (prompts over a 128th of the bound): the window runs on.
        if self.renders < MIN_WINDOW {
            return;
        }
        let (renders, answered) = (self.renders, self.answered);
        self.new_window();
        let floor = match self.one_in {
            1 => 8,
            n => 2 * n,
        };
        if answered * floor < renders {
            self.one_in = (self.one_in * 2).min(MAX_ADMIT_ONE_IN);
        }
    }
}

#[derive(Debug)]
struct Entry {
    /// Digest of each step's rendered inputs, prefix steps first ([`step_digest`]).
    steps: Vec<u128>,
    /// What actions and the tool documentation are written from.
    tools: Arc<Vec<ToolSpec>>,
    generic_shell: bool,
    prompt: Arc<String>,
    /// Bytes of the escaped frames the entry holds ([`HeldPrompt::escaped`]); 0 once dropped.
    escaped_bytes: usize,
    /// The prompt's spare capacity once it has grown in place ([`EXTEND_SPARE`]), counted in
    /// the bound; 0 for a prompt as rendered (its buffer's estimate is not counted).
    spare: usize,
    used: u64,
    /// The admission window it was last found in or made in ([`Admission::admitted`]).
    found_in: u32,
}

impl Entry {
    fn bytes(&self) -> usize {
        entry_bytes(self.prompt.len(), self.steps.len()) + self.spare + self.escaped_bytes
    }
}

/// Spare bytes, beyond twice the new blocks, that a prompt extended in place is given when
/// its allocation is too small for them: the next turn, if no longer than this one, appends
/// without moving it (each move copies the whole prompt). Proportional, so that long turns do
/// not move it every time; small, since spare room is held memory (16 KiB each added about
/// 10 MiB of peak RSS with 256 running 100-turn rollouts, 2 × + 4 KiB nothing measurable).
pub const EXTEND_SPARE: usize = 4 * 1024;

/// A process-wide prompt id ([`PromptLineage::id`]): unique across renderers, since a trace
/// writer may see prompts of several (servers started in one process).
fn next_lineage_id() -> u64 {
    static LAST_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    LAST_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
}

/// Bytes an entry is counted for, less its escaped frames.
fn entry_bytes(prompt: usize, steps: usize) -> usize {
    prompt + 16 * steps + 256
}

/// What the render cache knows of a prompt it holds (found by the prompt's allocation).
#[derive(Debug, Clone)]
pub struct HeldPrompt {
    /// [`crate::util::json_escaped_len`] of the prompt: the backend body's Content-Length
    /// without a pass over it.
    pub json_len: usize,
    pub lineage: PromptLineage,
    /// The prompt JSON-escaped, its cue the frames' end; `None` once dropped for room.
    pub escaped: Option<Arc<JsonFrames>>,
}

/// What a render cache has answered since it was made (`/metrics` `asap_render_cache_*`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenderCacheStats {
    /// Renders answered whole from the cache (a retry, a prompt rendered twice in a turn).
    pub hits: u64,
    /// Renders that extended a cached prompt with the blocks of their new steps.
    pub extended: u64,
    /// Renders of the whole conversation.
    pub misses: u64,
    /// Bytes held: prompt text and escaped frames.
    pub bytes: usize,
    /// Of `bytes`, those of escaped frames.
    pub escaped_bytes: usize,
    /// The bound on `bytes` (`--render-cache-mib`).
    pub capacity: usize,
    /// Whole renders get an entry one in this many (1: all; [`RenderCache`]).
    pub admit_one_in: u64,
}

/// Where a prompt the render cache holds comes from: an id of its own (never reused within
/// the process) and, for one that extended another, that prompt's id and how many bytes
/// the two share from the start (the older less its cue). The trace takes those bytes as
/// unchanged without reading them ([`crate::trace::delta::PromptState`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptLineage {
    pub id: u64,
    /// The prompt extended and the bytes shared with it.
    pub extends: Option<(u64, usize)>,
}

/// A cached prompt a conversation starts with.
pub(super) struct Found {
    pub prompt: Arc<String>,
    /// [`crate::util::json_escaped_len`] of `prompt`.
    pub json_len: usize,
    /// `prompt` escaped, when the cache still holds its frames.
    pub escaped: Option<Arc<JsonFrames>>,
    /// Steps the prompt holds: the conversation's first `steps` steps.
    pub steps: usize,
}

/// The conversation's family key and step digests, computed once per render.
pub(super) struct Lookup {
    family: u128,
    pub steps: Vec<u128>,
}

impl Lookup {
    pub fn of(format: Format, conversation: &Conversation) -> Self {
        // One buffer for every step's inputs ([`step_digest`]).
        let mut buf = Vec::new();
        let mut h = Xxh3::with_seed(seed());
        write_str(&mut h, format.name());
        write_str(&mut h, &conversation.system);
        write_str(&mut h, &conversation.task);
        // The example is in the header too: with the tools (compared apart), the family
        // decides the header whole.
        match &conversation.example {
            None => h.update(b"0"),
            Some(example) => {
                h.update(b"1");
                write_str(&mut h, &example.task);
                h.update(&(example.steps.len() as u64).to_le_bytes());
                for step in &example.steps {
                    h.update(&step_digest(step, &mut buf).to_le_bytes());
                }
            }
        }
        Self {
            family: h.digest128(),
            steps: conversation
                .prefix
                .iter()
                .chain(&conversation.steps)
                .map(|step| step_digest(step, &mut buf))
                .collect(),
        }
    }
}

impl RenderCache {
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            capacity,
        }
    }

    /// The cached prompt with the most steps that the conversation's steps start with,
    /// written with the same tools.
    pub fn find(&self, lookup: &Lookup, tools: &ResolvedProfile) -> Option<Found> {
        let mut inner = self.inner.lock().ok()?;
        inner.clock += 1;
        let clock = inner.clock;
        let Inner {
            families,
            held,
            admission,
            ..
        } = &mut *inner;
        let best = families
            .get_mut(&lookup.family)?
            .iter_mut()
            .filter(|e| {
                lookup.steps.starts_with(&e.steps)
                    && e.generic_shell == tools.generic_shell
                    && *e.tools == tools.tools
            })
            .max_by_key(|e| e.steps.len())?;
        best.used = clock;
        if best.found_in != admission.window && admission.admits(lookup.family) {
            best.found_in = admission.window;
            admission.admitted += best.prompt.len();
        }
        let held = held.get(&address(&best.prompt))?;
        Some(Found {
            prompt: best.prompt.clone(),
            json_len: held.json_len,
            escaped: held.escaped.clone(),
            steps: best.steps.len(),
        })
    }

    /// Counts a render of a `prompt_len`-byte prompt: answered whole, extended, or rendered
    /// whole (and judges admission: [`RenderCache`]).
    pub fn count(&self, outcome: Outcome, prompt_len: usize) {
        if let Ok(mut inner) = self.inner.lock() {
            match outcome {
                Outcome::Hit => inner.stats.hits += 1,
                Outcome::Extended => inner.stats.extended += 1,
                Outcome::Miss => inner.stats.misses += 1,
            }
            let answered = !matches!(outcome, Outcome::Miss);
            inner
                .admission
                .rendered(prompt_len, answered, self.capacity);
        }
    }

    /// What the cache knows of `prompt` if it is a cached prompt (the same allocation).
    pub fn held(&self, prompt: &Arc<String>) -> Option<HeldPrompt> {
        let inner = self.inner.lock().ok()?;
        inner.held.get(&address(prompt)).cloned()
    }

    /// Whether [`RenderCache::insert`] keeps a prompt of `prompt_len` bytes and `steps` steps
    /// for `lookup`'s conversation, so that a caller escapes only what is kept: not over a
    /// quarter of the bound, and, rendered whole (`extends` false), only in the admitted share
    /// ([`RenderCache`]).
    pub fn admits(&self, lookup: &Lookup, prompt_len: usize, steps: usize, extends: bool) -> bool {
        entry_bytes(prompt_len, steps) <= self.capacity / 4
            && (extends
                || self
                    .inner
                    .lock()
                    .is_ok_and(|inner| inner.admission.admits(lookup.family)))
    }

    /// Whether frames for a prompt of `prompt_len` bytes and `steps` steps would stay: the
    /// prompts held, this one and its frames (an escape takes about 9/8 of a text) fit in the
    /// three quarters of the bound that eviction leaves. Otherwise eviction would drop them
    /// with the others, and the prompt would be escaped twice: into frames, then when sent.
    pub fn frames_fit(&self, prompt_len: usize, steps: usize) -> bool {
        let Ok(inner) = self.inner.lock() else {
            return false;
        };
        let prompts = inner.bytes - inner.escaped_bytes;
        prompts + entry_bytes(prompt_len, steps) + prompt_len / 8 * 9 <= self.capacity / 4 * 3
    }

    /// Remembers `prompt` (its escaped length `json_len`, and its escaped frames if given)
    /// for `lookup`'s conversation, if [`RenderCache::admits`] it. The entry it extends
    /// (`parent`, the prompt of the same conversation's earlier steps, with the bytes the two
    /// share from the start) is replaced: the next turn extends the newer one.
    pub fn insert(
        &self,
        lookup: Lookup,
        tools: &ResolvedProfile,
        prompt: Arc<String>,
        json_len: usize,
        escaped: Option<JsonFrames>,
        parent: Option<(&Arc<String>, usize)>,
    ) {
        debug_assert!(escaped.as_ref().is_none_or(|e| e.len() == json_len));
        if !self.admits(&lookup, prompt.len(), lookup.steps.len(), parent.is_some()) {
            return;
        }
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        inner.clock += 1;
        // A whole render is counted in the admitted share now; an extension takes the window
        // its older prompt was counted in (below).
        let window = inner.admission.window;
        if parent.is_none() {
            inner.admission.admitted += prompt.len();
        }
        let used = inner.clock;
        // One copy of each tool set, whatever the family (the tools are not counted in the
        // bound: a scaffold version has one set, a run a handful).
        let tool_set = match inner.tool_sets.iter().find(|t| ***t == tools.tools) {
            Some(set) => set.clone(),
            None => {
                if inner.tool_sets.len() >= 64 {
                    inner.tool_sets.retain(|set| Arc::strong_count(set) > 1);
                }
                let set = Arc::new(tools.tools.clone());
                inner.tool_sets.push(set.clone());
                set
            }
        };
        let mut entry = Entry {
            steps: lookup.steps,
            tools: tool_set,
            generic_shell: tools.generic_shell,
            prompt,
            escaped_bytes: escaped.as_ref().map_or(0, JsonFrames::len),
            spare: 0,
            used,
            found_in: window,
        };
        let added = entry.bytes();
        let added_escaped = entry.escaped_bytes;
        let lineage = PromptLineage {
            id: next_lineage_id(),
            extends: parent.and_then(|(p, shared)| {
                let of = inner.held.get(&address(p))?.lineage;
                Some((of.id, shared))
            }),
        };
        let family = inner.families.entry(lookup.family).or_default();
        let mut gone = Vec::new();
        if let Some(i) =
            parent.and_then(|(p, _)| family.iter().position(|e| Arc::ptr_eq(&e.prompt, p)))
        {
            let older = family.swap_remove(i);
            entry.found_in = older.found_in;
            gone.push(older);
        }
        if let Some(i) = family.iter().position(|e| e.steps == entry.steps) {
            gone.push(family.swap_remove(i));
        }
        let kept = address(&entry.prompt);
        family.push(entry);
        for entry in &gone {
            inner.held.remove(&address(&entry.prompt));
        }
        inner.held.insert(
            kept,
            HeldPrompt {
                json_len,
                lineage,
                escaped: escaped.map(Arc::new),
            },
        );
        inner.bytes = inner.bytes + added - gone.iter().map(Entry::bytes).sum::<usize>();
        inner.escaped_bytes = inner.escaped_bytes + added_escaped
            - gone.iter().map(|e| e.escaped_bytes).sum::<usize>();
        if inner.bytes > self.capacity {
            inner.evict(self.capacity);
        }
        inner.stats.bytes = inner.bytes;
        inner.stats.escaped_bytes = inner.escaped_bytes;
    }

    /// Extends the cached prompt `older` in place with `blocks` (the new steps' blocks and
    /// the cue, which replaces `older`'s last `cue_len` bytes) when this cache's entry and the
    /// caller hold its only references: the entry becomes `lookup`'s conversation, with
    /// `json_len` and `escaped` describing the new prompt, as [`RenderCache::insert`] with
    /// `older` as the parent would make it, without copying the older prompt (a next turn's
    /// largest copy: 5 % of its CPU at 100 turns, issue 23). `Err` gives the arguments back
    /// when another holds `older` (a request still sending it, a retry), when no entry holds
    /// it, or when the cache is poisoned: then the caller copies and inserts. When the
    /// allocation must move ([`EXTEND_SPARE`] makes that one turn in two or fewer), the copy is
    /// made under the cache's lock.
    #[allow(clippy::type_complexity)]
    pub fn extend_in_place(
        &self,
        lookup: Lookup,
        older: Arc<String>,
        blocks: &str,
        cue_len: usize,
        json_len: usize,
        escaped: Option<JsonFrames>,
    ) -> Result<Arc<String>, (Lookup, Arc<String>, Option<JsonFrames>)> {
        debug_assert!(escaped.as_ref().is_none_or(|e| e.len() == json_len));
        let Ok(mut guard) = self.inner.lock() else {
            return Err((lookup, older, escaped));
        };
        let inner = &mut *guard;
        let position =
            |family: &[Entry]| family.iter().position(|e| Arc::ptr_eq(&e.prompt, &older));
        // Only the entry and the caller hold it: no one else can take another reference while
        // the lock is held (a reference is only given out under it, by `find`).
        let unique = inner
            .families
            .get(&lookup.family)
            .and_then(|family| position(family))
            .is_some_and(|_| Arc::strong_count(&older) == 2);
        if !unique || older.len() < cue_len {
            return Err((lookup, older, escaped));
        }
        inner.clock += 1;
        let used = inner.clock;
        let Inner {
            families,
            held,
            bytes,
            escaped_bytes,
            ..
        } = inner;
        let Some(family) = families.get_mut(&lookup.family) else {
            return Err((lookup, older, escaped));
        };
        let Some(mut i) = position(family) else {
            return Err((lookup, older, escaped));
        };
        // Another entry of the conversation's length is replaced, as `insert` replaces it.
        if let Some(j) = family
            .iter()
            .position(|e| e.steps == lookup.steps && !Arc::ptr_eq(&e.prompt, &older))
        {
            let last = family.len() - 1;
            let gone = family.swap_remove(j);
            held.remove(&address(&gone.prompt));
            *bytes -= gone.bytes();
            *escaped_bytes -= gone.escaped_bytes;
            if i == last {
                i = j;
            }
        }
        drop(older);
        let entry = &mut family[i];
        let before = entry.bytes();
        let before_escaped = entry.escaped_bytes;
        // The count was checked under the lock and no weak reference is ever made: the
        // entry holds the only one now.
        let Some(text) = Arc::get_mut(&mut entry.prompt) else {
            return Err((lookup, entry.prompt.clone(), escaped));
        };
        let shared = text.len() - cue_len;
        text.truncate(shared);
        if text.capacity() - text.len() < blocks.len() {
            text.reserve_exact(2 * blocks.len() + EXTEND_SPARE);
        }
        text.push_str(blocks);
        entry.steps = lookup.steps;
        entry.used = used;
        entry.spare = text.capacity() - text.len();
        entry.escaped_bytes = escaped.as_ref().map_or(0, JsonFrames::len);
        let after = entry.bytes();
        let after_escaped = entry.escaped_bytes;
        let prompt = entry.prompt.clone();
        let kept = address(&prompt);
        let extends = held.get(&kept).map(|h| (h.lineage.id, shared));
        held.insert(
            kept,
            HeldPrompt {
                json_len,
                lineage: PromptLineage {
                    id: next_lineage_id(),
                    extends,
                },
                escaped: escaped.map(Arc::new),
            },
        );
        *bytes = *bytes + after - before;
        *escaped_bytes = *escaped_bytes + after_escaped - before_escaped;
        if inner.bytes > self.capacity {
            inner.evict(self.capacity);
        }
        inner.stats.bytes = inner.bytes;
        inner.stats.escaped_bytes = inner.escaped_bytes;
        Ok(prompt)
    }

    pub fn stats(&self) -> RenderCacheStats {
        self.inner
            .lock()
            .map(|inner| RenderCacheStats {
                bytes: inner.bytes,
                escaped_bytes: inner.escaped_bytes,
                capacity: self.capacity,
                admit_one_in: inner.admission.one_in,
                ..inner.stats
            })
            .unwrap_or_default()
    }
}

/// How a render was answered (for [`RenderCacheStats`]).
#[derive(Debug, Clone, Copy)]
pub(super) enum Outcome {
    Hit,
    Extended,
    Miss,
}

impl Inner {
    /// Makes room once more than `capacity` bytes are held: drops escaped frames, least
    /// recently used first, down to three quarters of it; then, if the prompts alone still
    /// pass `capacity`, the least recently used entries down to three quarters. Frames save a
    /// pass over a prompt, an entry the render of a whole history; entries go exactly when
    /// and as a cache of prompts without frames would drop them.
    fn evict(&mut self, capacity: usize) {
        let target = capacity / 4 * 3;
        let mut by_use: Vec<(u64, u128)> = self
            .families
            .iter()
            .flat_map(|(family, entries)| entries.iter().map(|e| (e.used, *family)))
            .collect();
        by_use.sort_unstable();
        for (used, family) in &by_use {
            if self.bytes <= target {
                break;
            }
            let Some(entry) = self
                .families
                .get_mut(family)
                .and_then(|entries| entries.iter_mut().find(|e| e.used == *used))
            else {
                continue;
            };
            if let Some(held) = self.held.get_mut(&address(&entry.prompt)) {
                held.escaped = None;
            }
            self.bytes -= entry.escaped_bytes;
            self.escaped_bytes -= entry.escaped_bytes;
            entry.escaped_bytes = 0;
        }
        let prompts_pass = self.bytes > capacity;
        for (used, family) in by_use {
            if !prompts_pass || self.bytes <= target {
                break;
            }
            let Some(entries) = self.families.get_mut(&family) else {
                continue;
            };
            if let Some(i) = entries.iter().position(|e| e.used == used) {
                let entry = entries.swap_remove(i);
                self.bytes -= entry.bytes();
                self.escaped_bytes -= entry.escaped_bytes;
                self.held.remove(&address(&entry.prompt));
                // A dropped prompt counted in the admitted share is counted again when its
                // rollout renders it whole.
                if entry.found_in == self.admission.window && self.admission.admits(family) {
                    self.admission.admitted =
                        self.admission.admitted.saturating_sub(entry.prompt.len());
                }
                self.admission.dropped(entry.bytes(), capacity);
            }
            if entries.is_empty() {
                self.families.remove(&family);
            }
        }
        self.tool_sets.retain(|set| Arc::strong_count(set) > 1);
    }
}

/// The digests' seed ([`crate::util::digest_seed`]): no client can be given another
/// conversation's prompt by a crafted collision.
fn seed() -> u64 {
    crate::util::digest_seed()
}

fn address(prompt: &Arc<String>) -> usize {
    Arc::as_ptr(prompt) as usize
}

/// XXH3-128 of what a step's block is written from: its thought, action and observation
/// (each with a tag and a length, so that no two steps write the same bytes). The bytes are
/// gathered in `buf` and hashed at once: a step's inputs are a dozen short pieces, and the
/// streaming hasher's set-up and per-piece cost were most of a lookup's (issue 23; the digest
/// is the one the streaming hasher gives for the same bytes).
fn step_digest(step: &Step, buf: &mut Vec<u8>) -> u128 {
    buf.clear();
    feed_step(buf, step);
    xxhash_rust::xxh3::xxh3_128_with_seed(buf, seed())
}

/// A step's inputs, as [`step_digest`] hashes them.
fn feed_step(h: &mut impl Feed, step: &Step) {
    write_str(h, &step.thought);
    match &step.action {
        None => h.feed(b"n"),
        Some(Action::Submit { message }) => {
            h.feed(b"s");
            write_opt(h, message.as_deref());
        }
        Some(Action::Call { tag, arguments }) => {
            h.feed(b"c");
            write_str(h, tag);
            h.feed(&(arguments.len() as u64).to_le_bytes());
            for (k, v) in arguments.iter() {
                write_str(h, k);
                write_value(h, v);
            }
        }
    }
    // The observation by its digest, kept with the message it was read from: the bytes of a
    // history are mostly observations, hashed once per process instead of once per turn.
    match &step.observation {
        None => h.feed(b"0"),
        Some(observation) => {
            h.feed(b"1");
            h.feed(&observation.digest().to_le_bytes());
        }
    }
}

/// Where the digests' input goes: a streaming hasher or a buffer hashed at once.
trait Feed {
    fn feed(&mut self, bytes: &[u8]);
}

impl Feed for Xxh3 {
    fn feed(&mut self, bytes: &[u8]) {
        self.update(bytes);
    }
}

impl Feed for Vec<u8> {
    fn feed(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

fn write_str(h: &mut impl Feed, s: &str) {
    h.feed(&(s.len() as u64).to_le_bytes());
    h.feed(s.as_bytes());
}

fn write_opt(h: &mut impl Feed, s: Option<&str>) {
    match s {
        None => h.feed(b"0"),
        Some(s) => {
            h.feed(b"1");
            write_str(h, s);
        }
    }
}

fn write_value(h: &mut impl Feed, v: &Value) {
    match v {
        Value::Null => h.feed(b"n"),
        Value::Bool(b) => h.feed(if *b { b"t" } else { b"f" }),
        Value::Number(n) => {
            h.feed(b"#");
            write_str(h, &n.to_string());
        }
        Value::String(s) => {
            h.feed(b"\"");
            write_str(h, s);
        }
        Value::Array(items) => {
            h.feed(b"[");
            h.feed(&(items.len() as u64).to_le_bytes());
            for item in items {
                write_value(h, item);
            }
        }
        Value::Object(map) => {
            h.feed(b"{");
            h.feed(&(map.len() as u64).to_le_bytes());
            for (k, v) in map {
                write_str(h, k);
                write_value(h, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conversation(task: &str, observation: &str) -> Conversation {
        Conversation {
            task: task.into(),
            steps: vec![Step {
                thought: "Look.".into(),
                observation: Some(observation.into()),
                ..Step::default()
            }],
            ..Conversation::default()
        }
    }

    /// Inserts `prompt` as the whole prompt of a one-step conversation of `task`, with its
    /// frames (the cue empty) or none.
    fn insert(cache: &RenderCache, task: &str, prompt: &Arc<String>, frames: bool) {
        let json_len = crate::util::json_escaped_len(prompt.as_bytes());
        let escaped = frames.then(|| JsonFrames::of(prompt.as_bytes(), b""));
        let lookup = Lookup::of(Format::Xml, &conversation(task, ""));
        let tools = ResolvedProfile::empty();
        cache.insert(lookup, &tools, prompt.clone(), json_len, escaped, None);
    }

    /// The cache's accounting is exact and within its bound, and every entry's prompt is
    /// held with its escaped length and its frames' bytes.
    fn assert_consistent(cache: &RenderCache) {
        let inner = cache.inner.lock().unwrap();
        let entries: Vec<&Entry> = inner.families.values().flatten().collect();
        assert!(inner.bytes <= cache.capacity);
        assert_eq!(
            inner.bytes,
            entries.iter().map(|e| e.bytes()).sum::<usize>()
        );
        assert_eq!(
            inner.escaped_bytes,
            entries.iter().map(|e| e.escaped_bytes).sum::<usize>()
        );
        for e in &entries {
            let held = &inner.held[&address(&e.prompt)];
            let frames = held.escaped.as_ref().map_or(0, |f| f.len());
            assert_eq!(frames, e.escaped_bytes);
            assert_eq!(
                held.json_len,
                crate::util::json_escaped_len(e.prompt.as_bytes())
            );
        }
        assert_eq!(inner.held.len(), entries.len());
        assert!(inner.families.values().all(|f| !f.is_empty()));
    }

    /// Entries stay within the bound, every one's escaped length is findable by its prompt
    /// and no other, and a prompt too large for the cache leaves nothing behind.
    #[test]
    fn the_bound_holds_and_nothing_outlives_its_entry() {
        let cache = RenderCache::with_capacity(64 * 1024);
        let mut prompts = Vec::new();
        for i in 0..200 {
            let prompt = Arc::new(format!("prompt {i} {}", "y\n".repeat(i * 53 % 3000)));
            insert(&cache, &format!("task {i}"), &prompt, true);
            prompts.push(prompt);
            assert_consistent(&cache);
        }
        let held = prompts.iter().filter(|p| cache.held(p).is_some()).count();
        assert!(held > 5 && held < 200, "{held}");
        let huge = Arc::new("z".repeat(cache.capacity));
        let before = cache.inner.lock().unwrap().families.len();
        insert(&cache, "a task too long", &huge, true);
        assert_eq!(cache.inner.lock().unwrap().families.len(), before);
        assert!(cache.held(&huge).is_none());
    }

    /// Past the bound, escaped frames go before any entry does, least recently used first:
    /// a cache too small for the frames keeps as many prompts as one without them.
    #[test]
    fn frames_are_dropped_before_prompts() {
        let cache = RenderCache::with_capacity(64 * 1024);
        let mut prompts = Vec::new();
        for i in 0..16 {
            let prompt = Arc::new(format!("{}\n", i % 10).repeat(1000));
            insert(&cache, &format!("task {i}"), &prompt, true);
            prompts.push(prompt);
        }
        assert_consistent(&cache);
        // Sixteen prompts of 2 KB fit without their frames (3 KB each) in the three quarters
        // of the bound that eviction leaves, not with them: every prompt is kept, the older
        // ones without frames.
        let held: Vec<HeldPrompt> = prompts.iter().map(|p| cache.held(p).unwrap()).collect();
        let with_frames: Vec<bool> = held.iter().map(|h| h.escaped.is_some()).collect();
        let first_kept = with_frames.iter().position(|f| *f).unwrap();
        assert!(first_kept > 0, "{with_frames:?}");
        assert!(
            with_frames[first_kept..].iter().all(|f| *f),
            "{with_frames:?}"
        );
        let stats = cache.stats();
        assert!(stats.bytes <= stats.capacity);
        assert_eq!(
            stats.escaped_bytes,
            held.iter()
                .filter_map(|h| h.escaped.as_ref())
                .map(|f| f.len())
                .sum::<usize>()
        );
        // A prompt that lost its frames still has its escaped length and its entry.
        assert_eq!(held[0].json_len, 3000);
    }

    /// Frames never cost a prompt: past the bound, a cache with frames keeps, at every step,
    /// the prompts one without frames keeps.
    #[test]
    fn frames_cost_no_prompts() {
        let run = |frames: bool| {
            let cache = RenderCache::with_capacity(1 << 20);
            let mut counts = Vec::new();
            for i in 0..400 {
                let prompt = Arc::new(format!("{:05}", i).repeat(2000));
                insert(&cache, &format!("task {i}"), &prompt, frames);
                counts.push(cache.inner.lock().unwrap().held.len());
            }
            counts
        };
        let (with, without) = (run(true), run(false));
        assert_eq!(with, without);
        // The bound was passed (10 KB prompts, 1 MiB).
        assert!(without.iter().max() > without.last());
    }

    /// A step's digest is the streaming hasher's over the same inputs (what the keys were
    /// before they were hashed at once), and steps that differ in any input differ.
    #[test]
    fn step_digests_are_the_streaming_ones_and_tell_steps_apart() {
        let args = |v: Value| -> Arc<serde_json::Map<String, Value>> {
            Arc::new(
                [
                    ("command".to_string(), v),
                    ("n".to_string(), Value::from(3)),
                ]
                .into_iter()
                .collect(),
            )
        };
        let call = |v: Value| {
            Some(Action::Call {
                tag: "bash".into(),
                arguments: args(v),
            })
        };
        let steps = [
            Step::default(),
            Step {
                thought: "Look.".into(),
                action: call(Value::from("ls -la")),
                observation: Some("a\nb".into()),
                ..Step::default()
            },
            Step {
                thought: "Look.".into(),
                action: call(serde_json::json!(["ls", {"x": null, "y": true}])),
                observation: Some("a\nb".into()),
                ..Step::default()
            },
            Step {
                thought: "Look.".into(),
                action: call(Value::from("ls -la")),
                observation: Some("a\nc".into()),
                ..Step::default()
            },
            Step {
                thought: "Done.".into(),
                action: Some(Action::Submit {
                    message: Some("ok".into()),
                }),
                ..Step::default()
            },
            Step {
                thought: "Done.".into(),
                action: Some(Action::Submit { message: None }),
                ..Step::default()
            },
        ];
        let mut buf = Vec::new();
        let digests: Vec<u128> = steps.iter().map(|s| step_digest(s, &mut buf)).collect();
        for (step, digest) in steps.iter().zip(&digests) {
            let mut h = Xxh3::with_seed(seed());
            feed_step(&mut h, step);
            assert_eq!(h.digest128(), *digest);
        }
        let mut distinct = digests.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), steps.len());
    }

    /// A next turn extends its session's cached prompt in place only when no one else holds
    /// it: a prompt still held (a request sending it, a retry) keeps its text, and its
    /// extension is a copy; a released one grows where it is, and its lineage names the
    /// prompt it was with the bytes they share.
    #[test]
    fn a_prompt_grows_in_place_only_when_no_one_else_holds_it() {
        let tools = ResolvedProfile::empty();
        let renderer = super::super::Renderer::new()
            .unwrap()
            .with_render_cache(1 << 20);
        let format = Format::Xml;
        let mut c = conversation("task", "first output");
        let step = |n: usize| Step {
            thought: format!("Step {n}.").into(),
            observation: Some(format!("output {n}\n").repeat(40).into()),
            ..Step::default()
        };
        // The opening is rendered whole and released; the second turn grows it in place.
        drop(renderer.render_shared(format, &c, &tools).unwrap());
        c.steps.push(step(1));
        let second = renderer.render_shared(format, &c, &tools).unwrap();
        let second_text = second.to_string();
        // Held by the caller: the third turn copies, and the second's text is untouched.
        c.steps.push(step(2));
        let third = renderer.render_shared(format, &c, &tools).unwrap();
        assert!(!Arc::ptr_eq(&second, &third));
        assert_eq!(*second, second_text);
        assert_eq!(*third, renderer.render(format, &c, &tools).unwrap());
        drop(second);
        // Released: the fourth turn grows the third's allocation.
        let third_address = address(&third);
        let third_lineage = renderer.prompt_held(&third).unwrap().lineage;
        let third_len = third.len();
        drop(third);
        c.steps.push(step(3));
        let fourth = renderer.render_shared(format, &c, &tools).unwrap();
        assert_eq!(address(&fourth), third_address);
        assert_eq!(*fourth, renderer.render(format, &c, &tools).unwrap());
        let held = renderer.prompt_held(&fourth).unwrap();
        assert_ne!(held.lineage.id, third_lineage.id);
        assert_eq!(
            held.lineage.extends,
            Some((third_lineage.id, third_len - format.cue().len()))
        );
        let mut whole = Vec::new();
        crate::util::push_json_escaped(&mut whole, fourth.as_bytes());
        assert_eq!(held.json_len, whole.len());
        assert_eq!(held.escaped.unwrap().frames().concat(), whole);
        let cache = renderer.cache.as_ref().unwrap();
        assert_consistent(cache);
        assert_eq!(cache.stats().extended, 3);
    }

    /// Sessions grown, rewound and retried through `render_shared` on caches small enough for
    /// both eviction passes: the prompt is the whole render's, its frames the prompt escaped,
    /// the accounting exact and within the bound.
    #[test]
    fn renders_frames_and_accounting_hold_under_eviction() {
        let tools = ResolvedProfile::empty();
        for cap in [40_000usize, 90_000, 200_000, 1 << 20] {
            let renderer = super::super::Renderer::new()
                .unwrap()
                .with_render_cache(cap);
            let mut seed = 0x1234_5678_u64 ^ cap as u64;
            let mut rnd = |n: u64| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed % n
            };
            let mut sessions: Vec<Conversation> = (0..6)
                .map(|i| conversation(&format!("task {i}"), ""))
                .collect();
            for round in 0..600 {
                let s = rnd(6) as usize;
                let c = &mut sessions[s];
                match rnd(10) {
                    0 if c.steps.len() > 1 => {
                        let n = rnd(c.steps.len() as u64) as usize + 1;
                        c.steps.truncate(n)
                    }
                    1 => {}
                    _ => {
                        let obs: String = (0..rnd(3000))
                            .map(|k| {
                                ["a", "\"", "\n", "\u{1}", "é", "<"][((k * 7 + round) % 6) as usize]
                            })
                            .collect();
                        c.steps.push(Step {
                            thought: format!("t{round}").into(),
                            observation: Some(obs.into()),
                            ..Step::default()
                        });
                    }
                }
                let format = [
                    Format::Xml,
                    Format::MarkdownXml,
                    Format::Json,
                    Format::Markdown,
                ][rnd(4) as usize];
                let prompt = renderer.render_shared(format, c, &tools).unwrap();
                assert_eq!(*prompt, renderer.render(format, c, &tools).unwrap());
                if let Some(h) = renderer.prompt_held(&prompt) {
                    let mut whole = Vec::new();
                    crate::util::push_json_escaped(&mut whole, prompt.as_bytes());
                    assert_eq!(h.json_len, whole.len());
                    if let Some(f) = h.escaped {
                        assert_eq!(f.frames().concat(), whole);
                        assert_eq!(f.len(), whole.len());
                    }
                }
                assert_consistent(renderer.cache.as_ref().unwrap());
            }
        }
    }

    /// Rollouts taking turns in order, `rounds` next turns each (one observation of
    /// `observation` bytes a turn), through `render_shared` on `renderer`: the share of the
    /// last four rounds' renders answered (extended or whole).
    fn run_rollouts(
        renderer: &super::super::Renderer,
        sessions: &mut [Conversation],
        rounds: usize,
        observation: usize,
    ) -> f64 {
        let tools = ResolvedProfile::empty();
        let mut last = (0, 0);
        for round in 0..rounds {
            if round + 4 == rounds {
                last = (0, 0);
            }
            let before = renderer.render_cache_stats();
            for (i, c) in sessions.iter_mut().enumerate() {
                c.steps.push(Step {
                    thought: format!("turn {round} of {i}").into(),
                    observation: Some(format!("{i} {round} {}", "o".repeat(observation)).into()),
                    ..Step::default()
                });
                renderer.render_shared(Format::Xml, c, &tools).unwrap();
            }
            let after = renderer.render_cache_stats();
            let answered = after.hits + after.extended - before.hits - before.extended;
            last = (last.0 + answered, last.1 + sessions.len() as u64);
        }
        last.0 as f64 / last.1 as f64
    }

    /// Past the bound, rollouts that come back in the order they left find their prompt only
    /// through admission: least-recently-used eviction alone drops each entry just before its
    /// rollout's next turn. Then, once the rollouts fit again, admission widens back to all.
    #[test]
    fn admission_keeps_a_share_past_the_bound_and_widens_once_rollouts_fit() {
        let renderer = super::super::Renderer::new()
            .unwrap()
            .with_render_cache(512 * 1024);
        // 256 rollouts growing to ~9 KB prompts (~2 MB together, four times the bound): one
        // in 8 admitted, and about that share answered (none without admission). Which tasks
        // are admitted depends on the process's digest seed; with 256 of them the share
        // admitted is within a few points of an eighth.
        let mut many: Vec<Conversation> = (0..256)
            .map(|i| conversation(&format!("task {i}"), "start"))
            .collect();
        let answered = run_rollouts(&renderer, &mut many, 36, 200);
        let stats = renderer.render_cache_stats();
        assert!(stats.admit_one_in > 1, "{stats:?}");
        assert!(answered >= 0.05, "{answered} {stats:?}");
        assert_consistent(renderer.cache.as_ref().unwrap());
        // Then 6 rollouts growing to ~37 KB prompts (under half the bound together):
        // admission widens back (after 8, 4 and 2 times the bound rendered, about 100 rounds)
        // and every turn is extended.
        let mut few: Vec<Conversation> = (0..6)
            .map(|i| conversation(&format!("other task {i}"), "start"))
            .collect();
        let answered = run_rollouts(&renderer, &mut few, 150, 200);
        let stats = renderer.render_cache_stats();
        assert_eq!(stats.admit_one_in, 1, "{stats:?}");
        assert_eq!(answered, 1.0, "{stats:?}");
        assert_consistent(renderer.cache.as_ref().unwrap());
    }

    /// Frames are made only where they would stay: not once the prompts held, the new one
    /// and its frames pass the three quarters of the bound that eviction leaves.
    #[test]
    fn frames_are_made_only_where_they_stay() {
        let cache = RenderCache::with_capacity(64 * 1024);
        assert!(cache.frames_fit(20_000, 1));
        for i in 0..7 {
            insert(
                &cache,
                &format!("task {i}"),
                &Arc::new("p".repeat(5_000)),
                false,
            );
        }
        // 37 KB of prompts held: a 2 KB prompt with its frames fits in 48 KiB, a 6 KB one not.
        assert!(cache.frames_fit(2_000, 1));
        assert!(!cache.frames_fit(6_000, 1));
        assert_consistent(&cache);
    }
}
