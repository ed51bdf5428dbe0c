"""Security: SASL mechanisms, SCRAM credentials (layer: beside mpbroker/protocol and
mpbroker/config; imports nothing of workers/). Importing the package registers every
SASL mechanism in `sasl.MECHANISMS`."""
from mpbroker.security import scram  # noqa: F401  (registers SCRAM-SHA-256 / SCRAM-SHA-512)
