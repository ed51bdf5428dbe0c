"""Security: principals and KIP-371 mapping (principal.py), TLS contexts (tls.py), the
per-listener config view (listener_config.py), SASL (sasl.py: registry, server
interface, per-connection state), JAAS lines (jaas.py) and the mechanisms, registered at
import: PLAIN (plain.py). Imports nothing of workers/.
"""
from mpbroker.security import plain  # noqa: F401  (registers PLAIN)
