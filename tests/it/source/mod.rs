//! The repository itself: the documentation agrees with the code, every documented example
//! runs, and the crate's modules keep their layering.

mod doc_examples;
mod docs;
mod layers;
