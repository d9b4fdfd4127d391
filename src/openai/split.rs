//! A chat request body split into its parts in one pass, and the decoded messages of earlier
//! requests remembered by the digest of their JSON text (issue 23: histories are append-only,
//! so most of each request repeats the previous one).
//!
//! [`BodySplit::of`] finds the JSON text of each message and of every other top-level field
//! (serde_json's raw values: strings are skipped over, not decoded). The decoder
//! ([`super::chat::ChatCompletionRequest`]) decodes only the messages [`MessageCache`] does not
//! hold; the trace writer takes its request delta from the same split and digests instead of
//! parsing the body again. Decoding is a pure function of a message's JSON text, so a message
//! taken from the cache is the one a decode would give.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::value::RawValue;

use super::chat::ChatMessage;

/// MiB of message JSON text the cache holds by default (`serve --message-cache-mib`; two
/// generations of half each): the histories of about a hundred 300 KB rollouts. Past it the
/// oldest generation is dropped; a message not found is decoded as any new one is.
pub const MESSAGE_CACHE_MIB: usize = 32;

/// One message of a body: where its JSON text is and its XXH3-128 digest (compared within
/// one process only, never written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawMessage {
    /// Byte range of the message's JSON text in the body.
    pub range: Range<usize>,
    pub digest: u128,
}

/// Where the parts of a request body are (byte ranges into the body it was made from).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BodySplit {
    /// Each element of `messages`, in order.
    pub messages: Vec<RawMessage>,
    /// Every other top-level field, in body order: its key and the range of its value.
    pub rest: Vec<(String, Range<usize>)>,
}

/// The borrowed parts, as serde_json finds them.
struct Parts<'a> {
    messages: Option<Vec<&'a RawValue>>,
    rest: Vec<(String, &'a RawValue)>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Parts<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Fields<'a> {
            type Value = Parts<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<Parts<'a>, M::Error> {
                let mut parts = Parts {
                    messages: None,
                    rest: Vec::new(),
                };
                while let Some(key) = map.next_key::<String>()? {
                    if key == "messages" {
                        if parts.messages.is_some() {
                            return Err(serde::de::Error::duplicate_field("messages"));
                        }
                        parts.messages = Some(map.next_value()?);
                    } else {
                        parts.rest.push((key, map.next_value()?));
                    }
                }
                Ok(parts)
            }
        }
        deserializer.deserialize_map(Fields(std::marker::PhantomData))
    }
}

impl BodySplit {
    /// The split of `body`; `None` when it is not a JSON object with one `messages` array
    /// (the full decoder then words the error).
    pub fn of(body: &str) -> Option<Self> {
        let parts: Parts<'_> = serde_json::from_str(body).ok()?;
        let base = body.as_ptr() as usize;
        let range = |raw: &RawValue| {
            let start = raw.get().as_ptr() as usize - base;
            start..start + raw.get().len()
        };
        Some(Self {
            messages: parts
                .messages?
                .into_iter()
                .map(|raw| RawMessage {
                    range: range(raw),
                    digest: xxhash_rust::xxh3::xxh3_128(raw.get().as_bytes()),
                })
                .collect(),
            rest: parts
                .rest
                .into_iter()
                .map(|(key, raw)| (key, range(raw)))
                .collect(),
        })
    }

    /// The body without its messages: `{"messages":[]` and every other field as it was.
    pub fn without_messages(&self, body: &str) -> String {
        let rest: usize = self.rest.iter().map(|(k, r)| k.len() + r.len() + 8).sum();
        let mut out = Vec::with_capacity(rest + 16);
        out.extend_from_slice(b"{\"messages\":[]");
        for (key, range) in &self.rest {
            out.push(b',');
            crate::util::push_json_string(&mut out, key);
            out.push(b':');
            out.extend_from_slice(&body.as_bytes()[range.clone()]);
        }
        out.push(b'}');
        // Made of valid UTF-8 pieces.
        String::from_utf8(out).unwrap_or_default()
    }
}

/// Decoded messages by the digest of their JSON text, bounded in bytes of that text
/// (two generations: a lookup moves a message to the current one; when the current one is
/// full it becomes the old one and the old one is dropped).
#[derive(Debug)]
pub struct MessageCache {
    current: HashMap<u128, Arc<ChatMessage>>,
    current_bytes: usize,
    old: HashMap<u128, Arc<ChatMessage>>,
    /// Bytes of JSON text held at most, both generations together.
    capacity: usize,
}

