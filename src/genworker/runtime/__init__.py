"""The runtime's composition root and component status reporting."""
