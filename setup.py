"""The optional compiled search core (``src/zhiku/stores/_zcore.c``): built by ``pip install`` when a C compiler and
the Python headers are present; without them the install goes on and searches take the numpy path (same results).
Everything else about the package is in pyproject.toml."""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# no fused multiply-adds: every float operation the one Python and numpy do (identical results on both paths)
STRICT_FP = {"msvc": ["/fp:precise"], "unix": ["-ffp-contract=off", "-fno-fast-math"]}


class BuildExt(build_ext):
    def build_extensions(self) -> None:
        flags = STRICT_FP.get(self.compiler.compiler_type, STRICT_FP["unix"])
        for ext in self.extensions:
            ext.extra_compile_args = [*ext.extra_compile_args, *flags]
        super().build_extensions()


setup(
    ext_modules=[Extension("zhiku.stores._zcore", ["src/zhiku/stores/_zcore.c"], optional=True)],
    cmdclass={"build_ext": BuildExt},
)
