"""The sweeps: each checks every model family of one engine against posenc (discovery,
observation, judging and the generated page together)."""
