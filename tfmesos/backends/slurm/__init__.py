"""The Slurm backend, a package of its parts (see docs/architecture.md):

- :mod:`.backend`: :class:`SlurmBackend`, a launch round to one ``sbatch``
  job, ``squeue`` to progress and endings, ``scancel``, the watchdog;
- :mod:`.options`: :class:`SlurmOptions`, its flags.

Empty on purpose: tfrun reads every backend's options (:mod:`.options`)
before it starts anything, so this package is imported on every job; the
backend only for a Slurm job (``tests/test_fixed_cost.py``).
"""
