"""The pure core: graph dicts, columns, collate, format, codec, validation, transitions, buffer.

Imports numpy, pyarrow, msgpack and gymnasium only: no Ray, no torch (``tests/test_layers.py``
checks it in a fresh interpreter).
"""
