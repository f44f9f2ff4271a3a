"""Model access through LiteLLM (tiers, routing, fallback)."""
