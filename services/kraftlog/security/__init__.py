"""Security: listener protocols and SSL settings (:mod:`.config`), principals and node
identities (:mod:`.principal`), TLS credentials and authentication for gRPC (:mod:`.tls`).
SCRAM and the authorizer (ACLs in the metadata log) are to come."""
