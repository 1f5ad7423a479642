//! Which replica serves a client request in a cluster, decided from what a consensus group
//! publishes about its replica (status and the primary of its view): the refusal a replica
//! that must not serve gives, the roster the official SDK finds the metadata primary in, a
//! partition's route, and how a replica behind a client's metadata watermark answers. Pure
//! functions, so every decision is tested without a cluster; a standalone node is the primary
//! of every group (Normal, primary 0), so none of them ever refuses there.
//!
//! The codes follow what the SDK does with them (`iggy` edge.2, `driver.rs` `settle`):
//! NotPrimary (89) makes it look for a newer view's primary, so it may only come from a Normal
//! replica that is not its view's primary; a replica changing views or recovering answers
//! TransientNotAccepted (58), which makes it pause and ask elsewhere.

use crate::config::ClusterNode;
use crate::consensus::figures::GroupRole;
use crate::runtime::connection::Routing;
use iggy_generated::errors::ErrorCode;
use iggy_generated::payloads::{ClusterNodeRole, ClusterNodeStatus};
use iggy_vsr::{Refusal, Status};
use std::time::Duration;

/// The error a request that needs its group's primary gets on replica `me`, or `None` when
/// `me` serves it.
pub fn refusal_for(role: GroupRole, me: u8) -> Option<ErrorCode> {
    match role.status {
        // Its primary may be gone (a primary cut off from its quorum, a backup that stopped
        // hearing from it): naming it would send the client after a dead view.
        Status::Normal if !role.in_touch => Some(ErrorCode::TransientNotAccepted),
        Status::Normal if role.primary == me => None,
        Status::Normal => Some(ErrorCode::NotPrimary),
        Status::ViewChange | Status::Recovering => Some(ErrorCode::TransientNotAccepted),
    }
}

/// [`refusal_for`] for a read a client routed to this replica as its group's primary: also 58
/// while the primary has not applied the log its view started with (just elected, or after a
/// restart of every replica), since its state may be older than what clients were answered
/// (a stored offset read back as none, a poll short of acknowledged messages).
pub fn read_refusal_for(role: GroupRole, me: u8) -> Option<ErrorCode> {
    refusal_for(role, me)
        .or_else(|| (!role.applied_view_log).then_some(ErrorCode::TransientNotAccepted))
}

/// The error for a request the group refused, judged with the role the group published after
/// refusing: the group says NotPrimary while it changes views too, and 89 from a replica whose
/// view names no other primary would send the client after a view that does not exist.
pub fn refused(refusal: &Refusal, role: GroupRole, me: u8) -> ErrorCode {
    match refusal {
        Refusal::NotPrimary { .. } => not_primary(role, me),
        other => crate::consensus::group::refusal_error(other),
    }
}

/// The error for a NotPrimary the group (or a partition's write) gave: 89 only from a Normal
/// backup; a replica that believes itself primary again by now answers 58, and the client
/// retries.
pub fn not_primary(role: GroupRole, me: u8) -> ErrorCode {
    refusal_for(role, me).unwrap_or(ErrorCode::TransientNotAccepted)
}

/// One node of the roster (12) as this replica reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RosterEntry {
    pub replica_id: u8,
    pub name: String,
    /// What clients dial: the advertised address, else the roster's IP.
    pub ip: String,
    pub ports: ClientPorts,
    pub role: ClusterNodeRole,
    pub status: ClusterNodeStatus,
}

/// A node's client ports, 0 for a transport clients must not dial there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientPorts {
    pub tcp: u16,
    pub quic: u16,
    pub http: u16,
    pub websocket: u16,
}

/// Which client transports run (the configuration is identical on every node, so this node's
/// switches are every node's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Transports {
    pub tcp: bool,
    pub quic: bool,
    pub http: bool,
    pub websocket: bool,
}

/// The role a node has in the roster: Leader for the metadata primary this replica's metadata
/// group names while it is Normal, and for no node otherwise (the SDK takes the metadata
/// primary from the Leader; a replica changing views or recovering, or out of touch with its
/// primary, knows no live one).
pub fn roster_role(replica_id: u8, metadata: GroupRole) -> ClusterNodeRole {
    match metadata.status == Status::Normal && metadata.in_touch && metadata.primary == replica_id {
        true => ClusterNodeRole::Leader,
        false => ClusterNodeRole::Follower,
    }
}

