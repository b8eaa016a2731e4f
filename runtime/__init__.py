"""The llama.cpp runtime on this machine: layout, marker, lock, binary, process.

``runtime`` never imports ``updater``.
"""
