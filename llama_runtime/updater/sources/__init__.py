"""Where a release comes from: the GitHub API, a static mirror, release data."""
