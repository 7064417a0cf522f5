"""Code shared by every layer: the stored message codec, ids, hashing, clock, errors.

Nothing here performs I/O or imports another PocketMQ package.
"""
