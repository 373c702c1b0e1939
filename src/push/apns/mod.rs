//! Apple Push Notification service: the provider token ([`token`]), the HTTP/2 client and
//! its settings ([`client`]), the request bodies and headers ([`payload`], [`render`]), the
//! reasons Apple gives and what its answers mean ([`reason`]).

pub mod client;
pub mod payload;
pub mod reason;
pub mod token;

pub use client::Settings;
pub use payload::render;
