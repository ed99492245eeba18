"""API tokens (issue 26): stored as SHA-256 digests, shown once, with an expiry, rotated and
revoked by their owner (a page and the API), revoked when the owner's password changes."""
