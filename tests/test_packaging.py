"""What pip builds from this checkout: the license ships with it (the text of the Apache
License 2.0, named in the metadata as PEP 639 says, in the wheel that `pip install .`
installed)."""

from __future__ import annotations

import hashlib
import tomllib

import installed_build

REPO = installed_build.REPO
LICENSE = (REPO / "LICENSE").read_bytes()
# https://www.apache.org/licenses/LICENSE-2.0.txt, byte for byte (11358 bytes).
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_the_license_file_is_the_apache_2_0_text():
    assert len(LICENSE) == 11358
    assert hashlib.sha256(LICENSE).hexdigest() == APACHE_2_0_SHA256


def test_the_project_metadata_names_the_license_and_its_file():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"  # an SPDX expression (PEP 639)
    assert project["license-files"] == ["LICENSE"]
    assert "[Apache-2.0](LICENSE)" in (REPO / "README.md").read_text()


def test_the_installed_wheel_ships_the_license():
    dist = installed_build.distribution()
    assert dist.metadata["License-Expression"] == "Apache-2.0"
    assert dist.metadata.get_all("License-File") == ["LICENSE"]
    shipped = [f for f in dist.files if f.parts[-2:] == ("licenses", "LICENSE")]
    assert [f.read_binary() for f in shipped] == [LICENSE]

