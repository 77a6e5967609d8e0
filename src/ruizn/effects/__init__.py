"""Effects: the anyio layer that talks to the world and turns what happens into events."""
