"""An OCI registry as a release store: reference, auth, the distribution client, the build artifact."""
