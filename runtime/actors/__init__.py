"""Actor primitives: spawn, mailbox, supervision, registry, subtree cancel."""
