//! Permissions between the model and the generated wire layout (requests, replies and the
//! snapshot use the same `WirePermissions`).

use crate::model::{GlobalPermissions, Permissions, StreamPermissions, TopicPermissions};
use iggy_generated::payloads::{
    WireGlobalPermissions, WirePermissions, WireStreamPermissions, WireTopicPermissions,
};

pub fn permissions_from_wire(wire: &WirePermissions) -> Permissions {
    let g = &wire.global;
    let global = GlobalPermissions {
        manage_servers: g.manage_servers,
        read_servers: g.read_servers,
        manage_users: g.manage_users,
        read_users: g.read_users,
        manage_streams: g.manage_streams,
        read_streams: g.read_streams,
        manage_topics: g.manage_topics,
        read_topics: g.read_topics,
        poll_messages: g.poll_messages,
        send_messages: g.send_messages,
    };
    let streams = wire
        .streams
        .iter()
        .map(|s| {
            let topics = s
                .topics
                .iter()
                .map(|t| {
                    let topic = TopicPermissions {
                        manage_topic: t.manage_topic,
                        read_topic: t.read_topic,
                        poll_messages: t.poll_messages,
                        send_messages: t.send_messages,
                    };
                    (t.topic_id, topic)
                })
                .collect();
            let stream = StreamPermissions {
                manage_stream: s.manage_stream,
                read_stream: s.read_stream,
                manage_topics: s.manage_topics,
                read_topics: s.read_topics,
                poll_messages: s.poll_messages,
                send_messages: s.send_messages,
                topics,
            };
            (s.stream_id, stream)
        })
        .collect();
    Permissions { global, streams }
}

pub fn permissions_to_wire(permissions: &Permissions) -> WirePermissions {
    let g = &permissions.global;
    let global = WireGlobalPermissions {
        manage_servers: g.manage_servers,
        read_servers: g.read_servers,
        manage_users: g.manage_users,
        read_users: g.read_users,
        manage_streams: g.manage_streams,
        read_streams: g.read_streams,
        manage_topics: g.manage_topics,
        read_topics: g.read_topics,
        poll_messages: g.poll_messages,
        send_messages: g.send_messages,
    };
    let streams = permissions
        .streams
        .iter()
        .map(|(id, s)| WireStreamPermissions {
            stream_id: *id,
            manage_stream: s.manage_stream,
            read_stream: s.read_stream,
            manage_topics: s.manage_topics,
            read_topics: s.read_topics,
            poll_messages: s.poll_messages,
            send_messages: s.send_messages,
            topics: s
                .topics
                .iter()
                .map(|(topic_id, t)| WireTopicPermissions {
                    topic_id: *topic_id,
                    manage_topic: t.manage_topic,
                    read_topic: t.read_topic,
                    poll_messages: t.poll_messages,
                    send_messages: t.send_messages,
                })
                .collect(),
        })
        .collect();
    WirePermissions { global, streams }
}
