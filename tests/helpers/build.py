"""Which build of the control plane the tests run against (engine/core/compiled.py; docs/compiled.md)."""
from __future__ import annotations

import pytest

from engine.core.compiled import is_compiled

# a test that replaces a method of the control plane's classes to watch it: a compiled (mypyc) class's methods
# cannot be replaced, so it runs on the pure-Python path (CI runs tests/engine/core and tests/sim/core there too)
patches_the_control_plane = pytest.mark.skipif(
    is_compiled(), reason="replaces methods of compiled classes; runs under SERVESIM_PURE_PYTHON=1")
