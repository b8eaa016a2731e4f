"""Which release and asset fit this host: versions, asset names, host facts, the choice."""
