"""What the Slurm backend (:mod:`tfmesos.backends.slurm`) needs besides itself.

``options``: its flags; ``commands``: the ``sbatch``/``srun`` command lines
and reading ``squeue`` (pure functions); ``jobscript``: the job's batch script,
which runs in the allocation (standard library only); ``watchdog``: the small
process that cancels tfrun's jobs if tfrun dies outright (standard library
only).
"""
