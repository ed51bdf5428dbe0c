"""The Kafka wire protocol: message definitions, codecs and framing, without I/O.

    from mpbroker.protocol import api_keys, codec, framing, errors

See docs/INTERFACES.md ("Message dicts") for the contract.
"""
