//! Vhost and queue names as a decoding thread (a store's reducer, a slave)
//! meets them: the same few, event after event. A thread keeps the names it
//! decoded last and hands out clones of them, so decoding a publish allocates
//! no name; serde's own `Arc<str>` made two allocations of each (a `Box<str>`,
//! then the `Arc` it is moved into).

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use serde::Deserializer;
use serde::de::{SeqAccess, Visitor};

use crate::broker::QueueList;

/// Few: a lookup compares against each, and a thread that meets more
/// names than this in turn only allocates as before.
const KEPT: usize = 16;

thread_local! {
    /// The names, and the slot the next new one replaces.
    static RECENT: RefCell<(Vec<Arc<str>>, usize)> = const { RefCell::new((Vec::new(), 0)) };
}

/// `name` as an `Arc<str>`: a kept one's clone, else a new one, kept.
pub(super) fn intern(name: &str) -> Arc<str> {
    RECENT.with_borrow_mut(|(kept, next)| {
        if let Some(known) = kept.iter().find(|k| ***k == *name) {
            return Arc::clone(known);
        }
        let new: Arc<str> = Arc::from(name);
        if kept.len() < KEPT {
            kept.push(Arc::clone(&new));
        } else {
            kept[*next] = Arc::clone(&new);
            *next = (*next + 1) % KEPT;
        }
        new
    })
}

pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<str>, D::Error> {
    d.deserialize_str(NameVisitor)
}

pub(super) fn deserialize_list<'de, D: Deserializer<'de>>(d: D) -> Result<QueueList, D::Error> {
    d.deserialize_seq(ListVisitor)
}

struct NameVisitor;

impl<'de> Visitor<'de> for NameVisitor {
    type Value = Arc<str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a name")
    }

    fn visit_str<E>(self, v: &str) -> Result<Arc<str>, E> {
        Ok(intern(v))
    }
}

/// One name of a list, through [`intern`].
struct Name(Arc<str>);

impl<'de> serde::Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Name, D::Error> {
        deserialize(d).map(Name)
    }
}

struct ListVisitor;

impl<'de> Visitor<'de> for ListVisitor {
    type Value = QueueList;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of queue names")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<QueueList, A::Error> {
        let mut list = QueueList::new();
        while let Some(Name(name)) = seq.next_element()? {
            list.push(name);
        }
        Ok(list)
    }
}
