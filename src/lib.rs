//! sealrelay: a push relay that is not a trusted party.
//!
//! Daemons seal each alert to a phone's key and POST the ciphertext; the relay coalesces
//! duplicates, suppresses flapping, rate-limits, and forwards the still-sealed ciphertext
//! to APNs. Data flows one way through the modules:
//!
//! - [`envelope`]: parse and validate the request body into typed values (pure);
//! - [`policy`]: the delivery decision as a pure function of state, time and config;
//! - [`store`]: where policy state lives, in process or in Redis;
//! - [`apns`]: payload, provider token, HTTP/2 client, outcome classification;
//! - [`relay`]: admission, forward, rollback: one envelope end to end;
//! - [`http`]: routes, status codes, bodies; the admin endpoints.
//!
//! [`config`] builds one validated configuration at start-up, [`telemetry`] owns logs and
//! metrics, [`app`] binds and serves, [`mock_apns`] is an HTTP/2 APNs stand-in for tests,
//! benchmarks and local demos.

pub mod apns;
pub mod app;
pub mod clients;
pub mod clock;
pub mod config;
pub mod envelope;
pub mod http;
pub mod mock_apns;
pub mod policy;
pub mod queue;
pub mod relay;
pub mod smoke;
pub mod store;
pub mod telemetry;
