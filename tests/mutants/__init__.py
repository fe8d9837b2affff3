"""Deliberately broken backends: the harness must catch every one of them."""