/// Every roster node in replica-id order, as clients see it from a replica whose metadata
/// group stands at `metadata` and that hears from the nodes `reachable` names (itself
/// included): one with a replica link up on which something arrived within the heartbeat
/// timeout (`link_liveness`). Any other node, a stopped process whose link is still open
/// included, is Unreachable from here. The SDK reads only roles and ports.
pub fn roster(
    nodes: &[ClusterNode],
    transports: Transports,
    metadata: GroupRole,
    reachable: impl Fn(u8) -> bool,
) -> Vec<RosterEntry> {
    let port = |enabled: bool, port: Option<u16>| if enabled { port.unwrap_or(0) } else { 0 };
    let mut entries: Vec<RosterEntry> = nodes
        .iter()
        .map(|node| RosterEntry {
            replica_id: node.replica_id,
            name: node.name.clone(),
            ip: node.advertised_address.as_ref().map_or_else(
                || node.host.to_string(),
                |address| address.trim().to_string(),
            ),
            ports: ClientPorts {
                tcp: port(transports.tcp, node.ports.tcp),
                quic: port(transports.quic, node.ports.quic),
                http: port(transports.http, node.ports.http),
                websocket: port(transports.websocket, node.ports.websocket),
            },
            role: roster_role(node.replica_id, metadata),
            status: match reachable(node.replica_id) {
                true => ClusterNodeStatus::Healthy,
                false => ClusterNodeStatus::Unreachable,
            },
        })
        .collect();
    entries.sort_by_key(|entry| entry.replica_id);
    entries
}

/// A partition's view and primary for its route (105), from this replica's copy of the
/// partition's group: `view` and `role` are read apart, so a primary that is not the view's
/// (`view % replica_count`) is a publish in between, and a replica not in Normal status knows
/// no primary to send a client to; both answer 58 and the SDK asks the next replica.
pub fn route_position(
    role: GroupRole,
    view: u64,
    replica_count: u8,
) -> Result<(u32, u8), ErrorCode> {
    let view = u32::try_from(view).map_err(|_| ErrorCode::TransientNotAccepted)?;
    let primary_of_view = view % u32::from(replica_count.max(1));
    // Out of touch, the view may be dead: a backup split off with its primary from the rest
    // (two of five) would send the client back to a primary that leads nothing, and the SDK
    // would ask it again and again; 58 makes it ask the next replica.
    if role.status != Status::Normal || !role.in_touch || primary_of_view != u32::from(role.primary)
    {
        return Err(ErrorCode::TransientNotAccepted);
    }
    Ok((view, role.primary))
}

/// How long a replica waits for its metadata to reach a BindSession's watermark: one metadata
/// read budget, under the SDK's 10 s `BIND_TIMEOUT` (which allows two).
pub const BIND_WAIT: Duration = Duration::from_secs(6);

/// How long a read carrying `minimum_metadata_op` waits for this replica's metadata.
pub const READ_WAIT: Duration = Duration::from_secs(2);

/// Where a replica's applied metadata stands against an op a client saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUp {
    /// Applied at or past it: serve.
    Reached,
    /// Behind, with budget left: look again shortly.
    Wait,
    /// Behind and out of budget: 58, another replica may be further ahead.
    Behind,
}

pub fn catch_up(applied: u64, wanted: u64, waited: Duration, budget: Duration) -> CatchUp {
    match (applied >= wanted, waited < budget) {
        (true, _) => CatchUp::Reached,
        (false, true) => CatchUp::Wait,
        (false, false) => CatchUp::Behind,
    }
}

/// Where a replica whose group stands at `role` is against `wanted`, counting only a replica
/// that serves in touch with its primary (Normal and in touch): one recovering, changing
/// views or cut off may be missing commits it does not know of, so it waits and then is
/// Behind, whatever it applied.
pub fn in_touch_catch_up(
    role: GroupRole,
    applied: u64,
    wanted: u64,
    waited: Duration,
    budget: Duration,
) -> CatchUp {
    match role.reached(applied, wanted) {
        true => CatchUp::Reached,
        false if waited < budget => CatchUp::Wait,
        false => CatchUp::Behind,
    }
}