impl Default for MessageCache {
    fn default() -> Self {
        Self::with_capacity(MESSAGE_CACHE_MIB << 20)
    }
}

impl MessageCache {
    /// An empty cache of at most `capacity` bytes of JSON text (0: holds nothing).
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            current: HashMap::new(),
            current_bytes: 0,
            old: HashMap::new(),
            capacity,
        }
    }

    /// Sets the process's cache to `capacity` bytes (emptied): `serve` at start-up.
    pub fn configure_global(capacity: usize) {
        if let Ok(mut cache) = Self::global().lock() {
            *cache = Self::with_capacity(capacity);
        }
    }

    /// The process's cache.
    pub fn global() -> &'static Mutex<MessageCache> {
        static CACHE: std::sync::LazyLock<Mutex<MessageCache>> =
            std::sync::LazyLock::new(Mutex::default);
        &CACHE
    }

    /// The message decoded from text of digest `digest` and `len` bytes, if remembered.
    pub fn get(&mut self, digest: u128, len: usize) -> Option<Arc<ChatMessage>> {
        if let Some(found) = self.current.get(&digest) {
            return Some(found.clone());
        }
        let found = self.old.remove(&digest)?;
        self.insert(digest, len, found.clone());
        Some(found)
    }

    /// Remembers `message`, decoded from text of digest `digest` and `len` bytes.
    pub fn insert(&mut self, digest: u128, len: usize, message: Arc<ChatMessage>) {
        let half = self.capacity / 2;
        if len > half {
            return;
        }
        if self.current_bytes + len > half {
            self.old = std::mem::take(&mut self.current);
            self.current_bytes = 0;
        }
        if self.current.insert(digest, message).is_none() {
            self.current_bytes += len;
        }
    }

    /// Messages held (both generations).
    pub fn len(&self) -> usize {
        self.current.len() + self.old.len()
    }

    /// Whether no message is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_splits_into_messages_and_the_other_fields() {
        let body = r#" {"model": "m", "messages": [ {"role":"user","content":"a\"]"} ,{"role":"assistant"}], "n":1}"#;
        let split = BodySplit::of(body).unwrap();
        let texts: Vec<&str> = split
            .messages
            .iter()
            .map(|m| &body[m.range.clone()])
            .collect();
        assert_eq!(
            texts,
            [
                r#"{"role":"user","content":"a\"]"}"#,
                r#"{"role":"assistant"}"#
            ]
        );
        let rest: Vec<(&str, &str)> = split
            .rest
            .iter()
            .map(|(k, r)| (k.as_str(), &body[r.clone()]))
            .collect();
        assert_eq!(rest, [("model", "\"m\""), ("n", "1")]);
        assert_eq!(
            split.without_messages(body),
            r#"{"messages":[],"model":"m","n":1}"#
        );
        assert_ne!(split.messages[0].digest, split.messages[1].digest);
    }

    #[test]
    fn bodies_without_one_messages_array_do_not_split() {
        for body in [
            "[]",
            r#"{"model":"m"}"#,
            r#"{"messages":{}}"#,
            r#"{"messages":[],"messages":[]}"#,
            r#"{"messages":[}"#,
        ] {
            assert_eq!(BodySplit::of(body), None, "{body}");
        }
    }

    #[test]
    fn the_cache_keeps_two_generations_within_its_bound() {
        let message: Arc<ChatMessage> =
            Arc::new(serde_json::from_str(r#"{"role":"user","content":"x"}"#).unwrap());
        let mut cache = MessageCache::default();
        let half = (MESSAGE_CACHE_MIB << 20) / 2;
        cache.insert(1, half - 10, message.clone());
        cache.insert(2, 20, message.clone());
        // 1 moved to the old generation; a lookup brings it back (and retires 2's generation).
        assert_eq!(cache.len(), 2);
        assert!(cache.get(1, half - 10).is_some());
        assert!(cache.get(2, 20).is_some());
        cache.insert(3, half, message.clone());
        cache.insert(4, half, message);
        assert!(cache.get(1, half - 10).is_none());
        assert!(cache.len() <= 2);
        let mut none = MessageCache::with_capacity(0);
        none.insert(
            5,
            1,
            Arc::new(serde_json::from_str(r#"{"role":"user"}"#).unwrap()),
        );
        assert!(none.is_empty());
    }
}
