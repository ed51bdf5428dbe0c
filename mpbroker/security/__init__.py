"""Security: principals and KIP-371 mapping (principal.py), TLS contexts (tls.py), the
per-listener config view (listener_config.py), SASL (sasl.py: registry, server
interface, per-connection state), JAAS lines (jaas.py) and the mechanisms, registered at
import: PLAIN (plain.py), SCRAM-SHA-256 / SCRAM-SHA-512 (scram.py, credentials in
scram_credentials.py, the client side in scram_client.py). Imports nothing of workers/.
"""
from mpbroker.security import plain  # noqa: F401  (registers PLAIN)
from mpbroker.security import scram  # noqa: F401  (registers SCRAM-SHA-256 / SCRAM-SHA-512)
from mpbroker.security import scram_client  # noqa: F401  (their client side)
