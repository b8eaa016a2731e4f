"""The release model (pure, no IO): a release and its assets, remote names, tags, channels, asset names.

Below both ``sources`` (which reads releases) and ``choice`` (which decides among them).
"""
