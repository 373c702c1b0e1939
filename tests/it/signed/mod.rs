//! Signed pushes (`/v2/pushes`): the contract, the CLI, faults and replicas.

mod cli;
mod contract;
mod faults;
mod replicas;
mod takeover;
