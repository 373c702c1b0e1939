//! Mailboxes for apps (`/v1/<app>/mailbox/...`, `MAILBOX.md`): empty until their issue.

pub mod ice;
