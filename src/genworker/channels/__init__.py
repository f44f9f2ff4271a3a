"""Channels: IM / email ingress and outbound transport for workers.

`base` holds the platform-neutral message and protocols, `registry` maps webhook adapter
ids to worker bindings, one module per platform verifies and normalises inbound requests.
"""
