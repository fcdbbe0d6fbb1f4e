"""Optimisation: objectives, optimisers, the loop (:mod:`.loop`), checkpoints, the grid scan."""
