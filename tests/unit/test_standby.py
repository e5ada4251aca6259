"""The dev launcher's warm spare (services/standby.py): it imports the service and waits for
the environment of the replica it replaces; without one it ends without running anything.
(The promotion itself is covered by tests/e2e/test_launcher_restart.py.)"""

from __future__ import annotations

import subprocess
import sys

from services.standby import main


def test_a_spare_given_no_environment_ends_without_running_the_service():
    r = subprocess.run([sys.executable, "-m", "services.standby", "simulator"], input="\n",
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""


def test_unknown_service_is_refused():
    assert main(["nope"]) == 2
    assert main([]) == 2
