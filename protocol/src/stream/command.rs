//! Command keys and versions of the stream protocol.
//!
//! A frame's first field is a `uint16` key: the low 15 bits name the command,
//! the high bit tells a response (1) from a request or one-way command (0). The
//! second field is the command's version. This codec speaks version 1 of every
//! command, and version 2 of publish (a filter value per message, RabbitMQ 3.13+)
//! and of deliver (the committed chunk id, RabbitMQ 3.11+); exchange command
//! versions tells a client which versions it may use.

/// The bit of a key that marks a response.
pub const RESPONSE_FLAG: u16 = 0x8000;

/// A stream protocol command, by its key (PROTOCOL.adoc, "Commands").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Command {
    /// 0x01, client: declare a publisher on a stream.
    DeclarePublisher = 0x01,
    /// 0x02, client, one-way: publish messages.
    Publish = 0x02,
    /// 0x03, server, one-way: publishing ids now confirmed.
    PublishConfirm = 0x03,
    /// 0x04, server, one-way: publishing ids that failed.
    PublishError = 0x04,
    /// 0x05, client: the last publishing id stored for a publisher reference.
    QueryPublisherSequence = 0x05,
    /// 0x06, client: delete a publisher.
    DeletePublisher = 0x06,
    /// 0x07, client: subscribe to a stream from an offset specification.
    Subscribe = 0x07,
    /// 0x08, server, one-way: a chunk for a subscription.
    Deliver = 0x08,
    /// 0x09, client, one-way: more chunks for a subscription (answered only on error).
    Credit = 0x09,
    /// 0x0a, client, one-way: store a consumer offset on the server.
    StoreOffset = 0x0a,
    /// 0x0b, client: read a stored consumer offset.
    QueryOffset = 0x0b,
    /// 0x0c, client: end a subscription.
    Unsubscribe = 0x0c,
    /// 0x0d, client: create a stream.
    CreateStream = 0x0d,
    /// 0x0e, client: delete a stream.
    DeleteStream = 0x0e,
    /// 0x0f, client: brokers, leaders and replicas of streams.
    Metadata = 0x0f,
    /// 0x10, server, one-way: a stream's topology changed (or it was deleted).
    MetadataUpdate = 0x10,
    /// 0x11, client: exchange peer properties (first frame of a connection).
    PeerProperties = 0x11,
    /// 0x12, client: ask for the SASL mechanisms.
    SaslHandshake = 0x12,
    /// 0x13, client: a SASL response.
    SaslAuthenticate = 0x13,
    /// 0x14, server, answered by the client: frame_max and heartbeat.
    Tune = 0x14,
    /// 0x15, client: open a virtual host.
    Open = 0x15,
    /// 0x16, either side: close the connection.
    Close = 0x16,
    /// 0x17, either side, one-way: heartbeat.
    Heartbeat = 0x17,
    /// 0x18, client: the partitions of a super stream a routing key goes to.
    Route = 0x18,
    /// 0x19, client: the partitions of a super stream.
    Partitions = 0x19,
    /// 0x1a, server, answered by the client: a single-active-consumer change (3.11+).
    ConsumerUpdate = 0x1a,
    /// 0x1b, client: the command versions each side speaks (3.11+).
    ExchangeCommandVersions = 0x1b,
    /// 0x1c, client: a stream's statistics (3.11+).
    StreamStats = 0x1c,
    /// 0x1d, client: create a super stream (3.13+).
    CreateSuperStream = 0x1d,
    /// 0x1e, client: delete a super stream (3.13+).
    DeleteSuperStream = 0x1e,
    /// 0x1f, client: resolve an offset specification to an offset (4.x).
    ResolveOffsetSpec = 0x1f,
}

impl Command {
    /// Every command, in key order.
    pub const ALL: [Command; 31] = [
        Command::DeclarePublisher,
        Command::Publish,
        Command::PublishConfirm,
        Command::PublishError,
        Command::QueryPublisherSequence,
        Command::DeletePublisher,
        Command::Subscribe,
        Command::Deliver,
        Command::Credit,
        Command::StoreOffset,
        Command::QueryOffset,
        Command::Unsubscribe,
        Command::CreateStream,
        Command::DeleteStream,
        Command::Metadata,
        Command::MetadataUpdate,
        Command::PeerProperties,
        Command::SaslHandshake,
        Command::SaslAuthenticate,
        Command::Tune,
        Command::Open,
        Command::Close,
        Command::Heartbeat,
        Command::Route,
        Command::Partitions,
        Command::ConsumerUpdate,
        Command::ExchangeCommandVersions,
        Command::StreamStats,
        Command::CreateSuperStream,
        Command::DeleteSuperStream,
        Command::ResolveOffsetSpec,
    ];

    /// The command's key, without the response bit.
    pub fn key(self) -> u16 {
        self as u16
    }

    /// The key of the command's response (the key with the response bit).
    pub fn response_key(self) -> u16 {
        self.key() | RESPONSE_FLAG
    }

    /// The command a key names, ignoring the response bit.
    pub fn from_key(key: u16) -> Option<Self> {
        let bare = key & !RESPONSE_FLAG;
        Self::ALL.iter().copied().find(|c| c.key() == bare)
    }

    /// The lowest and highest version of the command this codec decodes and encodes.
    pub fn versions(self) -> (u16, u16) {
        match self {
            Command::Publish | Command::Deliver => (1, 2),
            _ => (1, 1),
        }
    }

    /// Whether RabbitMQ 3.10's stream plugin knows the command (keys 0x01-0x19,
    /// all at version 1).
    pub fn in_rabbitmq_3_10(self) -> bool {
        self.key() <= Command::Partitions.key()
    }
}

/// One command's version range, as exchange command versions carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandVersion {
    /// The command's key.
    pub key: u16,
    /// The lowest version spoken.
    pub min_version: u16,
    /// The highest version spoken.
    pub max_version: u16,
}

/// The versions this codec speaks of every command, for the server's answer to
/// exchange command versions.
pub fn supported_versions() -> Vec<CommandVersion> {
    Command::ALL
        .iter()
        .map(|c| {
            let (min_version, max_version) = c.versions();
            CommandVersion {
                key: c.key(),
                min_version,
                max_version,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_specification() {
        for (i, c) in Command::ALL.iter().enumerate() {
            assert_eq!(c.key(), i as u16 + 1);
            assert_eq!(Command::from_key(c.key()), Some(*c));
            assert_eq!(Command::from_key(c.response_key()), Some(*c));
        }
        // PROTOCOL.adoc's example: subscribe request 0x0007, response 0x8007.
        assert_eq!(Command::Subscribe.response_key(), 0x8007);
        assert_eq!(Command::from_key(0), None);
        assert_eq!(Command::from_key(0x20), None);
        assert_eq!(Command::from_key(0x8063), None);
        assert!(Command::Partitions.in_rabbitmq_3_10());
        assert!(!Command::ConsumerUpdate.in_rabbitmq_3_10());
        let versions = supported_versions();
        assert_eq!(versions.len(), 31);
        assert_eq!(
            versions[1],
            CommandVersion {
                key: 2,
                min_version: 1,
                max_version: 2
            }
        );
    }
}
