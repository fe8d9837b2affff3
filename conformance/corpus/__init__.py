"""The corpus export: posenc's goldens written as files any language reads."""
