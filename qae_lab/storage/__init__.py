"""Run folders on disk, below everything that writes one: atomic writes, the lock and the marker, complete checkpoints and the one resume plan."""