/// How a request that needs its group's primary is carried out on replica `me`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WritePath {
    /// Submitted to the group here: this replica leads it.
    Submit,
    /// Submitted to the group here, which commits it when it leads and otherwise relays it to
    /// the primary of its view (ForwardWrite), or refuses it for now (58) when it knows no
    /// primary alive.
    Relay,
    /// Refused: the client finds the primary itself.
    Refuse(ErrorCode),
}

/// The binary SDK routes its requests and learns routes from NotPrimary (89), so it keeps
/// getting it; a client that cannot route (HTTP) has its write relayed instead.
pub fn write_path(routing: Routing, role: GroupRole, me: u8) -> WritePath {
    match routing {
        Routing::ByClient => refusal_for(role, me).map_or(WritePath::Submit, WritePath::Refuse),
        Routing::ByServer => WritePath::Relay,
    }
}

/// The error a client that cannot route gets for a relayed request: never NotPrimary (89),
/// which it cannot follow; 58 instead, which it resends (HTTP 503).
pub fn relayed_error(error: ErrorCode) -> ErrorCode {
    match error {
        ErrorCode::NotPrimary => ErrorCode::TransientNotAccepted,
        error => error,
    }
}

/// The op a replica must have applied before it serves a client that cannot route a read
/// from its own copy: every write relayed through this node for such clients (`relayed`:
/// read-your-writes), and what its group's primary knew committed when asked as the read
/// arrived (`known_committed`), so no replica serves a copy older than a write acknowledged
/// before the read, through whichever node.
pub fn read_watermark(relayed: u64, known_committed: u64) -> u64 {
    relayed.max(known_committed)
}

/// Where this replica's metadata (at `role`) stands for a request of a client that cannot
/// route (HTTP), whose handlers resolve names and check permissions against this replica's
/// model: like a partition read, only in touch with its primary and applied past
/// [`read_watermark`], or a permission revoked (a stream deleted) elsewhere still holds here.
pub fn relayed_metadata_catch_up(
    role: GroupRole,
    applied: u64,
    relayed: u64,
    known_committed: u64,
    waited: Duration,
    budget: Duration,
) -> CatchUp {
    let wanted = read_watermark(relayed, known_committed);
    in_touch_catch_up(role, applied, wanted, waited, budget)
}

/// What a BindSession gets, from the replicated session table as this replica applied it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindVerdict<S> {
    Bind(S),
    /// Not judged yet: wait for the metadata to reach the client's watermark.
    Wait,
    /// 40: the session is gone (or never was), as of metadata at least as new as the client's;
    /// the SDK registers again.
    Gone,
    /// 58: still behind the watermark when the budget ran out; the SDK redials later, and
    /// must not register again (that would fragment the session).
    Behind,
}

