//! sealrelay's test kit: the real-ish peers the relay talks to, for integration tests,
//! benchmarks and the local stack.
//!
//! - [`mock_apns`]: an APNs stand-in speaking HTTP/2 over TLS that checks provider JWTs;
//! - [`mock_fcm`]: an FCM HTTP v1 and OAuth2 token endpoint stand-in over TLS that checks
//!   the service account's RS256 assertions and the message shape;
//! - [`pki`]: a throwaway CA with a server certificate for 127.0.0.1, and APNs-style keys;
//! - [`redis`]: a real `redis-server`, or a three-master Redis Cluster, on ports it holds;
//! - [`sentinel`]: a primary, its replica and sentinels (`redis-server --sentinel`);
//! - [`process`]: a child process whose output is read line by line, stopped by its id;
//! - [`otlp`]: an OTLP/HTTP trace receiver, plain or over TLS;
//! - [`coturn`]: a real `turnserver` with the TURN REST scheme, and coturn's own client;
//! - [`mock_cloudflare`]: Cloudflare Realtime TURN's credentials API, plain or over TLS, and
//!   an unreachable port.
//!
//! Every server binds 127.0.0.1 only. Ports are never chosen by binding and releasing a
//! socket and hoping: in-process servers keep the listener they bound on port 0, child
//! processes report the port they bound, and `redis-server` (which cannot bind port 0 and
//! report it) is checked to be *our* process after it starts, and restarted on another port
//! when the one picked was taken in between.

pub mod coturn;
pub mod link;
pub mod mock_apns;
pub mod mock_cloudflare;
pub mod mock_fcm;
pub mod otlp;
pub mod pki;
pub mod process;
pub mod redis;
pub mod sentinel;
