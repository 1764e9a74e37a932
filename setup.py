"""The package's build beyond pyproject.toml: the sandbox's browser, compiled.

`[verbs] open` needs `lnk_wrap/browser/lnk-open`, a static C program (its source says
why C): built here, in the package's build, so that a wheel carries it and a machine
that installs the wheel needs no compiler. The wheel is then one for this platform
(`py3-none-linux_<machine>`), not a pure one. Where the build has no C compiler with a
static C library, the package is built without it and says so: the open verb then
refuses to start, naming what is missing (lnk_wrap.launch); every other verb works.
The sandbox's init in C (lnk_wrap/sandbox_init) is built the same way; without it the
launcher runs the Python init, which does the same, slower.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

BROWSER = os.path.join("lnk_wrap", "browser")
# The names programs look for a browser by: each is a copy of lnk-open in a wheel (a
# wheel holds no links), a link in a checkout.
BROWSER_NAMES = ("xdg-open", "sensible-browser", "www-browser")


# The sandbox's init in C (its source says why); without it the launcher runs the Python one.
SANDBOX_INIT = os.path.join("lnk_wrap", "sandbox_init")


class BuildWithBrowser(build_py):
    def run(self) -> None:
        super().run()
        self.build_sandbox_init()
        target = os.path.join(self.build_lib, BROWSER)
        os.makedirs(target, exist_ok=True)
        compiler = shutil.which(os.environ.get("CC", "cc"))
        built = os.path.join(target, "lnk-open")
        if compiler is not None:
            done = subprocess.run(
                [compiler, "-O2", "-s", "-static", "-o", built,
                 os.path.join(BROWSER, "lnk-open.c")], check=False,
                capture_output=True, text=True)
            if done.returncode == 0:
                for name in BROWSER_NAMES:
                    link = os.path.join(target, name)
                    if os.path.lexists(link):
                        os.remove(link)
                    shutil.copy2(built, link)
                return
            sys.stderr.write(done.stderr)
        sys.stderr.write("lnk-sandbox build: no C compiler with a static C library "
                         "(apt-get install gcc libc6-dev): built without the sandbox's "
                         "browser; [verbs] open refuses to start until it is built\n")

    def build_sandbox_init(self) -> None:
        target = os.path.join(self.build_lib, SANDBOX_INIT)
        os.makedirs(target, exist_ok=True)
        compiler = shutil.which(os.environ.get("CC", "cc"))
        if compiler is not None:
            done = subprocess.run(
                [compiler, "-O2", "-s", "-static", "-pthread", "-o",
                 os.path.join(target, "lnk-init"), os.path.join(SANDBOX_INIT, "lnk-init.c")],
                check=False, capture_output=True, text=True)
            if done.returncode == 0:
                return
            sys.stderr.write(done.stderr)
        sys.stderr.write("lnk-sandbox build: no C compiler with a static C library: built "
                         "without the sandbox's C init; the Python one runs instead\n")


try:  # a wheel with the browser is this platform's, not a pure one
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools before 70.1: the wheel package's
    from wheel.bdist_wheel import bdist_wheel


class PlatformWheel(bdist_wheel):
    def finalize_options(self) -> None:
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(cmdclass={"build_py": BuildWithBrowser, "bdist_wheel": PlatformWheel})
