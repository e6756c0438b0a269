"""Settings of the caller's environment that change what fsdplint prints, cleared for every test
(and the fsdplint processes the tests start): color (NO_COLOR, FORCE_COLOR) and GitLab's project
folder (CI_PROJECT_DIR). Tests that need one set it themselves."""

import os

for name in ("NO_COLOR", "FORCE_COLOR", "CI_PROJECT_DIR"):
    os.environ.pop(name, None)
