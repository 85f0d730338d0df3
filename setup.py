"""The one build step pyproject.toml cannot declare: ``tfmesos-jax.pth``.

A ``.pth`` file does its work only at the top of site-packages (Python runs
its ``import`` lines at start-up: :mod:`tfmesos.agent.jaxhook` says why tfmesos
needs one), and setuptools installs declared files only inside packages or
under the environment's prefix. So ``build_py`` copies it there (as pytest-cov
installed its ``pytest-cov.pth`` up to its 6.x):

- a wheel (``pip install .``): into ``build_lib``, the wheel's top, which
  becomes site-packages;
- an editable install (``pip install -e .``): setuptools builds a wheel of
  links and discards ``build_lib``; what it puts in that wheel as it is, it
  takes from the ``install`` command's ``install_lib``, so the file goes there.

The file itself is ``tfmesos/tfmesos-jax.pth`` (package data, so that an
sdist carries it too).
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "tfmesos-jax.pth"


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        top = self.get_finalized_command("install").install_lib if self.editable_mode else None
        self.copy_file(str(Path("tfmesos", PTH)), str(Path(top or self.build_lib, PTH)))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib, PTH))]


setup(cmdclass={"build_py": BuildPyWithPth})