/// Judges a bind: `found` is the session table's answer for the bind's identity and secret.
/// Either answer counts only at the client's watermark: a replica behind it may still hold a
/// session the client already logged out of (it would bind it), or lack one registered since.
pub fn bind_verdict<S>(found: Option<S>, catch_up: CatchUp) -> BindVerdict<S> {
    match (found, catch_up) {
        (Some(session), CatchUp::Reached) => BindVerdict::Bind(session),
        (None, CatchUp::Reached) => BindVerdict::Gone,
        (_, CatchUp::Wait) => BindVerdict::Wait,
        (_, CatchUp::Behind) => BindVerdict::Behind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NodeHost;
    use iggy_vsr::Status::{Normal, Recovering, ViewChange};

    fn role(status: Status, primary: u8) -> GroupRole {
        GroupRole {
            status,
            primary,
            in_touch: status == Normal,
            muted: false,
            applied_view_log: true,
        }
    }

    /// A primary that has not applied its view's log answers a routed read 58 (the client
    /// retries), as a backup or a replica changing views does; once it has, it serves it.
    #[test]
    fn a_routed_read_waits_for_the_primary_to_apply_its_views_log() {
        let serving = role(Normal, 0);
        assert_eq!(read_refusal_for(serving, 0), None);
        let elected = GroupRole {
            applied_view_log: false,
            ..serving
        };
        assert_eq!(refusal_for(elected, 0), None, "writes queue behind the log");
        assert_eq!(
            read_refusal_for(elected, 0),
            Some(ErrorCode::TransientNotAccepted)
        );
        assert_eq!(
            read_refusal_for(role(Normal, 1), 0),
            Some(ErrorCode::NotPrimary)
        );
        assert_eq!(
            read_refusal_for(role(ViewChange, 0), 0),
            Some(ErrorCode::TransientNotAccepted)
        );
    }

    #[test]
    fn a_bind_reaches_a_watermark_only_on_a_replica_serving_in_touch() {
        let (budget, early, late) = (
            Duration::from_secs(6),
            Duration::from_millis(10),
            Duration::from_secs(7),
        );
        let serving = role(Normal, 0);
        assert_eq!(
            in_touch_catch_up(serving, 9, 9, early, budget),
            CatchUp::Reached
        );
        assert_eq!(
            in_touch_catch_up(serving, 8, 9, early, budget),
            CatchUp::Wait
        );
        assert_eq!(
            in_touch_catch_up(serving, 8, 9, late, budget),
            CatchUp::Behind
        );
        let cut_off = GroupRole {
            in_touch: false,
            ..serving
        };
        for metadata in [role(Recovering, 0), role(ViewChange, 1), cut_off] {
            // Applied past the watermark, yet it may have missed the session's register.
            assert_eq!(
                in_touch_catch_up(metadata, 9, 2, early, budget),
                CatchUp::Wait
            );
            assert_eq!(
                in_touch_catch_up(metadata, 9, 2, late, budget),
                CatchUp::Behind
            );
            assert!(matches!(
                bind_verdict::<()>(None, in_touch_catch_up(metadata, 9, 2, late, budget)),
                BindVerdict::Behind
            ));
        }
    }

    #[test]
    fn a_client_that_routes_is_refused_and_one_that_cannot_is_relayed() {
        use Routing::{ByClient, ByServer};
        assert_eq!(write_path(ByClient, role(Normal, 1), 1), WritePath::Submit);
        assert_eq!(
            write_path(ByClient, role(Normal, 1), 2),
            WritePath::Refuse(ErrorCode::NotPrimary)
        );
        assert_eq!(
            write_path(ByClient, role(ViewChange, 1), 2),
            WritePath::Refuse(ErrorCode::TransientNotAccepted)
        );
        // Whatever the role: the group commits, forwards or refuses it for now.
        for status in [Normal, ViewChange, Recovering] {
            for me in [1, 2] {
                assert_eq!(write_path(ByServer, role(status, 1), me), WritePath::Relay);
            }
        }
        // A relayed client never sees 89; other errors keep their code.
        assert_eq!(
            relayed_error(ErrorCode::NotPrimary),
            ErrorCode::TransientNotAccepted
        );
        assert_eq!(
            relayed_error(ErrorCode::TransientNotCommitted),
            ErrorCode::TransientNotCommitted
        );
        assert_eq!(
            relayed_error(ErrorCode::Unauthorized),
            ErrorCode::Unauthorized
        );
    }

    #[test]
    fn a_relayed_client_is_judged_only_against_metadata_in_touch_and_applied_past_its_commit() {
        let (budget, early, late) = (READ_WAIT, Duration::from_millis(10), READ_WAIT);
        let backup = role(Normal, 0);
        // Applied every write relayed through this node (op 7) but not op 9, which it knew
        // committed: a permission revoked at op 8 would still be granted here.
        assert_eq!(
            relayed_metadata_catch_up(backup, 7, 7, 9, early, budget),
            CatchUp::Wait
        );
        assert_eq!(
            relayed_metadata_catch_up(backup, 7, 7, 9, late, budget),
            CatchUp::Behind
        );
        assert_eq!(
            relayed_metadata_catch_up(backup, 9, 7, 9, early, budget),
            CatchUp::Reached
        );
        // Cut off, changing views or recovering: its model may miss any number of commits.
        let cut_off = GroupRole {
            in_touch: false,
            ..backup
        };
        for metadata in [cut_off, role(ViewChange, 0), role(Recovering, 0)] {
            assert_eq!(
                relayed_metadata_catch_up(metadata, 20, 7, 9, early, budget),
                CatchUp::Wait
            );
            assert_eq!(
                relayed_metadata_catch_up(metadata, 20, 7, 9, late, budget),
                CatchUp::Behind
            );
        }
    }

    #[test]
    fn a_replica_serves_a_relayed_client_only_in_touch_and_past_its_watermark() {
        let (budget, early, late) = (READ_WAIT, Duration::from_millis(10), READ_WAIT);
        // Writes relayed up to op 7, and op 9 known committed when the read came: both count.
        let wanted = read_watermark(7, 9);
        assert_eq!(wanted, 9);
        assert_eq!(read_watermark(12, 9), 12);
        let backup = role(Normal, 0);
        assert_eq!(
            in_touch_catch_up(backup, 9, wanted, early, budget),
            CatchUp::Reached
        );
        assert_eq!(
            in_touch_catch_up(backup, 8, wanted, early, budget),
            CatchUp::Wait
        );
        assert_eq!(
            in_touch_catch_up(backup, 8, wanted, late, budget),
            CatchUp::Behind
        );
        // Applied far enough, yet not following a live primary: it may miss later commits.
        let cut_off = GroupRole {
            in_touch: false,
            ..backup
        };
        for group in [cut_off, role(ViewChange, 0), role(Recovering, 0)] {
            assert_eq!(
                in_touch_catch_up(group, 20, wanted, early, budget),
                CatchUp::Wait
            );
            assert_eq!(
                in_touch_catch_up(group, 20, wanted, late, budget),
                CatchUp::Behind
            );
        }
    }

    #[test]
    fn only_a_normal_backup_answers_not_primary() {
        assert_eq!(refusal_for(role(Normal, 1), 1), None);
        assert_eq!(refusal_for(role(Normal, 1), 2), Some(ErrorCode::NotPrimary));
        // Out of touch (a primary cut off from its quorum, a backup that no longer hears its
        // primary): neither serves nor sends the client to a primary that may be gone, and
        // the roster names no Leader.
        let cut_off = GroupRole {
            in_touch: false,
            ..role(Normal, 1)
        };
        for me in [1, 2] {
            assert_eq!(
                refusal_for(cut_off, me),
                Some(ErrorCode::TransientNotAccepted)
            );
        }
        assert_eq!(roster_role(1, cut_off), ClusterNodeRole::Follower);
        assert_eq!(roster_role(1, role(Normal, 1)), ClusterNodeRole::Leader);
        for status in [ViewChange, Recovering] {
            // Even the replica the view names does not serve while it changes views.
            for me in [1, 2] {
                assert_eq!(
                    refusal_for(role(status, 1), me),
                    Some(ErrorCode::TransientNotAccepted)
                );
            }
        }
        // A standalone node: the primary of view 0 is replica 0.
        assert_eq!(refusal_for(role(Normal, 0), 0), None);
    }

    #[test]
    fn a_group_refusal_is_judged_with_the_role_after_it() {
        let refusal = Refusal::NotPrimary {
            view: 4,
            primary: 1,
        };
        assert_eq!(refused(&refusal, role(Normal, 1), 2), ErrorCode::NotPrimary);
        assert_eq!(
            refused(&refusal, role(ViewChange, 2), 2),
            ErrorCode::TransientNotAccepted
        );
        // Primary again by the time the refusal is read: the client retries, here.
        assert_eq!(
            refused(&refusal, role(Normal, 2), 2),
            ErrorCode::TransientNotAccepted
        );
        // Other refusals keep the group's mapping.
        assert_eq!(
            refused(&Refusal::RequestTooOld, role(Normal, 1), 2),
            ErrorCode::RequestTooOld
        );
        assert_eq!(
            refused(&Refusal::SessionUnknown, role(Normal, 2), 2),
            ErrorCode::Unauthenticated
        );
    }

    fn node(replica_id: u8, advertised: Option<&str>) -> ClusterNode {
        let mut node = ClusterNode {
            name: format!("node-{replica_id}"),
            host: NodeHost::Ip(format!("10.0.0.{replica_id}").parse().unwrap()),
            replica_id,
            advertised_address: advertised.map(str::to_string),
            ports: Default::default(),
        };
        let id = u16::from(replica_id);
        node.ports.tcp = Some(8090 + id);
        node.ports.quic = Some(8080 + id);
        node.ports.http = Some(3000 + id);
        node.ports.tcp_replica = Some(9000 + id);
        node
    }

    #[test]
    fn the_roster_names_every_node_and_the_normal_metadata_primary_as_leader() {
        let nodes = [
            node(2, None),
            node(0, Some("iggy-0.example")),
            node(1, None),
        ];
        let transports = Transports {
            tcp: true,
            quic: false,
            http: true,
            websocket: false,
        };
        let entries = roster(&nodes, transports, role(Normal, 1), |node| node != 2);
        assert_eq!(
            entries.iter().map(|e| e.replica_id).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert_eq!(entries[0].ip, "iggy-0.example");
        assert_eq!(entries[1].ip, "10.0.0.1");
        // A roster host name is told as written (the SDK resolves it when it dials).
        let mut named = node(1, None);
        named.host = NodeHost::Name("iggy-1.iggy-headless.default.svc.cluster.local".into());
        let entries = roster(&[named], transports, role(Normal, 1), |_| true);
        assert_eq!(
            entries[0].ip,
            "iggy-1.iggy-headless.default.svc.cluster.local"
        );
        let entries = roster(&nodes, transports, role(Normal, 1), |node| node != 2);
        assert_eq!(entries[2].name, "node-2");
        // A disabled transport is 0 even where the roster has a port.
        assert_eq!(
            entries[1].ports,
            ClientPorts {
                tcp: 8091,
                quic: 0,
                http: 3001,
                websocket: 0
            }
        );
        let leaders: Vec<u8> = entries
            .iter()
            .filter(|e| e.role == ClusterNodeRole::Leader)
            .map(|e| e.replica_id)
            .collect();
        assert_eq!(leaders, [1]);
        // A node this replica has no link with is Unreachable.
        let statuses: Vec<ClusterNodeStatus> = entries.iter().map(|e| e.status).collect();
        use ClusterNodeStatus::{Healthy, Unreachable};
        assert_eq!(statuses, [Healthy, Healthy, Unreachable]);
        // Changing views or recovering: no node is Leader, not even the view's primary.
        for status in [ViewChange, Recovering] {
            let entries = roster(&nodes, transports, role(status, 1), |_| true);
            assert!(entries.iter().all(|e| e.role == ClusterNodeRole::Follower));
        }
    }

    #[test]
    fn a_route_names_the_primary_of_a_normal_view_only() {
        assert_eq!(route_position(role(Normal, 1), 4, 3), Ok((4, 1)));
        assert_eq!(route_position(role(Normal, 0), 0, 1), Ok((0, 0)));
        assert_eq!(
            route_position(role(ViewChange, 2), 5, 3),
            Err(ErrorCode::TransientNotAccepted)
        );
        assert_eq!(
            route_position(role(Recovering, 1), 4, 3),
            Err(ErrorCode::TransientNotAccepted)
        );
        // The view moved between the two reads: its primary is 2, not the role's 1.
        assert_eq!(
            route_position(role(Normal, 1), 5, 3),
            Err(ErrorCode::TransientNotAccepted)
        );
        // A backup (or a primary) that has not heard its view's quorum lately names no one.
        let out_of_touch = GroupRole {
            in_touch: false,
            ..role(Normal, 1)
        };
        assert_eq!(
            route_position(out_of_touch, 4, 3),
            Err(ErrorCode::TransientNotAccepted)
        );
    }

    #[test]
    fn a_replica_behind_a_watermark_waits_within_its_budget() {
        let budget = Duration::from_secs(6);
        let early = Duration::from_millis(10);
        assert_eq!(catch_up(7, 7, early, budget), CatchUp::Reached);
        assert_eq!(catch_up(9, 7, budget, budget), CatchUp::Reached);
        assert_eq!(catch_up(6, 7, early, budget), CatchUp::Wait);
        assert_eq!(catch_up(6, 7, budget, budget), CatchUp::Behind);
        // No budget (a standalone read): behind at once.
        assert_eq!(
            catch_up(6, 7, Duration::ZERO, Duration::ZERO),
            CatchUp::Behind
        );
    }

    #[test]
    fn a_bind_is_judged_only_once_the_replica_reached_the_watermark() {
        assert_eq!(
            bind_verdict(Some(5), CatchUp::Reached),
            BindVerdict::Bind(5)
        );
        // Found behind the watermark: the client may have logged out of it since.
        assert_eq!(bind_verdict(Some(5), CatchUp::Wait), BindVerdict::Wait);
        assert_eq!(bind_verdict(Some(5), CatchUp::Behind), BindVerdict::Behind);
        assert_eq!(
            bind_verdict::<u8>(None, CatchUp::Reached),
            BindVerdict::Gone
        );
        assert_eq!(bind_verdict::<u8>(None, CatchUp::Wait), BindVerdict::Wait);
        assert_eq!(
            bind_verdict::<u8>(None, CatchUp::Behind),
            BindVerdict::Behind
        );
    }
}
