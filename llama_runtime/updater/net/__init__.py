"""The one network layer: every request of the updater goes through here (origin, credentials, redirects, caps,
retries, deadlines, TLS, User-Agent)."""
