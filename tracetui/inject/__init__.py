"""Holds the sitecustomize that `tracetui sweep` puts on a training script's PYTHONPATH."""
