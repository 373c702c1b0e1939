//! Signed pushes with receipts (`/v2/pushes`, `SIGNED.md`): empty until their issue.
