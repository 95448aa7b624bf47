"""A stand-in for pip's ``get-pip.py``, which ``ansible-test --venv`` runs to put pip into each virtual
environment it makes (ansible_test/_util/target/setup/requirements.py, ``bootstrap``): it downloads the
real script from ci-files.testing.ansible.com, which cannot be reached here, unless it finds one in
``~/.ansible/test/cache/get_pip_<version>.py``. This file is put there (tests/support/automation.py) when no
real one is: it installs the interpreter's own bundled pip (``ensurepip``), then runs ``pip install`` with
the arguments get-pip.py would get (``pip==24.2`` and the packages ansible-test pins) from the package
index the machine's pip is configured with.
"""

import ensurepip
import os
import subprocess
import sys

config = os.environ.get("PIP_CONFIG_FILE")
ensurepip.bootstrap(upgrade=False)
# ensurepip sets PIP_CONFIG_FILE=/dev/null in this process (so that no config disturbs its own install):
# the install below must read the machine's pip configuration (index, certificates) again
os.environ.pop("PIP_CONFIG_FILE", None)
if config is not None:
    os.environ["PIP_CONFIG_FILE"] = config
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", *args]))
