//! Mailboxes: the HTTP contract, watch and signal sockets, push through APNs and FCM, ICE.

mod contract;
mod fcm_ice_privacy;
mod ice_providers;
mod props;
mod replicas;
mod reshard;
mod sides;
mod signal;
