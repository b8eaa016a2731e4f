"""How a release is installed: download, extraction, verification, the transaction."""
