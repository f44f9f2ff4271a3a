"""Outbound delivery below the channels: the message values, the outbox, recipients and re-send timing.

Tools, the service desk and autonomy send through the outbox; `genworker.channels` supplies the
transport (`ChannelDelivery`) and the bindings, which recipients read through `BoundChannel`.
"""
