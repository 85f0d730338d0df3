"""A task that does nothing: what torchrun starts in bench/bringup_trivial.py."""
