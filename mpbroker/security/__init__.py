"""Security: principals, TLS, SASL, ACLs and client quotas (issue #17). Each module
states its own contract; nothing here imports workers/."""
