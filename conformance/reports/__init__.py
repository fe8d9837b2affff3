"""The reports of a conformance run: the text, JSON, JUnit and HTML documents, the merged
shards, the live stream and progress bar, and the peers' scoreboard."""
