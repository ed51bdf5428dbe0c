"""The log engine: record batches, segments, indexes, logs. No sockets, no processes.

The worker that owns a partition is the only writer of its directory.
"""
