"""Stage: archives safely extracted into a staging tree (streamed while they download)."""
