"""The motion library and the demo package are cheap to import; the package serves the
runner's names."""

from __future__ import annotations


def test_demo_package_is_cheap_and_serves_the_runner() -> None:
    """``import painted_skin.addon.motion`` (what training renders) and ``import
    painted_skin.demo`` load neither bpy nor the runner; the runner's
    ``run_demo`` (what ``painted-skin demo`` calls) is still ``painted_skin.demo.run_demo``."""
    import subprocess
    import sys

    code = ("import sys, painted_skin.addon.motion as m, painted_skin.demo; m.generate('walk', 4); "
            "print(sorted(n for n in ('bpy', 'painted_skin.demo.run') if n in sys.modules)); "
            "from painted_skin.demo import run_demo; from painted_skin.demo.run import run_demo "
            "as r; print(run_demo is r)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split("\n")
    assert out[:2] == ["[]", "True"]
