"""The router: dynalab's DynamoDB endpoint, a stateless HTTP front door to the storage nodes.

It speaks DynamoDB's JSON 1.0 protocol (`router.protocol`), keeps a cached copy of the catalog and a
client per storage node (`router.context`), and serves the table operations (`router.tables`), the
item operations (`router.items`) and Query and Scan (`router.queries`). Run it with
`python -m router --listen HOST:PORT --nodes node-1=HOST:PORT,...`; run as many as you like.
"""
