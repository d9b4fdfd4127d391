//! Sessions without server state (DESIGN.md "Stateless sessions").
//!
//! Chat completions are stateless: the scaffold resends the whole history each turn. The proxy
//! mints every tool-call id it returns and encodes in it what it must remember:
//! `call_asap_<session>_<step>_<flags>_<nonce>` where `session` is 12 lowercase hex digits,
//! `step` the 0-based step index, `flags` a lowercase hex bit set (nudges already used; `0`
//! until the nudge rules use it) and `nonce` 8 hex digits that make every id unique. The next
//! request's history carries the id back, so any replica can serve any request and a restart
//! loses nothing. Ids match `^[A-Za-z0-9_-]{1,64}$` (at most 48 bytes here).

use std::fmt;

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
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a minted tool-call id carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallId {
    pub session: SessionId,
    pub step: usize,
    pub flags: u32,
}

impl CallId {
    /// Mints a unique id string for this session, step and flags.
    pub fn mint(&self) -> String {
        let nonce = &uuid::Uuid::new_v4().simple().to_string()[..8];
        format!(
            "{PREFIX}{}_{}_{:x}_{nonce}",
            self.session, self.step, self.flags
        )
    }

    /// Decodes an id minted by [`CallId::mint`]; `None` for any other id.
    pub fn parse(id: &str) -> Option<Self> {
        let rest = id.strip_prefix(PREFIX)?;
        let mut parts = rest.split('_');
        let session = parts.next()?;
        let step = parts.next()?.parse().ok()?;
        let flags = u32::from_str_radix(parts.next()?, 16).ok()?;
        let nonce = parts.next()?;
        let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
        (hex(session, 12) && hex(nonce, 8) && parts.next().is_none()).then(|| Self {
            session: SessionId(session.to_string()),
            step,
            flags,
        })
    }
}

/// The session of the latest proxy-minted tool-call id in the history, if any.
pub fn recover(messages: &[ChatMessage]) -> Option<SessionId> {
    messages
        .iter()
        .rev()
        .filter(|m| m.role == Role::Assistant)
        .flat_map(|m| m.tool_calls.iter().rev())
        .find_map(|c| c.id.as_deref().and_then(CallId::parse))
        .map(|c| c.session)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_ids_round_trip_and_are_unique() {
        let call = CallId {
            session: SessionId::mint(),
            step: 41,
            flags: 0x3,
        };
        let a = call.mint();
        let b = call.mint();
        assert_ne!(a, b);
        assert!(a.len() <= 64);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-'));
        assert_eq!(CallId::parse(&a), Some(call));
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
}
