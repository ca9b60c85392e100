"""The optional C part of vfl (issue 25): ``vfl.secure._fastloops``, two inner loops on GMP.

Everything else is in pyproject.toml. ``optional=True``: without a C compiler or GMP's headers (``gmp.h``,
``libgmp``) the build prints a warning and the install still succeeds; vfl then runs the same loops in Python
with bit-identical results (``vfl --version`` says which one is active; ``VFL_PURE_PYTHON=1`` forces Python).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("vfl.secure._fastloops", sources=["vfl/secure/_fastloops.c"],
                             depends=["vfl/secure/_ifma52.h"],   # AVX-512 IFMA buckets (issue 34), #included
                             libraries=["gmp"], extra_compile_args=["-O2"], optional=True)])
