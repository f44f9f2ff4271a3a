"""Model access through LiteLLM (tiers, routing, fallback)."""

import os

# LiteLLM fetches its price list from the internet at import unless told otherwise.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
