//! Queue keys, (vhost, queue name), looked up through borrowed names, so
//! that the per-message path finds a queue's entries without building a key
//! (two `String`s) each time.

/// (vhost, queue name)
pub(super) type QueueKey = (String, String);

/// A [`QueueKey`] seen through borrowed names.
pub(super) trait QueueKeyRef {
    fn vhost(&self) -> &str;
    fn queue(&self) -> &str;
}

impl QueueKeyRef for QueueKey {
    fn vhost(&self) -> &str {
        &self.0
    }
    fn queue(&self) -> &str {
        &self.1
    }
}

impl QueueKeyRef for (&str, &str) {
    fn vhost(&self) -> &str {
        self.0
    }
    fn queue(&self) -> &str {
        self.1
    }
}

impl<'a> std::borrow::Borrow<dyn QueueKeyRef + 'a> for QueueKey {
    fn borrow(&self) -> &(dyn QueueKeyRef + 'a) {
        self
    }
}

// Borrow requires the same hash and equality as the owned key: a tuple
// hashes its fields in order, and so does this.
impl std::hash::Hash for dyn QueueKeyRef + '_ {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.vhost().hash(state);
        self.queue().hash(state);
    }
}

impl PartialEq for dyn QueueKeyRef + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.vhost() == other.vhost() && self.queue() == other.queue()
    }
}

impl Eq for dyn QueueKeyRef + '_ {}

/// Borrowed lookup key for maps keyed by [`QueueKey`].
pub(super) fn qkey<'a>(k: &'a (&'a str, &'a str)) -> &'a (dyn QueueKeyRef + 'a) {
    k
}
