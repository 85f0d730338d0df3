"""What both ends of a job share: the standard library's helpers for processes,
ports, paths, logs and a task's environment, each module on its own and free
of any launcher or backend (docs/architecture.md, "Layers")."""
