"""Autonomy: the inbox of sensed facts, sensors, and the heartbeat that acts on them."""
